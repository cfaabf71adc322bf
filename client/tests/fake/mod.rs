//! An in-process fake appliance on 127.0.0.1: just enough of spec section 4 for client tests.
//! Per (offset) slot it sums the contributions of a round, sends the RESULT to every member when
//! all ranks arrived (rule 2), answers a re-sent contribution of the completed round with the
//! kept result (rule 3), NAKs other rounds with reason 7 and the expected round (rule 4), at most
//! one NAK per source per 100 ms (section 5), and answers a PROBE with the slot's STATUS (section
//! 7). Faults to inject are in [`Faults`].

#![allow(dead_code)]

use dataplane::wire::gradient::{Dtype, Flags, GradientHeader, GradientRepr, HEADER_LEN, RANK_NONE};
use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to get wrong on purpose.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Offsets (elements) whose first contribution (from any rank) is dropped.
    pub drop_first_contribution: Vec<u32>,
    /// Offsets whose first RESULT emission (to every member) is dropped.
    pub drop_first_result: Vec<u32>,
    /// NAK every contribution with this reason.
    pub nak_all: Option<u8>,
    /// Every slot starts with this round completed (the next expected round is one more).
    pub history: Option<u32>,
    /// Never answer a PROBE (an appliance older than revision 1.1, or probes lost).
    pub ignore_probes: bool,
    /// Send each member's results in runs (up to 4, a shorter one ending a run) as one
    /// `UDP_SEGMENT` message, as a receiving device's GRO hands a client several results at
    /// once: over loopback a socket with `UDP_GRO` gets the run whole, one without it gets the
    /// datagrams. A run waits for more results until the fake's read times out.
    pub coalesce_results: bool,
    /// Answer the first contribution at another offset also with a RESULT for this offset
    /// (elements) at that contribution's round, zeros of its length, before anyone sent it: what
    /// a restarted member sees when its peers' round of a chunk it has not sent yet ends.
    pub early_result_for: Option<u32>,
    /// Send every result first with flags RESULT | NAK and reason 3 (neither a RESULT nor a NAK
    /// by the spec), then as it is.
    pub mixed_flags_first: bool,
}

/// A contribution the fake received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub rank: u16,
    pub offset: u32,
    pub round: u32,
    pub flags: u8,
    pub data_length: u32,
}

#[derive(Default)]
struct Slot {
    /// The round in progress and the contributions per rank.
    cur: Option<(u32, Vec<Option<Vec<u8>>>)>,
    /// The last completed round and its result payload.
    done: Option<(u32, Vec<u8>)>,
}

pub struct Fake {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    handle: Option<JoinHandle<()>>,
}

