//! `dpuctl`: controls a running `dpu` appliance over its control socket.
//!
//! ```text
//! dpuctl stats                                   counters, summed over the workers
//! dpuctl tables [NAME]                           tables, entries, actions and their counts
//! dpuctl groups | meters | collectives           as running
//! dpuctl stragglers                              which rank each collective waits for
//! dpuctl add l2 --key 02:00:00:00:00:09 --action 'forward(1)'
//! dpuctl modify l2 --key 02:00:00:00:00:09 --action 'forward(0)'   counts kept
//! dpuctl delete l2 --key 02:00:00:00:00:09
//! dpuctl default l2 flood                        a table's default action
//! dpuctl collective add coll.toml                its [[collective]] tables, all added or none
//! dpuctl collective modify coll.toml             replaced by collective_id: they start afresh
//! dpuctl collective delete 7                     its rounds in progress are discarded
//! dpuctl batch changes.toml                      [[op]] tables, all applied or none
//! dpuctl reload                                  the config file again (as SIGHUP)
//! dpuctl watch [--plain] [--count N]             rates, load and drops, live (q to stop)
//! ```
//! The socket is `dpu_control.sock` in the appliance's EAL runtime directory, which `dpu`
//! prints at start; `-s PATH` names it, `-f PREFIX` names the instance (its EAL file prefix,
//! `dpu-<pid>` by default), and without either the only running instance is used.
//!
//! The protocol: one JSON object per connection (`{"cmd": "apply", "ops": [...]}`), the
//! client's write side shut, one JSON line back with `"ok"`. Exit status: 0 done, 1 refused or
//! unreachable (the reason on stderr), 2 a bad command line or batch file.

mod watch;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};
use std::io::Read;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The control socket's file name in an instance's EAL runtime directory.
const SOCKET_NAME: &str = "dpu_control.sock";

/// Controls a running dpu appliance: counters, tables, groups, meters, collectives, atomic
/// changes, reload.
#[derive(Parser, Debug)]
#[command(name = "dpuctl", version, about)]
struct Cli {
    /// The control socket (as `dpu` printed it at start).
    #[arg(short, long, value_name = "PATH", conflicts_with = "prefix")]
    socket: Option<PathBuf>,
    /// The instance: its EAL file prefix (`dpu-<pid>` unless its config sets one).
    #[arg(short = 'f', long = "prefix", value_name = "PREFIX")]
    prefix: Option<String>,
    /// Print the appliance's JSON reply as is.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Counters: ports, drops by reason, neighbour, aggregation (summed over the workers).
    Stats,
    /// Tables with their entries, actions and packet and byte counts.
    Tables {
        /// Only this table.
        name: Option<String>,
    },
    /// Multicast groups.
    Groups,
    /// Meters.
    Meters,
    /// Collectives, as running.
    Collectives,
    /// Adds, replaces or deletes collectives (spec section 3), all or nothing.
    Collective {
        #[command(subcommand)]
        cmd: CollectiveCmd,
    },
    /// Which rank each collective waits for: per rank its contributions, how late they came
    /// after their round's first one (mean), and the rounds it completed.
    Stragglers,
    /// Adds an entry to a table.
    Add(EntryArgs),
    /// Gives an existing entry (found by key and priority) a new action; its counts stay.
    Modify(EntryArgs),
    /// Deletes an entry (found by key and priority).
    Delete {
        /// The table.
        table: String,
        /// One value per key field, in key order (as in the config file).
        #[arg(long = "key", required = true, value_name = "VALUE")]
        key: Vec<String>,
        /// For tables with ternary or range fields.
        #[arg(long)]
        priority: Option<i32>,
    },
    /// Sets a table's default action (run on a miss).
    Default {
        /// The table.
        table: String,
        /// The action list, like `drop` or `forward(1)`.
        action: String,
    },
    /// Applies a file of operations (TOML `[[op]]` tables, or JSON), all or nothing.
    Batch {
        /// The file (`.json` is read as JSON, anything else as TOML).
        file: PathBuf,
    },
    /// Reloads the appliance's config file, as SIGHUP does.
    Reload,
    /// A live view: per port rx/tx rates, per worker lcore its load, cycles per burst and
    /// residence time, rounds completed, drops; full screen on a terminal (q, Esc or Ctrl-C to
    /// stop), text otherwise.
    Watch {
        /// Seconds between refreshes, from 0.1 (the appliance publishes its counters every
        /// 100 ms) to 86400.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many refreshes.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Print text, one block per refresh, even on a terminal.
        #[arg(long)]
        plain: bool,
    },
    /// Sends a request given as JSON and prints the reply (for scripts).
    Raw {
        /// The request, like '{"cmd":"stats"}'.
        request: String,
    },
}

