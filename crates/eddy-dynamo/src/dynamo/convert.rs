//! Conversions between our attribute values (serde_dynamo's) and the SDK's.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue as Sdk;

use crate::error::TableError;
use crate::item::{AttributeValue, Item};

/// Our value as the SDK's.
pub(crate) fn to_sdk(value: &AttributeValue) -> Sdk {
    match value {
        AttributeValue::S(s) => Sdk::S(s.clone()),
        AttributeValue::N(n) => Sdk::N(n.clone()),
        AttributeValue::B(b) => Sdk::B(Blob::new(b.clone())),
        AttributeValue::Bool(b) => Sdk::Bool(*b),
        AttributeValue::Null(b) => Sdk::Null(*b),
        AttributeValue::M(m) => Sdk::M(to_sdk_item(m)),
        AttributeValue::L(l) => Sdk::L(l.iter().map(to_sdk).collect()),
        AttributeValue::Ss(s) => Sdk::Ss(s.clone()),
        AttributeValue::Ns(s) => Sdk::Ns(s.clone()),
        AttributeValue::Bs(s) => Sdk::Bs(s.iter().map(|b| Blob::new(b.clone())).collect()),
    }
}

/// Our item as the SDK's.
pub(crate) fn to_sdk_item(item: &Item) -> HashMap<String, Sdk> {
    item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()
}

/// The SDK's value as ours; a type this crate does not know is an error.
pub(crate) fn from_sdk(value: Sdk) -> Result<AttributeValue, TableError> {
    Ok(match value {
        Sdk::S(s) => AttributeValue::S(s),
        Sdk::N(n) => AttributeValue::N(n),
        Sdk::B(b) => AttributeValue::B(b.into_inner()),
        Sdk::Bool(b) => AttributeValue::Bool(b),
        Sdk::Null(b) => AttributeValue::Null(b),
        Sdk::M(m) => AttributeValue::M(from_sdk_item(m)?),
        Sdk::L(l) => AttributeValue::L(l.into_iter().map(from_sdk).collect::<Result<_, _>>()?),
        Sdk::Ss(s) => AttributeValue::Ss(s),
        Sdk::Ns(s) => AttributeValue::Ns(s),
        Sdk::Bs(s) => AttributeValue::Bs(s.into_iter().map(Blob::into_inner).collect()),
        other => {
            return Err(TableError::internal(format!(
                "DynamoDB returned an attribute value of an unknown type: {other:?}; upgrade eddy"
            )))
        }
    })
}

/// The SDK's item as ours.
pub(crate) fn from_sdk_item(item: HashMap<String, Sdk>) -> Result<Item, TableError> {
    item.into_iter()
        .map(|(k, v)| Ok((k, from_sdk(v)?)))
        .collect()
}

/// An optional SDK item as ours, treating an empty map as absent (how
/// DynamoDB answers for a missing item in some operations).
pub(crate) fn from_sdk_opt(item: Option<HashMap<String, Sdk>>) -> Result<Option<Item>, TableError> {
    match item {
        Some(item) if !item.is_empty() => Ok(Some(from_sdk_item(item)?)),
        _ => Ok(None),
    }
}
