//! Arbitrary frames through a datapath whose pipeline uses every match kind and every action.
//!
//! Input: byte 0 picks the ingress port (mod 4), the rest is the frame. After each frame:
//! - every sent frame goes to a port below 4 and is at most 8 bytes (two pushed tags) longer
//!   than the input;
//! - each input ends up sent or counted as dropped: 1 outcome for unicast, 3 for flood and for
//!   the (3-copy) multicast groups; port counters match what was sent;
//! - the datapath parses as a router does (its default `Checks::Router`: the IPv4 header
//!   checksum and the lengths; the UDP checksum and the ICRC are the end hosts'): a frame that
//!   parse refused is never sent, and is counted under its reason;
//! - a frame it accepted leaves only as frames it accepts too, and forwarding leaves the
//!   validity of the L4 checks unchanged: a frame whose UDP checksum and ICRC verify
//!   (`verify_l4`) leaves with them valid, one whose do not leaves with the same failure; the
//!   IPv4 header checksum stays valid; the layers above VLAN are
//!   the same, L3/L4 identity fields are unchanged, TTL only goes down (never to 0 by
//!   `dec_ttl`), ECN only goes to CE and only from ECT, and every byte from L3 on other than
//!   TOS/traffic class, TTL/hop limit and the IPv4 checksum is unchanged (payload, ICRC,
//!   Ethernet padding);
//! - the `Parsed` that the actions keep up to date (and later tables key on) equals what the
//!   parser says about the rewritten frame, for the packet and for each multicast copy; a
//!   replay of the pipeline by hand sends exactly what the datapath sent;
//! - the same frame as a chain whose first segment ends at byte `14 + 3 x (byte 0 / 4)` (an
//!   mbuf chain; headers it cuts are pulled up into it) is sent exactly as the one-segment
//!   frame is and counted the same, unless its headers reach past what the pull-up can move
//!   (dropped `segmented_headers`, nothing sent).
#![no_main]

use dataplane::action::Egress;
use dataplane::buf::{PacketBuf, VecBuf, VecIo, VEC_DATA_ROOM};
use dataplane::config::load_str;
use dataplane::datapath::Datapath;
use dataplane::meta::Meta;
use dataplane::parse::{parse_checked, verify_l4, Checks, Layers, Parsed, RxChecksum};
use dataplane::stats::{Counters, Reason};
use dataplane::table::PipelineState;
use dataplane::testing::null_ports;
use dataplane::wire::ipv4::Ecn;
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::path::Path;

const PORTS: u16 = 4;
const GRADIENT_PORT: u16 = dataplane::wire::gradient::DEFAULT_UDP_PORT;

/// Seeds are the frames of the case captures (02:00:00:00:00:01 -> :02, 10.0.0.1 -> 10.0.0.2 or
/// fd00::1 -> fd00::2, UDP 9000 or RoCEv2) and of an NCCL capture (fa:16:3e:..., 172.30.0.0/16,
/// RoCEv2), so the entries below are hit from the first run. The config follows its [`PORTS`]
/// null ports.
const CONFIG: &str = r#"
# Three copies, each with its own rewrites.
[[multicast_group]]
id = 1
copy = [
    { port = 0, actions = "push_vlan(100); set_eth_dst(01:00:5e:00:00:01); count(mc1_a)" },
    { port = 1, actions = "pop_vlan; dec_ttl; set_dscp(10)" },
    { port = 3, actions = "set_vlan(200); mark_ecn; push_vlan(7); count(mc1_c)" },
]

[[multicast_group]]
id = 2
copy = [
    { port = 1, actions = "push_vlan(300); push_vlan(301)" },
    { port = 2, actions = "dec_ttl; dec_ttl; mark_ecn; set_dscp(63)" },
    { port = 3, actions = "set_eth_src(02:00:00:00:00:cc); pop_vlan; pop_vlan; set_vlan(5)" },
]

