//! The word key paths (`KeyPath::ExactWord`, `KeyPath::LpmWord`) against the general path
//! through the key buffer, on random parses: every header validity combination, every field a
//! one-field exact table can use, both IPv4 address fields in LPM tables.

use super::*;
use crate::action::Action;
use crate::meta::Meta;
use crate::parse::Layers;
use proptest::prelude::*;

/// Each layer bit, for building random validity combinations: bit i of `bits` is the
/// validity of `Layers::ALL[i]`.
const LAYERS: [Layers; 12] = Layers::ALL;

/// A parse with every field random and the layers of `bits` valid.
fn parsed(bits: u16, bytes: &[u8; 64]) -> Parsed {
    let mut p = Parsed::default();
    for (i, l) in LAYERS.iter().enumerate() {
        if bits & (1 << i) != 0 {
            p.layers.insert(*l);
        }
    }
    let u16at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
    p.eth_dst.0.copy_from_slice(&bytes[0..6]);
    p.eth_src.0.copy_from_slice(&bytes[6..12]);
    p.ethertype = u16at(12);
    p.vid_outer = u16at(14) & 0xfff;
    p.vid_inner = u16at(16) & 0xfff;
    p.ip_src_bytes.copy_from_slice(&bytes[18..34]);
    p.ip_dst_bytes.copy_from_slice(&bytes[34..50]);
    p.dscp = bytes[50] & 0x3f;
    p.ecn = bytes[51] & 3;
    p.ip_proto = bytes[52];
    p.ttl = bytes[53];
    p.udp_src = u16at(54);
    p.udp_dst = u16at(56);
    p.bth_opcode = bytes[58];
    p.bth_dest_qp = u32::from_le_bytes([bytes[59], bytes[60], bytes[61], 0]);
    p.grad_collective_id = u16at(62);
    p.grad_op = bytes[63] & 3;
    p
}

fn table(field: Field, kind: MatchKind) -> Table {
    Table::new("t", vec![(field, kind)], ActionList(vec![Action::Drop])).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// One-field exact tables of every field up to 8 bytes: the word path finds what the
    /// key-buffer path finds, hits (the packet's own value is an entry) and misses alike.
    #[test]
    fn exact_word_path_agrees(bits in any::<u16>(), bytes in prop::array::uniform32(any::<u8>()),
                              more in prop::array::uniform32(any::<u8>()), port in 0u16..4,
                              others in prop::collection::vec(any::<u64>(), 0..20), own in any::<bool>()) {
        let mut all = [0u8; 64];
        all[..32].copy_from_slice(&bytes);
        all[32..].copy_from_slice(&more);
        let p = parsed(bits, &all);
        for f in Field::ALL.iter().copied().filter(|f| f.width() <= 8) {
            let mut t = table(f, MatchKind::Exact);
            prop_assert_eq!(t.path, KeyPath::ExactWord(f), "{}", f.name());
            let mut mine = vec![0u8; f.width()];
            f.extract(&p, &Meta::new(port), &mut mine);
            let mut keys: Vec<Vec<u8>> = others.iter().map(|o| o.to_be_bytes()[8 - f.width()..].to_vec()).collect();
            if own {
                keys.push(mine.clone());
            }
            keys.sort();
            keys.dedup();
            for k in keys {
                t.insert(&[MatchValue::Exact(k)], None, ActionList(vec![])).unwrap();
            }
            prop_assert_eq!(t.lookup(&p, &Meta::new(port)), t.lookup_bytes(&p, &Meta::new(port)), "{}", f.name());
            if own {
                prop_assert!(t.lookup(&p, &Meta::new(port)).is_some(), "{} finds its own value", f.name());
            }
        }
    }

    /// LPM tables on `ipv4.src` or `ipv4.dst`: the word path agrees with the key buffer's,
    /// with prefixes of every length, including ones that cover the packet's address.
    #[test]
    fn lpm_word_path_agrees(bits in any::<u16>(), bytes in prop::array::uniform32(any::<u8>()),
                            more in prop::array::uniform32(any::<u8>()),
                            routes in prop::collection::vec((any::<u32>(), 0u8..=32), 0..40),
                            own in prop::collection::vec(0u8..=32, 0..4)) {
        let mut all = [0u8; 64];
        all[..32].copy_from_slice(&bytes);
        all[32..].copy_from_slice(&more);
        let p = parsed(bits, &all);
        for f in [Field::Ipv4Src, Field::Ipv4Dst] {
            let mut t = table(f, MatchKind::Lpm);
            prop_assert_eq!(t.path, KeyPath::LpmWord(f));
            let mut mine = [0u8; 4];
            f.extract(&p, &Meta::new(0), &mut mine);
            let mut seen = std::collections::HashSet::new();
            let covering = own.iter().map(|&l| (u32::from_be_bytes(mine), l));
            for (a, l) in routes.iter().copied().chain(covering) {
                let a = a & if l == 0 { 0 } else { u32::MAX << (32 - u32::from(l)) };
                if seen.insert((a, l)) {
                    t.insert(&[MatchValue::Lpm(a.to_be_bytes().to_vec(), l)], None, ActionList(vec![])).unwrap();
                }
            }
            prop_assert_eq!(t.lookup(&p, &Meta::new(0)), t.lookup_bytes(&p, &Meta::new(0)), "{}", f.name());
            if !own.is_empty() {
                prop_assert!(t.lookup(&p, &Meta::new(0)).is_some());
            }
        }
    }
}

