//! Request accounting: how many requests of each kind a table served, and
//! how many items they carried. What DynamoDB bills for, and what the tests
//! of write amplification assert on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts of requests by kind, since the table was made (or last reset).
///
/// - `reads`: `GetItem`, `Query` and `BatchGetItem` requests (each page and
///   each retry of unprocessed keys is one request).
/// - `writes`: `PutItem`, `UpdateItem` and `DeleteItem` requests.
/// - `transactions`: `TransactWriteItems` and `TransactGetItems` requests.
/// - `items_read` / `items_written`: items returned by reads and
///   transactional reads, and items in write requests and write
///   transactions (condition checks included).
///
/// A write whose condition failed counts (DynamoDB bills it); a request
/// refused by validation before it reached the table does not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Single-item and query reads.
    pub reads: u64,
    /// Single-item writes.
    pub writes: u64,
    /// Transactions, reading or writing.
    pub transactions: u64,
    /// Items returned by reads.
    pub items_read: u64,
    /// Items carried by writes.
    pub items_written: u64,
}

impl std::ops::Sub for RequestStats {
    type Output = RequestStats;

    /// The requests made between two snapshots (`after - before`).
    fn sub(self, before: RequestStats) -> RequestStats {
        RequestStats {
            reads: self.reads.saturating_sub(before.reads),
            writes: self.writes.saturating_sub(before.writes),
            transactions: self.transactions.saturating_sub(before.transactions),
            items_read: self.items_read.saturating_sub(before.items_read),
            items_written: self.items_written.saturating_sub(before.items_written),
        }
    }
}

/// Shared counters behind [`RequestStats`]; clones count into the same ones.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestCounter(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    transactions: AtomicU64,
    items_read: AtomicU64,
    items_written: AtomicU64,
}

impl RequestCounter {
    pub(crate) fn read(&self, items: usize) {
        self.0.reads.fetch_add(1, Ordering::Relaxed);
        self.0.items_read.fetch_add(items as u64, Ordering::Relaxed);
    }

    pub(crate) fn write(&self) {
        self.0.writes.fetch_add(1, Ordering::Relaxed);
        self.0.items_written.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn transact_write(&self, items: usize) {
        self.0.transactions.fetch_add(1, Ordering::Relaxed);
        self.0
            .items_written
            .fetch_add(items as u64, Ordering::Relaxed);
    }

    pub(crate) fn transact_read(&self, items: usize) {
        self.0.transactions.fetch_add(1, Ordering::Relaxed);
        self.0.items_read.fetch_add(items as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RequestStats {
        RequestStats {
            reads: self.0.reads.load(Ordering::Relaxed),
            writes: self.0.writes.load(Ordering::Relaxed),
            transactions: self.0.transactions.load(Ordering::Relaxed),
            items_read: self.0.items_read.load(Ordering::Relaxed),
            items_written: self.0.items_written.load(Ordering::Relaxed),
        }
    }
}
