//! The allreduce engine: a window of chunks in flight over one connected UDP socket, results
//! written in place, retransmission with exponential backoff, NAK handling and rejoin (spec
//! sections 2, 4 rules 3-4, 5), and PROBEs (section 7): every chunk's round asked of the
//! appliance before the first call, and the slots of a stalled call asked whom they wait for.

use crate::element::{Element, Lanes, Raw, RawRange, Typed};
use crate::mmsg::{enable_gro, gso_supported, Batch};
use crate::{Collective, Endpoint, Error, Options};
use dataplane::wire::gradient::{
    probe_len, Flags, GradientHeader, GradientRepr, NakReason, SlotState, HEADER_LEN, RANK_NONE, VERSION,
};
use serde::Serialize;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// NAK reason 7: stale or premature round; the NAK's round field is the expected round.
const NAK_STALE_ROUND: u8 = NakReason::STALE_ROUND;
/// A stalled call probes its chunks in flight every `deadline / STALL_PROBES_PER_DEADLINE`
/// without progress (so three times before it fails: a lost probe or STATUS does not lose the
/// diagnosis).
const STALL_PROBES_PER_DEADLINE: u32 = 4;
/// `inflight` position of a chunk that is not in flight.
const NOT_IN_FLIGHT: u32 = u32::MAX;
/// Granularity of the socket's read timeout: a wait is rounded up to it, and the timeout is not
/// reset for a change smaller than it.
const TIMEOUT_STEP: Duration = Duration::from_millis(1);
/// Datagrams per sendmmsg or recvmmsg call, at most (fewer with a smaller window).
const BATCH: usize = 64;

/// Counters of a [`Client`], cumulative over its calls except `seconds`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClientStats {
    /// Chunks reduced: the tensor's chunk count times the calls made.
    pub chunks: u64,
    /// Contribution datagrams sent (first sends, resends after a rejoin, retransmits).
    pub sent: u64,
    /// Contributions resent because their retransmit timer expired.
    pub retransmits: u64,
    /// RESULT packets written into the tensor.
    pub results: u64,
    /// RESULT packets dropped as duplicates or for another round than the chunk's.
    pub stale_results: u64,
    /// NAK packets received (any reason).
    pub naks: u64,
    /// Rejoins: realignments of every chunk's round on a NAK 7.
    pub rejoins: u64,
    /// PROBE packets sent (spec section 7): before the first call, and while a call stalled.
    pub probes: u64,
    /// STATUS packets received in answer.
    pub statuses: u64,
    /// Datagrams from the appliance that were neither a usable RESULT nor a NAK of this
    /// collective (truncated, another collective, inconsistent lengths).
    pub ignored: u64,
    /// System calls that sent datagrams (contributions and PROBEs): fewer than `sent + probes`
    /// when several went in one batch (sendmmsg).
    pub send_calls: u64,
    /// Messages that carried several datagrams with UDP segmentation offload
    /// ([`Options::gso`]); 0 when it is off or the kernel refused it.
    pub gso_sends: u64,
    /// Messages received that carried several results coalesced by the receiving device's GRO
    /// ([`Options::gro`]); 0 when it is off, the kernel refused it or nothing coalesced.
    pub gro_recvs: u64,
    /// System calls that received datagrams or waited for one (recvmmsg, recv).
    pub recv_calls: u64,
    /// Duration of the last call (seconds).
    pub seconds: f64,
}

/// Per-chunk state of one call.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    /// Its result arrived in this call.
    done: bool,
    /// Sent at least once at its current round (later sends carry RETRANSMIT).
    sent: bool,
    /// Position in `inflight`, or [`NOT_IN_FLIGHT`].
    pos: u32,
    /// Resent at its current round (its round trip is then no sample: Karn's rule).
    resent: bool,
    /// Current retransmit timeout.
    rto: Duration,
    /// When it was first sent at its current round.
    sent_at: Instant,
    /// When its timer fires.
    due: Instant,
}

impl Chunk {
    /// A send at `now`: the first at the chunk's current round starts its round trip, a later
    /// one marks it resent (no sample, Karn's rule); arms the timer and returns when it fires.
    fn arm(&mut self, now: Instant) -> Instant {
        if self.sent {
            self.resent = true;
        } else {
            self.sent_at = now;
        }
        self.sent = true;
        self.due = now + self.rto;
        self.due
    }
}

/// The retransmit timeout from measured round trips, in seconds: 4 x the smallest round trip of
/// the current or the previous call (samples only from chunks answered without a resend, Karn's
/// rule). Not RFC 6298's smoothed mean: in a collective a chunk's round trip also holds the wait
/// for the slowest peer, which under loss is that peer's own retransmit timeout, so a mean
/// would feed each worker's timeouts into the others' and grow call after call. The smallest
/// sample is a chunk whose peers were all on time: the network and the appliance alone.
#[derive(Debug, Clone, Copy)]
struct RttEstimator {
    /// Smallest sample of the current call (`INFINITY`: none yet).
    best: f64,
    /// Smallest sample of the previous call that had one.
    last: f64,
}

impl Default for RttEstimator {
    fn default() -> Self {
        RttEstimator { best: f64::INFINITY, last: f64::INFINITY }
    }
}

