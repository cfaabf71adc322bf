//! Meter, class and marking configurations, with a timed trace through them.
//!
//! The input chooses a `[[meter]]` (srTCM, trTCM or RFC 4115, colour-blind or colour-aware,
//! rates and buckets from a palette that includes the RFCs' forbidden and the loader's limit
//! values), port 1's `[port.qos]` (1 to 8 classes, strict or DWRR, shaped or not, a DSCP map,
//! per class a capacity, a weight and RED/ECN thresholds, marking at enqueue or dequeue), the
//! actions that lead to them (`meter`, `police` with yellow and red actions, `set_class`,
//! `set_color`), and a trace: UDP and RoCEv2 frames over IPv4 and IPv6 with every ECN codepoint,
//! some with Ethernet padding, their capture times (gaps from 0 to a day, sometimes going back)
//! and how they are grouped into bursts.
//!
//! Invariants: loading never panics and a refused config is one line naming the file; a config
//! that loads builds its schedulers; then, after the trace and the end-of-replay drain:
//! - every frame leaves exactly once or is counted as dropped exactly once, and every queue is
//!   empty;
//! - per class, `enqueued` = `sent` + drops at dequeue, the highest depth stays within the
//!   class's capacity, and the classes' `sent` add up to the frames sent on the port;
//! - a frame that leaves is its input with at most ECT(0)/ECT(1) turned into CE (RFC 3168: a
//!   Not-ECT frame is never marked) and its IPv4 header checksum updated; it parses with every
//!   checksum and ICRC verified; no more frames were changed than the queues counted as marked;
//! - frames of one class leave in the order they came (each queue is FIFO);
//! - a meter's colour counts add up to the frames it metered, in packets and in bytes, the bytes
//!   being each frame without its Ethernet padding (14 + the IP datagram).
#![no_main]

use dataplane::buf::{VecBuf, VecIo};
use dataplane::datapath::Datapath;
use dataplane::parse::parse;
use dataplane::testing::load_fuzzed;
use dataplane::wire::build::{build, FrameSpec, IpAddrBytes, Roce};
use dataplane::wire::EthernetAddress;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use std::fmt::Write;

/// The gradient protocol's UDP port in the config (no frame here is a contribution).
const GRAD_PORT: u16 = 4000;
/// Most frames in a trace.
const MAX_FRAMES: usize = 400;
/// The L2 entry's destination: its frames get `set_class(K)`; others take the default path
/// (the meter, then the DSCP map).
const CLASS_DST: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];
const OTHER_DST: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];

/// Rates (bytes/s) and buckets (bytes), with the values the loader must refuse.
const RATES: [u64; 8] = [0, 1, 1000, 125_000, 1_250_000_000, 12_500_000_000, 1 << 40, (1 << 40) + 1];
const BURSTS: [u64; 8] = [0, 1, 64, 1500, 15_000, 1_000_000, 1 << 29, (1 << 29) + 1];
const DEPTHS: [u64; 7] = [0, 100, 1600, 3000, 20_000, 65_536, 262_144];
const GAPS_US: [u64; 8] = [0, 0, 1, 10, 100, 1000, 100_000, 86_400_000_000];

/// How the default path's frames meet the meter.
#[derive(Clone, Copy, PartialEq)]
enum MeterUse {
    None,
    Meter,
    Police,
    /// `police` whose yellow frames change class: their class depends on the colour.
    PoliceYellowClass,
}

struct Case {
    config: String,
    meter_use: MeterUse,
}

fn pick<T: Copy>(u: &mut Unstructured, xs: &[T]) -> Result<T> {
    Ok(*u.choose(xs)?)
}

