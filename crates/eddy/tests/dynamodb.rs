//! `eddy serve --storage dynamodb://TABLE` on the local DynamoDB-compatible
//! server (moto, `EDDY_DYNAMODB_ENDPOINT`): the crash test, and two servers
//! on one table (live reads across them; concurrent producers through
//! both, every acknowledged message read once, in one order, by both).
//! Each test makes a table of its own with `eddy dynamo create-table`.
#![cfg(feature = "aws")]

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::crash::{
    client, crash_under_load, create, eddy_binary, runtime, serve_with, tail, until_live_readers,
};

/// A fresh table on moto, or `None` when `EDDY_SKIP_MOTO` says to skip.
struct Table {
    name: String,
    env: Vec<(&'static str, String)>,
}

impl Table {
    fn fresh(test: &str) -> Option<Table> {
        let endpoint = match std::env::var("EDDY_DYNAMODB_ENDPOINT") {
            Ok(url) => url,
            Err(_) if std::env::var("EDDY_SKIP_MOTO").is_ok() => {
                eprintln!("`{test}` on dynamodb: skipped, EDDY_SKIP_MOTO is set");
                return None;
            }
            Err(_) => panic!(
                "EDDY_DYNAMODB_ENDPOINT is not set: run `eval \"$(scripts/moto.sh start)\"` \
                 first, or set EDDY_SKIP_MOTO=1"
            ),
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let table = Table {
            name: format!("serve-{test}-{}-{nanos}", std::process::id()),
            env: vec![
                ("AWS_ENDPOINT_URL", endpoint),
                ("AWS_REGION", "us-east-1".into()),
                ("AWS_ACCESS_KEY_ID", "testing".into()),
                ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ],
        };
        let created = Command::new(eddy_binary())
            .args(["dynamo", "create-table", "--table", &table.name])
            .envs(table.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run eddy dynamo create-table");
        assert!(
            created.status.success(),
            "create-table: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        Some(table)
    }

    fn serve(&self) -> (Child, String) {
        self.serve_args(&[])
    }

    /// Starts `eddy serve` on this table with more arguments.
    fn serve_args(&self, extra: &[&str]) -> (Child, String) {
        let storage = format!("dynamodb://{}", self.name);
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut args = vec!["--storage", storage.as_str()];
        args.extend_from_slice(extra);
        serve_with(eddy_binary(), &args, &env)
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn sigkill_under_load_loses_and_duplicates_nothing() {
    let Some(table) = Table::fresh("sigkill") else {
        return;
    };
    crash_under_load(&|| table.serve());
}

/// Appends `count` messages as producer `id` through `url`, retrying one
/// the server refused as retryable (503: it lost too many races with the
/// other server) with the same seq. Returns how many were duplicates.
async fn produce(http: reqwest::Client, url: String, id: usize, count: u64) -> u64 {
    let mut duplicates = 0;
    for seq in 0..count {
        loop {
            let response = http
                .post(&url)
                .header("content-type", "application/json")
                .header("producer-id", format!("w{id}"))
                .header("producer-epoch", "0")
                .header("producer-seq", seq.to_string())
                .body(format!("\"{id}-{seq}\""))
                .send()
                .await
                .expect("the server answers");
            if response.status() == 503 {
                continue;
            }
            assert!(
                response.status().is_success(),
                "w{id} seq {seq}: {}",
                response.status()
            );
            if response.headers().contains_key("eddy-duplicate") {
                duplicates += 1;
            }
            break;
        }
    }
    duplicates
}

#[test]
fn two_servers_on_one_table_serve_one_set_of_streams() {
    let Some(table) = Table::fresh("two") else {
        return;
    };
    let (a, a_url) = table.serve();
    let (b, b_url) = table.serve();
    let http = client();
    runtime().block_on(async {
        // An append through A wakes a long-poll parked on B (B has read
        // the stream at its tail before the append: only B's poll of the
        // table can bring it the message).
        let (on_a, on_b) = (format!("{a_url}/live/s"), format!("{b_url}/live/s"));
        create(&http, &on_a).await;
        let tail = tail(&http, &on_a).await;
        let live = {
            let (http, on_b) = (http.clone(), on_b.clone());
            tokio::spawn(async move {
                http.get(format!("{on_b}?offset={tail}&live=long-poll"))
                    .send()
                    .await
                    .expect("long-poll")
            })
        };
        until_live_readers(&http, &b_url, 1).await;
        let appended = http
            .post(&on_a)
            .header("content-type", "application/json")
            .body("\"hello\"")
            .send()
            .await
            .expect("append");
        assert!(appended.status().is_success(), "{}", appended.status());
        let read = live.await.expect("join");
        assert_eq!(read.status(), 200);
        assert_eq!(read.text().await.expect("body"), "[\"hello\"]");

        // Producers through both servers at once.
        let (log_a, log_b) = (format!("{a_url}/shared/log"), format!("{b_url}/shared/log"));
        create(&http, &log_a).await;
        let count = 40;
        let tasks: Vec<_> = (0..6)
            .map(|id| {
                let url = if id % 2 == 0 { &log_a } else { &log_b };
                tokio::spawn(produce(http.clone(), url.clone(), id, count))
            })
            .collect();
        for task in tasks {
            assert_eq!(
                task.await.expect("producer"),
                0,
                "no first attempt was a duplicate"
            );
        }
        let mut bodies = Vec::new();
        for url in [&log_a, &log_b] {
            let body = http
                .get(format!("{url}?offset=-1"))
                .send()
                .await
                .expect("read")
                .text()
                .await
                .expect("body");
            let messages: Vec<String> = serde_json::from_str(&body).expect("a JSON array");
            let mut next: BTreeMap<&str, u64> = BTreeMap::new();
            for message in &messages {
                let (writer, seq) = message.split_once('-').expect("id-seq");
                let expected = next.entry(writer).or_default();
                assert_eq!(seq.parse::<u64>().ok(), Some(*expected), "writer {writer}");
                *expected += 1;
            }
            assert_eq!(
                messages.len() as u64,
                6 * count,
                "each acknowledged message once"
            );
            bodies.push(body);
        }
        assert_eq!(bodies[0], bodies[1], "both servers read one order");
    });
    stop(a);
    stop(b);
}

/// Two servers on one table share their subscriptions: a webhook's
/// delivery survives the SIGKILL of the server delivering it.
#[test]
fn webhook_delivery_survives_the_delivering_server() {
    let Some(table) = Table::fresh("shared-webhook") else {
        return;
    };
    crate::shared_subscriptions::webhook_delivery_survives_the_delivering_server(&|extra| {
        table.serve_args(extra)
    });
}

/// Two servers on one table: pull-wake claims are exclusive across them.
#[test]
fn pull_wake_claims_are_exclusive_across_servers() {
    let Some(table) = Table::fresh("shared-pull-wake") else {
        return;
    };
    crate::shared_subscriptions::pull_wake_claims_are_exclusive_across_servers(&|extra| {
        table.serve_args(extra)
    });
}

/// `eddy serve` on DynamoDB applies a server retention rule (issue 34:
/// the DynamoDB store refused every policy): its sweep drops what the
/// rule lets go, a read before the earliest kept offset is `410
/// offset/dropped` naming it, and `-1` reads what is kept.
#[test]
fn retention_rules_drop_old_messages_on_dynamodb() {
    let Some(table) = Table::fresh("retention") else {
        return;
    };
    let (server, url) = table.serve_args(&[
        "--sweep-interval",
        "100ms",
        "--retention",
        "logs/**=messages=2",
    ]);
    let http = client();
    runtime().block_on(async {
        let log = format!("{url}/logs/app");
        let created = http
            .put(&log)
            .header("content-type", "text/plain")
            .send()
            .await
            .expect("create");
        let header = |response: &reqwest::Response, name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(
            header(&created, "eddy-retention").as_deref(),
            Some("messages=2")
        );
        let start = header(&created, "stream-next-offset").expect("offset");
        for word in ["a", "b", "c", "d", "e"] {
            let appended = http
                .post(&log)
                .header("content-type", "text/plain")
                .body(word)
                .send()
                .await
                .expect("append");
            assert!(appended.status().is_success(), "{}", appended.status());
        }
        // The sweep runs on its own: wait until HEAD shows the drop.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let earliest = loop {
            let head = http.head(&log).send().await.expect("head");
            let earliest = header(&head, "eddy-earliest-offset").expect("earliest");
            if earliest.ends_with("_0000000000000003") {
                break earliest;
            }
            assert!(tokio::time::Instant::now() < deadline, "not swept");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let gone = http
            .get(format!("{log}?offset={start}"))
            .send()
            .await
            .expect("read");
        assert_eq!(gone.status(), 410);
        assert_eq!(
            header(&gone, "eddy-error").as_deref(),
            Some("offset/dropped")
        );
        assert_eq!(
            header(&gone, "eddy-earliest-offset").as_deref(),
            Some(earliest.as_str())
        );
        let kept = http
            .get(format!("{log}?offset=-1"))
            .send()
            .await
            .expect("read");
        assert_eq!(kept.text().await.expect("body"), "de");
    });
    stop(server);
}
