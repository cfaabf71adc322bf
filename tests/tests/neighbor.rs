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