#[derive(Subcommand, Debug)]
enum CollectiveCmd {
    /// Adds the collectives of a file: `[[collective]]` tables as in the config file (TOML), or
    /// JSON objects with the same keys (one, or an array). Their ids must be new; their slots
    /// must fit the memory limit with the collectives kept.
    Add {
        /// The file (`.json` is read as JSON, anything else as TOML).
        file: PathBuf,
    },
    /// Replaces the collectives of a file, each found by its `collective_id`: each starts
    /// afresh (no round in progress, no kept result, counters at 0).
    Modify {
        /// The file (`.json` is read as JSON, anything else as TOML).
        file: PathBuf,
    },
    /// Deletes collectives: their rounds in progress are discarded, and their packets are then
    /// refused as an unknown collective's (NAK reason 1).
    Delete {
        /// The collectives' ids.
        #[arg(required = true)]
        ids: Vec<u16>,
    },
}

#[derive(clap::Args, Debug)]
struct EntryArgs {
    /// The table.
    table: String,
    /// One value per key field, in key order (as in the config file).
    #[arg(long = "key", required = true, value_name = "VALUE")]
    key: Vec<String>,
    /// The action list, like `set_dscp(46); forward(1)`.
    #[arg(long)]
    action: String,
    /// For tables with ternary or range fields (larger wins).
    #[arg(long)]
    priority: Option<i32>,
}

impl EntryArgs {
    fn entry(&self) -> Value {
        let mut e = json!({ "key": self.key, "action": self.action });
        if let Some(p) = self.priority {
            e["priority"] = json!(p);
        }
        e
    }
}

/// Why a command failed: a bad command line (exit status 2), or a refusal or an unreachable
/// appliance (1).
enum Failure {
    Usage(String),
    Refused(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Refused(e)
    }
}