impl RttEstimator {
    fn sample(&mut self, rtt: f64) {
        self.best = self.best.min(rtt);
    }

    /// At the end of a call: its smallest sample becomes the previous call's.
    fn end_call(&mut self) {
        if self.best.is_finite() {
            self.last = self.best;
            self.best = f64::INFINITY;
        }
    }

    /// The retransmit timeout for a fresh send: `initial` before any sample.
    fn rto(&self, opts: &Options) -> Duration {
        let rtt = self.best.min(self.last);
        if !rtt.is_finite() {
            return opts.initial_rto;
        }
        Duration::from_secs_f64(4.0 * rtt).clamp(opts.min_rto, opts.max_rto)
    }
}

/// A worker's side of one collective: allreduce calls over UDP through the appliance.
///
/// Each call is one round per chunk: the client keeps a round per chunk and advances every
/// chunk of a call by one after it, whether it succeeded or failed, so successive calls on one
/// client are successive rounds and a round whose result the appliance may keep is never
/// reused for other data. The first rounds come from the appliance ([`Client::sync`], before the first call),
/// or are [`Options::start_round`] when [`Options::probe`] is off.
#[derive(Debug)]
pub struct Client {
    coll: Collective,
    ep: Endpoint,
    opts: Options,
    sock: UdpSocket,
    /// Per chunk: the round of its next contribution.
    rounds: Vec<u32>,
    chunks: Vec<Chunk>,
    /// Chunks in flight (indices), at most `window`.
    inflight: Vec<u32>,
    /// Datagrams queued for one sendmmsg.
    tx: Batch,
    /// Datagrams received by one recvmmsg.
    rx: Batch,
    stats: ClientStats,
    /// The read timeout the socket has now.
    read_timeout: Option<Duration>,
    /// Anything at all came from the appliance since the client was created.
    heard: bool,
    /// When the current (or last) call started.
    started: Instant,
    /// Round trips measured so far (they carry over from call to call).
    rtt: RttEstimator,
    /// The rounds came from the appliance's STATUS answers (or probing is off).
    synced: bool,
    /// What the PROBEs of a stalled call learnt.
    stall: Stall,
}

/// What one call works on beyond the per-chunk state: the chunks taking part and the rejoins
/// made so far. The call owns it ([`Client::exchange`]); nothing of it outlives the call.
#[derive(Debug)]
struct Call {
    /// The chunks taking part: all of them, or a range's.
    chunks: Range<usize>,
    /// Rejoins (NAK 7 realignments) in this call, at most [`Options::max_rejoins`].
    rejoins: u32,
}

/// The PROBEs of the current stall of a call (no progress since `probes` were sent) and what
/// their STATUS answers said.
#[derive(Debug, Default)]
struct Stall {
    /// PROBEs sent since the call's last progress.
    probes: u64,
    /// STATUS answers to them.
    statuses: u64,
    /// Per rank: a slot of a stalled chunk, at the chunk's round, waits for its contribution.
    waiting: Vec<bool>,
}

impl Stall {
    /// Progress: forget the stall (cheap when there was none).
    fn clear(&mut self) {
        if self.probes > 0 {
            self.probes = 0;
            self.statuses = 0;
            self.waiting.fill(false);
        }
    }
}

/// What a datagram from the appliance is, for this client's collective.
enum Datagram {
    /// Nothing usable (counted in [`ClientStats::ignored`]).
    Ignored,
    /// A NAK (spec section 5).
    Nak(GradientRepr),
    /// A STATUS (section 7) about chunk `index`: the slot's `state` and the `round` field; the
    /// rank bitmap follows the header in the datagram.
    Status { index: u32, state: u8, round: u32 },
    /// A RESULT for chunk `index` at `round`; its payload is `len` bytes after the header.
    Result { index: u32, round: u32, offset: u32, len: usize },
}

/// What a received datagram did.
enum Event {
    Nothing,
    /// Chunk `i`'s result was written.
    Done(u32),
    /// Every incomplete chunk moved to another round: resend what is in flight.
    Rejoined,
}

