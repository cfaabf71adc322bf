//! The `[[allreduce]]` emulations of a run, each where its key `lcore` puts it: on the main
//! lcore (polled between the main lcore's receive passes; the default) or alone on an EAL worker
//! lcore, which polls the emulation's port and sends on its tx queue.
//!
//! An emulation on a worker lcore shares two cache lines with the main lcore: one the main lcore
//! writes (stop, the drain's deadline, a request for the live line's counts) and one the worker
//! writes (the counts as of the last request, and "finished"). The worker loads the main
//! lcore's line once per poll-loop pass and writes its own once per request (once a second):
//! nothing on its per-packet path allocates, locks or makes a system call. When it is joined,
//! the worker hands its [`Runner`] back (one lock, taken once at the end), and the summary is
//! made from it as from one that ran on the main lcore.

use super::allreduce::{Emulation, LiveCounts, LiveState, Runner};
use super::report::Latency;
use super::RunError;
use dataplane::config::ConfigError;
use dataplane::dpdk::lcore::{self, LcoreHandle};
use dataplane::dpdk::{self as dpdk, Mempool};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Checks that every emulation's `lcore` is a worker lcore of the EAL (`workers`; `main` is the
/// main lcore's id, for the message; `file` the config's, naming it).
///
/// # Errors
/// [`RunError::Config`] naming the file, the key `allreduce[i].lcore`, the lcore and the EAL's
/// workers.
pub fn check_lcores(list: &[Emulation], workers: &[u32], main: u32, file: &Path) -> Result<(), RunError> {
    for (i, e) in list.iter().enumerate() {
        match e.lcore {
            Some(l) if !workers.contains(&l) => {
                let msg = format!(
                    "lcore {l} is not a worker lcore of the EAL (workers: {workers:?}; the main lcore {main} \
                     reports): give it in [eal] args, like -l {main},{l}, or leave the key out to run the emulation \
                     on the main lcore"
                );
                return Err(RunError::Config(ConfigError::new(file, format!("allreduce[{i}].lcore"), msg).to_string()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// What the main lcore writes: a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Control {
    /// Stop sending contributions; end once drained or at `drain_end`.
    stop: AtomicBool,
    /// The TSC at which the worker ends after `stop`, drained or not.
    drain_end: AtomicU64,
    /// Requests for the live counts, counted; the worker answers each in `Report`.
    request: AtomicU64,
}

/// [`LiveCounts`] as words: nine counters, whether there is a latency, its six figures.
const WORDS: usize = 16;

/// What the worker lcore writes: cache lines of their own.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Report {
    /// The last request answered: `counts` hold the counts as of it.
    answer: AtomicU64,
    /// Every slot did its rounds (or was refused): [`super::allreduce::Engine::finished`].
    finished: AtomicBool,
    /// The worker panicked (set on its lcore by the launch's panic hook).
    panicked: AtomicBool,
    counts: [AtomicU64; WORDS],
}

#[derive(Debug, Default)]
struct Shared {
    control: Control,
    report: Report,
}

fn to_words(c: &LiveCounts) -> [u64; WORDS] {
    let l = c.latency;
    let f = |x: fn(&Latency) -> f64| l.as_ref().map_or(0, |l| x(l).to_bits());
    [
        c.results,
        c.payload_bytes,
        c.right,
        c.wrong,
        c.retransmissions,
        c.timeouts,
        c.naks,
        c.tx_full,
        c.nombuf,
        u64::from(l.is_some()),
        f(|l| l.min_us),
        f(|l| l.p50_us),
        f(|l| l.p99_us),
        f(|l| l.p999_us),
        f(|l| l.max_us),
        f(|l| l.mean_us),
    ]
}

fn from_words(w: &[u64; WORDS]) -> LiveCounts {
    let g = |i: usize| f64::from_bits(w[i]);
    LiveCounts {
        results: w[0],
        payload_bytes: w[1],
        right: w[2],
        wrong: w[3],
        retransmissions: w[4],
        timeouts: w[5],
        naks: w[6],
        tx_full: w[7],
        nombuf: w[8],
        latency: (w[9] != 0).then(|| Latency {
            min_us: g(10),
            p50_us: g(11),
            p99_us: g(12),
            p999_us: g(13),
            max_us: g(14),
            mean_us: g(15),
        }),
    }
}

/// A fault-injection hook for tests of the panic path (it is what a bug on a worker lcore
/// would take): when this environment variable is set to `N`, every emulation on a worker lcore
/// panics once it has received `N` frames. The lcore's panic is caught
/// ([`dataplane::dpdk::lcore::launch`]), the run ends, the other emulations drain and pktgen
/// exits with status 1 naming the emulation, the lcore and the message. Read once at start; a
/// value that is not a count is a config error naming the variable, before any port starts.
pub const PANIC_AFTER_RX_ENV: &str = "PKTGEN_INJECT_PANIC_AFTER_RX";

/// [`PANIC_AFTER_RX_ENV`]'s count, if set.
///
/// # Errors
/// [`RunError::Config`] naming the variable when its value is not a count.
pub(super) fn panic_after_rx() -> Result<Option<u64>, RunError> {
    match std::env::var(PANIC_AFTER_RX_ENV) {
        Err(_) => Ok(None),
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| RunError::Config(format!("{PANIC_AFTER_RX_ENV}: expected a count of frames, got {v:?}"))),
    }
}

/// How often (s) a worker lcore asks its engine whether it has finished (a walk over every
/// slot of every worker, so not on every pass).
const FINISHED_CHECK_S: f64 = 0.001;

/// A worker lcore's whole work: polls `r` until the main lcore says stop, then until it is
/// drained or the drain's deadline passes; answers the main lcore's requests for the live
/// counts; says when it has finished; hands `r` back in `back` at the end. Panics once `r` has
/// received `panic_after_rx` frames, when given ([`PANIC_AFTER_RX_ENV`]).
#[inline(never)]
fn emulation_loop(
    mut r: Runner,
    pool: Mempool,
    shared: Arc<Shared>,
    back: Arc<Mutex<Option<Runner>>>,
    reader: u32,
    panic_after_rx: Option<u64>,
) {
    // A reader of `dpdk::rcu` while it polls: a memif peer's departure unmaps the rings only
    // after this loop's next turn.
    let online = dpdk::rcu::workers().enter(reader).expect("reader ids are below RTE_MAX_LCORE");
    let (ctl, rep) = (&shared.control, &shared.report);
    let check_every = (FINISHED_CHECK_S * dpdk::tsc_hz() as f64) as u64;
    let mut answered = 0;
    let mut next_check = 0;
    let mut finished = false;
    let mut drain_end: Option<u64> = None;
    loop {
        online.quiescent();
        let now = dpdk::rdtsc();
        r.poll(now, &pool);
        if let Some(n) = panic_after_rx {
            if r.rx_packets >= n {
                panic!("injected fault ({PANIC_AFTER_RX_ENV}={n}): {} frames received", r.rx_packets);
            }
        }
        let req = ctl.request.load(Ordering::Acquire);
        if req != answered {
            for (a, w) in rep.counts.iter().zip(to_words(&LiveCounts::take(&mut r))) {
                a.store(w, Ordering::Relaxed);
            }
            rep.answer.store(req, Ordering::Release);
            answered = req;
        }
        match drain_end {
            None if ctl.stop.load(Ordering::Acquire) => {
                r.engine.stop();
                drain_end = Some(ctl.drain_end.load(Ordering::Relaxed));
            }
            None if !finished && now >= next_check => {
                next_check = now + check_every;
                finished = r.engine.finished();
                if finished {
                    rep.finished.store(true, Ordering::Release);
                }
            }
            Some(end) if r.engine.drained() || now >= end => break,
            _ => {}
        }
    }
    drop(online);
    r.discard();
    *back.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
}

/// An emulation on a worker lcore, seen from the main lcore.
#[derive(Debug)]
struct OnLcore {
    shared: Arc<Shared>,
    /// `None` once joined.
    handle: Option<LcoreHandle>,
    back: Arc<Mutex<Option<Runner>>>,
    /// The request whose answer the pending live line waits for.
    asked: u64,
}

impl OnLcore {
    fn stop(&self, drain_end: u64) {
        let c = &self.shared.control;
        if !c.stop.load(Ordering::Relaxed) {
            c.drain_end.store(drain_end, Ordering::Relaxed);
            c.stop.store(true, Ordering::Release);
        }
    }
}

/// Where one emulation runs.
#[derive(Debug)]
enum Place {
    Main(Box<Runner>),
    Lcore(OnLcore),
}

/// A run's emulations, in `[[allreduce]]` order, with their live-line state.
#[derive(Debug)]
pub struct Emulations {
    list: Vec<(String, Place)>,
    live: Vec<LiveState>,
    /// The live lines asked for at a second's tick (its time since the start, s), printed once
    /// every worker lcore has answered (or at the next tick).
    pending: Option<f64>,
    quiet: bool,
    /// The TSC once the runners were built, before the first worker lcore was launched.
    started_tsc: u64,
}

impl Emulations {
    /// Builds the runners of `list` (emulation `i` on DPDK port `ports[list[i].port]`: (port id,
    /// rx queues); `burst` frames per pass; a TSC of `hz` Hz) and launches those with an `lcore`
    /// there, with `dpdk::rcu` reader ids from `first_reader` on. `quiet`: print no live lines.
    /// `fault`: [`PANIC_AFTER_RX_ENV`]'s count, for the emulations on worker lcores.
    ///
    /// # Errors
    /// [`RunError::Runtime`] when an lcore cannot be launched (those already launched are
    /// stopped and joined).
    #[allow(clippy::too_many_arguments)] // the run's parts each emulation needs, taken once
    pub fn start(
        list: &[Emulation],
        ports: &[(u16, u16)],
        pool: Mempool,
        burst: usize,
        hz: u64,
        first_reader: u32,
        quiet: bool,
        fault: Option<u64>,
    ) -> Result<Emulations, RunError> {
        // Every runner is built (its values and templates computed) before the clock starts.
        let runners: Vec<Runner> = list
            .iter()
            .map(|em| {
                let (port_id, nq) = ports[em.port as usize];
                Runner::new(em, port_id, nq, burst, hz, dpdk::rdtsc())
            })
            .collect();
        let mut out = Emulations {
            list: Vec::new(),
            live: list.iter().map(|_| LiveState::new()).collect(),
            pending: None,
            quiet,
            started_tsc: dpdk::rdtsc(),
        };
        let mut reader = first_reader;
        for (em, r) in list.iter().zip(runners) {
            let Some(lc) = em.lcore else {
                out.list.push((em.name.clone(), Place::Main(Box::new(r))));
                continue;
            };
            let shared = Arc::new(Shared::default());
            let back = Arc::new(Mutex::new(None));
            let (s2, b2) = (shared.clone(), back.clone());
            let s3 = shared.clone();
            let on_panic: Arc<dyn Fn() + Send + Sync> =
                Arc::new(move || s3.report.panicked.store(true, Ordering::Release));
            let job = move || emulation_loop(r, pool, s2, b2, reader, fault);
            reader += 1;
            let handle = lcore::launch(lc, job, Some(on_panic))
                .map_err(|e| RunError::Runtime(format!("allreduce {}: {e}", em.name)))?;
            out.list.push((em.name.clone(), Place::Lcore(OnLcore { shared, handle: Some(handle), back, asked: 0 })));
        }
        Ok(out)
    }

    /// The TSC (cycles) read once every runner was built and before any was launched on a
    /// worker lcore: no emulation sent anything before it, so the run's clock starts there.
    pub fn started_tsc(&self) -> u64 {
        self.started_tsc
    }

    /// No emulation at all.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Some emulation runs on the main lcore (which then must not sleep between passes).
    pub fn on_main(&self) -> bool {
        self.list.iter().any(|(_, p)| matches!(p, Place::Main(_)))
    }

    /// One pass at `now` of the emulations on the main lcore; prints the pending live lines once
    /// every worker lcore has answered.
    pub fn poll(&mut self, now: u64, pool: &Mempool) {
        for (_, p) in &mut self.list {
            if let Place::Main(r) = p {
                r.poll(now, pool);
            }
        }
        if self.pending.is_some() && self.answered() {
            self.print_lines();
        }
    }

    /// Every worker lcore answered its last request.
    fn answered(&self) -> bool {
        self.list.iter().all(|(_, p)| match p {
            Place::Main(_) => true,
            Place::Lcore(l) => l.shared.report.answer.load(Ordering::Acquire) == l.asked,
        })
    }

    /// A second's tick, `t` seconds after the start: asks for the live lines (a pending one not
    /// yet answered is printed first, with the counts last published).
    pub fn tick(&mut self, t: f64) {
        if self.pending.is_some() {
            self.print_lines();
        }
        for (_, p) in &mut self.list {
            if let Place::Lcore(l) = p {
                l.asked += 1;
                l.shared.control.request.store(l.asked, Ordering::Release);
            }
        }
        self.pending = Some(t);
        if self.answered() {
            self.print_lines();
        }
    }

    fn print_lines(&mut self) {
        let Some(t) = self.pending.take() else { return };
        for ((name, p), live) in self.list.iter_mut().zip(&mut self.live) {
            let c = match p {
                Place::Main(r) => LiveCounts::take(r),
                Place::Lcore(l) => {
                    let mut w = [0u64; WORDS];
                    for (x, a) in w.iter_mut().zip(&l.shared.report.counts) {
                        *x = a.load(Ordering::Relaxed);
                    }
                    from_words(&w)
                }
            };
            let line = live.line(t, 1.0, name, &c);
            if !self.quiet {
                println!("{line}");
            }
        }
    }

    /// Every emulation finished its rounds (never when one has unbounded rounds).
    pub fn finished(&self) -> bool {
        self.list.iter().all(|(_, p)| match p {
            Place::Main(r) => r.engine.finished(),
            Place::Lcore(l) => l.shared.report.finished.load(Ordering::Acquire),
        })
    }

    /// A worker lcore's emulation panicked: the run should end.
    pub fn failed(&self) -> bool {
        self.list.iter().any(|(_, p)| matches!(p, Place::Lcore(l) if l.shared.report.panicked.load(Ordering::Acquire)))
    }

    /// No new contributions from now on; replies are still taken, on a worker lcore until it is
    /// drained or until the TSC reaches `drain_end`.
    pub fn stop(&mut self, drain_end: u64) {
        for (_, p) in &mut self.list {
            match p {
                Place::Main(r) => r.engine.stop(),
                Place::Lcore(l) => l.stop(drain_end),
            }
        }
    }

    /// The emulations on the main lcore await nothing more (those on worker lcores drain
    /// themselves).
    pub fn drained(&self) -> bool {
        self.list.iter().all(|(_, p)| match p {
            Place::Main(r) => r.engine.drained(),
            Place::Lcore(_) => true,
        })
    }

    /// Waits for every worker lcore (stopping any not yet stopped, at once) and returns every
    /// runner, in order, with what was in flight freed; or the panics, one message each.
    ///
    /// # Errors
    /// A message per emulation whose lcore panicked.
    pub fn join(mut self) -> Result<Vec<Runner>, Vec<String>> {
        let mut runners = Vec::new();
        let mut panics = Vec::new();
        for (name, p) in std::mem::take(&mut self.list) {
            match p {
                Place::Main(mut r) => {
                    r.discard();
                    runners.push(*r);
                }
                Place::Lcore(mut l) => {
                    let Some(h) = l.handle.take() else { continue };
                    l.stop(dpdk::rdtsc());
                    let lc = h.lcore();
                    let back = h.join().map(|()| l.back.lock().unwrap_or_else(|e| e.into_inner()).take());
                    match back {
                        Ok(Some(r)) => runners.push(r),
                        Ok(None) => panics.push(format!("allreduce {name}: lcore {lc} handed nothing back")),
                        Err(p) => panics.push(format!("allreduce {name}: lcore {lc} panicked: {p}")),
                    }
                }
            }
        }
        if panics.is_empty() {
            Ok(runners)
        } else {
            Err(panics)
        }
    }
}

impl Drop for Emulations {
    /// Stops and waits for the worker lcores not yet joined (a run that ends on an error).
    fn drop(&mut self) {
        for (_, p) in &mut self.list {
            if let Place::Lcore(l) = p {
                if let Some(h) = l.handle.take() {
                    l.stop(dpdk::rdtsc());
                    let _ = h.join();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// `lcore`: loads with a worker lcore of its own; a tx lcore, another emulation's lcore, or an
    /// lcore the EAL does not run are refused, naming the key `allreduce[i].lcore` and what was
    /// expected.
    #[test]
    fn the_lcore_key_is_checked() {
        let (text, app) = super::super::allreduce::tests::example_config();
        let load = |t: &str| super::super::config::load_str(t, Path::new("ar.toml"));
        assert_eq!(load(&text).unwrap().allreduce[0].lcore, None);
        let on1 = text.replace("collective_id = 1\n", "collective_id = 1\nlcore = 1\n");
        let l = load(&on1).unwrap();
        assert_eq!(l.allreduce[0].lcore, Some(1));
        check_lcores(&l.allreduce, &[1], 0, &l.file).unwrap();
        let e = check_lcores(&l.allreduce, &[2, 3], 0, &l.file).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "ar.toml: key `allreduce[0].lcore`: lcore 1 is not a worker lcore of the EAL (workers: [2, 3]; the \
                 main lcore 0"
            ),
            "{e}"
        );
        let tx = on1.replace("duration_s = 60", "duration_s = 60\ntx_lcores = [1]");
        let e = load(&tx).unwrap_err().to_string();
        assert!(
            e.contains("ar.toml: key `allreduce[0].lcore`: lcore 1 is one of [pktgen] tx_lcores [1]: an emulation needs a worker lcore of its own"),
            "{e}"
        );
        // A second emulation on lcore 1 too (on a port of its own).
        let second = on1.clone()
            + "[[port]]\nname = \"m1\"\nvdev = \"net_null1\"\n[[allreduce]]\nport = \"m1\"\nappliance = \""
            + app.to_str().unwrap()
            + "\"\ncollective_id = 1\nlcore = 1\n";
        let e = load(&second).unwrap_err().to_string();
        assert!(
            e.contains("key `allreduce[1].lcore`: allreduce[0] already runs on lcore 1: give each its own lcore"),
            "{e}"
        );
    }

    /// The live counts cross between lcores as words and come back the same, with a latency
    /// and without.
    #[test]
    fn live_counts_round_trip_through_words() {
        let mut c = LiveCounts {
            results: 1,
            payload_bytes: 2,
            right: 3,
            wrong: 4,
            retransmissions: 5,
            timeouts: 6,
            naks: 7,
            tx_full: 8,
            nombuf: 9,
            latency: None,
        };
        assert_eq!(from_words(&to_words(&c)), c);
        c.latency = Some(Latency { min_us: 0.5, p50_us: 1.5, p99_us: 2.5, p999_us: 3.5, max_us: 4.5, mean_us: 1.25 });
        assert_eq!(from_words(&to_words(&c)), c);
    }
}
