//! The Wireshark dissector tools/wireshark/gradient.lua, run by tshark: over frames the project's
//! own builder writes (dataplane::wire::build, through tests/src/grad.rs), on both carriages,
//! every header field, flag, NAK reason and PROBE/STATUS state compared with what was built;
//! over malformed and foreign frames, which it must flag or leave alone; and over the shared
//! cases, which carry no gradient header and must come out exactly as without it.

use dataplane::config::DEFAULT_GRADIENT_UDP_PORT;
use dataplane::wire::build::FrameSpec;
use dataplane::wire::gradient::{GradientRepr, RANK_NONE};
use functional_tests::frames::Udp4;
use functional_tests::grad::Coll;
use functional_tests::*;
use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The dissector under test.
fn script() -> PathBuf {
    let p = root().join("tools/wireshark/gradient.lua");
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// Every field the checks read, in this order on each line of `tshark -T fields`.
const FIELDS: &[&str] = &[
    "frame.number",
    "frame.protocols",
    "grad.carriage",
    "grad.kind",
    "grad.version",
    "grad.flags",
    "grad.flags.result",
    "grad.flags.retransmit",
    "grad.flags.nak",
    "grad.flags.probe",
    "grad.op",
    "grad.collective_id",
    "grad.dtype",
    "grad.reason",
    "grad.nak_reason",
    "grad.slot_state",
    "grad.worker_rank",
    "grad.tensor_offset",
    "grad.data_length",
    "grad.round",
    "grad.elements",
    "grad.lane.f32",
    "grad.lane.f16",
    "grad.lane.bf16",
    "grad.lane.i32",
    "grad.status.rank_in",
    "grad.status.ranks_in",
    "grad.padding",
    "grad.trailing",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "_ws.expert.message",
];

/// tshark, or a failure naming the package that provides it.
fn tshark() -> Command {
    match Command::new("tshark").arg("--version").output() {
        Ok(o) if o.status.success() => Command::new("tshark"),
        Ok(o) => panic!("tshark --version failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!(
            "tshark is not installed ({e}): install the Debian package `tshark` \
             (tools/install-deps.sh, which `make test` runs, installs it)"
        ),
    }
}

/// Fails on anything tshark printed to stderr but its warning about running as root: a script
/// that does not load, or a Lua error, shows there.
fn assert_quiet_stderr(stderr: &[u8], what: &str) {
    let text = String::from_utf8_lossy(stderr);
    let noise: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty() && !l.contains("Running as user")).collect();
    assert!(noise.is_empty(), "tshark on {what} printed:\n{}", noise.join("\n"));
}

/// One frame's fields: field name to its values (several occurrences joined by ',').
type Row = HashMap<&'static str, String>;

/// Runs tshark with `lua` (the dissector, or none) over `pcap` with `options` (`-o` settings)
/// and returns one row per frame. Fails on a Lua error in any frame.
fn dissect(pcap: &Path, lua: bool, options: &[&str]) -> Vec<Row> {
    let mut cmd = tshark();
    if lua {
        cmd.arg("-X").arg(format!("lua_script:{}", script().display()));
    }
    for o in options {
        cmd.args(["-o", o]);
    }
    cmd.arg("-r").arg(pcap).args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]);
    // Without the dissector, its fields do not exist: they read as absent.
    let fields: Vec<&'static str> = FIELDS.iter().copied().filter(|f| lua || !f.starts_with("grad.")).collect();
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(out.status.success(), "tshark on {} failed: {}", pcap.display(), String::from_utf8_lossy(&out.stderr));
    assert_quiet_stderr(&out.stderr, &pcap.display().to_string());
    let rows: Vec<Row> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), fields.len(), "a line of {} fields: {l:?}", fields.len());
            let mut row: Row = FIELDS.iter().map(|&f| (f, String::new())).collect();
            row.extend(fields.iter().copied().zip(cols.iter().map(|c| c.to_string())));
            row
        })
        .collect();
    for r in &rows {
        assert!(
            !r["_ws.expert.message"].contains("Lua Error"),
            "frame {}: {}",
            r["frame.number"],
            r["_ws.expert.message"]
        );
    }
    rows
}

