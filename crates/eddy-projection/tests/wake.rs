//! Wake streams and `attach`.

use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{
    wake, wake_stream, AttachError, AttachOptions, BindingState, Declare, Host, RunOptions, Status,
    Step, WakeRow, WAKE_COLLECTION,
};
use eddy_streams::{Append, JsonStream, Route, Storage};
use serde::{Deserialize, Serialize};

use crate::support::{
    read_all, total_of, wait_for_tail, workspace, Faulty, Op, Order, Total, When, Workspace,
};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct File {
    file_id: String,
}

type ByWorkspace = (
    JsonStream<Order>,
    JsonStream<Total>,
    eddy_projection::Projection<Workspace, ()>,
);

/// `facts/:workspaceId` → `totals/:workspaceId`, one total per order.
fn by_workspace() -> ByWorkspace {
    let facts = JsonStream::<Order>::new("Shop/Facts", "facts/:workspaceId").expect("route");
    let totals = JsonStream::<Total>::new("Shop/Totals", "totals/:workspaceId").expect("route");
    let declare = Declare::<Workspace>::new("by-workspace");
    let input = declare.input("facts", &facts);
    let output = declare.output("output", &totals);
    let projection = declare
        .emit(eddy_projection::Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.push(output, total_of(entry.item))
        })
        .build()
        .expect("declare");
    (facts, totals, projection)
}

/// The next error an attachment reports (at most 10 s away).
async fn next_error(
    errors: &mut (impl futures::Stream<Item = AttachError> + Unpin),
) -> AttachError {
    tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(errors))
        .await
        .expect("an error is reported")
        .expect("the stream goes on")
}

mod cases {
    use super::*;

    pub async fn wake_keeps_one_row_per_source(store: Arc<dyn Storage>) {
        let wakes = wake_stream("Files/Wake", "files-wake").expect("wake stream");
        let projection = wake::<File>(
            "files-wake",
            Route::new("files/:fileId").expect("route"),
            &wakes,
        )
        .expect("declare");
        let host = Host::new(store.clone());
        let file =
            JsonStream::<serde_json::Value>::new("Files/File", "files/:fileId").expect("route");
        let mut bounds = Vec::new();
        for id in ["a", "b"] {
            let params = File { file_id: id.into() };
            file.create(store.as_ref(), &params).await.expect("create");
            file.append(
                store.as_ref(),
                &params,
                &[serde_json::json!(1), serde_json::json!(2)],
            )
            .await
            .expect("append");
            let bound = projection.at(params).expect("bind");
            host.run(&bound, RunOptions::default()).await.expect("run");
            bounds.push(bound);
        }
        let rows = || async {
            wakes
                .materialize(store.as_ref(), &())
                .await
                .expect("materialize")
                .rows::<WakeRow>(WAKE_COLLECTION)
                .expect("rows")
        };
        let now = rows().await;
        assert_eq!(now.len(), 2);
        assert_eq!(now["files/a"].offset.position(), 2);
        assert_eq!(now["files/a"].closed, None);

        store
            .append(&bounds[0].input_paths()[0], Append::close_only())
            .await
            .expect("close");
        host.run(&bounds[0], RunOptions::default())
            .await
            .expect("closed");
        assert_eq!(rows().await["files/a"].closed, Some(true));

        store
            .delete(&bounds[1].input_paths()[0])
            .await
            .expect("delete");
        let last = host
            .run(&bounds[1], RunOptions::default())
            .await
            .expect("gone");
        assert_eq!(last.status, Status::Forgotten);
        let after = rows().await;
        assert_eq!(after.keys().collect::<Vec<_>>(), ["files/a"]);
    }

    pub async fn attach_runs_bindings_selected_by_commits(store: Arc<dyn Storage>) {
        let (facts, totals, projection) = by_workspace();
        let host = Host::new(store.clone());
        let attached = host
            .attach(&projection, AttachOptions::default())
            .expect("attach");
        for ws in ["w1", "w2"] {
            let params = workspace(ws);
            totals
                .create(store.as_ref(), &params)
                .await
                .expect("create");
            facts.create(store.as_ref(), &params).await.expect("create");
            for i in 0..3 {
                facts
                    .append(store.as_ref(), &params, &[crate::support::order(i, 1.0)])
                    .await
                    .expect("append");
            }
        }
        for ws in ["w1", "w2"] {
            let params = workspace(ws);
            wait_for_tail(store.as_ref(), &totals.path(&params).expect("path"), 3).await;
            assert_eq!(
                read_all(store.as_ref(), &totals, &params).await.len(),
                3,
                "workspace {ws}"
            );
        }
        drop(attached);
    }

