//! `eddy serve` on PostgreSQL: the crash test, and two servers sharing one
//! database (one set of streams, live reads and producer deduplication
//! across them, one killed while the other keeps serving).
//!
//! Each test uses a schema of its own in the database at `DATABASE_URL`
//! (`scripts/test.sh` starts a throwaway cluster) and drops it at the end.
//! Without `DATABASE_URL` the tests say they were skipped, unless
//! `EDDY_REQUIRE_POSTGRES` is set.

use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};

use eddy_streams::sqlx::{self, Executor};

use crate::crash::{
    client, crash_under_load, create, eddy_binary, finish, runtime, serve, tail,
    until_live_readers, write_until_failure, Acks, Rng, Writer, KILLS, KILL_AFTER_ACKS, WRITERS,
};

/// A schema of its own for one test, on the database at `DATABASE_URL`.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    fn fresh(test: &str) -> Option<Schema> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let url = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty());
        let Some(url) = url else {
            let required = std::env::var_os("EDDY_REQUIRE_POSTGRES").is_some();
            assert!(!required, "`{test}`: DATABASE_URL is not set");
            eprintln!("`{test}` on postgres: skipped, DATABASE_URL is not set");
            return None;
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("serve_{}_{n}", std::process::id());
        Some(Schema { url, name })
    }

    /// Starts `eddy serve` on this schema.
    fn serve(&self) -> (Child, String) {
        self.serve_with(&[])
    }

    /// Starts `eddy serve` on this schema with more arguments.
    fn serve_with(&self, extra: &[&str]) -> (Child, String) {
        let mut args = vec![
            "--storage",
            self.url.as_str(),
            "--pg-schema",
            self.name.as_str(),
        ];
        args.extend_from_slice(extra);
        serve(eddy_binary(), &args)
    }

    async fn drop(self) {
        let pool = sqlx::PgPool::connect(&self.url).await.expect("connect");
        pool.execute(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.name
        )))
        .await
        .expect("drop the schema");
        pool.close().await;
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn sigkill_under_load_loses_and_duplicates_nothing() {
    let Some(schema) = Schema::fresh("sigkill_under_load") else {
        return;
    };
    crash_under_load(&|| schema.serve());
    runtime().block_on(schema.drop());
}

/// Two servers on one schema: a stream created through one is read live
/// through the other, and a producer's retry through the other is a
/// duplicate.
#[test]
fn two_servers_serve_one_set_of_streams() {
    let Some(schema) = Schema::fresh("two_servers") else {
        return;
    };
    let (a, a_url) = schema.serve();
    let (b, b_url) = schema.serve();
    let http = client();
    runtime().block_on(async {
        let (on_a, on_b) = (format!("{a_url}/shared/s"), format!("{b_url}/shared/s"));
        create(&http, &on_a).await;
        let live = {
            let (http, on_b) = (http.clone(), on_b.clone());
            tokio::spawn(async move {
                http.get(format!("{on_b}?offset=-1&live=long-poll"))
                    .send()
                    .await
                    .expect("long-poll")
            })
        };
        let append = |url: String| {
            let http = http.clone();
            async move {
                http.post(url)
                    .header("content-type", "application/json")
                    .header("producer-id", "p")
                    .header("producer-epoch", "0")
                    .header("producer-seq", "0")
                    .body("\"hello\"")
                    .send()
                    .await
                    .expect("append")
            }
        };
        let first = append(on_a.clone()).await;
        assert!(first.status().is_success(), "{}", first.status());
        assert!(!first.headers().contains_key("eddy-duplicate"));
        let read = live.await.expect("join");
        assert_eq!(read.status(), 200);
        assert_eq!(read.text().await.expect("body"), "[\"hello\"]");
        let retry = append(on_b.clone()).await;
        assert!(retry.status().is_success(), "{}", retry.status());
        assert!(
            retry.headers().contains_key("eddy-duplicate"),
            "the retry through the other server is a duplicate"
        );
        let all = http
            .get(format!("{on_b}?offset=-1"))
            .send()
            .await
            .expect("read");
        assert_eq!(all.text().await.expect("body"), "[\"hello\"]");
    });
    stop(a);
    stop(b);
    runtime().block_on(schema.drop());
}