/// `tshark -V` text of `pcap` with the dissector.
fn verbose(pcap: &Path) -> String {
    let out = tshark()
        .arg("-X")
        .arg(format!("lua_script:{}", script().display()))
        .arg("-r")
        .arg(pcap)
        .arg("-V")
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark -V failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_quiet_stderr(&out.stderr, &pcap.display().to_string());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains("Lua Error"), "a Lua error in:\n{text}");
    text
}

/// A tshark number: decimal, or hexadecimal with 0x; booleans as 0/1 or False/True.
fn num(s: &str) -> u64 {
    match s {
        "True" => 1,
        "False" => 0,
        _ => match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        }
        .unwrap_or_else(|e| panic!("not a number: {s:?} ({e})")),
    }
}

/// The payload lanes a frame carries, as built (values as the spec's dtype defines them).
#[derive(Debug, Clone)]
enum Lanes {
    /// No lanes: a NAK's empty payload, a PROBE's zeros, a STATUS's bitmap.
    None(Vec<u8>),
    F32(Vec<f32>),
    /// (bits, the value they encode).
    F16(Vec<(u16, f32)>),
    /// bits; the value is the binary32 whose top half they are.
    Bf16(Vec<u16>),
    I32(Vec<i32>),
}

impl Lanes {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Lanes::None(b) => b.clone(),
            Lanes::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Lanes::F16(v) => v.iter().flat_map(|(b, _)| b.to_le_bytes()).collect(),
            Lanes::Bf16(v) => v.iter().flat_map(|b| b.to_le_bytes()).collect(),
            Lanes::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// (the lane field, the values of the first `shown` lanes as f32, or as i32 for i32).
    fn expected(&self, shown: usize) -> Option<(&'static str, Vec<f64>)> {
        let take = |v: Vec<f64>| v.into_iter().take(shown).collect::<Vec<_>>();
        match self {
            Lanes::None(_) => None,
            Lanes::F32(v) => Some(("grad.lane.f32", take(v.iter().map(|&x| x as f64).collect()))),
            Lanes::F16(v) => Some(("grad.lane.f16", take(v.iter().map(|&(_, x)| x as f64).collect()))),
            Lanes::Bf16(v) => {
                Some(("grad.lane.bf16", take(v.iter().map(|&b| f32::from_bits((b as u32) << 16) as f64).collect())))
            }
            Lanes::I32(v) => Some(("grad.lane.i32", take(v.iter().map(|&x| x as f64).collect()))),
        }
    }

    fn count(&self) -> usize {
        match self {
            Lanes::None(_) => 0,
            Lanes::F32(v) => v.len(),
            Lanes::F16(v) => v.len(),
            Lanes::Bf16(v) => v.len(),
            Lanes::I32(v) => v.len(),
        }
    }
}

/// One built frame and what the dissector must show for it.
struct Case {
    name: &'static str,
    frame: Vec<u8>,
    /// The header as built.
    header: GradientRepr,
    carriage: &'static str,
    kind: &'static str,
    lanes: Lanes,
    /// STATUS: the ranks whose bit is set in the bitmap.
    ranks_in: Vec<u16>,
    /// RoCEv2: the BTH DestQP and the pad.
    roce: Option<(u32, usize)>,
}

/// Lanes the dissector decodes per packet by default (its preference grad.lanes).
const SHOWN: usize = 8;

/// Builds a frame with `coll`'s builder from rank `k` (or, with `from_appliance`, to it),
/// with `payload`; `tweak` sets the header. Returns the frame and the spec it was built from.
fn build(
    coll: &Coll,
    k: usize,
    from_appliance: bool,
    payload: &[u8],
    tweak: impl Fn(&mut FrameSpec),
) -> (Vec<u8>, FrameSpec) {
    let spec = Cell::new(None);
    let frame = coll.frame(k, 0, 0, payload, |s| {
        if from_appliance {
            std::mem::swap(&mut s.src_ip, &mut s.dst_ip);
            std::mem::swap(&mut s.src_mac, &mut s.dst_mac);
            match s.roce.as_mut() {
                Some(r) => {
                    s.src_port = 0xd123;
                    r.dest_qp = 0x100 + k as u32;
                    r.src_qp = 1;
                }
                None => {
                    s.dst_port = s.src_port;
                    s.src_port = DEFAULT_GRADIENT_UDP_PORT;
                }
            }
            s.header.worker_rank = RANK_NONE;
        }
        tweak(s);
        spec.set(Some(*s));
    });
    (frame, spec.get().unwrap())
}