    pub async fn attach_needs_inputs_that_supply_every_param(store: Arc<dyn Storage>) {
        let orders = crate::support::orders();
        let declare = Declare::<Workspace>::new("shared-input");
        let input = declare.input("orders", &orders);
        let projection = declare
            .fold(0.0)
            .on(input, |s, e, _| s + e.item.amount)
            .build()
            .expect("declare");
        let host = Host::new(store);
        let err = host
            .attach(&projection, AttachOptions::default())
            .expect_err("refused");
        assert_eq!(err.code(), "load/invalid-options");
    }

    /// Regression (issue 11, 1.5): a run cut by `limit` left the backlog
    /// until the next commit on that input.
    pub async fn a_limited_attached_run_reschedules_itself(store: Arc<dyn Storage>) {
        let (facts, totals, projection) = by_workspace();
        let host = Host::new(store.clone());
        let options = AttachOptions {
            run: RunOptions::default().with_limit(1).with_unit_size(1),
            ..AttachOptions::default()
        };
        let attached = host.attach(&projection, options).expect("attach");
        let params = workspace("w1");
        totals
            .create(store.as_ref(), &params)
            .await
            .expect("create");
        facts.create(store.as_ref(), &params).await.expect("create");
        let three: Vec<Order> = (0..3).map(|i| crate::support::order(i, 1.0)).collect();
        facts
            .append(store.as_ref(), &params, &three)
            .await
            .expect("one commit");
        wait_for_tail(store.as_ref(), &totals.path(&params).expect("path"), 3).await;
        drop(attached);
    }

    /// Regression (issue 11, 1.5): after the commit feed lagged, only
    /// bindings that had already run were run again; a binding first seen
    /// in the missed commits waited for its next commit.
    pub async fn after_a_lag_attach_scans_every_matching_input(store: Arc<dyn Storage>) {
        let (facts, totals, projection) = by_workspace();
        let held = Arc::new(Faulty::holding_commits(store.clone()));
        let host = Host::new(held.clone());
        let attached = host
            .attach(&projection, AttachOptions::default())
            .expect("attach");
        for ws in ["w1", "w2"] {
            let params = workspace(ws);
            totals
                .create(store.as_ref(), &params)
                .await
                .expect("create");
            facts.create(held.as_ref(), &params).await.expect("create");
            facts
                .append(held.as_ref(), &params, &[crate::support::order(1, 1.0)])
                .await
                .expect("append");
        }
        // Four commits into a feed of two: the dispatcher lags.
        held.release_commits();
        for ws in ["w1", "w2"] {
            let path = totals.path(&workspace(ws)).expect("path");
            wait_for_tail(store.as_ref(), &path, 1).await;
        }
        drop(attached);
    }

