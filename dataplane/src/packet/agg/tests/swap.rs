//! The collective set changed at runtime ([`crate::agg::swap`]): a kept collective's round in
//! progress survives the switch and completes with every contribution summed; a new collective
//! sums from its first contribution; a deleted one reports the round it had in progress, and
//! its packets are then an unknown collective's (NAK reason 1, rule 5).

use super::*;
use crate::agg::context::AggContext;
use crate::agg::swap::CollSwap;
use crate::stats::Reason;
use crate::wire::gradient::NakReason;

#[test]
fn a_kept_round_survives_the_switch_a_new_collective_sums_and_a_deleted_one_is_unknown() {
    // Collective 7: two ranks, 8 lanes in chunks of 4.
    let mut rig = Rig::new(&conf("sum", "f32", "udp", false, "", 2, 8, 4));
    let mut io = VecIo::new(1);
    let seven = rig.coll.clone();
    let eight = Collective { id: 8, ..seven.clone() };
    let ctx = AggContext {
        ports: vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: None }],
        gradient_udp_port: crate::wire::gradient::DEFAULT_UDP_PORT,
        appliance_qpn: 1,
        workers: 1,
        shard: false,
        zero_copy_results: false,
    };
    // Rank 0 contributes to round 1 of 7's slot 0: in progress.
    let f = rig.frame(0, 0, 1, &f32s(&[1.0, 2.0, 3.0, 4.0]), |_| {});
    rig.send(&mut io, f, 10);
    assert!(io.sent.is_empty());

    // 8 added, 7 kept (its state moves into the new set).
    let mut s = CollSwap::new(&ctx, 0, &[seven.clone(), eight.clone()], &[0, 0], &[Some(0), None], 1, None);
    rig.dp.swap_collectives(&mut s);
    assert_eq!(s.left().count(), 0, "nothing removed");
    drop(s);
    let f = rig.frame(1, 0, 1, &f32s(&[10.0, 20.0, 30.0, 40.0]), |_| {});
    rig.send(&mut io, f, 20);
    let out = decode(&io);
    assert_eq!(out.len(), 2, "one RESULT per member");
    for (_, g, payload, _) in &out {
        assert_eq!((g.collective_id, g.round, g.tensor_offset, g.flags), (7, 1, 0, Flags::RESULT));
        assert_eq!(payload, &f32s(&[11.0, 22.0, 33.0, 44.0]), "rank 0's contribution from before the switch is in");
    }
    io.sent.clear();

    // 8 sums from its first contribution.
    rig.coll = eight.clone();
    for (k, v) in [(0, 1.5f32), (1, 2.25)] {
        let f = rig.frame(k, 4, 5, &f32s(&[v; 4]), |_| {});
        rig.send(&mut io, f, 30);
    }
    let out = decode(&io);
    assert_eq!(out.len(), 2);
    for (_, g, payload, _) in &out {
        assert_eq!((g.collective_id, g.round, g.tensor_offset, g.flags), (8, 5, 4, Flags::RESULT));
        assert_eq!(payload, &f32s(&[3.75; 4]));
    }
    io.sent.clear();
    // A round of 8 in progress when 8 is deleted.
    let f = rig.frame(0, 0, 6, &f32s(&[1.0; 4]), |_| {});
    rig.send(&mut io, f, 40);
    let mut s = CollSwap::new(&ctx, 0, std::slice::from_ref(&seven), &[0], &[Some(0)], 2, None);
    rig.dp.swap_collectives(&mut s);
    let left: Vec<_> = s.left().map(|(id, c, in_use)| (id, c.folded, c.completed, in_use)).collect();
    assert_eq!(left, [(8, 3, 1, 1)], "8 leaves 3 folds, 1 completed round and 1 round discarded");
    drop(s);
    // 8's packets are now an unknown collective's: dropped and answered with NAK reason 1.
    let f = rig.frame(1, 0, 6, &f32s(&[1.0; 4]), |_| {});
    rig.send(&mut io, f, 50);
    let out = decode(&io);
    assert_eq!(out.len(), 1);
    let (dst, g, _, _) = &out[0];
    assert_eq!((g.flags, g.reason, g.collective_id), (Flags::NAK, NakReason::UNKNOWN_COLLECTIVE, 8));
    assert_eq!(dst, &[10, 0, 0, 2]);
    assert_eq!(rig.dp.counters.dropped(Reason::GradUnknownCollective), 1);
    io.sent.clear();
    // 7 kept its state through both switches: a late round-1 contribution is answered with the
    // kept result (rule 3), and its counters ran on.
    rig.coll = seven.clone();
    let f = rig.frame(0, 0, 1, &f32s(&[1.0, 2.0, 3.0, 4.0]), |_| {});
    rig.send(&mut io, f, 60);
    let out = decode(&io);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].1.flags, out[0].1.round), (Flags::RESULT, 1));
    assert_eq!(out[0].2, f32s(&[11.0, 22.0, 33.0, 44.0]));
    let colls: Vec<_> =
        rig.dp.agg.as_ref().unwrap().collectives().map(|(id, c, _)| (id, c.folded, c.resends)).collect();
    assert_eq!(colls, [(7, 2, 1)]);
    // The aggregator's own counters keep what 8 did.
    assert_eq!((rig.agg().folded, rig.agg().completed), (5, 2));
}

