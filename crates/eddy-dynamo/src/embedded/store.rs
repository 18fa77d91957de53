//! What an embedded storage backend provides: keyed items, ordered ranges of
//! a table or index partition, write transactions that apply writes and
//! change records atomically, the change log and consumer checkpoints. All
//! table semantics live in the engine above it.

use std::ops::Bound;

use crate::change_feed::ChangeRecord;
use crate::error::TableError;
use crate::item::Item;

/// One index entry of an item: `(index name, encoded partition, encoded
/// sort key)`; the sort key is empty for an index without one.
pub(crate) type IndexEntry = (String, String, String);

/// One write of a committed transaction, with keys already encoded.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    /// Store the item under `(pk, sk)` with these index entries.
    Put {
        pk: String,
        sk: String,
        item: Item,
        indexes: Vec<IndexEntry>,
    },
    /// Remove the item under `(pk, sk)` and its index entries.
    Delete { pk: String, sk: String },
}

/// A change record with what the log keeps beside it.
#[derive(Debug, Clone)]
pub(crate) struct LoggedChange {
    pub seq: u64,
    /// When it was committed, in epoch seconds (for the retention window).
    pub created: i64,
    pub record: ChangeRecord,
}

/// A range of one table or index partition, in sort key order. Entries are
/// ordered by `(sort key, pk, sk)`: for the table the sort key is `sk`.
#[derive(Debug, Clone)]
pub(crate) struct KeyRange {
    /// The index, or `None` for the table.
    pub index: Option<String>,
    /// The encoded partition value.
    pub partition: String,
    /// Bounds on the encoded sort key.
    pub lower: Bound<String>,
    pub upper: Bound<String>,
    /// Start after this entry `(sort key, pk, sk)` (before it, backward).
    pub after: Option<IndexEntryKey>,
    /// Ascending when true.
    pub forward: bool,
}

/// The position of an entry in a partition: `(sort key, pk, sk)`.
pub(crate) type IndexEntryKey = (String, String, String);

/// The inside of a write transaction: what it reads is what it writes
/// over. No other writer of the same storage (another handle on the same
/// SQLite file included) commits between its first read and its commit.
pub(crate) trait Txn {
    /// The item stored under the encoded key.
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError>;
    /// The sequence number of the last record ever logged, 0 when none.
    fn last_sequence(&self) -> Result<u64, TableError>;
    /// Up to `limit` items with their stored keys `(pk, sk, item)`, in key
    /// order, after the key `after` (from the first when `None`), of every
    /// table of the database: a TTL sweep's step.
    fn items_after(
        &self,
        after: Option<&(String, String)>,
        limit: usize,
    ) -> Result<Vec<(String, String, Item)>, TableError>;
    /// Applies the writes and appends the records.
    fn apply(&mut self, writes: Vec<Write>, records: Vec<LoggedChange>) -> Result<(), TableError>;
    /// Stores a consumer's checkpoint (a sequence number).
    fn save_checkpoint(&mut self, consumer: &str, sequence: u64) -> Result<(), TableError>;
    /// Every consumer's checkpoint.
    fn checkpoints(&self) -> Result<Vec<u64>, TableError>;
    /// The last sequence number trimmed from the log, 0 when none.
    fn trimmed_through(&self) -> Result<u64, TableError>;
    /// The oldest records of the log, in order, at most `limit`.
    fn oldest(&self, limit: usize) -> Result<Vec<(u64, i64)>, TableError>;
    /// Deletes the records up to `seq` and remembers that it did.
    fn trim_through(&mut self, seq: u64) -> Result<(), TableError>;
    /// The schema (as JSON) another table of the database was created
    /// with, if it was.
    fn table_schema(&self, name: &str) -> Result<Option<String>, TableError>;
    /// Records the schema (as JSON) of another table of the database.
    fn save_table_schema(&mut self, name: &str, schema: &str) -> Result<(), TableError>;
}