impl Client {
    /// Binds `endpoint.bind` and connects to `endpoint.appliance` (so only the appliance's
    /// datagrams are received, and ICMP errors surface as [`Error::Refused`] or
    /// [`Error::Unreachable`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] for an inconsistent collective or options, [`Error::Socket`] when the
    /// address cannot be bound (not this host's, or in use) or connected.
    pub fn new(collective: Collective, endpoint: Endpoint, options: Options) -> Result<Client, Error> {
        collective.validate()?;
        if options.window == 0 {
            return Err(Error::Invalid("window is 0 chunks".into()));
        }
        if options.initial_rto.is_zero()
            || options.min_rto.is_zero()
            || options.max_rto < options.initial_rto
            || options.max_rto < options.min_rto
        {
            return Err(Error::Invalid(format!(
                "retransmit timeouts: initial {:?} and floor {:?} must be above 0 and at most the cap {:?}",
                options.initial_rto, options.min_rto, options.max_rto
            )));
        }
        let sock = UdpSocket::bind(endpoint.bind).map_err(|source| Error::Socket {
            what: "bind",
            addr: endpoint.bind,
            source,
        })?;
        sock.connect(endpoint.appliance).map_err(|source| Error::Socket {
            what: "connect",
            addr: endpoint.appliance,
            source,
        })?;
        let n = collective.chunks() as usize;
        let chunk_bytes = collective.chunk_elements as usize * collective.dtype.size();
        let datagram = HEADER_LEN + chunk_bytes.max(probe_len(collective.num_workers as usize));
        // Results of a whole window may arrive at once: ask for room for them (best effort; the
        // kernel caps it at net.core.rmem_max).
        set_recv_buffer(&sock, options.window.saturating_mul(datagram + 64).saturating_mul(2));
        let now = Instant::now();
        let idle = Chunk {
            done: false,
            sent: false,
            resent: false,
            pos: NOT_IN_FLIGHT,
            rto: options.initial_rto,
            sent_at: now,
            due: now,
        };
        let gso = options.gso && gso_supported(sock.as_raw_fd());
        let gro = options.gro && enable_gro(sock.as_raw_fd());
        Ok(Client {
            coll: collective,
            ep: endpoint,
            opts: options,
            sock,
            rounds: vec![options.start_round; n],
            chunks: vec![idle; n],
            inflight: Vec::with_capacity(options.window.min(n)),
            tx: Batch::with_gso(options.window.min(BATCH), datagram, gso),
            // A datagram larger than this one is none of this collective's (it reads as empty).
            rx: Batch::receiving(options.window.min(BATCH), datagram.max(HEADER_LEN + 64), gro),
            stats: ClientStats::default(),
            read_timeout: None,
            heard: false,
            started: now,
            rtt: RttEstimator::default(),
            synced: !options.probe,
            stall: Stall { waiting: vec![false; collective.num_workers as usize], ..Stall::default() },
        })
    }

    /// [`crate::from_appliance_config`] then [`Client::new`].
    pub fn from_appliance_config(
        path: &Path,
        collective_id: u16,
        rank: u16,
        options: Options,
    ) -> Result<Client, Error> {
        let (c, ep) = crate::from_appliance_config(path, collective_id, rank)?;
        Client::new(c, ep, options)
    }

    /// The collective.
    pub fn collective(&self) -> &Collective {
        &self.coll
    }

    /// The endpoint as configured.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The socket's local address (the bound port when `bind` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.sock.local_addr().unwrap_or(self.ep.bind)
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Per chunk: the round its next contribution will carry.
    pub fn rounds(&self) -> &[u32] {
        &self.rounds
    }

    /// The counters.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// Reduces `data` (the whole tensor, `tensor_elements` elements) with the other members, in
    /// place: on success `data` holds the reduced tensor. The element type must be the
    /// collective's dtype.
    ///
    /// On error the call ends at most [`Options::deadline`] after its last progress (a chunk's
    /// result, a rejoin), never later; `data` then holds the result for
    /// the chunks whose result arrived and the input for the others. The rounds of every chunk
    /// of the call advance all the same: a retry is a new round. Its peers may still complete
    /// the failed round with this call's contributions (no message withdraws one), and a NAK 7
    /// can take a retry back to that round: after a failure, restart the job's clients once the
    /// collective's `slot_timeout_ms` has passed (the appliance then reclaims the round).
    ///
    /// The first call (and the first after a failed [`Client::sync`]) first asks the appliance
    /// every chunk's round ([`Client::sync`]) when [`Options::probe`] is on.
    ///
    /// # Errors
    /// [`Error::DtypeMismatch`], [`Error::Length`] (nothing sent); [`Error::Nak`] for NAK
    /// reasons 1-6 (at once); [`Error::Rejoins`]; [`Error::Unreachable`] (no STATUS to the
    /// PROBEs at start or of a stalled call), [`Error::Refused`], [`Error::Timeout`] (naming
    /// the ranks the appliance waits for), [`Error::Io`].
    pub fn allreduce<E: Element>(&mut self, data: &mut [E]) -> Result<(), Error> {
        if E::DTYPE != self.coll.dtype {
            return Err(Error::DtypeMismatch {
                collective: self.coll.collective_id,
                expected: self.coll.dtype,
                found: E::DTYPE,
            });
        }
        if data.len() as u64 != self.coll.tensor_elements {
            return Err(Error::Length {
                collective: self.coll.collective_id,
                expected: self.coll.tensor_elements,
                found: data.len() as u64,
                unit: "elements",
            });
        }
        let n = self.chunks.len();
        self.call(&mut Typed(data), 0..n)
    }

    /// [`Client::allreduce`] on raw lanes: `data` is `tensor_elements` lanes of the collective's
    /// dtype, little-endian (f16 and bf16 as their 16-bit patterns), `tensor_elements x dtype
    /// size` bytes.
    pub fn allreduce_bytes(&mut self, data: &mut [u8]) -> Result<(), Error> {
        let size = self.coll.dtype.size();
        let expected = self.coll.tensor_elements * size as u64;
        if data.len() as u64 != expected {
            return Err(Error::Length {
                collective: self.coll.collective_id,
                expected,
                found: data.len() as u64,
                unit: "bytes",
            });
        }
        let n = self.chunks.len();
        self.call(&mut Raw { bytes: data, size }, 0..n)
    }