fn config(u: &mut Unstructured) -> Result<Case> {
    let mut c = String::new();
    c.push_str("[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\n");
    writeln!(c, "[dataplane]\ngradient_udp_port = {GRAD_PORT}").unwrap();
    // Port 1's scheduler; occasionally a class count the loader refuses.
    let classes: u8 = if u.ratio(1, 16)? { pick(u, &[0, 9])? } else { u.int_in_range(1..=8)? };
    c.push_str("[port.qos]\n");
    writeln!(c, "classes = {classes}").unwrap();
    writeln!(c, "policy = \"{}\"", pick(u, &["strict", "dwrr"])?).unwrap();
    if u.arbitrary()? {
        writeln!(c, "rate = {}", pick(u, &RATES)?).unwrap();
        if u.arbitrary()? {
            writeln!(c, "burst = {}", pick(u, &BURSTS)?).unwrap();
        }
    }
    if u.ratio(1, 4)? {
        writeln!(c, "quantum = {}", pick(u, &[0u64, 1, 100, 2072, 9024])?).unwrap();
    }
    writeln!(c, "mark_at = \"{}\"", pick(u, &["enqueue", "dequeue"])?).unwrap();
    writeln!(c, "seed = {}", u.int_in_range(0..=3u64)?).unwrap();
    let map_len = u.int_in_range(0..=4usize)?;
    if map_len > 0 {
        let mut map = Vec::new();
        for _ in 0..map_len {
            let dscp: u8 = pick(u, &[0, 10, 26, 46, 63])?;
            let class = u.int_in_range(0..=classes)?;
            map.push(format!("{dscp} = {class}"));
        }
        map.sort();
        map.dedup_by(|a, b| a.split(' ').next() == b.split(' ').next());
        writeln!(c, "dscp_map = {{ {} }}", map.join(", ")).unwrap();
    }
    for _ in 0..classes.min(8) {
        c.push_str("[[port.qos.class]]\n");
        if u.arbitrary()? {
            writeln!(c, "capacity_bytes = {}", pick(u, &DEPTHS)?).unwrap();
        }
        if u.ratio(1, 3)? {
            writeln!(c, "weight = {}", pick(u, &[0u32, 1, 2, 7])?).unwrap();
        }
        if u.arbitrary()? {
            if u.ratio(1, 8)? {
                // Anything, the refusals included.
                writeln!(c, "kmin = {}", pick(u, &DEPTHS)?).unwrap();
                writeln!(c, "kmax = {}", pick(u, &DEPTHS)?).unwrap();
                writeln!(c, "pmax = {}", pick(u, &["0", "0.01", "0.5", "1", "1.5"])?).unwrap();
            } else {
                // Thresholds in order, so that queues that build up mark.
                let kmin = pick(u, &[0u64, 100, 1600, 3000, 20_000])?;
                writeln!(c, "kmin = {kmin}").unwrap();
                writeln!(c, "kmax = {}", kmin + pick(u, &[1u64, 1000, 5000, 20_000])?).unwrap();
                writeln!(c, "pmax = {}", pick(u, &["0.01", "0.5", "1"])?).unwrap();
            }
            if u.arbitrary()? {
                writeln!(c, "ewma_log2 = {}", pick(u, &[0u32, 1, 4, 20, 40])?).unwrap();
            }
        }
    }
    // The meter.
    let kind = pick(u, &["srtcm", "trtcm", "rfc4115"])?;
    writeln!(c, "[[meter]]\nname = \"m\"\ntype = \"{kind}\"").unwrap();
    let keys: &[&str] = match kind {
        "srtcm" => &["cir", "cbs", "ebs"],
        "trtcm" => &["cir", "cbs", "pir", "pbs"],
        _ => &["cir", "cbs", "eir", "ebs"],
    };
    for k in keys {
        if u.ratio(1, 16)? {
            continue; // a missing key
        }
        let v = if k.ends_with("ir") { pick(u, &RATES)? } else { pick(u, &BURSTS)? };
        writeln!(c, "{k} = {v}").unwrap();
    }
    let color_aware: bool = u.arbitrary()?;
    writeln!(c, "color_aware = {color_aware}").unwrap();
    // The pipeline: one L2 table.
    let meter_use = pick(u, &[MeterUse::None, MeterUse::Meter, MeterUse::Police, MeterUse::PoliceYellowClass])?;
    let set_color = if u.arbitrary()? { format!("set_color({}); ", pick(u, &["green", "yellow", "red"])?) } else { String::new() };
    let metering = match meter_use {
        MeterUse::None => String::new(),
        MeterUse::Meter => format!("{set_color}meter(m); "),
        MeterUse::Police => format!("{set_color}police(m); "),
        MeterUse::PoliceYellowClass => {
            format!("{set_color}police(m, yellow=set_class({}), red=drop); ", u.int_in_range(0..=classes)?)
        }
    };
    let k = u.int_in_range(0..=classes)?;
    c.push_str("[[table]]\nname = \"l2\"\nkey = [{ field = \"eth.dst\", match = \"exact\" }]\n");
    writeln!(c, "default_action = \"{metering}forward(1)\"").unwrap();
    c.push_str("[[table.entry]]\nkey = [\"02:00:00:00:00:0a\"]\n");
    writeln!(c, "action = \"set_class({k}); forward(1)\"").unwrap();
    Ok(Case { config: c, meter_use })
}