fn main() -> ExitCode {
    // Output piped into `head` ends quietly, as other command-line tools do.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("dpuctl: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Refused(e)) => {
            eprintln!("dpuctl: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let socket = find_socket(cli.socket.as_deref(), cli.prefix.as_deref())?;
    let apply = |ops: Value| json!({ "cmd": "apply", "ops": ops });
    // The file the operations come from, and how it holds them: a refusal names its keys.
    let mut from: Option<(&Path, Shape)> = None;
    let request = match &cli.cmd {
        Cmd::Stats => json!({ "cmd": "stats" }),
        Cmd::Tables { .. } => json!({ "cmd": "tables" }),
        Cmd::Groups => json!({ "cmd": "groups" }),
        Cmd::Meters => json!({ "cmd": "meters" }),
        Cmd::Collectives => json!({ "cmd": "collectives" }),
        Cmd::Stragglers => json!({ "cmd": "stragglers" }),
        Cmd::Add(a) => apply(json!([{ "op": "add_entry", "table": a.table, "entry": a.entry() }])),
        Cmd::Modify(a) => apply(json!([{ "op": "modify_entry", "table": a.table, "entry": a.entry() }])),
        Cmd::Delete { table, key, priority } => {
            let mut op = json!({ "op": "delete_entry", "table": table, "key": key });
            if let Some(p) = priority {
                op["priority"] = json!(p);
            }
            apply(json!([op]))
        }
        Cmd::Default { table, action } => {
            apply(json!([{ "op": "set_default_action", "table": table, "action": action }]))
        }
        Cmd::Batch { file } => {
            let (ops, shape) = read_batch(file).map_err(Failure::Usage)?;
            from = Some((file.as_path(), shape));
            apply(ops)
        }
        Cmd::Collective { cmd: CollectiveCmd::Add { file } } => {
            let (ops, shape) = collective_ops("add_collective", file).map_err(Failure::Usage)?;
            from = Some((file.as_path(), shape));
            apply(ops)
        }
        Cmd::Collective { cmd: CollectiveCmd::Modify { file } } => {
            let (ops, shape) = collective_ops("modify_collective", file).map_err(Failure::Usage)?;
            from = Some((file.as_path(), shape));
            apply(ops)
        }
        Cmd::Collective { cmd: CollectiveCmd::Delete { ids } } => {
            apply(ids.iter().map(|id| json!({ "op": "delete_collective", "id": id })).collect())
        }
        Cmd::Reload => json!({ "cmd": "reload" }),
        Cmd::Watch { interval, count, plain } => {
            let interval = watch_interval(*interval).map_err(Failure::Usage)?;
            let fetch = || {
                let r = call(&socket, &json!({ "cmd": "stats" }))?;
                if r["ok"] != true {
                    return Err(error_of(&r));
                }
                Ok(watch::Sample::of_reply(&r))
            };
            return Ok(watch::run(&socket, interval, *count, *plain, fetch)?);
        }
        Cmd::Raw { request } => {
            serde_json::from_str(request).map_err(|e| Failure::Usage(format!("the request is not JSON: {e}")))?
        }
    };
    let mut reply = call(&socket, &request)?;
    // `get_mut`, not indexing: `reply["tables"]` on an object without it would insert a null
    // (which `raw` and `--json` then print).
    if let Cmd::Tables { name: Some(n) } = &cli.cmd {
        if let Some(all) = reply.get_mut("tables").and_then(serde_json::Value::as_array_mut) {
            all.retain(|t| t["name"] == n.as_str());
        }
    }
    if cli.json || matches!(cli.cmd, Cmd::Raw { .. }) {
        println!("{reply}");
        return if reply["ok"] == true { Ok(()) } else { Err(error_of(&reply).into()) };
    }
    if reply["ok"] != true {
        let e = error_of(&reply);
        return Err(match from {
            Some((file, shape)) => in_file(&e, file, shape),
            None => e,
        }
        .into());
    }
    match &cli.cmd {
        Cmd::Stats => print_stats(&reply["stats"]),
        Cmd::Tables { name } => print_tables(&reply["tables"], name.as_deref())?,
        Cmd::Groups => print!("{}", list_toml(&reply["groups"], "multicast_group")),
        Cmd::Meters => print!("{}", list_toml(&reply["meters"], "meter")),
        Cmd::Collectives => print!("{}", collectives_toml(&reply)),
        Cmd::Stragglers => print_stragglers(&reply["stragglers"]),
        Cmd::Reload => println!("{}", reply["message"].as_str().unwrap_or("reloaded")),
        _ if reply["unchanged"] == true => {
            println!("applied {} operation(s): nothing changed, still version {}", reply["applied"], reply["version"])
        }
        _ => println!("applied {} operation(s): version {}", reply["applied"], reply["version"]),
    }
    // What the collectives removed or replaced left (their rounds in progress are discarded).
    for r in reply["removed"].as_array().into_iter().flatten() {
        println!(
            "collective {} {}: {} round(s) in progress discarded; it had completed {} round(s), folded {} contribution(s)",
            r["collective"],
            if r["replaced"] == true { "replaced" } else { "deleted" },
            r["rounds_discarded"],
            r["counters"]["completed"],
            r["counters"]["folded"]
        );
    }
    Ok(())
}

/// How a file holds its items (operations or collectives): what the appliance's `ops[K]` is
/// called in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// TOML tables of this name: `[[op]]` (`op[K]`), `[[collective]]` (`collective[K]`).
    Toml(&'static str),
    /// A JSON array: `[K]`; of collectives (a collective file) or of operations (a batch).
    JsonArray { collectives: bool },
    /// A JSON object holding the array under this name: `ops` (`ops[K]`).
    JsonObject(&'static str),
    /// One JSON object: the only item (its keys alone).
    JsonOne,
}

impl Shape {
    /// The file's key for `rest` (like `.entry.action`) of item `k`.
    fn key(self, k: usize, rest: &str) -> String {
        match self {
            Shape::Toml(name) | Shape::JsonObject(name) => format!("{name}[{k}]{rest}"),
            Shape::JsonArray { .. } => format!("[{k}]{rest}"),
            Shape::JsonOne => rest.trim_start_matches('.').to_string(),
        }
    }
}

/// The appliance's refusal `err` of a request made from `file`, said in the file's terms: a
/// fault at `ops[K]...` (`request: key `ops[K]REST`: WHY`) is named by the file and its own key
/// (`FILE: key `op[K]REST`: WHY`; for a collective file, whose operations each hold one
/// collective, `collective[K]REST` without the operation's `.collective`); another refusal is
/// said after the file's name.
fn in_file(err: &str, file: &Path, shape: Shape) -> String {
    let f = file.display();
    let parsed = err.strip_prefix("request: key `ops[").and_then(|r| {
        let (k, r) = r.split_once(']')?;
        let (rest, why) = r.split_once("`: ")?;
        Some((k.parse::<usize>().ok()?, rest, why))
    });
    let Some((k, rest, why)) = parsed else { return format!("{f}: {err}") };
    let rest = match shape {
        Shape::Toml("collective") | Shape::JsonArray { collectives: true } | Shape::JsonOne => {
            rest.strip_prefix(".collective").filter(|r| r.is_empty() || r.starts_with(['.', '['])).unwrap_or(rest)
        }
        _ => rest,
    };
    match shape.key(k, rest) {
        key if key.is_empty() => format!("{f}: {why}"),
        key => format!("{f}: key `{key}`: {why}"),
    }
}

/// The `op` operations (`add_collective`, `modify_collective`) of the collectives in `file`:
/// TOML `[[collective]]` tables as in the config file, or JSON (one object or an array); and how
/// the file holds them.
fn collective_ops(op: &str, file: &Path) -> Result<(Value, Shape), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let (list, shape) = collectives_of(&text, file.extension().is_some_and(|e| e == "json"))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok((list.into_iter().map(|c| json!({ "op": op, "collective": c })).collect(), shape))
}

/// The collectives of a file's `text`: its `[[collective]]` tables (TOML; no other top-level
/// key), or a JSON object or array of objects; at least one. With how the file holds them.
fn collectives_of(text: &str, is_json: bool) -> Result<(Vec<Value>, Shape), String> {
    let (list, shape) = if is_json {
        match serde_json::from_str(text).map_err(|e| e.to_string())? {
            Value::Array(a) => (a, Shape::JsonArray { collectives: true }),
            o @ Value::Object(_) => (vec![o], Shape::JsonOne),
            _ => return Err("expected a collective (a JSON object) or an array of them".into()),
        }
    } else {
        let t: toml::Table = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        only_key(&t, "collective", "[[collective]] tables, as in the config file")?;
        match t.get("collective").map(|c| serde_json::to_value(c).map_err(|e| e.to_string())).transpose()? {
            Some(Value::Array(a)) => (a, Shape::Toml("collective")),
            _ => return Err("key `collective`: expected [[collective]] tables, as in the config file".into()),
        }
    };
    if list.is_empty() {
        return Err("no collective in the file".into());
    }
    Ok((list, shape))
}

/// Refuses a top-level key of `t` other than `name` (what the file holds: `what`), as the config
/// file refuses unknown keys.
fn only_key(t: &toml::Table, name: &str, what: &str) -> Result<(), String> {
    match t.keys().find(|k| *k != name) {
        Some(k) => Err(format!("key `{k}`: unknown key; expected {what} only")),
        None => Ok(()),
    }
}

/// `s` as one line: a TOML error's lines (with its excerpt of the file) joined by `; `.
fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

fn error_of(reply: &Value) -> String {
    reply["error"].as_str().map_or_else(|| format!("unexpected reply: {reply}"), str::to_string)
}

/// The operations of a batch file, and how it holds them: a TOML file's `[[op]]` tables, or a
/// JSON array (or an object with `ops` alone). A key other than these is refused, as is a file
/// without an operation.
fn read_batch(file: &Path) -> Result<(Value, Shape), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    batch_of(&text, file.extension().is_some_and(|e| e == "json")).map_err(|e| format!("{}: {e}", file.display()))
}