    /// Reduces a range of the tensor in place: `data` holds the little-endian lanes of elements
    /// `offset..offset + data.len() / dtype size` (f16 and bf16 as their 16-bit patterns).
    /// Only the chunks covering the range take part; the range's last chunk is padded with zeros
    /// up to a whole chunk (or to the tensor's end, where spec section 4 rule 5 allows a short
    /// chunk) and the padding's result is dropped. Those chunks' rounds advance as in
    /// [`Client::allreduce`], the others keep theirs: every member must reduce the same ranges
    /// in the same order (the DDP hook's buckets). An empty `data` sends nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `offset` (elements) is not a multiple of `chunk_elements`, the
    /// length not a whole number of lanes, or the range runs past `tensor_elements` (nothing
    /// sent); otherwise as [`Client::allreduce`].
    pub fn allreduce_range_bytes(&mut self, data: &mut [u8], offset: u64) -> Result<(), Error> {
        let c = &self.coll;
        let size = c.dtype.size();
        let chunk = c.chunk_elements as u64;
        let elements = (data.len() / size) as u64;
        if offset % chunk != 0 {
            return Err(Error::Invalid(format!(
                "offset {offset} is not a multiple of chunk_elements = {chunk} (spec section 4 rule 5)"
            )));
        }
        if data.len() % size != 0 {
            return Err(Error::Invalid(format!("{} bytes are not whole {size}-byte lanes", data.len())));
        }
        if offset + elements > c.tensor_elements {
            return Err(Error::Invalid(format!(
                "elements [{offset}, {}) run past tensor_elements = {} of collective {}",
                offset + elements,
                c.tensor_elements,
                c.collective_id
            )));
        }
        if elements == 0 {
            return Ok(());
        }
        let first = (offset / chunk) as usize;
        let count = elements.div_ceil(chunk) as usize;
        self.call(&mut RawRange { bytes: data, size, base: offset as usize }, first..first + count)
    }

    fn call<L: Lanes>(&mut self, lanes: &mut L, range: Range<usize>) -> Result<(), Error> {
        if !self.synced {
            self.sync()?;
        }
        let start = self.begin();
        self.stats.chunks += range.len() as u64;
        let r = self.exchange(lanes, start, range.clone());
        self.rtt.end_call();
        // Successive calls are successive rounds, even after a failure: a round whose result
        // the appliance may already keep (the peers completed it after this call gave up) is
        // never reused for other data (it would come back as that old result, rule 3).
        for round in &mut self.rounds[range] {
            *round = round.wrapping_add(1);
        }
        self.stats.seconds = start.elapsed().as_secs_f64();
        r
    }

