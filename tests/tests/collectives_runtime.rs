//! Collectives added and deleted while the appliance runs (`dpuctl collective add|delete`),
//! with contributions sent by the test itself over a veth (net_af_packet on one end, a raw
//! packet socket on the other; needs root for the veth):
//!
//! - a round of collective 1 in progress when collectives 2 and 3 are added in one batch
//!   survives it: its second contribution completes it with the first one's values summed in;
//! - collective 2, added at runtime, is summed: its RESULT frames carry the sums, to every
//!   member, with the collective's DSCP;
//! - collective 2 deleted with a round in progress: the reply says one round was discarded,
//!   and its contributions are then refused as an unknown collective's, answered with NAK
//!   reason 1; the live counters and the final summary follow the collective set;
//! - SIGHUP with a file that changes a collective replaces it: it starts afresh;
//! - a request with one invalid collective changes nothing and says which operation and key;
//! - with two workers, a collective added at runtime is owned by the worker the start's rule
//!   names (index mod workers) and keeps it when collectives before it are deleted: its
//!   contributions, all received by worker 0, are handed to its owner and summed there; a run
//!   of several workers that started without a collective refuses to add one, and answers a
//!   contribution addressed to it with NAK reason 1;
//! - the last collective deleted: its contributions and PROBEs are refused with NAK reason 1
//!   (counted `grad_unknown_collective`, none as `no_egress`), as with others left; added back,
//!   it sums again.

use functional_tests::control::{ctl_json, dpuctl, start, stop};
use functional_tests::grad::{f32s, Coll};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EAL: &str = "\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--log-level\", \"*:error\"";
/// The gradient protocol's UDP port, where results come from.
const GRAD_PORT: u16 = dataplane::wire::gradient::DEFAULT_UDP_PORT;
const ETH_P_ALL: u16 = 0x0003;
const PACKET_OUTGOING: u8 = 4;

fn sh(args: &[&str]) -> bool {
    Command::new(args[0]).args(&args[1..]).status().is_ok_and(|s| s.success())
}

/// A veth pair, removed when dropped (removing one end removes both).
struct Veth {
    a: String,
    b: String,
}

impl Veth {
    /// The pair `rtc<pid><test>a`, `...b` (the tests of this file run side by side).
    fn new(test: char) -> Option<Veth> {
        let tag = std::process::id() % 100_000;
        let v = Veth { a: format!("rtc{tag}{test}a"), b: format!("rtc{tag}{test}b") };
        let _ = Command::new("ip").args(["link", "del", &v.a]).stderr(Stdio::null()).status();
        if !sh(&["ip", "link", "add", &v.a, "type", "veth", "peer", "name", &v.b]) {
            return None;
        }
        for i in [&v.a, &v.b] {
            // No IPv6 (router solicitations, neighbour discovery): only the test's frames.
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6"), "1");
            assert!(sh(&["ip", "link", "set", i, "up"]), "ip link set {i} up");
        }
        Some(v)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.a]).status();
    }
}

/// A raw packet socket on one end of the veth: the workers' side of the wire.
struct Wire {
    fd: i32,
}

impl Wire {
    fn open(iface: &str) -> Wire {
        let name = std::ffi::CString::new(iface).unwrap();
        // SAFETY: plain socket calls on a descriptor this struct owns, with a zeroed
        // sockaddr_ll of the right size and a timeval.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(ETH_P_ALL.to_be()));
            assert!(fd >= 0, "socket(AF_PACKET): {}", std::io::Error::last_os_error());
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = ETH_P_ALL.to_be();
            sll.sll_ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
            let r = libc::bind(
                fd,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
            let tv = libc::timeval { tv_sec: 0, tv_usec: 50_000 };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            Wire { fd }
        }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is valid for its length.
        let n = unsafe { libc::send(self.fd, frame.as_ptr() as *const libc::c_void, frame.len(), 0) };
        assert_eq!(n, frame.len() as isize, "send: {}", std::io::Error::last_os_error());
    }

