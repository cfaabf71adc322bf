//! The control plane of a running appliance: a local unix socket (mode 0600) that answers
//! `dpuctl`'s requests ([`crate::config::update::Request`]) and SIGHUP's reload, on a thread of
//! its own, off the worker lcores.
//!
//! A change is validated and built by the configuration's own builders
//! ([`crate::config::update`]) into a new immutable pipeline and, when the collectives change,
//! a new collective set per worker with all its slot memory ([`CollSwap`]); one copy per worker
//! goes through the worker's [`Mailbox`], the worker switches at a burst boundary (every packet
//! goes through one version, whole), and the old version comes back to be freed here. The
//! request is answered once every worker has switched. Counters of what both versions hold
//! carry over; the collectives the change keeps (same id, same configuration) keep their slot
//! state, moved into the new set by their owner worker. Each connection is read and answered on
//! a thread of its own (a client that sends nothing, or reads slowly, delays no other), and the
//! requests are served one at a time on the control thread, so versions never overlap by more
//! than one.

pub mod mailbox;

use crate::agg::collective::Collective;
use crate::agg::context::AggContext;
use crate::agg::nak::SharedNakLimiter;
use crate::agg::swap::CollSwap;
use crate::agg::CollCounters;
use crate::config::update::{self, parse_request, Built, Fixed, Model, Request, MAX_REQUEST};
use crate::config::{ConfigError, Loaded};
use crate::datapath::PipelineSwap;
use crate::export::Label;
use crate::live;
use crate::table::{Pipeline, PipelineState};
pub use mailbox::{Mailbox, Update};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Set by SIGHUP: the control thread reloads the configuration file.
pub static RELOAD: AtomicBool = AtomicBool::new(false);

/// The control socket's file name, in the EAL runtime directory of the instance.
pub const SOCKET_NAME: &str = "dpu_control.sock";

/// How long a request waits for every worker to switch before it is withdrawn.
const SWITCH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client may take to send its request or read the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most connections read or answered at once; one more is answered at once with an error.
const MAX_CONNECTIONS: usize = 64;

/// How the answer to a request whose handling panicked begins ([`Server::guarded`]).
const INTERNAL_FAULT: &str = "internal fault";

/// A request read from a connection, to be served on the control thread, and where its reply
/// goes (to the connection's thread, which writes it).
struct Pending {
    request: Result<Request, String>,
    reply: std::sync::mpsc::Sender<Value>,
}

/// The running control thread; [`Control::stop`] (or dropping it) ends it.
#[derive(Debug)]
pub struct Control {
    /// The socket's path.
    pub socket: PathBuf,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Control {
    /// Stops serving (a request being served is finished first) and removes the socket.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.halt();
    }
}

/// What the control thread needs to build the workers' collective sets: what the aggregators
/// answer from, the NAK limiter they share, and whether the run has hand-off rings (several
/// workers that started with collectives: gradient packets reach their collective's owner).
#[derive(Debug, Clone)]
pub struct AggSetup {
    /// The aggregators' ports, addresses and worker count.
    pub context: AggContext,
    /// The NAK limiter every worker's aggregator shares.
    pub naks: Arc<SharedNakLimiter>,
    /// The workers hand gradient packets to their collective's owner over rings.
    pub hand_offs: bool,
}

/// What the control thread changes and reads.
struct Server {
    model: Model,
    pipeline: Pipeline,
    /// What changes are validated against.
    fixed: Fixed,
    /// The collectives as running, validated, with the worker owning each.
    colls: Vec<Collective>,
    owners: Vec<u16>,
    agg: AggSetup,
    /// The configuration file, and its contents as the appliance started (or last reloaded)
    /// with it, as TOML: a reload may change only the runtime parts (tables, groups, meters,
    /// collectives).
    config_path: PathBuf,
    running: toml::Table,
    mailboxes: Vec<Arc<Mailbox>>,
    /// Versions installed since the start.
    version: u64,
    quiet: bool,
    /// Why runtime changes are refused for the rest of the run (an update reached only some
    /// workers: one stopped polling; or a panic interrupted an installation).
    broken: Option<String>,
    /// The version being installed from the moment its first copy is posted to a worker until
    /// the control thread has recorded it as running: a panic caught in between
    /// ([`Server::guarded`]) leaves the workers on a version the control thread may not
    /// know, and turns runtime changes off.
    installing: Option<u64>,
}