impl Fake {
    /// Starts a fake for a collective of `workers` members.
    pub fn start(collective_id: u16, workers: usize, dtype: Dtype, faults: Faults) -> Fake {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s2, seen2) = (stop.clone(), seen.clone());
        let handle = std::thread::spawn(move || serve(sock, collective_id, workers, dtype, faults, &s2, &seen2));
        Fake { addr, stop, seen, handle: Some(handle) }
    }

    /// The contributions received so far.
    /// The contributions received, in order (PROBEs left out).
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|s| s.flags & Flags::PROBE == 0).copied().collect()
    }

    /// The PROBEs received, in order.
    pub fn probes(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|s| s.flags & Flags::PROBE != 0).copied().collect()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve(
    sock: UdpSocket,
    collective_id: u16,
    workers: usize,
    dtype: Dtype,
    mut faults: Faults,
    stop: &AtomicBool,
    seen: &Mutex<Vec<Seen>>,
) {
    let mut slots: HashMap<u32, Slot> = HashMap::new();
    let mut members: HashMap<u16, SocketAddr> = HashMap::new();
    let mut last_nak: HashMap<SocketAddr, Instant> = HashMap::new();
    let mut dropped_contrib: HashSet<u32> = HashSet::new();
    let mut buf = vec![0u8; 65536];
    // Per member: the results of a run not yet sent (back to back) and the size of each.
    let mut runs: HashMap<u16, (Vec<u8>, usize, usize)> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok((len, src)) = sock.recv_from(&mut buf) else {
            for (rank, run) in runs.iter_mut() {
                send_run(&sock, members[rank], run);
            }
            continue;
        };
        let Ok(h) = GradientHeader::new_checked(&buf[..len]) else { continue };
        let r = GradientRepr::parse(&h);
        let payload = h.rest()[..r.data_length as usize].to_vec();
        seen.lock().unwrap().push(Seen {
            rank: r.worker_rank,
            offset: r.tensor_offset,
            round: r.round,
            flags: r.flags,
            data_length: r.data_length,
        });
        members.insert(r.worker_rank, src);
        let mut nak = |reason: u8, round: u32| {
            let now = Instant::now();
            if last_nak.get(&src).is_some_and(|t| now - *t < Duration::from_millis(100)) {
                return;
            }
            last_nak.insert(src, now);
            let n = GradientRepr { flags: Flags::NAK, worker_rank: RANK_NONE, reason, data_length: 0, round, ..r };
            let mut out = [0u8; HEADER_LEN];
            n.emit(&mut out).unwrap();
            sock.send_to(&out, src).unwrap();
        };
        if let Some(reason) = faults.nak_all.or((r.collective_id != collective_id).then_some(1)) {
            nak(reason, r.round);
            continue;
        }
        let probe = r.flags & Flags::PROBE != 0;
        if let Some(i) = faults.drop_first_contribution.iter().position(|o| *o == r.tensor_offset && !probe) {
            if dropped_contrib.insert(r.tensor_offset) {
                faults.drop_first_contribution.remove(i);
                continue;
            }
        }
        let history = faults.history;
        let new_slot = move || Slot { cur: None, done: history.map(|h| (h, Vec::new())) };
        if probe {
            // Section 7: ceil(workers / 8) bytes; the STATUS carries the slot's state.
            if r.data_length as usize != workers.div_ceil(8) {
                nak(6, r.round);
                continue;
            }
            if faults.ignore_probes {
                continue;
            }
            let slot = slots.entry(r.tensor_offset).or_insert_with(new_slot);
            let mut bitmap = vec![0u8; workers.div_ceil(8)];
            let (state, round) = match (&slot.cur, &slot.done) {
                (Some((c, contribs)), _) => {
                    for (k, x) in contribs.iter().enumerate() {
                        if x.is_some() {
                            bitmap[k / 8] |= 1 << (k % 8);
                        }
                    }
                    (if contribs[r.worker_rank as usize].is_some() { 2 } else { 1 }, *c)
                }
                (None, Some((d, _))) => (3, d.wrapping_add(1)),
                (None, None) => (0, 0),
            };
            let st =
                GradientRepr { flags: Flags::RESULT | Flags::PROBE, worker_rank: RANK_NONE, reason: state, round, ..r };
            let mut out = vec![0u8; HEADER_LEN + bitmap.len()];
            st.emit(&mut out).unwrap();
            out[HEADER_LEN..].copy_from_slice(&bitmap);
            sock.send_to(&out, src).unwrap();
            continue;
        }
        if let Some(o) = faults.early_result_for.filter(|o| *o != r.tensor_offset) {
            faults.early_result_for = None;
            let early = GradientRepr { flags: Flags::RESULT, worker_rank: RANK_NONE, tensor_offset: o, ..r };
            let mut out = vec![0u8; HEADER_LEN + payload.len()];
            early.emit(&mut out).unwrap();
            sock.send_to(&out, src).unwrap();
        }
        let slot = slots.entry(r.tensor_offset).or_insert_with(new_slot);
        let result = |payload: &[u8], round: u32| {
            let res = GradientRepr { flags: Flags::RESULT, worker_rank: RANK_NONE, round, ..r };
            let mut out = vec![0u8; HEADER_LEN + payload.len()];
            res.emit(&mut out).unwrap();
            out[HEADER_LEN..].copy_from_slice(payload);
            out
        };
        // Rule 3: the completed round is answered with the kept result, to this rank only.
        if let Some((d, kept)) = &slot.done {
            if *d == r.round {
                sock.send_to(&result(kept, *d), src).unwrap();
                continue;
            }
        }
        match &mut slot.cur {
            Some((c, _)) if *c == r.round => {}
            Some((c, _)) => {
                let c = *c;
                nak(7, c);
                continue;
            }
            None => {
                let expected = slot.done.as_ref().map(|(d, _)| d.wrapping_add(1));
                if expected.is_some_and(|e| e != r.round) {
                    nak(7, expected.unwrap());
                    continue;
                }
                slot.cur = Some((r.round, vec![None; workers]));
            }
        }
        let (round, contribs) = slot.cur.as_mut().unwrap();
        let round = *round;
        contribs[r.worker_rank as usize].get_or_insert(payload);
        if contribs.iter().all(Option::is_some) {
            let sum = reduce(dtype, contribs);
            slot.cur = None;
            let out = result(&sum, round);
            slot.done = Some((round, sum));
            if let Some(i) = faults.drop_first_result.iter().position(|o| *o == r.tensor_offset) {
                faults.drop_first_result.remove(i);
                continue;
            }
            for rank in 0..workers as u16 {
                if faults.mixed_flags_first {
                    let mut odd = out.clone();
                    odd[0] |= Flags::NAK;
                    odd[5] = 3;
                    sock.send_to(&odd, members[&rank]).unwrap();
                }
                if !faults.coalesce_results {
                    sock.send_to(&out, members[&rank]).unwrap();
                    continue;
                }
                let run = runs.entry(rank).or_default();
                if run.2 > 0 && out.len() > run.1 {
                    send_run(&sock, members[&rank], run);
                }
                run.0.extend_from_slice(&out);
                run.1 = run.1.max(out.len());
                run.2 += 1;
                if run.2 == 4 || out.len() < run.1 {
                    send_run(&sock, members[&rank], run);
                }
            }
        }
    }
}

