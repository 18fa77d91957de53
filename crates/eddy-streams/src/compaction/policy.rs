//! The compaction policy: what a stream keeps whole, and how long a
//! delete lives; its `key=value` form.

use super::*;

/// How a state stream is compacted, as Kafka compacts a topic: the head
/// (the newest messages within the lag) is never touched; before it, a
/// change that a later change of the same row supersedes is dropped, a
/// delete once its lifetime is over, and everything before the last
/// `reset`; a message that is not a state message always stays. Offsets
/// never change. Set at creation ([`StreamConfig::with_compaction`]), it
/// never changes.
///
/// [`StreamConfig::with_compaction`]: crate::StreamConfig::with_compaction
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Compaction {
    /// The head keeps at least the messages appended this many seconds
    /// ago or later (it may keep them up to a thirty-second part of the
    /// stream's longest age longer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_age_secs: Option<u64>,
    /// The head keeps at least this many of the newest messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_messages: Option<u64>,
    /// The head keeps at least the newest messages whose sizes add up to
    /// this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<u64>,
    /// How long a delete is kept after it was appended, in seconds.
    #[serde(default = "default_deletes")]
    pub deletes_secs: u64,
}

/// One day, as Kafka's `delete.retention.ms`.
const DEFAULT_DELETES_SECS: u64 = 86_400;

fn default_deletes() -> u64 {
    DEFAULT_DELETES_SECS
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction::ON
    }
}

/// A policy that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid compaction policy `{policy}`: {reason}; write it as `age=1h; messages=1000; bytes=10MB; deletes=1d` (any of the four, each at most once, values above 0) or `on`")]
pub struct CompactionError {
    /// The policy as given (truncated when very long).
    pub policy: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Compaction {
    /// Compacts up to the tail and keeps deletes one day.
    pub const ON: Compaction = Compaction {
        lag_age_secs: None,
        lag_messages: None,
        lag_bytes: None,
        deletes_secs: DEFAULT_DELETES_SECS,
    };

    /// This policy, keeping the messages of the last `secs` seconds in full.
    pub fn with_lag_age_secs(mut self, secs: u64) -> Self {
        self.lag_age_secs = Some(secs);
        self
    }

    /// This policy, keeping the newest `messages` messages in full.
    pub fn with_lag_messages(mut self, messages: u64) -> Self {
        self.lag_messages = Some(messages);
        self
    }

    /// This policy, keeping the newest `bytes` bytes of messages in full.
    pub fn with_lag_bytes(mut self, bytes: u64) -> Self {
        self.lag_bytes = Some(bytes);
        self
    }

    /// This policy, keeping deletes `secs` seconds.
    pub fn with_deletes_secs(mut self, secs: u64) -> Self {
        self.deletes_secs = secs;
        self
    }

    /// The lag's age in milliseconds.
    pub(crate) fn lag_age_ms(&self) -> Option<i64> {
        self.lag_age_secs.map(secs_to_ms)
    }

    /// The delete lifetime in milliseconds.
    pub(crate) fn deletes_ms(&self) -> i64 {
        secs_to_ms(self.deletes_secs)
    }

    /// The end of what may be compacted at `now_ms` as far as the message
    /// and age bounds tell (the byte bound needs the messages' sizes).
    pub(super) fn end_before_bytes(&self, marks: &[AgeMark], count: u64, now_ms: i64) -> u64 {
        let by_messages = self
            .lag_messages
            .map_or(count, |keep| count.saturating_sub(keep));
        let by_age = self.lag_age_ms().map_or(count, |age_ms| {
            marks
                .iter()
                .take_while(|mark| mark.ms.saturating_add(age_ms) <= now_ms)
                .map(|mark| mark.end)
                .max()
                .unwrap_or(0)
        });
        by_messages.min(by_age).min(count)
    }
}

impl FromStr for Compaction {
    type Err = CompactionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| CompactionError {
            policy: text.chars().take(MAX_QUOTED).collect(),
            reason,
        };
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("on") {
            return Ok(Compaction::ON);
        }
        let mut policy = Compaction::ON;
        let mut deletes = None;
        let mut any = false;
        for (key, value) in pairs(trimmed).map_err(fail)? {
            let (slot, parsed) = match key.to_ascii_lowercase().as_str() {
                "age" => (&mut policy.lag_age_secs, number(value, &AGE_UNITS)),
                "messages" => (&mut policy.lag_messages, number(value, &[("", 1)])),
                "bytes" => (&mut policy.lag_bytes, number(value, &SIZE_UNITS)),
                "deletes" => (&mut deletes, number(value, &AGE_UNITS)),
                _ => {
                    return Err(fail(format!(
                        "unknown key `{key}` (the keys are age, messages, bytes and deletes)"
                    )))
                }
            };
            set_once(slot, key, parsed).map_err(fail)?;
            any = true;
        }
        if !any {
            return Err(fail("it is empty".into()));
        }
        if let Some(secs) = deletes {
            policy.deletes_secs = secs;
        }
        Ok(policy)
    }
}

impl fmt::Display for Compaction {
    /// The canonical form: the bounds in the order age, messages, bytes,
    /// deletes, each in the largest unit that writes it exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(secs) = self.lag_age_secs {
            parts.push(format!("age={}", with_unit(secs, &AGE_UNITS[1..])));
        }
        if let Some(messages) = self.lag_messages {
            parts.push(format!("messages={messages}"));
        }
        if let Some(bytes) = self.lag_bytes {
            parts.push(format!("bytes={}", with_unit(bytes, &SIZE_UNITS)));
        }
        parts.push(format!(
            "deletes={}",
            with_unit(self.deletes_secs, &AGE_UNITS[1..])
        ));
        f.write_str(&parts.join("; "))
    }
}
