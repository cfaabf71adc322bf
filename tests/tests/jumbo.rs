//! Jumbo frames in transit: 4 KiB RoCEv2 and UDP frames, larger than the default mbuf's data
//! room, read by net_pcap into mbuf chains, routed with header rewrites and written whole.

use dataplane::parse::{parse, Layers};
use dataplane::testing::build_frame;
use dataplane::wire::build::{FrameSpec, IpAddrBytes, Roce};
use dataplane::wire::gradient::{GradientRepr, DEFAULT_UDP_PORT};
use dataplane::wire::icrc;
use functional_tests::*;

/// Frame `i`: RoCEv2 (UD SEND, valid ICRC) for even `i`, the UDP carriage (valid checksum) for
/// odd, IPv4 10.0.0.1 to 10.0.0.2, ECT(0), TTL 64, about 4.2 KB.
fn jumbo(i: usize) -> Vec<u8> {
    sized(i, 4096 + 4 * i)
}

/// As [`jumbo`], with `n` bytes of payload.
fn sized(i: usize, n: usize) -> Vec<u8> {
    let roce = i.is_multiple_of(2);
    let payload: Vec<u8> = (0..n).map(|k| (k * 13 + i) as u8).collect();
    let spec = FrameSpec {
        src_mac: "02:00:00:00:00:09".parse().unwrap(),
        dst_mac: "02:00:00:00:00:01".parse().unwrap(),
        src_ip: IpAddrBytes::V4([10, 0, 0, 1]),
        dst_ip: IpAddrBytes::V4([10, 0, 0, 2]),
        dscp: 26,
        ecn: 2,
        src_port: 0xc000 + i as u16,
        dst_port: if roce { 4791 } else { DEFAULT_UDP_PORT },
        roce: roce.then_some(Roce { dest_qp: 0x42, psn: i as u32, pkey: 0xffff, qkey: 0x1111_1111, src_qp: 0x101 }),
        header: GradientRepr {
            version: 1,
            op_type: 1,
            collective_id: 3,
            dtype: 1,
            tensor_offset: i as u32,
            data_length: payload.len() as u32,
            round: 1,
            ..Default::default()
        },
        ..FrameSpec::default()
    };
    build_frame(&spec, &payload)
}

const ROUTE: &str = r#"
[[table]]
name = "route"
key = [{ field = "ipv4.dst", match = "lpm" }]
default_action = "drop"
entry = [{ key = ["10.0.0.0/24"], action = "dec_ttl; mark_ecn; set_eth_src(02:00:00:00:00:fe); set_eth_dst(02:00:00:00:00:02); forward(1)" }]
"#;

fn config(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    write_config(
        dir,
        "c.toml",
        &format!("{EAL}\n{extra}\n[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\n{ROUTE}"),
    )
}