/// Keys the word paths do not take keep the key buffer.
#[test]
fn other_keys_take_the_key_buffer() {
    assert_eq!(table(Field::Ipv6Dst, MatchKind::Exact).path, KeyPath::Bytes);
    assert_eq!(table(Field::Ipv6Dst, MatchKind::Lpm).path, KeyPath::Bytes);
    assert_eq!(table(Field::Ipv4Dst, MatchKind::Ternary).path, KeyPath::Bytes);
    let two = Table::new(
        "t",
        vec![(Field::IngressPort, MatchKind::Exact), (Field::Ipv4Dst, MatchKind::Lpm)],
        ActionList(vec![Action::Drop]),
    )
    .unwrap();
    assert_eq!(two.path, KeyPath::Bytes);
}

#[test]
fn workers_counters_sum() {
    let mut t = Table::new("t", vec![(Field::IngressPort, MatchKind::Exact)], ActionList(vec![Action::Drop])).unwrap();
    t.insert(&[MatchValue::Exact(vec![0, 1])], None, ActionList(vec![Action::Forward(0)])).unwrap();
    let pipe =
        Pipeline { tables: vec![t], counter_names: vec!["a".to_string(), "b".to_string()], ..Default::default() };
    let counts = |named: &[(usize, usize)], entry: (u64, u64), miss: (u64, u64)| {
        let mut c = PipelineState::new(&pipe);
        for (i, bytes) in named {
            c.named[*i].hit(*bytes);
        }
        c.entries_mut(0)[0] = Counter { packets: entry.0, bytes: entry.1 };
        *c.miss_mut(0) = Counter { packets: miss.0, bytes: miss.1 };
        c
    };
    let zero = PipelineState::new(&pipe);
    assert_eq!((zero.tables(), zero.entries(0).len(), zero.named.len()), (1, 1, 2));
    let mut sum = counts(&[(0, 60), (0, 100), (1, 82)], (3, 200), (1, 64));
    sum.add(&counts(&[(1, 64)], (1, 60), (0, 0)));
    sum.add(&zero);
    assert_eq!(sum.named, vec![Counter { packets: 2, bytes: 160 }, Counter { packets: 2, bytes: 146 }]);
    assert_eq!(sum.entries(0), [Counter { packets: 4, bytes: 260 }]);
    assert_eq!(sum.miss(0), Counter { packets: 1, bytes: 64 });
}

