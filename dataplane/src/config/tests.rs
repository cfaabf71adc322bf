//! Config loading: the shipped configs load, and broken files fail naming file, key and
//! expectation.

use super::*;
use crate::testing::null_ports;
use std::path::Path;

fn err(text: &str) -> String {
    load_str(text, Path::new("bad.toml")).unwrap_err().to_string()
}

/// Each case loads when its key is empty, else fails naming that key and saying `want`.
fn check_cases(cases: Vec<(String, &str, &str)>) {
    for (text, key, want) in cases {
        match load_str(&text, Path::new("bad.toml")) {
            Ok(_) => assert!(key.is_empty(), "{text:?} loaded"),
            Err(e) => {
                let e = e.to_string();
                assert!(
                    !key.is_empty() && e.contains(key) && e.contains(want),
                    "{text:?}: got {e:?}, want {key} and {want:?}"
                );
            }
        }
    }
}

const PORT: &str = "[[port]]\nvdev = \"net_null0\"\n";

/// Every appliance config shipped: `conf/` and the benchmark's `conf/bench/` (`conf/pktgen/`
/// holds the generator's, which pktgen's tests load).
#[test]
fn shipped_configs_load() {
    let mut n = 0;
    for sub in ["../conf", "../conf/bench"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(sub);
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let l = load(&p).unwrap_or_else(|e| panic!("{e}"));
                assert!(!l.config.ports.is_empty());
                n += 1;
            }
        }
    }
    assert_eq!(n, 6, "conf/: control, default, l2-forward; conf/bench/: empty, pipeline, qos");
}

#[test]
fn l2_forward_config_values() {
    let l = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/l2-forward.toml")).unwrap();
    assert_eq!(l.config.ports.len(), 2);
    assert_eq!(l.config.ports[0].device_name(), "net_pcap0");
    assert_eq!(
        l.config.ports[0].vdev_args(),
        vec![
            ("rx_pcap".to_string(), "samples/nccl_ring_allreduce_rocev2.pcap".to_string()),
            ("tx_pcap".to_string(), "out/p0.pcap".to_string())
        ]
    );
    assert_eq!(l.rx_queues(0), 1);
    assert_eq!(l.pipeline.tables.len(), 1);
    assert_eq!(l.pipeline.tables[0].len(), 1);
    assert_eq!(l.config.dataplane.gradient_udp_port, 49374);
}

#[test]
fn defaults_without_sections() {
    let l = load_str(PORT, Path::new("x.toml")).unwrap();
    assert_eq!(l.config.mempool.mbufs, DEFAULT_MBUFS);
    assert_eq!(l.config.dataplane.burst, DEFAULT_BURST);
    assert_eq!(l.lcores().len(), 1);
    assert_eq!(l.lcores()[0].id, 1);
    assert!(l.pipeline.tables.is_empty());
}

#[test]
fn syntax_error_names_file_and_line() {
    let e = err("[mempool\nmbufs = 1");
    assert!(e.starts_with("bad.toml: "), "{e}");
    assert!(e.contains("line 1"), "{e}");
}

/// A value of the wrong type or out of its range names its key (serde's path through the
/// tables and arrays), says what was expected in words, and gives the line.
#[test]
fn type_and_range_errors_name_the_key_and_line() {
    let e = err(&format!("{PORT}[dataplane]\nburst = \"32\"\n"));
    assert_eq!(
        e,
        "bad.toml: key `dataplane.burst`: invalid type: string \"32\", expected an integer from 1 to 512 (packets) (line 4, column 9)"
    );
    let e = err("[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null1\"\nmtu = 100000\n");
    assert!(e.starts_with("bad.toml: key `port[1].mtu`: "), "{e}");
    assert!(
        e.contains("100000") && e.contains("expected an integer from 68 to 65535 (bytes) (line 5, column 7)"),
        "{e}"
    );
    let coll =
        "[[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 8\nchunk_elements = 4\n";
    let e = err(&format!(
        "{PORT}{coll}[[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\nudp_port = 5\n\
         [[collective.member]]\nrank = 1\nip = \"10.0.0.2\"\nudp_port = 5\n"
    ));
    assert!(e.starts_with("bad.toml: key `collective[0].member[1]`: missing field `mac`"), "{e}");
    let e = err(&format!("{PORT}{coll}deterministic = \"yes\"\n"));
    assert!(e.starts_with("bad.toml: key `collective[0].deterministic`: invalid type: string \"yes\""), "{e}");
    assert!(e.contains("(line 9, column 17)"), "{e}");
}

/// An integer beyond TOML's signed 64 bits is refused at load, as the control thread's and a
/// reload's reading of the file as a plain document refuses it, under its key and line.
#[test]
fn integers_beyond_64_signed_bits_are_refused_at_load() {
    let e = err(&format!("{PORT}[dataplane]\ntx_drain_us = 18446744073709551615\n"));
    assert_eq!(
        e,
        format!(
            "bad.toml: key `dataplane.tx_drain_us`: expected an integer from 0 to 1000000 (µs), found 18446744073709551615 (line 4, column 15)"
        )
    );
    let coll = "[[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 8\n\
                chunk_elements = 4\nslot_timeout_ms = 9223372036854775808\n";
    let e = err(&format!("[[port]]\nvdev = \"net_null0\"\nipv4 = \"10.0.0.254\"\n{coll}"));
    assert_eq!(
        e,
        format!(
            "bad.toml: key `collective[0].slot_timeout_ms`: expected an integer from 1 to 9223372036854775807 (ms), found 9223372036854775808 (line 10, column 19)"
        )
    );
    // Beyond u64 as well, and in an array.
    let e = err(&format!("{PORT}[eal]\nargs = []\n[[lcore]]\nid = 99999999999999999999999\nrx = []\n"));
    assert_eq!(
        e,
        format!("bad.toml: key `lcore[0].id`: {INTEGER_RANGE}, found 99999999999999999999999 (line 6, column 6)")
    );
    // A key whose valid range is narrower than its type's says that range, whatever was wrong.
    for (value, found) in [("\"x\"", "invalid type: string \"x\", "), ("99999999999999999999", ""), ("70000", "")] {
        let e = err(&format!("{PORT}[dataplane]\nburst = {value}\n"));
        assert!(e.starts_with(&format!("bad.toml: key `dataplane.burst`: {found}")), "{e}");
        assert!(e.contains("expected an integer from 1 to 512 (packets)"), "{e}");
        assert!(!e.contains("65535") && !e.contains("-9223372036854775808"), "{e}");
    }
    let e = err(&format!("{PORT}[[port]]\nvdev = \"net_null1\"\n[port.qos]\nclasses = -1\n"));
    assert!(e.starts_with("bad.toml: key `port[1].qos.classes`: "), "{e}");
    assert!(e.contains("expected an integer from 1 to 8 (classes)"), "{e}");
    // i64::MAX itself is TOML: it reaches the key's own range check.
    let text = format!("{PORT}[dataplane]\nreplay_idle_ms = 9223372036854775807\n");
    assert_eq!(load_str(&text, Path::new("ok.toml")).unwrap().config.dataplane.replay_idle_ms, i64::MAX as u64);
    assert!(text.parse::<toml::Table>().is_ok());
}