/// One frame of the trace.
struct Frame {
    bytes: Vec<u8>,
    /// Capture time (µs).
    t: u64,
    /// Starts a new burst.
    new_burst: bool,
}

fn trace(u: &mut Unstructured) -> Result<Vec<Frame>> {
    let n = u.int_in_range(1..=MAX_FRAMES)?;
    let mut t: u64 = 1_000_000;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let v6: bool = u.arbitrary()?;
        let roce = u.ratio(1, 4)?;
        let (src_ip, dst_ip) = if v6 {
            (IpAddrBytes::V6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]), IpAddrBytes::V6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]))
        } else {
            (IpAddrBytes::V4([10, 0, 0, 1]), IpAddrBytes::V4([10, 0, 0, 2]))
        };
        let spec = FrameSpec {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: EthernetAddress(if u.arbitrary()? { CLASS_DST } else { OTHER_DST }),
            src_ip,
            dst_ip,
            dscp: pick(u, &[0, 10, 26, 46, 63])?,
            ecn: u.int_in_range(0..=3)?,
            // The frame's index, to match what leaves with what came.
            src_port: 10_000 + i as u16,
            dst_port: if roce { 4791 } else { 9000 },
            roce: roce.then_some(Roce { dest_qp: 2, psn: i as u32, pkey: 0xffff, qkey: 0x1111_1111, src_qp: 1 }),
            ..FrameSpec::default()
        };
        let payload = vec![0x5a; pick(u, &[0usize, 4, 100, 1000, 1400])?];
        let mut bytes = vec![0u8; spec.frame_len(payload.len())];
        let len = build(&spec, &payload, &mut bytes).expect("a frame the spec allows");
        bytes.truncate(len);
        if u.ratio(1, 8)? {
            bytes.extend(std::iter::repeat(0xaa).take(u.int_in_range(1..=24)?));
        }
        let gap = pick(u, &GAPS_US)?;
        t = if u.ratio(1, 16)? { t.saturating_sub(50) } else { t.saturating_add(gap) };
        out.push(Frame { bytes, t, new_burst: u.ratio(1, 3)? });
    }
    Ok(out)
}

/// Bytes a meter counts: the frame without Ethernet padding (14 + the IP datagram).
fn unpadded_len(f: &[u8]) -> u64 {
    match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => 14 + u16::from_be_bytes([f[16], f[17]]) as u64,
        _ => 14 + 40 + u16::from_be_bytes([f[18], f[19]]) as u64,
    }
}

/// The frame's ECN codepoint.
fn ecn(f: &[u8]) -> u8 {
    match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => f[15] & 3,
        _ => ((u16::from_be_bytes([f[14], f[15]]) >> 4) & 3) as u8,
    }
}