# Ternary and range fields, priorities (larger wins).
[[table]]
name = "acl"
key = [
    { field = "eth.type", match = "ternary" },
    { field = "ipv4.src", match = "ternary" },
    { field = "udp.dst_port", match = "range" },
    { field = "vlan.outer_vid", match = "range" },
    { field = "ipv4.ecn", match = "ternary" },
]
default_action = "goto(l2)"
entry = [
    { key = ["0x0800", "10.0.0.99", "*", "*", "*"], priority = 100, action = "count(acl_deny); drop" },
    { key = ["0x0800", "10.0.0.0 &&& 255.255.255.0", "4791", "*", "*"], priority = 90, action = "count(roce); set_dscp(26); mark_ecn; goto(route4)" },
    { key = ["*", "*", "1000->9999", "1->4095", "*"], priority = 80, action = "set_vlan(55); pop_vlan; goto(l2)" },
    { key = ["0x0800", "*", "9000", "*", "3"], priority = 75, action = "dec_ttl; multicast(2); exit" },
    { key = ["0x0800", "*", "9000", "*", "*"], priority = 70, action = "set_dscp(46); dec_ttl; goto(route4)" },
    { key = ["0x86dd", "*", "*", "*", "*"], priority = 60, action = "mark_ecn; dec_ttl; set_dscp(12); goto(route6)" },
    { key = ["0x0806", "*", "*", "*", "*"], priority = 50, action = "flood; exit" },
    { key = ["*", "172.30.0.0 &&& 255.255.0.0", "*", "*", "*"], priority = 40, action = "goto(route4)" },
]

# Longest prefix match.
[[table]]
name = "route4"
key = [{ field = "ipv4.dst", match = "lpm" }]
default_action = "drop"
entry = [
    { key = ["10.0.0.2/32"], action = "multicast(1); exit" },
    { key = ["10.0.0.0/8"], action = "set_eth_src(02:00:00:00:00:aa); set_eth_dst(02:00:00:00:00:bb); forward(2); exit" },
    { key = ["172.30.0.25/32"], action = "multicast(2); exit" },
    { key = ["172.30.0.0/16"], action = "dec_ttl; push_vlan(10); forward(3); goto(l2)" },
    { key = ["0.0.0.0/0"], action = "forward(0); exit" },
]

[[table]]
name = "route6"
key = [{ field = "ipv6.dst", match = "lpm" }]
default_action = "drop"
entry = [
    { key = ["fd00::2/128"], action = "multicast(1); exit" },
    { key = ["fd00::/16"], action = "push_vlan(600); forward(1); exit" },
]

# Exact match.
[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }, { field = "vlan.outer_valid", match = "exact" }]
default_action = "count(l2_miss); forward(0)"
entry = [
    { key = ["ff:ff:ff:ff:ff:ff", 0], action = "flood" },
    { key = ["02:00:00:00:00:02", 0], action = "push_vlan(42); push_vlan(43); forward(1)" },
    { key = ["02:00:00:00:00:02", 1], action = "pop_vlan; set_vlan(9); forward(2)" },
    { key = ["fa:16:3e:a3:16:62", 1], action = "pop_vlan; forward(2)" },
    { key = ["fa:16:3e:1d:de:18", 0], action = "multicast(1)" },
    { key = ["01:00:5e:00:00:01", 0], action = "multicast(2)" },
]
"#;

thread_local! {
    /// The datapath and a second set of counts for its pipeline, built once: cloning the
    /// pipeline per input would dominate the run time (the lpm tables' tries). Counters are
    /// reset per input; no other state carries over, so a crash reproduces from its input alone.
    static STATE: RefCell<(Datapath, PipelineState)> = RefCell::new({
        let text = format!("{}{CONFIG}", null_ports(PORTS as usize));
        let loaded = load_str(&text, Path::new("fuzz.toml")).expect("the fuzz config loads");
        let counts = PipelineState::new(&loaded.pipeline);
        (Datapath::new(loaded.pipeline, PORTS, GRADIENT_PORT), counts)
    });
}

fuzz_target!(|data: &[u8]| {
    let Some((&b, frame)) = data.split_first() else {
        return;
    };
    let in_port = b as u16 % PORTS;
    let frame = &frame[..frame.len().min(VEC_DATA_ROOM)];
    let first = 14 + 3 * usize::from(b >> 2);
    STATE.with(|s| {
        let (dp, counts) = &mut *s.borrow_mut();
        check(dp, counts, in_port, frame);
        check_chain(dp, in_port, frame, first);
    });
});

