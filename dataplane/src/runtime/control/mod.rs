//! The control plane of a running appliance: a local unix socket (mode 0600) that answers
//! `dpuctl`'s requests ([`crate::config::update::Request`]) and SIGHUP's reload, on a thread of
//! its own, off the worker lcores.
//!
//! A change is validated and built by the configuration's own builders
//! ([`crate::config::update`]) into a new immutable pipeline; one copy per worker goes through
//! the worker's [`Mailbox`], the worker switches at a burst boundary (every packet goes through
//! one version, whole), and the old version comes back to be freed here. The request is
//! answered once every worker has switched. Counters of what both versions hold carry over.
//! Requests are served one at a time, so versions never overlap by more than one.

pub mod mailbox;

use crate::config::update::{self, parse_request, Model, Request, MAX_REQUEST};
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
use std::sync::atomic::{AtomicBool, Ordering};
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

/// What the control thread changes and reads.
struct Server {
    model: Model,
    pipeline: Pipeline,
    ports: u16,
    aggregator: bool,
    /// The configuration file, and its contents as the appliance started (or last reloaded)
    /// with it, as TOML: a reload may change only the pipeline part.
    config_path: PathBuf,
    running: toml::Table,
    collectives: Value,
    mailboxes: Vec<Arc<Mailbox>>,
    /// Versions installed since the start.
    version: u64,
    quiet: bool,
    /// Why runtime changes are refused for the rest of the run (an update reached only some
    /// workers: one stopped polling).
    broken: Option<String>,
}

/// Starts the control thread of a run of `loaded` (read from `config_path`), listening at
/// `socket`; `mailboxes` are the workers'. Errors: the socket cannot be made, or the
/// configuration file cannot be read again.
pub fn start(
    loaded: &Loaded,
    config_path: &Path,
    socket: &Path,
    mailboxes: Vec<Arc<Mailbox>>,
    quiet: bool,
) -> Result<Control, String> {
    let text = std::fs::read_to_string(config_path)
        .map_err(|e| format!("control: cannot read {}: {e}", config_path.display()))?;
    let running: toml::Table = text.parse().map_err(|e| format!("control: {}: {e}", config_path.display()))?;
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).map_err(|e| format!("control: cannot listen on {}: {e}", socket.display()))?;
    // Only the appliance's user may connect (its owner, from bind).
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("control: cannot set the mode of {}: {e}", socket.display()))?;
    listener.set_nonblocking(true).map_err(|e| format!("control: {e}"))?;
    let mut server = Server {
        model: Model::of(loaded),
        pipeline: loaded.pipeline.clone(),
        ports: loaded.config.ports.len() as u16,
        aggregator: !loaded.collectives.is_empty(),
        config_path: config_path.to_path_buf(),
        running,
        collectives: serde_json::to_value(&loaded.config.collectives).unwrap_or(Value::Null),
        mailboxes,
        version: 0,
        quiet,
        broken: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let halt = stop.clone();
    let handle = std::thread::Builder::new()
        .name("dpu-control".into())
        .spawn(move || server.serve(&listener, &halt))
        .map_err(|e| format!("control: cannot start its thread: {e}"))?;
    Ok(Control { socket: socket.to_path_buf(), stop, handle: Some(handle) })
}

impl Server {
    fn serve(&mut self, listener: &UnixListener, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            if RELOAD.swap(false, Ordering::Relaxed) {
                match self.reload() {
                    Ok(v) if !self.quiet => eprintln!("dpu: SIGHUP: {}", v["message"].as_str().unwrap_or("")),
                    Ok(_) => {}
                    // Always said: a reload that did nothing must not pass unnoticed.
                    Err(e) => eprintln!("dpu: SIGHUP: reload refused, nothing changed: {e}"),
                }
            }
            match listener.accept() {
                Ok((s, _)) => self.client(s, stop),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => {
                    eprintln!("dpu: control: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Reads one request from `s` (until the client shuts its side, at most [`MAX_REQUEST`]
    /// bytes, within [`CLIENT_TIMEOUT`] in all, and no longer once a stop is asked) and writes
    /// one JSON reply and a newline.
    fn client(&mut self, mut s: UnixStream, stop: &AtomicBool) {
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
        let reply = read.and_then(|()| parse_request(&buf)).and_then(|r| self.handle(r));
        let v = match reply {
            Ok(mut v) => {
                v["ok"] = json!(true);
                v
            }
            Err(e) => json!({ "ok": false, "error": e }),
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
            Request::Collectives {} => Ok(json!({ "collectives": self.collectives })),
            Request::Apply { ops } => {
                let (model, pipeline) =
                    self.model.apply_request(&ops, self.ports, self.aggregator).map_err(|e| e.to_string())?;
                self.install(model, pipeline)?;
                Ok(json!({ "applied": ops.len(), "version": self.version }))
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
        let pipeline = model.build(self.ports, self.aggregator, &path)?;
        self.install(model, pipeline).map_err(|e| ConfigError::new(&path, "", e))?;
        // The file as now running (only its pipeline part may differ from the last one).
        if let Ok(t) = text.parse() {
            self.running = t;
        }
        Ok(json!({
            "message": format!("{}: reloaded (version {})", path.display(), self.version),
            "version": self.version,
        }))
    }

    /// Makes `pipeline` (of `model`) the running version: a copy to every worker, each switching
    /// at its next burst boundary; returns once all have, having freed the old copies.
    fn install(&mut self, model: Model, pipeline: Pipeline) -> Result<(), String> {
        if let Some(why) = &self.broken {
            return Err(format!("runtime changes are off for this run: {why}"));
        }
        let carry = Arc::new(update::carry(&self.model, &self.pipeline, &model, &pipeline));
        let fresh = PipelineState::new(&pipeline);
        let board = live::current()
            .map(|b| Arc::new(b.reshaped(&fresh, pipeline.tables.iter().map(|t| t.name.clone()).collect())));
        let version = self.version + 1;
        // A late give-back of an earlier update (none normally) is freed first.
        for m in &self.mailboxes {
            drop(m.collect());
        }
        for (i, m) in self.mailboxes.iter().enumerate() {
            let u = Update { swap: PipelineSwap::new(pipeline.clone(), carry.clone()), board: board.clone(), version };
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
        while back.iter().any(|b| !b) {
            for (m, b) in self.mailboxes.iter().zip(back.iter_mut()) {
                if !*b {
                    // The old version comes back in the box, and is freed here.
                    *b = m.collect().is_some_and(|u| u.version == version);
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
        self.model = model;
        self.pipeline = pipeline;
        self.version = version;
        Ok(())
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
/// ([`crate::worker::ask_stop`]), SIGHUP for a reload of the configuration file ([`RELOAD`]).
/// Each handler is one atomic store.
pub fn install_signal_handlers() -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for sig in [SIGINT, SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { signal_hook::low_level::register(sig, crate::worker::ask_stop) }
            .map_err(|e| format!("cannot install the handler of signal {sig}: {e}"))?;
    }
    // SAFETY: as above.
    unsafe { signal_hook::low_level::register(SIGHUP, || RELOAD.store(true, Ordering::Relaxed)) }
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    Ok(())
}