    /// The window loop: fill the window, fire due timers, probe a stall, wait for the next
    /// datagram or timer.
    fn exchange<L: Lanes>(&mut self, lanes: &mut L, start: Instant, range: Range<usize>) -> Result<(), Error> {
        // The call fails when no chunk completes for `deadline` (a large tensor may take longer
        // than that in all; a stuck one fails as soon as it is stuck that long).
        let mut deadline = start + self.opts.deadline;
        let probe_every = self.opts.deadline / STALL_PROBES_PER_DEADLINE;
        // Without probing, the stall probe never comes before the deadline.
        let no_probe = self.opts.deadline * 2;
        let mut next_probe = start + if self.opts.probe { probe_every } else { no_probe };
        self.stall.clear();
        let (mut next, n) = (range.start, range.end);
        let mut remaining = range.len();
        let mut call = Call { chunks: range, rejoins: 0 };
        // Earliest timer of the chunks in flight (may be early: then nothing fires).
        let mut next_due = deadline;
        loop {
            while self.inflight.len() < self.opts.window && next < n {
                let i = self.enter_flight(next);
                let due = self.send_chunk(i, lanes, Instant::now())?;
                next_due = next_due.min(due);
                next += 1;
            }
            if remaining == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.deadline_error(&call, remaining, self.opts.deadline));
            }
            if now >= next_probe {
                // No progress for a while: ask the stalled chunks' slots whom they wait for.
                for k in 0..self.inflight.len() {
                    self.emit_probe(self.inflight[k])?;
                    self.stall.probes += 1;
                }
                next_probe += probe_every; // at fixed times after the last progress
                continue;
            }
            self.flush()?;
            let got = if now >= next_due {
                // Results already waiting are read before a timer resends their chunks.
                let got = self.recv(false)?;
                if got == 0 {
                    next_due = self.fire_timers(now, deadline, |me, i, now| {
                        me.stats.retransmits += 1;
                        me.send_chunk(i, lanes, now)
                    })?;
                    continue;
                }
                got
            } else {
                self.set_wait(next_due.min(deadline).min(next_probe) - now)?;
                self.recv(true)?
            };
            for k in 0..got {
                self.heard = true;
                let progress = match self.on_datagram(k, lanes, &mut call)? {
                    Event::Nothing => false,
                    Event::Done(i) => {
                        let c = &self.chunks[i as usize];
                        if !c.resent {
                            self.rtt.sample(c.sent_at.elapsed().as_secs_f64());
                        }
                        self.leave_flight(i);
                        remaining -= 1;
                        true
                    }
                    Event::Rejoined => {
                        let now = Instant::now();
                        for k in 0..self.inflight.len() {
                            let i = self.inflight[k];
                            self.chunks[i as usize].rto = self.rtt.rto(&self.opts);
                            let due = self.send_chunk(i, lanes, now)?;
                            next_due = next_due.min(due);
                        }
                        true
                    }
                };
                if progress {
                    let now = Instant::now();
                    deadline = now + self.opts.deadline;
                    next_probe = now + if self.opts.probe { probe_every } else { no_probe };
                    self.stall.clear();
                }
            }
        }
    }

    /// Asks the appliance, for every chunk, which round its slot accepts from this rank (PROBE
    /// and STATUS, spec section 7) and takes it as the chunk's round: the round in progress
    /// (STATUS states 1 and 2; in state 2 this rank's contribution is already in, and the next
    /// call gets that round's result, whatever it sends), the completed round + 1 (state 3), or
    /// the chunk's current round for a slot with no history (state 0; at first
    /// [`Options::start_round`]). A window of probes is in flight at a time, each resent on
    /// its retransmit timer. The first call does this when [`Options::probe`] is on; a worker
    /// that restarts runs it instead of guessing its round (rule 4).
    ///
    /// # Errors
    /// [`Error::Nak`] (reasons 1-6: the appliance refuses this member), [`Error::Unreachable`]
    /// when [`Options::deadline`] passes without a STATUS, [`Error::Refused`], [`Error::Io`].
    pub fn sync(&mut self) -> Result<(), Error> {
        let start = self.begin();
        let n = self.chunks.len();
        let mut deadline = start + self.opts.deadline;
        let (mut next, mut remaining) = (0usize, n);
        let mut next_due = deadline;
        loop {
            while self.inflight.len() < self.opts.window && next < n {
                let i = self.enter_flight(next);
                next_due = next_due.min(self.send_probe(i, Instant::now())?);
                next += 1;
            }
            if remaining == 0 {
                self.synced = true;
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                let waited_ms = self.opts.deadline.as_millis() as u64;
                let note = format!(
                    " (no STATUS answered the PROBEs of {remaining} of {n} chunks{}: the appliance is down or unreachable)",
                    if remaining < n { " after the others' came" } else { "" }
                );
                return Err(Error::Unreachable { addr: self.ep.appliance, waited_ms, note });
            }
            self.flush()?;
            let got = if now >= next_due {
                let got = self.recv(false)?;
                if got == 0 {
                    next_due = self.fire_timers(now, deadline, |me, i, now| me.send_probe(i, now))?;
                    continue;
                }
                got
            } else {
                self.set_wait(next_due.min(deadline) - now)?;
                self.recv(true)?
            };
            for k in 0..got {
                self.heard = true;
                match self.classify(k) {
                    Datagram::Nak(r) => {
                        self.stats.naks += 1;
                        if r.reason != NAK_STALE_ROUND {
                            return Err(self.nak_error(&r));
                        }
                    }
                    Datagram::Status { index, state, round } => {
                        self.stats.statuses += 1;
                        let i = index as usize;
                        let c = self.chunks[i];
                        if c.done || c.pos == NOT_IN_FLIGHT {
                            continue;
                        }
                        if state != SlotState::NO_HISTORY {
                            // States 1 and 2: the round in progress; 3: the completed round + 1.
                            self.rounds[i] = round;
                        }
                        if !c.resent {
                            // A STATUS waits for no peer: a round trip of the path and the
                            // appliance alone, the best sample there is.
                            self.rtt.sample(c.sent_at.elapsed().as_secs_f64());
                        }
                        self.chunks[i].done = true;
                        self.leave_flight(index);
                        remaining -= 1;
                        deadline = Instant::now() + self.opts.deadline;
                    }
                    // Results of an earlier call, anything else: not asked for here.
                    Datagram::Result { .. } | Datagram::Ignored => {}
                }
            }
        }
    }

    /// Receives a batch of datagrams into `rx` (recvmmsg): waits for the first for the read
    /// timeout when `wait`, else takes only what is queued. Returns how many came.
    fn recv(&mut self, wait: bool) -> Result<usize, Error> {
        self.stats.recv_calls += 1;
        let gro_before = self.rx.gro_recvs;
        let r = self.rx.recv(self.sock.as_raw_fd(), wait).map_err(|e| self.socket_error(e, "receiving"));
        self.stats.gro_recvs += self.rx.gro_recvs - gro_before;
        r
    }

    /// Sends the datagrams queued in `tx` (sendmmsg). A transient error drops them like loss on
    /// the wire: their timers resend them.
    fn flush(&mut self) -> Result<(), Error> {
        if self.tx.len() == 0 {
            return Ok(());
        }
        let gso_before = self.tx.gso_sends;
        let r = self.tx.send(self.sock.as_raw_fd());
        self.stats.gso_sends += self.tx.gso_sends - gso_before;
        match r {
            Ok(calls) => {
                self.stats.send_calls += calls;
                Ok(())
            }
            Err(e) if is_transient(&e) => {
                self.stats.send_calls += 1;
                Ok(())
            }
            Err(e) => Err(self.socket_error(e, "sending")),
        }
    }

    /// Queues the datagram of `len` bytes written in `tx`'s free slot; sends the batch when it
    /// is full.
    fn queue(&mut self, len: usize) -> Result<(), Error> {
        self.tx.push(len);
        if self.tx.is_full() {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends a PROBE for chunk `i` and arms its timer (as [`Client::send_chunk`] does for a
    /// contribution); returns when the timer fires.
    fn send_probe(&mut self, i: u32, now: Instant) -> Result<Instant, Error> {
        let chunk = &mut self.chunks[i as usize];
        let due = chunk.arm(now);
        self.emit_probe(i)?;
        Ok(due)
    }

    /// Sends a PROBE (spec section 7) for chunk `i`: its header with flags PROBE, round 0, and
    /// ceil(num_workers / 8) zero bytes.
    fn emit_probe(&mut self, i: u32) -> Result<(), Error> {
        let c = &self.coll;
        let len = probe_len(c.num_workers as usize);
        let repr = GradientRepr {
            version: VERSION,
            flags: Flags::PROBE,
            op_type: c.op as u8,
            collective_id: c.collective_id,
            dtype: c.dtype as u8,
            reason: 0,
            worker_rank: c.rank,
            tensor_offset: i * c.chunk_elements,
            data_length: len as u32,
            round: 0,
        };
        let slot = self.tx.free_slot();
        repr.emit(slot).expect("a slot holds a header and a probe");
        slot[HEADER_LEN..HEADER_LEN + len].fill(0);
        self.stats.probes += 1;
        self.queue(HEADER_LEN + len)
    }

    /// Sends chunk `i` at its current round, arms its timer with its current timeout and
    /// returns when it fires.
    fn send_chunk<L: Lanes>(&mut self, i: u32, lanes: &L, now: Instant) -> Result<Instant, Error> {
        let c = &self.coll;
        let len = c.chunk_len(i as u64) as usize;
        let bytes = len * c.dtype.size();
        let offset = i * c.chunk_elements;
        let chunk = &mut self.chunks[i as usize];
        let repr = GradientRepr {
            version: VERSION,
            flags: if chunk.sent { Flags::RETRANSMIT } else { 0 },
            op_type: c.op as u8,
            collective_id: c.collective_id,
            dtype: c.dtype as u8,
            reason: 0,
            worker_rank: c.rank,
            tensor_offset: offset,
            data_length: bytes as u32,
            round: self.rounds[i as usize],
        };
        let due = chunk.arm(now);
        let slot = self.tx.free_slot();
        repr.emit(slot).expect("a slot holds a header and a chunk");
        lanes.load(offset as usize, &mut slot[HEADER_LEN..HEADER_LEN + bytes]);
        self.stats.sent += 1;
        self.queue(HEADER_LEN + bytes)?;
        Ok(due)
    }

    /// The start of a pass over the tensor (a call, or the probes of [`Client::sync`]): every
    /// chunk idle with the current retransmit timeout, none in flight. Returns the start.
    fn begin(&mut self) -> Instant {
        let start = Instant::now();
        self.started = start;
        let rto = self.rtt.rto(&self.opts);
        for c in &mut self.chunks {
            *c = Chunk { done: false, sent: false, resent: false, pos: NOT_IN_FLIGHT, rto, sent_at: start, due: start };
        }
        self.inflight.clear();
        self.tx.clear();
        start
    }

    /// Puts chunk `i` in flight; returns it as the in-flight list holds it.
    fn enter_flight(&mut self, i: usize) -> u32 {
        self.chunks[i].pos = self.inflight.len() as u32;
        self.inflight.push(i as u32);
        i as u32
    }

    /// Resends (with `resend`: a contribution or a probe) every chunk in flight whose timer is
    /// due, doubling its timeout (capped); returns the earliest timer left.
    fn fire_timers(
        &mut self,
        now: Instant,
        deadline: Instant,
        mut resend: impl FnMut(&mut Self, u32, Instant) -> Result<Instant, Error>,
    ) -> Result<Instant, Error> {
        let mut next_due = deadline;
        for k in 0..self.inflight.len() {
            let i = self.inflight[k];
            let c = &mut self.chunks[i as usize];
            let due = if c.due <= now {
                c.rto = (c.rto * 2).min(self.opts.max_rto);
                resend(self, i, now)?
            } else {
                c.due
            };
            next_due = next_due.min(due);
        }
        Ok(next_due)
    }

    fn leave_flight(&mut self, i: u32) {
        let pos = self.chunks[i as usize].pos as usize;
        self.chunks[i as usize].pos = NOT_IN_FLIGHT;
        self.inflight.swap_remove(pos);
        if let Some(&moved) = self.inflight.get(pos) {
            self.chunks[moved as usize].pos = pos as u32;
        }
    }

    /// What the datagram `k` of `rx` is (spec sections 2, 5, 6, 7); counts the ignored ones.
    fn classify(&mut self, k: usize) -> Datagram {
        let Ok(h) = GradientHeader::new_checked(self.rx.datagram(k)) else {
            self.stats.ignored += 1;
            return Datagram::Ignored;
        };
        let r = GradientRepr::parse(&h);
        let c = &self.coll;
        if r.collective_id != c.collective_id {
            self.stats.ignored += 1;
            return Datagram::Ignored;
        }
        // Spec section 5: a NAK's flags are NAK (0x4) alone; section 6: a RESULT's are RESULT;
        // section 7: a STATUS's RESULT | PROBE. Any other mix (RESULT | NAK, ...) is none of
        // them, and ignored.
        if r.flags == Flags::NAK && r.version == VERSION {
            return Datagram::Nak(r);
        }
        let chunk = c.chunk_elements;
        let index = (r.tensor_offset % chunk == 0 && (r.tensor_offset as u64) < c.tensor_elements)
            .then_some(r.tensor_offset / chunk);
        let from_appliance = r.version == VERSION
            && r.worker_rank == RANK_NONE
            && r.op_type == c.op as u8
            && r.dtype == c.dtype as u8
            && h.rest().len() >= r.data_length as usize;
        let status = Flags::RESULT | Flags::PROBE;
        let got = match index.filter(|_| from_appliance) {
            Some(i) if r.flags == status => {
                let ok =
                    r.data_length as usize == probe_len(c.num_workers as usize) && r.reason <= SlotState::COMPLETED;
                ok.then_some(Datagram::Status { index: i, state: r.reason, round: r.round })
            }
            Some(i) if r.flags == Flags::RESULT => {
                let ok = r.data_length as usize == c.chunk_len(i as u64) as usize * c.dtype.size();
                let (round, offset, len) = (r.round, r.tensor_offset, r.data_length as usize);
                ok.then_some(Datagram::Result { index: i, round, offset, len })
            }
            _ => None,
        };
        got.unwrap_or_else(|| {
            self.stats.ignored += 1;
            Datagram::Ignored
        })
    }

    /// Handles the datagram `k` of `rx` (one from the appliance) during `call`.
    fn on_datagram<L: Lanes>(&mut self, k: usize, lanes: &mut L, call: &mut Call) -> Result<Event, Error> {
        match self.classify(k) {
            Datagram::Ignored => Ok(Event::Nothing),
            Datagram::Nak(r) => {
                self.stats.naks += 1;
                self.on_nak(&r, call)
            }
            Datagram::Status { index, state, round } => {
                self.on_status(k, index, state, round);
                Ok(Event::Nothing)
            }
            Datagram::Result { index, round, offset, len } => {
                let i = index as usize;
                // A chunk not in flight has nothing of this rank's in the round as far as this
                // call knows (a restarted rank may see its peers' round end before it sends):
                // stale, as the Python client counts it; its own send gets the kept result.
                if self.chunks[i].done
                    || self.chunks[i].pos == NOT_IN_FLIGHT
                    || round != self.rounds[i]
                    || !call.chunks.contains(&i)
                {
                    self.stats.stale_results += 1;
                    return Ok(Event::Nothing);
                }
                lanes.store(offset as usize, &self.rx.datagram(k)[HEADER_LEN..HEADER_LEN + len]);
                self.chunks[i].done = true;
                self.stats.results += 1;
                Ok(Event::Done(index))
            }
        }
    }

    /// A STATUS during a call (the answer to a stalled call's PROBE), the datagram `k` of `rx`:
    /// when its slot holds the chunk's round in progress, the ranks missing from its bitmap are
    /// waited for.
    fn on_status(&mut self, k: usize, index: u32, state: u8, round: u32) {
        self.stats.statuses += 1;
        if self.stall.probes == 0 {
            return; // the answer to a probe of an earlier stall
        }
        self.stall.statuses += 1;
        let i = index as usize;
        let in_progress = state == SlotState::IN_PROGRESS_WITHOUT_RANK || state == SlotState::IN_PROGRESS_WITH_RANK;
        if !in_progress || self.chunks[i].done || round != self.rounds[i] {
            return;
        }
        let bitmap = &self.rx.datagram(k)[HEADER_LEN..];
        for (rank, w) in self.stall.waiting.iter_mut().enumerate() {
            if bitmap[rank / 8] & (1 << (rank % 8)) == 0 {
                *w = true;
            }
        }
    }

    /// A NAK (spec section 5): reasons other than 7 end the call; reason 7 realigns every
    /// incomplete chunk of `call` on the appliance's expected round (one NAK suffices, as NAKs
    /// are limited to one per source per 100 ms).
    fn on_nak(&mut self, r: &GradientRepr, call: &mut Call) -> Result<Event, Error> {
        let c = &self.coll;
        if r.reason != NAK_STALE_ROUND {
            return Err(self.nak_error(r));
        }
        let index = (r.tensor_offset % c.chunk_elements == 0 && (r.tensor_offset as u64) < c.tensor_elements)
            .then_some((r.tensor_offset / c.chunk_elements) as usize);
        let Some(i) = index else {
            return Ok(Event::Nothing);
        };
        let sent = self.rounds[i];
        // A late NAK of a packet sent before a rejoin, or of a chunk already done: nothing to fix.
        if self.chunks[i].done || !self.chunks[i].sent || sent == r.round {
            return Ok(Event::Nothing);
        }
        if call.rejoins >= self.opts.max_rejoins {
            return Err(Error::Rejoins {
                limit: self.opts.max_rejoins,
                offset: r.tensor_offset,
                sent,
                expected: r.round,
            });
        }
        call.rejoins += 1;
        self.stats.rejoins += 1;
        let delta = r.round.wrapping_sub(sent);
        let active = call.chunks.clone();
        for (round, ch) in self.rounds[active.clone()].iter_mut().zip(&mut self.chunks[active]) {
            if !ch.done {
                *round = round.wrapping_add(delta);
                ch.sent = false;
                ch.resent = false;
            }
        }
        Ok(Event::Rejoined)
    }

    /// Sets the socket's read timeout to `wait` rounded up to [`TIMEOUT_STEP`], unless it is
    /// already within one step of it (one system call saved per datagram in steady state).
    fn set_wait(&mut self, wait: Duration) -> Result<(), Error> {
        let want = wait.max(TIMEOUT_STEP);
        if let Some(cur) = self.read_timeout {
            if cur >= want && cur <= want + TIMEOUT_STEP {
                return Ok(());
            }
        }
        let want = Duration::from_millis(want.as_millis() as u64 + 1);
        self.sock.set_read_timeout(Some(want)).map_err(|source| Error::Io {
            what: "setting the read timeout",
            addr: self.ep.appliance,
            source,
        })?;
        self.read_timeout = Some(want);
        Ok(())
    }

    fn nak_error(&self, r: &GradientRepr) -> Error {
        Error::Nak { collective: self.coll.collective_id, reason: r.reason, offset: r.tensor_offset, round: r.round }
    }

    /// The error of `call`, which made no progress for `waited` with `remaining` chunks
    /// missing: what the stall's PROBEs learnt.
    fn deadline_error(&self, call: &Call, remaining: usize, waited: Duration) -> Error {
        let waited_ms = waited.as_millis() as u64;
        let timeout = |waiting_for| Error::Timeout {
            collective: self.coll.collective_id,
            missing: remaining,
            chunks: call.chunks.len(),
            addr: self.ep.appliance,
            waited_ms,
            waiting_for,
        };
        if self.stall.statuses > 0 {
            let ranks = (0..self.coll.num_workers).filter(|k| self.stall.waiting[*k as usize]).collect();
            timeout(Some(ranks))
        } else if self.stall.probes > 0 {
            Error::Unreachable {
                addr: self.ep.appliance,
                waited_ms,
                note: format!(
                    " (no STATUS answered the {} PROBEs of the stalled chunks{}: the appliance stopped or the path to it broke)",
                    self.stall.probes,
                    if self.heard { ", though it answered before" } else { "" }
                ),
            }
        } else if self.heard {
            timeout(None)
        } else {
            Error::Unreachable {
                addr: self.ep.appliance,
                waited_ms,
                note: " (no result and no NAK ever came: the appliance is down or unreachable, or no peer has contributed yet)"
                    .into(),
            }
        }
    }

    fn socket_error(&self, e: io::Error, what: &'static str) -> Error {
        let addr = self.ep.appliance;
        let waited = self.started.elapsed();
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => Error::Refused { addr },
            Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN) => {
                Error::Unreachable { addr, waited_ms: waited.as_millis() as u64, note: format!(" ({e})") }
            }
            _ => Error::Io { what, addr, source: e },
        }
    }
}