/// With the default mbufs (2176-byte buffers), every 4 KiB frame is routed: out whole, with only
/// the rewritten bytes changed (MACs, TTL, ECN and the IPv4 checksum, a full recompute), every
/// UDP checksum and ICRC still valid; nothing dropped, no mbuf left behind.
#[test]
fn jumbo_frames_in_default_mbufs_are_routed_whole() {
    let dir = scratch("jumbo-route");
    let frames: Vec<Vec<u8>> = (0..64).map(jumbo).collect();
    assert!(frames.iter().all(|f| f.len() > 4096 + 60 && f.len() > 2 * 2048));
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let out = dir.join("out.pcap");
    let conf = config(&dir, "");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    run.assert_ok();
    let got = read_pcap(&out);
    assert_eq!(got.len(), frames.len(), "every frame out");
    for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
        assert_eq!(g.len(), f.len(), "frame {i}: whole");
        let changed: Vec<usize> = (0..f.len()).filter(|&k| g[k] != f[k]).collect();
        let allowed = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 22, 24, 25];
        assert!(changed.iter().all(|k| allowed.contains(k)), "frame {i}: bytes {changed:?} changed");
        assert_eq!(&g[..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&g[6..12], &[2, 0, 0, 0, 0, 0xfe]);
        assert_eq!((g[22], g[15] & 3, g[15] >> 2), (63, 3, 26), "TTL, CE, DSCP kept");
        ipv4_checksum_is_a_full_recompute(g, 14);
        // The project's parser verifies every checksum and the ICRC.
        let p = parse(g, DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("frame {i}: {e:?}"));
        assert_eq!(p.has(Layers::BTH), i.is_multiple_of(2));
        if p.has(Layers::BTH) {
            let (l3, l4, end) = (p.l3_offset as usize, p.l4_offset as usize, p.ip_end as usize);
            assert_eq!(icrc::verify(&g[l3..end], l4 - l3), Ok(true), "frame {i}: ICRC");
        }
    }
    let s = run.stats();
    assert_eq!(s["ports"][1]["ethdev"]["opackets"], 64);
    let bytes: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(s["ports"][1]["ethdev"]["obytes"], bytes as u64);
    assert_eq!(s["ports"][0]["workers"]["rx_bytes"], bytes as u64);
    assert_eq!(run.drops("multi_segment"), 0);
    assert_eq!(s["mbufs_in_use_after"], 0);
    // tshark agrees on the IPv4 and UDP checksums of what was written (status 1: good; 3: not
    // present, the zero UDP checksum of RoCEv2 over IPv4).
    if let Some(lines) =
        frames::tshark_fields(&out, &["ip.checksum.status", "udp.checksum.status", "ip.ttl", "frame.len"])
    {
        assert_eq!(lines.len(), 64);
        for (i, (l, f)) in lines.iter().zip(&frames).enumerate() {
            let udp = if i.is_multiple_of(2) { 3 } else { 1 };
            assert_eq!(l, &format!("1\t{udp}\t63\t{}", f.len()), "tshark on frame {i}: checksums, TTL, length");
        }
    }
}

/// The same replay with `verify_transit = true`: the frames do arrive as mbuf chains, and the
/// UDP checksum and ICRC are verified over contiguous frames only, so each is dropped
/// `multi_segment`. With a data room that holds them, they are verified and forwarded.
#[test]
fn verify_transit_drops_chains_and_forwards_frames_that_fit() {
    let dir = scratch("jumbo-verify");
    let frames: Vec<Vec<u8>> = (0..8).map(jumbo).collect();
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let out = dir.join("out.pcap");
    let args = [format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())];
    let conf = config(&dir, "[dataplane]\nverify_transit = true\n");
    let run = run_dpu(&dir, &conf, &args);
    run.assert_ok();
    assert_eq!(run.drops("multi_segment"), 8);
    assert_eq!(read_pcap(&out).len(), 0);
    let conf = config(&dir, "[dataplane]\nverify_transit = true\n[mempool]\ndata_room = 9344\n");
    let run = run_dpu(&dir, &conf, &args);
    run.assert_ok();
    assert_eq!(run.drops("multi_segment"), 0);
    assert_eq!(read_pcap(&out).len(), 8);
}

