//! State streams read what the `@durable-streams/state` package writes:
//! `upsert`, null values, control headers; and a message that does not
//! decode never discards silently what was read before it.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_streams::{
    Append, Change, Control, ControlMessage, MemoryStorage, Operation, Payload, Skipped,
    SqliteStorage, StateMessage, StateStream, Storage, StreamConfig, StreamPath, Undecodable,
};
use serde_json::{json, Value};

/// Messages as the package's helpers (and, for the null value, its
/// `ChangeEvent` type) produce them, byte for byte.
const PACKAGE_WRITES: [&str; 8] = [
    r#"{"type":"card","key":"a","value":{"id":"a","total":1},"headers":{"txid":"t1","timestamp":"2025-01-15T10:30:00Z","operation":"insert"}}"#,
    r#"{"type":"card","key":"a","value":{"id":"a","total":2},"old_value":{"id":"a","total":1},"headers":{"operation":"update"}}"#,
    r#"{"type":"card","key":"b","value":{"id":"b","total":3},"headers":{"operation":"upsert"}}"#,
    r#"{"type":"card","key":"b","value":{"id":"b","total":4},"headers":{"operation":"upsert"}}"#,
    r#"{"type":"card","key":"a","headers":{"operation":"delete"}}"#,
    r#"{"type":"setting","key":"theme","value":"dark","headers":{"operation":"insert"}}"#,
    r#"{"type":"setting","key":"font","value":null,"headers":{"operation":"insert"}}"#,
    r#"{"headers":{"control":"snapshot-start","offset":"123456_000"}}"#,
];

/// A message no reader can apply: an operation the protocol does not have.
const UNDECODABLE: &str = r#"{"type":"card","key":"z","value":{},"headers":{"operation":"merge"}}"#;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// An untyped declaration: materializing reads whatever collections the
/// stream holds.
fn foreign() -> StateStream {
    StateStream::new("Foreign/State", "foreign").expect("route")
}

/// Each store the materializer is checked on, in a temporary directory
/// kept alive beside it.
fn stores() -> Vec<(&'static str, Arc<dyn Storage>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = Arc::new(SqliteStorage::open(dir.path()).expect("open sqlite"));
    vec![
        ("memory", Arc::new(MemoryStorage::new()), None),
        ("sqlite", sqlite, Some(dir)),
    ]
}

/// Creates `foreign` and appends `lines` as they are, one message each.
async fn write_raw(store: &dyn Storage, lines: &[&str]) -> StreamPath {
    let path = StreamPath::new("foreign").expect("path");
    store
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    let messages = lines.iter().map(|l| l.as_bytes().to_vec().into()).collect();
    store
        .append(&path, Append::messages(messages))
        .await
        .expect("append");
    path
}