/// A table's own checks (arity, match kinds, priorities) and its bookkeeping through the
/// pipeline: the hit entry's actions, the per-entry and miss counters.
#[test]
fn entries_priorities_and_counters() {
    let port = |lo, hi| MatchValue::Range(lo, hi);
    let acts = |a: Vec<Action>| ActionList(a);
    let mut t = Table::new("acl", vec![(Field::IngressPort, MatchKind::Range)], acts(vec![Action::Drop])).unwrap();
    assert!(t.needs_priority());
    assert_eq!((t.key_len(), t.len(), t.is_empty()), (2, 0, true));
    assert_eq!(t.insert(&[], Some(1), acts(vec![])), Err(EntryError::Arity { expected: 1, got: 0 }));
    assert_eq!(
        t.insert(&[MatchValue::Exact(vec![0, 1])], Some(1), acts(vec![])),
        Err(EntryError::Kind { index: 0, kind: "range" })
    );
    assert!(matches!(t.insert(&[port(0, 9)], None, acts(vec![])), Err(EntryError::Priority(_))));
    assert_eq!(t.insert(&[port(0, 9)], Some(1), acts(vec![Action::Forward(1)])), Ok(0));
    assert_eq!(t.insert(&[port(5, 5)], Some(2), acts(vec![Action::Forward(2)])), Ok(1));
    assert_eq!((t.len(), t.is_empty()), (2, false));
    assert_eq!(t.actions(1), [Action::Forward(2)]);
    assert_eq!(t.default_action(), [Action::Drop]);

    let p = Parsed::default();
    assert_eq!(
        [t.lookup(&p, &Meta::new(5)), t.lookup(&p, &Meta::new(4)), t.lookup(&p, &Meta::new(10))],
        [Some(1), Some(0), None]
    );
    let pipe = Pipeline { tables: vec![t], ..Default::default() };
    let mut counts = PipelineState::new(&pipe);
    let mut run = |port: u16, len: usize| {
        let mut buf = crate::buf::VecBuf::from_frame(&vec![0; len]);
        pipe.apply(&mut counts, &mut buf, &mut Parsed::default(), &mut Meta::new(port))
    };
    assert_eq!(run(5, 60), Egress::Port(2));
    assert_eq!(run(4, 70), Egress::Port(1));
    assert_eq!(run(3, 80), Egress::Port(1));
    assert_eq!(run(10, 90), Egress::Dropped(Reason::TableMiss));
    assert_eq!(counts.entries(0), [Counter { packets: 2, bytes: 150 }, Counter { packets: 1, bytes: 60 }]);
    assert_eq!(counts.miss(0), Counter { packets: 1, bytes: 90 });

    // Exact and lpm tables take no priority.
    let mut t = Table::new("l2", vec![(Field::IngressPort, MatchKind::Exact)], acts(vec![])).unwrap();
    assert!(!t.needs_priority());
    assert!(matches!(t.insert(&[MatchValue::Exact(vec![0, 1])], Some(1), acts(vec![])), Err(EntryError::Priority(_))));
    assert_eq!(t.insert(&[MatchValue::Exact(vec![0, 1])], None, acts(vec![])), Ok(0));
    assert_eq!(t.lookup(&p, &Meta::new(1)), Some(0));
}

#[test]
fn match_kind_names_round_trip() {
    let kinds = [MatchKind::Exact, MatchKind::Lpm, MatchKind::Ternary, MatchKind::Range];
    assert_eq!(kinds.map(MatchKind::name), ["exact", "lpm", "ternary", "range"]);
    for k in kinds {
        assert_eq!(MatchKind::from_name(k.name()), Some(k));
    }
    assert_eq!(MatchKind::from_name("prefix"), None);
    assert_eq!(MatchKind::from_name(""), None);
}

/// A ternary value matches the key bits its mask sets and ignores the others.
#[test]
fn ternary_values_match_under_their_mask() {
    let mut t = Table::new("t", vec![(Field::IngressPort, MatchKind::Ternary)], ActionList(vec![])).unwrap();
    let v = MatchValue::Ternary(vec![0x00, 0x10], vec![0x00, 0xf0]);
    assert_eq!(t.insert(&[v], Some(1), ActionList(vec![Action::Forward(1)])), Ok(0));
    let p = Parsed::default();
    assert_eq!(
        [
            t.lookup(&p, &Meta::new(0x10)),
            t.lookup(&p, &Meta::new(0x1f)),
            t.lookup(&p, &Meta::new(0x20)),
            t.lookup(&p, &Meta::new(0x0f))
        ],
        [Some(0), Some(0), None, None]
    );
}