/// `frame` from `in_port` as a chain whose first segment holds `first` bytes: what the
/// one-segment frame gives, or a `segmented_headers` drop and nothing sent.
fn check_chain(dp: &mut Datapath, in_port: u16, frame: &[u8], first: usize) {
    dp.counters = Counters::new(PORTS);
    let mut io = VecIo::new(PORTS);
    dp.process(&mut io, in_port, VecBuf::from_frame(frame), 0);
    let (want_sent, want_counters) = (io.sent, dp.counters.clone());
    dp.counters = Counters::new(PORTS);
    let mut io = VecIo::new(PORTS);
    dp.process(&mut io, in_port, VecBuf::segmented(frame, first), 0);
    if dp.counters.dropped(Reason::SegmentedHeaders) == 1 {
        assert!(io.sent.is_empty(), "a segmented_headers drop sent {:?}", io.sent);
        assert_eq!(dp.counters.total_drops(), 1);
        return;
    }
    assert_eq!(io.sent, want_sent, "a chain cut at {first} is sent otherwise:\n in {frame:02x?}");
    assert_eq!(dp.counters, want_counters, "a chain cut at {first} is counted otherwise");
}

fn check(dp: &mut Datapath, counts: &mut PipelineState, in_port: u16, frame: &[u8]) {
    dp.counters = Counters::new(PORTS);
    let mut io = VecIo::new(PORTS);
    dp.process(&mut io, in_port, VecBuf::from_frame(frame), 0);

    // Ports, lengths and counters.
    let c = &dp.counters;
    assert_eq!(c.ports[in_port as usize].rx_packets, 1);
    assert_eq!(c.ports[in_port as usize].rx_bytes, frame.len() as u64);
    for (port, f) in &io.sent {
        assert!(*port < PORTS, "sent to port {port}");
        assert!(
            f.len() <= frame.len() + 8,
            "grew from {} to {} bytes",
            frame.len(),
            f.len()
        );
    }
    for port in 0..PORTS {
        let sent: Vec<_> = io.sent.iter().filter(|(p, _)| *p == port).collect();
        let pc = &c.ports[port as usize];
        assert_eq!(pc.tx_packets, sent.len() as u64);
        assert_eq!(
            pc.tx_bytes,
            sent.iter().map(|(_, f)| f.len() as u64).sum::<u64>()
        );
    }
    let drops = c.total_drops() as usize;
    let outcomes = io.sent.len() + drops;
    assert!(
        outcomes == 1 || outcomes == 3,
        "{} sent, {drops} dropped",
        io.sent.len()
    );
    assert_eq!(
        c.dropped(Reason::NoMbuf),
        0,
        "VecIo never runs out of buffers"
    );

    let before = match parse(frame) {
        Ok(p) => p,
        Err(r) => {
            assert!(io.sent.is_empty());
            assert_eq!((drops, c.dropped(r.into())), (1, 1));
            return;
        }
    };

    // What leaves still parses, its L4 checks are as valid as they were, and only what the
    // actions may change has changed.
    let l4_before = verify_l4(frame, &before, RxChecksum::UNKNOWN);
    for (port, f) in &io.sent {
        let after = parse(f).unwrap_or_else(|r| {
            panic!("port {port}: a frame that parsed before is dropped as {r} after rewrites:\n in  {frame:02x?}\n out {f:02x?}")
        });
        assert_eq!(
            verify_l4(f, &after, RxChecksum::UNKNOWN),
            l4_before,
            "port {port}: forwarding changed the validity of the UDP checksum or ICRC:\n in  {frame:02x?}\n out {f:02x?}"
        );
        check_rewrite(frame, &before, f, &after);
    }

    // The pipeline by hand: the Parsed the actions maintain is the parse of what they wrote.
    let mut buf = VecBuf::from_frame(frame);
    let mut p = before;
    let pipeline = &dp.pipeline;
    let egress = pipeline.apply(counts, &mut buf, &mut p, &mut Meta::new(in_port));
    let mut expected: Vec<(u16, Vec<u8>)> = Vec::new();
    match egress {
        Egress::Port(port) => expected.push((port, buf.data().to_vec())),
        Egress::Flood => {
            for port in (0..PORTS).filter(|&q| q != in_port) {
                expected.push((port, buf.data().to_vec()));
            }
        }
        Egress::Multicast(g) => {
            let g = g as usize;
            for copy in 0..pipeline.groups[g].copies.len() {
                let mut b = VecBuf::from_frame(buf.data());
                let mut cp = p;
                if pipeline.apply_copy(counts, g, copy, &mut b, &mut cp).is_ok() {
                    assert_parsed_current(&b, &cp, "multicast copy");
                    expected.push((pipeline.groups[g].copies[copy].0, b.data().to_vec()));
                }
            }
        }
        // The fuzz config has no collectives, so no `aggregate` action: nothing is sent.
        Egress::Aggregate | Egress::Dropped(_) | Egress::Unset => {}
    }
    if !matches!(egress, Egress::Dropped(_)) {
        assert_parsed_current(&buf, &p, "after the pipeline");
    }
    // The datapath sends the flood's and the group's last copy as the original: same bytes,
    // but in a different order.
    let mut sent = io.sent.clone();
    sent.sort();
    expected.sort();
    assert_eq!(sent, expected, "the datapath and the pipeline disagree");
}

