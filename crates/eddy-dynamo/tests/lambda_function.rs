//! The `lambda` example run as Lambda runs it: the built binary under a
//! local Lambda Runtime API (the documented `2018-06-01` interface: next
//! invocation, invocation response, invocation and init errors), fed
//! DynamoDB Streams records read from moto, keeping its rows in moto.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use eddy_dynamo::{
    get_str, get_u64, ChangeFeed, ChangeRecord, Delete, Entity, EventItem, KeyComposite, Table,
    TableSchema,
};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Mutex};

use crate::common::{app, line, orders, placed, TestTable};
use crate::moto::{endpoint, MotoTable};

/// What the function sent back for an invocation (or for its start-up).
#[derive(Debug, PartialEq)]
enum Answer {
    Response(Value),
    Error(Value),
}

/// The runtime API's state: invocations waiting for `next`, and the
/// answers the function posted, with the request id they name (`init` for
/// a start-up error).
struct Runtime {
    invocations: Mutex<mpsc::UnboundedReceiver<(String, Value)>>,
    answers: mpsc::UnboundedSender<(String, Answer)>,
}

/// `GET /runtime/invocation/next`: long-polls for the next invocation and
/// hands it over with the headers the runtime client requires.
async fn next(State(runtime): State<Arc<Runtime>>) -> Result<(HeaderMap, String), StatusCode> {
    let (id, event) = runtime
        .invocations
        .lock()
        .await
        .recv()
        .await
        .ok_or(StatusCode::GONE)?;
    let deadline = SystemTime::now() + Duration::from_secs(300);
    let deadline = deadline.duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    set("lambda-runtime-aws-request-id", id);
    set(
        "lambda-runtime-deadline-ms",
        deadline.as_millis().to_string(),
    );
    set(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:123456789012:function:order-summaries".into(),
    );
    set(
        "lambda-runtime-trace-id",
        "Root=1-00000000-000000000000000000000000".into(),
    );
    Ok((headers, event.to_string()))
}

fn parsed(body: String) -> Value {
    serde_json::from_str(&body).unwrap_or(Value::String(body))
}

/// Starts the runtime API; returns its `host:port`, the invocation queue
/// and the answers.
async fn runtime_api() -> (
    String,
    mpsc::UnboundedSender<(String, Value)>,
    mpsc::UnboundedReceiver<(String, Answer)>,
) {
    let (invoke, invocations) = mpsc::unbounded_channel();
    let (answers, answered) = mpsc::unbounded_channel();
    let runtime = Arc::new(Runtime {
        invocations: Mutex::new(invocations),
        answers,
    });
    let answer = |kind: fn(Value) -> Answer| {
        move |State(runtime): State<Arc<Runtime>>, Path(id): Path<String>, body: String| async move {
            let _ = runtime.answers.send((id, kind(parsed(body))));
            StatusCode::ACCEPTED
        }
    };
    let init_error = |State(runtime): State<Arc<Runtime>>, body: String| async move {
        let _ = runtime
            .answers
            .send(("init".into(), Answer::Error(parsed(body))));
        StatusCode::ACCEPTED
    };
    let routes = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(answer(Answer::Response)),
        )
        .route(
            "/2018-06-01/runtime/invocation/{id}/error",
            post(answer(Answer::Error)),
        )
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state(runtime);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, routes).await });
    (address, invoke, answered)
}

/// The example binary, which `cargo test --features aws,lambda` builds
/// beside this test binary (`target/<profile>/deps/` and
/// `target/<profile>/examples/`) before running any test.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let binary = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples").join("lambda"))
        .unwrap();
    assert!(
        binary.exists(),
        "{} is missing: `cargo test -p eddy-dynamo --features aws,lambda` builds it",
        binary.display()
    );
    binary
}

/// The function process and its runtime API.
struct Function {
    process: tokio::process::Child,
    invoke: mpsc::UnboundedSender<(String, Value)>,
    answers: mpsc::UnboundedReceiver<(String, Answer)>,
    invoked: usize,
}