/// Starts the control thread of a run of `loaded` (read from `config_path`), listening at
/// `socket`; `mailboxes` are the workers', `agg` what their aggregators were built with.
/// Errors: the socket cannot be made, or the configuration file cannot be read again.
pub fn start(
    loaded: &Loaded,
    config_path: &Path,
    socket: &Path,
    mailboxes: Vec<Arc<Mailbox>>,
    agg: AggSetup,
    quiet: bool,
) -> Result<Control, String> {
    let text = std::fs::read_to_string(config_path)
        .map_err(|e| format!("control: cannot read {}: {e}", config_path.display()))?;
    let running: toml::Table = text.parse().map_err(|e| format!("control: {}: {e}", config_path.display()))?;
    // Bound, given its mode and listening under a temporary name, then renamed into place: the
    // socket appears ready, so a client that connects as soon as the file exists (a script, a
    // test) is never refused in the moment between bind(2) and listen(2).
    let name = socket.file_name().map_or_else(|| "control".into(), |n| n.to_string_lossy());
    let tmp = socket.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(socket);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(|e| format!("control: cannot listen on {}: {e}", tmp.display()))?;
    // Only the appliance's user may connect (its owner, from bind).
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("control: cannot set the mode of {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, socket)
        .map_err(|e| format!("control: cannot move {} to {}: {e}", tmp.display(), socket.display()))?;
    listener.set_nonblocking(true).map_err(|e| format!("control: {e}"))?;
    let mut server = Server {
        model: Model::of(loaded),
        pipeline: loaded.pipeline.clone(),
        fixed: Fixed::of(loaded),
        colls: loaded.collectives.clone(),
        // The start's rule (collective i to worker i % workers), as the aggregators were built.
        owners: update::owners(&[], &[], &loaded.collectives, mailboxes.len() as u16),
        agg,
        config_path: config_path.to_path_buf(),
        running,
        mailboxes,
        version: 0,
        quiet,
        broken: None,
        installing: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let halt = stop.clone();
    let handle = std::thread::Builder::new()
        .name("dpu-control".into())
        .spawn(move || server.serve(&listener, halt))
        .map_err(|e| format!("control: cannot start its thread: {e}"))?;
    Ok(Control { socket: socket.to_path_buf(), stop, handle: Some(handle) })
}

impl Server {
    /// Accepts connections until `stop`: each is read and answered on a thread of its own
    /// ([`connection`]), its request served here, one at a time; SIGHUP's reloads between them.
    fn serve(&mut self, listener: &UnixListener, stop: Arc<AtomicBool>) {
        let (requests, pending) = std::sync::mpsc::channel::<Pending>();
        let open = Arc::new(AtomicUsize::new(0));
        while !stop.load(Ordering::Relaxed) {
            if RELOAD.swap(false, Ordering::Relaxed) {
                match self.guarded(|s| s.reload().map_err(|e| e.to_string())) {
                    Ok(v) if !self.quiet => eprintln!("dpu: SIGHUP: {}", v["message"].as_str().unwrap_or("")),
                    Ok(_) => {}
                    // Said by `guarded` already, with what it changed.
                    Err(e) if e.starts_with(INTERNAL_FAULT) => {}
                    // Always said: a reload that did nothing must not pass unnoticed.
                    Err(e) => eprintln!("dpu: SIGHUP: reload refused, nothing changed: {e}"),
                }
            }
            loop {
                match listener.accept() {
                    Ok((s, _)) => accept(s, &requests, &stop, &open),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        eprintln!("dpu: control: accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                        break;
                    }
                }
            }
            // (Never disconnected: `requests` is held here.)
            if let Ok(p) = pending.recv_timeout(Duration::from_millis(10)) {
                let _ = p.reply.send(self.serve_one(p.request));
            }
        }
    }

    /// The reply to one request: `"ok": true` with the result, or `"ok": false` with the error.
    /// A panic while serving it is answered as an internal fault ([`Server::guarded`]) and the
    /// control thread goes on serving the next request.
    fn serve_one(&mut self, request: Result<Request, String>) -> Value {
        match request.and_then(|r| self.guarded(|s| s.handle(r))) {
            Ok(mut v) => {
                v["ok"] = json!(true);
                v
            }
            Err(e) => json!({ "ok": false, "error": e }),
        }
    }

    /// Runs `serve` (one request's or reload's handling) with its panics caught: a fault of the
    /// appliance's own code (every request is validated before anything is built from it, so
    /// none is expected) must cost that request, not the control plane of the whole run. The
    /// panic is an `Err` naming it an internal fault, and said on stderr (after the panic's own
    /// message, from the default hook). Nothing is posted to a worker before every allocation
    /// of a change is made ([`Server::install`]), so a panic before the posting changes nothing;
    /// one after it, while the control thread has not recorded the new version, leaves the
    /// workers and the control thread disagreeing on what runs: further changes are refused for
    /// the run (as when an update reaches only some workers), and the error says so.
    fn guarded(&mut self, serve: impl FnOnce(&mut Self) -> Result<Value, String>) -> Result<Value, String> {
        let why = match caught(|| serve(self)) {
            Ok(served) => return served,
            Err(why) => why,
        };
        let mut error = format!("{INTERNAL_FAULT}: the control thread panicked serving this request ({why})");
        match self.installing.take() {
            Some(version) => {
                self.broken = Some(format!("an internal fault interrupted the installation of version {version}"));
                error +=
                    &format!("; version {version} may have reached the workers: runtime changes are off for this run");
            }
            None => error += "; nothing changed",
        }
        eprintln!("dpu: control: {error}");
        Err(error)
    }

    /// Answers one request.
    fn handle(&mut self, r: Request) -> Result<Value, String> {
        match r {
            Request::Stats {} => {
                let b = live::current().ok_or("the appliance is not running")?;
                let t = b.totals();
                let stats: serde_json::Map<String, Value> = b
                    .metrics
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| matches!(m.label, Label::None | Label::Port(_) | Label::Reason(_)))
                    .map(|(i, _)| (b.key(i), json!(t[i])))
                    .collect();
                let workers: Vec<Value> = (0..b.workers() as u16)
                    .map(|w| {
                        let get = |f: &str| b.total(&t, f, Some(Label::Worker { worker: w, le: None }));
                        json!({
                            "worker": w,
                            "busy_polls": get("worker_busy_polls"),
                            "idle_polls": get("worker_idle_polls"),
                            "bursts": get("worker_bursts"),
                            "burst_cycles": get("worker_burst_cycles"),
                            // Bucket b holds residence times up to 2^b - 1 TSC cycles (0: 0).
                            "residence_cycles_log2": live::worker_hist(&b, &t, w, "worker_packets_by_residence_cycles").0.to_vec(),
                        })
                    })
                    .collect();
                Ok(json!({ "stats": stats, "workers": workers, "version": self.version }))
            }
            Request::Stragglers {} => Ok(json!({ "stragglers": stragglers() })),
            Request::Tables {} => Ok(json!({ "tables": self.tables(), "version": self.version })),
            Request::Groups {} => Ok(json!({ "groups": self.model.groups, "version": self.version })),
            Request::Meters {} => Ok(json!({ "meters": self.model.meters, "version": self.version })),
            Request::Collectives {} => {
                // Per collective, in order: whether its chunks are spread over the workers
                // (chunk k on worker (owner + k) % workers) or all on its owner.
                let sharded: Vec<bool> = self.colls.iter().map(|c| self.agg.context.sharded(c)).collect();
                Ok(json!({
                    "collectives": self.model.collectives,
                    "owners": self.owners,
                    "sharded": sharded,
                    "version": self.version
                }))
            }
            Request::Apply { ops } => {
                let (model, built) = self.model.apply_request(&ops, &self.fixed).map_err(|e| e.to_string())?;
                // A batch that changes nothing (none, or ops that set what runs) installs
                // nothing: the version and every counter and slot stay as they are.
                if model == self.model && built.restarted.is_empty() && built.renewed.is_empty() {
                    return Ok(
                        json!({ "applied": ops.len(), "version": self.version, "removed": [], "unchanged": true }),
                    );
                }
                let removed = self.install(model, built)?;
                Ok(json!({ "applied": ops.len(), "version": self.version, "removed": removed }))
            }
            Request::Reload {} => self.reload().map_err(|e| e.to_string()),
        }
    }

    /// SIGHUP and `dpuctl reload`: the file again, through the same path as a batch.
    fn reload(&mut self) -> Result<Value, ConfigError> {
        let path = self.config_path.clone();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ConfigError::new(&path, "", format!("cannot read the file: {e}")))?;
        let model = update::reload(&self.running, &text, &path)?;
        if model == self.model {
            return Ok(
                json!({ "message": format!("{}: the pipeline is unchanged", path.display()), "version": self.version }),
            );
        }
        let built = model.build(&self.fixed, &path)?;
        let removed = self.install(model, built).map_err(|e| ConfigError::new(&path, "", e))?;
        // The file as now running (only its runtime parts may differ from the last one).
        if let Ok(t) = text.parse() {
            self.running = t;
        }
        Ok(json!({
            "message": format!("{}: reloaded (version {})", path.display(), self.version),
            "version": self.version,
            "removed": removed,
        }))
    }

    /// Makes `built` (of `model`) the running version: a copy of the pipeline to every worker
    /// and, when the collectives change, each worker's new collective set, each switching at
    /// its next burst boundary; returns once all have, having freed the old copies, with what
    /// became of the collectives the change removed or replaced ([`removed`]).
    fn install(&mut self, model: Model, built: Built) -> Result<Vec<Value>, String> {
        if let Some(why) = &self.broken {
            return Err(format!("runtime changes are off for this run: {why}"));
        }
        let Built { pipeline, collectives, restarted, renewed } = built;
        let workers = self.mailboxes.len() as u16;
        let colls_changed = collectives != self.colls || !restarted.is_empty();
        if colls_changed && !collectives.is_empty() && workers > 1 && !self.agg.hand_offs {
            return Err(format!(
                "the appliance runs {workers} workers and started without a collective, so it has no hand-off \
                 rings to bring gradient packets to their collective's worker: restart it with a [[collective]] \
                 (nothing changed)"
            ));
        }
        let keep = update::kept(&self.colls, &collectives, &restarted);
        let owners = update::owners(&self.colls, &self.owners, &collectives, workers);
        // The appliance's clock (µs), as the workers read it: NAK times carry over against it.
        let now_us = crate::dpdk::rdtsc() / (crate::dpdk::tsc_hz() / 1_000_000).max(1);
        let naks = colls_changed.then(|| self.agg.naks.successor(&collectives, now_us));
        let carry = Arc::new(update::carry(&self.model, &self.pipeline, &model, &pipeline, &renewed));
        let fresh = PipelineState::new(&pipeline);
        let board = live::current().map(|b| {
            let b = b
                .reshaped(&fresh, pipeline.tables.iter().map(|t| t.name.clone()).collect())
                .with_entry_keys(model.tables.iter().map(|t| t.entry_labels()).collect());
            if colls_changed {
                let shape: Vec<(u16, usize)> = collectives.iter().map(|c| (c.id, c.workers())).collect();
                Arc::new(b.with_collectives(&shape))
            } else {
                Arc::new(b)
            }
        });
        let version = self.version + 1;
        // A late give-back of an earlier update (none normally) is freed first.
        for m in &self.mailboxes {
            drop(m.collect());
        }
        // Every worker's copy, with all its slot memory, is built before any is posted: should
        // building one fail (a panic, caught by [`Server::guarded`]), no worker has switched.
        let updates: Vec<Update> = (0..self.mailboxes.len())
            .map(|i| {
                let agg = colls_changed.then(|| {
                    CollSwap::new(
                        &self.agg.context,
                        i as u16,
                        &collectives,
                        &owners,
                        &keep,
                        self.colls.len(),
                        naks.clone(),
                    )
                });
                let swap = PipelineSwap::new(pipeline.clone(), carry.clone());
                Update { swap, agg, board: board.clone(), version }
            })
            .collect();
        self.installing = Some(version);
        let installed = self.switch(updates, board, version, model, pipeline, collectives, owners, naks);
        self.installing = None;
        installed
    }

    /// [`Server::install`] from the posting on: `updates` (one per worker, in order) to the
    /// workers, then, once each has switched to `version` and given back its old one, the new
    /// version recorded as running (`board` published, `model`, `pipeline`, `collectives` with
    /// their `owners`, and the NAK limiter `naks` if the collectives changed); the collectives
    /// the change removed or replaced ([`removed`]).
    #[allow(clippy::too_many_arguments)]
    fn switch(
        &mut self,
        updates: Vec<Update>,
        board: Option<Arc<live::Board>>,
        version: u64,
        model: Model,
        pipeline: Pipeline,
        collectives: Vec<Collective>,
        owners: Vec<u16>,
        naks: Option<Arc<SharedNakLimiter>>,
    ) -> Result<Vec<Value>, String> {
        for (i, (m, u)) in self.mailboxes.iter().zip(updates).enumerate() {
            if m.post(Box::new(u)).is_err() {
                // Cannot happen while requests are served one at a time: take back what was
                // posted, so that no worker switches.
                let taken = self.mailboxes[..i].iter().filter(|m| m.withdraw().is_none()).count();
                if taken > 0 {
                    self.broken = Some(format!("version {version} reached only some workers"));
                }
                return Err(format!("worker {i} still holds an earlier update; nothing changed"));
            }
        }
        let start = Instant::now();
        let mut back = vec![false; self.mailboxes.len()];
        // The old versions, given back: read (what the removed collectives left), then freed.
        let mut old = Vec::new();
        while back.iter().any(|b| !b) {
            for (m, b) in self.mailboxes.iter().zip(back.iter_mut()) {
                if !*b {
                    if let Some(u) = m.collect().filter(|u| u.version == version) {
                        old.push(u);
                        *b = true;
                    }
                }
            }
            if start.elapsed() > SWITCH_TIMEOUT {
                // A worker that stopped polling (it panicked: the run fails anyway). Those that
                // did not take the update are withdrawn; if others switched, the workers now
                // run different versions, and later changes are refused.
                let late: Vec<usize> = (0..back.len()).filter(|&i| !back[i]).collect();
                let untaken = late.iter().filter(|&&i| self.mailboxes[i].withdraw().is_some()).count();
                let why =
                    format!("worker(s) {late:?} did not reach a burst boundary within {} s", SWITCH_TIMEOUT.as_secs());
                if untaken < back.len() {
                    self.broken = Some(format!("{why}; the workers run different versions"));
                }
                return Err(format!("{why}; nothing changed on them"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Some(b) = board {
            live::set_current(Some(b));
        }
        let removed = removed(&self.colls, &collectives, &old);
        if !self.quiet {
            for r in &removed {
                eprintln!(
                    "dpu: collective {} {}: {} round(s) in progress discarded",
                    r["collective"],
                    if r["replaced"] == json!(true) { "replaced" } else { "removed" },
                    r["rounds_discarded"]
                );
            }
        }
        drop(old);
        self.model = model;
        self.pipeline = pipeline;
        self.colls = collectives;
        self.owners = owners;
        if let Some(n) = naks {
            self.agg.naks = n;
        }
        self.version = version;
        Ok(removed)
    }

    /// The tables as running, with each entry's and miss's packets and bytes summed over the
    /// workers (as last published).
    fn tables(&self) -> Value {
        let counts = live::current().map(|b| {
            let t = b.totals();
            let mut c = std::collections::HashMap::new();
            for (i, m) in b.metrics.iter().enumerate() {
                if let Label::Entry { table, entry } = m.label {
                    c.insert((table, entry, m.family), t[i]);
                }
            }
            c
        });
        let count = |t: usize, e: Option<u32>, family: &'static str| {
            counts.as_ref().and_then(|c| c.get(&(t as u16, e, family)).copied()).unwrap_or(0)
        };
        let tables: Vec<Value> = self
            .model
            .tables
            .iter()
            .enumerate()
            .map(|(t, tc)| {
                let entries: Vec<Value> = tc
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(e, ec)| {
                        let mut v = serde_json::to_value(ec).unwrap_or(Value::Null);
                        v["packets"] = json!(count(t, Some(e as u32), "table_packets"));
                        v["bytes"] = json!(count(t, Some(e as u32), "table_bytes"));
                        v
                    })
                    .collect();
                json!({
                    "name": tc.name,
                    "key": tc.key,
                    "default_action": tc.default_action,
                    "entries": entries,
                    "miss": { "packets": count(t, None, "table_packets"), "bytes": count(t, None, "table_bytes") },
                })
            })
            .collect();
        Value::Array(tables)
    }
}

/// `f`'s value, or the text of the panic that ended it (the control thread's safety net: see
/// [`Server::guarded`]). The default panic hook has said where it happened on stderr by then.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    // Unwind-safe enough: the state `f` may leave half-changed is the control thread's own, and
    // its callers either change it only after the last step that may fail or turn changes off.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| crate::dpdk::lcore::panic_text(&*p))
}

/// A connection accepted: read and answered on a thread of its own ([`connection`]), unless
/// [`MAX_CONNECTIONS`] are open already (then answered at once with an error).
fn accept(s: UnixStream, requests: &std::sync::mpsc::Sender<Pending>, stop: &Arc<AtomicBool>, open: &Arc<AtomicUsize>) {
    // Reads what the client sends (for 100 ms at most, up to MAX_REQUEST bytes), so that it can
    // finish sending and read the refusal instead of finding the socket closed, then refuses.
    let refuse = |mut s: UnixStream, why: String| {
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
        let (until, mut got, mut chunk) = (Instant::now() + Duration::from_millis(100), 0, [0u8; 65536]);
        while Instant::now() < until && got <= MAX_REQUEST {
            match s.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {}
            }
        }
        let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = writeln!(s, "{}", json!({ "ok": false, "error": why }));
    };
    if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
        open.fetch_sub(1, Ordering::Relaxed);
        return refuse(s, format!("busy: {MAX_CONNECTIONS} connections are open already; try again"));
    }
    // Counted open until the connection's thread ends, however it ends (or never starts).
    let held = Open(open.clone());
    let (requests, stop) = (requests.clone(), stop.clone());
    let Ok(copy) = s.try_clone() else {
        drop(held);
        return refuse(s, "cannot serve the connection".into());
    };
    let spawned = std::thread::Builder::new().name("dpu-control-conn".into()).spawn(move || {
        let _held = held;
        connection(s, &requests, &stop);
    });
    if let Err(e) = spawned {
        refuse(copy, format!("cannot start a thread for the connection: {e}"));
    }
}

