//! The serde form of a [`StreamRecord`]: how a backend outside this crate
//! stores one without knowing its fields.
//!
//! The form names every field the engine keeps. Fields that are usually
//! empty are left out when they are, and read back as empty when missing,
//! so a record written before a field existed still loads.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::fork::ForkOrigin;
use crate::record::{expiry_columns, expiry_from_columns, StreamRecord};
use crate::retention::Retained;
use crate::rules::Head;
use crate::{Compaction, ProducerPosition, Retention, StreamConfig};

/// A stream record, field by field.
#[derive(Serialize, Deserialize)]
pub(crate) struct RecordForm {
    /// The stream's incarnation (0 for a record written before they existed).
    #[serde(default)]
    incarnation: u64,
    content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "is_false")]
    created_closed: bool,
    #[serde(default, skip_serializing_if = "Retention::is_none")]
    retention: Retention,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compaction: Option<Compaction>,
    #[serde(default, skip_serializing_if = "Retained::is_empty")]
    retained: Retained,
    #[serde(default, skip_serializing_if = "is_false")]
    closed: bool,
    count: u64,
    bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_stream_seq: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    closed_by: Option<ProducerPosition>,
    accessed_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fork: Option<ForkForm>,
    #[serde(default, skip_serializing_if = "is_false")]
    soft_deleted: bool,
}

/// Where a fork branched.
#[derive(Serialize, Deserialize)]
struct ForkForm {
    source: String,
    position: u64,
    sub_offset: u64,
    #[serde(default)]
    incarnation: u64,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl From<StreamRecord> for RecordForm {
    fn from(record: StreamRecord) -> Self {
        // Destructured whole, so that a field added to the record does not
        // compile until it is stored here too.
        let StreamRecord {
            head,
            accessed_ms,
            origin,
            soft_deleted,
        } = record;
        let Head {
            incarnation,
            config,
            closed,
            count,
            bytes,
            last_stream_seq,
            closed_by,
            retained,
        } = head;
        let (ttl_secs, expires_at_ms) = expiry_columns(config.expiry);
        RecordForm {
            incarnation,
            content_type: config.content_type.clone(),
            ttl_secs,
            expires_at_ms,
            created_closed: config.closed,
            retention: config.retention,
            compaction: config.compaction,
            retained,
            closed,
            count,
            bytes,
            last_stream_seq,
            closed_by,
            accessed_ms,
            fork: origin.map(|origin| ForkForm {
                source: origin.source,
                position: origin.position,
                sub_offset: origin.sub_offset,
                incarnation: origin.incarnation,
            }),
            soft_deleted,
        }
    }
}

impl From<RecordForm> for StreamRecord {
    fn from(form: RecordForm) -> Self {
        let config = StreamConfig {
            content_type: form.content_type,
            expiry: expiry_from_columns(form.ttl_secs, form.expires_at_ms),
            closed: form.created_closed,
            retention: form.retention,
            compaction: form.compaction,
        };
        StreamRecord {
            head: Head {
                incarnation: form.incarnation,
                config: Arc::new(config),
                closed: form.closed,
                count: form.count,
                bytes: form.bytes,
                last_stream_seq: form.last_stream_seq,
                closed_by: form.closed_by,
                retained: form.retained,
            },
            accessed_ms: form.accessed_ms,
            origin: form.fork.map(|fork| ForkOrigin {
                source: fork.source,
                position: fork.position,
                sub_offset: fork.sub_offset,
                incarnation: fork.incarnation,
            }),
            soft_deleted: form.soft_deleted,
        }
    }
}

impl Serialize for StreamRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RecordForm::from(self.clone()).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StreamRecord {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        RecordForm::deserialize(deserializer).map(StreamRecord::from)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::Expiry;

    fn full() -> StreamRecord {
        let config = StreamConfig {
            content_type: "text/plain".into(),
            expiry: Expiry::At(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
            closed: true,
            retention: "messages=5; age=1h".parse().expect("policy"),
            compaction: Some("age=1h; deletes=2d".parse().expect("policy")),
        };
        StreamRecord {
            head: Head {
                incarnation: 1_764_000_000_000_001,
                config: Arc::new(config),
                closed: true,
                count: 7,
                bytes: 99,
                last_stream_seq: Some("seq-9".into()),
                closed_by: Some(ProducerPosition::new("p", 2, 5)),
                retained: Retained {
                    first: 2,
                    marks: vec![crate::retention::AgeMark { ms: 10, end: 4 }],
                    compacted: Box::new(crate::compaction::Compacted {
                        end: 4,
                        kept: 2,
                        tail: 6,
                        dropped: 1,
                        delete_due_ms: Some(77),
                        deletes_dropped_below: Some(3),
                        deletes_dropped: 2,
                    }),
                },
            },
            accessed_ms: 1_700_000_000_000,
            origin: Some(ForkOrigin {
                source: "a/b".into(),
                position: 3,
                sub_offset: 1,
                incarnation: 1_764_000_000_000_000,
            }),
            soft_deleted: true,
        }
    }

    #[test]
    fn every_field_survives_the_serde_form() {
        for record in [
            full(),
            StreamRecord::new(
                Head::new(StreamConfig::json().with_ttl(Duration::from_secs(60)), 1),
                None,
                5,
            ),
            StreamRecord::new(Head::new(StreamConfig::json(), 0), None, -3),
        ] {
            let text = serde_json::to_string(&record).expect("serialize");
            let back: StreamRecord = serde_json::from_str(&text).expect("deserialize");
            assert_eq!(back, record, "{text}");
        }
    }

    #[test]
    fn empty_fields_are_left_out_and_read_back_as_empty() {
        let record = StreamRecord::new(Head::new(StreamConfig::json(), 1), None, 5);
        let text = serde_json::to_string(&record).expect("serialize");
        assert_eq!(
            text,
            r#"{"incarnation":1,"content_type":"application/json","count":0,"bytes":0,"accessed_ms":5}"#
        );
        let before_incarnations =
            r#"{"content_type":"application/json","count":0,"bytes":0,"accessed_ms":5}"#;
        let old: StreamRecord = serde_json::from_str(before_incarnations).expect("deserialize");
        assert_eq!(
            old.head.incarnation, 0,
            "a record from before keeps incarnation 0"
        );
    }
}
