//! The append request and its outcome.

use crate::{Offset, Payload};

/// The default cap on idempotent producers per stream. A producer's state
/// is kept while it writes and for [`DEFAULT_PRODUCER_EXPIRY`] after its
/// last accepted write, so a stream's producer state grows with the
/// producers active within that window: the expiry is the bound, and the
/// cap a ceiling against a burst of new producers inside one window (an
/// outbox that makes each row its own producer writes millions over time).
pub const DEFAULT_MAX_PRODUCERS_PER_STREAM: usize = 1_000_000;

/// The default time an idle producer's state is kept: seven days, as
/// Kafka's `producer.id.expiration.ms`. A producer whose last accepted
/// write is older is forgotten: its next append starts it afresh, as a
/// producer the stream never saw (any epoch, sequence 0; a later sequence
/// is a gap), so a retry is deduplicated only when it comes within this
/// window of the producer's last accepted write.
pub const DEFAULT_PRODUCER_EXPIRY: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 60 * 60);

/// An idempotent producer's position: who is writing, in which epoch, and
/// the sequence number of this append within the epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ProducerPosition {
    /// The producer id, unique per stream.
    pub id: String,
    /// The producer's epoch; a higher epoch fences older ones.
    pub epoch: u64,
    /// The sequence number of this append within the epoch, from 0.
    pub seq: u64,
}

impl ProducerPosition {
    /// A position.
    pub fn new(id: impl Into<String>, epoch: u64, seq: u64) -> Self {
        ProducerPosition {
            id: id.into(),
            epoch,
            seq,
        }
    }
}

/// One append: data plus the conditions it is written under.
///
/// ```
/// use eddy_streams::{Append, Offset, ProducerPosition};
/// let append = Append::body(r#"[{"n":1},{"n":2}]"#)
///     .with_producer(ProducerPosition::new("writer-1", 0, 0))
///     .expecting_tail(Offset::ZERO);
/// assert!(!append.close);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Append {
    /// The data.
    pub payload: Payload,
    /// The caller's content type; when given it must match the stream's.
    /// It is not checked on an append without data.
    pub content_type: Option<String>,
    /// The idempotent producer position, if any.
    pub producer: Option<ProducerPosition>,
    /// Write only if the stream's tail is this offset (optimistic append).
    pub expected_tail: Option<Offset>,
    /// An opaque value that must be bytewise greater than the last one
    /// accepted on this stream (the protocol's `Stream-Seq`).
    pub stream_seq: Option<String>,
    /// Close the stream with this append, atomically.
    pub close: bool,
}

impl Append {
    /// An append of a body, split by the stream's content type.
    pub fn body(body: impl Into<bytes::Bytes>) -> Self {
        Append::new(Payload::Body(body.into()))
    }

    /// An append of messages already split.
    pub fn messages(messages: Vec<bytes::Bytes>) -> Self {
        Append::new(Payload::Messages(messages))
    }

    /// An append that only closes the stream.
    pub fn close_only() -> Self {
        Append::new(Payload::empty()).closing()
    }

    /// An append of `payload` with no conditions.
    pub fn new(payload: Payload) -> Self {
        Append {
            payload,
            content_type: None,
            producer: None,
            expected_tail: None,
            stream_seq: None,
            close: false,
        }
    }

    /// Also close the stream.
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// Write as an idempotent producer.
    pub fn with_producer(mut self, producer: ProducerPosition) -> Self {
        self.producer = Some(producer);
        self
    }

    /// Write only if the tail is `offset`.
    pub fn expecting_tail(mut self, offset: Offset) -> Self {
        self.expected_tail = Some(offset);
        self
    }

    /// Check the caller's content type against the stream's.
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// Require a strictly increasing stream sequence value.
    pub fn with_stream_seq(mut self, seq: impl Into<String>) -> Self {
        self.stream_seq = Some(seq.into());
        self
    }
}

/// What an append did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The stream's tail after the append.
    pub next_offset: Offset,
    /// `true` when the producer already sent this append: nothing was written.
    pub duplicate: bool,
    /// For producer appends: the epoch and the highest sequence number the
    /// store has accepted from this producer.
    pub producer: Option<(u64, u64)>,
    /// Whether the stream is closed after the append.
    pub closed: bool,
}