fn built(
    name: &'static str,
    coll: &Coll,
    k: usize,
    from_appliance: bool,
    kind: &'static str,
    lanes: Lanes,
    tweak: impl Fn(&mut FrameSpec),
) -> Case {
    let payload = lanes.bytes();
    let (frame, spec) = build(coll, k, from_appliance, &payload, tweak);
    let ranks_in = (0..payload.len() * 8).filter(|&r| (payload[r / 8] >> (r % 8)) & 1 == 1).map(|r| r as u16).collect();
    Case {
        name,
        frame,
        header: spec.header,
        carriage: if spec.roce.is_some() { "RoCEv2" } else { "UDP" },
        kind,
        lanes,
        ranks_in,
        roce: spec.roce.map(|r| (r.dest_qp, spec.pad(payload.len()))),
    }
}

fn f16_lanes() -> Lanes {
    Lanes::F16(vec![
        (0x3c00, 1.0),
        (0xb800, -0.5),
        (0x7bff, 65504.0),
        (0x0001, 2f32.powi(-24)),
        (0x8000, -0.0),
        (0x7c00, f32::INFINITY),
        (0xfc00, f32::NEG_INFINITY),
        (0x7e00, f32::NAN),
        (0x3555, 0.333_251_95),
    ])
}

/// Every kind of packet of spec sections 2, 5 and 7 on both carriages (RoCEv2 both to the
/// appliance's QP 1, which Wireshark reads as a management datagram, and to a member's QP).
fn cases() -> Vec<Case> {
    let udp = Coll { id: 7, n: 10, ..Coll::default() };
    let udp6 = Coll { id: 300, op: "max", dtype: "i32", v6: true, n: 4, ..Coll::default() };
    let roce = Coll { id: 9, dtype: "bf16", roce: true, n: 3, ..Coll::default() };
    let roce6 = Coll { id: 65535, op: "min", roce: true, v6: true, n: 10, ..Coll::default() };
    let f32s = Lanes::F32(vec![1.5, -2.0, 0.1, f32::from_bits(1), -0.0, f32::INFINITY, f32::MAX, -1.0e-30, 12345.678]);
    let i32s = Lanes::I32(vec![0, 1, -1, i32::MAX, i32::MIN, 123_456_789]);
    let bf16s = Lanes::Bf16(vec![0x3fc0, 0xc000, 0x0001]);
    vec![
        built("UDP contribution, f32, 9 lanes", &udp, 2, false, "CONTRIBUTION", f32s.clone(), |s| {
            s.header = GradientRepr { tensor_offset: 1024, round: 3, ..s.header }
        }),
        built("UDP RETRANSMIT, i32, IPv6, VLAN", &udp6, 3, false, "CONTRIBUTION", i32s, |s| {
            s.vlan = Some(42);
            s.header.flags = 0x2;
            s.header.tensor_offset = 6;
            s.header.round = 0xffff_ffff;
        }),
        built("UDP RESULT, f16", &udp, 0, true, "RESULT", f16_lanes(), |s| {
            s.header = GradientRepr { flags: 0x1, op_type: 3, dtype: 2, tensor_offset: 4096, round: 77, ..s.header }
        }),
        built("RoCEv2 contribution to QP 1, bf16, pad 2", &roce, 1, false, "CONTRIBUTION", bf16s.clone(), |s| {
            s.header = GradientRepr { tensor_offset: 8, round: 5, ..s.header }
        }),
        built("RoCEv2 RESULT to a member's QP, IPv6, f32", &roce6, 2, true, "RESULT", f32s, |s| {
            s.header = GradientRepr { flags: 0x1, tensor_offset: 12, round: 1, ..s.header }
        }),
        built("RoCEv2 RETRANSMIT to QP 1, IPv6, bf16", &roce6, 9, false, "CONTRIBUTION", bf16s, |s| {
            s.header = GradientRepr { flags: 0x2, dtype: 3, round: 2, ..s.header }
        }),
        built("UDP NAK 7 (stale round)", &udp, 4, true, "NAK", Lanes::None(vec![]), |s| {
            s.header = GradientRepr { flags: 0x4, reason: 7, tensor_offset: 16, round: 12, ..s.header }
        }),
        built("RoCEv2 NAK 3 to a member's QP", &roce, 2, true, "NAK", Lanes::None(vec![]), |s| {
            s.header = GradientRepr { flags: 0x4, reason: 3, tensor_offset: 4, round: 9, ..s.header }
        }),
        built("UDP PROBE", &udp, 1, false, "PROBE", Lanes::None(vec![0, 0]), |s| {
            s.header = GradientRepr { flags: 0x8, tensor_offset: 20, ..s.header }
        }),
        built("RoCEv2 PROBE|RETRANSMIT to QP 1", &roce, 2, false, "PROBE", Lanes::None(vec![0]), |s| {
            s.header = GradientRepr { flags: 0xa, tensor_offset: 4, ..s.header }
        }),
        built("UDP STATUS 2, ranks 0 3 9", &udp, 3, true, "STATUS", Lanes::None(vec![0x09, 0x02]), |s| {
            s.header = GradientRepr { flags: 0x9, reason: 2, tensor_offset: 20, round: 4, ..s.header }
        }),
        built("RoCEv2 STATUS 3 to a member's QP", &roce, 1, true, "STATUS", Lanes::None(vec![0x00]), |s| {
            s.header = GradientRepr { flags: 0x9, reason: 3, round: 8, ..s.header }
        }),
        built(
            "RoCEv2 STATUS 1 to a member's QP, IPv6",
            &roce6,
            5,
            true,
            "STATUS",
            Lanes::None(vec![0xdf, 0x03]),
            |s| s.header = GradientRepr { flags: 0x9, reason: 1, round: 0x8000_0000, ..s.header },
        ),
        built("UDP STATUS 0", &udp, 9, true, "STATUS", Lanes::None(vec![0, 0]), |s| {
            s.header = GradientRepr { flags: 0x9, reason: 0, ..s.header }
        }),
    ]
}

