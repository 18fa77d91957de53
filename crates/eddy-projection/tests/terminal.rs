//! Terminal inputs: closed, gone, missing, and unreproducible ranges.

use std::sync::{Arc, Mutex};

use eddy_projection::{Commit, Declare, Host, Projection, RunOptions, Status};
use eddy_streams::{Append, Storage};

use crate::run::{bound_key, order_totals, seed};
use crate::support::{orders, Faulty, Op, When};

type Seen = Arc<Mutex<Vec<(usize, bool, bool)>>>;

/// Closes the binding's first input stream.
async fn close_first_input<S: eddy_projection::State>(
    store: &dyn Storage,
    bound: &eddy_projection::Bound<(), S>,
) {
    store
        .append(
            bound.input_paths().first().expect("input"),
            Append::close_only(),
        )
        .await
        .expect("close");
}

/// A batch fold that records what each unit's slice looked like.
fn recorder() -> (Projection<(), f64>, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    // mapAccumBatch needs an output; give it a throwaway one.
    let sink = eddy_streams::JsonStream::<f64>::new("Test/Sink", "sink").expect("route");
    let declare = Declare::<()>::new("recorder");
    let input = declare.input("orders", &orders());
    declare.output("sink", &sink);
    let projection = declare
        .map_accum_batch(Commit::producer(), 0.0, move |sum, batch, _, _| {
            let slice = batch.slice(input);
            record
                .lock()
                .expect("seen")
                .push((slice.items.len(), slice.closed, slice.gone));
            sum + slice.items.iter().map(|o| o.amount).sum::<f64>()
        })
        .expect("declare");
    (projection, seen)
}

/// A host whose `order_totals` binding pinned a unit and failed before
/// its output append: its next run replays the pinned range.
pub(crate) async fn pin_a_failed_unit(
    store: &Arc<dyn Storage>,
) -> (Host, eddy_projection::Bound<(), ()>) {
    let faulty = Arc::new(Faulty::new(store.clone()));
    let host = Host::new(faulty.clone());
    let bound = order_totals().at(()).expect("bind");
    // The pin (append 0) lands, the output append (1) fails.
    faulty.fail_nth(Some(Op::Append), 1, When::Before);
    host.run(&bound, RunOptions::default())
        .await
        .expect_err("fails");
    (host, bound)
}

/// The replay of `bound`'s pinned unit fails with `range-unreproducible`,
/// and the pin stays.
pub(crate) async fn replay_is_unreproducible_and_the_pin_stays(
    host: &Host,
    bound: &eddy_projection::Bound<(), ()>,
) {
    let err = host
        .run(bound, RunOptions::default())
        .await
        .expect_err("replay");
    assert_eq!(err.code(), "range-unreproducible", "{err}");
    let loaded = host
        .checkpoints()
        .load(&bound_key(bound))
        .await
        .expect("load");
    assert!(
        loaded.checkpoint.and_then(|c| c.pending).is_some(),
        "the pin stays"
    );
}

mod cases {
    use super::*;

    pub async fn a_closed_input_makes_one_closed_unit(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let (projection, seen) = recorder();
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        close_first_input(store.as_ref(), &bound).await;
        let closed = host
            .run(&bound, RunOptions::default())
            .await
            .expect("closed");
        assert_eq!(
            (closed.units, closed.items, closed.status),
            (1, 0, Status::Closed)
        );
        let again = host
            .run(&bound, RunOptions::default())
            .await
            .expect("again");
        assert_eq!((again.units, again.status), (0, Status::Closed));
        assert_eq!(
            *seen.lock().expect("seen"),
            [(2, false, false), (0, true, false)]
        );
    }