/// Many long-poll readers wait on one stream through each of two servers;
/// one append through the first wakes them all, on both: the other server
/// hears of it by one notification and reads the stream's head once for
/// all its readers (the store's tests count the statements).
#[test]
fn long_poll_readers_on_two_servers_all_wake_from_one_append() {
    const READERS: usize = 200;
    let Some(schema) = Schema::fresh("many_long_polls") else {
        return;
    };
    let (a, a_url) = schema.serve();
    let (b, b_url) = schema.serve();
    let http = client();
    runtime().block_on(async {
        let on_a = format!("{a_url}/readers/s");
        create(&http, &on_a).await;
        let tail = tail(&http, &on_a).await;
        let readers: Vec<_> = [&a_url, &b_url]
            .into_iter()
            .flat_map(|base| std::iter::repeat_n(base, READERS))
            .map(|base| {
                let http = http.clone();
                let url = format!("{base}/readers/s?offset={tail}&live=long-poll");
                tokio::spawn(async move {
                    let answer = http.get(url).send().await.expect("long-poll");
                    (answer.status(), answer.text().await.expect("body"))
                })
            })
            .collect();
        for base in [&a_url, &b_url] {
            until_live_readers(&http, base, READERS).await;
        }
        let appended = http
            .post(&on_a)
            .header("content-type", "application/json")
            .body("\"wake\"")
            .send()
            .await
            .expect("append");
        assert!(appended.status().is_success(), "{}", appended.status());
        for reader in readers {
            let (status, body) = reader.await.expect("join");
            assert_eq!(status, 200);
            assert_eq!(body, "[\"wake\"]");
        }
    });
    stop(a);
    stop(b);
    runtime().block_on(schema.drop());
}

/// Half the producers write through a server that is killed twenty times,
/// and retry their unanswered append through the other server; the other
/// half write through that other server, which never fails them. Nothing
/// is lost or written twice.
#[test]
fn killing_one_of_two_servers_loses_nothing_and_the_other_keeps_serving() {
    let Some(schema) = Schema::fresh("one_of_two_killed") else {
        return;
    };
    let runtime = runtime();
    let http = client();
    let mut rng = Rng::from_clock();
    let (steady, steady_base) = schema.serve();
    let steady_url = format!("{steady_base}/crash/log");
    runtime.block_on(create(&http, &steady_url));
    let mut writers = [Writer::default(); WRITERS];
    let (killed_ids, steady_ids) = (0..WRITERS / 2, WRITERS / 2..WRITERS);
    for _ in 0..KILLS {
        let (victim, victim_base) = schema.serve();
        let victim_url = format!("{victim_base}/crash/log");
        let acks = Acks::new();
        let doomed: Vec<_> = killed_ids
            .clone()
            .map(|id| {
                let task = write_until_failure(
                    http.clone(),
                    victim_url.clone(),
                    id,
                    writers[id],
                    acks.clone(),
                );
                runtime.spawn(task)
            })
            .collect();
        let serving: Vec<_> = steady_ids
            .clone()
            .map(|id| {
                let task = write_rounds(http.clone(), steady_url.clone(), id, writers[id], 20);
                runtime.spawn(task)
            })
            .collect();
        runtime.block_on(acks.reached(1 + rng.below(KILL_AFTER_ACKS)));
        stop(victim);
        for (id, task) in killed_ids.clone().zip(doomed) {
            let state = runtime.block_on(task).expect("writer task");
            // Fail over: the unanswered append goes to the other server.
            writers[id] =
                runtime.block_on(write_rounds(http.clone(), steady_url.clone(), id, state, 1));
        }
        for (id, task) in steady_ids.clone().zip(serving) {
            writers[id] = runtime.block_on(task).expect("writer task");
        }
    }
    runtime.block_on(finish(&http, &steady_url, &mut writers));
    stop(steady);
    runtime.block_on(schema.drop());
}

/// Appends `count` times as producer `id`; every append must succeed.
async fn write_rounds(
    http: reqwest::Client,
    url: String,
    id: usize,
    mut state: Writer,
    count: u64,
) -> Writer {
    for _ in 0..count {
        let response = http
            .post(&url)
            .header("content-type", "application/json")
            .header("producer-id", format!("w{id}"))
            .header("producer-epoch", "0")
            .header("producer-seq", state.next.to_string())
            .body(format!("\"{id}-{}\"", state.next))
            .send()
            .await
            .expect("the steady server answers");
        assert!(
            response.status().is_success(),
            "writer {id}: {}",
            response.status()
        );
        if response.headers().contains_key("eddy-duplicate") {
            state.deduplicated += 1;
        }
        state.acknowledged = Some(state.next);
        state.next += 1;
    }
    state
}