/// `f` with its ECN set to `e`, and its IPv4 header checksum as `out` has it (checked valid by
/// the parse).
fn with_ecn(f: &[u8], e: u8, out: &[u8]) -> Vec<u8> {
    let mut g = f.to_vec();
    if u16::from_be_bytes([g[12], g[13]]) == 0x0800 {
        g[15] = (g[15] & !3) | e;
        g[24..26].copy_from_slice(&out[24..26]);
    } else {
        g[15] = (g[15] & !0x30) | (e << 4);
    }
    g
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(case) = config(&mut u) else { return };
    let Ok(frames) = trace(&mut u) else { return };
    let Some(loaded) = load_fuzzed(&case.config) else { return };
    let qos = loaded.qos.clone();
    let mut dp = Datapath::new(loaded.pipeline, 2, GRAD_PORT)
        .with_egress(&qos)
        .unwrap_or_else(|e| panic!("a config that loads builds its schedulers: {e}\n{}", case.config));
    let mut io = VecIo::new(2);

    // The trace, in bursts stamped with their frames' capture times.
    let mut burst: Vec<Option<VecBuf>> = Vec::new();
    let mut now = 0;
    for f in &frames {
        if f.new_burst && !burst.is_empty() {
            dp.process_burst(&mut io, 0, &mut burst, now);
            burst.clear();
        }
        let mut b = VecBuf::from_frame(&f.bytes);
        b.timestamp_us = Some(f.t);
        now = f.t;
        burst.push(Some(b));
    }
    dp.process_burst(&mut io, 0, &mut burst, now);
    dp.drain_egress(&mut io, now);
    dp.finish_egress(&mut io);

    // Exactly once: sent or counted.
    let drops = dp.counters.total_drops();
    assert_eq!(io.sent.len() as u64 + drops, frames.len() as u64, "sent + dropped = offered\n{}", case.config);
    assert!(dp.next_departure().is_none(), "nothing left to depart");
    let e = dp.egress[1].as_ref().expect("port 1 has a scheduler");
    assert!(e.sched.is_empty(), "queues empty at the end");
    let caps = &qos[1].as_ref().unwrap().0.classes;
    let mut sent_by_classes = 0;
    let mut marked = 0;
    for class in 0..e.sched.classes() {
        let c = e.sched.counters(class);
        // Drops at dequeue are RED's (marking at dequeue): counted red_drop, never sent.
        assert!(c.enqueued.pkts >= c.sent.pkts, "class {class}: sent more than enqueued");
        assert!(c.enqueued.pkts <= c.sent.pkts + c.red_drop.pkts, "class {class}: enqueued frames lost");
        assert!(c.max_depth_bytes <= caps[class].capacity_bytes, "class {class}: depth above capacity");
        assert!(c.ecn_marked.pkts <= c.sent.pkts, "class {class}: marked more than sent");
        sent_by_classes += c.sent.pkts;
        marked += c.ecn_marked.pkts;
    }
    assert!(io.sent.iter().all(|(p, _)| *p == 1));
    assert_eq!(sent_by_classes, io.sent.len() as u64, "the classes' sent = the port's frames");

    // What left: each input once, unchanged but for ECT -> CE; FIFO per class.
    let by_index: HashMap<u16, usize> = frames.iter().enumerate().map(|(i, _)| (10_000 + i as u16, i)).collect();
    let mut seen = vec![false; frames.len()];
    let mut changed = 0;
    let mut last_in_group: HashMap<(bool, u8), usize> = HashMap::new();
    for (_, out) in &io.sent {
        let p = parse(out, GRAD_PORT).unwrap_or_else(|r| panic!("a frame that left does not parse: {r}"));
        let i = by_index[&p.udp_src];
        assert!(!seen[i], "frame {i} left twice");
        seen[i] = true;
        let input = &frames[i].bytes;
        let (a, b) = (ecn(input), ecn(out));
        if a != b {
            assert!(a == 1 || a == 2, "frame {i}: ECN {a} -> {b}: only ECT becomes CE");
            assert_eq!(b, 3, "frame {i}: ECN {a} -> {b}");
            changed += 1;
        }
        assert_eq!(&with_ecn(input, b, out), out, "frame {i}: only ECN and the IPv4 checksum change");
        // FIFO: the L2 entry's frames share one class; the default path's share one per DSCP,
        // unless the meter's colour picks the class.
        let to_entry = input[..6] == CLASS_DST;
        if to_entry || case.meter_use != MeterUse::PoliceYellowClass {
            let key = (to_entry, if to_entry { 0 } else { p.dscp });
            if let Some(&prev) = last_in_group.get(&key) {
                assert!(prev < i, "frame {i} overtook frame {prev} of its class");
            }
            last_in_group.insert(key, i);
        }
    }
    assert!(changed <= marked, "{changed} frames changed, {marked} counted as marked");

    // The meter counted every default-path frame once, without padding.
    if case.meter_use != MeterUse::None {
        let metered: Vec<&Frame> = frames.iter().filter(|f| f.bytes[..6] == OTHER_DST).collect();
        let colors = dp.pipeline_state.meter_colors(0);
        let pkts: u64 = colors.iter().map(|c| c.packets).sum();
        let bytes: u64 = colors.iter().map(|c| c.bytes).sum();
        assert_eq!(pkts, metered.len() as u64, "every metered frame has one colour");
        assert_eq!(bytes, metered.iter().map(|f| unpadded_len(&f.bytes)).sum::<u64>(), "metered bytes exclude padding");
    }
});
