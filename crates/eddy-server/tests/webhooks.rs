//! Webhook subscriptions on a real socket: which addresses webhooks may
//! reach, redirects, and re-delivery of failed notifications.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use eddy_server::{RunningServer, Server, ServerConfig};
use eddy_streams::MemoryStorage;
use tokio::sync::mpsc;

use crate::router::{fast, json_body, req, router, send};

/// What a test receiver answers to a notification.
#[derive(Clone, Debug)]
enum Answer {
    Status(u16),
    Done,
    /// `{"done": true}` padded to this many bytes.
    DonePadded(usize),
    RedirectTo(String),
}

/// A webhook receiver on `ip`: it reports every notification body and
/// answers with the scripted answers in turn (the last one repeats).
struct Receiver {
    url: String,
    notifications: mpsc::UnboundedReceiver<serde_json::Value>,
}

impl Receiver {
    async fn start(ip: [u8; 4], answers: Vec<Answer>) -> Receiver {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from((ip, 0)))
            .await
            .expect("bind the receiver");
        let url = format!("http://{}/hook", listener.local_addr().expect("address"));
        let (tx, notifications) = mpsc::unbounded_channel();
        let answers = Arc::new(Mutex::new(answers));
        let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
            let tx = tx.clone();
            let answers = Arc::clone(&answers);
            async move {
                let _ = tx.send(serde_json::from_slice(&body).unwrap_or_default());
                let answer = {
                    let mut answers = answers.lock().expect("answers");
                    if answers.len() > 1 {
                        answers.remove(0)
                    } else {
                        answers[0].clone()
                    }
                };
                let response: Response = match answer {
                    Answer::Status(code) => StatusCode::from_u16(code)
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                        .into_response(),
                    Answer::Done => axum::Json(serde_json::json!({"done": true})).into_response(),
                    Answer::DonePadded(bytes) => {
                        let bare = r#"{"done":true,"pad":""}"#.len();
                        let pad = "p".repeat(bytes - bare);
                        axum::Json(serde_json::json!({"done": true, "pad": pad})).into_response()
                    }
                    Answer::RedirectTo(to) => {
                        (StatusCode::TEMPORARY_REDIRECT, [("location", to)]).into_response()
                    }
                };
                response
            }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, notifications }
    }

    /// The next notification, within a generous deadline.
    async fn next(&mut self) -> serde_json::Value {
        tokio::time::timeout(Duration::from_secs(10), self.notifications.recv())
            .await
            .expect("a notification arrives")
            .expect("receiver open")
    }
}

/// A server whose webhooks may reach 127.0.0.1 only, retrying quickly.
async fn server() -> RunningServer {
    server_with(ServerConfig::default()).await
}

/// [`server`] with other settings.
async fn server_with(config: ServerConfig) -> RunningServer {
    let config = ServerConfig {
        webhook_allowed_networks: vec!["127.0.0.1/32".parse().expect("network")],
        wake_retry_initial: Duration::from_millis(20),
        ..config
    };
    crate::support::start(config).await
}