/// The operations of a batch file's `text` ([`read_batch`]).
fn batch_of(text: &str, is_json: bool) -> Result<(Value, Shape), String> {
    const EXPECTED: &str = "expected [[op]] tables (TOML) or an array of operations (JSON)";
    let (ops, shape) = if is_json {
        match serde_json::from_str(text).map_err(|e| e.to_string())? {
            a @ Value::Array(_) => (a, Shape::JsonArray { collectives: false }),
            Value::Object(mut o) => {
                if let Some(k) = o.keys().find(|k| *k != "ops") {
                    return Err(format!("key `{k}`: unknown key; expected `ops` only (an array of operations)"));
                }
                (o.remove("ops").unwrap_or(Value::Null), Shape::JsonObject("ops"))
            }
            _ => return Err(EXPECTED.into()),
        }
    } else {
        let t: toml::Table = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        only_key(&t, "op", "[[op]] tables")?;
        let ops = t.get("op").map(|o| serde_json::to_value(o).map_err(|e| e.to_string())).transpose()?;
        (ops.unwrap_or(Value::Null), Shape::Toml("op"))
    };
    match ops {
        Value::Array(a) if a.is_empty() => Err(format!("no operation in the file: {EXPECTED}")),
        a @ Value::Array(_) => Ok((a, shape)),
        Value::Null => Err(format!("no operation in the file: {EXPECTED}")),
        _ => Err(EXPECTED.into()),
    }
}

