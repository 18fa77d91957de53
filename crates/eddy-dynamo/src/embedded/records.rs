//! Building change records in the shape DynamoDB Streams delivers to Lambda.

use aws_lambda_events::dynamodb::{StreamViewType, UserIdentity};
use chrono::{DateTime, Utc};

use crate::change_feed::ChangeRecord;
use crate::item::{item_size, Item};
use crate::key_schema::TableSchema;

/// Formats a sequence number: zero-padded decimal, so text order is numeric order.
pub(crate) fn format_sequence(seq: u64) -> String {
    format!("{seq:021}")
}

/// Parses a sequence number written by [`format_sequence`] (or any decimal).
pub(crate) fn parse_sequence(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The record of one change: INSERT (new only), MODIFY (both), REMOVE (old
/// only). The old image is moved into the record (the store no longer needs
/// it); the new one is copied (the store keeps it).
pub(crate) fn change_record(
    schema: &TableSchema,
    seq: u64,
    old: Option<Item>,
    new: Option<&Item>,
    now: DateTime<Utc>,
    by_service: bool,
) -> ChangeRecord {
    let event_name = match (&old, new) {
        (None, _) => "INSERT",
        (Some(_), Some(_)) => "MODIFY",
        (Some(_), None) => "REMOVE",
    };
    let keys = new
        .or(old.as_ref())
        .and_then(|image| schema.key.extract(image))
        .unwrap_or_default();
    let mut record = ChangeRecord::default();
    record.aws_region = "local".to_owned();
    record.event_id = format!("embedded-{seq}");
    record.event_name = event_name.to_owned();
    record.event_source = Some("aws:dynamodb".to_owned());
    record.event_version = Some("1.1".to_owned());
    record.event_source_arn = Some(format!(
        "arn:aws:dynamodb:local:000000000000:table/{}/stream/embedded",
        schema.name
    ));
    if by_service {
        let mut identity = UserIdentity::default();
        identity.type_ = "Service".to_owned();
        identity.principal_id = "dynamodb.amazonaws.com".to_owned();
        record.user_identity = Some(identity);
    }
    let size = item_size(&keys) + old.as_ref().map_or(0, item_size) + new.map_or(0, item_size);
    // Streams report whole seconds.
    record.change.approximate_creation_date_time =
        DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now);
    record.change.keys = keys.into();
    record.change.new_image = new.cloned().unwrap_or_default().into();
    record.change.old_image = old.unwrap_or_default().into();
    record.change.sequence_number = Some(format_sequence(seq));
    record.change.size_bytes = i64::try_from(size).unwrap_or(i64::MAX);
    record.change.stream_view_type = Some(StreamViewType::NewAndOldImages);
    record
}
