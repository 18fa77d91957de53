//! Change-feed positions: reading in batches of any size from any saved
//! position yields every later record once, in the feed's order.

use eddy_dynamo::{
    n, s, ChangeFeed, Delete, EmbeddedTable, FeedPosition, FeedRead, Item, Put, Table, TableSchema,
};
use proptest::prelude::*;

/// A position as a consumer keeps it: saved as text, read back.
pub fn saved(position: &FeedPosition) -> FeedPosition {
    position.to_string().parse().unwrap()
}

/// The sequence numbers of a read.
pub fn sequences(read: &FeedRead) -> Vec<String> {
    read.records()
        .iter()
        .filter_map(|r| r.change.sequence_number.clone())
        .collect()
}

/// Reads `feed` from `after` to its end in batches of `sizes` (taken in
/// turn), saving each position as text; the sequence numbers read.
pub async fn read_in_batches(
    feed: &dyn ChangeFeed,
    after: Option<FeedPosition>,
    sizes: &[usize],
) -> Vec<String> {
    let mut after = after;
    let mut seen = Vec::new();
    for size in sizes.iter().cycle() {
        let read = feed.read_changes(after.as_ref(), *size).await.unwrap();
        let Some(last) = read.last_position() else {
            break;
        };
        assert!(
            read.len() <= *size,
            "{} records in a batch of {size}",
            read.len()
        );
        after = Some(saved(last));
        seen.extend(sequences(&read));
    }
    seen
}

/// Writes `changes` items: puts of new and known keys, and deletes.
async fn write(table: &EmbeddedTable, changes: &[(u8, bool)]) {
    for (at, (key, delete)) in changes.iter().enumerate() {
        let key = Item::from([
            ("pk".to_owned(), s(format!("k{key}"))),
            ("sk".to_owned(), s("x")),
        ]);
        if *delete {
            table.delete_item(Delete::new(key)).await.unwrap();
        } else {
            let mut item = key;
            item.insert("at".to_owned(), n(at as u64));
            table.put_item(Put::new(item)).await.unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The embedded feed (memory and SQLite): from the start or after any
    /// record, in batches of any sizes, every later record once, in order.
    #[test]
    fn batches_of_any_size_from_any_saved_position_read_every_record_once(
        changes in prop::collection::vec((0..6u8, prop::bool::weighted(0.2)), 0..30),
        start in 0..31usize,
        sizes in prop::collection::vec(1..8usize, 1..6),
        sqlite in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let schema = TableSchema::single_table("feed");
            let table = if sqlite {
                EmbeddedTable::open_sqlite(dir.path().join("t.db"), schema).unwrap()
            } else {
                EmbeddedTable::memory(schema)
            };
            write(&table, &changes).await;
            let all = table.read_changes(None, 10_000).await.unwrap();
            let start = start.min(all.len());
            let after = start.checked_sub(1).map(|i| saved(all.position_after(i).unwrap()));
            let seen = read_in_batches(&table, after, &sizes).await;
            prop_assert_eq!(&seen[..], &sequences(&all)[start..]);
            Ok(())
        })?;
    }
}