/// The socket: `socket` if given, else the instance `prefix`'s, else the only one running.
fn find_socket(socket: Option<&Path>, prefix: Option<&str>) -> Result<PathBuf, String> {
    if let Some(s) = socket {
        return Ok(s.to_path_buf());
    }
    // EAL's runtime directories: /var/run/dpdk as root, else $XDG_RUNTIME_DIR/dpdk or /tmp/dpdk.
    let mut bases = vec![PathBuf::from("/var/run/dpdk")];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        bases.push(PathBuf::from(x).join("dpdk"));
    }
    bases.push(PathBuf::from("/tmp/dpdk"));
    if let Some(p) = prefix {
        return bases.iter().map(|b| b.join(p).join(SOCKET_NAME)).find(|s| s.exists()).ok_or_else(|| {
            format!("no appliance with prefix {p:?} is running (no {SOCKET_NAME} under {})", list(&bases))
        });
    }
    let mut found = Vec::new();
    for b in &bases {
        for d in std::fs::read_dir(b).into_iter().flatten().flatten() {
            let s = d.path().join(SOCKET_NAME);
            if s.exists() {
                found.push(s);
            }
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!("no running appliance found (no {SOCKET_NAME} under {}): is dpu running?", list(&bases))),
        _ => {
            Err(format!("{} appliances are running; name one with -f PREFIX or -s PATH: {}", found.len(), list(&found)))
        }
    }
}

fn list(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// Writes all of `buf` to `s` with `MSG_NOSIGNAL`: SIGPIPE has its default disposition here
/// (for `| head`), and a peer that closed the socket must be an error, not a silent death.
fn send_all(s: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: the fd is `s`'s open socket for the call; `buf` is valid for `buf.len()` bytes.
        let n = unsafe { libc::send(s.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// How long `dpuctl` waits for a reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `request`, returns the reply. Errors: the socket, or no reply within
/// [`REPLY_TIMEOUT`] (the request may still be applied: the error says how to check).
fn call(socket: &Path, request: &Value) -> Result<Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    s.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(|e| e.to_string())?;
    send_all(&s, request.to_string().as_bytes()).map_err(|e| match e.raw_os_error() {
        Some(libc::EPIPE | libc::ECONNRESET) => {
            format!("sending the request: the appliance closed the connection ({e}); see its stderr")
        }
        _ => format!("sending the request: {e}"),
    })?;
    s.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "no reply within {} s; the appliance may still be working on the request and apply it: \
             check with `dpuctl tables` (or the version in `dpuctl --json stats`) before sending it again",
            REPLY_TIMEOUT.as_secs()
        ),
        _ => format!("reading the reply: {e}"),
    })?;
    serde_json::from_str(out.trim()).map_err(|e| format!("the reply is not JSON ({e}): {out:?}"))
}

fn print_stats(stats: &Value) {
    if let Some(m) = stats.as_object() {
        let w = m.keys().map(String::len).max().unwrap_or(0);
        for (k, v) in m {
            println!("{k:<w$}  {v}");
        }
    }
}