/// Subscribes `url` to `events/*` under `/<base>`, then creates
/// `events/a` with data, which wakes the subscription.
async fn subscribe_and_write(server: &RunningServer, base: &str, url: &str) {
    let http = reqwest::Client::new();
    let subscription = serde_json::json!({
        "type": "webhook",
        "pattern": "events/*",
        "webhook": {"url": url},
    });
    let created = http
        .put(format!("{}/{base}/__ds/subscriptions/{base}", server.url()))
        .body(subscription.to_string())
        .send()
        .await
        .expect("subscribe");
    assert_eq!(created.status(), 201, "{:?}", created.text().await);
    let written = http
        .put(format!("{}/{base}/events/a", server.url()))
        .header("content-type", "application/json")
        .body(r#"{"n":1}"#)
        .send()
        .await
        .expect("write");
    assert_eq!(written.status(), 201);
}

/// Waits until `/metrics` shows a counter at `at_least` or more.
async fn counter_reaches(server: &RunningServer, name: &str, at_least: u64) {
    crate::support::until_series(&server.url(), name, |v| v >= at_least as f64).await;
}

/// Regression: webhook URLs were checked only when they were IP literals,
/// and loopback was allowed, so `localhost`, `[::1]` or an IPv4-mapped
/// IPv6 address reached services on the server's own machine or network.
#[tokio::test]
async fn webhook_urls_into_internal_networks_are_refused() {
    let app = router(fast());
    for url in [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://[::1]:9/hook",
        "http://[::ffff:127.0.0.1]:9/hook",
        "http://[::ffff:10.1.2.3]/hook",
        "http://10.0.0.1/hook",
        "http://192.168.1.10/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/hook",
        "http://0.0.0.0:9/hook",
        "http://[fe80::1]/hook",
        "http://[fc00::1]/hook",
        "ftp://example.com/hook",
    ] {
        let body = serde_json::json!({
            "type": "webhook",
            "pattern": "events/*",
            "webhook": {"url": url},
        });
        let (response, body) = send(
            &app,
            req("PUT", "/v1/__ds/subscriptions/s")
                .body(Body::from(body.to_string()))
                .expect("request"),
        )
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{url}: {body}");
        assert_eq!(
            json_body(&body)["error"]["code"],
            "WEBHOOK_URL_REJECTED",
            "{url}"
        );
    }
}

/// Regression: a notification that failed was sent again only when new
/// data arrived on a watched stream; without more data the wake was lost.
#[tokio::test]
async fn failed_notifications_are_sent_again_with_backoff() {
    let server = server().await;
    let mut receiver = Receiver::start(
        [127, 0, 0, 1],
        vec![Answer::Status(500), Answer::Status(503), Answer::Done],
    )
    .await;
    subscribe_and_write(&server, "retry", &receiver.url).await;
    let first = receiver.next().await;
    let second = receiver.next().await;
    let third = receiver.next().await;
    assert_eq!(first["streams"][0]["path"], "events/a");
    assert_eq!(second["streams"], first["streams"], "the same data again");
    assert_eq!(third["streams"], first["streams"]);
    assert!(
        third["generation"].as_u64() > first["generation"].as_u64(),
        "each attempt is a new wake generation"
    );
    counter_reaches(&server, "eddy_webhook_failures_total", 2).await;
    counter_reaches(&server, "eddy_webhook_deliveries_total", 1).await;
    server.stop().await.expect("stop");
}

/// Regression: a receiver's answer was read whole, whatever its size: a
/// receiver could make the server hold gigabytes. An answer over the
/// limit is a failed delivery (sent again later); one at the limit is
/// read.
#[tokio::test]
async fn a_receivers_answer_is_read_up_to_its_limit() {
    let server = server_with(ServerConfig {
        max_webhook_answer_bytes: 64,
        ..ServerConfig::default()
    })
    .await;
    let mut receiver = Receiver::start(
        [127, 0, 0, 1],
        vec![Answer::DonePadded(65), Answer::DonePadded(64)],
    )
    .await;
    subscribe_and_write(&server, "answers", &receiver.url).await;
    let first = receiver.next().await;
    let second = receiver.next().await;
    assert_eq!(second["streams"], first["streams"], "sent again");
    counter_reaches(&server, "eddy_webhook_failures_total", 1).await;
    counter_reaches(&server, "eddy_webhook_deliveries_total", 1).await;
    server.stop().await.expect("stop");
}

#[tokio::test]
async fn redirects_are_followed_to_permitted_addresses_only() {
    let server = server().await;
    let mut target = Receiver::start([127, 0, 0, 1], vec![Answer::Done]).await;
    let mut redirect =
        Receiver::start([127, 0, 0, 1], vec![Answer::RedirectTo(target.url.clone())]).await;
    subscribe_and_write(&server, "allowed", &redirect.url).await;
    redirect.next().await;
    let delivered = target.next().await;
    assert_eq!(delivered["streams"][0]["path"], "events/a");

    // 127.0.0.2 is loopback too, but not in the allow list.
    let mut internal = Receiver::start([127, 0, 0, 2], vec![Answer::Done]).await;
    let mut redirect = Receiver::start(
        [127, 0, 0, 1],
        vec![Answer::RedirectTo(internal.url.clone())],
    )
    .await;
    subscribe_and_write(&server, "refused", &redirect.url).await;
    redirect.next().await;
    counter_reaches(&server, "eddy_webhook_failures_total", 1).await;
    assert!(
        internal.notifications.try_recv().is_err(),
        "the redirect into a refused address was not followed"
    );
    server.stop().await.expect("stop");
}

/// Regression: with `--auth-token` on, a webhook's callback could never
/// succeed — the server's bearer check and the callback's own token read
/// the same `Authorization` header. The callback token alone is the
/// receiver's credential (it holds no server token), and a wrong one is
/// fenced.
#[tokio::test]
async fn with_auth_on_a_webhook_callback_acknowledges_with_its_own_token() {
    let config = ServerConfig {
        auth_token: Some("client".into()),
        webhook_allowed_networks: vec!["127.0.0.1/32".parse().expect("network")],
        ..ServerConfig::default()
    };
    let server = Server::bind(
        ([127, 0, 0, 1], 0).into(),
        Arc::new(MemoryStorage::new()),
        config,
    )
    .await
    .expect("bind")
    .spawn();
    let mut receiver = Receiver::start([127, 0, 0, 1], vec![Answer::Status(202)]).await;
    let http = reqwest::Client::new();
    let subscription = serde_json::json!({
        "type": "webhook", "pattern": "events/*", "webhook": {"url": receiver.url},
    });
    let created = http
        .put(format!("{}/__ds/subscriptions/hook", server.url()))
        .bearer_auth("client")
        .body(subscription.to_string())
        .send()
        .await
        .expect("subscribe");
    assert_eq!(created.status(), 201);
    let written = http
        .put(format!("{}/events/a", server.url()))
        .bearer_auth("client")
        .header("content-type", "application/json")
        .body("[1]")
        .send()
        .await
        .expect("write");
    assert_eq!(written.status(), 201);
    let notification = receiver.next().await;
    let callback = notification["callback_url"]
        .as_str()
        .expect("a callback url");
    let token = notification["callback_token"].as_str().expect("a token");
    let ack = serde_json::json!({
        "wake_id": notification["wake_id"],
        "generation": notification["generation"],
        "acks": [{"stream": "events/a", "offset": notification["streams"][0]["tail_offset"]}],
        "done": true,
    });
    let stranger = http
        .post(callback)
        .bearer_auth("client")
        .json(&ack)
        .send()
        .await
        .expect("callback");
    assert_eq!(
        stranger.status(),
        409,
        "the server's token is not the wake's"
    );
    let acked = http
        .post(callback)
        .bearer_auth(token)
        .json(&ack)
        .send()
        .await
        .expect("callback");
    assert_eq!(acked.status(), 200, "{:?}", acked.text().await);
    server.stop().await.expect("stop");
}
