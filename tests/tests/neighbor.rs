//! The appliance answers ARP and IPv6 neighbour solicitations for its own addresses (checked by
//! tshark, which validates the ICMPv6 checksum), and nothing else.

use functional_tests::*;
use std::process::Command;

#[test]
fn answers_arp_and_neighbor_solicitation_for_its_addresses() {
    let dir = scratch("neighbor");
    let input = dir.join("in.pcap");
    let script = format!(
        r#"
from scapy.all import Ether, ARP, IPv6, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, Dot1Q, wrpcap
me = "02:00:00:00:01:01"
pkts = [
    Ether(src=me, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=me, psrc="10.0.0.2", pdst="10.0.0.254"),
    Ether(src=me, dst="ff:ff:ff:ff:ff:ff") / Dot1Q(vlan=7) / ARP(op=1, hwsrc=me, psrc="10.0.0.2", pdst="10.0.0.254"),
    Ether(src=me, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=me, psrc="10.0.0.2", pdst="10.0.0.9"),
    Ether(src=me, dst="33:33:ff:00:00:fe") / IPv6(src="fd00::2", dst="ff02::1:ff00:fe", hlim=255)
        / ICMPv6ND_NS(tgt="fd00::fe") / ICMPv6NDOptSrcLLAddr(lladdr=me),
    Ether(src=me, dst="33:33:ff:00:00:09") / IPv6(src="fd00::2", dst="ff02::1:ff00:9", hlim=255)
        / ICMPv6ND_NS(tgt="fd00::9") / ICMPv6NDOptSrcLLAddr(lladdr=me),
]
wrpcap("{}", pkts)
"#,
        input.display()
    );
    let st = Command::new("python3").arg("-c").arg(&script).status().expect("python3");
    assert!(st.success(), "scapy wrote the input");
    let conf = write_config(
        &dir,
        "c.toml",
        &format!(
            "{EAL}[[port]]\nvdev = \"net_null0\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\nipv6 = \"fd00::fe\"\n\
             [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"drop\"\n"
        ),
    );
    let out = dir.join("out.pcap");
    let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=0={}", out.display())]);
    run.assert_ok();
    assert_eq!(run.stats()["neighbor_replies"], 3);
    assert_eq!(run.drops("table_miss"), 2, "requests for other addresses go to the tables");
    let Some(lines) = functional_tests::frames::tshark_fields(
        &out,
        &[
            "eth.dst",
            "vlan.id",
            "arp.opcode",
            "arp.src.proto_ipv4",
            "arp.dst.proto_ipv4",
            "icmpv6.type",
            "icmpv6.checksum.status",
            "icmpv6.nd.na.flag.s",
        ],
    ) else {
        return;
    };
    let want = vec![
        "02:00:00:00:01:01\t\t2\t10.0.0.254\t10.0.0.2\t\t\t",
        "02:00:00:00:01:01\t7\t2\t10.0.0.254\t10.0.0.2\t\t\t",
        "02:00:00:00:01:01\t\t\t\t\t136\t1\tTrue",
    ];
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (got, want) in lines.iter().zip(want) {
        let got = got.replace("\t1\ttrue", "\t1\tTrue").replace("\t1\t1", "\t1\tTrue");
        assert_eq!(got, want);
    }
}

/// A Neighbor Solicitation without a source link-layer address option (unicast NUD, a
/// duplicate address detection probe) is 8 bytes shorter than its advertisement: one that
/// fills its mbuf, or arrives as a chain that is then made one segment, grows into the
/// headroom and is answered (it went to the tables as transit). A long solicitation carrying a
/// Hop-by-Hop header, which the answerer never answers, goes to the tables in a chain too (it
/// was dropped `multi_segment`).
#[test]
fn solicitations_that_fill_their_mbuf_or_arrive_chained_are_answered() {
    let dir = scratch("neighbor-room");
    let input = dir.join("in.pcap");
    let script = format!(
        r#"
from scapy.all import Ether, IPv6, IPv6ExtHdrHopByHop, ICMPv6ND_NS, Raw, wrpcap
me = "02:00:00:00:01:01"
pkts = [
    Ether(src=me, dst="02:00:00:00:00:fe") / IPv6(src="fd00::2", dst="fd00::fe", hlim=255) / ICMPv6ND_NS(tgt="fd00::fe"),
    Ether(src=me, dst="33:33:ff:00:00:fe") / IPv6(src="::", dst="ff02::1:ff00:fe", hlim=255) / ICMPv6ND_NS(tgt="fd00::fe"),
    Ether(src=me, dst="02:00:00:00:00:fe") / IPv6(src="fd00::2", dst="fd00::fe", hlim=255)
        / IPv6ExtHdrHopByHop() / ICMPv6ND_NS(tgt="fd00::fe") / Raw(b"\x00" * 256),
]
assert [len(p) for p in pkts] == [78, 78, 342], [len(p) for p in pkts]
wrpcap("{}", pkts)
"#,
        input.display()
    );
    let st = Command::new("python3").arg("-c").arg(&script).status().expect("python3");
    assert!(st.success(), "scapy wrote the input");
    let out = dir.join("out.pcap");
    // 78 bytes fill a 206-byte buffer after its 128 bytes of headroom; with 192 they are a chain.
    for data_room in [206, 192] {
        let conf = write_config(
            &dir,
            "c.toml",
            &format!(
                "{EAL}[mempool]\ndata_room = {data_room}\nmbufs = 16383\n\
                 [[port]]\nvdev = \"net_null0\"\nmac = \"02:00:00:00:00:fe\"\nipv6 = \"fd00::fe\"\n\
                 [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"drop\"\n"
            ),
        );
        let run = run_dpu(&dir, &conf, &[format!("--rx=0={}", input.display()), format!("--tx=0={}", out.display())]);
        run.assert_ok();
        let s = run.stats();
        assert_eq!(
            (s["neighbor_replies"].as_u64(), s["address_conflicts"].as_u64()),
            (Some(2), Some(1)),
            "{data_room}"
        );
        assert_eq!(read_pcap(&out).iter().map(Vec::len).collect::<Vec<_>>(), [86, 86], "two advertisements");
        assert_eq!((run.drops("table_miss"), run.drops("multi_segment")), (1, 0), "{data_room}: the Hop-by-Hop one");
    }
}
