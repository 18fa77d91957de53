//! Typed declarations: routes, JSON streams and state streams.

use bytes::Bytes;
use eddy_streams::{
    Append, JsonStream, MemoryStorage, Operation, Payload, ReadFrom, Route, StateMessage,
    StateStream, Storage, StreamConfig, StreamPath,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Card {
    issue_id: String,
    total: f64,
}

fn board() -> StateStream {
    StateStream::new("Tracker/Board", "board/:workspaceId")
        .expect("route")
        .collection::<Card>("card", "issueId")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn routes_render_and_parse_with_shared_params() {
    let facts = Route::new("facts/:workspaceId").expect("route");
    let all = Route::new("facts").expect("route");
    let params = json!({ "workspaceId": "ws-42", "region": "eu" });
    assert_eq!(
        facts.render(&params).expect("render").as_str(),
        "facts/ws-42"
    );
    assert_eq!(
        all.render(&params).expect("render").as_str(),
        "facts",
        "a route with fewer params ignores the rest"
    );
    assert_eq!(facts.params().collect::<Vec<_>>(), ["workspaceId"]);
    let missing = facts.render(&json!({})).err().map(|e| e.code());
    assert_eq!(missing, Some("route/invalid"));
    assert!(facts.parse::<serde_json::Value>("facts/a/b").is_err());
}

#[test]
fn json_stream_round_trips_items_and_rejects_foreign_messages() {
    runtime().block_on(async {
        let store = MemoryStorage::new();
        let numbers = JsonStream::<f64>::new("Tracker/Numbers", "numbers").expect("declare");
        numbers.create(&store, &()).await.expect("create");
        numbers
            .append(&store, &(), &[1.5, 2.0])
            .await
            .expect("append");
        let page = numbers
            .read(&store, &(), ReadFrom::Beginning)
            .await
            .expect("read");
        assert_eq!(page.items, vec![1.5, 2.0]);
        assert!(page.up_to_date);
        let path = numbers.path(&()).expect("path");
        store
            .append(&path, Append::body(r#""not a number""#))
            .await
            .expect("raw append");
        let err = numbers.read(&store, &(), ReadFrom::Beginning).await.err();
        assert_eq!(err.map(|e| e.code()), Some("item/invalid"));
    });
}

#[test]
fn json_stream_encodes_one_message_per_item() {
    let cards = JsonStream::<Card>::new("Tracker/Cards", "cards").expect("declare");
    let items: Vec<Card> = ["a", "bb", ""]
        .iter()
        .enumerate()
        .map(|(n, id)| Card {
            issue_id: (*id).to_owned(),
            total: n as f64 + 0.5,
        })
        .collect();
    let messages = cards.encode(&items).expect("encode");
    assert_eq!(messages.len(), items.len());
    for (message, item) in messages.iter().zip(&items) {
        assert_eq!(message.as_ref(), serde_json::to_vec(item).expect("json"));
        assert_eq!(&cards.decode(message).expect("decode"), item);
    }
    assert!(cards.encode(&[]).expect("encode").is_empty());
}

#[test]
fn state_messages_use_the_state_protocol_shape() {
    let change = board()
        .upsert(
            "card",
            &Card {
                issue_id: "a".into(),
                total: 1.0,
            },
        )
        .expect("upsert");
    let wire: serde_json::Value =
        serde_json::from_slice(&change.encode().expect("encode")).expect("json");
    assert_eq!(
        wire,
        json!({"type": "card", "key": "a", "value": {"issueId": "a", "total": 1.0}, "headers": {"operation": "update"}})
    );
    let reset: serde_json::Value =
        serde_json::from_slice(&StateMessage::reset().encode().expect("encode")).expect("json");
    assert_eq!(reset, json!({"headers": {"control": "reset"}}));
    let decoded = StateMessage::decode(br#"{"type":"card","key":"b","old_value":{"issueId":"b","total":1},"headers":{"operation":"delete","txid":"7"}}"#)
        .expect("decode");
    let StateMessage::Change(change) = decoded else {
        panic!("a change")
    };
    assert_eq!(
        (change.operation, change.key.as_str()),
        (Operation::Delete, "b")
    );
    assert_eq!(change.headers.get("txid"), Some(&json!("7")));
    assert!(StateMessage::decode(br#"{"headers":{}}"#).is_err());
    assert!(
        StateMessage::decode(br#"{"type":"card","key":"x","headers":{"operation":"insert"}}"#)
            .is_err(),
        "an insert needs a value"
    );
}

#[test]
fn invalid_state_changes_are_refused_and_write_nothing() {
    runtime().block_on(async {
        let store = MemoryStorage::new();
        let board = board();
        let params = json!({ "workspaceId": "ws-1" });
        board.create(&store, &params).await.expect("create");
        let good = board.upsert("card", &Card { issue_id: "a".into(), total: 1.0 }).expect("upsert");
        let unknown = StateMessage::decode(br#"{"type":"lane","key":"x","value":{},"headers":{"operation":"insert"}}"#).expect("decode");
        let wrong_type = StateMessage::decode(br#"{"type":"card","key":"x","value":{"issueId":"x"},"headers":{"operation":"insert"}}"#).expect("decode");
        let wrong_key = StateMessage::decode(br#"{"type":"card","key":"y","value":{"issueId":"x","total":1},"headers":{"operation":"insert"}}"#).expect("decode");
        for bad in [unknown, wrong_type, wrong_key] {
            let err = board.append(&store, &params, &[good.clone(), bad]).await.err();
            assert_eq!(err.map(|e| e.code()), Some("state/invalid"));
        }
        let path = board.path(&params).expect("path");
        assert_eq!(store.head(&path).await.expect("head").tail.position(), 0, "nothing was written");
    });
}

#[test]
fn materialize_applies_changes_resets_and_snapshots() {
    runtime().block_on(async {
        let store = MemoryStorage::new();
        let board = board();
        let params = json!({ "workspaceId": "ws-2" });
        board.create(&store, &params).await.expect("create");
        let card = |id: &str, total| {
            board
                .upsert(
                    "card",
                    &Card {
                        issue_id: id.into(),
                        total,
                    },
                )
                .expect("upsert")
        };
        board
            .append(
                &store,
                &params,
                &[
                    card("a", 1.0),
                    card("b", 2.0),
                    card("a", 3.0),
                    board.remove("card", "b").expect("remove"),
                ],
            )
            .await
            .expect("append");
        let rows = board
            .materialize(&store, &params)
            .await
            .expect("materialize")
            .rows::<Card>("card")
            .expect("rows");
        assert_eq!(
            rows.values().cloned().collect::<Vec<_>>(),
            [Card {
                issue_id: "a".into(),
                total: 3.0
            }]
        );
        board
            .append(
                &store,
                &params,
                &[
                    StateMessage::reset(),
                    StateMessage::snapshot_start(),
                    card("c", 9.0),
                    StateMessage::snapshot_end(),
                ],
            )
            .await
            .expect("append");
        let state = board
            .materialize(&store, &params)
            .await
            .expect("materialize");
        assert!(!state.in_snapshot);
        assert_eq!(
            state
                .rows::<Card>("card")
                .expect("rows")
                .keys()
                .collect::<Vec<_>>(),
            ["c"],
            "reset forgot a"
        );
    });
}

#[test]
fn state_stream_controls_are_written_in_order() {
    runtime().block_on(async {
        let store = MemoryStorage::new();
        let path = StreamPath::new("board/ws-3").expect("path");
        store
            .create(&path, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let board = board();
        board
            .append(
                &store,
                &json!({ "workspaceId": "ws-3" }),
                &[StateMessage::snapshot_start(), StateMessage::snapshot_end()],
            )
            .await
            .expect("append");
        let chunk = store
            .read(&path, ReadFrom::Beginning, 1 << 20)
            .await
            .expect("read");
        let controls: Vec<StateMessage> = chunk
            .messages
            .iter()
            .map(|m: &Bytes| StateMessage::decode(m).expect("decode"))
            .collect();
        assert_eq!(
            controls,
            [StateMessage::snapshot_start(), StateMessage::snapshot_end()]
        );
    });
}
