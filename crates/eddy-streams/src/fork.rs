//! Forks: streams that start as a copy of another stream's prefix.

use bytes::Bytes;

use crate::config::same_media_type;
use crate::{Expiry, Offset, Payload, Retention, StreamConfig, StreamError, StreamPath};

/// How to create a fork.
///
/// A fork names its source, the offset it branches at (the source's tail by
/// default) and optionally a sub-offset into the message at that offset: on
/// a byte stream the number of bytes of that message to keep, on a JSON
/// stream the number of further messages to keep. The fork inherits the
/// source's content type and expiry unless it sets its own, starts open,
/// and has no producer state. It is a stream of its own, with its own
/// incarnation in its offsets; the source's offsets up to the branch point
/// also read the same data on the fork.
///
/// A fork copies what it inherits, so the source's retention policy never
/// takes anything from it; a fork whose branch point the source already
/// dropped is refused ([`OffsetDropped`](crate::StreamError::OffsetDropped)),
/// and one that inherits part of a retained prefix starts where the
/// source's kept messages start. A fork inherits the source's retention
/// policy unless it sets its own; under an age bound, what it inherited
/// counts as appended when the fork was made.
///
/// Deleting a stream that has live forks only retires it: its path answers
/// [`SoftDeleted`](crate::StreamError::SoftDeleted) until the last fork is
/// deleted, and then the stream is removed for good (cascading up a chain
/// of forks).
///
/// ```
/// use eddy_streams::{Fork, Offset, StreamPath};
/// // Keep the first two messages of a JSON stream: from its beginning
/// // (the zero offset), two more.
/// let fork = Fork::of(StreamPath::new("chat/main")?).at(Offset::ZERO).sub_offset(2);
/// assert_eq!(fork.offset, Some(Offset::ZERO));
/// # Ok::<(), eddy_streams::StreamError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fork {
    /// The stream to branch from.
    pub source: StreamPath,
    /// Where to branch; `None` is the source's tail.
    pub offset: Option<Offset>,
    /// How much of the message at `offset` to keep (`0` keeps none).
    pub sub_offset: u64,
    /// The fork's content type; it must name the source's media type.
    /// `None` inherits the source's.
    pub content_type: Option<String>,
    /// The fork's expiry; `None` inherits the source's.
    pub expiry: Option<Expiry>,
    /// The fork's retention policy; `None` inherits the source's.
    pub retention: Option<Retention>,
    /// The fork's compaction policy; `None` inherits the source's.
    pub compaction: Option<crate::Compaction>,
    /// Whether the fork is closed at creation.
    pub closed: bool,
    /// Data appended after the inherited prefix when the fork is created.
    pub initial: Payload,
}

impl Fork {
    /// A fork of `source` at its tail, inheriting everything.
    pub fn of(source: StreamPath) -> Self {
        Fork {
            source,
            offset: None,
            sub_offset: 0,
            content_type: None,
            expiry: None,
            retention: None,
            compaction: None,
            closed: false,
            initial: Payload::empty(),
        }
    }

    /// Branch at `offset`.
    pub fn at(mut self, offset: Offset) -> Self {
        self.offset = Some(offset);
        self
    }

    /// Keep `sub_offset` more bytes (byte streams) or messages (JSON
    /// streams) past the branch offset.
    pub fn sub_offset(mut self, sub_offset: u64) -> Self {
        self.sub_offset = sub_offset;
        self
    }

    /// Use this content type (it must match the source's media type).
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// Append this data after the inherited prefix.
    pub fn with_initial(mut self, initial: Payload) -> Self {
        self.initial = initial;
        self
    }

    /// Use this retention policy instead of the source's.
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Use this compaction policy instead of the source's.
    pub fn with_compaction(mut self, compaction: crate::Compaction) -> Self {
        self.compaction = Some(compaction);
        self
    }

    /// Use this expiry instead of the source's.
    pub fn with_expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = Some(expiry);
        self
    }
}

/// Where a fork branched: stored with the fork so that repeating the same
/// fork request is recognised as idempotent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ForkOrigin {
    /// The source path.
    pub source: String,
    /// The message position of the branch offset.
    pub position: u64,
    /// The sub-offset past it.
    pub sub_offset: u64,
    /// The source's incarnation: its offsets up to `position` are offsets
    /// of the fork too.
    pub incarnation: u64,
}