#[test]
fn dataplane_and_port_values_are_checked() {
    let cases: Vec<(String, &str, &str)> = vec![
        (format!("{PORT}[dataplane]\ngradient_udp_port = 0\n"), "`dataplane.gradient_udp_port`", "1..=65535, found 0"),
        (format!("{PORT}[dataplane]\nreplay_idle_ms = 0\n"), "`dataplane.replay_idle_ms`", "at least 1 ms"),
        (format!("{PORT}[dataplane]\nreplay_idle_ms = 1\n"), "", ""),
        (format!("{PORT}mtu = 68\n"), "", ""),
        (
            format!("{PORT}mtu = 67\n"),
            "`port[0].mtu`",
            "expected at least 68 bytes (RTE_ETHER_MIN_MTU, IPv4's minimum), found 67",
        ),
        (format!("{PORT}mtu = 0\n"), "`port[0].mtu`", "expected at least 68 bytes"),
        (format!("{PORT}mtu = 100\n"), "", ""),
        (
            format!("{PORT}[dataplane]\ntx_drain_us = 1000001\n"),
            "`dataplane.tx_drain_us`",
            "expected at most 1000000 µs (1 s), found 1000001",
        ),
        (
            format!("{PORT}[dataplane]\ntx_drain_us = 9223372036854775807\n"),
            "`dataplane.tx_drain_us`",
            "expected at most 1000000 µs (1 s), found 9223372036854775807",
        ),
        (format!("{PORT}[dataplane]\nstats_interval_ms = 0\n"), "", ""),
        (format!("{PORT}[dataplane]\nstats_interval_ms = 100\n"), "", ""),
        (
            format!("{PORT}[dataplane]\nstats_interval_ms = 1\n"),
            "`dataplane.stats_interval_ms`",
            "expected 0 (no stats line) or at least 100 ms (how often the workers publish their counters), found 1",
        ),
        (
            format!("{PORT}[dataplane]\nstats_interval_ms = 99\n"),
            "`dataplane.stats_interval_ms`",
            "at least 100 ms",
        ),
        (
            "[[port]]\nname = \"a\"\nvdev = \"net_null0\"\n[[port]]\nname = \"a\"\nvdev = \"net_null1\"\n".into(),
            "`port[1].name`",
            "\"a\" is used twice",
        ),
        // Names are keys of the live counters: 1 to 32 of [A-Za-z0-9_-], '-' and '_' alike.
        (
            "[[port]]\nname = \"n-0\"\nvdev = \"net_null0\"\n[[port]]\nname = \"n_0\"\nvdev = \"net_null1\"\n".into(),
            "`port[1].name`",
            "\"n_0\" is used twice ('-' and '_' are one)",
        ),
        (
            "[[port]]\nname = \"a b\"\nvdev = \"net_null0\"\n".into(),
            "`port[0].name`",
            "expected only ASCII letters, digits, '_' and '-', found ' '",
        ),
        (
            format!("[[port]]\nname = \"{}\"\nvdev = \"net_null0\"\n", "p".repeat(33)),
            "`port[0].name`",
            "expected 1 to 32 characters, found 33",
        ),
        (
            "[[port]]\nvdev = \"net_null0\"\n[[table]]\nname = \"x,y\"\nkey = [{ field = \"eth.dst\", match = \"exact\" }]\n".into(),
            "`table[0].name`",
            "found ','",
        ),
        // An input no lcore polls would never be read.
        (
            "[[port]]\nvdev = \"net_pcap0,rx_pcap=in.pcap\"\n[[port]]\nvdev = \"net_null0\"\n[[lcore]]\nid = 1\nrx = [{ port = 1, queue = 0 }]\n".into(),
            "`lcore`",
            "port 0 (net_pcap0) has an input but no lcore polls it",
        ),
        (
            "[[port]]\nvdev = \"net_pcap0,tx_pcap=out.pcap\"\n[[port]]\nvdev = \"net_null0\"\n[[lcore]]\nid = 1\nrx = [{ port = 1, queue = 0 }]\n".into(),
            "",
            "",
        ),
    ];
    check_cases(cases);
}

#[test]
fn unknown_key_is_refused() {
    let e = err(&format!("{PORT}[mempool]\nmbuf = 100\n"));
    assert!(e.contains("unknown field `mbuf`"), "{e}");
    assert!(e.starts_with("bad.toml: key `mempool.mbuf`: unknown field `mbuf`, expected one of `mbufs`"), "{e}");
    assert!(e.contains("mbufs"), "{e}");
}

/// An unknown `[[port]]` key is refused with every key the table takes, in their order.
#[test]
fn unknown_port_key_lists_the_port_keys() {
    let e = err("[[port]]\nvdev = \"net_null0\"\nrx_queues = 2\n");
    assert!(
        e.starts_with(
            "bad.toml: key `port[0].rx_queues`: unknown field `rx_queues`, expected one of `name`, `vdev`, `pci`, \
             `rx_desc`, `tx_desc`, `mtu`, `mac`, `ipv4`, `ipv6`, `qos`"
        ),
        "{e}"
    );
}

#[test]
fn wrong_type_is_refused() {
    let e = err(&format!("{PORT}[mempool]\nmbufs = \"many\"\n"));
    assert!(e.contains("bad.toml"), "{e}");
    assert!(e.contains("integer") || e.contains("u32"), "{e}");
}

#[test]
fn semantic_errors_name_the_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("", "`port`", "at least one [[port]]"),
        ("[[port]]\nname = \"x\"\n", "`port[0]`", "expected `vdev`"),
        ("[[port]]\nvdev = \"a\"\npci = \"0000:00:01.0\"\n", "`port[0]`", "found both"),
        ("[[port]]\npci = \"zz\"\n", "`port[0].pci`", "PCI address"),
        ("[[port]]\nvdev = \"net_null0\"\n[[port]]\nvdev = \"net_null0,size=64\"\n", "`port[1]`", "twice"),
        ("[[port]]\nvdev = \"net_null0\"\nmac = \"02:00\"\n", "`port[0].mac`", "MAC address"),
        ("[[port]]\nvdev = \"net_null0\"\nmac = \"03:00:00:00:00:01\"\n", "`port[0].mac`", "unicast"),
        (
            "[[port]]\nvdev = \"net_null0\"\nmac = \"00:00:00:00:00:00\"\n",
            "`port[0].mac`",
            "expected a host's MAC address, not the null address 00:00:00:00:00:00, found \"00:00:00:00:00:00\"",
        ),
        ("[[port]]\nvdev = \"net_null0\"\nipv4 = \"224.0.0.1\"\n", "`port[0].ipv4`", "unicast"),
        ("[[port]]\nvdev = \"net_null0\"\nipv4 = \"0.0.0.0\"\n", "`port[0].ipv4`", "unicast"),
        ("[[port]]\nvdev = \"net_null0\"\nipv6 = \"ff02::1\"\n", "`port[0].ipv6`", "unicast"),
        ("[mempool]\nmbufs = 10\n[[port]]\nvdev = \"n\"\n", "`mempool.mbufs`", "at least 64"),
        ("[mempool]\ncache = 600\n[[port]]\nvdev = \"n\"\n", "`mempool.cache`", "at most 512"),
        ("[dataplane]\nburst = 0\n[[port]]\nvdev = \"n\"\n", "`dataplane.burst`", "1..=512"),
        (
            "[dataplane]\ngradient_udp_port = 4791\n[[port]]\nvdev = \"n\"\n",
            "`dataplane.gradient_udp_port`",
            "other than 4791",
        ),
        (
            "[[port]]\nvdev = \"n\"\n[[lcore]]\nid = 1\nrx = [{ port = 3, queue = 0 }]\n",
            "`lcore[0].rx[0].port`",
            "below 1",
        ),
        (
            "[[port]]\nvdev = \"n\"\n[[lcore]]\nid = 1\nrx = [{ port = 0, queue = 0 }]\n[[lcore]]\nid = 2\nrx = [{ port = 0, queue = 0 }]\n",
            "`lcore[1].rx[0]`",
            "two lcores",
        ),
        (
            "[[port]]\nvdev = \"n\"\n[[lcore]]\nid = 1\nrx = [{ port = 0, queue = 1 }]\n",
            "`lcore`",
            "no lcore polls queue 0",
        ),
    ];
    for (text, key, want) in cases {
        let e = err(text);
        assert!(e.contains(key) && e.contains(want), "{text:?}: got {e:?}, want {key} and {want:?}");
    }
}

