//! Finding the variant names of a serde enum, so an event type that the
//! enum does not have is told apart from data that does not decode.

use serde::de::{self, Deserialize, Deserializer, Visitor};

#[derive(Debug)]
enum Probe {
    Found(&'static [&'static str]),
    NotAnEnum,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("variant probe")
    }
}

impl std::error::Error for Probe {}

impl de::Error for Probe {
    fn custom<T: std::fmt::Display>(_msg: T) -> Self {
        Probe::NotAnEnum
    }
}

struct ProbeDeserializer;

impl<'de> Deserializer<'de> for ProbeDeserializer {
    type Error = Probe;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Probe> {
        Err(Probe::NotAnEnum)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Probe> {
        Err(Probe::Found(variants))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

/// The variant names of an externally tagged serde enum (serde's default
/// representation), or `None` when `T` is not such an enum.
pub(crate) fn variant_names<T: for<'de> Deserialize<'de>>() -> Option<&'static [&'static str]> {
    match T::deserialize(ProbeDeserializer) {
        Err(Probe::Found(variants)) => Some(variants),
        _ => None,
    }
}