/// A shaped port takes frames up to its MTU's (with two VLAN tags), not only what one mbuf
/// holds, and no longer ones: with `mtu = 9000` every frame goes through the scheduler; with
/// 4160 the 4 KiB frames that fit 4160 + 22 bytes (the last test has their lengths) and the two
/// short ones; with 1500, below an mbuf's, the 1,522-byte frame and not the 1,600-byte one;
/// without an MTU the port's largest frame is one mbuf's (2048 bytes): the two short ones.
/// Every other frame is an `egress_oversize` drop.
#[test]
fn a_shaped_port_sends_frames_up_to_its_mtu() {
    let dir = scratch("jumbo-shaped");
    let mut frames: Vec<Vec<u8>> = (0..8).map(jumbo).collect();
    frames.extend([sized(9, 1460), sized(11, 1538)]);
    assert_eq!((frames[8].len(), frames[9].len()), (1522, 1600));
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let out = dir.join("out.pcap");
    let args = [format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())];
    let cases: [(&str, &[usize]); 4] = [
        ("mtu = 9000\n", &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
        ("mtu = 4160\n", &[0, 1, 3, 5, 8, 9]),
        ("mtu = 1500\n", &[8]),
        ("", &[8, 9]),
    ];
    for (mtu, sent) in cases {
        let text = format!(
            "{EAL}\n[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\n{mtu}\
             [port.qos]\nrate = 1250000000\n[[port.qos.class]]\n{ROUTE}"
        );
        let conf = write_config(&dir, "shaped.toml", &text);
        let run = run_dpu(&dir, &conf, &args);
        run.assert_ok();
        assert_eq!(read_pcap(&out), sent.iter().map(|&i| rewritten(&frames[i])).collect::<Vec<_>>(), "{mtu:?}");
        assert_eq!(run.drops("egress_oversize"), 10 - sent.len() as u64, "{mtu:?}");
        assert_eq!(run.stats()["mbufs_in_use_after"], 0);
    }
}

/// `f` as [`ROUTE`] rewrites it: MACs, TTL 63, CE, the IPv4 checksum recomputed.
fn rewritten(f: &[u8]) -> Vec<u8> {
    let mut g = f.to_vec();
    g[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    g[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xfe]);
    g[15] |= 3;
    g[22] -= 1;
    g[24..26].fill(0);
    let sum: u32 = g[14..34].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    g[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    g
}

/// An unshaped port sends frames up to its `mtu` + 22 bytes (the Ethernet header and two VLAN
/// tags, as DPDK PMDs size their maximum frame from the MTU) and drops longer ones as
/// `egress_oversize`, as a router drops what it may not fragment. The frames, by length: the
/// RoCEv2 ones (even) carry 24 bytes more headers than the UDP ones (odd), whose payloads are 4
/// bytes longer, and each is 8 bytes longer than the one before of its kind. Without an `mtu` the port sends them all (the first test).
#[test]
fn an_unshaped_port_drops_frames_beyond_its_mtu() {
    let dir = scratch("jumbo-mtu");
    let frames: Vec<Vec<u8>> = (0..8).map(jumbo).collect();
    let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
    assert_eq!(lens, [4182, 4162, 4190, 4170, 4198, 4178, 4206, 4186]);
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let out = dir.join("out.pcap");
    let args = [format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())];
    // The MTU, and which frames it sends.
    let cases: [(usize, &[usize]); 6] = [
        (4182 - 22, &[0, 1, 3, 5]),
        (4182 - 23, &[1, 3, 5]),
        (4162 - 22, &[1]),
        (4162 - 23, &[]),
        (9000, &[0, 1, 2, 3, 4, 5, 6, 7]),
        (1500, &[]),
    ];
    for (mtu, sent) in cases {
        let text =
            format!("{EAL}\n[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\nmtu = {mtu}\n{ROUTE}");
        let conf = write_config(&dir, "mtu.toml", &text);
        let run = run_dpu(&dir, &conf, &args);
        run.assert_ok();
        assert_eq!(read_pcap(&out), sent.iter().map(|&i| rewritten(&frames[i])).collect::<Vec<_>>(), "mtu {mtu}");
        assert_eq!(run.drops("egress_oversize"), 8 - sent.len() as u64, "mtu {mtu}");
        let s = run.stats();
        assert_eq!(s["ports"][1]["ethdev"]["opackets"], sent.len() as u64, "mtu {mtu}");
        assert_eq!(s["mbufs_in_use_after"], 0);
    }
}