/// Compares the lane values tshark shows for `field` with the built ones: as binary32 (every
/// lane of every dtype is one, and tshark's 15 digits round-trip it), NaN as NaN.
fn assert_lanes(name: &str, field: &str, got: &str, want: &[f64], int: bool) {
    let got: Vec<&str> = if got.is_empty() { vec![] } else { got.split(',').collect() };
    assert_eq!(got.len(), want.len(), "{name}: {field} = {got:?}, built {want:?}");
    for (g, &w) in got.iter().zip(want) {
        if int {
            assert_eq!(g.parse::<i64>().unwrap(), w as i64, "{name}: {field} {got:?} vs {want:?}");
        } else if w.is_nan() {
            assert!(g.to_ascii_lowercase().contains("nan"), "{name}: {field} lane {g}, built NaN");
        } else {
            let v: f32 = g.parse().unwrap_or_else(|e| panic!("{name}: {field} lane {g:?}: {e}"));
            assert_eq!(v.to_bits(), (w as f32).to_bits(), "{name}: {field} lane {g}, built {w:e}");
        }
    }
}

/// What every case's frame must show: each header field equal to the built one, the flags one
/// by one, the reason byte under the name of what it is, the lanes, the STATUS bitmap, the pad.
fn assert_case(c: &Case, r: &Row) {
    let h = &c.header;
    let n = c.name;
    let eq = |field: &str, want: u64| {
        assert!(!r[field].is_empty(), "{n}: no {field}; row {r:?}");
        assert_eq!(num(&r[field]), want, "{n}: {field} = {:?}, built {want}", r[field]);
    };
    let absent = |field: &str| assert!(r[field].is_empty(), "{n}: {field} = {:?}, should be absent", r[field]);
    assert_eq!(r["grad.carriage"], c.carriage, "{n}");
    assert_eq!(r["grad.kind"], c.kind, "{n}");
    eq("grad.version", h.version as u64);
    eq("grad.flags", h.flags as u64);
    eq("grad.flags.result", (h.flags & 1) as u64);
    eq("grad.flags.retransmit", ((h.flags >> 1) & 1) as u64);
    eq("grad.flags.nak", ((h.flags >> 2) & 1) as u64);
    eq("grad.flags.probe", ((h.flags >> 3) & 1) as u64);
    eq("grad.op", h.op_type as u64);
    eq("grad.collective_id", h.collective_id as u64);
    eq("grad.dtype", h.dtype as u64);
    let reason_field = match c.kind {
        "NAK" => "grad.nak_reason",
        "STATUS" => "grad.slot_state",
        _ => "grad.reason",
    };
    for f in ["grad.reason", "grad.nak_reason", "grad.slot_state"] {
        if f == reason_field {
            eq(f, h.reason as u64);
        } else {
            absent(f);
        }
    }
    eq("grad.worker_rank", h.worker_rank as u64);
    eq("grad.tensor_offset", h.tensor_offset as u64);
    eq("grad.data_length", h.data_length as u64);
    eq("grad.round", h.round as u64);
    match c.lanes.expected(SHOWN) {
        Some((field, want)) => {
            eq("grad.elements", c.lanes.count() as u64);
            assert_eq!(c.lanes.count() * if field.ends_with("32") { 4 } else { 2 }, h.data_length as usize);
            assert_lanes(n, field, &r[field], &want, field == "grad.lane.i32");
            for other in ["grad.lane.f32", "grad.lane.f16", "grad.lane.bf16", "grad.lane.i32"] {
                if other != field {
                    absent(other);
                }
            }
        }
        None => {
            absent("grad.elements");
            for f in ["grad.lane.f32", "grad.lane.f16", "grad.lane.bf16", "grad.lane.i32"] {
                absent(f);
            }
        }
    }
    if c.kind == "STATUS" {
        let got: Vec<u64> = if r["grad.status.rank_in"].is_empty() {
            vec![]
        } else {
            r["grad.status.rank_in"].split(',').map(num).collect()
        };
        let want: Vec<u64> = c.ranks_in.iter().map(|&k| k as u64).collect();
        assert_eq!(got, want, "{n}: grad.status.rank_in");
        eq("grad.status.ranks_in", c.ranks_in.len() as u64);
    } else {
        absent("grad.status.rank_in");
    }
    match c.roce {
        Some((qp, pad)) => {
            eq("infiniband.bth.opcode", 0x64);
            eq("infiniband.bth.destqp", qp as u64);
            let want_pad = "00".repeat(pad);
            let got_pad = r["grad.padding"].replace(':', "");
            assert_eq!(got_pad, want_pad, "{n}: grad.padding");
        }
        None => absent("grad.padding"),
    }
    absent("grad.trailing");
    // A well-formed packet draws no warning or error; a NAK draws its note.
    let experts = &r["_ws.expert.message"];
    let want_experts =
        if c.kind == "NAK" { format!("NAK: {}", NAK_REASONS[h.reason as usize - 1]) } else { String::new() };
    assert_eq!(experts, &want_experts, "{n}: expert info");
}