    /// The gradient frames the appliance sends (UDP from the gradient port), until `want` of
    /// them came or `wait` passed.
    fn recv(&self, want: usize, wait: Duration) -> Vec<Reply> {
        let mut out = Vec::new();
        let t = Instant::now();
        let mut buf = vec![0u8; 16384];
        while out.len() < want && t.elapsed() < wait {
            // SAFETY: `buf` and `sll` are valid for the lengths given.
            let (n, kind) = unsafe {
                let mut sll: libc::sockaddr_ll = std::mem::zeroed();
                let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                let n = libc::recvfrom(
                    self.fd,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                    &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                    &mut len,
                );
                (n, sll.sll_pkttype)
            };
            if n <= 0 || kind == PACKET_OUTGOING {
                continue;
            }
            if let Some(r) = Reply::parse(&buf[..n as usize]) {
                out.push(r);
            }
        }
        out
    }

    /// Drains what is waiting.
    fn clear(&self) {
        self.recv(usize::MAX, Duration::from_millis(100));
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this struct's.
        unsafe { libc::close(self.fd) };
    }
}

/// A gradient frame from the appliance (IPv4, UDP carriage, no VLAN), its header as spec
/// section 2 lays it out.
#[derive(Debug, Clone, PartialEq)]
struct Reply {
    dst_ip: [u8; 4],
    dst_port: u16,
    dscp: u8,
    flags: u8,
    collective: u16,
    reason: u8,
    offset: u32,
    round: u32,
    payload: Vec<u8>,
}

impl Reply {
    fn parse(f: &[u8]) -> Option<Reply> {
        if f.len() < 62 || f[12..14] != [0x08, 0x00] || f[23] != 17 || f[14] != 0x45 {
            return None;
        }
        if u16::from_be_bytes([f[34], f[35]]) != GRAD_PORT {
            return None;
        }
        let g = &f[42..];
        let len = u32::from_be_bytes([g[12], g[13], g[14], g[15]]) as usize;
        Some(Reply {
            dst_ip: [f[30], f[31], f[32], f[33]],
            dst_port: u16::from_be_bytes([f[36], f[37]]),
            dscp: f[15] >> 2,
            flags: g[0] & 0x0f,
            collective: u16::from_be_bytes([g[2], g[3]]),
            reason: g[5],
            offset: u32::from_be_bytes([g[8], g[9], g[10], g[11]]),
            round: u32::from_be_bytes([g[16], g[17], g[18], g[19]]),
            payload: g.get(20..20 + len)?.to_vec(),
        })
    }
}

/// The RESULT frames of one completed round: one per member, each with `sum`.
fn assert_results(got: &[Reply], coll: &Coll, offset: u32, round: u32, sum: &[f32], dscp: u8) {
    let mut dsts: Vec<([u8; 4], u16)> = got.iter().map(|r| (r.dst_ip, r.dst_port)).collect();
    dsts.sort();
    let want: Vec<([u8; 4], u16)> = (0..coll.n).map(|k| ([10, 0, 0, k as u8 + 1], 50000 + k as u16)).collect();
    assert_eq!(dsts, want, "one RESULT per member: {got:?}");
    for r in got {
        assert_eq!((r.flags, r.collective, r.offset, r.round, r.dscp), (0x1, coll.id, offset, round, dscp), "{r:?}");
        assert_eq!(r.payload, f32s(sum), "{r:?}");
    }
}

/// `dir`/dpu.toml: one worker, one port on `veth`'s first end (the appliance at 10.0.0.254),
/// collective `coll`.
fn one_port_config(dir: &std::path::Path, veth: &Veth, coll: &Coll) -> std::path::PathBuf {
    let conf = dir.join("dpu.toml");
    std::fs::write(
        &conf,
        format!(
            "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1\"]\n\
             [[port]]\nname = \"p0\"\nvdev = \"net_af_packet0,iface={}\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\n\
             {}",
            veth.a,
            coll.toml()
        ),
    )
    .unwrap();
    conf
}