fn print_tables(tables: &Value, only: Option<&str>) -> Result<(), String> {
    let all = tables.as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = all.iter().filter_map(|t| t["name"].as_str()).collect();
    if let Some(n) = only {
        if !names.contains(&n) {
            return Err(format!("no table {n:?}; tables: {}", names.join(", ")));
        }
    }
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    for t in all.iter().filter(|t| only.is_none_or(|n| t["name"] == n)) {
        let keys: Vec<String> = t["key"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| format!("{} {}", k["field"].as_str().unwrap_or("?"), k["match"].as_str().unwrap_or("?")))
            .collect();
        println!("table {} (key: {})", t["name"].as_str().unwrap_or("?"), keys.join(", "));
        // (entry, key, action, packets, bytes), the miss last.
        let mut rows: Vec<(String, String, String, u64, u64)> = Vec::new();
        for (i, e) in t["entries"].as_array().into_iter().flatten().enumerate() {
            let key: Vec<String> = e["key"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
                .collect();
            let mut key = key.join(" ");
            if let Some(p) = e["priority"].as_i64() {
                key += &format!(" (priority {p})");
            }
            let action = e["action"].as_str().unwrap_or("").to_string();
            rows.push((i.to_string(), key, action, n(&e["packets"]), n(&e["bytes"])));
        }
        let miss = &t["miss"];
        let default = t["default_action"].as_str().unwrap_or("").to_string();
        rows.push(("miss".into(), String::new(), default, n(&miss["packets"]), n(&miss["bytes"])));
        let kw = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(3);
        let aw = rows.iter().map(|r| r.2.len()).max().unwrap_or(0).max(6);
        println!("  {:>5}  {:<kw$}  {:<aw$}  {:>14}  {:>16}", "entry", "key", "action", "packets", "bytes");
        for (e, key, action, p, b) in rows {
            println!("  {e:>5}  {key:<kw$}  {action:<aw$}  {p:>14}  {b:>16}");
        }
    }
    Ok(())
}

fn print_stragglers(colls: &Value) {
    for c in colls.as_array().into_iter().flatten() {
        let slow = c["slowest_rank"].as_u64();
        match slow {
            Some(r) => println!("collective {}: the rounds wait for rank {r}", c["collective"]),
            None => println!("collective {}: no round completed yet", c["collective"]),
        }
        println!("  {:>6}  {:>14}  {:>16}  {:>16}", "rank", "contributions", "late mean (us)", "completed last");
        for r in c["ranks"].as_array().into_iter().flatten() {
            let mark = if r["rank"].as_u64() == slow { "  <- slowest" } else { "" };
            println!(
                "  {:>6}  {:>14}  {:>16.1}  {:>16}{mark}",
                r["rank"].as_u64().unwrap_or(0),
                r["contributions"].as_u64().unwrap_or(0),
                r["late_mean_us"].as_f64().unwrap_or(0.0),
                r["completed_last"].as_u64().unwrap_or(0)
            );
        }
    }
}

/// Each element of `list` as the config file's `[[name]]` table says it, its own tables and
/// arrays of tables under it (`[[collective.member]]`, `[[multicast_group.copy]]`), so that the
/// text reads back as the file's tables; a blank line after each. An element TOML cannot say
/// (none the appliance sends) is printed as JSON.
fn list_toml(list: &Value, name: &str) -> String {
    let mut out = String::new();
    for item in list.as_array().into_iter().flatten() {
        // JSON nulls (unset options) have no TOML form: leave them out.
        let one = json!({ name: [strip_nulls(item.clone())] });
        match toml::to_string(&one) {
            Ok(t) => out += &format!("{}\n\n", t.trim_end()),
            Err(_) => out += &format!("{item}\n\n"),
        }
    }
    out
}

/// The collectives as `[[collective]]` tables (a collective file `collective add` and
/// `collective modify` take back), each after a comment saying where its slots live.
fn collectives_toml(reply: &Value) -> String {
    let mut out = String::new();
    for (i, item) in reply["collectives"].as_array().into_iter().flatten().enumerate() {
        out += &format!("{}\n", placement(reply, i));
        out += &list_toml(&Value::Array(vec![item.clone()]), "collective");
    }
    out
}

/// `--interval`'s seconds, checked: from 0.1 (the appliance publishes its counters every
/// 100 ms, so a shorter interval would show rates of one publication over less time than it
/// covers) to 86400 (a day).
fn watch_interval(secs: f64) -> Result<f64, String> {
    if (0.1..=86400.0).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!(
            "--interval: expected seconds from 0.1 (the appliance publishes its counters every 100 ms) to 86400, \
             found {secs}"
        ))
    }
}