/// Spec section 5's reasons, 1 to 7, as the dissector names them.
const NAK_REASONS: [&str; 7] = [
    "Unknown collective",
    "Bad version",
    "Op, dtype or carriage mismatch",
    "Bad rank",
    "Not the rank's member",
    "Bad length or offset",
    "Stale or premature round",
];

/// Spec section 7's slot states, 0 to 3, as the dissector names them.
const SLOT_STATES: [&str; 4] = [
    "No history: the first contribution sets the round",
    "Round in progress, this rank's contribution missing",
    "Round in progress, this rank's contribution in",
    "Round completed, none in progress",
];

#[test]
fn every_field_of_built_frames_on_both_carriages() {
    let dir = scratch("wireshark-built");
    let cases = cases();
    let pcap = dir.join("built.pcap");
    write_pcap(&pcap, &cases.iter().map(|c| (c.frame.clone(), None)).collect::<Vec<_>>());
    let rows = dissect(&pcap, true, &[]);
    assert_eq!(rows.len(), cases.len());
    for (c, r) in cases.iter().zip(&rows) {
        assert_case(c, r);
    }
    // Both RoCEv2 paths were taken: the payload heuristic (a member's QP) and QP 1.
    let qps: Vec<u64> = rows
        .iter()
        .filter(|r| !r["infiniband.bth.destqp"].is_empty())
        .map(|r| num(&r["infiniband.bth.destqp"]))
        .collect();
    assert!(qps.contains(&1) && qps.iter().any(|&q| q > 1), "RoCEv2 QPs {qps:?}");
}

