//! Hostile neighbours through the real binary: each case is its own replay, checked for its
//! exact output (no reply, the frame forwarded unchanged, or a reply to one MAC) and its named
//! drop counter. ARP (RFC 826, RFC 5227), neighbour solicitations (RFC 4861 section 7.1.1),
//! Routing headers (RFC 8200 section 4.4), IPv4 source routes (RFC 791 section 3.1, RFC 1812
//! section 5.2.4.1) and IPv6 options that say discard (RFC 8200 section 4.2) addressed to the
//! appliance; and configurations whose memory cannot fit `-m`.

use functional_tests::*;
use std::process::Command;

/// What a case's replay must write.
#[derive(Debug, Clone, Copy)]
enum Out {
    /// Nothing.
    Nothing,
    /// The input frame, unchanged (the table forwards it back out of port 0).
    Forwarded,
    /// An ARP reply (operation 2) to this MAC, naming it as the target hardware address.
    ArpReply(&'static str),
    /// A Neighbor Advertisement (ICMPv6 type 136) to this MAC.
    Advertisement(&'static str),
}

struct Case {
    name: &'static str,
    /// A scapy expression for the one frame.
    scapy: &'static str,
    out: Out,
    /// The drop reason counted once (every other reason stays 0).
    drop: Option<&'static str>,
    /// Address conflicts counted.
    conflicts: u64,
}

const ME_MAC: &str = "02:00:00:00:00:fe";
const PEER: &str = "02:00:00:00:01:01";
const INTRUDER: &str = "02:00:00:00:06:06";

fn cases() -> Vec<Case> {
    let c = |name, scapy, out, drop, conflicts| Case { name, scapy, out, drop, conflicts };
    vec![
        c(
            "arp_request_ok",
            "Ether(src=PEER, dst=BCAST) / ARP(op=1, hwsrc=PEER, psrc='10.0.0.2', pdst=ME4)",
            Out::ArpReply(PEER),
            None,
            0,
        ),
        c(
            "arp_request_padded_reply_trimmed",
            "Ether(src=PEER, dst=BCAST) / ARP(op=1, hwsrc=PEER, psrc='10.0.0.2', pdst=ME4) / Padding(load=b'\\xaa' * 60)",
            Out::ArpReply(PEER),
            None,
            0,
        ),
        c(
            "arp_sender_broadcast",
            "Ether(src=PEER, dst=BCAST) / ARP(op=1, hwsrc=BCAST, psrc='10.0.0.2', pdst=ME4)",
            Out::Nothing,
            Some("arp_sender_multicast"),
            0,
        ),
        c(
            "arp_sender_multicast",
            "Ether(src='01:00:5e:00:00:01', dst=BCAST) / ARP(op=1, hwsrc='01:00:5e:00:00:01', psrc='10.0.0.2', pdst=ME4)",
            Out::Nothing,
            Some("arp_sender_multicast"),
            0,
        ),
        c(
            "arp_sender_mismatch",
            "Ether(src=PEER, dst=BCAST) / ARP(op=1, hwsrc='02:00:00:00:09:09', psrc='10.0.0.2', pdst=ME4)",
            Out::Nothing,
            Some("arp_sender_mismatch"),
            0,
        ),
        c(
            "arp_unicast_request_answered_to_the_ethernet_source",
            "Ether(src=PEER, dst=ME_MAC) / ARP(op=1, hwsrc=PEER, psrc='10.0.0.2', pdst=ME4)",
            Out::ArpReply(PEER),
            None,
            0,
        ),
        c(
            "gratuitous_arp_for_our_address",
            "Ether(src=INTRUDER, dst=BCAST) / ARP(op=1, hwsrc=INTRUDER, psrc=ME4, pdst=ME4)",
            Out::Forwarded,
            None,
            1,
        ),
        c(
            "arp_reply_claiming_our_address",
            "Ether(src=INTRUDER, dst=BCAST) / ARP(op=2, hwsrc=INTRUDER, psrc=ME4, hwdst=BCAST, pdst=ME4)",
            Out::Forwarded,
            None,
            1,
        ),
        c(
            "arp_probe_for_our_address",
            "Ether(src=INTRUDER, dst=BCAST) / ARP(op=1, hwsrc=INTRUDER, psrc='0.0.0.0', pdst=ME4)",
            Out::ArpReply(INTRUDER),
            None,
            1,
        ),
        c(
            "ns_ok",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER)",
            Out::Advertisement(PEER),
            None,
            0,
        ),
        c(
            "ns_hop_limit_254",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=254) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER)",
            Out::Nothing,
            Some("nd_bad_hop_limit"),
            0,
        ),
        c(
            "ns_bad_checksum",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6, cksum=0x1234) / ICMPv6NDOptSrcLLAddr(lladdr=PEER)",
            Out::Nothing,
            Some("nd_bad_checksum"),
            0,
        ),
        c(
            "ns_code_1",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6, code=1) / ICMPv6NDOptSrcLLAddr(lladdr=PEER)",
            Out::Nothing,
            Some("nd_bad_code"),
            0,
        ),
        c(
            "ns_20_bytes",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='fd00::2', dst=ME6, hlim=255, nh=58) / Raw(bytes([135, 0, 0, 0]) + bytes(16))",
            Out::Nothing,
            Some("nd_too_short"),
            0,
        ),
        c(
            "ns_multicast_target",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='fd00::2', dst=ME6, hlim=255) / ICMPv6ND_NS(tgt='ff02::1') / ICMPv6NDOptSrcLLAddr(lladdr=PEER)",
            Out::Nothing,
            Some("nd_multicast_target"),
            0,
        ),
        c(
            "ns_zero_length_option",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6) / Raw(bytes([1, 0, 2, 0, 0, 0, 1, 1]))",
            Out::Nothing,
            Some("nd_bad_option"),
            0,
        ),
        c(
            "ns_from_our_own_address",
            "Ether(src=INTRUDER, dst=SN_MAC) / IPv6(src=ME6, dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr=INTRUDER)",
            Out::Nothing,
            Some("nd_own_source"),
            0,
        ),
        c(
            "dad_with_source_lladdr",
            "Ether(src=INTRUDER, dst=SN_MAC) / IPv6(src='::', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr=INTRUDER)",
            Out::Nothing,
            Some("nd_bad_unspecified_source"),
            0,
        ),
        c(
            "dad_to_unicast",
            "Ether(src=INTRUDER, dst=ME_MAC) / IPv6(src='::', dst=ME6, hlim=255) / ICMPv6ND_NS(tgt=ME6)",
            Out::Nothing,
            Some("nd_bad_unspecified_source"),
            0,
        ),
        c(
            "ns_from_a_multicast_source",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='ff02::1', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER)",
            Out::Nothing,
            Some("nd_bad_source"),
            0,
        ),
        c(
            "ns_from_loopback",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='::1', dst=ME6, hlim=255) / ICMPv6ND_NS(tgt=ME6)",
            Out::Nothing,
            Some("nd_bad_source"),
            0,
        ),
        c(
            "ns_from_a_broadcast_mac_without_source_lladdr",
            "Ether(src=BCAST, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6)",
            Out::Nothing,
            Some("nd_sender_multicast"),
            0,
        ),
        c(
            "ns_with_a_multicast_source_lladdr",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr='33:33:00:00:00:01')",
            Out::Nothing,
            Some("nd_sender_multicast"),
            0,
        ),
        c(
            "ns_answered_to_its_source_lladdr",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr='02:00:00:00:07:07')",
            Out::Advertisement("02:00:00:00:07:07"),
            None,
            0,
        ),
        c(
            "ns_with_traffic_class_and_flow_label",
            "Ether(src=PEER, dst=SN_MAC) / IPv6(src='fd00::2', dst=SN, hlim=255, tc=0xbb, fl=0xabcde) / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER)",
            Out::Advertisement(PEER),
            None,
            0,
        ),
        c(
            "dad_for_our_address",
            "Ether(src=INTRUDER, dst=SN_MAC) / IPv6(src='::', dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6)",
            Out::Advertisement("33:33:00:00:00:01"),
            None,
            1,
        ),
        c(
            "ns_for_another_host_is_forwarded",
            "Ether(src=PEER, dst='33:33:ff:00:00:09') / IPv6(src='fd00::2', dst='ff02::1:ff00:9', hlim=64) / ICMPv6ND_NS(tgt='fd00::9')",
            Out::Forwarded,
            None,
            0,
        ),
        c(
            "routing_segments_left_beyond_addresses_to_us",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='fd00::2', dst=ME6) / IPv6ExtHdrRouting(addresses=['fd00::9'], segleft=2) / UDP(sport=5, dport=49374) / Raw(bytes(24))",
            Out::Nothing,
            Some("ipv6_bad_segments_left"),
            0,
        ),
        c(
            "routing_segment_left_to_us_is_no_contribution",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='fd00::2', dst=ME6) / IPv6ExtHdrRouting(addresses=['fd00::9'], segleft=1) / UDP(sport=50000, dport=49374) / Raw(bytes([0x10, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0]) + bytes(16))",
            Out::Nothing,
            Some("source_routed"),
            0,
        ),
        c(
            "routing_no_segment_left_to_us_goes_to_the_tables",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='fd00::2', dst=ME6) / IPv6ExtHdrRouting(addresses=['fd00::9'], segleft=0) / UDP(sport=5, dport=9000) / Raw(bytes(24))",
            Out::Forwarded,
            None,
            0,
        ),
        c(
            "ipv4_loose_source_route_to_us",
            "Ether(src=PEER, dst=ME_MAC) / IP(src='10.0.0.2', dst=ME4, options=[IPOption_LSRR(routers=['10.0.0.9'], pointer=4)]) / UDP(sport=50000, dport=49374) / Raw(bytes([0x10, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0]) + bytes(16))",
            Out::Nothing,
            Some("source_routed"),
            0,
        ),
        c(
            "ipv4_strict_source_route_to_us",
            "Ether(src=PEER, dst=ME_MAC) / IP(src='10.0.0.2', dst=ME4, options=[IPOption_SSRR(routers=['10.0.0.9'], pointer=4)]) / UDP(sport=5, dport=9000) / Raw(bytes(8))",
            Out::Nothing,
            Some("source_routed"),
            0,
        ),
        c(
            "ipv4_finished_source_route_to_us_goes_to_the_tables",
            "Ether(src=PEER, dst=ME_MAC) / IP(src='10.0.0.2', dst=ME4, options=[IPOption_LSRR(routers=['10.0.0.9'], pointer=8)]) / UDP(sport=5, dport=9000) / Raw(bytes(8))",
            Out::Forwarded,
            None,
            0,
        ),
        c(
            "ipv4_source_route_in_transit",
            "Ether(src=PEER, dst='02:00:00:00:00:09') / IP(src='10.0.0.2', dst='10.0.0.9', options=[IPOption_LSRR(routers=['10.0.0.7'], pointer=4)]) / UDP(sport=5, dport=9000) / Raw(bytes(8))",
            Out::Forwarded,
            None,
            0,
        ),
        c(
            "destination_option_that_says_discard_to_us",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='fd00::2', dst=ME6) / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x80, optdata=bytes(4))]) / UDP(sport=50000, dport=49374) / Raw(bytes([0x10, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0]) + bytes(16))",
            Out::Nothing,
            Some("ipv6_unrecognized_option"),
            0,
        ),
        c(
            "destination_option_that_says_skip_to_us_goes_to_the_tables",
            "Ether(src=PEER, dst=ME_MAC) / IPv6(src='fd00::2', dst=ME6) / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1e, optdata=bytes(4))]) / UDP(sport=5, dport=9000) / Raw(bytes(8))",
            Out::Forwarded,
            None,
            0,
        ),
        c(
            "hop_by_hop_option_that_says_discard_in_transit",
            "Ether(src=PEER, dst='02:00:00:00:00:09') / IPv6(src='fd00::2', dst='fd00::9') / IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=0xc2, optdata=bytes(4))]) / UDP(sport=5, dport=9000) / Raw(bytes(8))",
            Out::Forwarded,
            None,
            0,
        ),
        c(
            "routing_segments_left_beyond_addresses_in_transit",
            "Ether(src=PEER, dst='02:00:00:00:00:09') / IPv6(src='fd00::2', dst='fd00::9') / IPv6ExtHdrRouting(addresses=['fd00::7'], segleft=2) / UDP(sport=5, dport=9000) / Raw(bytes(24))",
            Out::Forwarded,
            None,
            0,
        ),
    ]
}

