//! What an embedded storage backend provides: keyed items, partitions of the
//! table and its indexes, write transactions that apply writes and change
//! records atomically, and consumer checkpoints. All table semantics live in
//! the engine above it.

use crate::change_feed::ChangeRecord;
use crate::error::TableError;
use crate::item::Item;

/// One write of a committed transaction, with keys already encoded.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    /// Store the item under `(pk, sk)`, member of the listed index partitions.
    Put {
        pk: String,
        sk: String,
        item: Item,
        /// `(index name, encoded index partition value)` for each index the item is in.
        indexes: Vec<(String, String)>,
    },
    /// Remove the item under `(pk, sk)` and its index entries.
    Delete { pk: String, sk: String },
}

/// The inside of a write transaction: what it reads is what it writes
/// over. No other writer of the same storage (another handle on the same
/// SQLite file included) commits between its first read and its commit.
pub(crate) trait Txn {
    /// The item stored under the encoded key.
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError>;
    /// The sequence number of the last record, 0 when there is none.
    fn last_sequence(&self) -> Result<u64, TableError>;
    /// Every item (for TTL sweeps).
    fn all_items(&self) -> Result<Vec<Item>, TableError>;
    /// Applies the writes and appends the records. Called at most once, as
    /// the last step: everything before it only reads.
    fn apply(
        &mut self,
        writes: Vec<Write>,
        records: Vec<(u64, ChangeRecord)>,
    ) -> Result<(), TableError>;
}

/// A storage backend of the embedded table. Calls are made under the
/// handle's lock, one at a time.
pub(crate) trait Store: Send {
    /// The item stored under the encoded key (a committed read).
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError>;
    /// Every item of a table partition (`index: None`) or index partition.
    fn partition(&self, index: Option<&str>, pk: &str) -> Result<Vec<Item>, TableError>;
    /// Runs `work` in one write transaction, committed when it returns `Ok`
    /// and rolled back when it fails.
    fn write(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Txn) -> Result<(), TableError>,
    ) -> Result<(), TableError>;
    /// Up to `limit` records with sequence numbers above `after`, in order.
    fn changes_after(&self, after: u64, limit: usize) -> Result<Vec<ChangeRecord>, TableError>;
    /// A consumer's checkpoint.
    fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError>;
    /// Stores a consumer's checkpoint.
    fn save_checkpoint(&mut self, consumer: &str, sequence: &str) -> Result<(), TableError>;
}

/// Runs `work` in one write transaction of `store` and returns its result.
pub(crate) fn in_write<T>(
    store: &mut dyn Store,
    work: impl FnOnce(&mut dyn Txn) -> Result<T, TableError>,
) -> Result<T, TableError> {
    let mut work = Some(work);
    let mut out = None;
    store.write(&mut |txn| {
        let work = work
            .take()
            .ok_or_else(|| TableError::internal("a write transaction ran its work twice"))?;
        out = Some(work(txn)?);
        Ok(())
    })?;
    out.ok_or_else(|| TableError::internal("a write transaction committed without running"))
}
