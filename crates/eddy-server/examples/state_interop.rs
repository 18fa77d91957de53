//! The Rust side of the state-stream interoperability check with the
//! `@durable-streams/state` package (`scripts/state/interop.mjs`), through
//! `eddy serve`:
//!
//! - `read URL PATH [--skip-undecodable]` materializes the state stream at
//!   PATH with [`StateStream`] and prints one JSON object: every message
//!   decoded and encoded again (`messages`), the rows by collection and key
//!   (`collections`), and what was skipped (`skipped`, offsets). A message
//!   that does not decode fails the read unless `--skip-undecodable`.
//! - `write URL PATH` creates PATH and writes a state stream with
//!   [`StateStream`]: typed upserts and removes, inserts and updates with
//!   headers, an upsert, a `null` value, and controls with an `offset`.
//!
//! ```sh
//! cargo run -p eddy-server --example state_interop -- read http://127.0.0.1:4437 state/a
//! ```

use anyhow::{bail, Context};
use eddy_server::RemoteStorage;
use eddy_streams::{
    Append, Change, Control, ControlMessage, Offset, Operation, ReadFrom, StateMessage,
    StateStream, Storage, Undecodable,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// A row of the `card` collection.
#[derive(Serialize, Deserialize)]
struct Card {
    id: String,
    total: f64,
}

/// A row of the `setting` collection.
#[derive(Serialize, Deserialize)]
struct Setting {
    name: String,
    value: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, base, path, rest) = match args.as_slice() {
        [command, base, path, rest @ ..] => (command.as_str(), base, path, rest),
        _ => bail!("usage: state_interop read|write URL PATH [--skip-undecodable]"),
    };
    let store = RemoteStorage::new(base)?;
    let stream = StateStream::new("Interop/State", path)?
        .collection::<Card>("card", "id")
        .collection::<Setting>("setting", "name");
    match command {
        "read" => {
            let skip = rest.iter().any(|a| a == "--skip-undecodable");
            let read = read(&store, &stream, skip).await?;
            println!("{}", serde_json::to_string(&read)?);
        }
        "write" => write(&store, &stream).await?,
        other => bail!("unknown command `{other}`"),
    }
    Ok(())
}

/// Every message decoded and encoded again, and the materialized state.
async fn read(store: &RemoteStorage, stream: &StateStream, skip: bool) -> anyhow::Result<Value> {
    let undecodable = if skip {
        Undecodable::Skip
    } else {
        Undecodable::Fail
    };
    let state = stream.materialize_with(store, &(), undecodable).await?;
    let path = stream.path(&())?;
    let mut messages = Vec::new();
    let mut from = ReadFrom::Beginning;
    loop {
        let chunk = store.read(&path, from, 1 << 20).await?;
        for message in &chunk.messages {
            // What was skipped above is listed there, not here.
            if let Ok(decoded) = StateMessage::decode(message) {
                messages.push(serde_json::from_slice::<Value>(&decoded.encode()?)?);
            }
        }
        if chunk.up_to_date {
            break;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
    let skipped: Vec<Value> = state
        .skipped
        .iter()
        .map(|s| json!({ "offset": s.offset.to_string(), "reason": s.reason }))
        .collect();
    Ok(json!({
        "messages": messages,
        "collections": state.collections,
        "skipped": skipped,
    }))
}

/// Writes the Rust side's state stream: typed helpers first, then changes
/// built by hand, a `null` row (appended without the typed check, which
/// wants a row with its key field) and controls with an offset.
async fn write(store: &RemoteStorage, stream: &StateStream) -> anyhow::Result<()> {
    let card = |id: &str, total| Card {
        id: id.into(),
        total,
    };
    let created = stream.create(store, &()).await?;
    let control = |control, at: Offset| {
        StateMessage::from(ControlMessage::new(control).with_offset(at.to_string()))
    };
    let headers = |pairs: &[(&str, &str)]| -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect()
    };
    let change = |collection: &str, key: &str, operation, value: Option<Value>, old_value| {
        StateMessage::Change(Change {
            collection: collection.into(),
            key: key.into(),
            operation,
            value,
            old_value,
            headers: Map::new(),
        })
    };
    let row = |value: &Card| serde_json::to_value(value).context("row");
    let mut insert_c = change(
        "card",
        "c",
        Operation::Insert,
        Some(row(&card("c", 5.0))?),
        None,
    );
    if let StateMessage::Change(change) = &mut insert_c {
        change.headers = headers(&[("txid", "tx-1"), ("timestamp", "2025-01-15T10:30:00Z")]);
    }
    let appended = stream
        .append(
            store,
            &(),
            &[
                // The package's stream DB applies a reset only after a
                // change of each of its collections in the same batch.
                stream.upsert("card", &card("x", 0.0))?,
                control(Control::Reset, created.info.tail.advanced(1)),
                control(Control::SnapshotStart, created.info.tail.advanced(2)),
                stream.upsert("card", &card("a", 1.0))?,
                stream.upsert("card", &card("b", 2.0))?,
                stream.upsert("card", &card("a", 3.0))?,
                stream.remove("card", "b")?,
                insert_c,
                change(
                    "card",
                    "c",
                    Operation::Update,
                    Some(row(&card("c", 6.0))?),
                    Some(row(&card("c", 5.0))?),
                ),
                change(
                    "card",
                    "d",
                    Operation::Upsert,
                    Some(row(&card("d", 7.0))?),
                    None,
                ),
                change(
                    "card",
                    "d",
                    Operation::Upsert,
                    Some(row(&card("d", 8.0))?),
                    None,
                ),
                stream.upsert(
                    "setting",
                    &Setting {
                        name: "theme".into(),
                        value: "dark".into(),
                    },
                )?,
            ],
        )
        .await?;
    let null_row = change(
        "setting",
        "font",
        Operation::Insert,
        Some(Value::Null),
        None,
    );
    let tail = appended.next_offset.advanced(1);
    let path = stream.path(&())?;
    store
        .append(
            &path,
            Append::messages(vec![
                null_row.encode()?,
                control(Control::SnapshotEnd, tail).encode()?,
            ]),
        )
        .await?;
    Ok(())
}
