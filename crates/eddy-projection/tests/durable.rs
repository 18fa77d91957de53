//! Durable attached wake-ups (`AttachOptions::durable`), on SQLite and
//! (feature `postgres`, `DATABASE_URL`) PostgreSQL: a binding marked by a
//! commit runs after its process was killed before the run; a failed
//! binding defers only its own mark; a commit after a binding read its
//! mark keeps the mark; stores that cannot keep marks are refused.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{
    AttachOptions, Attached, BindingState, Declare, Host, Projection, FIRST_DEFERRAL,
};
use eddy_streams::{JsonStream, MarkOwner, SqliteStorage, Storage};

use crate::support::{workspace, Workspace};

fn facts() -> JsonStream<u64> {
    JsonStream::new("Durable/Facts", "facts/:workspaceId").expect("stream")
}

/// What the counting handler does with an entry of a workspace.
#[derive(Clone, Copy, PartialEq)]
enum Hook {
    Count,
    Fail,
    /// Never finishes: the unit does not commit.
    Hang,
}

type Hooks = Arc<dyn Fn(&str) -> Hook + Send + Sync>;

/// Counts each workspace's facts, asking `hook` before each entry.
fn counting(hook: Hooks) -> Projection<Workspace, u64> {
    let declare = Declare::<Workspace>::new("durable-count");
    let input = declare.input("facts", &facts());
    declare
        .fold(0u64)
        .on_async(input, async move |count, _entry, unit| {
            match hook(&unit.params.workspace_id) {
                Hook::Count => Ok(count + 1),
                Hook::Fail => Err("the handler fails on purpose".into()),
                Hook::Hang => std::future::pending().await,
            }
        })
        .build()
        .expect("declare")
}

fn durable() -> AttachOptions {
    AttachOptions {
        durable: true,
        ..AttachOptions::default()
    }
}

/// The status key of `ws`'s binding.
fn key(projection: &Projection<Workspace, u64>, ws: &str) -> String {
    let bound = projection.at(workspace(ws)).expect("bind");
    bound.checkpoint_key().params.clone()
}

/// Waits (at most a minute) until `ready` holds for the attachment's
/// status.
async fn wait_until<P, S>(
    attached: &Attached<P, S>,
    ready: impl FnMut(&eddy_projection::AttachStatus<P, S>) -> bool,
) where
    P: eddy_projection::Params,
    S: eddy_projection::State,
{
    tokio::time::timeout(Duration::from_secs(60), attached.wait_for(ready))
        .await
        .expect("the status is reached within a minute")
        .expect("the attachment runs");
}

fn idle<P, S>(status: &eddy_projection::AttachStatus<P, S>, key: &str) -> bool {
    matches!(status.get(key).map(|b| &b.state), Some(BindingState::Idle))
}

fn failed<P, S>(status: &eddy_projection::AttachStatus<P, S>, key: &str) -> bool {
    matches!(
        status.get(key).map(|b| &b.state),
        Some(BindingState::Failed(_))
    )
}

/// Where a test's store lives, so that a child process opens it too.
#[derive(Clone, Debug)]
enum Place {
    Sqlite(PathBuf),
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        schema: String,
    },
}

impl Place {
    async fn open(&self) -> Arc<dyn Storage> {
        match self {
            Place::Sqlite(dir) => Arc::new(SqliteStorage::open(dir).expect("open sqlite")),
            #[cfg(feature = "postgres")]
            Place::Postgres { url, schema } => {
                let options = eddy_streams::PgOptions::new(url.clone()).with_schema(schema.clone());
                Arc::new(
                    eddy_streams::PgStorage::open(options)
                        .await
                        .expect("open postgres"),
                )
            }
        }
    }

    /// The environment that names this place for a child process.
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Place::Sqlite(dir) => vec![("EDDY_DURABLE_SQLITE", dir.display().to_string())],
            #[cfg(feature = "postgres")]
            Place::Postgres { url, schema } => vec![
                ("EDDY_DURABLE_PG_URL", url.clone()),
                ("EDDY_DURABLE_PG_SCHEMA", schema.clone()),
            ],
        }
    }

    fn from_env() -> Place {
        if let Ok(dir) = std::env::var("EDDY_DURABLE_SQLITE") {
            return Place::Sqlite(dir.into());
        }
        #[cfg(feature = "postgres")]
        if let (Ok(url), Ok(schema)) = (
            std::env::var("EDDY_DURABLE_PG_URL"),
            std::env::var("EDDY_DURABLE_PG_SCHEMA"),
        ) {
            return Place::Postgres { url, schema };
        }
        panic!("the child process is told no store");
    }

    async fn clean_up(&self) {
        #[cfg(feature = "postgres")]
        if let Place::Postgres { url, schema } = self {
            crate::support::drop_pg_schema(url, schema).await;
        }
    }
}

