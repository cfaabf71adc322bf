//! A table too large for the caches through the real binary: an ACL, then an L2 table of
//! 10,000 exact entries (32,768 hash slots, 512 KiB: past the 256 KiB above which the
//! appliance takes each burst through the tables one table at a time, `Staging::Auto`).
//! Every frame's fate is computed here from the entries and checked: which port, in which
//! order, with which rewrites, and each drop's reason.

use functional_tests::frames::Udp4;
use functional_tests::*;

const ENTRIES: usize = 10_000;
const FRAMES: usize = 3_000;

/// The MAC of L2 entry `i` (entries past `ENTRIES` are MACs the table does not hold).
fn mac(i: usize) -> [u8; 6] {
    [2, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8]
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Entry `i`: even ones forward to port 1 and count `even`; odd ones decrement the TTL and
/// forward to port 2.
fn config() -> String {
    let mut s = EAL.to_string();
    for p in 0..3 {
        s += &format!("[[port]]\nname = \"p{p}\"\nvdev = \"net_null{p}\"\n");
    }
    s += r#"
[[table]]
name = "acl"
key = [{ field = "udp.dst_port", match = "ternary" }]
default_action = "count(acl_pass)"
entry = [{ key = ["53"], priority = 10, action = "drop" }]

[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
default_action = "drop"
entry = [
"#;
    for i in 0..ENTRIES {
        let action = if i.is_multiple_of(2) { "forward(1); count(even)" } else { "dec_ttl; forward(2)" };
        s += &format!("    {{ key = [\"{}\"], action = \"{action}\" }},\n", mac_text(mac(i)));
    }
    s += "]\n";
    s
}

/// Frame `k`: to entry `(k * 7919) % 12,000` (a sixth of them unknown), UDP port 53 for every
/// 50th (the ACL drops it), TTL 1 for every 97th (an odd entry's `dec_ttl` drops it).
fn frame(k: usize) -> (usize, Udp4) {
    let i = (k * 7919) % 12_000;
    let f = Udp4 {
        dst_mac: mac(i),
        dport: if k.is_multiple_of(50) { 53 } else { 4000 },
        ttl: if k.is_multiple_of(97) { 1 } else { 64 },
        sport: 1000 + k as u16,
        ..Default::default()
    };
    (i, f)
}

#[test]
fn a_table_past_the_caches_sends_every_frame_where_its_entry_says() {
    let dir = scratch("large-table");
    let conf = write_config(&dir, "c.toml", &config());
    let built: Vec<(usize, Udp4, Vec<u8>)> = (0..FRAMES)
        .map(|k| {
            let (i, f) = frame(k);
            let bytes = f.build();
            (i, f, bytes)
        })
        .collect();
    let input = dir.join("in.pcap");
    write_pcap(&input, &built.iter().map(|(_, _, b)| (b.clone(), None)).collect::<Vec<_>>());
    let outs: Vec<_> = (1..3).map(|p| dir.join(format!("out{p}.pcap"))).collect();
    let run = run_dpu(
        &dir,
        &conf,
        &[
            format!("--rx=0={}", input.display()),
            format!("--tx=1={}", outs[0].display()),
            format!("--tx=2={}", outs[1].display()),
        ],
    );
    run.assert_ok();

    // What each frame should do, from the entries alone.
    let (mut to1, mut to2) = (Vec::new(), Vec::new());
    let (mut acl, mut miss, mut ttl, mut even, mut passed) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for (i, f, bytes) in &built {
        if f.dport == 53 {
            acl += 1;
            continue;
        }
        passed += 1;
        if *i >= ENTRIES {
            miss += 1;
        } else if i.is_multiple_of(2) {
            even += 1;
            to1.push(bytes.clone());
        } else if f.ttl == 1 {
            ttl += 1;
        } else {
            to2.push(bytes.clone());
        }
    }
    assert!(acl > 0 && miss > 0 && ttl > 0 && !to1.is_empty() && !to2.is_empty(), "the workload has every case");

    let got1 = read_pcap(&outs[0]);
    assert_eq!(got1.len(), to1.len(), "port 1: the even entries' frames");
    if let Some(n) = (0..to1.len()).find(|&n| got1[n] != to1[n]) {
        panic!("port 1, frame {n}: {:02x?}, expected unchanged {:02x?}", got1[n], to1[n]);
    }
    let got2 = read_pcap(&outs[1]);
    assert_eq!(got2.len(), to2.len(), "port 2: the odd entries' frames");
    for (n, (g, f)) in got2.iter().zip(&to2).enumerate() {
        assert_eq!(g.len(), f.len(), "frame {n}");
        assert_eq!(&g[..22], &f[..22], "frame {n}: the headers before the TTL unchanged, in order");
        assert_eq!(g[22], f[22] - 1, "frame {n}: TTL decremented");
        assert_eq!(&g[26..], &f[26..], "frame {n}: the rest unchanged");
        ipv4_checksum_is_a_full_recompute(g, 14);
    }

    assert_eq!(run.drops("explicit_drop"), acl, "the ACL's drops");
    assert_eq!(run.drops("table_miss"), miss, "the unknown MACs");
    assert_eq!(run.drops("ttl_expired"), ttl, "TTL 1 on an odd entry");
    assert_eq!(run.named_counter("acl_pass").0, passed);
    assert_eq!(run.named_counter("even").0, even);
    let s = run.stats();
    assert_eq!(s["ports"][0]["workers"]["rx_packets"], FRAMES as u64);
    assert_eq!(s["mbufs_in_use_after"], 0);
}