/// A NAK as sent: (destination IP, destination UDP port, flags, reason, collective, round, data
/// length).
type Nak = (Vec<u8>, u16, u8, u8, u16, u32, u32);

/// The NAKs of `io` (every frame must be one: no payload).
fn naks(io: &VecIo) -> Vec<Nak> {
    decode(io)
        .into_iter()
        .map(|(dst, g, payload, p)| {
            assert!(payload.is_empty(), "a NAK carries no payload");
            (dst, p.udp_dst, g.flags, g.reason, g.collective_id, g.round, g.data_length)
        })
        .collect()
}

/// Deleting the last collective leaves the aggregator the appliance starts with when it has
/// none: a gradient packet addressed to the appliance is still its to consume, refused as an
/// unknown collective's (`grad_unknown_collective`, NAK reason 1 to its source: spec section 4
/// rule 5, section 5), never handed to the tables (where, with none, it was a silent
/// `no_egress` drop). A gradient packet to another host is transit, as before.
#[test]
fn with_no_collective_left_or_none_at_all_gradient_packets_for_the_appliance_are_naked() {
    let text = conf("sum", "f32", "udp", false, "", 2, 8, 4);
    let ctx = AggContext {
        ports: vec![PortAddr { mac: APP_MAC.parse().unwrap(), ipv4: Some([10, 0, 0, 254]), ipv6: None }],
        gradient_udp_port: crate::wire::gradient::DEFAULT_UDP_PORT,
        appliance_qpn: 1,
        workers: 1,
        shard: false,
        zero_copy_results: false,
    };
    // Collective 7 deleted at runtime (the new set is empty), with rank 0's round 3 in progress.
    let mut deleted = Rig::new(&text);
    let mut io = VecIo::new(1);
    let f = deleted.frame(0, 0, 3, &f32s(&[1.0; 4]), |_| {});
    deleted.send(&mut io, f, 10);
    let mut s = CollSwap::new(&ctx, 0, &[], &[], &[], 1, None);
    deleted.dp.swap_collectives(&mut s);
    let left: Vec<_> = s.left().map(|(id, c, in_use)| (id, c.folded, in_use)).collect();
    assert_eq!(left, [(7, 1, 1)], "7 leaves its fold and its round in progress");
    drop(s);
    assert_eq!(deleted.dp.agg.as_ref().unwrap().collectives().count(), 0);
    // The same collective's frames to an appliance that never had one.
    let mut never =
        Rig::with(&text, |_, ports| Aggregator::new(&[], ports, crate::wire::gradient::DEFAULT_UDP_PORT, 1));
    assert_eq!(never.dp.agg.as_ref().unwrap().collectives().count(), 0);

    for (rig, what) in [(&mut deleted, "deleted"), (&mut never, "never configured")] {
        let mut io = VecIo::new(1);
        // Rank 1's contribution of round 3, then (its own source, 200 ms later: the NAK limit is
        // one per source per 100 ms) rank 0's PROBE: each refused with NAK reason 1, to its sender.
        let f = rig.frame(1, 4, 3, &f32s(&[2.0; 4]), |_| {});
        rig.send(&mut io, f, 100_000);
        let f = rig.frame(0, 0, 0, &[0], |s| s.header.flags = Flags::PROBE);
        rig.send(&mut io, f, 300_000);
        assert_eq!(
            naks(&io),
            [
                (vec![10, 0, 0, 2], 50001, Flags::NAK, NakReason::UNKNOWN_COLLECTIVE, 7, 3, 0),
                (vec![10, 0, 0, 1], 50000, Flags::NAK, NakReason::UNKNOWN_COLLECTIVE, 7, 0, 0),
            ],
            "{what}"
        );
        let c = &rig.dp.counters;
        assert_eq!(
            (c.dropped(Reason::GradUnknownCollective), c.dropped(Reason::NoEgress), rig.agg().naks),
            (2, 0, 2),
            "{what}"
        );
        // A gradient packet to another host's address is transit: the (empty) tables send it
        // nowhere, without an answer.
        io.sent.clear();
        let f = rig.frame(1, 4, 3, &f32s(&[2.0; 4]), |s| {
            s.dst_ip = IpAddrBytes::V4([10, 0, 0, 9]);
        });
        rig.send(&mut io, f, 500_000);
        assert!(io.sent.is_empty(), "{what}");
        let c = &rig.dp.counters;
        assert_eq!((c.dropped(Reason::GradUnknownCollective), c.dropped(Reason::NoEgress)), (2, 1), "{what}");
    }
}