fn mac(s: &str) -> Vec<u8> {
    s.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect()
}

#[test]
fn hostile_neighbours_get_their_exact_answer_and_counter() {
    let dir = scratch("hostile");
    let cases = cases();
    let mut script = format!(
        "from scapy.all import *\nME_MAC='{ME_MAC}'\nPEER='{PEER}'\nINTRUDER='{INTRUDER}'\nBCAST='ff:ff:ff:ff:ff:ff'\n\
         ME4='10.0.0.254'\nME6='fd00::fe'\nSN='ff02::1:ff00:fe'\nSN_MAC='33:33:ff:00:00:fe'\n"
    );
    for c in &cases {
        script += &format!("wrpcap('{}', [{}])\n", dir.join(format!("{}.pcap", c.name)).display(), c.scapy);
    }
    let st = Command::new("python3").arg("-c").arg(&script).status().expect("python3");
    assert!(st.success(), "scapy wrote the inputs");
    let conf = write_config(
        &dir,
        "c.toml",
        &format!(
            "{EAL}[[port]]\nvdev = \"net_null0\"\nmac = \"{ME_MAC}\"\nipv4 = \"10.0.0.254\"\nipv6 = \"fd00::fe\"\n\
             [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(0)\"\n"
        ),
    );
    for c in &cases {
        let input = dir.join(format!("{}.pcap", c.name));
        let out = dir.join(format!("{}-out.pcap", c.name));
        let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=0={}", out.display())]);
        run.assert_ok();
        let sent = read_pcap(&out);
        let frame = &read_pcap(&input)[0];
        let name = c.name;
        match c.out {
            Out::Nothing => assert!(sent.is_empty(), "{name}: sent {sent:02x?}"),
            Out::Forwarded => assert_eq!(sent, vec![frame.clone()], "{name}"),
            Out::ArpReply(to) => {
                assert_eq!(sent.len(), 1, "{name}");
                let r = &sent[0];
                assert_eq!((&r[0..6], &r[6..12], &r[12..14]), (&mac(to)[..], &mac(ME_MAC)[..], &[8, 6][..]), "{name}");
                // Operation 2, sender = the appliance, target hardware address = the requester.
                assert_eq!((&r[20..22], &r[22..28], &r[28..32]), (&[0, 2][..], &mac(ME_MAC)[..], &[10, 0, 0, 254][..]));
                assert_eq!(&r[32..38], &mac(to)[..], "{name}");
                // The ARP packet alone: the request's trailing bytes are not echoed.
                assert_eq!(r.len(), 42, "{name}");
            }
            Out::Advertisement(to) => {
                assert_eq!(sent.len(), 1, "{name}");
                let r = &sent[0];
                assert_eq!((&r[0..6], &r[6..12], &r[12..14]), (&mac(to)[..], &mac(ME_MAC)[..], &[0x86, 0xdd][..]));
                assert_eq!((r[20], r[21], r[54]), (58, 255, 136), "{name}: ICMPv6 NA, hop limit 255");
                // A new packet: traffic class 0 (Not-ECT), flow label 0; 32 bytes of ICMPv6.
                assert_eq!(&r[14..18], &[0x60, 0, 0, 0], "{name}: version 6, class 0, flow label 0");
                assert_eq!(r.len(), 14 + 40 + 32, "{name}");
                // The target link-layer address option names the appliance.
                assert_eq!(&r[78..86], &[&[2, 1][..], &mac(ME_MAC)[..]].concat()[..], "{name}");
            }
        }
        let stats = run.stats();
        let drops = stats["drops"].as_object().unwrap();
        for (reason, n) in drops {
            let want = u64::from(c.drop == Some(reason.as_str()));
            assert_eq!(n.as_u64(), Some(want), "{name}: drop counter {reason}");
        }
        if let Some(r) = c.drop {
            assert!(drops.contains_key(r), "{name}: no drop reason {r}");
        }
        assert_eq!(stats["address_conflicts"], c.conflicts, "{name}");
        let replies = u64::from(matches!(c.out, Out::ArpReply(_) | Out::Advertisement(_)));
        assert_eq!(stats["neighbor_replies"], replies, "{name}");
        if c.conflicts > 0 {
            assert!(run.stdout().contains("address conflicts: 1"), "{name}: {}", run.stdout());
        }
    }
}