/// Three ports; every frame from port 0 gets `actions` (a tag push, then copies to ports 1
/// and 2). `ports` is what each port's table adds (its `mtu`, its `[port.qos]`).
fn copies_config(dir: &std::path::Path, extra: &str, actions: &str, ports: &str) -> std::path::PathBuf {
    let port = |i: usize| format!("[[port]]\nvdev = \"net_null{i}\"\n{}", if i > 0 { ports } else { "" });
    write_config(
        dir,
        "copies.toml",
        &format!(
            "{EAL}\n{extra}\n{}\n{}\n{}\n[[multicast_group]]\nid = 1\ncopy = [{{ port = 1 }}, {{ port = 2 }}]\n\
             [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"{actions}\"\n",
            port(0),
            port(1),
            port(2)
        ),
    )
}

/// `frames` written as port 0's input in `dir`: the replay's arguments, and the captures of
/// ports 1 and 2.
fn copies_replay(dir: &std::path::Path, frames: &[Vec<u8>]) -> ([String; 3], std::path::PathBuf, std::path::PathBuf) {
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let (o1, o2) = (dir.join("o1.pcap"), dir.join("o2.pcap"));
    let args =
        [format!("--rx=0={}", input.display()), format!("--tx=1={}", o1.display()), format!("--tx=2={}", o2.display())];
    (args, o1, o2)
}

/// A frame that fits one default mbuf (2048 bytes after the headroom) and grows past that by
/// a tag push is still one segment, 2049 to 2052 bytes long (the push takes headroom): its
/// flood and multicast copies are that long too, not lost for want of a buffer (a copy
/// allocated as a fresh mbuf had only 2048 bytes of room, and the run ended in `no_mbuf`
/// losses).
#[test]
fn copies_of_frames_a_push_grew_past_a_buffer_are_whole() {
    let dir = scratch("jumbo-copy-push");
    let frames: Vec<Vec<u8>> = (1980..1990).map(|n| sized(1, n)).collect();
    let lens: Vec<usize> = frames.iter().map(Vec::len).collect();
    assert!(lens.contains(&2045) && lens.contains(&2048) && lens.contains(&2049), "{lens:?}");
    let (args, o1, o2) = copies_replay(&dir, &frames);
    let want: Vec<Vec<u8>> = frames.iter().map(|f| frames::pushed(f, 5)).collect();
    for actions in ["push_vlan(5); flood", "push_vlan(5); multicast(1)"] {
        let conf = copies_config(&dir, "", actions, "");
        let run = run_dpu(&dir, &conf, &args);
        run.assert_ok();
        assert_eq!(read_pcap(&o1), want, "{actions}: port 1");
        assert_eq!(read_pcap(&o2), want, "{actions}: port 2");
        assert_eq!(run.drops("no_mbuf"), 0, "{actions}");
        assert_eq!(run.stats()["mbufs_in_use_after"], 0);
    }
}

/// The copies of a chain keep the first segment's bytes in their first segment: with a
/// 76-byte first segment, a TCP frame with 40 bytes of IPv4 options whose pushed tag grew its
/// first segment to 80 bytes still has its whole IPv4 header there in every copy, so each
/// shaped port's scheduler finds its DSCP (class 1) and marks CE (RED marking everything);
/// the Not-ECT frame is dropped on both (a copy that `rte_pktmbuf_copy` repacked split the
/// header: class 0, nothing marked).
#[test]
fn copies_of_chains_keep_their_headers_whole_for_the_scheduler() {
    let dir = scratch("jumbo-copy-split");
    let frames: Vec<Vec<u8>> = [2u8, 1, 0, 2]
        .iter()
        .enumerate()
        .map(|(i, &ecn)| {
            let mut f = frames::Udp4 {
                dscp: 46,
                ecn,
                sport: 40000 + i as u16,
                payload: vec![i as u8; 300],
                ..Default::default()
            }
            .build();
            // Protocol 6 (TCP: read no further than IPv4), so that only the IPv4 header
            // (bytes 14 to 74) has to lie in the 76-byte first segment.
            f[23] = 6;
            frames::with_ipv4_options(&f, 14)
        })
        .collect();
    let (args, o1, o2) = copies_replay(&dir, &frames);
    let qos = "mtu = 1500\n[port.qos]\ndscp_map = { 46 = 1 }\n[[port.qos.class]]\n[[port.qos.class]]\nkmin = 0\nkmax = 0\npmax = 1.0\n";
    let conf = copies_config(&dir, "[mempool]\ndata_room = 204\nmbufs = 40000\n", "push_vlan(5); flood", qos);
    let run = run_dpu(&dir, &conf, &args);
    run.assert_ok();
    // The ECT frames, tagged and CE-marked (TOS 46 << 2 | 3; the header checksum recomputed).
    let want: Vec<Vec<u8>> = [0, 1, 3]
        .iter()
        .map(|&i| {
            let mut g = frames::pushed(&frames[i], 5);
            g[19] = 46 << 2 | 3;
            dataplane::wire::ipv4::Ipv4Packet::new_unchecked(&mut g[18..78]).fill_checksum();
            g
        })
        .collect();
    assert_eq!(read_pcap(&o1), want, "port 1 (a copy)");
    assert_eq!(read_pcap(&o2), want, "port 2");
    assert_eq!(run.drops("red_drop"), 2, "the Not-ECT frame, on each port");
    assert_eq!(run.stats()["mbufs_in_use_after"], 0);
}