/// Where collective `i` of a `collectives` reply lives, as a TOML comment: its owner worker,
/// or the worker holding its chunk 0 when its chunks are sharded over the workers.
fn placement(reply: &Value, i: usize) -> String {
    match (reply["owners"][i].as_u64(), reply["sharded"][i].as_bool()) {
        (Some(w), Some(true)) => format!("# sharded: chunk k on worker ({w} + k) mod workers"),
        (Some(w), _) => format!("# on worker {w}"),
        (None, _) => "# placement unknown".to_string(),
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::{batch_of, collectives_of, collectives_toml, in_file, list_toml, placement, watch_interval, Shape};
    use serde_json::json;
    use std::path::Path;

    /// Each listed collective says where it lives: one worker, or its chunks sharded.
    #[test]
    fn placement_names_the_worker_or_the_sharding() {
        let reply = json!({ "collectives": [{}, {}], "owners": [0, 1], "sharded": [false, true] });
        assert_eq!(placement(&reply, 0), "# on worker 0");
        assert_eq!(placement(&reply, 1), "# sharded: chunk k on worker (1 + k) mod workers");
        // An appliance from before `sharded`: the owner alone.
        assert_eq!(placement(&json!({ "owners": [2] }), 0), "# on worker 2");
        assert_eq!(placement(&json!({}), 0), "# placement unknown");
    }

    /// A collective file is the config file's `[[collective]]` tables, or JSON.
    #[test]
    fn collective_files_are_the_config_files_tables() {
        let toml = "[[collective]]\ncollective_id = 7\nop = \"sum\"\n[[collective.member]]\nrank = 0\n\
                    [[collective]]\ncollective_id = 8\n";
        let (l, shape) = collectives_of(toml, false).unwrap();
        assert_eq!(
            l,
            [json!({ "collective_id": 7, "op": "sum", "member": [{ "rank": 0 }] }), json!({ "collective_id": 8 })]
        );
        assert_eq!(shape, Shape::Toml("collective"));
        assert_eq!(
            collectives_of(r#"{"collective_id": 9}"#, true).unwrap(),
            (vec![json!({ "collective_id": 9 })], Shape::JsonOne)
        );
        assert_eq!(collectives_of(r#"[{"collective_id": 9}]"#, true).unwrap().0.len(), 1);
        assert!(collectives_of("[]", true).unwrap_err().contains("no collective"));
        assert!(collectives_of("[[collective]\n", false).is_err());
    }

    /// A key other than the collectives' is refused, not ignored: a misspelt table would
    /// otherwise leave its collectives out silently.
    #[test]
    fn a_collective_file_with_another_key_is_refused() {
        assert_eq!(
            collectives_of("[dataplane]\nburst = 1\n", false).unwrap_err(),
            "key `dataplane`: unknown key; expected [[collective]] tables, as in the config file only"
        );
        let two = "[[collective]]\ncollective_id = 7\n[[collectives]]\ncollective_id = 8\n";
        assert!(collectives_of(two, false).unwrap_err().starts_with("key `collectives`: unknown key"));
        assert_eq!(
            collectives_of("collective = 3\n", false).unwrap_err(),
            "key `collective`: expected [[collective]] tables, as in the config file"
        );
    }

    /// `dpuctl collectives` prints what `collective add` and `collective modify` read back: the
    /// members (and any other array of tables) under their collective, `[[collective.member]]`.
    #[test]
    fn listed_collectives_read_back_as_the_same_collectives() {
        let colls = json!([
            { "collective_id": 7, "op": "sum", "dtype": "f32", "tensor_elements": 1024, "chunk_elements": 256,
              "dscp": null,
              "member": [{ "rank": 0, "ip": "10.0.0.1", "udp_port": 50000, "mac": "02:00:00:00:01:00" },
                         { "rank": 1, "ip": "10.0.0.2", "udp_port": 50001, "mac": "02:00:00:00:01:01" }] },
            { "collective_id": 8, "op": "max", "dtype": "i32", "tensor_elements": 64, "chunk_elements": 64,
              "member": [{ "rank": 0, "ip": "10.0.0.3", "udp_port": 50002, "mac": "02:00:00:00:01:02" }] }
        ]);
        let reply = json!({ "collectives": colls, "owners": [0, 1], "sharded": [false, false] });
        let text = collectives_toml(&reply);
        assert!(text.starts_with("# on worker 0\n[[collective]]\n"), "{text}");
        assert_eq!(text.matches("[[collective.member]]").count(), 3, "{text}");
        assert!(!text.contains("\n[[member]]"), "{text}");
        let (back, _) = collectives_of(&text, false).unwrap();
        // The unset option (null) is left out: the same as leaving it unset.
        let mut want = colls.as_array().unwrap().clone();
        want[0].as_object_mut().unwrap().remove("dscp");
        assert_eq!(back, want);
    }

    /// `dpuctl groups` prints the config file's tables: the copies under their group.
    #[test]
    fn listed_groups_read_back_as_the_config_files_tables() {
        let groups = json!([{ "id": 2, "copy": [{ "port": 0 }, { "port": 1, "actions": "push_vlan(7)" }] },
                             { "id": 3, "copy": [{ "port": 1 }] }]);
        let text = list_toml(&groups, "multicast_group");
        assert_eq!(text.matches("[[multicast_group.copy]]").count(), 3, "{text}");
        let back: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json!({ "multicast_group": groups }));
    }

    /// A batch file holds `[[op]]` tables (or a JSON array, or `ops`) and nothing else: a
    /// misspelt table name is refused, not applied as an empty batch.
    #[test]
    fn a_batch_file_with_another_key_or_no_operation_is_refused() {
        let op = "op = \"delete_group\"\nid = 1\n";
        let (ops, shape) = batch_of(&format!("[[op]]\n{op}[[op]]\n{op}"), false).unwrap();
        assert_eq!(
            (ops, shape),
            (json!([{ "op": "delete_group", "id": 1 }, { "op": "delete_group", "id": 1 }]), Shape::Toml("op"))
        );
        assert_eq!(
            batch_of(&format!("[[ops]]\n{op}"), false).unwrap_err(),
            "key `ops`: unknown key; expected [[op]] tables only"
        );
        assert_eq!(
            batch_of(&format!("[[op]]\n{op}[[opp]]\n{op}"), false).unwrap_err(),
            "key `opp`: unknown key; expected [[op]] tables only"
        );
        assert!(batch_of("", false).unwrap_err().starts_with("no operation in the file"));
        assert!(batch_of("[]", true).unwrap_err().starts_with("no operation in the file"));
        assert_eq!(
            batch_of(r#"[{"op":"delete_group","id":1}]"#, true).unwrap().1,
            Shape::JsonArray { collectives: false }
        );
        assert_eq!(batch_of(r#"{"ops":[{"op":"delete_group","id":1}]}"#, true).unwrap().1, Shape::JsonObject("ops"));
        assert_eq!(
            batch_of(r#"{"ops":[{"op":"delete_group","id":1}],"opps":[]}"#, true).unwrap_err(),
            "key `opps`: unknown key; expected `ops` only (an array of operations)"
        );
        assert_eq!(
            batch_of("op = 1\n", false).unwrap_err(),
            "expected [[op]] tables (TOML) or an array of operations (JSON)"
        );
    }

    /// A refusal keyed by operation is said with the file's own keys.
    #[test]
    fn refusals_name_the_file_and_its_key() {
        let f = Path::new("b.toml");
        let e = "request: key `ops[2].entry.acton`: unknown field `acton`, expected one of `key`, `action`, `priority`";
        assert_eq!(
            in_file(e, f, Shape::Toml("op")),
            "b.toml: key `op[2].entry.acton`: unknown field `acton`, expected one of `key`, `action`, `priority`"
        );
        assert_eq!(
            in_file(e, f, Shape::JsonArray { collectives: false }).split(':').nth(1),
            Some(" key `[2].entry.acton`")
        );
        assert_eq!(in_file(e, f, Shape::JsonObject("ops")).split(':').nth(1), Some(" key `ops[2].entry.acton`"));
        let c = "request: key `ops[1].collective.chunk_elements`: expected at least 1 element";
        let f = Path::new("c.toml");
        assert_eq!(
            in_file(c, f, Shape::Toml("collective")),
            "c.toml: key `collective[1].chunk_elements`: expected at least 1 element"
        );
        assert_eq!(in_file(c, f, Shape::JsonOne), "c.toml: key `chunk_elements`: expected at least 1 element");
        assert_eq!(
            in_file(c, f, Shape::JsonArray { collectives: true }),
            "c.toml: key `[1].chunk_elements`: expected at least 1 element"
        );
        // A batch's collective operation keeps its `.collective`: the file's key is the op's.
        assert_eq!(
            in_file(c, f, Shape::JsonArray { collectives: false }),
            "c.toml: key `[1].collective.chunk_elements`: expected at least 1 element"
        );
        let whole = "request: key `ops[0].collective`: the collectives need 2 MiB";
        assert_eq!(in_file(whole, f, Shape::JsonOne), "c.toml: the collectives need 2 MiB");
        assert_eq!(
            in_file(whole, f, Shape::Toml("collective")),
            "c.toml: key `collective[0]`: the collectives need 2 MiB"
        );
        // Not keyed by operation: said after the file's name.
        assert_eq!(in_file("runtime changes are off", f, Shape::JsonOne), "c.toml: runtime changes are off");
    }

    /// `--interval` below the counters' publication period, or too large to wait, is refused.
    #[test]
    fn watch_intervals_are_bounded() {
        assert_eq!(watch_interval(1.0), Ok(1.0));
        assert_eq!(watch_interval(0.1), Ok(0.1));
        for bad in [1e20, 0.0001, 0.0, -1.0, f64::NAN, f64::INFINITY, 86401.0] {
            let e = watch_interval(bad).unwrap_err();
            assert!(e.contains("expected seconds from 0.1") && e.contains("86400"), "{bad}: {e}");
        }
    }
}