/// Send errors the retransmit timer recovers from: a full socket or device queue (EAGAIN,
/// ENOBUFS), a signal, and a datagram the host itself dropped on output (EPERM: a netfilter rule
/// such as a firewall's or an injected-loss rule), which is loss like any other.
fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
        || matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EPERM))
}

/// Asks for a receive buffer of `bytes` (best effort: errors are ignored, the kernel caps it).
#[allow(unsafe_code)] // one setsockopt through libc
fn set_recv_buffer(sock: &UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = bytes.min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: the fd is an open socket owned by `sock` for the duration of the call; the option
    // value points to a live c_int of the size passed.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            initial_rto: Duration::from_millis(20),
            min_rto: Duration::from_millis(2),
            max_rto: Duration::from_millis(500),
            ..Options::default()
        }
    }

    #[test]
    fn rto_is_four_smallest_round_trips_of_this_or_the_last_call() {
        let mut e = RttEstimator::default();
        // No sample yet: the initial timeout.
        assert_eq!(e.rto(&opts()), Duration::from_millis(20));
        // The smallest sample counts, not the mean: a chunk that waited 80 ms for a peer's
        // retransmission does not raise the timeout.
        e.sample(0.010);
        e.sample(0.080);
        e.sample(0.004);
        assert_eq!(e.rto(&opts()), Duration::from_millis(16));
        // The next call starts from it, and a smaller sample lowers it at once.
        e.end_call();
        assert_eq!(e.rto(&opts()), Duration::from_millis(16));
        e.sample(0.003);
        assert_eq!(e.rto(&opts()), Duration::from_millis(12));
        // A call whose samples are all larger (the path got slower) raises it for the next one.
        e.end_call();
        e.sample(0.050);
        e.end_call();
        assert_eq!(e.rto(&opts()), Duration::from_millis(200));
        // A call without any sample (every chunk resent) keeps the last.
        e.end_call();
        assert_eq!(e.rto(&opts()), Duration::from_millis(200));
    }

    #[test]
    fn rto_is_clamped() {
        let mut e = RttEstimator::default();
        e.sample(0.000_050); // 50 µs on a quiet LAN: the floor
        assert_eq!(e.rto(&opts()), Duration::from_millis(2));
        let mut e = RttEstimator::default();
        e.sample(2.0); // a path that took seconds: the cap
        assert_eq!(e.rto(&opts()), Duration::from_millis(500));
    }
}