#[test]
fn table_errors_name_the_key() {
    let t = |body: &str| format!("{PORT}[[port]]\nvdev = \"net_null1\"\n[[table]]\nname = \"l2\"\n{body}");
    let key = "key = [{ field = \"eth.dst\", match = \"exact\" }]\n";
    let cases: Vec<(String, &str, &str)> = vec![
        (t("key = [{ field = \"eth.dest\", match = \"exact\" }]\n"), "`table[0].key[0].field`", "unknown field \"eth.dest\""),
        (t("key = [{ field = \"eth.dst\", match = \"fuzzy\" }]\n"), "`table[0].key[0].match`", "unknown match kind"),
        (t("key = []\n"), "`table[0].key`", "at least one key field"),
        (t(&format!("{key}default_action = \"forward(2)\"\n")), "`table[0].default_action`", "below 2"),
        (
            t(&format!("{key}[[table.entry]]\nkey = [\"02:00:00:00:00:0g\"]\naction = \"drop\"\n")),
            "`table[0].entry[0].key[0]`",
            "MAC address",
        ),
        (
            t(&format!("{key}[[table.entry]]\nkey = [\"02:00:00:00:00:01\", 1]\naction = \"drop\"\n")),
            "`table[0].entry[0].key`",
            "expected 1 value",
        ),
        (
            t(&format!("{key}[[table.entry]]\nkey = [\"02:00:00:00:00:01\"]\naction = \"jump\"\n")),
            "`table[0].entry[0].action`",
            "unknown action",
        ),
        (
            t(&format!(
                "{key}[[table.entry]]\nkey = [\"02:00:00:00:00:01\"]\naction = \"drop\"\n[[table.entry]]\nkey = [\"02:00:00:00:00:01\"]\naction = \"flood\"\n"
            )),
            "`table[0].entry[1].key`",
            "already in the table",
        ),
        (
            format!("{PORT}[[table]]\nname = \"a\"\n{key}[[table]]\nname = \"a\"\n{key}"),
            "`table[1].name`",
            "used twice",
        ),
    ];
    for (text, key, want) in cases {
        let e = err(&text);
        assert!(e.contains(key) && e.contains(want), "{text:?}: got {e:?}, want {key} and {want:?}");
    }
}

#[test]
fn collective_errors_name_the_key() {
    let port = "[[port]]\nvdev = \"n\"\nipv4 = \"10.0.0.254\"\n";
    let coll = |extra: &str, member: &str| {
        format!(
            "{port}[[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 8\nchunk_elements = 4\n{extra}\n[[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\n{member}\n"
        )
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (coll("", "udp_port = 5"), "", ""),
        (
            coll("op = \"avg\"", "udp_port = 5").replace("op = \"sum\"\n", ""),
            "`collective[0].op`",
            "\"sum\", \"max\" or \"min\"",
        ),
        (coll("", ""), "`collective[0].member[0].udp_port`", "UDP port"),
        (coll("carriage = \"rocev2\"", "qkey = 1"), "`collective[0].member[0].qpn`", "QP number"),
        // The other carriage's keys are taken and unused (spec section 3 lists both).
        (coll("", "udp_port = 5\nqpn = 7\nqkey = 7"), "", ""),
        (coll("carriage = \"rocev2\"", "qpn = 7\nqkey = 1\nudp_port = 5"), "", ""),
        (coll("carriage = \"rocev2\"", "qpn = 7\nqkey = 1"), "", ""),
        (coll("", "udp_port = 5\nrank = 1").replace("rank = 0\n", ""), "`collective[0].member[0].rank`", "below 1"),
        (coll("", "udp_port = 5").replace("10.0.0.1", "fd00::1"), "`collective[0].member[0].ip`", "no IPv6 address"),
        (
            coll("chunk_elements = 4000", "udp_port = 5").replace("chunk_elements = 4\n", ""),
            "`collective[0].chunk_elements`",
            "at most 8900 bytes",
        ),
        (coll("", "udp_port = 0"), "`collective[0].member[0].udp_port`", "1..=65535"),
        (coll("", "udp_port = 5").replace("10.0.0.1", "224.0.0.9"), "`collective[0].member[0].ip`", "unicast"),
        (coll("", "udp_port = 5").replace("10.0.0.1", "255.255.255.255"), "`collective[0].member[0].ip`", "unicast"),
        (coll("", "udp_port = 5").replace("10.0.0.1", "0.0.0.0"), "`collective[0].member[0].ip`", "unicast"),
        (coll("slot_timeout_ms = 0", "udp_port = 5"), "`collective[0].slot_timeout_ms`", "at least 1 ms"),
        (coll("slot_timeout_ms = 1", "udp_port = 5"), "", ""),
        (coll("", "udp_port = 5").replace("02:00:00:00:01:00", "ff:ff:ff:ff:ff:ff"), "`collective[0].member[0].mac`", "unicast MAC"),
        (coll("", "udp_port = 5").replace("02:00:00:00:01:00", "01:00:5e:00:00:01"), "`collective[0].member[0].mac`", "unicast MAC"),
        (
            coll("", "udp_port = 5").replace("02:00:00:00:01:00", "00:00:00:00:00:00"),
            "`collective[0].member[0].mac`",
            "not the null address 00:00:00:00:00:00",
        ),
        // Two ranks with one address: refused on either carriage; a second port or QP is fine.
        (
            coll("", "udp_port = 5\n[[collective.member]]\nrank = 1\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:01\"\nudp_port = 5"),
            "`collective[0].member[1]`",
            "rank 1 has the same address as rank 0 (10.0.0.1, udp_port 5)",
        ),
        (
            coll("", "udp_port = 5\n[[collective.member]]\nrank = 1\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:01\"\nudp_port = 6"),
            "",
            "",
        ),
        (
            coll(
                "carriage = \"rocev2\"",
                "qpn = 7\nqkey = 1\n[[collective.member]]\nrank = 1\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:01\"\nqpn = 7\nqkey = 2",
            ),
            "`collective[0].member[1]`",
            "same address as rank 0 (10.0.0.1, qpn 7)",
        ),
        (
            coll(
                "carriage = \"rocev2\"",
                "qpn = 7\nqkey = 1\n[[collective.member]]\nrank = 1\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:01\"\nqpn = 8\nqkey = 1",
            ),
            "",
            "",
        ),
    ];
    check_cases(cases);
    // Slot memory beyond the limit is refused with the sizes.
    let big = coll("", "udp_port = 5").replace("tensor_elements = 8", "tensor_elements = 400000000");
    let e =
        load_str(&format!("[dataplane]\nmemory_limit_mb = 64\n{big}"), Path::new("bad.toml")).unwrap_err().to_string();
    assert!(e.contains("`collective[0]`") && e.contains("memory_limit_mb = 64"), "{e}");
}