/// Runs `eddy` with `args` and returns its standard output; fails the
/// test when it fails.
fn eddy(args: &[&str]) -> String {
    let output = std::process::Command::new(eddy_binary())
        .args(args)
        .output()
        .expect("run eddy");
    assert!(
        output.status.success(),
        "eddy {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `eddy streams` and `eddy status` take `--storage postgres://…`: a
/// stream written there, exported, imported into SQLite, reads the same,
/// and its producer still deduplicates a retry there.
#[test]
fn streams_and_status_work_on_postgres() {
    let Some(schema) = Schema::fresh("streams_and_status_work_on_postgres") else {
        return;
    };
    let pg = [
        "--storage",
        schema.url.as_str(),
        "--pg-schema",
        schema.name.as_str(),
    ];
    let streams = |args: &[&str]| eddy(&[&["streams"], &pg[..], args].concat());
    streams(&["create", "orders", "--content-type", "text/plain"]);
    streams(&["append", "orders", "first"]);
    streams(&[
        "append",
        "orders",
        "second",
        "--producer",
        "p",
        "--seq",
        "0",
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup.jsonl");
    let backup = backup.to_string_lossy();
    streams(&["export", "--output", &backup]);

    let data = dir.path().join("data");
    let sqlite = ["--data", &*data.to_string_lossy()].map(str::to_owned);
    let local = |args: &[&str]| {
        let mut all = vec!["streams", sqlite[0].as_str(), sqlite[1].as_str()];
        all.extend_from_slice(args);
        eddy(&all)
    };
    local(&["import", &backup]);
    assert_eq!(local(&["read", "orders"]), "first\nsecond\n");
    let retried = local(&[
        "append",
        "orders",
        "second",
        "--producer",
        "p",
        "--seq",
        "0",
    ]);
    assert!(retried.contains("duplicate"), "{retried}");

    let status = eddy(&[&["status", "--json"], &pg[..]].concat());
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(status["streams"]["count"], 1, "{status}");
    assert_eq!(status["streams"]["bytes"], 11, "{status}");
    runtime().block_on(schema.drop());
}

/// `eddy serve` on PostgreSQL shows the store's commits on `/metrics`
/// like SQLite's (each write call one transaction, its COMMIT timed, no
/// call left waiting for a connection), and `/readyz` checks the write
/// path without leaving a stream behind.
#[test]
fn metrics_and_readyz_on_postgres() {
    let Some(schema) = Schema::fresh("metrics_and_readyz_on_postgres") else {
        return;
    };
    let (server, url) = schema.serve();
    let http = client();
    let page = runtime().block_on(async {
        let ready = http
            .get(format!("{url}/readyz"))
            .send()
            .await
            .expect("readyz");
        assert_eq!(ready.status().as_u16(), 200);
        create(&http, &format!("{url}/orders")).await;
        for i in 0..5 {
            let appended = http
                .post(format!("{url}/orders"))
                .header("content-type", "application/json")
                .body(format!("{{\"n\":{i}}}"))
                .send()
                .await
                .expect("append");
            assert_eq!(appended.status().as_u16(), 204);
        }
        crate::serve_cli::metrics_page(&http, &url).await
    });
    stop(server);
    let listed = eddy(&[
        "streams",
        "--storage",
        &schema.url,
        "--pg-schema",
        &schema.name,
        "ls",
    ]);
    assert!(listed.starts_with("orders\t"), "{listed}");
    assert!(!listed.contains("readyz"), "{listed}");
    runtime().block_on(schema.drop());

    // A create and five appends: six transactions of one call each (the
    // probe's transaction made no stream call, so it is not counted).
    let series = |name: &str| crate::serve_cli::series(&page, name);
    assert_eq!(series("eddy_store_commit_group_size_sum"), 6.0, "{page}");
    assert_eq!(series("eddy_store_commit_group_size_count"), 6.0, "{page}");
    assert_eq!(
        series("eddy_store_commit_duration_seconds_count"),
        6.0,
        "{page}"
    );
    assert_eq!(series("eddy_store_writer_queue_jobs"), 0.0, "{page}");
    assert!(
        page.contains("# HELP eddy_store_commit_group_size Calls committed together"),
        "{page}"
    );
}

/// Two servers on one schema share their subscriptions: a webhook's
/// delivery survives the SIGKILL of the server delivering it.
#[test]
fn webhook_delivery_survives_the_delivering_server() {
    let Some(schema) = Schema::fresh("shared_webhook") else {
        return;
    };
    crate::shared_subscriptions::webhook_delivery_survives_the_delivering_server(&|extra| {
        schema.serve_with(extra)
    });
    runtime().block_on(schema.drop());
}

/// Two servers on one schema: pull-wake claims are exclusive across them.
#[test]
fn pull_wake_claims_are_exclusive_across_servers() {
    let Some(schema) = Schema::fresh("shared_pull_wake") else {
        return;
    };
    crate::shared_subscriptions::pull_wake_claims_are_exclusive_across_servers(&|extra| {
        schema.serve_with(extra)
    });
    runtime().block_on(schema.drop());
}