/// A one-table pipeline on the ingress port: port 1 forwards to 1, port 2 to 2, others miss
/// and drop.
fn two_port_pipeline() -> Pipeline {
    let mut t = Table::new("l2", vec![(Field::IngressPort, MatchKind::Exact)], ActionList(vec![Action::Drop])).unwrap();
    for port in [1u16, 2] {
        t.insert(&[MatchValue::Exact(port.to_be_bytes().to_vec())], None, ActionList(vec![Action::Forward(port)]))
            .unwrap();
    }
    Pipeline { tables: vec![t], ..Default::default() }
}

/// `first_lookup` is the first table's lookup; `apply_with_first_hit` takes the first table's
/// hit it is given (without looking the packet up again) and counts it.
#[test]
fn apply_with_first_hit_takes_the_given_hit() {
    let pipe = two_port_pipeline();
    let p = Parsed::default();
    let mut counts = PipelineState::new(&pipe);
    assert_eq!(
        [
            pipe.first_lookup(&counts, &p, &Meta::new(1)),
            pipe.first_lookup(&counts, &p, &Meta::new(2)),
            pipe.first_lookup(&counts, &p, &Meta::new(3))
        ],
        [Some(0), Some(1), None]
    );
    let empty = Pipeline::default();
    assert_eq!(empty.first_lookup(&PipelineState::new(&empty), &p, &Meta::new(1)), None);

    let mut buf = crate::buf::VecBuf::from_frame(&[0; 60]);
    assert_eq!(
        pipe.apply_with_first_hit::<false, _>(
            &mut counts,
            &mut buf,
            &mut Parsed::default(),
            &mut Meta::new(1),
            Some(1)
        ),
        Egress::Port(2)
    );
    assert_eq!(
        pipe.apply_with_first_hit::<false, _>(&mut counts, &mut buf, &mut Parsed::default(), &mut Meta::new(1), None),
        Egress::Dropped(Reason::TableMiss)
    );
    assert_eq!((counts.entries(0)[0].packets, counts.entries(0)[1].packets, counts.miss(0).packets), (0, 1, 1));
}

/// A multicast copy's rewrites change the frame, its counts count, and a rewrite that drops
/// the packet is the copy's error.
#[test]
fn apply_copy_rewrites_counts_and_fails() {
    let mac = crate::wire::EthernetAddress([2, 0, 0, 0, 0, 9]);
    let pipe = Pipeline {
        groups: vec![MulticastGroup {
            id: 5,
            copies: vec![
                (3, ActionList(vec![Action::SetEthDst(mac), Action::Count(0)])),
                (4, ActionList(vec![Action::DecTtl])),
            ],
        }],
        counter_names: vec!["copies".to_string()],
        ..Default::default()
    };
    let mut counts = PipelineState::new(&pipe);
    let mut buf = crate::buf::VecBuf::from_frame(&[0; 60]);
    let mut p = Parsed::default();
    assert_eq!(pipe.apply_copy(&mut counts, 0, 0, &mut buf, &mut p), Ok(()));
    assert_eq!((&buf.data()[..6], p.eth_dst), (&mac.0[..], mac));
    assert_eq!(counts.named[0], Counter { packets: 1, bytes: 60 });

    p.layers.insert(crate::parse::Layers::IPV4);
    p.ttl = 1;
    assert_eq!(pipe.apply_copy(&mut counts, 0, 1, &mut buf, &mut p), Err(Reason::TtlExpired));
}

proptest! {
    /// The 128-bit residue of an indexed meter on a wide field equals u128 arithmetic, for
    /// every kind of size (power of two, meter sizes up to 2^20, beyond 2^32).
    #[test]
    fn residue128_is_the_u128_remainder(hi: u64, lo: u64, n in prop_oneof![1u64..=1 << 20, 1u64..=u64::MAX], shift in 0u32..64) {
        let want = |n: u64| ((u128::from(hi) << 64 | u128::from(lo)) % u128::from(n)) as u64;
        prop_assert_eq!(super::residue128(hi, lo, n), want(n));
        let p = 1u64 << shift;
        prop_assert_eq!(super::residue128(hi, lo, p), want(p));
    }
}
