//! `eddy status` on a store where one binding is behind, one's handler
//! failed (with its unit pinned), one is caught up and one's checkpoint is
//! unreadable: each shows as such in the table and the JSON, with the
//! handler's error, one has a pending durable wake-up mark and one a
//! deferred one, and `--fail-on-lag` fails only past its limit.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use eddy_projection::{Commit, Declare, Host, RunOptions, SqliteHost, Step};
use std::time::{Duration, SystemTime};

use eddy_streams::rusqlite;
use eddy_streams::{
    JsonStream, MarkOwner, Payload, Report, ReportItem, SqliteStorage, Storage, StreamConfig,
    StreamPath,
};

/// Five numbers; `sum` committed the first two, `mailer` pinned a unit and
/// failed (and its durable wake-up mark waits an hour), `count` caught up,
/// `audit` never ran but a commit left it a pending wake-up mark, and
/// `broken`'s checkpoint is not JSON.
async fn seed(dir: &Path) {
    let sqlite = Arc::new(SqliteStorage::open(dir).expect("open"));
    let store: Arc<dyn Storage> = sqlite.clone();
    let marks = store.wake_marks().expect("SQLite keeps wake-up marks");
    let numbers = JsonStream::<i64>::new("numbers", "numbers").expect("route");
    numbers.create(store.as_ref(), &()).await.expect("create");
    // As a durable attachment of `audit` would: the append marks it.
    let audit = MarkOwner {
        projection: "audit".into(),
        version: 1,
    };
    let marker = marks.register(
        audit,
        Arc::new(|path: &str| (path == "numbers").then(|| "_".to_owned())),
    );
    numbers
        .append(store.as_ref(), &(), &[1, 2, 3, 4, 5])
        .await
        .expect("append");
    drop(marker);
    let host = Host::new(Arc::clone(&store));

    let declare = Declare::<()>::new("sum");
    let input = declare.input("numbers", &numbers);
    let sum = declare
        .fold(0_i64)
        .on(input, |sum, entry, _| sum + entry.item)
        .build()
        .expect("declare");
    let two = RunOptions::default().with_limit(1).with_unit_size(2);
    host.run(&sum.at(()).expect("bind"), two)
        .await
        .expect("run");

    let declare = Declare::<()>::new("count");
    let input = declare.input("numbers", &numbers);
    let count = declare
        .fold(0_i64)
        .on(input, |count, _, _| count + 1)
        .build()
        .expect("declare");
    host.run(&count.at(()).expect("bind"), RunOptions::default())
        .await
        .expect("run");

    let declare = Declare::<()>::new("mailer");
    let input = declare.input("numbers", &numbers);
    let mailer = declare
        .process_each(Commit::at_least_once())
        .on(input, |_, _| Step::<()>::fail("the mail server refused"))
        .build()
        .expect("declare");
    let failed = host
        .run(&mailer.at(()).expect("bind"), RunOptions::default())
        .await;
    assert!(failed.is_err(), "the handler fails");
    let mailer_owner = MarkOwner {
        projection: "mailer".into(),
        version: 1,
    };
    let in_an_hour = SystemTime::now() + Duration::from_secs(3600);
    let due = in_an_hour
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    marks
        .defer(
            &mailer_owner,
            "_",
            "numbers",
            2,
            u64::try_from(due).expect("ms"),
        )
        .await
        .expect("defer");

    // A SQL host's binding: its checkpoint is a row of the store's table.
    let declare = Declare::<()>::new("rows");
    let input = declare.input("numbers", &numbers);
    let rows = declare
        .process_sqlite(
            Commit::transaction(),
            move |_tx: &rusqlite::Transaction<'_>, work| {
                assert_eq!(work.batch.items(input).len(), 5);
                Ok(())
            },
        )
        .expect("declare");
    SqliteHost::new(Arc::clone(&sqlite))
        .run(&rows.at(()).expect("bind"), RunOptions::default())
        .await
        .expect("run");

    let broken = StreamPath::new("__eddy/checkpoints/broken/1/_/0").expect("path");
    store
        .create(
            &broken,
            StreamConfig::json(),
            Payload::from(vec![bytes::Bytes::from_static(b"{\"oops\":1}")]),
        )
        .await
        .expect("a broken checkpoint");
}