/// What a write does once it knows whether its transaction committed:
/// answer its caller. Success is only reported after the commit.
pub(crate) type Completion = Box<dyn FnOnce(Result<(), TableError>) + Send>;

/// A unit of write work. It returns its completion, or `Err(())` when it
/// failed: it then answered its caller itself, and whatever it wrote is
/// rolled back.
pub(crate) type Work = Box<dyn FnOnce(&mut dyn Txn) -> Result<Completion, ()> + Send>;

/// A storage backend of the embedded table.
pub(crate) trait Store: Send + Sync {
    /// The item stored under the encoded key (a committed read).
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError>;
    /// The items under several keys, read from one snapshot.
    fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Option<Item>>, TableError>;
    /// Visits the items of a range in order until `visit` returns false;
    /// returns whether entries remain after the last one visited. Items are
    /// decoded only to be visited.
    fn query(
        &self,
        range: &KeyRange,
        visit: &mut dyn FnMut(Item) -> bool,
    ) -> Result<bool, TableError>;
    /// Visits every stored item in key order, after the stored key `after`
    /// (from the first when `None`), with its stored partition key, until
    /// `visit` returns false; returns whether items remain after the last
    /// one visited.
    fn scan(
        &self,
        after: Option<&(String, String)>,
        visit: &mut dyn FnMut(&str, Item) -> bool,
    ) -> Result<bool, TableError>;
    /// Up to `limit` logged records with sequence numbers above `after`
    /// (from the oldest kept when `None`), read from one snapshot: records
    /// after `after` that were trimmed are `HistoryUnavailable`, never
    /// skipped.
    fn changes_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, TableError>;
    /// A consumer's checkpoint.
    fn load_checkpoint(&self, consumer: &str) -> Result<Option<u64>, TableError>;
    /// Runs `work` in a write transaction. The backend may run several
    /// works in one transaction (group commit); each work's writes are
    /// atomic on their own, and a work that fails leaves nothing.
    fn write(&self, work: Work);
    /// Whether reads and writes block on I/O (run them off the async
    /// threads).
    fn blocking(&self) -> bool;
}

/// Runs `work` in a write transaction of `store`, and answers its result
/// once that transaction has committed.
pub(crate) async fn in_write<T, F>(store: &dyn Store, work: F) -> Result<T, TableError>
where
    T: Send + 'static,
    F: FnOnce(&mut dyn Txn) -> Result<T, TableError> + Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    store.write(Box::new(move |txn| match work(txn) {
        Ok(value) => Ok(Box::new(move |committed: Result<(), TableError>| {
            let _ = answer.send(committed.map(|()| value));
        }) as Completion),
        Err(e) => {
            let _ = answer.send(Err(e));
            Err(())
        }
    }));
    answered
        .await
        .map_err(|_| TableError::internal("the table's writer stopped before answering"))?
}

/// The tighter of two lower bounds.
pub(crate) fn max_lower<T: Ord>(a: Bound<T>, b: Bound<T>) -> Bound<T> {
    tighter(a, b, std::cmp::Ordering::Greater)
}

/// The tighter of two upper bounds.
pub(crate) fn min_upper<T: Ord>(a: Bound<T>, b: Bound<T>) -> Bound<T> {
    tighter(a, b, std::cmp::Ordering::Less)
}

/// The tighter of two bounds on one side: the one whose value is further
/// in the `inward` direction, or the exclusive one when both values are
/// equal.
fn tighter<T: Ord>(a: Bound<T>, b: Bound<T>, inward: std::cmp::Ordering) -> Bound<T> {
    match (&a, &b) {
        (Bound::Unbounded, _) => b,
        (_, Bound::Unbounded) => a,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            match x.cmp(y) {
                std::cmp::Ordering::Equal if matches!(a, Bound::Excluded(_)) => a,
                std::cmp::Ordering::Equal => b,
                order if order == inward => a,
                _ => b,
            }
        }
    }
}
