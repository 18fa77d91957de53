//! `attach` under load: a failing binding backs off, runs are bounded in
//! number, and the status keeps a bounded number of bindings. On memory,
//! with tokio's clock paused, so that waits are measured, not slept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use eddy_projection::{
    AttachError, AttachOptions, BindingState, Declare, Host, Projection, RunOptions, FIRST_DEFERRAL,
};
use eddy_streams::{JsonStream, MemoryStorage, Storage};
use futures::StreamExt;
use tokio::time::Instant;

use crate::support::{workspace, Workspace};

fn facts() -> JsonStream<u64> {
    JsonStream::new("Load/Facts", "load-facts/:workspaceId").expect("route")
}

/// A runtime whose clock stands still until every task waits.
fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// A count of `facts` per workspace whose handler does what `step` says.
fn counter(
    step: impl Fn(Arc<dyn Storage>, &Workspace) -> futures::future::BoxFuture<'static, Result<(), String>>
        + Send
        + Sync
        + 'static,
    store: Arc<dyn Storage>,
) -> Projection<Workspace, u64> {
    let step = Arc::new(step);
    let declare = Declare::<Workspace>::new("load-count");
    let input = declare.input("facts", &facts());
    declare
        .fold(0u64)
        .on_async(input, async move |count, _, unit| {
            let ran = step(store.clone(), &unit.params).await;
            ran.map(|()| count + 1).map_err(Into::into)
        })
        .build()
        .expect("declare")
}

/// Issue 26: a binding whose run failed while a commit arrived ran again
/// at once, so a failing binding on a busy input ran in a hot loop,
/// writing a checkpoint record per failure. Here every run appends to its
/// own input (a commit during the run) and fails: the runs are spaced by
/// the backoff (1 s, 2 s, 4 s), and the failure is written once.
#[test]
fn a_failing_binding_on_a_busy_input_backs_off() {
    paused().block_on(async {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let runs: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let seen = runs.clone();
        let projection = counter(
            move |store, params| {
                let seen = seen.clone();
                let params = params.clone();
                Box::pin(async move {
                    seen.lock().expect("runs").push(Instant::now());
                    if seen.lock().expect("runs").len() == 1 {
                        return Ok(());
                    }
                    facts()
                        .append(store.as_ref(), &params, &[1])
                        .await
                        .map_err(|e| e.to_string())?;
                    Err("the binding fails while its input is busy".into())
                })
            },
            store.clone(),
        );
        let params = workspace("busy");
        facts()
            .create(store.as_ref(), &params)
            .await
            .expect("create");
        facts()
            .append(store.as_ref(), &params, &[1])
            .await
            .expect("append");
        let host = Host::new(store.clone());
        let bound = projection.at(params.clone()).expect("bind");
        host.run(&bound, RunOptions::default())
            .await
            .expect("first unit");
        let saves = || async {
            let loaded = host.checkpoints().load(bound.checkpoint_key()).await;
            loaded.expect("load").token.version()
        };
        let before = saves().await;
        let attached = host
            .attach(&projection, AttachOptions::default())
            .expect("attach");
        let mut errors = Box::pin(attached.errors());
        facts()
            .append(store.as_ref(), &params, &[1])
            .await
            .expect("append");
        for _ in 0..4 {
            let error = tokio::time::timeout(Duration::from_secs(3600), errors.next())
                .await
                .expect("a failure within the hour")
                .expect("errors go on");
            assert!(matches!(error, AttachError::Run { .. }), "{error}");
        }
        let runs = runs.lock().expect("runs").clone();
        let gaps: Vec<Duration> = runs[1..].windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps.len(), 3);
        for (n, gap) in gaps.iter().enumerate() {
            assert!(
                *gap >= FIRST_DEFERRAL * (1 << n),
                "run {} came {gap:?} after the last",
                n + 2
            );
        }
        assert_eq!(
            saves().await - before,
            1,
            "the same failure is written once"
        );
        drop(attached);
    });
}

/// Commits on `count` workspaces at once run at most `concurrency`
/// bindings at a time, and every one of them in the end.
#[test]
fn an_attachment_runs_at_most_its_concurrency_at_once() {
    paused().block_on(async {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (g, i, m) = (gate.clone(), inside.clone(), most.clone());
        let projection = counter(
            move |_, _| {
                let (gate, inside, most) = (g.clone(), i.clone(), m.clone());
                Box::pin(async move {
                    use std::sync::atomic::Ordering::SeqCst;
                    let now = inside.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    let permit = gate.acquire().await.map_err(|e| e.to_string())?;
                    permit.forget();
                    inside.fetch_sub(1, SeqCst);
                    Ok(())
                })
            },
            store.clone(),
        );
        let host = Host::new(store.clone());
        let options = AttachOptions::default().with_concurrency(2);
        let attached = host.attach(&projection, options).expect("attach");
        for n in 0..6 {
            let params = workspace(&format!("w{n}"));
            facts()
                .create(store.as_ref(), &params)
                .await
                .expect("create");
            facts()
                .append(store.as_ref(), &params, &[1])
                .await
                .expect("append");
        }
        // Every task waits now: two in their handlers, four for a run.
        tokio::time::sleep(Duration::from_secs(1)).await;
        use std::sync::atomic::Ordering::SeqCst;
        assert_eq!(inside.load(SeqCst), 2);
        gate.add_permits(6);
        let all_idle = attached
            .wait_for(|status| {
                status.len() == 6
                    && status
                        .values()
                        .all(|b| matches!(b.state, BindingState::Idle))
            })
            .await;
        assert!(all_idle.is_some());
        assert_eq!(most.load(SeqCst), 2);
    });
}

/// The status keeps at most its capacity, the latest first; the store
/// still reports every binding.
#[test]
fn an_attachments_status_stays_within_its_capacity() {
    paused().block_on(async {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let projection = counter(|_, _| Box::pin(async { Ok(()) }), store.clone());
        let host = Host::new(store.clone());
        let options = AttachOptions::default().with_status_capacity(10);
        let attached = host.attach(&projection, options).expect("attach");
        for n in 0..30 {
            let params = workspace(&format!("w{n:02}"));
            facts()
                .create(store.as_ref(), &params)
                .await
                .expect("create");
            facts()
                .append(store.as_ref(), &params, &[1])
                .await
                .expect("append");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = attached.status();
        assert_eq!(status.len(), 10);
        assert!(
            status.keys().all(|k| k.as_str() >= "workspaceId=w20"),
            "{:?}",
            status.keys()
        );
        let reports = eddy_projection::inspect(&store).await.expect("inspect");
        assert_eq!(reports.len(), 30);
    });
}