/// Headers that the first segment cuts are moved into it (its headroom taken, as BSD's
/// `m_pullup`) and the frame is routed as any other: with 64 bytes in the first mbuf, RoCEv2
/// and UDP frames whose headers end at byte 90, or at byte 130 with 40 bytes of IPv4 options,
/// come out with exactly the rewrites of the first test; nothing dropped, no mbuf left behind.
#[test]
fn headers_cut_by_a_small_first_mbuf_are_pulled_up_and_routed() {
    let dir = scratch("jumbo-pullup");
    let plain: Vec<Vec<u8>> = (0..16).map(|i| sized(i, 200 + 8 * i)).collect();
    // With options, a RoCEv2 frame's ICRC (which covers the IPv4 header) computed again.
    let options: Vec<Vec<u8>> = plain
        .iter()
        .map(|f| {
            let mut g = frames::with_ipv4_options(f, 14);
            if u16::from_be_bytes([g[76], g[77]]) == 4791 {
                let dgram = &mut g[14..];
                let crc = icrc::compute(dgram, 60).unwrap();
                icrc::store(dgram, crc);
            }
            g
        })
        .collect();
    let frames: Vec<Vec<u8>> = plain.into_iter().chain(options).collect();
    let input = dir.join("in.pcap");
    write_pcap(&input, &frames.iter().map(|f| (f.clone(), None)).collect::<Vec<_>>());
    let out = dir.join("out.pcap");
    let conf = config(&dir, "[mempool]\ndata_room = 192\nmbufs = 30000\n");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=1={}", out.display())]);
    run.assert_ok();
    let got = read_pcap(&out);
    assert_eq!(run.drops("segmented_headers"), 0, "{}", run.stdout());
    assert_eq!(got.len(), frames.len(), "every frame out");
    for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
        let ihl = usize::from(f[14] & 0xf) * 4;
        let mut want = f.clone();
        want[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        want[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xfe]);
        want[15] |= 3;
        want[22] -= 1;
        dataplane::wire::ipv4::Ipv4Packet::new_unchecked(&mut want[14..14 + ihl]).fill_checksum();
        assert_eq!(g, &want, "frame {i}");
        let p = parse(g, DEFAULT_UDP_PORT).unwrap_or_else(|e| panic!("frame {i}: {e:?}"));
        if p.has(Layers::BTH) {
            let (l3, l4, end) = (p.l3_offset as usize, p.l4_offset as usize, p.ip_end as usize);
            assert_eq!(icrc::verify(&g[l3..end], l4 - l3), Ok(true), "frame {i}: ICRC");
        }
    }
    assert_eq!(run.stats()["mbufs_in_use_after"], 0);
}