/// The datapath's parse: a router's checks.
fn parse(frame: &[u8]) -> Result<Parsed, dataplane::stats::Reason> {
    parse_checked(frame, GRADIENT_PORT, RxChecksum::UNKNOWN, Checks::Router)
}

/// `p` (maintained by the actions) is what the parser says about `buf`.
fn assert_parsed_current(buf: &VecBuf, p: &Parsed, what: &str) {
    let fresh = parse(buf.data())
        .unwrap_or_else(|r| panic!("{what}: the rewritten frame is dropped as {r}"));
    assert_eq!(*p, fresh, "{what}: the Parsed kept by the actions is stale");
}

fn check_rewrite(inp: &[u8], before: &Parsed, out: &[u8], after: &Parsed) {
    let vlan = Layers::VLAN_OUTER.union(Layers::VLAN_INNER);
    let mut lb = before.layers;
    let mut la = after.layers;
    lb.remove(vlan);
    la.remove(vlan);
    assert_eq!(lb, la, "layers above VLAN changed");
    assert_eq!(before.ethertype, after.ethertype);
    assert_eq!(before.ip_src_bytes, after.ip_src_bytes);
    assert_eq!(before.ip_dst_bytes, after.ip_dst_bytes);
    assert_eq!(before.ip_proto, after.ip_proto);
    assert_eq!(before.ip_header_len, after.ip_header_len);
    assert_eq!(
        (before.udp_src, before.udp_dst, before.udp_len),
        (after.udp_src, after.udp_dst, after.udp_len)
    );
    assert_eq!(
        (before.bth_opcode, before.bth_dest_qp, before.bth_psn),
        (after.bth_opcode, after.bth_dest_qp, after.bth_psn)
    );
    assert_eq!(
        (
            before.grad_collective_id,
            before.grad_op,
            before.grad_payload_len
        ),
        (
            after.grad_collective_id,
            after.grad_op,
            after.grad_payload_len
        )
    );
    assert!(after.ttl <= before.ttl, "TTL went up");
    if after.ttl < before.ttl {
        assert!(after.ttl >= 1, "dec_ttl sent a packet with TTL 0");
    }
    assert!(
        after.ecn == before.ecn || (after.ecn == Ecn::CE && before.ecn != Ecn::NOT_ECT),
        "ECN {:02b} -> {:02b}",
        before.ecn,
        after.ecn
    );
    // Everything from L3 on, to the end of the frame, but the bytes rewrites may touch.
    let (l3b, l3a) = (before.l3_offset as usize, after.l3_offset as usize);
    assert_eq!(
        inp.len() - l3b,
        out.len() - l3a,
        "the frame after the tags changed length"
    );
    let (mut x, mut y) = (inp[l3b..].to_vec(), out[l3a..].to_vec());
    if before.has(Layers::IPV4) {
        for i in [1, 8, 10, 11] {
            x[i] = 0;
            y[i] = 0;
        }
    } else if before.has(Layers::IPV6) {
        // Version and traffic class (flow label bits of byte 1 are kept), hop limit.
        x[0] &= 0xf0;
        y[0] &= 0xf0;
        x[1] &= 0x0f;
        y[1] &= 0x0f;
        x[7] = 0;
        y[7] = 0;
    }
    assert_eq!(x, y, "bytes from L3 on changed beyond TOS/TTL/checksum");
}