fn status(args: &[&str]) -> Output {
    Command::new(crate::crash::eddy_binary())
        .arg("status")
        .args(args)
        .output()
        .expect("run eddy status")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn status_shows_behind_pinned_caught_up_and_failed_bindings() {
    let dir = tempfile::tempdir().expect("tempdir");
    seed(dir.path()).await;
    let data = dir.path().to_string_lossy().into_owned();

    let table = status(&["--data", &data]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}: {table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // BINDING (3 words), STATE, UNITS, LAG MSGS, LAG BYTES.
    assert_eq!(row("sum v1")[3..7], ["behind", "1", "3", "3"], "{table}");
    assert_eq!(
        row("count v1")[3..7],
        ["caught-up", "1", "0", "0"],
        "{table}"
    );
    assert_eq!(row("mailer v1")[3..7], ["failed", "0", "5", "5"], "{table}");
    assert!(row("mailer v1").contains(&"deferred"), "{table}");
    assert_eq!(row("audit v1")[3..7], ["behind", "0", "5", "5"], "{table}");
    assert!(row("audit v1").contains(&"pending"), "{table}");
    assert!(!row("sum v1").contains(&"pending"), "{table}");
    assert_eq!(
        row("rows v1")[3..7],
        ["caught-up", "1", "0", "0"],
        "{table}"
    );
    assert!(
        table.contains("    checkpoint: a row of the store's projection_checkpoints table\n"),
        "{table}"
    );
    assert!(
        table.contains(
            "wake-up mark: 1 commits since it caught up (last on numbers), 0 failed runs\n"
        ),
        "{table}"
    );
    assert!(
        table.contains("wake-up mark: 0 commits since it caught up (last on numbers), 2 failed runs, runs again in "),
        "{table}"
    );
    assert_eq!(row("broken v1")[3], "failed", "{table}");
    assert!(
        table.contains("    last error (handler/failed, ")
            && table.contains("the mail server refused"),
        "{table}"
    );
    assert!(table.contains("    cannot read: "), "{table}");
    assert!(
        table.contains("numbers numbers: at message 2 of 5, 3 behind"),
        "{table}"
    );
    assert!(table.starts_with("streams: 1 (5 bytes)"), "{table}");

    let json = status(&["--data", &data, "--json"]);
    assert!(json.status.success(), "{}", text(&json.stderr));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let binding = |id: &str| {
        json["bindings"]
            .as_array()
            .expect("bindings")
            .iter()
            .find(|b| b["projection"] == id)
            .unwrap_or_else(|| panic!("no binding {id}: {json}"))
            .clone()
    };
    let sum = binding("sum");
    assert_eq!(sum["state"], "behind");
    assert_eq!(sum["inputs"][0]["lag_messages"], 3);
    assert_eq!(sum["inputs"][0]["lag_bytes"], 3);
    assert_eq!(sum["inputs"][0]["path"], "numbers");
    assert!(sum["committed_at_ms"].as_u64().is_some(), "{sum}");
    let mailer = binding("mailer");
    assert_eq!(mailer["state"], "failed");
    assert!(mailer["pending"]["key"].is_string(), "{mailer}");
    assert_eq!(mailer["failure"]["code"], "handler/failed");
    let message = mailer["failure"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the mail server refused"), "{mailer}");
    assert_eq!(mailer["wake_mark"]["failed_runs"], 2);
    assert!(
        mailer["wake_mark"]["deferred_until_ms"].is_u64(),
        "{mailer}"
    );
    let audit = binding("audit");
    assert_eq!(audit["state"], "behind");
    assert_eq!(audit["units"], 0);
    assert_eq!(audit["wake_mark"]["pending_commits"], 1);
    assert!(audit["wake_mark"]["deferred_until_ms"].is_null(), "{audit}");
    assert_eq!(audit["inputs"][0]["lag_messages"], 5);
    assert!(sum["wake_mark"].is_null(), "{sum}");
    assert_eq!(binding("count")["state"], "caught-up");
    assert_eq!(binding("count")["checkpoint_table"], false);
    let rows = binding("rows");
    assert_eq!(rows["state"], "caught-up");
    assert_eq!(rows["checkpoint_table"], true);
    assert_eq!(
        rows["inputs"][0]["offset"],
        binding("count")["inputs"][0]["offset"]
    );
    let broken = binding("broken");
    assert_eq!(broken["state"], "failed");
    assert!(broken["error"].is_string(), "{broken}");
    assert_eq!(json["streams"]["count"], 1);
    assert!(json["streams"]["internal"].as_u64() >= Some(4), "{json}");

    // `mailer` never committed: 5 behind.
    let over = status(&["--data", &data, "--fail-on-lag", "4"]);
    assert!(!over.status.success());
    assert!(
        text(&over.stderr).contains("mailer"),
        "{}",
        text(&over.stderr)
    );
    let within = status(&["--data", &data, "--fail-on-lag", "5"]);
    assert!(within.status.success(), "{}", text(&within.stderr));

    // The same through a running server.
    let (mut server, url) = crate::crash::serve(
        crate::crash::eddy_binary(),
        &["--storage", "sqlite", "--data", &data],
    );
    let remote = status(&["--server", &url, "--json"]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(remote.status.success(), "{}", text(&remote.stderr));
    let remote: serde_json::Value = serde_json::from_slice(&remote.stdout).expect("JSON");
    // The server reports its store's marks and its SQL host's table too.
    assert_eq!(remote["bindings"], json["bindings"]);
}

/// A component's report in the store (an outbox bridge's parked rows, as
/// `eddy-bridge` publishes them) shows in the table and the JSON.
#[tokio::test]
async fn status_shows_what_components_beside_the_store_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = SqliteStorage::open(dir.path()).expect("open");
        let items = (0..3)
            .map(|n| ReportItem {
                subject: format!("pk=ShipmentSummary#sh-{n}|sk=row"),
                code: "stream/closed".into(),
                message: format!("ShipmentEvents#sh-{n}@1: the stream is closed"),
                since_ms: 0,
            })
            .collect();
        Report::new("bridge/shipments", "3 parked rows")
            .with_items(3, items)
            .publish(&store)
            .await
            .expect("publish");
    }
    let data = dir.path().to_string_lossy().into_owned();

    let table = status(&["--data", &data]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert!(
        table.contains("bridge/shipments: 3 parked rows (since "),
        "{table}"
    );
    assert!(
        table.contains("    pk=ShipmentSummary#sh-2|sk=row stream/closed (",)
            && table.contains("): ShipmentEvents#sh-2@1: the stream is closed\n"),
        "{table}"
    );

    let json = status(&["--data", &data, "--json"]);
    assert!(json.status.success(), "{}", text(&json.stderr));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let report = &json["reports"][0];
    assert_eq!(report["source"], "bridge/shipments");
    assert_eq!(report["items_total"], 3);
    assert_eq!(report["items"][1]["code"], "stream/closed");
}