    pub async fn a_gone_input_makes_a_final_unit_then_forgets(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let (projection, seen) = recorder();
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        store
            .delete(bound.input_paths().first().expect("input"))
            .await
            .expect("delete");
        let last = host
            .run(&bound, RunOptions::default())
            .await
            .expect("final");
        assert_eq!(
            (last.units, last.status, last.state),
            (1, Status::Forgotten, Some(3.0))
        );
        assert_eq!(last.offsets["orders"].position(), 3);
        assert_eq!(
            *seen.lock().expect("seen"),
            [(3, false, false), (0, false, true)]
        );
        assert_eq!(host.read(&bound).await.expect("read"), 0.0, "forgotten");
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("no history");
        assert_eq!(err.code(), "history-unavailable");
    }

    /// Issue 26: an input deleted while a fork still reads from it is
    /// soft-deleted; the binding failed on it instead of getting its final
    /// unit.
    pub async fn a_soft_deleted_input_makes_a_final_unit_then_forgets(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let (projection, seen) = recorder();
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        let input = bound.input_paths().first().expect("input").clone();
        let fork = eddy_streams::StreamPath::new("orders-fork").expect("path");
        store
            .fork(&fork, eddy_streams::Fork::of(input.clone()))
            .await
            .expect("fork");
        store.delete(&input).await.expect("soft delete");
        let soft = store.head(&input).await.expect_err("soft-deleted");
        assert_eq!(
            soft.code(),
            eddy_streams::StreamError::SoftDeleted {
                path: String::new()
            }
            .code()
        );
        let last = host
            .run(&bound, RunOptions::default())
            .await
            .expect("final");
        assert_eq!(
            (last.units, last.status, last.state),
            (1, Status::Forgotten, Some(3.0))
        );
        assert_eq!(
            *seen.lock().expect("seen"),
            [(3, false, false), (0, false, true)]
        );
    }

    pub async fn a_missing_input_without_checkpoint_is_history_unavailable(
        store: Arc<dyn Storage>,
    ) {
        let host = Host::new(store.clone());
        let bound = order_totals().at(()).expect("bind");
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("missing");
        assert_eq!(err.code(), "history-unavailable");
    }

    pub async fn a_removed_pinned_range_is_unreproducible_and_the_pin_stays(
        store: Arc<dyn Storage>,
    ) {
        seed(store.as_ref(), 0..2).await;
        let (host, bound) = pin_a_failed_unit(&store).await;
        store
            .delete(bound.input_paths().first().expect("input"))
            .await
            .expect("delete");
        replay_is_unreproducible_and_the_pin_stays(&host, &bound).await;
    }
    /// A pinned range of an input deleted and created again, with more
    /// items than the range: the replay refuses the new stream's items
    /// (before stream incarnations it replayed them as the pinned ones).
    pub async fn a_pinned_range_of_an_input_created_again_is_unreproducible(
        store: Arc<dyn Storage>,
    ) {
        seed(store.as_ref(), 0..2).await;
        let (host, bound) = pin_a_failed_unit(&store).await;
        let input = bound.input_paths().first().expect("input").clone();
        store.delete(&input).await.expect("delete");
        seed(store.as_ref(), 10..15).await;
        replay_is_unreproducible_and_the_pin_stays(&host, &bound).await;
    }

    /// An output deleted and created again under a binding does not know
    /// the binding's producer: the next unit fails with a clear error
    /// naming the output (before, a bare `producer/seq-gap` wedged it), and
    /// forgetting the binding writes its outputs again from the start.
    pub async fn an_output_created_again_is_an_invalid_output(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let host = Host::new(store.clone());
        let bound = order_totals().at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        let output = crate::support::totals().path(&()).expect("path");
        store.delete(&output).await.expect("delete");
        crate::support::totals()
            .create(store.as_ref(), &())
            .await
            .expect("create again");
        orders()
            .append(store.as_ref(), &(), &[crate::support::order(2, 2.0)])
            .await
            .expect("append");
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("the output lost the producer");
        assert_eq!(err.code(), "pin/invalid-output", "{err}");
        assert!(err.to_string().contains("totals"), "{err}");
        host.forget(&bound).await.expect("forget");
        host.run(&bound, RunOptions::default())
            .await
            .expect("a forgotten binding writes anew");
        let written = crate::support::totals()
            .read(store.as_ref(), &(), eddy_streams::ReadFrom::Beginning)
            .await
            .expect("read");
        assert_eq!(written.items.len(), 3);
    }