#[test]
fn every_message_the_package_writes_decodes_and_encodes_back_unchanged() {
    for line in PACKAGE_WRITES {
        let message =
            StateMessage::decode(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        let again: Value =
            serde_json::from_slice(&message.encode().expect("encode")).expect("json");
        let written: Value = serde_json::from_str(line).expect("json");
        assert_eq!(again, written, "{line}");
    }
}

#[test]
fn upsert_inserts_or_updates_and_a_null_value_is_a_row() {
    runtime().block_on(async {
        for (name, store, _dir) in stores() {
            write_raw(store.as_ref(), &PACKAGE_WRITES).await;
            let state = foreign()
                .materialize(store.as_ref(), &())
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let expected: BTreeMap<String, BTreeMap<String, Value>> =
                serde_json::from_value(json!({
                    "card": { "b": { "id": "b", "total": 4 } },
                    "setting": { "theme": "dark", "font": null },
                }))
                .expect("expected");
            assert_eq!(state.collections, expected, "{name}");
            assert!(state.in_snapshot, "{name}: the snapshot started");
        }
    });
}

#[test]
fn an_undecodable_message_fails_the_read_with_its_offset() {
    runtime().block_on(async {
        for (name, store, _dir) in stores() {
            let path = write_raw(
                store.as_ref(),
                &[PACKAGE_WRITES[0], UNDECODABLE, PACKAGE_WRITES[5]],
            )
            .await;
            let second = store.head(&path).await.expect("head").tail.with_position(1);
            let err = foreign()
                .materialize(store.as_ref(), &())
                .await
                .expect_err("the second message does not decode");
            assert_eq!(err.code(), "state/undecodable", "{name}: {err}");
            assert!(
                err.to_string().contains(&second.to_string()),
                "{name}: {err}"
            );
        }
    });
}

#[test]
fn undecodable_messages_can_be_skipped_and_are_listed() {
    runtime().block_on(async {
        for (name, store, _dir) in stores() {
            let path = write_raw(
                store.as_ref(),
                &[PACKAGE_WRITES[0], UNDECODABLE, "42", PACKAGE_WRITES[5]],
            )
            .await;
            let at = |n| store_offset(n, &path, store.as_ref());
            let state = foreign()
                .materialize_with(store.as_ref(), &(), Undecodable::Skip)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let kept: Vec<(&str, Vec<&str>)> = state
                .collections
                .iter()
                .map(|(c, rows)| (c.as_str(), rows.keys().map(String::as_str).collect()))
                .collect();
            assert_eq!(
                kept,
                [("card", vec!["a"]), ("setting", vec!["theme"])],
                "{name}"
            );
            let offsets: Vec<_> = state.skipped.iter().map(|s: &Skipped| s.offset).collect();
            assert_eq!(offsets, [at(1).await, at(2).await], "{name}");
            assert!(
                state.skipped[0].reason.contains("merge"),
                "{name}: {:?}",
                state.skipped
            );
        }
    });
}

/// The offset of the `n`th message (from 0) of the stream at `path`.
async fn store_offset(n: u64, path: &StreamPath, store: &dyn Storage) -> eddy_streams::Offset {
    store.head(path).await.expect("head").tail.with_position(n)
}

#[test]
fn controls_keep_their_offset_and_other_headers_when_written() {
    runtime().block_on(async {
        let store = MemoryStorage::new();
        let stream = foreign();
        stream.create(&store, &()).await.expect("create");
        let reset = ControlMessage::new(Control::Reset).with_offset("123456_000");
        assert_eq!(reset.offset(), Some("123456_000"));
        stream
            .append(&store, &(), &[reset.clone().into()])
            .await
            .expect("append");
        let path = stream.path(&()).expect("path");
        let chunk = store
            .read(&path, eddy_streams::ReadFrom::Beginning, 1 << 20)
            .await
            .expect("read");
        let wire: Value = serde_json::from_slice(&chunk.messages[0]).expect("json");
        assert_eq!(
            wire,
            json!({"headers": {"control": "reset", "offset": "123456_000"}})
        );
        assert_eq!(
            StateMessage::decode(&chunk.messages[0]).expect("decode"),
            StateMessage::Control(reset)
        );
    });
}

#[test]
fn encode_refuses_what_decode_refuses_and_null_is_a_value() {
    let change = |operation, value| {
        StateMessage::Change(Change {
            collection: "setting".into(),
            key: "font".into(),
            operation,
            value,
            old_value: None,
            headers: Default::default(),
        })
    };
    for operation in [Operation::Insert, Operation::Update, Operation::Upsert] {
        let err = change(operation, None).encode().expect_err("no value");
        assert_eq!(err.code(), "state/invalid", "{operation:?}");
        let null = change(operation, Some(Value::Null))
            .encode()
            .expect("null is a value");
        let decoded = StateMessage::decode(&null).expect("decode");
        assert_eq!(
            decoded,
            change(operation, Some(Value::Null)),
            "{operation:?}"
        );
    }
    let delete = change(Operation::Delete, None)
        .encode()
        .expect("a delete needs none");
    assert_eq!(
        serde_json::from_slice::<Value>(&delete).expect("json"),
        json!({"type": "setting", "key": "font", "headers": {"operation": "delete"}})
    );
    let mut twice = ControlMessage::new(Control::Reset);
    twice.headers.insert("operation".into(), json!("insert"));
    let err = StateMessage::from(twice)
        .encode()
        .expect_err("a kind header twice");
    assert_eq!(err.code(), "state/invalid");
    let upsert = r#"{"type":"setting","key":"font","headers":{"operation":"upsert"}}"#;
    let err = StateMessage::decode(upsert.as_bytes()).expect_err("an upsert needs a value");
    assert_eq!(err.code(), "state/invalid");
}
