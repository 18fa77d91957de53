//! Subscriptions on several `eddy serve` processes on one store, as the
//! README deploys them behind a load balancer: requests alternate between
//! the servers, a server is SIGKILLed while it delivers a webhook, and
//! every notification still arrives, claims stay exclusive and the
//! subscription's offsets and generations are right. The scenarios run on
//! PostgreSQL (`postgres.rs`) and DynamoDB (`dynamodb.rs`); on SQLite a
//! subscription outlives its server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::IntoResponse;
use tokio::sync::mpsc;

use crate::crash::{client, runtime};

#[cfg(any(feature = "aws", feature = "postgres"))]
/// Starts a server on the test's store with these extra arguments.
pub(crate) type Launch<'a> = &'a dyn Fn(&[&str]) -> (Child, String);

/// Quick sweeps and short leases, and webhooks may reach loopback.
const ARGS: &[&str] = &[
    // Shorter than the test client's timeout.
    "--long-poll-timeout",
    "5s",
    "--subscription-sweep-interval",
    "100ms",
    "--min-lease-ttl",
    "500ms",
    "--webhook-allow-network",
    "127.0.0.1/32",
];

/// A webhook receiver that reports every notification and leaves the
/// first `hang` of them unanswered for good (their sender is killed), then
/// answers `{"done": true}`.
struct Receiver {
    url: String,
    notifications: mpsc::UnboundedReceiver<serde_json::Value>,
}

impl Receiver {
    async fn start(hang: usize) -> Receiver {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind the receiver");
        let url = format!("http://{}/hook", listener.local_addr().expect("address"));
        let (tx, notifications) = mpsc::unbounded_channel();
        let seen = Arc::new(Mutex::new(0usize));
        let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
            let tx = tx.clone();
            let seen = Arc::clone(&seen);
            async move {
                let _ = tx.send(serde_json::from_slice(&body).unwrap_or_default());
                let nth = {
                    let mut seen = seen.lock().expect("count");
                    *seen += 1;
                    *seen
                };
                if nth <= hang {
                    std::future::pending::<()>().await;
                }
                axum::Json(serde_json::json!({"done": true})).into_response()
            }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, notifications }
    }

    async fn next(&mut self) -> serde_json::Value {
        tokio::time::timeout(Duration::from_secs(30), self.notifications.recv())
            .await
            .expect("a notification arrives")
            .expect("receiver open")
    }
}

/// A server that is killed when dropped, so a failed test leaves no
/// process behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server that a failed test does not leave running.
fn running((child, url): (Child, String)) -> (Running, String) {
    (Running(child), url)
}

/// SIGKILLs a server.
fn kill(server: Running) {
    drop(server);
}