/// A SQLite place in `dir`, and a PostgreSQL one when `DATABASE_URL` is
/// set (required when `EDDY_REQUIRE_POSTGRES` is).
fn places(name: &str, dir: &Path) -> Vec<(&'static str, Place)> {
    // Only the PostgreSQL place, behind its feature, adds to it.
    #[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
    let mut places = vec![("sqlite", Place::Sqlite(dir.join("sqlite")))];
    #[cfg(feature = "postgres")]
    if let Some(url) = crate::support::postgres_url(name) {
        let schema = crate::support::fresh_schema("durable");
        places.push(("postgres", Place::Postgres { url, schema }));
    }
    #[cfg(not(feature = "postgres"))]
    let _ = name;
    places
}

/// Runs `case` on a fresh store at every place.
fn on_places<F, Fut>(name: &str, case: F)
where
    F: Fn(Place, Arc<dyn Storage>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = crate::support::runtime();
    for (backend, place) in places(name, dir.path()) {
        eprintln!("`{name}` on {backend}");
        runtime.block_on(async {
            let store = place.open().await;
            case(place.clone(), store).await;
            place.clean_up().await;
        });
    }
}

/// The child process of the kill test: attaches durably with a handler
/// that hangs, appends three facts to `w1`, and says so once the run has
/// begun. It is killed there; does nothing when run as a plain test.
#[test]
#[ignore = "the child process of the kill test"]
fn child_worker() {
    let Ok(signal) = std::env::var("EDDY_DURABLE_SIGNAL") else {
        return;
    };
    let signal = PathBuf::from(signal);
    crate::support::runtime().block_on(async {
        let store = Place::from_env().open().await;
        let host = Host::new(Arc::clone(&store));
        let running = signal.clone();
        let projection = counting(Arc::new(move |_| {
            // The append committed, its mark with it; the run begins.
            std::fs::write(&running, "running").expect("signal");
            Hook::Hang
        }));
        let _attached = host.attach(&projection, durable()).expect("attach");
        facts()
            .append(store.as_ref(), &workspace("w1"), &[1, 2, 3])
            .await
            .expect("append");
        std::future::pending::<()>().await;
    });
}

/// Waits for the file another process writes as its signal; a child that
/// died first fails the test instead of hanging it.
async fn wait_for_file(path: &Path, child: &mut std::process::Child) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the child exited first: {status}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no signal {} within two minutes",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A process commits to an input of a durable attachment and is killed
/// (SIGKILL) before the run it woke commits; started again, the
/// attachment runs the binding from its mark, with no new commit.
#[test]
fn a_binding_marked_before_a_kill_runs_from_its_mark_at_restart() {
    let name = "a_binding_marked_before_a_kill_runs_from_its_mark_at_restart";
    on_places(name, |place, store| async move {
        facts()
            .create(store.as_ref(), &workspace("w1"))
            .await
            .expect("create");
        // Closed while the child writes: a SQLite store's cache learns
        // only its own process's writes.
        drop(store);
        let dir = tempfile::tempdir().expect("tempdir");
        let signal = dir.path().join("signal");
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "durable::child_worker",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("EDDY_DURABLE_SIGNAL", &signal)
            .envs(place.env())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn the child");
        wait_for_file(&signal, &mut child).await;
        child.kill().expect("SIGKILL the child");
        child.wait().expect("reap");

        let store = place.open().await;
        let projection = counting(Arc::new(|_| Hook::Count));
        let host = Host::new(Arc::clone(&store));
        let bound = projection.at(workspace("w1")).expect("bind");
        assert_eq!(
            host.read(&bound).await.expect("read"),
            0,
            "the run never committed"
        );
        let marks = eddy_projection::wake_marks(store.as_ref())
            .await
            .expect("marks");
        assert_eq!(marks.len(), 1, "{marks:?}");
        assert_eq!(marks[0].params, key(&projection, "w1"));
        assert_eq!(marks[0].pending_commits, 1, "the append marked it");

        let attached = host.attach(&projection, durable()).expect("attach");
        let w1 = key(&projection, "w1");
        wait_until(&attached, |s| idle(s, &w1)).await;
        assert_eq!(host.read(&bound).await.expect("read"), 3);
        let marks = attached.wake_marks().await.expect("marks");
        assert_eq!(marks, Vec::new(), "the caught-up binding deleted its mark");
    });
}