#[test]
fn result_frames_must_fit_one_mbuf() {
    // 496 f32 lanes: a 2046-byte frame untagged, 2050 bytes with an 802.1Q tag; a contribution
    // may carry two tags and 40 bytes of IPv4 options, 2094 bytes: more than the default 2048,
    // tagged member or not. 484 lanes make 1998-byte frames, 2046 with those headers.
    let port = "[[port]]\nvdev = \"n\"\nipv4 = \"10.0.0.254\"\n";
    let coll = |lanes: u32, member: &str| {
        format!(
            "{port}[[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 1000\nchunk_elements = {lanes}\n[[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\nudp_port = 5\n{member}\n"
        )
    };
    for member in ["", "vlan = 7"] {
        let e = load_str(&coll(496, member), Path::new("bad.toml")).unwrap_err().to_string();
        assert!(
            e.contains("`collective[0].chunk_elements`")
                && e.contains("reach 2094 bytes")
                && e.contains("at least 2222, or use at most 484 f32 lanes"),
            "{member}: {e}"
        );
        load_str(&format!("[mempool]\ndata_room = 2222\n{}", coll(496, member)), Path::new("ok.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        load_str(&coll(484, member), Path::new("ok.toml")).unwrap_or_else(|e| panic!("{e}"));
        assert!(load_str(&coll(485, member), Path::new("bad.toml")).is_err());
        // A short tensor's only chunk is its full chunk.
        let short = coll(496, member).replace("tensor_elements = 1000", "tensor_elements = 400");
        load_str(&short, Path::new("ok.toml")).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Spec section 3's defaults, one slot per chunk, and the slot memory a collective is charged:
/// per slot, what the aggregator allocates (a 4-byte f32/i32 accumulator lane and a kept result
/// lane of the dtype's size per element, plus one copy of every rank's payload when
/// deterministic) and 64 bytes of bookkeeping.
#[test]
fn collectives_take_the_spec_defaults_and_are_charged_their_slot_memory() {
    let coll = |dtype: &str, extra: &str, tensor: u64, chunk: u32| {
        let mut s = format!(
            "[[port]]\nvdev = \"n\"\nipv4 = \"10.0.0.254\"\n[[collective]]\ncollective_id = 1\nop = \"sum\"\n\
             dtype = \"{dtype}\"\ntensor_elements = {tensor}\nchunk_elements = {chunk}\n{extra}\n"
        );
        for k in 0..3 {
            s += &format!(
                "[[collective.member]]\nrank = {k}\nip = \"10.0.0.{}\"\nmac = \"02:00:00:00:01:0{k}\"\nudp_port = 5\n",
                k + 1
            );
        }
        s
    };
    let load = |text: &str| load_str(text, Path::new("ok.toml")).unwrap_or_else(|e| panic!("{e}")).collectives;
    // 250 elements in chunks of 100: 3 slots (the last one 50 elements).
    let c = &load(&coll("f16", "deterministic = true", 250, 100))[0];
    assert_eq!((c.carriage, c.slot_timeout_us, c.dscp), (crate::agg::collective::Carriage::Udp, 1_000_000, 0));
    assert_eq!((c.slots(), c.workers()), (3, 3));
    assert_eq!(c.memory_bytes(), 3 * (100 * 4 + 100 * 2 + 3 * 100 * 2 + 64));
    let c = &load(&coll("f32", "", 250, 100))[0];
    assert_eq!(c.memory_bytes(), 3 * (100 * 4 + 100 * 4 + 64));
    // 512 slots of 248 f32 lanes need 512 * (248 * 8 + 64) bytes: exactly 1 MiB, which fits
    // a 1 MiB limit; one more slot does not.
    let exact = coll("f32", "", 512 * 248, 248);
    assert_eq!(load(&format!("[dataplane]\nmemory_limit_mb = 1\n{exact}"))[0].memory_bytes(), 1 << 20);
    let over = coll("f32", "", 513 * 248, 248);
    let e = load_str(&format!("[dataplane]\nmemory_limit_mb = 1\n{over}"), Path::new("bad.toml")).unwrap_err();
    assert!(e.to_string().contains("memory_limit_mb = 1 MiB"), "{e}");
    // The rank bitmap takes a u64 per 64 workers in every slot: 65 and 4096 workers cost 8 and
    // 504 bytes per slot more than 3 (one word).
    let many = |n: usize| {
        let mut s = coll("f32", "", 250, 100);
        for k in 3..n {
            let (ip, mac) =
                (format!("10.1.{}.{}", k / 250, k % 250 + 1), format!("02:00:00:01:{:02x}:{:02x}", k >> 8, k & 0xff));
            s += &format!("[[collective.member]]\nrank = {k}\nip = \"{ip}\"\nmac = \"{mac}\"\nudp_port = 5\n");
        }
        load(&s)[0].memory_bytes()
    };
    assert_eq!(many(64), 3 * (100 * 4 + 100 * 4 + 64));
    assert_eq!(many(65), 3 * (100 * 4 + 100 * 4 + 72));
    assert_eq!(many(4096), 3 * (100 * 4 + 100 * 4 + 56 + 512));
}

/// A tensor whose last chunk would start beyond the 32-bit `tensor_offset` (spec section 2) is
/// refused naming `tensor_elements` and the most allowed with its chunk size, whatever the
/// memory limit; the largest allowed loads. Before this check, 2^61 + 1000 one-lane chunks
/// passed as 72,000 bytes of slot memory (a wrapped count) and failed only at start-up.
#[test]
fn tensor_elements_stop_where_the_tensor_offset_does() {
    let coll = |limit_mb: u64, tensor: u64, chunk: u32| {
        format!(
            "[dataplane]\nmemory_limit_mb = {limit_mb}\n[[port]]\nvdev = \"n\"\nipv4 = \"10.0.0.254\"\n\
             [[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = {tensor}\n\
             chunk_elements = {chunk}\n[[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\n\
             udp_port = 5\n"
        )
    };
    // The most a 64-bit byte count holds: only the offset refuses.
    let max = memory::MAX_MIB;
    assert_eq!(
        err(&coll(max, (1 << 61) + 1000, 1)),
        "bad.toml: key `collective[0].tensor_elements`: expected at most 4294967296 elements in chunks of 1: the \
         last chunk would start at offset 2305843009213694951, beyond 4294967295, the most the gradient header's \
         32-bit tensor_offset carries (spec section 2); found 2305843009213694952"
    );
    // 2^32 + 256 elements in chunks of 256: the last chunk at 2^32, one past the field.
    assert_eq!(
        err(&coll(max, (1 << 32) + 256, 256)),
        "bad.toml: key `collective[0].tensor_elements`: expected at most 4294967296 elements in chunks of 256: the \
         last chunk would start at offset 4294967296, beyond 4294967295, the most the gradient header's 32-bit \
         tensor_offset carries (spec section 2); found 4294967552"
    );
    // One element past the largest: refused; the largest: loads (2^24 slots of 256 lanes, 2112
    // bytes each, within a limit of 40,000 MiB), its last chunk at offset 2^32 - 256.
    assert!(err(&coll(max, (1 << 32) + 1, 256)).contains("expected at most 4294967296 elements in chunks of 256"));
    let l = load_str(&coll(40_000, 1 << 32, 256), Path::new("ok.toml")).unwrap_or_else(|e| panic!("{e}"));
    let c = &l.collectives[0];
    assert_eq!((c.slots(), c.memory_bytes()), (1 << 24, (1 << 24) * 2112));
    // In chunks of 352 lanes the largest tensor passes 2^32: 12,201,612 whole chunks, 4,294,967,424
    // elements, the last chunk at offset 4,294,967,072; one more element starts a chunk at
    // 4,294,967,424.
    let l = load_str(&coll(max, 4_294_967_424, 352), Path::new("ok.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.collectives[0].slots(), 12_201_612);
    assert!(err(&coll(max, 4_294_967_425, 352)).contains("offset 4294967424, beyond 4294967295"));
    // Beyond the offset and the memory limit both: the offset is named, the first fault of the
    // collective's own keys.
    assert!(err(&coll(1, (1 << 61) + 1000, 1)).contains("`collective[0].tensor_elements`"));
}

/// Each `[[collective]]` value is accepted up to its limit and refused one past it: DSCP is 6
/// bits, an 802.1Q VID 1..=4094, a QP number 24 bits, a chunk at most 8900 bytes, at most
/// `MAX_WORKERS` members; collective ids are unique.
#[test]
fn collective_values_are_accepted_up_to_their_limits() {
    // Room for a 8900-byte chunk's result frame, so that only the chunk limit refuses.
    let port = "[mempool]\ndata_room = 9216\n[[port]]\nvdev = \"n\"\nipv4 = \"10.0.0.254\"\n";
    let coll = |extra: &str, member: &str| {
        format!(
            "{port}[[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 8\n{extra}\n[[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\n{member}\n"
        )
    };
    let c4 = "chunk_elements = 4";
    let rocev2 = "chunk_elements = 4\ncarriage = \"rocev2\"";
    let members = |n: usize| {
        let mut s = coll(c4, "udp_port = 1");
        for k in 1..n {
            s += &format!(
                "[[collective.member]]\nrank = {k}\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\nudp_port = {}\n",
                k + 1
            );
        }
        s
    };
    let second = |id: u16| {
        format!(
            "{}[[collective]]\ncollective_id = {id}\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 8\nchunk_elements = 4\n\
             [[collective.member]]\nrank = 0\nip = \"10.0.0.2\"\nmac = \"02:00:00:00:01:00\"\nudp_port = 5\n",
            coll(c4, "udp_port = 5")
        )
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (coll("chunk_elements = 4\ndscp = 63", "udp_port = 5"), "", ""),
        (coll("chunk_elements = 4\ndscp = 64", "udp_port = 5"), "`collective[0].dscp`", "0..=63, found 64"),
        (coll(c4, "udp_port = 5\nvlan = 0"), "`collective[0].member[0].vlan`", "1..=4094, found 0"),
        (coll(c4, "udp_port = 5\nvlan = 1"), "", ""),
        (coll(c4, "udp_port = 5\nvlan = 4094"), "", ""),
        (coll(c4, "udp_port = 5\nvlan = 4095"), "`collective[0].member[0].vlan`", "1..=4094, found 4095"),
        (coll(rocev2, "qpn = 16777215\nqkey = 1"), "", ""),
        (coll(rocev2, "qpn = 16777216\nqkey = 1"), "`collective[0].member[0].qpn`", "24-bit QP number, found 16777216"),
        // 2225 f32 lanes are 8900 bytes, 2226 are 8904; 4450 f16 lanes are 8900 bytes.
        (coll("chunk_elements = 2225", "udp_port = 5"), "", ""),
        (coll("chunk_elements = 2226", "udp_port = 5"), "`collective[0].chunk_elements`", "8904 bytes"),
        (coll("chunk_elements = 4450", "udp_port = 5").replace("\"f32\"", "\"f16\""), "", ""),
        (members(crate::agg::collective::MAX_WORKERS), "", ""),
        (
            members(crate::agg::collective::MAX_WORKERS + 1),
            "`collective[0].member`",
            "at most 4096 members, found 4097",
        ),
        (second(2), "", ""),
        (second(1), "`collective[1].collective_id`", "collective 1 is configured twice"),
    ];
    check_cases(cases);
}

/// The memory model against what DPDK 22.11 took on this machine (`rte_malloc_get_socket_stats`
/// before and after `rte_pktmbuf_pool_create` and `rte_ring_create` under `--no-huge -m 512`;
/// object sizes from `rte_mempool_calc_obj_size`).
#[test]
fn memory_model_matches_what_dpdk_allocates() {
    use memory::*;
    assert_eq!((mbuf_object_size(2176), mbuf_object_size(9344), mbuf_object_size(1024)), (2368, 9536, 1216));
    // 36 and 34 cache lines are not coprime with 4 channels: padded to 37 and 35.
    assert_eq!((mbuf_object_size(2112), mbuf_object_size(1984)), (37 * 64, 35 * 64));
    let page = 4096;
    assert_eq!(mempool_bytes(8191, 256, 2176, page), 34_674_880);
    assert_eq!(mempool_bytes(8191, 0, 2176, page), 33_618_112);
    assert_eq!(mempool_bytes(8191, 256, 9344, page), 101_774_912);
    assert_eq!(mempool_bytes(8191, 0, 1024, page), 11_251_648);
    assert_eq!(ring_bytes(8192), 66_240);
    assert_eq!(ring_bytes(HAND_OFF_RING_SLOTS as u64), 33_472);
    // On 2 MiB hugepages a 2368-byte mbuf no longer takes a whole page.
    assert!(mempool_bytes(8191, 256, 2176, 2 * MIB) < 8191 * 2368 + 2 * MIB);
}

/// The memory model's counts saturate instead of wrapping: sizes beyond 64 bits stay beyond
/// every budget. Checked near `u64::MAX`, and at the largest inputs the types allow (2^32 - 1
/// mbufs of a 65535-byte data room: a pool below 2^49 bytes, counted exactly).
#[test]
fn memory_counts_saturate_instead_of_wrapping() {
    use memory::*;
    assert_eq!(saturating_sum([u64::MAX - 1, 1]), u64::MAX);
    assert_eq!(saturating_sum([u64::MAX - 1, 2]), u64::MAX, "wrapping would give 0");
    assert_eq!(saturating_sum([u64::MAX, u64::MAX, 5]), u64::MAX, "wrapping would give 3");
    assert_eq!(saturating_sum([u64::MAX - 10, 4, 5]), u64::MAX - 1);
    assert_eq!(saturating_sum([]), 0);
    // 2^32 - 1 objects of 65,728 bytes (65535 + 128 rounded up to 1026 lines, and the 64-byte
    // header: 1027 lines, odd, so coprime with 4 channels), each on its own 17 pages of 4 KiB.
    assert_eq!(mbuf_object_size(u16::MAX), 1027 * 64);
    let objects = 17 * 4096 * u64::from(u32::MAX);
    let ring = 384 + 8 * (1u64 << 32);
    assert_eq!(mempool_bytes(u32::MAX, 512, u16::MAX, 4096), 256 + 128 * 8256 + ring + objects + 3 * 320);
    // EAL, ports and rings beyond any count: u64::MAX, not a wrapped small overhead.
    assert_eq!(fixed_overhead(usize::MAX, usize::MAX), u64::MAX);
    assert_eq!(fixed_overhead(1, usize::MAX / 2), u64::MAX);
    assert_eq!(fixed_overhead(2, 1), (512 << 10) + (160 << 10) + 33_472);
    // Class demands whose sum passes u64::MAX are more than the pool: cut to it (a wrapped sum,
    // 4, would have kept them whole).
    assert_eq!(fit_class_mbufs(&[u64::MAX, 5], &[1, 1], 10), Ok(vec![9, 1]));
    assert_eq!(fit_class_mbufs(&[u64::MAX, u64::MAX], &[u64::MAX, 2], 10), Err(u64::MAX - 10));
}

#[test]
fn eal_memory_is_read_from_the_args() {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let m = |a: &[&str]| memory::eal_memory_mb(&args(a));
    assert_eq!(m(&["--no-huge", "-m", "512", "--no-pci"]), Ok(Some(512)));
    assert_eq!(m(&["-m64"]), Ok(Some(64)));
    assert_eq!(m(&["-m=96"]), Ok(Some(96)));
    assert_eq!(m(&["--socket-mem", "256,128"]), Ok(Some(384)));
    assert_eq!(m(&["--socket-mem=1024"]), Ok(Some(1024)));
    assert_eq!(m(&["--lcores", "0@0,1@1", "--match-allocations"]), Ok(None));
    assert!(m(&["-m"]).unwrap_err().contains("-m without a value"));
    assert!(m(&["-m", "lots"]).unwrap_err().contains("expected MiB"));
    // A sum beyond what a u64 of bytes counts is refused, not wrapped.
    assert_eq!(
        m(&["--socket-mem", "17592186044415,1"]),
        Err("--socket-mem \"17592186044415,1\": expected at most 17592186044415 MiB in all (16 EiB)".into())
    );
    assert_eq!(
        m(&["--socket-mem", "18446744073709551615,1"]).unwrap_err(),
        "--socket-mem \"18446744073709551615,1\": expected at most 17592186044415 MiB in all (16 EiB)"
    );
    assert_eq!(m(&["-m", "17592186044415"]), Ok(Some(memory::MAX_MIB)));
    assert_eq!(memory::page_size(&args(&["--no-huge"])), 4096);
    assert_eq!(memory::page_size(&args(&["-m", "512"])), 2 * memory::MIB);
}

/// A pool, a memory limit or collectives that cannot fit the EAL memory are refused at load,
/// naming the keys and what would fit; without -m only the memory limit bounds the slots.
#[test]
fn memory_needs_must_fit_the_eal_memory() {
    let eal = |m: &str| format!("[eal]\nargs = [\"--no-huge\", \"-m\", \"{m}\", \"--no-pci\"]\n");
    // The default pool (8191 x 2368 bytes on 4 KiB pages: 33.07 MiB) and EAL's 0.5 MiB: 34 MiB
    // fit (measured: the appliance runs with -m 34 and fails to create its pool with -m 33).
    assert!(load_str(&format!("{}{PORT}", eal("34")), Path::new("ok.toml")).is_ok());
    let e = err(&format!("{}{PORT}", eal("33")));
    assert!(e.contains("key `mempool.mbufs`") && e.contains("eal.args -m 33"), "{e}");
    assert!(e.contains("8191 mbufs of 2368 bytes") && e.contains("At most 8045 mbufs fit"), "{e}");
    assert!(e.contains("raise -m to at least 34"), "{e}");
    let e = err(&format!("{}[mempool]\ndata_room = 9344\n{PORT}", eal("64")));
    assert!(e.contains("mempool.mbufs") && e.contains("of 9536 bytes") && e.contains("at least 98"), "{e}");
    // What 64 MiB leave for slots: 64 - 33.07 - 0.5 = 30.43 MiB.
    assert!(load_str(&format!("{}[dataplane]\nmemory_limit_mb = 30\n{PORT}", eal("64")), Path::new("ok.toml")).is_ok());
    let e = err(&format!("{}[dataplane]\nmemory_limit_mb = 31\n{PORT}", eal("64")));
    assert!(e.contains("key `dataplane.memory_limit_mb`") && e.contains("eal.args -m 64"), "{e}");
    assert!(e.contains("expected at most 30 MiB") && e.contains("found 31") && e.contains("at least 65"), "{e}");
    // A limit whose bytes a u64 cannot count is refused as such, with -m or without; the most
    // that does ask -m for itself plus the pool (no wrapped multiplication in the advice).
    for e in [
        err(&format!("{}[dataplane]\nmemory_limit_mb = 17592186044416\n{PORT}", eal("512"))),
        err(&format!("[dataplane]\nmemory_limit_mb = 17592186044416\n{PORT}")),
    ] {
        assert_eq!(
            e,
            "bad.toml: key `dataplane.memory_limit_mb`: expected at most 17592186044415 MiB (16 EiB, what a 64-bit \
             byte count holds), found 17592186044416"
        );
    }
    let e = err(&format!("{}[dataplane]\nmemory_limit_mb = 17592186044415\n{PORT}", eal("512")));
    assert!(e.ends_with("found 17592186044415. Lower it"), "{e}");
    let e = err(&format!("{}[dataplane]\nmemory_limit_mb = 17592186044381\n{PORT}", eal("512")));
    assert!(e.ends_with("found 17592186044381. Lower it, or raise -m to at least 17592186044415"), "{e}");
    let e = err(&format!("{}[dataplane]\nmemory_limit_mb = 1024\n{PORT}", eal("512")));
    assert!(e.contains("dataplane.memory_limit_mb") && e.contains("expected at most 478 MiB"), "{e}");
    // Unset, the limit is what is left: collectives beyond it are refused naming -m.
    let port = "[[port]]\nvdev = \"n\"\nipv4 = \"10.0.0.254\"\n";
    let coll = |tensor: u64| {
        format!(
            "{port}[[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = {tensor}\nchunk_elements = 248\n[[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\nudp_port = 5\n"
        )
    };
    // 512 slots of 248 f32 lanes: 1 MiB each 512 slots (see above).
    let fits = coll(30 * 512 * 248);
    assert!(load_str(&format!("{}{fits}", eal("64")), Path::new("ok.toml")).is_ok());
    let over = coll(31 * 512 * 248);
    let e = err(&format!("{}{over}", eal("64")));
    assert!(e.contains("key `collective`") && e.contains("need 31.00 MiB") && e.contains("eal.args -m 64"), "{e}");
    // Without -m (hugepages as needed) only memory_limit_mb bounds them.
    assert!(load_str(&over, Path::new("ok.toml")).is_ok());
    assert!(load_str(&format!("[dataplane]\nmemory_limit_mb = 100000\n{PORT}"), Path::new("ok.toml")).is_ok());
    let e = err(&format!("[eal]\nargs = [\"-m\", \"x\"]\n{PORT}"));
    assert!(e.contains("key `eal.args`") && e.contains("expected MiB"), "{e}");
}

/// `[port.qos]`: a full section builds the scheduler configuration and maps it says; each bad
/// key fails naming `port[i].qos.KEY`.
#[test]
fn port_qos_builds_the_scheduler_and_names_bad_keys() {
    let good = null_ports(2)
        + r#"
[port.qos]
classes = 3
policy = "dwrr"
rate = 1250000000
burst = 100000
mark_at = "dequeue"
seed = 7
dscp_map = { 46 = 2, 26 = 1 }
pcp_map = [0, 0, 1, 1, 1, 2, 2, 2]
[[port.qos.class]]
capacity_bytes = 50000
weight = 1
[[port.qos.class]]
weight = 2
kmin = 10000
kmax = 40000
pmax = 0.25
ewma_log2 = 3
[[port.qos.class]]
weight = 4
"#;
    let l = load_str(&good, Path::new("q.toml")).unwrap();
    assert!(l.qos[0].is_none());
    let (cfg, map) = l.qos[1].as_ref().unwrap();
    assert_eq!(cfg.hz, 1_000_000);
    assert_eq!(cfg.rate_bytes_per_sec, Some(1_250_000_000));
    assert_eq!(cfg.bucket_bytes, 100_000);
    assert_eq!(cfg.max_frame_bytes, u32::from(DEFAULT_DATA_ROOM) - 128);
    assert_eq!(
        (cfg.policy, cfg.mark_point, cfg.seed),
        (crate::sched::Policy::Dwrr, crate::sched::MarkPoint::Dequeue, 7)
    );
    let w: Vec<u32> = cfg.classes.iter().map(|c| c.weight).collect();
    assert_eq!(w, vec![1, 2, 4]);
    assert_eq!(cfg.classes[0].capacity_bytes, 50_000);
    assert_eq!(cfg.classes[2].capacity_bytes, qos::DEFAULT_CAPACITY_BYTES);
    let red = cfg.classes[1].red.unwrap();
    assert_eq!((red.kmin_bytes, red.kmax_bytes, red.pmax, red.ewma_log2), (10_000, 40_000, 16_384, 3));
    let dscp = map.dscp.unwrap();
    assert_eq!((dscp[46], dscp[26], dscp[0], dscp[45]), (2, 1, 0, 0));
    assert_eq!(map.pcp.unwrap()[5], 2);
    // Defaults: one class, strict, unshaped, marking at enqueue.
    let l = load_str(&format!("{PORT}[port.qos]\n"), Path::new("q.toml")).unwrap();
    let (cfg, map) = l.qos[0].as_ref().unwrap();
    assert_eq!(
        (cfg.classes.len(), cfg.rate_bytes_per_sec, cfg.policy),
        (1, None, crate::sched::Policy::StrictPriority)
    );
    assert_eq!(*map, crate::sched::ClassMap::default());

    let q = |s: &str| format!("{PORT}[port.qos]\n{s}\n");
    check_cases(vec![
        (q("classes = 9"), "port[0].qos.classes", "1..=8"),
        (q("classes = 0"), "port[0].qos.classes", "1..=8"),
        (q("policy = \"wfq\""), "port[0].qos.policy", "\"strict\" or \"dwrr\""),
        (q("mark_at = \"later\""), "port[0].qos.mark_at", "\"enqueue\" or \"dequeue\""),
        (q("rate = 0"), "port[0].qos.rate", "at least 1"),
        (q("burst = 5000"), "port[0].qos.burst", "needs a rate"),
        (q("rate = 1000\nburst = 100"), "port[0].qos.burst", "2072"),
        (q("classes = 2\n[[port.qos.class]]"), "port[0].qos.class", "expected 2"),
        (
            q("[[port.qos.class]]\ncapacity_bytes = 100"),
            "port[0].qos.class[0].capacity_bytes",
            "at least one maximum frame",
        ),
        (q("[[port.qos.class]]\nweight = 2"), "port[0].qos.class[0].weight", "dwrr"),
        (q("policy = \"dwrr\"\n[[port.qos.class]]\nweight = 0"), "port[0].qos.class[0].weight", "at least 1"),
        (q("[[port.qos.class]]\nkmax = 10"), "port[0].qos.class[0].kmin", "with kmax"),
        (q("[[port.qos.class]]\nkmin = 20\nkmax = 10"), "port[0].qos.class[0].kmin", "kmin <= kmax"),
        (q("[[port.qos.class]]\nkmin = 0\nkmax = 10\npmax = 1.5"), "port[0].qos.class[0].pmax", "0..=1"),
        (q("[[port.qos.class]]\nkmin = 0\nkmax = 10\newma_log2 = 21"), "port[0].qos.class[0].ewma_log2", "0..=20"),
        (q("[[port.qos.class]]\npmax = 0.5"), "port[0].qos.class[0].pmax", "kmin and kmax"),
        // The shaper's limits name the key at fault: `burst` above 2^29 bytes, `rate` above 2^40
        // bytes/s; without `burst`, a rate whose 1 ms exceeds 2^29 bytes gets the largest bucket.
        (q("rate = 1000000\nburst = 536870912"), "", ""),
        (
            q("rate = 1000000\nburst = 1000000000"),
            "`port[0].qos.burst`",
            "expected at most 536870912 bytes (2^29), found 1000000000",
        ),
        (q("rate = 1099511627776"), "", ""),
        (q("rate = 1099511627777"), "`port[0].qos.rate`", "expected at most 1099511627776 bytes/s (2^40)"),
        (q("dscp_map = { 46 = 1 }"), "port[0].qos.dscp_map.46", "class 0..=0"),
        (q("classes = 2\ndscp_map = { 64 = 1 }"), "port[0].qos.dscp_map.64", "code point 0..=63"),
        (q("classes = 2\ndscp_map = [0, 1]"), "port[0].qos.dscp_map", "64 classes"),
        (q("classes = 2\npcp_map = [0, 1, 0, 0, 0, 0, 0, 2]"), "port[0].qos.pcp_map[7]", "class 0..=1"),
        (q("classes = 2\npcp_map = { 8 = 1 }"), "port[0].qos.pcp_map.8", "code point 0..=7"),
        (q("colour = 1"), "port[0].qos", "unknown field"),
        // A quantum is DWRR's, as weights are.
        (
            q("quantum = 3000"),
            "port[0].qos.quantum",
            "a quantum is for policy = \"dwrr\" (strict priority has no rounds)",
        ),
        (q("policy = \"strict\"\nquantum = 3000"), "port[0].qos.quantum", "is for policy = \"dwrr\""),
        (q("policy = \"dwrr\"\nquantum = 3000"), "", ""),
        // A class's capacity in full frames must fit the pool: 8191 mbufs of 2048 bytes.
        (q("rate = 1000000\n[[port.qos.class]]\ncapacity_bytes = 16775168"), "", ""),
        (
            q("rate = 1000000\n[[port.qos.class]]\ncapacity_bytes = 9223372036854775807"),
            "port[0].qos.class[0].capacity_bytes",
            "expected at most 16775168 bytes: the class holds its capacity in frames of up to 2048 bytes per mbuf, \
             4503599627370496 mbufs, more than mempool.mbufs (8191); found 9223372036854775807",
        ),
        (
            q("[[port.qos.class]]\ncapacity_bytes = 16775169"),
            "port[0].qos.class[0].capacity_bytes",
            "expected at most 16775168 bytes",
        ),
        // On a jumbo port each full mbuf of a chain counts once more: half as many bytes.
        (format!("{PORT}mtu = 9000\n[port.qos]\n[[port.qos.class]]\ncapacity_bytes = 8388607\n"), "", ""),
        (
            format!("{PORT}mtu = 9000\n[port.qos]\n[[port.qos.class]]\ncapacity_bytes = 8388608\n"),
            "port[0].qos.class[0].capacity_bytes",
            "expected at most 8388607 bytes: the class holds its capacity in frames of up to 2048 bytes per mbuf \
             (and one more per mbuf of a jumbo chain), 8192 mbufs, more than mempool.mbufs (8191); found 8388608",
        ),
        (q("classes = 2\ndscp_map = { 46 = 1 }\npcp_map = { 5 = 1 }"), "", ""),
    ]);
}

#[test]
fn set_class_takes_a_class_0_to_7() {
    let t = |a: &str| {
        format!("{PORT}[[table]]\nname = \"t\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"{a}\"\n")
    };
    check_cases(vec![
        (t("set_class(7); forward(0)"), "", ""),
        (t("set_class(8); forward(0)"), "table[0].default_action", "0..=7"),
    ]);
}

/// A member's frames must fit its port's `mtu` when the port sets one: at MTU 1500, 1408 bytes
/// of payload fit every carriage and family (RoCEv2 over IPv6 has the longest headers, 92
/// bytes), the UDP carriage over IPv4 up to 1452 (48 bytes of headers). A port without `mtu`
/// is not checked.
#[test]
fn a_collective_whose_frames_exceed_its_port_mtu_is_refused_with_the_lanes_that_fit() {
    let coll = |mtu: &str, ip: &str, carriage: &str, dtype: &str, lanes: u32| {
        let (port_ip, member_ip) =
            if ip == "v6" { ("ipv6 = \"fd00::fe\"", "fd00::1") } else { ("ipv4 = \"10.0.0.254\"", "10.0.0.1") };
        format!(
            "[mempool]\ndata_room = 10240\n[[port]]\nvdev = \"net_null0\"\n{port_ip}\n{mtu}\n[[collective]]\ncollective_id = 1\nop = \"sum\"\n\
             dtype = \"{dtype}\"\ncarriage = \"{carriage}\"\ntensor_elements = 10000\nchunk_elements = {lanes}\n\
             [[collective.member]]\nrank = 0\nip = \"{member_ip}\"\nmac = \"02:00:00:00:01:00\"\nudp_port = 5\nqpn = 7\nqkey = 1\n"
        )
    };
    let key = "`collective[0].chunk_elements`";
    check_cases(vec![
        (coll("mtu = 1500", "v4", "udp", "f32", 363), "", ""),
        (
            coll("mtu = 1500", "v4", "udp", "f32", 364),
            key,
            "a full chunk makes 1504-byte IP packets for rank 0, more than port[0].mtu = 1500: expected at most 363 f32 lanes",
        ),
        (coll("mtu = 1500", "v6", "rocev2", "f32", 352), "", ""),
        (coll("mtu = 1500", "v6", "rocev2", "f32", 353), key, "1504-byte IP packets for rank 0, more than port[0].mtu = 1500: expected at most 352 f32 lanes"),
        // f16 over RoCEv2 pads the payload to 4 bytes: 705 lanes pad like 706.
        (coll("mtu = 1500", "v6", "rocev2", "f16", 704), "", ""),
        (coll("mtu = 1500", "v6", "rocev2", "f16", 705), key, "expected at most 704 f16 lanes"),
        (coll("", "v4", "udp", "f32", 2000), "", ""),
        (coll("mtu = 9000", "v4", "udp", "f32", 2000), "", ""),
        (coll("mtu = 9000", "v6", "rocev2", "f32", 2225), "", ""),
        (coll("mtu = 4000", "v6", "rocev2", "f32", 978), key, "expected at most 977 f32 lanes"),
        // IPv6 + UDP + BTH + DETH + gradient header + ICRC = 92 bytes, 96 with one f32 lane.
        (coll("mtu = 90", "v6", "rocev2", "f32", 4), key, "not even one lane fits: the port's mtu must be at least 96"),
    ]);
}

/// The ranges the type errors state are those the checks enforce (the constants' values).
#[test]
fn valid_ranges_state_the_checked_limits() {
    let range = |k: &str| VALID_RANGES.iter().find(|(key, _)| *key == k).unwrap_or_else(|| panic!("{k}")).1;
    let has = |k: &str, bound: String| {
        assert!(range(k).split(|c: char| !c.is_ascii_digit()).any(|w| w == bound), "{k}: {} lacks {bound}", range(k))
    };
    has("port[].qos.rate", crate::meter::bucket::MAX_RATE.to_string());
    has("port[].qos.burst", crate::meter::bucket::MAX_SIZE.to_string());
    has("meter[].size", super::meter::MAX_METER_SIZE.to_string());
    has("port[].qos.class[].ewma_log2", crate::sched::red::MAX_EWMA_LOG2.to_string());
    has("dataplane.memory_limit_mb", memory::MAX_MIB.to_string());
    has("collective[].tensor_elements", crate::agg::collective::MAX_TENSOR_OFFSET.to_string());
    has("collective[].tensor_elements", crate::agg::collective::max_tensor_elements(1).to_string());
    has("port[].mtu", "68".into());
}

/// An entry's label is its key in one spelling, whatever the file's: `FD00:1:0::/32` and
/// `fd00:1::/32` are one entry, one label; wildcards are `*`; the priority follows.
#[test]
fn entry_labels_have_one_spelling_per_key() {
    let text = r#"
[[port]]
vdev = "net_null0"
[[table]]
name = "t"
key = [{ field = "ipv6.dst", match = "lpm" }, { field = "eth.src", match = "ternary" }, { field = "udp.dst_port", match = "range" }, { field = "vlan.outer_vid", match = "ternary" }]
[[table.entry]]
key = [" FD00:1:0::/32", "02:00:00:00:00:0A", " 1000 ->\t2000", "0x10&&&0xff0"]
priority = 5
action = "drop"
[[table.entry]]
key = ["::/0", "_", "*", 7]
priority = 1
action = "drop"
"#;
    let l = load_str(text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        l.config.tables[0].entry_labels(),
        ["fd00:1::/32,02:00:00:00:00:0a,1000->2000,16&&&4080 priority 5", "::/0,*,*,7 priority 1"]
    );
}

/// The lanes an mbuf refusal suggests also fit the members' MTUs: with port 0 at MTU 1500,
/// 500 f32 lanes are too long for the default mbuf, and the answer is the MTU's 363 (1452 bytes
/// of payload under 48 of headers), which loads, where 364 does not.
#[test]
fn the_lanes_suggested_fit_every_limit() {
    let coll = |lanes: u32| {
        format!(
            "[[port]]\nvdev = \"n\"\nipv4 = \"10.0.0.254\"\nmtu = 1500\n[[collective]]\ncollective_id = 1\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 1000\nchunk_elements = {lanes}\n[[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\nudp_port = 5\n"
        )
    };
    let e = load_str(&coll(500), Path::new("bad.toml")).unwrap_err().to_string();
    assert!(e.contains("more than an mbuf holds") && e.contains("or use at most 363 f32 lanes"), "{e}");
    let e = load_str(&coll(400), Path::new("bad.toml")).unwrap_err().to_string();
    assert!(e.contains("port[0].mtu = 1500: expected at most 363 f32 lanes"), "{e}");
    load_str(&coll(363), Path::new("ok.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert!(load_str(&coll(364), Path::new("bad.toml")).is_err());
}