    /// After a pinned range became unreproducible, later runs keep failing
    /// the same way: the pin stays and the final gone unit never runs.
    pub async fn an_unreproducible_pin_blocks_the_gone_unit(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let (projection, seen) = recorder();
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = projection.at(()).expect("bind");
        // The recorder emits nothing: append 0 pins, append 1 settles.
        faulty.fail_nth(Some(Op::Append), 1, When::Before);
        host.run(&bound, RunOptions::default())
            .await
            .expect_err("settle fails");
        store
            .delete(bound.input_paths().first().expect("input"))
            .await
            .expect("delete");
        for _ in 0..2 {
            let err = host
                .run(&bound, RunOptions::default())
                .await
                .expect_err("replay");
            assert_eq!(err.code(), "range-unreproducible", "{err}");
        }
        assert_eq!(
            *seen.lock().expect("seen"),
            [(2, false, false)],
            "neither the replay nor the gone unit ran"
        );
        assert!(host
            .checkpoints()
            .load(&bound_key(&bound))
            .await
            .expect("load")
            .checkpoint
            .and_then(|c| c.pending)
            .is_some());
    }

    /// A closed input's unit reaches batch handlers, but per-item handlers
    /// get no entries.
    pub async fn a_closed_input_gives_per_item_handlers_no_entries(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let calls = Arc::new(Mutex::new(0usize));
        let calls2 = calls.clone();
        let declare = Declare::<()>::new("per-item");
        let input = declare.input("orders", &orders());
        let projection = declare
            .fold(0.0)
            .on(input, move |sum: f64, entry, _| {
                *calls2.lock().expect("calls") += 1;
                sum + entry.item.amount
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        close_first_input(store.as_ref(), &bound).await;
        let closed = host
            .run(&bound, RunOptions::default())
            .await
            .expect("closed");
        assert_eq!(
            (closed.units, closed.items, closed.status, closed.state),
            (1, 0, Status::Closed, Some(1.0))
        );
        assert_eq!(*calls.lock().expect("calls"), 2, "no entry for the close");
    }

    /// Regression (issue 11, 1.2): when saving the forget marker failed
    /// after the final gone unit, later runs reported `Closed` forever and
    /// `read` gave the final state instead of the initial one.
    pub async fn a_failed_forget_is_retried_until_it_lands(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = crate::run::total_fold().at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        store
            .delete(bound.input_paths().first().expect("input"))
            .await
            .expect("delete");
        // The final unit's save is append 0; the forget's first append fails.
        faulty.fail_nth(Some(Op::Append), 1, When::Before);
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("the forget fails");
        assert_eq!(err.code(), "storage-failure");
        assert_eq!(
            host.read(&bound).await.expect("read"),
            0.0,
            "the final unit committed: the binding reads as forgotten"
        );
        let retried = host
            .run(&bound, RunOptions::default())
            .await
            .expect("the forget is retried");
        assert_eq!(
            (retried.status, retried.units, retried.state),
            (Status::Forgotten, 0, Some(3.0))
        );
        assert_eq!(retried.offsets["orders"].position(), 3);
        assert_eq!(host.read(&bound).await.expect("read"), 0.0);
        let after = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("forgotten, and the input is gone");
        assert_eq!(after.code(), "history-unavailable");
    }
}

crate::on_backends!(
    a_closed_input_makes_one_closed_unit,
    a_gone_input_makes_a_final_unit_then_forgets,
    a_soft_deleted_input_makes_a_final_unit_then_forgets,
    a_missing_input_without_checkpoint_is_history_unavailable,
    a_removed_pinned_range_is_unreproducible_and_the_pin_stays,
    an_unreproducible_pin_blocks_the_gone_unit,
    a_pinned_range_of_an_input_created_again_is_unreproducible,
    an_output_created_again_is_an_invalid_output,
    a_closed_input_gives_per_item_handlers_no_entries,
    a_failed_forget_is_retried_until_it_lands,
);