/// Sends a member's run of results (`(bytes, segment size, count)`) as one `UDP_SEGMENT`
/// message to `to` (IPv4), and empties it.
fn send_run(sock: &UdpSocket, to: SocketAddr, run: &mut (Vec<u8>, usize, usize)) {
    use std::os::fd::AsRawFd;
    if run.2 == 0 {
        return;
    }
    let SocketAddr::V4(v4) = to else { panic!("the fake serves IPv4 members") };
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
        sin_zero: [0; 8],
    };
    let mut iov = libc::iovec { iov_base: run.0.as_mut_ptr().cast(), iov_len: run.0.len() };
    let mut ctrl = [0u64; 4];
    // SAFETY: every pointer in the header points at a live local (`addr`, `iov` over `run.0`,
    // `ctrl`, 32 bytes, 8-byte aligned: room for one cmsghdr and a u16) for the call.
    let n = unsafe {
        let mut h: libc::msghdr = std::mem::zeroed();
        h.msg_name = (&addr as *const libc::sockaddr_in).cast_mut().cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        if run.2 > 1 {
            h.msg_control = ctrl.as_mut_ptr().cast();
            h.msg_controllen = libc::CMSG_SPACE(2) as _;
            let cm = libc::CMSG_FIRSTHDR(&h);
            (*cm).cmsg_level = libc::SOL_UDP;
            (*cm).cmsg_type = 103; // UDP_SEGMENT
            (*cm).cmsg_len = libc::CMSG_LEN(2) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), run.1 as u16);
        }
        libc::sendmsg(sock.as_raw_fd(), &h, 0)
    };
    assert_eq!(n, run.0.len() as isize, "sendmsg: {}", std::io::Error::last_os_error());
    run.0.clear();
    run.1 = 0;
    run.2 = 0;
}

/// Sums the contributions in rank order (spec section 4 rule 6: halves accumulate in f32).
fn reduce(dtype: Dtype, contribs: &[Option<Vec<u8>>]) -> Vec<u8> {
    let parts: Vec<&[u8]> = contribs.iter().map(|c| c.as_deref().unwrap()).collect();
    let size = dtype.size();
    let lanes = parts[0].len() / size;
    let mut out = Vec::with_capacity(parts[0].len());
    for l in 0..lanes {
        let lane = |p: &[u8]| -> [u8; 4] {
            let mut a = [0u8; 4];
            a[..size].copy_from_slice(&p[l * size..(l + 1) * size]);
            a
        };
        match dtype {
            Dtype::F32 => {
                let s = parts.iter().map(|p| f32::from_le_bytes(lane(p))).reduce(|a, b| a + b).unwrap();
                out.extend_from_slice(&s.to_le_bytes());
            }
            Dtype::I32 => {
                let s = parts.iter().map(|p| i32::from_le_bytes(lane(p))).fold(0i32, i32::wrapping_add);
                out.extend_from_slice(&s.to_le_bytes());
            }
            Dtype::Bf16 => {
                let s = parts
                    .iter()
                    .map(|p| half::bf16::from_le_bytes([lane(p)[0], lane(p)[1]]).to_f32())
                    .reduce(|a, b| a + b)
                    .unwrap();
                out.extend_from_slice(&half::bf16::from_f32(s).to_le_bytes());
            }
            Dtype::F16 => {
                let s = parts
                    .iter()
                    .map(|p| half::f16::from_le_bytes([lane(p)[0], lane(p)[1]]).to_f32())
                    .reduce(|a, b| a + b)
                    .unwrap();
                out.extend_from_slice(&half::f16::from_f32(s).to_le_bytes());
            }
        }
    }
    out
}

/// An appliance configuration file for a collective whose members are on 127.0.0.1 (IPv4) or
/// ::1 (IPv6), ranks in order with the given UDP ports (QPs 16, 17, ... when `extra` sets
/// `carriage = "rocev2"`), and the appliance at `gradient_port` (the
/// key is left out for `None`: its default applies). Written to a fresh file named after `tag`.
pub fn write_config(
    tag: &str,
    gradient_port: Option<u16>,
    extra: &str,
    member_ports: &[u16],
    v6: bool,
) -> std::path::PathBuf {
    let mut t = String::from("[[port]]\nvdev = \"net_null0\"\nipv4 = \"127.0.0.1\"\nipv6 = \"::1\"\n\n");
    if let Some(p) = gradient_port {
        t += &format!("[dataplane]\ngradient_udp_port = {p}\n\n");
    }
    t += "[[collective]]\ncollective_id = 9\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 1000\nchunk_elements = 64\n";
    t += extra;
    for (rank, port) in member_ports.iter().enumerate() {
        let ip = if v6 { "::1" } else { "127.0.0.1" };
        t += &format!("\n[[collective.member]]\nrank = {rank}\nip = \"{ip}\"\nmac = \"02:00:00:00:01:0{rank}\"\n");
        // Each carriage's own keys (the other's would be unused).
        t += &if extra.contains("carriage = \"rocev2\"") {
            format!("qpn = {}\nqkey = 7\n", rank + 16)
        } else {
            format!("udp_port = {port}\n")
        };
    }
    let dir = std::env::temp_dir().join(format!("gradclient-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{tag}.toml"));
    std::fs::write(&path, t).unwrap();
    path
}

/// A UDP port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