/// The names of every NAK reason and slot state, and the text of the tree, as `tshark -V` shows
/// them.
#[test]
fn nak_reasons_and_slot_states_are_named() {
    let dir = scratch("wireshark-names");
    let udp = Coll { id: 7, n: 10, ..Coll::default() };
    let mut frames = vec![];
    for reason in 1..=7u8 {
        frames.push((
            build(&udp, 0, true, &[], |s| {
                s.header.flags = 0x4;
                s.header.reason = reason;
            })
            .0,
            None,
        ));
    }
    for state in 0..=3u8 {
        frames.push((
            build(&udp, 0, true, &[0, 0], |s| {
                s.header.flags = 0x9;
                s.header.reason = state;
            })
            .0,
            None,
        ));
    }
    let pcap = dir.join("names.pcap");
    write_pcap(&pcap, &frames);
    let text = verbose(&pcap);
    for (i, name) in NAK_REASONS.iter().enumerate() {
        let line = format!("NAK reason: {name} ({})", i + 1);
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }
    for (i, name) in SLOT_STATES.iter().enumerate() {
        let line = format!("Slot state: {name} ({i})");
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }
    for line in ["Operation (op_type): ALL_REDUCE_SUM (0x01)", "Element type (dtype): f32 (0x01)", "Worker rank: 65535"]
    {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    let rows = dissect(&pcap, true, &[]);
    let reasons: Vec<u64> = rows[..7].iter().map(|r| num(&r["grad.nak_reason"])).collect();
    assert_eq!(reasons, (1..=7).collect::<Vec<_>>());
    let states: Vec<u64> = rows[7..].iter().map(|r| num(&r["grad.slot_state"])).collect();
    assert_eq!(states, (0..=3).collect::<Vec<_>>());
}

/// A RoCEv2 payload (BTH opcode, DestQP, what follows the BTH, the pad count) as a UDP 4791
/// frame with a zero ICRC.
fn roce_frame(opcode: u8, dest_qp: u32, after_bth: &[u8], pad: u8) -> Vec<u8> {
    let mut p = vec![opcode, pad << 4, 0xff, 0xff];
    p.extend_from_slice(&dest_qp.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 7]);
    p.extend_from_slice(after_bth);
    p.extend_from_slice(&[0; 4]);
    Udp4 { dport: 4791, payload: p, ..Udp4::default() }.build()
}