async fn put_json(
    http: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> reqwest::Response {
    http.put(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("PUT")
}

#[cfg(any(feature = "aws", feature = "postgres"))]
async fn post_json(
    http: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> reqwest::Response {
    http.post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("POST")
}

/// A subscription as `server` describes it.
async fn describe(http: &reqwest::Client, server: &str, id: &str) -> serde_json::Value {
    let response = http
        .get(format!("{server}/app/__ds/subscriptions/{id}"))
        .send()
        .await
        .expect("GET the subscription");
    assert_eq!(response.status(), 200, "GET {id} through {server}");
    response.json().await.expect("JSON")
}

/// Tail and acknowledged offset of each watched stream.
fn offsets(description: &serde_json::Value) -> BTreeMap<String, (String, String)> {
    description["streams"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["path"].as_str().unwrap_or_default().to_owned(),
                (
                    s["tail_offset"].as_str().unwrap_or_default().to_owned(),
                    s["acked_offset"].as_str().unwrap_or_default().to_owned(),
                ),
            )
        })
        .collect()
}

#[cfg(any(feature = "aws", feature = "postgres"))]
/// A webhook subscription made through one server is delivered by it; the
/// server is SIGKILLed mid-delivery and the other takes the wake over
/// after its lease; then appends through either server (a restarted one
/// included) are all notified and acknowledged, one generation at a time.
pub(crate) fn webhook_delivery_survives_the_delivering_server(launch: Launch) {
    let rt = runtime();
    rt.block_on(async {
        let http = client();
        let mut receiver = Receiver::start(1).await;
        let (a, a_url) = running(launch(ARGS));
        let created = put_json(
            &http,
            &format!("{a_url}/app/__ds/subscriptions/hooked"),
            &serde_json::json!({
                "type": "webhook",
                "pattern": "orders/*",
                "webhook": {"url": receiver.url},
                "lease_ttl_ms": 3000,
            }),
        )
        .await;
        assert_eq!(created.status(), 201, "{:?}", created.text().await);
        let written = put_json(
            &http,
            &format!("{a_url}/app/orders/1"),
            &serde_json::json!({"n": 1}),
        )
        .await;
        assert_eq!(written.status(), 201);

        // Only `a` runs: it delivers generation 1, which is never answered.
        let first = receiver.next().await;
        assert_eq!(first["generation"], 1, "{first}");
        let (b, b_url) = running(launch(ARGS));
        let keys = |url: String| {
            let http = http.clone();
            async move {
                let jwks: serde_json::Value = http
                    .get(format!("{url}/app/__ds/jwks.json"))
                    .send()
                    .await
                    .expect("JWKS")
                    .json()
                    .await
                    .expect("JSON");
                jwks
            }
        };
        assert_eq!(
            keys(a_url.clone()).await,
            keys(b_url.clone()).await,
            "every server signs with the store's key"
        );
        kill(a);

        // `b` takes the wake over once its lease ends, and it is answered.
        let second = receiver.next().await;
        assert_eq!(second["generation"], 2, "{second}");
        assert_eq!(second["streams"][0]["path"], "orders/1");
        let shown = second["streams"][0]["tail_offset"].clone();
        wait_until_acked(&http, &b_url, "hooked").await;
        let after = describe(&http, &b_url, "hooked").await;
        assert_eq!(after["generation"], 2);
        assert_eq!(
            offsets(&after)["orders/1"],
            (
                shown.as_str().unwrap_or_default().to_owned(),
                shown.as_str().unwrap_or_default().to_owned()
            )
        );

        // A restarted server and `b` take turns; every append is notified.
        let (c, c_url) = running(launch(ARGS));
        let servers = [c_url.as_str(), b_url.as_str()];
        let mut generation = 2;
        for round in 0..6 {
            let server = servers[round % 2];
            let path = format!("{server}/app/orders/{}", round % 3);
            let written = post_or_create(&http, &path, round).await;
            assert!(written.is_success(), "append {round}: {written}");
            // Each append is shown by a notification of the next
            // generation (appends made while one is in flight may be
            // shown together).
            let notification = receiver.next().await;
            let delivered = notification["generation"].as_u64().unwrap_or(0);
            assert!(
                delivered > generation,
                "generation {delivered} after {generation}"
            );
            generation = delivered;
            wait_until_acked(&http, servers[(round + 1) % 2], "hooked").await;
        }
        let last = describe(&http, &c_url, "hooked").await;
        assert_eq!(last["generation"].as_u64(), Some(generation));
        assert_eq!(offsets(&last).len(), 3, "{last}");
        assert!(
            offsets(&last).values().all(|(tail, acked)| tail == acked),
            "{last}"
        );
        assert!(
            receiver.notifications.try_recv().is_err(),
            "no notification beyond one per generation"
        );
        kill(b);
        kill(c);
    });
}

#[cfg(any(feature = "aws", feature = "postgres"))]
/// An append to a JSON stream that may not exist yet.
async fn post_or_create(http: &reqwest::Client, url: &str, n: usize) -> reqwest::StatusCode {
    let body = serde_json::json!({ "n": n });
    let appended = post_json(http, url, &body).await;
    if appended.status() == 404 {
        return put_json(http, url, &body).await.status();
    }
    appended.status()
}

/// Waits until the subscription has nothing pending, as `server` sees it.
async fn wait_until_acked(http: &reqwest::Client, server: &str, id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let description = describe(http, server, id).await;
        if offsets(&description)
            .values()
            .all(|(tail, acked)| tail == acked)
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still pending: {description}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(any(feature = "aws", feature = "postgres"))]
/// A pull-wake subscription on two servers: made through one, woken by an
/// append through the other, claimed by one worker of twenty claiming at
/// once through both, acknowledged through the other server, and deleted
/// through the one that did not make it.
pub(crate) fn pull_wake_claims_are_exclusive_across_servers(launch: Launch) {
    let rt = runtime();
    rt.block_on(async {
        let http = client();
        let (a, a_url) = running(launch(ARGS));
        let (b, b_url) = running(launch(ARGS));
        let wakes = http
            .put(format!("{a_url}/app/wakes/1"))
            .header("content-type", "application/json")
            .send()
            .await
            .expect("create the wake stream");
        assert_eq!(wakes.status(), 201);
        let created = put_json(
            &http,
            &format!("{a_url}/app/__ds/subscriptions/pulled"),
            &serde_json::json!({
                "type": "pull-wake",
                "streams": ["jobs/1"],
                "wake_stream": "wakes/1",
                "lease_ttl_ms": 30000,
            }),
        )
        .await;
        assert_eq!(created.status(), 201, "{:?}", created.text().await);
        let written = put_json(
            &http,
            &format!("{b_url}/app/jobs/1"),
            &serde_json::json!({"job": 1}),
        )
        .await;
        assert_eq!(written.status(), 201);

        // The wake event reaches the wake stream (read through `a`, by
        // long-polls: the server answers once it is there).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let read = http
                .get(format!("{a_url}/app/wakes/1?offset=-1&live=long-poll"))
                .send()
                .await
                .expect("read the wake stream");
            if read.status() == 200 {
                let events: serde_json::Value = read.json().await.expect("JSON");
                assert_eq!(events[0]["subscription_id"], "pulled", "{events}");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no wake event");
        }

        let claims = (0..20).map(|worker| {
            let http = http.clone();
            let server = if worker % 2 == 0 {
                a_url.clone()
            } else {
                b_url.clone()
            };
            async move {
                let response = post_json(
                    &http,
                    &format!("{server}/app/__ds/subscriptions/pulled/claim"),
                    &serde_json::json!({ "worker": format!("w{worker}") }),
                )
                .await;
                let status = response.status().as_u16();
                let body: serde_json::Value = response.json().await.unwrap_or_default();
                (status, body)
            }
        });
        let answers = futures_join_all(claims).await;
        let won: Vec<&serde_json::Value> = answers
            .iter()
            .filter(|(status, _)| *status == 200)
            .map(|(_, body)| body)
            .collect();
        assert_eq!(won.len(), 1, "one claim wins: {answers:?}");
        assert!(
            answers
                .iter()
                .all(|(status, _)| *status == 200 || *status == 409),
            "{answers:?}"
        );
        let lease = won[0];
        assert_eq!(lease["generation"], 1);

        // Acknowledged through `b`; a second claim finds nothing pending.
        let token = lease["token"].as_str().unwrap_or_default();
        let acked = http
            .post(format!("{b_url}/app/__ds/subscriptions/pulled/ack"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(
                serde_json::json!({
                    "wake_id": lease["wake_id"],
                    "generation": 1,
                    "acks": [{"stream": "jobs/1", "offset": lease["streams"][0]["tail_offset"]}],
                    "done": true,
                })
                .to_string(),
            )
            .send()
            .await
            .expect("ack");
        assert_eq!(acked.status(), 200, "{:?}", acked.text().await);
        let again = post_json(
            &http,
            &format!("{a_url}/app/__ds/subscriptions/pulled/claim"),
            &serde_json::json!({ "worker": "late" }),
        )
        .await;
        assert_eq!(again.status(), 204);
        for server in [&a_url, &b_url] {
            let description = describe(&http, server, "pulled").await;
            assert_eq!(description["generation"], 1);
            let (tail, acked) = &offsets(&description)["jobs/1"];
            assert_eq!(tail, acked);
        }

        let deleted = http
            .delete(format!("{b_url}/app/__ds/subscriptions/pulled"))
            .send()
            .await
            .expect("DELETE");
        assert_eq!(deleted.status(), 204);
        let gone = http
            .get(format!("{a_url}/app/__ds/subscriptions/pulled"))
            .send()
            .await
            .expect("GET");
        assert_eq!(gone.status(), 404);
        kill(a);
        kill(b);
    });
}

#[cfg(any(feature = "aws", feature = "postgres"))]
/// Runs futures at once, each on its own task, and collects their
/// outputs in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("task"));
    }
    out
}

/// On SQLite a subscription is kept in the database: it outlives its
/// server, and the restarted server wakes it.
#[test]
fn a_subscription_outlives_its_server_on_sqlite() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = data.path().to_string_lossy().into_owned();
    let launch = |extra: &[&str]| {
        let mut args = vec!["--data", dir.as_str()];
        args.extend_from_slice(extra);
        crate::crash::serve(crate::crash::eddy_binary(), &args)
    };
    let rt = runtime();
    rt.block_on(async {
        let http = client();
        let mut receiver = Receiver::start(0).await;
        let (first, url) = running(launch(ARGS));
        let created = put_json(
            &http,
            &format!("{url}/app/__ds/subscriptions/kept"),
            &serde_json::json!({"type": "webhook", "pattern": "orders/*", "webhook": {"url": receiver.url}}),
        )
        .await;
        assert_eq!(created.status(), 201);
        kill(first);
        let (second, url) = running(launch(ARGS));
        describe(&http, &url, "kept").await;
        let written = put_json(&http, &format!("{url}/app/orders/1"), &serde_json::json!({"n": 1})).await;
        assert_eq!(written.status(), 201);
        let notification = receiver.next().await;
        assert_eq!(notification["subscription_id"], "kept");
        wait_until_acked(&http, &url, "kept").await;
        kill(second);
    });
}