#[test]
fn collectives_added_and_deleted_at_runtime_are_summed_then_unknown() {
    let Some(veth) = Veth::new('s') else {
        eprintln!("skipped: cannot make a veth pair (needs root)");
        return;
    };
    let dir = functional_tests::scratch("collectives-runtime");
    let one = Coll { id: 1, ..Default::default() };
    let conf = one_port_config(&dir, &veth, &one);
    let stats = dir.join("stats.json");
    let wire = Wire::open(&veth.b);
    let (dpu, sock) = start(&conf, &stats, 120);

    // The wire is up once a PROBE of collective 1 is answered (STATUS: no history).
    let t = Instant::now();
    loop {
        wire.send(&one.probe(1, 0, |_| {}));
        let got = wire.recv(1, Duration::from_millis(200));
        if got.iter().any(|r| r.flags == 0x9 && r.collective == 1) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no STATUS from the appliance");
    }
    wire.clear();

    // Round 1 of collective 1, slot 0: rank 0's contribution, in progress.
    wire.send(&one.frame(0, 0, 1, &f32s(&[1.0, 2.0, 3.0, 4.0]), |_| {}));
    wire.send(&one.probe(1, 0, |_| {}));
    let st = wire.recv(1, Duration::from_secs(5));
    assert_eq!((st[0].flags, st[0].reason, st[0].round, st[0].payload.clone()), (0x9, 1, 1, vec![0b01]), "{st:?}");

    // A request with one invalid collective changes nothing and says where.
    let two = Coll { id: 2, n: 3, tensor: 12, chunk: 4, extra: "dscp = 26", ..Default::default() };
    let three = Coll { id: 3, n: 2, tensor: 4, chunk: 4, ..Default::default() };
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, format!("{}{}", two.toml(), three.toml().replace("chunk_elements = 4", "chunk_elements = 0")))
        .unwrap();
    let o = dpuctl(&sock, &["collective", "add", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.toml: key `collective[1].chunk_elements`: expected at least 1 element"), "{err}");
    let v = ctl_json(&sock, &["collectives"]);
    assert_eq!(v["collectives"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["version"], 0);

    // Collectives 2 and 3 added in one batch.
    let add = dir.join("add.toml");
    std::fs::write(&add, format!("{}{}", two.toml(), three.toml())).unwrap();
    let o = dpuctl(&sock, &["collective", "add", add.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "applied 2 operation(s): version 1");
    let v = ctl_json(&sock, &["collectives"]);
    let ids: Vec<u64> =
        v["collectives"].as_array().unwrap().iter().map(|c| c["collective_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3]);

    // Collective 1's round survived the switch: rank 1 completes it, rank 0's values summed in.
    wire.send(&one.frame(1, 0, 1, &f32s(&[10.0, 20.0, 30.0, 40.0]), |_| {}));
    let got = wire.recv(2, Duration::from_secs(5));
    assert_results(&got, &one, 0, 1, &[11.0, 22.0, 33.0, 44.0], 0);

    // Collective 2 is summed: three ranks, three chunks, round 7.
    for off in [0u32, 4, 8] {
        for k in 0..3 {
            let v: Vec<f32> = (0..4).map(|i| (k * 100 + off as usize + i) as f32 + 0.25).collect();
            wire.send(&two.frame(k, off, 7, &f32s(&v), |_| {}));
        }
        let got = wire.recv(3, Duration::from_secs(5));
        let sum: Vec<f32> = (0..4).map(|i| (0..3).map(|k| (k * 100 + off as usize + i) as f32 + 0.25).sum()).collect();
        assert_results(&got, &two, off, 7, &sum, 26);
    }
    // The live board follows the new set: the straggler view has collective 2's ranks, each
    // with its three contributions (the board is published every 100 ms).
    let strag = |sock: &Path| -> Vec<(u64, Vec<u64>)> {
        let v = ctl_json(sock, &["stragglers"]);
        v["stragglers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let n = c["ranks"].as_array().unwrap().iter().map(|r| r["contributions"].as_u64().unwrap()).collect();
                (c["collective"].as_u64().unwrap(), n)
            })
            .collect()
    };
    let t = Instant::now();
    while strag(&sock) != [(1, vec![1, 1]), (2, vec![3, 3, 3]), (3, vec![0, 0])] {
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", strag(&sock));
        std::thread::sleep(Duration::from_millis(50));
    }
    // A round of collective 2 in progress when it is deleted.
    wire.send(&two.frame(0, 0, 8, &f32s(&[1.0; 4]), |_| {}));
    wire.send(&two.probe(1, 0, |_| {}));
    let st = wire.recv(1, Duration::from_secs(5));
    assert_eq!((st[0].flags, st[0].reason, st[0].round), (0x9, 1, 8), "{st:?}");
    let o = dpuctl(&sock, &["collective", "delete", "2"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("collective 2 deleted: 1 round(s) in progress discarded; it had completed 3 round(s), folded 10 contribution(s)"),
        "{out}"
    );
    // Its contributions are now an unknown collective's: NAK reason 1, to the sender.
    wire.send(&two.frame(1, 0, 8, &f32s(&[1.0; 4]), |_| {}));
    let got = wire.recv(1, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "{got:?}");
    let n = &got[0];
    assert_eq!((n.flags, n.reason, n.collective, n.round), (0x4, 1, 2, 8), "{n:?}");
    assert_eq!((n.dst_ip, n.dst_port, n.payload.len()), ([10, 0, 0, 2], 50001, 0));
    // Collectives 1 and 3 still sum.
    for k in 0..2 {
        wire.send(&three.frame(k, 0, 1, &f32s(&[k as f32 + 0.5; 4]), |_| {}));
    }
    let got = wire.recv(2, Duration::from_secs(5));
    assert_results(&got, &three, 0, 1, &[2.0; 4], 0);
    let v = ctl_json(&sock, &["collectives"]);
    let ids: Vec<u64> =
        v["collectives"].as_array().unwrap().iter().map(|c| c["collective_id"].as_u64().unwrap()).collect();
    assert_eq!((ids, v["version"].as_u64()), (vec![1, 3], Some(2)));
    let t = Instant::now();
    while strag(&sock) != [(1, vec![1, 1]), (3, vec![1, 1])] {
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", strag(&sock));
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = ctl_json(&sock, &["stats"]);
    assert_eq!(s["stats"]["dropped_packets/grad_unknown_collective"], 1, "{}", s["stats"]);

    // SIGHUP with a file of collectives 1 (unchanged) and 3 with DSCP 12: 3 is replaced and
    // starts afresh. Kept, its round 1 would answer a round-1 contribution with the kept
    // result (rule 3); fresh, round 1 is a new round, whose result carries DSCP 12.
    let three_b = Coll { extra: "dscp = 12", ..three.clone() };
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{text}{}", three_b.toml())).unwrap();
    let _ = Command::new("kill").arg("-HUP").arg(dpu.id().to_string()).status();
    let t = Instant::now();
    while ctl_json(&sock, &["collectives"])["version"] != 3 {
        assert!(t.elapsed() < Duration::from_secs(5), "no reload");
        std::thread::sleep(Duration::from_millis(50));
    }
    for k in 0..2 {
        wire.send(&three.frame(k, 0, 1, &f32s(&[k as f32 + 0.5; 4]), |_| {}));
    }
    let got = wire.recv(2, Duration::from_secs(5));
    assert_results(&got, &three, 0, 1, &[2.0; 4], 12);

    // Collective 1 deleted and added back identical in one batch: a new collective. Its round
    // in progress is discarded (reported), its kept result of round 1 is gone, and a later
    // round sums only what arrives after the change.
    wire.send(&one.frame(0, 0, 2, &f32s(&[1000.0; 4]), |_| {}));
    wire.send(&one.probe(1, 0, |_| {}));
    let st = wire.recv(1, Duration::from_secs(5));
    assert_eq!((st[0].flags, st[0].reason, st[0].round), (0x9, 1, 2), "{st:?}");
    let batch = delete_then_add(&dir.join("again.json"), 1, &one);
    let o = dpuctl(&sock, &["batch", batch.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("version 4") && out.contains("collective 1 replaced: 1 round(s) in progress discarded"),
        "{out}"
    );
    // No history: a PROBE is answered state 0; a resend of round 1 gets no kept result.
    wire.send(&one.probe(1, 0, |_| {}));
    let st = wire.recv(1, Duration::from_secs(5));
    assert_eq!((st[0].flags, st[0].reason), (0x9, 0), "{st:?}");
    for k in 0..2 {
        wire.send(&one.frame(k, 0, 2, &f32s(&[k as f32 + 1.0; 4]), |_| {}));
    }
    let got = wire.recv(2, Duration::from_secs(5));
    assert_results(&got, &one, 0, 2, &[3.0; 4], 0);

    let text = stop(dpu);
    assert!(text.contains("dpu: collective 2 removed: 1 round(s) in progress discarded"), "{text}");
    assert!(text.contains("dpu: collective 3 replaced: 0 round(s) in progress discarded"), "{text}");
    assert!(text.contains("dpu.toml: reloaded (version 3)"), "{text}");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let colls: Vec<(u64, u64)> = j["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["collective"].as_u64().unwrap(), c["completed"].as_u64().unwrap()))
        .collect();
    assert_eq!(colls, [(3, 1), (1, 1)], "the final summary has the collectives running at the end (3 and 1 anew)");
    // The aggregator's totals keep what every version did: 2 + 10 + 2 + 2 + 1 + 2
    // contributions folded, 1 + 3 + 1 + 1 + 1 rounds completed.
    assert_eq!((j["aggregation"]["folded"].as_u64(), j["aggregation"]["completed"].as_u64()), (Some(19), Some(7)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The wire is up once a PROBE of `coll` is answered (STATUS).
fn wait_for_status(wire: &Wire, coll: &Coll) {
    let t = Instant::now();
    loop {
        wire.send(&coll.probe(0, 0, |_| {}));
        let got = wire.recv(1, Duration::from_millis(200));
        if got.iter().any(|r| r.flags == 0x9 && r.collective == coll.id) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no STATUS from the appliance");
    }
    wire.clear();
}

/// Sends rank 0's contribution of round 1 to `coll`'s chunk 0 until a NAK comes back (the
/// wire may not be up yet; one NAK per source per 100 ms): that NAK.
fn wait_for_nak(wire: &Wire, coll: &Coll) -> Reply {
    let t = Instant::now();
    loop {
        wire.send(&coll.frame(0, 0, 1, &f32s(&[1.0; 4]), |_| {}));
        if let Some(n) = wire.recv(1, Duration::from_millis(200)).into_iter().find(|r| r.flags == 0x4) {
            wire.clear();
            return n;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no NAK from the appliance");
    }
}

/// A round of `coll` at `offset`: every rank contributes `rank + 1.0 + i` per lane i; its
/// RESULTs must carry the sums.
fn round(wire: &Wire, coll: &Coll, offset: u32, r: u32) {
    for k in 0..coll.n {
        let v: Vec<f32> = (0..4).map(|i| k as f32 + 1.0 + i as f32).collect();
        wire.send(&coll.frame(k, offset, r, &f32s(&v), |_| {}));
    }
    let got = wire.recv(coll.n, Duration::from_secs(5));
    let sum: Vec<f32> = (0..4).map(|i| (0..coll.n).map(|k| k as f32 + 1.0 + i as f32).sum()).collect();
    assert_results(&got, coll, offset, r, &sum, 0);
}

fn ids_and_owners(sock: &Path) -> (Vec<u64>, Vec<u64>) {
    let v = ctl_json(sock, &["collectives"]);
    let ids = v["collectives"].as_array().unwrap().iter().map(|c| c["collective_id"].as_u64().unwrap()).collect();
    let owners = v["owners"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()).collect();
    (ids, owners)
}

#[test]
fn with_two_workers_a_collective_added_at_runtime_goes_to_its_owner_and_stays_there() {
    let Some(veth) = Veth::new('w') else {
        eprintln!("skipped: cannot make a veth pair (needs root)");
        return;
    };
    let dir = functional_tests::scratch("collectives-runtime-workers");
    let one = Coll { id: 1, ..Default::default() };
    // Worker 0 (lcore 1) polls the veth (both its queues: one tx queue per worker makes two
    // queue pairs); worker 1 (lcore 2) polls a port that receives nothing
    // (an empty capture): it sees only what is handed to it.
    let empty = dir.join("empty.pcap");
    functional_tests::write_pcap(&empty, &[]);
    let port = format!(
        "[[port]]\nname = \"p0\"\nvdev = \"net_af_packet0,iface={},qpairs=2\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\n\
         [[port]]\nname = \"idle\"\nvdev = \"net_pcap1,rx_pcap={},tx_pcap={},tx_pcap={}\"\n\
         [[lcore]]\nid = 1\nrx = [{{ port = 0, queue = 0 }}, {{ port = 0, queue = 1 }}]\n\
         [[lcore]]\nid = 2\nrx = [{{ port = 1, queue = 0 }}]\n",
        veth.a,
        empty.display(),
        dir.join("idle0.pcap").display(),
        dir.join("idle1.pcap").display()
    );
    let eal = format!("[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1,2@1\"]\n");
    let conf = dir.join("dpu.toml");
    std::fs::write(&conf, format!("{eal}{port}{}", one.toml())).unwrap();
    let stats = dir.join("stats.json");
    let wire = Wire::open(&veth.b);
    let (dpu, sock) = start(&conf, &stats, 120);
    wait_for_status(&wire, &one);
    assert_eq!(ids_and_owners(&sock), (vec![1], vec![0]));

    // Collective 2 at index 1: worker 1's.
    let two = Coll { id: 2, ..Default::default() };
    let f = dir.join("two.toml");
    std::fs::write(&f, two.toml()).unwrap();
    let o = dpuctl(&sock, &["collective", "add", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ids_and_owners(&sock), (vec![1, 2], vec![0, 1]));
    let v = ctl_json(&sock, &["collectives"]);
    assert_eq!(v["sharded"], serde_json::json!([false, false]), "shard_collectives is off by default");
    round(&wire, &one, 0, 1);
    round(&wire, &two, 4, 1);
    // Collective 1 deleted: 2 moves to index 0 but stays on worker 1; 3, added at index 1, is
    // worker 1's too.
    let three = Coll { id: 3, ..Default::default() };
    let batch = delete_then_add(&dir.join("batch.json"), 1, &three);
    let o = dpuctl(&sock, &["batch", batch.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ids_and_owners(&sock), (vec![2, 3], vec![1, 1]));
    // 2's kept result answers a late contribution (rule 3): its state stayed on worker 1.
    wire.send(&two.frame(0, 4, 1, &f32s(&[1.0, 2.0, 3.0, 4.0]), |_| {}));
    let got = wire.recv(1, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].flags, got[0].round, got[0].payload.clone()), (0x1, 1, f32s(&[3.0, 5.0, 7.0, 9.0])));
    round(&wire, &two, 4, 2);
    round(&wire, &three, 0, 1);
    let text = stop(dpu);
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // Every contribution of 2 and 3 (and the late one) was handed from worker 0 to worker 1.
    assert_eq!(j["aggregation"]["handed_off"].as_u64(), Some(2 + 1 + 2 + 2), "{text}");
    assert_eq!(j["aggregation"]["completed"].as_u64(), Some(4), "{text}");

    // Two workers that started without a collective have no hand-off rings: adding one is
    // refused, and nothing changes.
    let conf = dir.join("none.toml");
    std::fs::write(&conf, format!("{eal}{port}")).unwrap();
    let (dpu, sock) = start(&conf, &stats, 120);
    let o = dpuctl(&sock, &["collective", "add", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("started without a collective") && err.contains("nothing changed"), "{err}");
    assert_eq!(ids_and_owners(&sock), (vec![], vec![]));
    // A contribution addressed to it is the appliance's all the same: refused as an unknown
    // collective's, NAK reason 1 to its sender (spec section 4 rule 5), not left to the tables.
    let n = wait_for_nak(&wire, &two);
    assert_eq!((n.reason, n.collective, n.round, n.dst_ip, n.dst_port), (1, 2, 1, [10, 0, 0, 1], 50000), "{n:?}");
    stop(dpu);
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // (`no_egress` is not judged: the kernel may send a frame of its own on the veth.)
    assert!(j["drops"]["grad_unknown_collective"].as_u64() >= Some(1), "{}", j["drops"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The last collective deleted: the appliance still owns what is addressed to it, and refuses
/// its collective's packets with NAK reason 1 exactly as when other collectives remain (README,
/// runtime changes; spec section 4 rule 5, section 5); added back, the collective sums again.
#[test]
fn deleting_the_last_collective_leaves_its_packets_refused_with_nak_1() {
    let Some(veth) = Veth::new('l') else {
        eprintln!("skipped: cannot make a veth pair (needs root)");
        return;
    };
    let dir = functional_tests::scratch("collectives-runtime-last");
    let one = Coll { id: 1, ..Default::default() };
    let conf = one_port_config(&dir, &veth, &one);
    let stats = dir.join("stats.json");
    let wire = Wire::open(&veth.b);
    let (dpu, sock) = start(&conf, &stats, 120);
    wait_for_status(&wire, &one);
    round(&wire, &one, 0, 1);

    let o = dpuctl(&sock, &["collective", "delete", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("collective 1 deleted"), "{o:?}");
    assert_eq!(ids_and_owners(&sock), (vec![], vec![]));
    // Rank 1's contribution and rank 0's PROBE: each answered with NAK reason 1, to its sender.
    wire.send(&one.frame(1, 4, 2, &f32s(&[2.0; 4]), |_| {}));
    wire.send(&one.probe(0, 0, |_| {}));
    let mut got = wire.recv(2, Duration::from_secs(5));
    got.sort_by_key(|r| r.dst_port);
    let naks: Vec<_> = got.iter().map(|r| (r.flags, r.reason, r.collective, r.round, r.dst_ip, r.dst_port)).collect();
    assert_eq!(naks, [(0x4, 1, 1, 0, [10, 0, 0, 1], 50000), (0x4, 1, 1, 2, [10, 0, 0, 2], 50001)], "{got:?}");
    assert!(got.iter().all(|r| r.payload.is_empty()), "{got:?}");
    // Counted so (the workers publish their counters every 100 ms). (`no_egress` is not judged:
    // the kernel may send a frame of its own on the veth, which no table takes.)
    let t = Instant::now();
    let drops = || ctl_json(&sock, &["stats"])["stats"]["dropped_packets/grad_unknown_collective"].clone();
    while drops() != 2 {
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", drops());
        std::thread::sleep(Duration::from_millis(50));
    }

    // Added back: a new collective, which sums from its first contribution.
    let f = dir.join("one.toml");
    std::fs::write(&f, one.toml()).unwrap();
    let o = dpuctl(&sock, &["collective", "add", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    round(&wire, &one, 0, 1);
    stop(dpu);
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(j["drops"]["grad_unknown_collective"].as_u64(), Some(2));
    assert_eq!(j["aggregation"]["completed"].as_u64(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes to `path` a batch that deletes collective `id`, then adds `coll`; returns `path`.
fn delete_then_add(path: &Path, id: u16, coll: &Coll) -> PathBuf {
    let ops = format!(
        "[{{\"op\":\"delete_collective\",\"id\":{id}}},{{\"op\":\"add_collective\",\"collective\":{}}}]",
        collective_json(coll)
    );
    std::fs::write(path, ops).unwrap();
    path.to_path_buf()
}

/// `coll`'s `[[collective]]` table as a request's JSON object.
fn collective_json(coll: &Coll) -> String {
    let t: toml::Table = toml::from_str(&coll.toml()).unwrap();
    serde_json::to_string(&t["collective"][0]).unwrap()
}
