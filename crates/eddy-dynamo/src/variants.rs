//! Finding the variant names of a serde enum, so an event type that the
//! enum does not have is told apart from data that does not decode; and
//! decoding a variant from its name and data as stored, without first
//! building the `{name: data}` map serde's externally tagged form reads.

use serde::de::{
    self, Deserialize, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess,
    IntoDeserializer, VariantAccess, Visitor,
};

use crate::item::{AttributeValue, Item};

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

/// Decodes the variant `name` of an externally tagged enum from its stored
/// data (`NULL`: a unit variant): what decoding `{name: data}` (or the bare
/// `name`) with serde_dynamo gives, variant by variant.
pub(crate) fn decode_variant<T: DeserializeOwned>(
    name: &str,
    data: AttributeValue,
) -> Result<T, serde_dynamo::Error> {
    match data {
        AttributeValue::Null(_) => {
            serde_dynamo::from_attribute_value(AttributeValue::S(name.into()))
        }
        data => T::deserialize(Tagged { name, data }),
    }
}

/// A variant's name and its (non-`NULL`) data, read as the one-entry map
/// `{name: data}`.
struct Tagged<'a> {
    name: &'a str,
    data: AttributeValue,
}

impl Tagged<'_> {
    /// The map itself, for a type that does not read an enum.
    fn into_map(self) -> serde_dynamo::Deserializer {
        let map = Item::from([(self.name.to_owned(), self.data)]);
        serde_dynamo::Deserializer::from_attribute_value(AttributeValue::M(map))
    }
}

impl<'de> Deserializer<'de> for Tagged<'_> {
    type Error = serde_dynamo::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.into_map().deserialize_any(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

impl<'de> EnumAccess<'de> for Tagged<'_> {
    type Error = serde_dynamo::Error;
    type Variant = VariantData;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantData), Self::Error> {
        let name: de::value::StrDeserializer<'_, Self::Error> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, VariantData(self.data)))
    }
}

/// A variant's data, read as serde_dynamo reads the value of `{name: data}`.
struct VariantData(AttributeValue);

impl<'de> VariantAccess<'de> for VariantData {
    type Error = serde_dynamo::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, Self::Error> {
        seed.deserialize(serde_dynamo::Deserializer::from_attribute_value(self.0))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        serde_dynamo::Deserializer::from_attribute_value(self.0).deserialize_seq(visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        serde_dynamo::Deserializer::from_attribute_value(self.0).deserialize_map(visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Event {
        Unit,
        Newtype(u64),
        Tuple(String, bool),
        Struct { by: u64, note: Option<String> },
    }

    /// The tagged form's decoding, as events were decoded before.
    fn tagged(name: &str, data: AttributeValue) -> Result<Event, serde_dynamo::Error> {
        let value = match data {
            AttributeValue::Null(_) => AttributeValue::S(name.into()),
            data => AttributeValue::M(Item::from([(name.to_owned(), data)])),
        };
        serde_dynamo::from_attribute_value(value)
    }

    #[test]
    fn a_variant_decodes_as_its_tagged_form_does() {
        let events = [
            Event::Unit,
            Event::Newtype(7),
            Event::Tuple("x".into(), true),
            Event::Struct { by: 2, note: None },
            Event::Struct {
                by: 3,
                note: Some("n".into()),
            },
        ];
        for event in events {
            let AttributeValue::M(map) = serde_dynamo::to_attribute_value(&event).unwrap() else {
                // A unit variant encodes as its bare name.
                let decoded: Event = decode_variant("Unit", AttributeValue::Null(true)).unwrap();
                assert_eq!(decoded, event);
                continue;
            };
            let (name, data) = map.into_iter().next().unwrap();
            let decoded: Event = decode_variant(&name, data.clone()).unwrap();
            assert_eq!(decoded, event);
            assert_eq!(tagged(&name, data).unwrap(), event);
        }
    }

    #[test]
    fn data_that_does_not_fit_fails_as_its_tagged_form_does() {
        let cases = [
            ("Newtype", AttributeValue::S("seven".into())),
            ("Struct", AttributeValue::N("1".into())),
            (
                "Tuple",
                AttributeValue::L(vec![AttributeValue::S("x".into())]),
            ),
            ("Newtype", AttributeValue::Null(true)),
            ("Other", AttributeValue::N("1".into())),
        ];
        for (name, data) in cases {
            let ours = decode_variant::<Event>(name, data.clone()).unwrap_err();
            let theirs = tagged(name, data).unwrap_err();
            assert_eq!(ours.to_string(), theirs.to_string(), "{name}");
        }
    }
}
