//! Entry values in configs, per match kind:
//!
//! | kind | syntax | example |
//! | --- | --- | --- |
//! | exact | a value | `"10.0.0.1"`, `"02:00:00:00:00:01"`, `4791`, `"0x86dd"` |
//! | lpm | value `/` prefix length in bits | `"10.0.0.0/8"`, `"fd00::/16"` |
//! | ternary | value `&&&` mask, a value (all bits), or `*` (none) | `"10.0.0.0 &&& 255.0.0.0"` |
//! | range | low `->` high (inclusive), a value, or `*` | `"1000->2000"` |

use super::field::{Field, ValueKind};
use super::MatchKind;
use crate::wire::EthernetAddress;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A parsed entry value for one key field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchValue {
    /// Exact bytes.
    Exact(Vec<u8>),
    /// Bytes and a prefix length in bits.
    Lpm(Vec<u8>, u8),
    /// Value and mask bytes.
    Ternary(Vec<u8>, Vec<u8>),
    /// Inclusive bounds.
    Range(u128, u128),
}

/// The largest value a field can hold (fields narrower than their bytes: DSCP, ECN, VID, ...).
pub fn max_value(field: Field) -> u128 {
    match field {
        Field::Ipv4Dscp | Field::Ipv6Dscp => 63,
        Field::Ipv4Ecn | Field::Ipv6Ecn => 3,
        Field::VlanOuterVid | Field::VlanInnerVid => 4095,
        Field::VlanOuterValid
        | Field::VlanInnerValid
        | Field::Ipv4Valid
        | Field::Ipv6Valid
        | Field::UdpValid
        | Field::BthValid
        | Field::GradientValid => 1,
        f => (1u128 << f.bits()) - 1,
    }
}

/// The width in bits of a field's values, as P4 declares the header field (`bit<12>` for a VLAN
/// ID, `bit<6>` for DSCP): the bits of [`max_value`], right-aligned in the field's key bytes. An
/// `lpm` prefix length counts these (a VID's /4 is its top 4 of 12 bits).
pub fn value_bits(field: Field) -> u32 {
    match field.bits() {
        128.. => field.bits(),
        _ => 128 - max_value(field).leading_zeros(),
    }
}

fn to_bytes(n: u128, width: usize) -> Vec<u8> {
    n.to_be_bytes()[16 - width..].to_vec()
}

/// Parses one value (no prefix, mask or range) of `field` into its big-endian bytes.
pub fn parse_value(field: Field, s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim();
    match field.value_kind() {
        ValueKind::Mac => s.parse::<EthernetAddress>().map(|m| m.0.to_vec()).map_err(|e| format!("{e}, found {s:?}")),
        ValueKind::Ipv4 => s
            .parse::<Ipv4Addr>()
            .map(|a| a.octets().to_vec())
            .map_err(|_| format!("expected an IPv4 address like 10.0.0.1 for {}, found {s:?}", field.name())),
        ValueKind::Ipv6 => s
            .parse::<Ipv6Addr>()
            .map(|a| a.octets().to_vec())
            .map_err(|_| format!("expected an IPv6 address like fd00::1 for {}, found {s:?}", field.name())),
        ValueKind::Int => {
            let n = parse_int(s).ok_or_else(|| {
                format!("expected an unsigned integer for {} (decimal or 0x hex), found {s:?}", field.name())
            })?;
            let max = max_value(field);
            if n > max {
                return Err(format!("expected at most {max} for {}, found {n}", field.name()));
            }
            Ok(to_bytes(n, field.width()))
        }
    }
}

fn parse_int(s: &str) -> Option<u128> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u128::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn as_text(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) if *i >= 0 => Ok(i.to_string()),
        other => Err(format!("expected a string or a non-negative integer, found {other}")),
    }
}

/// `field`'s value `b` (its key bytes) in one spelling: MACs `02:00:00:00:00:01`, IPv4 dotted,
/// IPv6 as Rust's `Ipv6Addr` prints it (RFC 5952), integers in decimal.
fn value_text(field: Field, b: &[u8]) -> String {
    match (field.value_kind(), b.len()) {
        (ValueKind::Mac, 6) => EthernetAddress([b[0], b[1], b[2], b[3], b[4], b[5]]).to_string(),
        (ValueKind::Ipv4, 4) => Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string(),
        (ValueKind::Ipv6, 16) => Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or([0; 16])).to_string(),
        _ => bytes_to_u128(b).to_string(),
    }
}