/// One open connection, counted in the shared count until dropped.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reads one request from `s` (until the client shuts its side, at most [`MAX_REQUEST`]
/// bytes, within [`CLIENT_TIMEOUT`] in all, and no longer once a stop is asked), has the
/// control thread serve it (through `requests`) and writes its JSON reply and a newline.
fn connection(mut s: UnixStream, requests: &std::sync::mpsc::Sender<Pending>, stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let read = loop {
        if stop.load(Ordering::Relaxed) {
            break Err("the appliance is stopping".to_string());
        }
        if Instant::now() > deadline {
            break Err(format!("the request took more than {} s to arrive", CLIENT_TIMEOUT.as_secs()));
        }
        match s.read(&mut chunk) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_REQUEST {
                    break Ok(());
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(format!("reading the request: {e}")),
        }
    };
    let (reply, answer) = std::sync::mpsc::channel();
    let stopping = || json!({ "ok": false, "error": "the appliance is stopping" });
    let v = match read {
        Err(e) => json!({ "ok": false, "error": e }),
        Ok(()) => match requests.send(Pending { request: parse_request(&buf), reply }) {
            Ok(()) => answer.recv().unwrap_or_else(|_| stopping()),
            Err(_) => stopping(),
        },
    };
    let _ = writeln!(s, "{v}");
    if buf.len() > MAX_REQUEST {
        // Read (and drop) what the client still sends, for a second at most, so that the
        // socket is not reset under the reply it has not read yet.
        let _ = s.shutdown(std::net::Shutdown::Write);
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            match s.read(&mut chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
    }
}

/// What became of the collectives of `old` that `new` does not keep (removed, or replaced by a
/// changed configuration), from the sets the workers gave back (`given`): per collective its
/// id, whether `new` has a collective of that id (`replaced`), the rounds it had in progress,
/// discarded (`rounds_discarded`: its slots in use, summed over the workers), and its last
/// counters ([`CollCounters`], summed: only its owner, or the workers holding a sharded
/// collective's chunks, counted).
fn removed(old: &[Collective], new: &[Collective], given: &[Box<Update>]) -> Vec<Value> {
    let mut left: Vec<(u16, CollCounters, u64)> = Vec::new();
    for (id, c, in_use) in given.iter().filter_map(|u| u.agg.as_ref()).flat_map(|s| s.left()) {
        match left.iter_mut().find(|(x, _, _)| *x == id) {
            Some((_, sum, n)) => {
                sum.add(c);
                *n += in_use;
            }
            None => left.push((id, *c, in_use)),
        }
    }
    // In the old set's order.
    left.sort_by_key(|(id, _, _)| old.iter().position(|o| o.id == *id));
    left.into_iter()
        .map(|(id, c, in_use)| {
            json!({
                "collective": id,
                "replaced": new.iter().any(|n| n.id == id),
                "rounds_discarded": in_use,
                "counters": c,
            })
        })
        .collect()
}

/// Each collective's straggler view from the live board: per rank its contributions, their mean
/// lateness (µs) and the rounds it completed, and the rank that completed the most.
fn stragglers() -> Value {
    let Some(b) = live::current() else { return Value::Array(Vec::new()) };
    let t = b.totals();
    // (collective, per rank [contributions, lateness sum, completed last]), in walk order.
    let mut colls: Vec<(u16, Vec<[u64; 3]>)> = Vec::new();
    for (i, m) in b.metrics.iter().enumerate() {
        let Label::Rank { collective, rank } = m.label else { continue };
        if colls.last().is_none_or(|(c, _)| *c != collective) {
            colls.push((collective, Vec::new()));
        }
        let ranks = &mut colls.last_mut().expect("pushed").1;
        if ranks.len() <= rank as usize {
            ranks.resize(rank as usize + 1, [0; 3]);
        }
        let k = match m.family {
            "agg_rank_contributions" => 0,
            "agg_rank_lateness_sum_us" => 1,
            _ => 2,
        };
        ranks[rank as usize][k] = t[i];
    }
    let out: Vec<Value> = colls
        .into_iter()
        .map(|(id, ranks)| {
            let slowest = ranks.iter().enumerate().filter(|(_, r)| r[2] > 0).max_by_key(|(_, r)| r[2]).map(|(i, _)| i);
            let rows: Vec<Value> = ranks
                .iter()
                .enumerate()
                .map(|(rank, [n, sum, last])| {
                    let mean = if *n > 0 { *sum as f64 / *n as f64 } else { 0.0 };
                    json!({ "rank": rank, "contributions": n, "late_mean_us": mean, "completed_last": last })
                })
                .collect();
            json!({ "collective": id, "slowest_rank": slowest, "ranks": rows })
        })
        .collect();
    Value::Array(out)
}

/// Installs the appliance's signal handlers: SIGINT and SIGTERM ask for a stop
/// ([`crate::stop::ask_stop`]), SIGHUP for a reload of the configuration file ([`RELOAD`]).
/// Each handler is one atomic store.
pub fn install_signal_handlers() -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for sig in [SIGINT, SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { signal_hook::low_level::register(sig, crate::stop::ask_stop) }
            .map_err(|e| format!("cannot install the handler of signal {sig}: {e}"))?;
    }
    // SAFETY: as above.
    unsafe { signal_hook::low_level::register(SIGHUP, || RELOAD.store(true, Ordering::Relaxed)) }
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control thread's state for an appliance of `text` (one port with an address,
    /// collective 7) with no worker: enough to serve reads and validate changes.
    fn server(text: &str) -> Server {
        let path = Path::new("dpu.toml");
        let loaded = crate::config::load_str(text, path).unwrap_or_else(|e| panic!("{e}"));
        let ports = vec![crate::agg::PortAddr { mac: Default::default(), ipv4: loaded.port_ipv4[0], ipv6: None }];
        Server {
            model: Model::of(&loaded),
            pipeline: loaded.pipeline.clone(),
            fixed: Fixed::of(&loaded),
            colls: loaded.collectives.clone(),
            owners: update::owners(&[], &[], &loaded.collectives, 1),
            agg: AggSetup {
                context: AggContext {
                    ports,
                    gradient_udp_port: crate::wire::gradient::DEFAULT_UDP_PORT,
                    appliance_qpn: 1,
                    workers: 1,
                    shard: false,
                    zero_copy_results: false,
                },
                naks: Arc::new(SharedNakLimiter::with_members([])),
                hand_offs: false,
            },
            config_path: path.to_path_buf(),
            running: text.parse().unwrap(),
            mailboxes: Vec::new(),
            version: 0,
            quiet: true,
            broken: None,
            installing: None,
        }
    }

    const CONF: &str = "[[port]]\nvdev = \"net_null0\"\nipv4 = \"10.0.0.254\"\n\
        [[collective]]\ncollective_id = 7\nop = \"sum\"\ndtype = \"f32\"\ntensor_elements = 8\nchunk_elements = 4\n\
        [[collective.member]]\nrank = 0\nip = \"10.0.0.1\"\nmac = \"02:00:00:00:01:00\"\nudp_port = 5\n";

    /// The collective ids a `collectives` reply lists, and its version.
    fn listed(v: &Value) -> (Vec<u64>, u64) {
        assert_eq!(v["ok"], true, "{v}");
        let ids = v["collectives"].as_array().unwrap().iter().map(|c| c["collective_id"].as_u64().unwrap()).collect();
        (ids, v["version"].as_u64().unwrap())
    }

    /// A panic while serving one request is that request's error, naming an internal fault and
    /// the panic; the next request is served as if nothing happened.
    #[test]
    fn a_panic_serving_a_request_is_its_error_and_the_next_one_is_served() {
        let mut s = server(CONF);
        let e = s.guarded(|_| panic!("capacity overflow")).unwrap_err();
        assert_eq!(
            e,
            "internal fault: the control thread panicked serving this request (capacity overflow); nothing changed"
        );
        assert_eq!(s.broken, None, "a panic before any posting changes nothing");
        assert_eq!(listed(&s.serve_one(Ok(Request::Collectives {}))), (vec![7], 0));
        // A malformed request is still an error of its own.
        let v = s.serve_one(parse_request(br#"{"cmd":"nope"}"#));
        assert!(v["ok"] == false && v["error"].as_str().unwrap().contains("unknown variant `nope`"), "{v}");
    }

    /// A panic once a version may have reached the workers (between its posting and its
    /// record as running) turns runtime changes off, saying so; reads go on.
    #[test]
    fn a_panic_mid_installation_turns_changes_off_and_reads_go_on() {
        let mut s = server(CONF);
        let e = s
            .guarded(|s| {
                s.installing = Some(1);
                panic!("late")
            })
            .unwrap_err();
        assert_eq!(
            e,
            "internal fault: the control thread panicked serving this request (late); version 1 may have reached \
             the workers: runtime changes are off for this run"
        );
        assert_eq!(
            (s.installing, s.broken.as_deref()),
            (None, Some("an internal fault interrupted the installation of version 1"))
        );
        let v = s.serve_one(parse_request(br#"{"cmd":"apply","ops":[{"op":"delete_collective","id":7}]}"#));
        assert_eq!(
            v,
            json!({ "ok": false, "error": "runtime changes are off for this run: an internal fault interrupted the installation of version 1" })
        );
        assert_eq!(listed(&s.serve_one(Ok(Request::Collectives {}))), (vec![7], 0));
    }

    /// The additions that once passed with a wrapped memory count (and panicked the control
    /// thread allocating their slots) are refused by validation, naming the operation's key;
    /// nothing changes.
    #[test]
    fn unaddressable_collectives_are_refused_at_runtime() {
        let mut s = server(CONF);
        for (tensor, chunk, last) in
            [((1u64 << 61) + 1000, 1u32, 2305843009213694951u64), ((1 << 32) + 256, 256, 1 << 32)]
        {
            let req = format!(
                r#"{{"cmd":"apply","ops":[{{"op":"add_collective","collective":{{"collective_id":9,"op":"sum","dtype":"f32","tensor_elements":{tensor},"chunk_elements":{chunk},"member":[{{"rank":0,"ip":"10.0.0.2","udp_port":5,"mac":"02:00:00:00:01:01"}}]}}}}]}}"#
            );
            let v = s.serve_one(parse_request(req.as_bytes()));
            let want = format!(
                "request: key `ops[0].collective.tensor_elements`: expected at most 4294967296 elements in chunks of \
                 {chunk}: the last chunk would start at offset {last}, beyond 4294967295, the most the gradient \
                 header's 32-bit tensor_offset carries (spec section 2); found {tensor}"
            );
            assert_eq!(v, json!({ "ok": false, "error": want }));
            assert_eq!(listed(&s.serve_one(Ok(Request::Collectives {}))), (vec![7], 0));
        }
    }
}