impl Function {
    /// Starts the binary with the environment Lambda gives a function, and
    /// the standard AWS variables pointing at moto.
    async fn start(endpoint: &str, table: &str) -> Function {
        let (api, invoke, answers) = runtime_api().await;
        let process = tokio::process::Command::new(example_binary())
            .env_clear()
            .envs([
                ("AWS_LAMBDA_RUNTIME_API", api.as_str()),
                ("AWS_LAMBDA_FUNCTION_NAME", "order-summaries"),
                ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
                ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"),
                ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/order-summaries"),
                ("AWS_LAMBDA_LOG_STREAM_NAME", "test"),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
                ("AWS_ENDPOINT_URL", endpoint),
                ("EDDY_TABLE", table),
                ("RUST_LOG", "warn"),
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Function {
            process,
            invoke,
            answers,
            invoked: 0,
        }
    }

    /// Invokes the function with a DynamoDB Streams event of `records` and
    /// waits for its answer (failing if the process exits first).
    async fn invoke(&mut self, records: &[&ChangeRecord]) -> Answer {
        self.invoked += 1;
        let id = format!("request-{}", self.invoked);
        let event = json!({ "Records": records });
        self.invoke.send((id.clone(), event)).unwrap();
        tokio::select! {
            answer = self.answers.recv() => {
                let (answered, answer) = answer.unwrap();
                assert_eq!(answered, id, "{answer:?}");
                answer
            }
            status = self.process.wait() => panic!("the function exited: {status:?}"),
            () = tokio::time::sleep(Duration::from_secs(300)) => panic!("no answer to {id}"),
        }
    }
}

/// The stream records of the events, keyed by (order id, version).
async fn inserts(moto: &MotoTable) -> Vec<((String, u64), ChangeRecord)> {
    let records = moto.read_changes(None, 1000).await.unwrap().into_records();
    records
        .into_iter()
        .filter(|r| r.event_name == "INSERT")
        .filter_map(|r| {
            let event = EventItem::from_item(&r.change.new_image).ok()??;
            let order = event.stream_id.get("orderId")?.to_owned();
            Some(((order, event.version), r))
        })
        .collect()
}

fn record<'a>(
    records: &'a [((String, u64), ChangeRecord)],
    order: &str,
    version: u64,
) -> &'a ChangeRecord {
    records
        .iter()
        .find(|((o, v), _)| o == order && *v == version)
        .map(|(_, r)| r)
        .unwrap()
}

/// Regression (the Lambda cold-start loss): the example kept its read
/// model in an SQLite file under `/tmp` while the events lived in DynamoDB,
/// so a fresh instance given a batch starting at version 3 filled the gap
/// from an empty file, wrote nothing and acknowledged the record: the event
/// was lost. The function now keeps its rows in DynamoDB and fills gaps
/// from it; a gap it cannot fill fails the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lambda_function_folds_streams_records_into_dynamodb_from_a_cold_start() {
    let Some(url) = endpoint() else { return };
    let Some(moto) = MotoTable::create(TableSchema::single_table("lambda")).await else {
        return;
    };
    let t = TestTable::new(moto.clone(), moto.clone(), "dynamodb");
    let stream = orders(&t);
    for (order, customer) in [("o-1", "ann"), ("o-2", "bob")] {
        let id = stream.id([("orderId", order)]).unwrap();
        let events = [placed(customer), line(1, 10), line(2, 5)];
        stream.append(&id, &events, 0).await.unwrap();
    }
    let records = inserts(&moto).await;
    let mut function = Function::start(&url, &moto.table.schema().name).await;

    // A fresh instance whose first record is o-1's version 3: versions 1
    // and 2 went to an instance that is gone.
    let answer = function.invoke(&[record(&records, "o-1", 3)]).await;
    assert_eq!(answer, Answer::Response(json!({ "batchItemFailures": [] })));
    let summaries: Entity<Value> = Entity::new(
        t.table.clone(),
        app(),
        "OrderSummary",
        KeyComposite::new(&["orderId"], &[]),
    );
    let row = summaries.get_item(&"o-1").await.unwrap().expect("the row");
    assert_eq!(get_str(&row, "customer"), Some("ann"));
    assert_eq!(get_u64(&row, "totalCents"), Some(20));
    assert_eq!(get_u64(&row, "version"), Some(3));

    // A gap that cannot be filled (o-2's version 2 is gone from the table)
    // fails its record, and only it: o-1's redelivered record is fine.
    let gone = record(&records, "o-2", 2).change.keys.clone().into();
    moto.table.delete_item(Delete::new(gone)).await.unwrap();
    let failed = record(&records, "o-2", 3);
    let answer = function.invoke(&[record(&records, "o-1", 3), failed]).await;
    let sequence = failed.change.sequence_number.clone().unwrap();
    assert_eq!(
        answer,
        Answer::Response(json!({ "batchItemFailures": [{ "itemIdentifier": sequence }] }))
    );
    assert_eq!(summaries.get_item(&"o-2").await.unwrap(), None);
    let row = summaries.get_item(&"o-1").await.unwrap().expect("the row");
    assert_eq!(
        get_u64(&row, "totalCents"),
        Some(20),
        "nothing folded twice"
    );
}
