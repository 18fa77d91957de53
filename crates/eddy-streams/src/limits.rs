//! How much work one request may make a store do in one write.
//!
//! A store commits each write in one atomic step, and on SQLite and
//! PostgreSQL one writer commits the writes of every client in turn: a
//! write that inserts millions of rows or copies gigabytes stalls every
//! other writer until it is done. These bounds keep each write small.

/// The default [`Limits::max_append_messages`].
pub const DEFAULT_MAX_APPEND_MESSAGES: usize = 10_000;

/// The default [`Limits::max_fork_bytes`]: 64 MiB.
pub const DEFAULT_MAX_FORK_BYTES: u64 = 64 * 1024 * 1024;

/// What each message a fork copies counts against
/// [`Limits::max_fork_bytes`] besides its length: copying it costs a row
/// (an index entry, a row header) whatever its size.
pub const FORK_MESSAGE_COST: u64 = 64;

/// The most bytes of a value the store keeps from a request: a stream's
/// content type, a `Stream-Seq`, an idempotent producer's id. Each lives
/// in the stream's record (and a producer's id in its own row or item),
/// which every later write of the stream rewrites on some backends
/// (DynamoDB: one item of at most 400 KB, and a producer's id is part of
/// its item's sort key, at most 1 KB): a longer one is refused with
/// [`StreamError::InvalidArgument`](crate::StreamError::InvalidArgument)
/// and nothing is written.
pub const MAX_STORED_VALUE_BYTES: usize = 512;

/// Refuses a value over [`MAX_STORED_VALUE_BYTES`]; `what` names it.
pub(crate) fn check_stored_value(what: &str, value: &str) -> Result<(), crate::StreamError> {
    if value.len() > MAX_STORED_VALUE_BYTES {
        return Err(crate::StreamError::InvalidArgument(format!(
            "{what} is {} bytes; the store keeps at most {MAX_STORED_VALUE_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

/// Bounds on what one write may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most messages one append (a JSON array's elements), or a
    /// create's or a fork's initial data, may hold; more is refused
    /// ([`StreamError::TooManyMessages`](crate::StreamError::TooManyMessages)).
    pub max_append_messages: usize,
    /// The most a fork may copy of its source, in bytes, each message
    /// counting its length plus [`FORK_MESSAGE_COST`]; a fork that may copy
    /// more is refused
    /// ([`StreamError::ForkTooLarge`](crate::StreamError::ForkTooLarge)).
    pub max_fork_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_append_messages: DEFAULT_MAX_APPEND_MESSAGES,
            max_fork_bytes: DEFAULT_MAX_FORK_BYTES,
        }
    }
}
