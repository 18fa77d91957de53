//! Projection parameters: which names a parameter type declares, and how a
//! binding's parameters become a stable key.

use std::fmt;

use serde::de::{self, DeserializeOwned, Visitor};
use serde_json::Value;

/// The field names of the parameter type `P`, when it is a struct (or `()`,
/// which has none). `None` means the names are only known per value (a map
/// or `serde_json::Value`); such types are checked when bound.
pub(crate) fn param_names<P: DeserializeOwned>() -> Option<Vec<String>> {
    match P::deserialize(Probe) {
        Err(Found(names)) => names,
        Ok(_) => None,
    }
}

/// The answer of the probe, carried as the deserializer's error.
#[derive(Debug)]
struct Found(Option<Vec<String>>);

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("parameter probe")
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        Found(None)
    }
}

struct Probe;

impl<'de> de::Deserializer<'de> for Probe {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Found> {
        Err(Found(None))
    }

    fn deserialize_unit<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Found> {
        Err(Found(Some(Vec::new())))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _visitor: V,
    ) -> Result<V::Value, Found> {
        Err(Found(Some(Vec::new())))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Found> {
        Err(Found(Some(
            fields.iter().map(|f| (*f).to_owned()).collect(),
        )))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// A binding's parameters as a stable path segment: `name=value` pairs
/// sorted by name, joined by `,`, with every byte outside
/// `[A-Za-z0-9._~-]` percent-escaped. No parameters give `_`.
pub(crate) fn params_key(params: &Value) -> String {
    let Value::Object(map) = params else {
        return if params.is_null() {
            "_".to_owned()
        } else {
            escape(&params.to_string())
        };
    };
    if map.is_empty() {
        return "_".to_owned();
    }
    let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs
        .into_iter()
        .map(|(name, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{}={}", escape(name), escape(&text))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Percent-escapes every byte outside `[A-Za-z0-9._~-]`.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'~' | b'-') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if out == "." || out == ".." {
        out = out.replace('.', "%2E");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Workspace {
        workspace_id: String,
        shard: u32,
    }

    #[test]
    fn probes_struct_fields() {
        assert_eq!(
            param_names::<Workspace>(),
            Some(vec!["workspaceId".to_owned(), "shard".to_owned()])
        );
        assert_eq!(param_names::<()>(), Some(vec![]));
        assert_eq!(param_names::<Value>(), None);
    }

    #[test]
    fn keys_are_sorted_and_escaped() {
        let key = params_key(&serde_json::json!({ "b": "x/y", "a": 1 }));
        assert_eq!(key, "a=1,b=x%2Fy");
        assert_eq!(params_key(&Value::Null), "_");
    }
}