/// `v`, a value of `field`, in the entry syntax (module docs), one spelling per value: every
/// spelling of a key that parses to `v` gives this text (`*` for a wildcard, `a/len` for a
/// prefix, `v&&&m`, `lo->hi`), as stable entry labels need.
pub fn match_text(field: Field, v: &MatchValue) -> String {
    match v {
        MatchValue::Exact(b) => value_text(field, b),
        MatchValue::Lpm(b, key_len) => {
            let len = u32::from(*key_len).saturating_sub(field.bits() - value_bits(field));
            format!("{}/{len}", value_text(field, b))
        }
        MatchValue::Ternary(_, m) if m.iter().all(|x| *x == 0) => "*".to_string(),
        MatchValue::Ternary(b, m) if m.iter().all(|x| *x == 0xff) => value_text(field, b),
        MatchValue::Ternary(b, m) => format!("{}&&&{}", value_text(field, b), value_text(field, m)),
        MatchValue::Range(lo, hi) if *lo == 0 && *hi == max_value(field) => "*".to_string(),
        MatchValue::Range(lo, hi) if lo == hi => lo.to_string(),
        MatchValue::Range(lo, hi) => format!("{lo}->{hi}"),
    }
}

fn bytes_to_u128(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |a, x| (a << 8) | *x as u128)
}

/// Parses the value of `field` for match `kind` from a TOML value (syntax in the module docs).
pub fn parse_match_value(field: Field, kind: MatchKind, v: &toml::Value) -> Result<MatchValue, String> {
    let text = as_text(v)?;
    let t = text.trim();
    let w = field.width();
    match kind {
        MatchKind::Exact => parse_value(field, t).map(MatchValue::Exact),
        MatchKind::Lpm => {
            let (addr, len) = match t.split_once('/') {
                Some((a, l)) => {
                    let l: u32 =
                        l.trim().parse().map_err(|_| format!("expected a prefix length after '/', found {l:?}"))?;
                    (a, l)
                }
                None => (t, value_bits(field)),
            };
            // The length counts the field's own bits (P4: a VID is bit<12>), which sit at the
            // low end of its key bytes: the bits above them are always 0 and always in the
            // prefix.
            let vb = value_bits(field);
            if len > vb {
                return Err(format!("prefix length {len} is longer than {} ({vb} bits)", field.name()));
            }
            // At most `max_value`: the bits above the field's are 0.
            let mut b = parse_value(field, addr)?;
            let key_len = len + (field.bits() - vb);
            // Bits past the prefix must be zero: a route like 10.0.0.1/8 is a typo.
            let mask = prefix_mask(key_len, w);
            if b.iter().zip(&mask).any(|(x, m)| x & !m != 0) {
                return Err(format!("{t:?} has bits set past its /{len} prefix"));
            }
            b.iter_mut().zip(&mask).for_each(|(x, m)| *x &= m);
            Ok(MatchValue::Lpm(b, key_len as u8))
        }
        MatchKind::Ternary => {
            if t == "*" || t == "_" {
                return Ok(MatchValue::Ternary(vec![0; w], vec![0; w]));
            }
            match t.split_once("&&&") {
                Some((val, mask)) => {
                    let v = parse_value(field, val)?;
                    let m = parse_value(field, mask).map_err(|e| format!("mask: {e}"))?;
                    if v.iter().zip(&m).any(|(x, m)| x & !m != 0) {
                        return Err(format!("{t:?}: the value has bits outside its mask"));
                    }
                    Ok(MatchValue::Ternary(v, m))
                }
                None => {
                    let v = parse_value(field, t)?;
                    Ok(MatchValue::Ternary(v, vec![0xff; w]))
                }
            }
        }
        MatchKind::Range => {
            if t == "*" || t == "_" {
                return Ok(MatchValue::Range(0, max_value(field)));
            }
            let (lo, hi) = match t.split_once("->") {
                Some((lo, hi)) => (bytes_to_u128(&parse_value(field, lo)?), bytes_to_u128(&parse_value(field, hi)?)),
                None => {
                    let v = bytes_to_u128(&parse_value(field, t)?);
                    (v, v)
                }
            };
            if lo > hi {
                return Err(format!("{t:?}: the low bound is above the high bound"));
            }
            Ok(MatchValue::Range(lo, hi))
        }
    }
}