    /// Regression (issue 11, 1.5): a path that matched a route but did not
    /// decode was dropped silently, and failed runs were only logged. Both
    /// are reported on the error stream, and the status says which
    /// binding failed with what.
    pub async fn attach_reports_paths_that_do_not_bind_and_failed_runs(store: Arc<dyn Storage>) {
        #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
        struct Shard {
            shard: u32,
        }
        let facts = JsonStream::<Order>::new("Shop/Shards", "shards/:shard").expect("route");
        let declare = Declare::<Shard>::new("by-shard");
        let input = declare.input("facts", &facts);
        let projection = declare
            .fold(0.0)
            .on(input, |sum: f64, entry, _| {
                if entry.item.amount < 0.0 {
                    return Step::fail("negative amount");
                }
                Step::from(sum + entry.item.amount)
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let attached = host
            .attach(&projection, AttachOptions::default())
            .expect("attach");
        let errors = attached.errors();
        futures::pin_mut!(errors);
        let not_a_shard = eddy_streams::StreamPath::new("shards/north").expect("path");
        store
            .create(
                &not_a_shard,
                eddy_streams::StreamConfig::json(),
                eddy_streams::Payload::empty(),
            )
            .await
            .expect("create");
        match next_error(&mut errors).await {
            AttachError::Unroutable { path, error } => {
                assert_eq!(path, "shards/north");
                assert_eq!(error.code(), "load/invalid-options");
            }
            other => panic!("unexpected {other}"),
        }
        let params = Shard { shard: 7 };
        facts.create(store.as_ref(), &params).await.expect("create");
        facts
            .append(store.as_ref(), &params, &[crate::support::order(1, -1.0)])
            .await
            .expect("append");
        match next_error(&mut errors).await {
            AttachError::Run { binding, error } => {
                assert_eq!(binding, "shard=7");
                assert_eq!(error.code(), "handler/failed");
            }
            other => panic!("unexpected {other}"),
        }
        // A commit during the failed run starts one more, which fails too.
        let status = tokio::time::timeout(
            Duration::from_secs(10),
            attached.wait_for(|status| {
                status.get("shard=7").is_some_and(|binding| {
                    matches!(&binding.state, BindingState::Failed(e) if e.code() == "handler/failed")
                })
            }),
        )
        .await
        .expect("the status says it failed")
        .expect("attached");
        assert_eq!(status["shard=7"].params, params);
    }

    /// Each binding's status says it is idle once it caught up, with the
    /// progress of its last run; storage failures are retried.
    pub async fn attach_retries_storage_failures_and_reports_progress(store: Arc<dyn Storage>) {
        let (facts, totals, projection) = by_workspace();
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone()).with_retry(eddy_projection::Retry::exponential(
            Duration::from_millis(1),
            Duration::from_millis(5),
        ));
        let attached = host
            .attach(&projection, AttachOptions::default())
            .expect("attach");
        let params = workspace("w1");
        totals
            .create(store.as_ref(), &params)
            .await
            .expect("create");
        facts.create(store.as_ref(), &params).await.expect("create");
        faulty.fail_nth(Some(Op::Read), 0, When::Before);
        faulty.fail_nth(Some(Op::Append), 1, When::After);
        facts
            .append(faulty.as_ref(), &params, &[crate::support::order(1, 1.0)])
            .await
            .expect("append");
        let status = tokio::time::timeout(
            Duration::from_secs(10),
            attached.wait_for(|status| {
                status.get("workspaceId=w1").is_some_and(|b| {
                    matches!(b.state, BindingState::Idle)
                        && b.last
                            .as_ref()
                            .is_some_and(|p| p.offsets["facts"].position() == 1)
                })
            }),
        )
        .await
        .expect("the binding catches up")
        .expect("attached");
        assert!(status["workspaceId=w1"].last.is_some());
        let path = totals.path(&params).expect("path");
        assert_eq!(
            read_all(store.as_ref(), &totals, &params).await.len(),
            1,
            "written once at `{path}`"
        );
    }
}

/// Issue 33: after the commit feed lagged, attach's scan read every
/// stream under each input route's literal prefix (on DynamoDB a
/// `BatchGetItem` of every record) though it uses their paths alone. It
/// lists paths now: with 1 000 streams under `facts/` that no binding
/// takes, the scan and the one binding's run read the 1 001 directory
/// entries and the run's few items, not the 1 001 records as well.
#[tokio::test]
async fn after_a_lag_the_scan_reads_no_record_on_dynamodb() {
    let table: Arc<dyn eddy_dynamo::Table> = Arc::new(eddy_dynamo::EmbeddedTable::memory(
        eddy_streams_dynamodb::layout("scan"),
    ));
    let store: Arc<dyn Storage> = Arc::new(
        eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
            .expect("open"),
    );
    for n in 0..1_000 {
        let path = eddy_streams::StreamPath::new(format!("facts/archive/{n:04}")).expect("path");
        let (config, empty) = (
            eddy_streams::StreamConfig::json(),
            eddy_streams::Payload::empty(),
        );
        store.create(&path, config, empty).await.expect("create");
    }
    let (facts, totals, projection) = by_workspace();
    let held = Arc::new(Faulty::holding_commits(store.clone()));
    let host = Host::new(held.clone());
    let attached = host
        .attach(&projection, AttachOptions::default())
        .expect("attach");
    let params = workspace("w1");
    totals
        .create(store.as_ref(), &params)
        .await
        .expect("create");
    facts.create(held.as_ref(), &params).await.expect("create");
    for n in 0..2 {
        facts
            .append(held.as_ref(), &params, &[crate::support::order(n, 1.0)])
            .await
            .expect("append");
    }
    let before = table.request_stats();
    // Three commits into a feed of two: the dispatcher lags and scans.
    held.release_commits();
    let path = totals.path(&params).expect("path");
    wait_for_tail(store.as_ref(), &path, 2).await;
    let read = table.request_stats() - before;
    eprintln!("the scan and the run: {read:?}");
    assert!(
        read.items_read < 1_300,
        "read {} items, the records under facts/ too: {read:?}",
        read.items_read
    );
    drop(attached);
}

crate::on_backends!(
    wake_keeps_one_row_per_source,
    attach_runs_bindings_selected_by_commits,
    attach_needs_inputs_that_supply_every_param,
    a_limited_attached_run_reschedules_itself,
    after_a_lag_attach_scans_every_matching_input,
    attach_reports_paths_that_do_not_bind_and_failed_runs,
    attach_retries_storage_failures_and_reports_progress,
);