/// What a backend writes to create a fork.
pub(crate) struct ForkPlan {
    /// The fork's configuration.
    pub config: StreamConfig,
    /// How many of the source's first messages it inherits whole.
    pub inherit: u64,
    /// The kept part of the message at the branch offset, if any.
    pub partial: Option<Bytes>,
    /// Where it branched.
    pub origin: ForkOrigin,
}

/// The source position whose message [`plan`] needs: on a byte stream, a
/// sub-offset keeps part of the message at the branch offset.
pub(crate) fn branch_message_position(
    fork: &Fork,
    source_config: &StreamConfig,
    source_tail: Offset,
) -> Option<u64> {
    (fork.sub_offset > 0 && !source_config.is_json())
        .then(|| fork.offset.unwrap_or(source_tail).position())
}

/// Plans a fork of a source with configuration `source_config` whose tail
/// is `source_tail`. `branch_message` is the source's message at
/// [`branch_message_position`], when there is one.
pub(crate) fn plan(
    fork: &Fork,
    source_config: &StreamConfig,
    source_tail: Offset,
    branch_message: Option<Bytes>,
) -> Result<ForkPlan, StreamError> {
    let content_type = match &fork.content_type {
        Some(sent) if !same_media_type(sent, &source_config.content_type) => {
            return Err(StreamError::ContentTypeMismatch {
                expected: source_config.content_type.clone(),
                received: sent.clone(),
            })
        }
        Some(sent) => sent.clone(),
        None => source_config.content_type.clone(),
    };
    let at = match fork.offset {
        // The zero offset is the beginning of any stream.
        Some(offset) if offset.is_zero() => source_tail.with_position(0),
        Some(offset) => offset,
        None => source_tail,
    };
    if at.incarnation() < source_tail.incarnation() {
        return Err(StreamError::StaleOffset {
            path: fork.source.to_string(),
            offset: at,
            incarnation: source_tail.incarnation(),
        });
    }
    if at > source_tail {
        return Err(StreamError::OffsetBeyondTail {
            offset: at,
            tail: source_tail,
        });
    }
    let position = at.position();
    let beyond = |what: &str| {
        StreamError::InvalidArgument(format!(
            "fork sub-offset {} is beyond the {what} at offset {at}",
            fork.sub_offset
        ))
    };
    let (inherit, partial) = if fork.sub_offset == 0 {
        (position, None)
    } else if source_config.is_json() {
        let end = position.saturating_add(fork.sub_offset);
        if end > source_tail.position() {
            return Err(beyond("messages"));
        }
        (end, None)
    } else {
        let message = branch_message.ok_or_else(|| beyond("stream's tail"))?;
        let keep = usize::try_from(fork.sub_offset).unwrap_or(usize::MAX);
        if keep > message.len() {
            return Err(beyond("message"));
        }
        (position, Some(message.slice(..keep)))
    };
    Ok(ForkPlan {
        config: StreamConfig {
            content_type,
            expiry: fork.expiry.unwrap_or(source_config.expiry),
            closed: fork.closed,
            retention: fork.retention.unwrap_or(source_config.retention),
            compaction: fork.compaction.or(source_config.compaction),
        },
        inherit,
        partial,
        origin: ForkOrigin {
            source: fork.source.to_string(),
            position,
            sub_offset: fork.sub_offset,
            incarnation: source_tail.incarnation(),
        },
    })
}

/// Checks a fork request against a stream that already exists at the path.
pub(crate) fn check_refork(
    path: &str,
    existing: &StreamConfig,
    existing_origin: Option<&ForkOrigin>,
    plan: &ForkPlan,
) -> Result<(), StreamError> {
    if existing.equivalent(&plan.config) && existing_origin == Some(&plan.origin) {
        Ok(())
    } else {
        Err(StreamError::ConfigConflict {
            path: path.to_owned(),
            detail: format!(
                "it is not a fork of `{}` at position {} with sub-offset {} and the same configuration",
                plan.origin.source, plan.origin.position, plan.origin.sub_offset
            ),
        })
    }
}