/// A mask of `len` leading one bits over `width` bytes.
pub fn prefix_mask(len: u32, width: usize) -> Vec<u8> {
    (0..width)
        .map(|i| {
            let start = i as u32 * 8;
            if len >= start + 8 {
                0xff
            } else if len <= start {
                0
            } else {
                0xffu8 << (8 - (len - start))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use toml::Value;

    fn s(x: &str) -> Value {
        Value::String(x.into())
    }

    #[test]
    fn values_per_kind() {
        assert_eq!(
            parse_match_value(Field::Ipv4Dst, MatchKind::Exact, &s("10.0.0.1")).unwrap(),
            MatchValue::Exact(vec![10, 0, 0, 1])
        );
        assert_eq!(
            parse_match_value(Field::UdpDstPort, MatchKind::Exact, &Value::Integer(4791)).unwrap(),
            MatchValue::Exact(vec![0x12, 0xb7])
        );
        assert_eq!(
            parse_match_value(Field::EthType, MatchKind::Exact, &s("0x86dd")).unwrap(),
            MatchValue::Exact(vec![0x86, 0xdd])
        );
        assert_eq!(
            parse_match_value(Field::Ipv4Dst, MatchKind::Lpm, &s("10.1.0.0/16")).unwrap(),
            MatchValue::Lpm(vec![10, 1, 0, 0], 16)
        );
        assert_eq!(
            parse_match_value(Field::Ipv4Dst, MatchKind::Lpm, &s("0.0.0.0/0")).unwrap(),
            MatchValue::Lpm(vec![0; 4], 0)
        );
        let MatchValue::Lpm(b, 16) = parse_match_value(Field::Ipv6Dst, MatchKind::Lpm, &s("fd00::/16")).unwrap() else {
            panic!()
        };
        assert_eq!(&b[..2], &[0xfd, 0]);
        assert_eq!(
            parse_match_value(Field::Ipv4Src, MatchKind::Ternary, &s("10.0.0.0 &&& 255.0.0.0")).unwrap(),
            MatchValue::Ternary(vec![10, 0, 0, 0], vec![255, 0, 0, 0])
        );
        assert_eq!(
            parse_match_value(Field::Ipv4Proto, MatchKind::Ternary, &s("*")).unwrap(),
            MatchValue::Ternary(vec![0], vec![0])
        );
        assert_eq!(
            parse_match_value(Field::UdpDstPort, MatchKind::Range, &s("1000->2000")).unwrap(),
            MatchValue::Range(1000, 2000)
        );
        assert_eq!(parse_match_value(Field::Ipv4Dscp, MatchKind::Range, &s("*")).unwrap(), MatchValue::Range(0, 63));
        assert_eq!(prefix_mask(12, 3), vec![0xff, 0xf0, 0]);
    }

    /// An `lpm` prefix counts the field's own bits, as P4's `bit<12>` VID and `bit<6>` DSCP:
    /// /12 is a whole VID, /4 its top 4 bits (in the key, the 4 bits above the VID are in the
    /// prefix too, always 0).
    #[test]
    fn prefix_lengths_count_the_fields_own_bits() {
        let lpm = |f, v: &str| parse_match_value(f, MatchKind::Lpm, &s(v));
        assert_eq!(lpm(Field::VlanOuterVid, "4095/12"), Ok(MatchValue::Lpm(vec![0x0f, 0xff], 16)));
        assert_eq!(lpm(Field::VlanOuterVid, "4095"), Ok(MatchValue::Lpm(vec![0x0f, 0xff], 16)));
        assert_eq!(lpm(Field::VlanOuterVid, "0/4"), Ok(MatchValue::Lpm(vec![0, 0], 8)));
        assert_eq!(lpm(Field::VlanInnerVid, "0/0"), Ok(MatchValue::Lpm(vec![0, 0], 4)));
        assert_eq!(lpm(Field::Ipv4Dscp, "46/6"), Ok(MatchValue::Lpm(vec![46], 8)));
        assert_eq!(lpm(Field::Ipv4Dscp, "32/1"), Ok(MatchValue::Lpm(vec![32], 3)));
        assert!(lpm(Field::VlanOuterVid, "4095/13").unwrap_err().contains("longer than vlan.outer_vid (12 bits)"));
        assert!(lpm(Field::VlanOuterVid, "4095/4").unwrap_err().contains("past its /4 prefix"));
        assert!(lpm(Field::VlanOuterVid, "4096/12").unwrap_err().contains("at most 4095"));
        assert!(lpm(Field::Ipv4Dscp, "46/8").unwrap_err().contains("longer than"));
        // Fields whose values fill their bytes are unchanged.
        assert_eq!(value_bits(Field::Ipv4Dst), 32);
        assert_eq!(value_bits(Field::UdpDstPort), 16);
        assert_eq!(value_bits(Field::BthDestQp), 24);
        assert_eq!(value_bits(Field::Ipv4Valid), 1);
        assert_eq!(value_bits(Field::Ipv6Src), 128);
    }

    #[test]
    fn bad_values_say_what_was_expected() {
        let e = |f, k, v: &str| parse_match_value(f, k, &s(v)).unwrap_err();
        assert!(e(Field::Ipv4Dst, MatchKind::Exact, "10.0.0").contains("IPv4 address"));
        assert!(e(Field::Ipv4Dst, MatchKind::Lpm, "10.0.0.0/33").contains("longer than"));
        assert!(e(Field::Ipv4Dst, MatchKind::Lpm, "10.0.0.1/8").contains("past its /8"));
        assert!(e(Field::Ipv4Dst, MatchKind::Ternary, "10.0.0.1 &&& 255.0.0.0").contains("outside its mask"));
        assert!(e(Field::UdpDstPort, MatchKind::Range, "2000->1000").contains("low bound"));
        assert!(e(Field::Ipv4Dscp, MatchKind::Exact, "64").contains("at most 63"));
        assert!(e(Field::UdpDstPort, MatchKind::Exact, "http").contains("unsigned integer"));
        assert!(e(Field::EthDst, MatchKind::Exact, "1:2:3").contains("MAC"));
        assert!(parse_match_value(Field::UdpDstPort, MatchKind::Exact, &Value::Boolean(true))
            .unwrap_err()
            .contains("expected a string"));
    }

    /// An integer value may be as large as the field's width allows (DSCP 6 bits, a 2-byte
    /// port 16, the 3-byte BTH QP 24), and not one more.
    #[test]
    fn int_values_up_to_the_field_maximum_are_accepted() {
        assert_eq!(parse_value(Field::Ipv4Dscp, "63"), Ok(vec![63]));
        assert_eq!(parse_value(Field::UdpDstPort, "65535"), Ok(vec![0xff, 0xff]));
        assert!(parse_value(Field::UdpDstPort, "65536").unwrap_err().contains("at most 65535"));
        assert_eq!(parse_value(Field::BthDestQp, "0xffffff"), Ok(vec![0xff, 0xff, 0xff]));
        assert!(parse_value(Field::BthDestQp, "0x1000000").unwrap_err().contains("at most 16777215"));
    }

    /// A negative TOML integer is refused as such, not read as the text "-1"; zero is a value.
    #[test]
    fn negative_integers_are_refused() {
        let e = parse_match_value(Field::UdpDstPort, MatchKind::Exact, &Value::Integer(-1)).unwrap_err();
        assert_eq!(e, "expected a string or a non-negative integer, found -1");
        assert_eq!(
            parse_match_value(Field::UdpDstPort, MatchKind::Exact, &Value::Integer(0)),
            Ok(MatchValue::Exact(vec![0, 0]))
        );
    }

    /// A range may hold one value: written `lo->hi` with equal bounds, or as the value alone.
    #[test]
    fn range_of_one_value() {
        let one = Ok(MatchValue::Range(4791, 4791));
        assert_eq!(parse_match_value(Field::UdpDstPort, MatchKind::Range, &s("4791->4791")), one);
        assert_eq!(parse_match_value(Field::UdpDstPort, MatchKind::Range, &s("4791")), one);
    }
}
