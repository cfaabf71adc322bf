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
        /// Seconds between refreshes.
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
        Cmd::Batch { file } => apply(read_batch(file).map_err(Failure::Usage)?),
        Cmd::Collective { cmd: CollectiveCmd::Add { file } } => {
            apply(collective_ops("add_collective", file).map_err(Failure::Usage)?)
        }
        Cmd::Collective { cmd: CollectiveCmd::Modify { file } } => {
            apply(collective_ops("modify_collective", file).map_err(Failure::Usage)?)
        }
        Cmd::Collective { cmd: CollectiveCmd::Delete { ids } } => {
            apply(ids.iter().map(|id| json!({ "op": "delete_collective", "id": id })).collect())
        }
        Cmd::Reload => json!({ "cmd": "reload" }),
        Cmd::Watch { interval, count, plain } => {
            if !(*interval > 0.0 && interval.is_finite()) {
                return Err(Failure::Usage(format!("--interval: expected seconds above 0, found {interval}")));
            }
            let fetch = || {
                let r = call(&socket, &json!({ "cmd": "stats" }))?;
                if r["ok"] != true {
                    return Err(error_of(&r));
                }
                Ok(watch::Sample::of_reply(&r))
            };
            return Ok(watch::run(&socket, *interval, *count, *plain, fetch)?);
        }
        Cmd::Raw { request } => {
            serde_json::from_str(request).map_err(|e| Failure::Usage(format!("the request is not JSON: {e}")))?
        }
    };
    let mut reply = call(&socket, &request)?;
    if let (Cmd::Tables { name: Some(n) }, Some(all)) = (&cli.cmd, reply["tables"].as_array_mut()) {
        all.retain(|t| t["name"] == n.as_str());
    }
    if cli.json || matches!(cli.cmd, Cmd::Raw { .. }) {
        println!("{reply}");
        return if reply["ok"] == true { Ok(()) } else { Err(error_of(&reply).into()) };
    }
    if reply["ok"] != true {
        return Err(error_of(&reply).into());
    }
    match &cli.cmd {
        Cmd::Stats => print_stats(&reply["stats"]),
        Cmd::Tables { name } => print_tables(&reply["tables"], name.as_deref())?,
        Cmd::Groups => print_list(&reply["groups"], "multicast_group"),
        Cmd::Meters => print_list(&reply["meters"], "meter"),
        Cmd::Collectives => print_collectives(&reply),
        Cmd::Stragglers => print_stragglers(&reply["stragglers"]),
        Cmd::Reload => println!("{}", reply["message"].as_str().unwrap_or("reloaded")),
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

/// The `op` operations (`add_collective`, `modify_collective`) of the collectives in `file`:
/// TOML `[[collective]]` tables as in the config file, or JSON (one object or an array).
fn collective_ops(op: &str, file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let list = collectives_of(&text, file.extension().is_some_and(|e| e == "json"))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(list.into_iter().map(|c| json!({ "op": op, "collective": c })).collect())
}

/// The collectives of a file's `text`: its `[[collective]]` tables (TOML), or a JSON object or
/// array of objects. At least one.
fn collectives_of(text: &str, is_json: bool) -> Result<Vec<Value>, String> {
    let list = if is_json {
        match serde_json::from_str(text).map_err(|e| e.to_string())? {
            Value::Array(a) => a,
            o @ Value::Object(_) => vec![o],
            _ => return Err("expected a collective (a JSON object) or an array of them".into()),
        }
    } else {
        let t: Value = toml::from_str(text).map_err(|e| e.to_string())?;
        match t.get("collective") {
            Some(Value::Array(a)) => a.clone(),
            _ => return Err("expected [[collective]] tables, as in the config file".into()),
        }
    };
    if list.is_empty() {
        return Err("no collective in the file".into());
    }
    Ok(list)
}

fn error_of(reply: &Value) -> String {
    reply["error"].as_str().map_or_else(|| format!("unexpected reply: {reply}"), str::to_string)
}

/// The operations of a batch file: a TOML file's `[[op]]` tables, or a JSON array (or an
/// object with `ops`).
fn read_batch(file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let v: Value = if file.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?
    } else {
        let t: Value = toml::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        json!({ "ops": t.get("op").cloned().unwrap_or(Value::Array(Vec::new())) })
    };
    match v {
        Value::Array(_) => Ok(v),
        Value::Object(mut o) => match o.remove("ops") {
            Some(ops @ Value::Array(_)) => Ok(ops),
            _ => Err(format!("{}: expected [[op]] tables (TOML) or an array of operations (JSON)", file.display())),
        },
        _ => Err(format!("{}: expected [[op]] tables (TOML) or an array of operations (JSON)", file.display())),
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

/// Sends `request`, returns the reply.
fn call(socket: &Path, request: &Value) -> Result<Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    send_all(&s, request.to_string().as_bytes()).map_err(|e| match e.raw_os_error() {
        Some(libc::EPIPE | libc::ECONNRESET) => {
            format!("sending the request: the appliance closed the connection ({e}); see its stderr")
        }
        _ => format!("sending the request: {e}"),
    })?;
    s.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| format!("reading the reply: {e}"))?;
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

/// Prints each element of `list` as the config file's `[[name]]` table would say it.
fn print_list(list: &Value, name: &str) {
    for item in list.as_array().into_iter().flatten() {
        // JSON nulls (unset options) have no TOML form: leave them out.
        let clean = strip_nulls(item.clone());
        match toml::to_string(&clean) {
            Ok(t) => println!("[[{name}]]\n{t}"),
            Err(_) => println!("{item}"),
        }
    }
}

/// The collectives as `[[collective]]` tables (a collective file `collective add` takes back),
/// each after a comment saying where its slots live.
fn print_collectives(reply: &Value) {
    for (i, item) in reply["collectives"].as_array().into_iter().flatten().enumerate() {
        println!("{}", placement(reply, i));
        print_list(&Value::Array(vec![item.clone()]), "collective");
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
    use super::{collectives_of, placement};
    use serde_json::json;

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
        let l = collectives_of(toml, false).unwrap();
        assert_eq!(
            l,
            [json!({ "collective_id": 7, "op": "sum", "member": [{ "rank": 0 }] }), json!({ "collective_id": 8 })]
        );
        assert_eq!(collectives_of(r#"{"collective_id": 9}"#, true).unwrap(), [json!({ "collective_id": 9 })]);
        assert_eq!(collectives_of(r#"[{"collective_id": 9}]"#, true).unwrap().len(), 1);
        assert!(collectives_of("[dataplane]\nburst = 1\n", false).unwrap_err().contains("[[collective]] tables"));
        assert!(collectives_of("[]", true).unwrap_err().contains("no collective"));
        assert!(collectives_of("[[collective]\n", false).is_err());
    }
}