/// A mempool or a memory limit that cannot fit `-m` is refused at load: exit 2, naming the keys.
#[test]
fn memory_beyond_the_eal_memory_is_refused() {
    let dir = scratch("hostile-memory");
    let eal = |m: &str| {
        format!("[eal]\nargs = [\"--no-huge\", \"-m\", \"{m}\", \"--no-pci\", \"--no-shconf\", \"--lcores\", \"0@0,1@1\"]\n")
    };
    let port = "[[port]]\nvdev = \"net_null0\"\n";
    let cases = [
        // The default pool needs 33.07 MiB plus EAL's 0.5 MiB.
        (format!("{}{port}", eal("32")), ["`mempool.mbufs`", "eal.args -m 32", "At most 7789 mbufs fit"]),
        (
            format!("{}[mempool]\ndata_room = 9344\n{port}", eal("64")),
            ["`mempool.mbufs`", "eal.args -m 64", "raise -m to at least 98"],
        ),
        (
            format!("{}[dataplane]\nmemory_limit_mb = 64\n{port}", eal("64")),
            ["`dataplane.memory_limit_mb`", "eal.args -m 64", "expected at most 30 MiB"],
        ),
        (
            format!("{}[dataplane]\nmemory_limit_mb = 1024\n{port}", eal("512")),
            ["`dataplane.memory_limit_mb`", "eal.args -m 512", "expected at most 478 MiB"],
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let conf = write_config(&dir, &format!("m{i}.toml"), text);
        let run = run_dpu(&dir, &conf, &[]);
        assert_eq!(run.code(), 2, "{text}: {}", run.stderr());
        for w in want {
            assert!(run.stderr().contains(w), "{text}: want {w:?} in {}", run.stderr());
        }
    }
    // What fits runs: -m 34 holds the default pool (with -m 33 DPDK cannot create it).
    let input = dir.join("in.pcap");
    write_pcap(&input, &[(frames::Udp4::default().build(), None)]);
    let conf = write_config(
        &dir,
        "fits.toml",
        &format!(
            "{}[dataplane]\nmemory_limit_mb = 0\n{port}[[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(0)\"\n",
            eal("34")
        ),
    );
    let out = dir.join("out.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=0={}", out.display())]);
    run.assert_ok();
    assert_eq!(read_pcap(&out).len(), 1);
}
