//! What an embedded storage backend provides: keyed items, partitions of the
//! table and its indexes, an atomic commit of writes and change records, and
//! consumer checkpoints. All table semantics live in the engine above it.

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

/// A storage backend of the embedded table. Calls are made under the
/// table's lock, one at a time.
pub(crate) trait Store: Send {
    /// The item stored under the encoded key.
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError>;
    /// Every item of a table partition (`index: None`) or index partition.
    fn partition(&self, index: Option<&str>, pk: &str) -> Result<Vec<Item>, TableError>;
    /// Applies all writes and appends all records, or nothing.
    fn commit(
        &mut self,
        writes: Vec<Write>,
        records: Vec<(u64, ChangeRecord)>,
    ) -> Result<(), TableError>;
    /// The sequence number of the last record, 0 when there is none.
    fn last_sequence(&self) -> Result<u64, TableError>;
    /// Up to `limit` records with sequence numbers above `after`, in order.
    fn changes_after(&self, after: u64, limit: usize) -> Result<Vec<ChangeRecord>, TableError>;
    /// A consumer's checkpoint.
    fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError>;
    /// Stores a consumer's checkpoint.
    fn save_checkpoint(&mut self, consumer: &str, sequence: &str) -> Result<(), TableError>;
    /// Every item (for TTL sweeps).
    fn all_items(&self) -> Result<Vec<Item>, TableError>;
}
