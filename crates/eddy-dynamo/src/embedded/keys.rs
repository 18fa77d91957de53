//! Encoded key values: text that sorts (byte-wise) exactly as DynamoDB
//! orders the values, so backends answer key conditions with plain range
//! scans on an ordered index.
//!
//! - strings: `S` then the text (UTF-8 bytes order, as DynamoDB's);
//! - binaries: `B` then lowercase hex (same order as the bytes);
//! - numbers: `N` then a sign class (`0` negative, `1` zero, `2` positive),
//!   a biased 5-digit decimal exponent and the significant digits; negative
//!   numbers store the exponent and digits complemented and end with `~`, so
//!   larger magnitudes sort first. Equal numbers (`1`, `1.0`) encode equally.

use bigdecimal::BigDecimal;

use crate::item::{parse_number, AttributeValue, Item};
use crate::key_schema::KeyDefinition;

/// The largest decimal exponent a key number may have (DynamoDB's numbers
/// stay far inside it: 38 digits, magnitudes from 1e-130 to 1e126).
const MAX_EXPONENT: i64 = 9_999;

/// Encodes a key value; `None` for a value that cannot be a key (another
/// type, a malformed or out-of-range number).
pub(crate) fn encode_value(value: &AttributeValue) -> Option<String> {
    match value {
        AttributeValue::S(s) => Some(format!("S{s}")),
        AttributeValue::B(b) => {
            let mut out = String::with_capacity(1 + 2 * b.len());
            out.push('B');
            for byte in b {
                out.push_str(&format!("{byte:02x}"));
            }
            Some(out)
        }
        AttributeValue::N(n) => encode_number(&parse_number(n)?),
        _ => None,
    }
}

fn encode_number(number: &BigDecimal) -> Option<String> {
    let (digits, scale) = number.normalized().into_bigint_and_exponent();
    let negative = digits.sign() == bigdecimal::num_bigint::Sign::Minus;
    let digits = digits.magnitude().to_string();
    if digits == "0" {
        return Some("N1".to_owned());
    }
    // value = 0.<digits> × 10^exponent
    let exponent = digits.len() as i64 - scale;
    if exponent.abs() > MAX_EXPONENT {
        return None;
    }
    let mut out = String::with_capacity(8 + digits.len());
    if negative {
        out.push_str("N0");
        out.push_str(&format!("{:05}", MAX_EXPONENT - exponent));
        out.extend(digits.bytes().map(|d| char::from(b'9' - (d - b'0'))));
        out.push('~');
    } else {
        out.push_str("N2");
        out.push_str(&format!("{:05}", MAX_EXPONENT + exponent));
        out.push_str(&digits);
    }
    Some(out)
}

/// The encoded `(pk, sk)` of an item or key under a key definition (`sk`
/// is empty for a key without a sort attribute); `None` when an attribute
/// is absent or cannot be a key.
pub(crate) fn encode_key(def: &KeyDefinition, item: &Item) -> Option<(String, String)> {
    let pk = encode_value(item.get(&def.partition.name)?)?;
    let sk = match &def.sort {
        Some(sort) => encode_value(item.get(&sort.name)?)?,
        None => String::new(),
    };
    Some((pk, sk))
}

/// The smallest text greater than every text that starts with `prefix`, or
/// `None` when there is none (a prefix of only `U+10FFFF`s). UTF-8 byte
/// order is code point order, so incrementing the last code point works.
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match u32::from(last) + 1 {
            0xD800 => Some('\u{E000}'), // skip the surrogates
            code => char::from_u32(code),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{compare_values, n};
    use proptest::prelude::*;

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            (-1_000_000i64..1_000_000).prop_map(|i| i.to_string()),
            (-1_000_000i64..1_000_000, 0u32..8)
                .prop_map(|(i, scale)| { BigDecimal::new(i.into(), i64::from(scale)).to_string() }),
            (1u32..40, -120i32..120, any::<bool>()).prop_map(|(digits, exp, neg)| {
                format!("{}{digits}e{exp}", if neg { "-" } else { "" })
            }),
            Just("0".to_owned()),
            Just("-0.0".to_owned()),
        ]
    }

    proptest! {
        #[test]
        fn numbers_encode_in_value_order(a in number(), b in number()) {
            let (x, y) = (n(&a), n(&b));
            let encoded = (encode_value(&x).unwrap(), encode_value(&y).unwrap());
            prop_assert_eq!(compare_values(&x, &y), Some(encoded.0.cmp(&encoded.1)), "{} vs {}", a, b);
        }

        #[test]
        fn strings_and_binaries_encode_in_byte_order(a in ".*", b in ".*", x in proptest::collection::vec(any::<u8>(), 0..8), y in proptest::collection::vec(any::<u8>(), 0..8)) {
            let order = |p: AttributeValue, q: AttributeValue| {
                (compare_values(&p, &q), encode_value(&p).unwrap().cmp(&encode_value(&q).unwrap()))
            };
            let (by_value, by_text) = order(AttributeValue::S(a), AttributeValue::S(b));
            prop_assert_eq!(by_value, Some(by_text));
            let (by_value, by_text) = order(AttributeValue::B(x), AttributeValue::B(y));
            prop_assert_eq!(by_value, Some(by_text));
        }

        #[test]
        fn prefix_end_bounds_exactly_the_texts_with_the_prefix(prefix in ".{0,4}", text in ".{0,6}") {
            let with = text.starts_with(&prefix);
            let below_end = prefix_end(&prefix).is_none_or(|end| text < end);
            prop_assert_eq!(with, text >= prefix && below_end);
        }
    }

    #[test]
    fn equal_numbers_encode_equally_and_huge_ones_are_refused() {
        assert_eq!(encode_value(&n("1")), encode_value(&n("1.000")));
        assert_eq!(encode_value(&n("-0")), encode_value(&n("0")));
        assert_eq!(encode_value(&n("1e99999")), None);
        assert_eq!(encode_value(&n("abc")), None);
    }
}