/// A binding whose run fails defers its own mark (1 s first) and runs
/// again when it is due; its neighbour catches up and deletes its mark
/// meanwhile.
#[test]
fn a_failed_binding_defers_only_its_own_mark() {
    on_places(
        "a_failed_binding_defers_only_its_own_mark",
        |_, store| async move {
            let failing = Arc::new(AtomicBool::new(true));
            let failing_in = Arc::clone(&failing);
            let projection = counting(Arc::new(move |ws| {
                if ws == "bad" && failing_in.load(Ordering::SeqCst) {
                    Hook::Fail
                } else {
                    Hook::Count
                }
            }));
            for ws in ["good", "bad"] {
                facts()
                    .create(store.as_ref(), &workspace(ws))
                    .await
                    .expect("create");
            }
            let host = Host::new(Arc::clone(&store));
            let attached = host.attach(&projection, durable()).expect("attach");
            for ws in ["good", "bad"] {
                facts()
                    .append(store.as_ref(), &workspace(ws), &[7])
                    .await
                    .expect("append");
            }
            let (good, bad) = (key(&projection, "good"), key(&projection, "bad"));
            wait_until(&attached, |s| idle(s, &good) && failed(s, &bad)).await;
            let marks = store
                .wake_marks()
                .expect("marks")
                .list()
                .await
                .expect("list");
            assert_eq!(
                marks.len(),
                1,
                "only the failed binding keeps a mark: {marks:?}"
            );
            assert_eq!(marks[0].params, bad);
            assert!(marks[0].attempts >= 1, "{marks:?}");
            assert!(marks[0].due_ms > 0, "the mark is deferred: {marks:?}");
            let reported = attached.wake_marks().await.expect("marks");
            assert!(reported[0].failed_runs >= 1, "{reported:?}");
            let bound = |ws| projection.at(workspace(ws)).expect("bind");
            assert_eq!(host.read(&bound("good")).await.expect("read"), 1);

            // Fixed, the failed binding runs when its mark is due, with no
            // new commit, and deletes its mark.
            failing.store(false, Ordering::SeqCst);
            let deferral = FIRST_DEFERRAL;
            eprintln!("waiting for a deferral of at least {deferral:?}");
            wait_until(&attached, |s| idle(s, &bad)).await;
            assert_eq!(host.read(&bound("bad")).await.expect("read"), 1);
            assert_eq!(attached.wake_marks().await.expect("marks"), Vec::new());
        },
    );
}

/// The sequence compare: a commit after a binding read its mark keeps
/// the mark when the binding clears what it saw; a marker dropped marks
/// nothing more.
#[test]
fn a_commit_after_a_binding_read_its_mark_keeps_the_mark() {
    on_places(
        "a_commit_after_a_binding_read_its_mark_keeps_the_mark",
        |_, store| async move {
            let marks = store.wake_marks().expect("a store with marks");
            let owner = MarkOwner {
                projection: "marked".into(),
                version: 1,
            };
            let marker = marks.register(
                owner.clone(),
                Arc::new(|path: &str| {
                    let ws = path.strip_prefix("facts/")?;
                    Some(format!("workspaceId={ws}"))
                }),
            );
            let w1 = workspace("w1");
            facts().create(store.as_ref(), &w1).await.expect("create");
            facts()
                .append(store.as_ref(), &w1, &[1])
                .await
                .expect("append");
            let key = "workspaceId=w1";
            let seen = marks.get(&owner, key).await.expect("get").expect("marked");
            assert_eq!((seen.commits, seen.path.as_str()), (2, "facts/w1"));
            // A commit during the binding's run.
            facts()
                .append(store.as_ref(), &w1, &[2])
                .await
                .expect("append");
            assert!(!marks.clear(&owner, key, seen.commits).await.expect("clear"));
            let kept = marks.get(&owner, key).await.expect("get").expect("kept");
            assert_eq!(kept.commits, 3);
            marks
                .defer(&owner, key, "facts/w1", 2, 42)
                .await
                .expect("defer");
            let deferred = marks.get(&owner, key).await.expect("get").expect("kept");
            assert_eq!((deferred.attempts, deferred.due_ms), (2, 42));
            assert!(marks.clear(&owner, key, 3).await.expect("clear"));
            assert_eq!(marks.get(&owner, key).await.expect("get"), None);
            drop(marker);
            facts()
                .append(store.as_ref(), &w1, &[3])
                .await
                .expect("append");
            assert_eq!(marks.list().await.expect("list"), Vec::new());
        },
    );
}

/// Durable wake-ups need a store that writes a mark in each commit's
/// transaction: memory and remote stores are refused when attaching.
#[test]
fn durable_attach_is_refused_on_memory_and_remote_stores() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let (remote, _server) = crate::support::remote(dir.path()).await;
        let memory: Arc<dyn Storage> = Arc::new(eddy_streams::MemoryStorage::new());
        for store in [memory, remote] {
            let projection = counting(Arc::new(|_| Hook::Count));
            let refused = Host::new(store)
                .attach(&projection, durable())
                .expect_err("refused");
            assert_eq!(refused.code(), "load/invalid-options");
            assert!(refused.to_string().contains("durable"), "{refused}");
        }
    });
}