/// Malformed headers are flagged with expert info, never a Lua error; RoCEv2 traffic that is
/// not a version-1 gradient header in a UD SEND Only is never claimed; the port is a preference.
#[test]
fn malformed_and_foreign_frames() {
    let dir = scratch("wireshark-malformed");
    let udp = Coll { id: 7, n: 2, ..Coll::default() };
    let roce = Coll { id: 9, roce: true, n: 2, ..Coll::default() };
    let lanes = Lanes::F32(vec![1.0, 2.0]).bytes();
    let good = build(&udp, 0, false, &lanes, |_| {}).0;
    let grad_bytes = good[42..].to_vec(); // the gradient header and payload of an untagged IPv4 frame
    let gport = DEFAULT_GRADIENT_UDP_PORT;
    let mut deth_grad = vec![0x11, 0x11, 0x11, 0x11, 0, 0, 1, 0];
    deth_grad.extend_from_slice(&grad_bytes);
    let frames: Vec<Vec<u8>> = vec![
        // 1: 10 bytes on the gradient port: too short.
        Udp4 { dport: gport, payload: vec![0x10; 10], ..Udp4::default() }.build(),
        // 2: version 2, op 9, dtype 7 on the gradient port: shown, flagged.
        build(&udp, 0, false, &lanes, |s| {
            s.header.version = 2;
            s.header.op_type = 9;
            s.header.dtype = 7;
        })
        .0,
        // 3: data_length past the end, flags RESULT|NAK.
        Udp4 {
            dport: gport,
            payload: {
                let mut g = grad_bytes.clone();
                g[0] = 0x15;
                g[15] = 200;
                g
            },
            ..Udp4::default()
        }
        .build(),
        // 4: 4 bytes past data_length (a UDP length other than 8 + 20 + data_length), 6 bytes
        // of f32.
        Udp4 {
            dport: gport,
            payload: {
                let mut g = grad_bytes.clone();
                g[15] = 6;
                g.extend_from_slice(&[0; 2]);
                g
            },
            ..Udp4::default()
        }
        .build(),
        // 5: a NAK with a payload and a worker rank, reason 9.
        build(&udp, 1, false, &lanes, |s| {
            s.header.flags = 0x4;
            s.header.reason = 9;
        })
        .0,
        // 6: a valid gradient header after the BTH of an RC SEND Only (no DETH): not claimed.
        roce_frame(0x04, 0x101, &grad_bytes, 0),
        // 7: ... and after BTH + DETH of an RC SEND Only: not claimed.
        roce_frame(0x04, 0x101, &deth_grad, 0),
        // 8, 9: UD SEND Only, version 2, to a member's QP and to QP 1: not claimed.
        build(&roce, 0, true, &lanes, |s| s.header.version = 2).0,
        build(&roce, 0, false, &lanes, |s| s.header.version = 2).0,
        // 10, 11: UD SEND Only whose data_length leaves 8 bytes unaccounted: not claimed.
        build(&roce, 0, true, &lanes, |s| s.header.data_length = 0).0,
        build(&roce, 0, false, &lanes, |s| s.header.data_length = 0).0,
        // 12: UD SEND Only, unknown op, to QP 1: not claimed.
        build(&roce, 0, false, &lanes, |s| s.header.op_type = 0).0,
        // 13: UD SEND Only with 8 bytes after the DETH: not claimed.
        roce_frame(0x64, 0x101, &deth_grad[..16], 0),
        // 14: a contribution to UDP port 9000.
        build(&udp, 0, false, &lanes, |s| s.dst_port = 9000).0,
    ];
    let pcap = dir.join("malformed.pcap");
    write_pcap(&pcap, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let rows = dissect(&pcap, true, &[]);
    let expert = |i: usize| rows[i - 1]["_ws.expert.message"].clone();
    assert!(expert(1).contains("Gradient header truncated: 10 of 20 bytes"), "{}", expert(1));
    assert_eq!(rows[0]["grad.carriage"], "UDP");
    assert!(rows[0]["grad.version"].is_empty());

    assert_eq!(num(&rows[1]["grad.version"]), 2);
    assert_eq!(num(&rows[1]["grad.op"]), 9);
    assert_eq!(num(&rows[1]["grad.dtype"]), 7);
    for m in ["Unknown version", "Unknown op_type", "Unknown dtype"] {
        assert!(expert(2).contains(m), "frame 2: {}", expert(2));
    }
    assert!(rows[1]["grad.elements"].is_empty(), "no lanes of an unknown dtype");

    assert_eq!(rows[2]["grad.kind"], "INVALID");
    assert!(expert(3).contains("Flag combination the spec does not define"), "{}", expert(3));
    assert!(expert(3).contains("data_length 200 runs past the 8 bytes present"), "{}", expert(3));

    assert_eq!(num(&rows[3]["grad.data_length"]), 6);
    assert_eq!(num(&rows[3]["grad.elements"]), 1);
    assert_lanes("frame 4", "grad.lane.f32", &rows[3]["grad.lane.f32"], &[1.0], false);
    assert_eq!(rows[3]["grad.trailing"].replace(':', ""), "00400000");
    assert!(expert(4).contains("data_length is not a multiple of the dtype size"), "{}", expert(4));
    assert!(expert(4).contains("4 bytes past data_length"), "{}", expert(4));

    assert_eq!(num(&rows[4]["grad.nak_reason"]), 9);
    for m in ["Reason or slot state the spec does not define", "worker_rank 0xFFFF", "A NAK carries data_length 0"] {
        assert!(expert(5).contains(m), "frame 5: {}", expert(5));
    }

    for i in 6..=13 {
        let r = &rows[i - 1];
        assert!(r["grad.carriage"].is_empty() && r["grad.version"].is_empty(), "frame {i} claimed: {r:?}");
        assert!(!r["infiniband.bth.opcode"].is_empty(), "frame {i} is still InfiniBand: {r:?}");
        assert!(!r["frame.protocols"].contains("grad"), "frame {i}: {}", r["frame.protocols"]);
    }
    // The port: the project's default decodes, 9000 does not, until the preference says so.
    assert!(rows[13]["grad.version"].is_empty());
    let moved = dissect(&pcap, true, &["grad.udp_port:9000"]);
    assert_eq!(num(&moved[13]["grad.version"]), 1);
    assert_eq!(num(&moved[13]["grad.elements"]), 2);
    assert!(moved[0]["grad.carriage"].is_empty() && moved[1]["grad.version"].is_empty(), "port {gport} released");
    let off = dissect(&pcap, true, &["grad.udp_port:0"]);
    assert!(off.iter().all(|r| r["grad.carriage"].is_empty()), "port 0 turns the UDP carriage off");
}

/// Frames cut by the capture's snaplen (`tcpdump -s`, `editcap -s`) are shown as captured and
/// marked as Wireshark marks them ("Packet size limited during capture"), not as malformed: the
/// header's data_length is judged against the frame's length on the wire.
#[test]
fn frames_cut_by_the_snaplen_are_size_limited_not_malformed() {
    let dir = scratch("wireshark-snaplen");
    let udp = Coll { id: 7, n: 2, ..Coll::default() };
    let good = build(&udp, 0, false, &Lanes::F32(vec![1.0, 2.0]).bytes(), |_| {}).0;
    assert_eq!(good.len(), 70);
    // Cut at 66 (one lane of two captured), 64 (2 payload bytes), 50 (8 header bytes), and whole.
    let frames: Vec<(Vec<u8>, Option<u32>)> =
        [66, 64, 50, 70].iter().map(|&n| (good[..n].to_vec(), Some(good.len() as u32))).collect();
    let pcap = dir.join("snaplen.pcap");
    write_pcap(&pcap, &frames);
    let rows = dissect(&pcap, true, &[]);
    for (i, r) in rows.iter().enumerate() {
        let m = &r["_ws.expert.message"];
        assert!(!m.contains("runs past") && !m.contains("truncated"), "frame {}: {m}", i + 1);
    }
    assert_eq!((num(&rows[0]["grad.data_length"]), num(&rows[0]["grad.elements"])), (8, 2));
    assert_lanes("frame 1", "grad.lane.f32", &rows[0]["grad.lane.f32"], &[1.0], false);
    assert_eq!((num(&rows[1]["grad.data_length"]), num(&rows[1]["grad.elements"])), (8, 2));
    assert!(rows[1]["grad.lane.f32"].is_empty());
    assert_eq!(rows[2]["grad.carriage"], "UDP");
    assert!(rows[2]["grad.version"].is_empty());
    assert_lanes("frame 4", "grad.lane.f32", &rows[3]["grad.lane.f32"], &[1.0, 2.0], false);
    let v = verbose(&pcap);
    assert_eq!(v.matches("[Packet size limited during capture: GRAD truncated]").count(), 3, "{v}");
    assert!(!v.contains("Malformed"), "{v}");
}

/// The shared cases carry no gradient header (plain UDP to port 9000, RoCEv2 RC SEND, NCCL's
/// RDMA WRITEs): with the dissector loaded every frame dissects exactly as without it; with its
/// port set to 9000, their 4-byte payloads are flagged as too short, without a Lua error.
#[test]
fn shared_cases_are_left_alone() {
    let dir = case("pcap");
    let mut pcaps: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    pcaps.sort();
    let names: Vec<String> = pcaps.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for must in ["c10_rocev2_ipv4_icrc.pcap", "nccl_ring_allreduce_rocev2.pcap", "c02_ipv4_options.pcap"] {
        assert!(names.iter().any(|n| n == must), "{must} missing from {names:?}");
    }
    let mut roce_frames = 0;
    let mut short_flagged = 0;
    for pcap in &pcaps {
        let with = dissect(pcap, true, &[]);
        let without = dissect(pcap, false, &[]);
        assert_eq!(with.len(), without.len(), "{}", pcap.display());
        for (a, b) in with.iter().zip(&without) {
            for f in FIELDS {
                assert_eq!(a[f], b[f], "{} frame {}: {f}", pcap.display(), a["frame.number"]);
            }
        }
        roce_frames += with.iter().filter(|r| !r["infiniband.bth.opcode"].is_empty()).count();
        for r in dissect(pcap, true, &["grad.udp_port:9000"]) {
            if r["grad.carriage"] == "UDP" {
                assert!(
                    r["_ws.expert.message"].contains("Gradient header truncated: 4 of 20 bytes"),
                    "{}: {r:?}",
                    pcap.display()
                );
                short_flagged += 1;
            }
        }
    }
    assert!(roce_frames > 3, "RoCEv2 frames of c10 and the NCCL capture: {roce_frames}");
    assert!(short_flagged >= 8, "plain-UDP case frames on port 9000 flagged: {short_flagged}");
}
