//! Runtime control of a running appliance through `dpuctl` and SIGHUP.
//!
//! - A table entry is modified while traffic flows (pktgen over net_memif at a set rate, one
//!   flow, every packet numbered): the output pcap shows every packet once, the ones before the
//!   change with the old entry's rewrite and the ones after it with the new one's, and the
//!   entry's count carried over the change.
//! - A batch with one invalid operation changes nothing and says which operation and why.
//! - SIGHUP reloads the file through the same path; a broken file, or one that changes what
//!   only a restart can, changes nothing and the appliance says why.
//! - Requests are limited in size and parsed strictly; the socket is its user's alone (0600).
//! - A collective whose tensor the 32-bit `tensor_offset` cannot address is refused by
//!   `dpu --check` and by `dpuctl collective add`, naming its `tensor_elements` and the most
//!   allowed; the control plane goes on serving (the refusal is a validation, not a panic).

use functional_tests::control::{ctl_json, dpuctl, dpuctl_bin, start, stop};
use functional_tests::grad::pktgen_bin;
use functional_tests::read_pcap;
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EAL: &str = "\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\", \"--log-level\", \"*:error\"";

/// A short scratch directory (memif socket paths must fit a sockaddr_un).
fn short_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dpuctl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// The entry of the test's table: frames to 02:00:00:00:00:02 leave on port 1 with `dscp`.
fn entry_action(dscp: u8) -> String {
    format!("set_dscp({dscp}); forward(1)")
}

#[test]
fn an_entry_modified_during_traffic_takes_every_packet_once_before_or_after() {
    let dir = short_dir("upd");
    let sock = dir.join("m0.sock");
    let empty = dir.join("empty.pcap");
    functional_tests::write_pcap(&empty, &[]);
    let out = dir.join("out.pcap");
    let app = dir.join("appliance.toml");
    std::fs::write(
        &app,
        format!(
            "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1\"]\n\
             [[port]]\nname = \"m0\"\nvdev = \"net_memif0,role=server,socket={},socket-abstract=no\"\n\
             [[port]]\nname = \"out\"\nvdev = \"net_pcap1,rx_pcap={},tx_pcap={}\"\n\
             [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"drop\"\n\
             [[table.entry]]\nkey = [\"02:00:00:00:00:02\"]\naction = \"{}\"\n",
            sock.display(),
            empty.display(),
            out.display(),
            entry_action(10)
        ),
    )
    .unwrap();
    let gen = dir.join("pktgen.toml");
    std::fs::write(
        &gen,
        format!(
            "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@0\"]\n\
             [pktgen]\nlink_wait_ms = 20000\ntx_lcores = [1]\n\
             [[port]]\nname = \"m0\"\nvdev = \"net_memif0,role=client,socket={},socket-abstract=no\"\n\
             [[stream]]\nname = \"udp\"\nport = \"m0\"\nsize = 64\nflows = 1\nrate_pps = 20000\n\
             dst_mac = \"02:00:00:00:00:02\"\nsrc_ip = \"10.0.0.1\"\ndst_ip = \"10.0.1.1\"\n",
            sock.display()
        ),
    )
    .unwrap();
    let stats = dir.join("stats.json");
    let (dpu, ctl) = start(&app, &stats, 120);
    let t = Instant::now();
    while !sock.exists() {
        assert!(t.elapsed() < Duration::from_secs(20), "no memif socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = dir.join("pktgen.json");
    let g = Command::new(pktgen_bin())
        .args(["run", "-q", "-c", gen.to_str().unwrap(), "--duration", "3", "--json", report.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Change the entry once the appliance has taken a good part of the traffic, well before
    // its end (3 s at 20 kpps: 60 000 packets).
    let t = Instant::now();
    loop {
        let s = ctl_json(&ctl, &["stats"]);
        if u(&s["stats"]["port_rx_packets/m0"]) >= 10_000 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no traffic counted: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = dpuctl(&ctl, &["modify", "l2", "--key", "02:00:00:00:00:02", "--action", &entry_action(20)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "applied 1 operation(s): version 1");
    let after_change = u(&ctl_json(&ctl, &["stats"])["stats"]["port_rx_packets/m0"]);
    let g = g.wait_with_output().unwrap();
    assert!(g.status.success(), "pktgen: {}", String::from_utf8_lossy(&g.stderr));
    let sent = u(&serde_json::from_str::<Value>(&std::fs::read_to_string(&report).unwrap()).unwrap()["streams"][0]
        ["tx"]["packets"]);
    assert!(after_change < sent, "the change came after the traffic ({after_change} of {sent})");
    // The table as running: the new action, the count of every packet of both versions (once
    // the appliance has taken what was left in the ring and published it: the counts settle).
    let t = Instant::now();
    let (tables, rx_live) = loop {
        let tables = ctl_json(&ctl, &["tables"]);
        let rx = u(&ctl_json(&ctl, &["stats"])["stats"]["port_rx_packets/m0"]);
        if u(&tables["tables"][0]["entries"][0]["packets"]) == rx || t.elapsed() > Duration::from_secs(10) {
            break (tables, rx);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let e = &tables["tables"][0]["entries"][0];
    assert_eq!(e["action"], entry_action(20), "{tables}");
    assert_eq!(u(&e["packets"]), rx_live, "{tables}");
    let text = stop(dpu);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    // What the appliance received: all pktgen sent but what was still in the memif ring (512
    // descriptors) when pktgen left, the last ones (a loaded machine may leave some there).
    let rx = u(&s["ports"][0]["workers"]["rx_packets"]);
    assert!(rx <= sent && rx + 512 >= sent, "received {rx} of {sent}:\n{text}");
    assert_eq!(u(&s["tables"][0]["counter"]["packets"]), rx, "the entry's count carried over:\n{text}");
    // The output: every packet received once, in order (sequence numbers 0, 1, ...), the old
    // rewrite up to the change and the new one after it.
    let frames = read_pcap(&out);
    assert_eq!(frames.len() as u64, rx, "{text}");
    let mut last_old = None;
    let mut first_new = None;
    for (i, f) in frames.iter().enumerate() {
        // pktgen's stamp follows the UDP header: magic 0xA5, then the sequence number at +4.
        assert_eq!(f[42], 0xa5, "frame {i} is not pktgen's");
        let seq = u32::from_be_bytes([f[46], f[47], f[48], f[49]]);
        assert_eq!(seq as usize, i, "frame {i}: every packet once, in order");
        match f[15] >> 2 {
            10 => last_old = Some(i),
            20 => first_new = first_new.or(Some(i)),
            d => panic!("frame {i}: DSCP {d}"),
        }
    }
    let (last_old, first_new) = (last_old.expect("the old entry was hit"), first_new.expect("the new entry was hit"));
    assert_eq!(last_old + 1, first_new, "old before new, no mix");
    assert!(
        last_old as u64 + 1 >= 10_000 && (first_new as u64) <= after_change,
        "{last_old} {first_new} {after_change}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An appliance on a net_null port (endless 64-byte frames of zeros): the config and table
/// `l2` with one entry.
fn null_conf(extra: &str) -> String {
    format!(
        "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1\"]\n\
         [[port]]\nname = \"n0\"\nvdev = \"net_null0\"\n\
         [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(0)\"\n\
         [[table.entry]]\nkey = [\"02:00:00:00:00:01\"]\naction = \"forward(0)\"\n{extra}"
    )
}

fn entries(sock: &Path) -> Vec<(String, String)> {
    let t = ctl_json(sock, &["tables"]);
    t["tables"][0]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"][0].as_str().unwrap().to_string(), e["action"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn a_bad_batch_changes_nothing_and_sighup_reloads_only_a_good_file() {
    let dir = short_dir("hup");
    let conf = dir.join("dpu.toml");
    std::fs::write(&conf, null_conf("")).unwrap();
    let stats = dir.join("stats.json");
    let (dpu, sock) = start(&conf, &stats, 120);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the control socket is its user's alone");
    // It was bound under a temporary name and renamed into place once listening: none is left.
    let names: Vec<_> = std::fs::read_dir(sock.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("dpu_control"))
        .collect();
    assert_eq!(names, ["dpu_control.sock"], "the runtime directory's control files");
    let before = entries(&sock);
    assert_eq!(before, [("02:00:00:00:00:01".to_string(), "forward(0)".to_string())]);

    // A batch whose second operation is invalid: nothing changes; the error names it.
    let batch = dir.join("batch.toml");
    std::fs::write(
        &batch,
        "[[op]]\nop = \"add_entry\"\ntable = \"l2\"\nentry = { key = [\"02:00:00:00:00:05\"], action = \"drop\" }\n\
         [[op]]\nop = \"add_entry\"\ntable = \"l2\"\nentry = { key = [\"02:00:00:00:00:06\"], action = \"forward(3)\" }\n",
    )
    .unwrap();
    let o = dpuctl(&sock, &["batch", batch.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains(&format!("{}: key `op[1].entry.action`: ", batch.display())) && err.contains("port"), "{err}");
    assert_eq!(entries(&sock), before);
    // The same batch made valid applies both.
    std::fs::write(&batch, std::fs::read_to_string(&batch).unwrap().replace("forward(3)", "forward(0)")).unwrap();
    let o = dpuctl(&sock, &["batch", batch.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(entries(&sock).len(), 3);

    // SIGHUP with a file that adds an entry: the file's pipeline replaces the running one.
    let good = null_conf("[[table.entry]]\nkey = [\"02:00:00:00:00:07\"]\naction = \"drop\"\n");
    std::fs::write(&conf, &good).unwrap();
    hup(&dpu);
    wait_for(|| entries(&sock).len() == 2, "the reload");
    assert_eq!(entries(&sock)[1], ("02:00:00:00:00:07".to_string(), "drop".to_string()));
    let v = u(&ctl_json(&sock, &["tables"])["version"]);
    // A batch that changes nothing installs nothing: the version stays.
    let reply = raw(&sock, br#"{"cmd":"apply","ops":[]}"#);
    assert_eq!(
        (reply["ok"].as_bool(), u(&reply["version"]), reply["unchanged"].as_bool()),
        (Some(true), v, Some(true)),
        "{reply}"
    );
    // One that deletes an entry and adds it back as it was makes a new entry: a new version.
    let renew = br#"{"cmd":"apply","ops":[{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:07"]},
        {"op":"add_entry","table":"l2","entry":{"key":["02:00:00:00:00:07"],"action":"drop"}}]}"#;
    let reply = raw(&sock, renew);
    assert_eq!(
        (reply["ok"].as_bool(), u(&reply["version"]), reply.get("unchanged")),
        (Some(true), v + 1, None),
        "{reply}"
    );
    let v = v + 1;
    assert_eq!(entries(&sock)[1], ("02:00:00:00:00:07".to_string(), "drop".to_string()));
    // A broken file, then one that changes what needs a restart: nothing changes, and the
    // appliance says why (checked on its stderr at the end).
    std::fs::write(&conf, good.replace("action = \"drop\"", "action = \"forward(9)\"")).unwrap();
    hup(&dpu);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&conf, good.replace("[[port]]", "[dataplane]\nburst = 64\n[[port]]")).unwrap();
    hup(&dpu);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(u(&ctl_json(&sock, &["tables"])["version"]), v);
    assert_eq!(entries(&sock).len(), 2);
    // `dpuctl reload` answers with the same refusal.
    let o = dpuctl(&sock, &["reload"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("key `dataplane`: changed since the appliance started"), "{err}");

    // Strict requests: unknown fields and oversized requests are refused with a reason.
    let reply = raw(&sock, br#"{"cmd":"stats","verbose":true}"#);
    assert_eq!(reply["ok"], false);
    assert!(reply["error"].as_str().unwrap().contains("unknown field `verbose`"), "{reply}");
    let reply = raw(&sock, &vec![b' '; (1 << 20) + 10]);
    assert!(reply["error"].as_str().unwrap().contains("more than the limit of 1048576 bytes"), "{reply}");

    let _ = Command::new("kill").arg("-TERM").arg(dpu.id().to_string()).status();
    let o = dpu.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("dpu: SIGHUP: ") && text.contains("dpu.toml: reloaded (version 2)"), "{text}");
    assert!(
        text.contains("SIGHUP: reload refused, nothing changed") && text.contains("table[0].entry[1].action"),
        "{text}"
    );
    assert!(text.contains("key `dataplane`: changed since the appliance started"), "{text}");
    // The socket went with the run.
    assert!(!sock.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

fn hup(dpu: &Child) {
    let _ = Command::new("kill").arg("-HUP").arg(dpu.id().to_string()).status();
}

fn wait_for(mut ok: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(10), "{what} did not happen within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `bytes` as a request; the reply.
fn raw(sock: &Path, bytes: &[u8]) -> Value {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    // The appliance may answer (and close) before it has read everything of an oversized request.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// An appliance (a stand-in here) that closes the connection while dpuctl is still sending: an
/// error naming it and exit status 1, never a silent death by SIGPIPE (dpuctl keeps SIGPIPE's
/// default disposition for `| head`).
#[test]
fn a_connection_closed_mid_request_is_an_error_not_sigpipe() {
    let d = short_dir("closed");
    let sock = d.join("c.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let closer = std::thread::spawn(move || {
        let (c, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(c);
    });
    // 8 MiB of request: more than the socket's buffers, so the send is still going when the
    // peer closes. (Its content is the appliance's to judge; this one never reads it.)
    let batch = d.join("big.json");
    std::fs::write(&batch, format!("[\"{}\"]", "x".repeat(8 << 20))).unwrap();
    let o = Command::new(dpuctl_bin())
        .args(["-s", sock.to_str().unwrap(), "batch", batch.to_str().unwrap()])
        .output()
        .unwrap();
    closer.join().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{:?}: {err}", o.status);
    assert!(err.contains("sending the request: the appliance closed the connection"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `dpuctl watch --plain --count 2` on an appliance receiving from net_null: two blocks, each
/// with the port's receive rate above 0 (net_null delivers as fast as the worker polls), the
/// worker's load line, and the drop reason of the table's default action, which drops them.
#[test]
fn watch_prints_the_rates_the_load_and_the_drops() {
    let dir = short_dir("watch");
    let app = dir.join("appliance.toml");
    std::fs::write(
        &app,
        format!(
            "[eal]\nargs = [{EAL}, \"--lcores\", \"0@0,1@1\"]\n\
             [[port]]\nname = \"in\"\nvdev = \"net_null0,size=64\"\n\
             [[port]]\nname = \"out\"\nvdev = \"net_null1,no-rx=1\"\n\
             [[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"drop\"\n"
        ),
    )
    .unwrap();
    let stats = dir.join("stats.json");
    let (dpu, sock) = start(&app, &stats, 60);
    let o = dpuctl(&sock, &["watch", "--plain", "--count", "2", "--interval", "0.5"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let report = stop(dpu);
    assert!(o.status.success(), "dpuctl watch: {text}{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(text.matches("(every 0.5 s)").count(), 2, "two refreshes:\n{text}");
    let rx: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("in "))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(rx.len(), 2, "a line for port in per refresh:\n{text}");
    assert!(rx.iter().all(|&r| r > 0.0), "port in receives: {rx:?}\n{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("worker 0 ")).count(), 2, "{text}");
    assert!(text.lines().any(|l| l.starts_with("drop ") && l.contains("(+")), "{text}\n{report}");
}

/// A MAC address from `i`, for large tables.
fn mac(i: u32) -> String {
    let b = i.to_be_bytes();
    format!("02:01:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3])
}

/// A batch of 9,000 adds on a table of 13,001 entries applies in one pass (each operation used to
/// walk the table, parsing every key: over a minute, past dpuctl's wait for the reply); a batch
/// file is read strictly (a misspelt `[[op]]` is refused, not applied as nothing) and a
/// malformed operation is named by the file and its own key.
#[test]
fn a_large_batch_applies_at_once_and_batch_files_are_read_strictly() {
    let dir = short_dir("large");
    let conf = dir.join("dpu.toml");
    let table: String =
        (0..13_000u32).map(|i| format!("[[table.entry]]\nkey = [\"{}\"]\naction = \"forward(0)\"\n", mac(i))).collect();
    std::fs::write(&conf, null_conf(&table)).unwrap();
    let stats = dir.join("stats.json");
    let (dpu, sock) = start(&conf, &stats, 120);

    let ops: Vec<Value> = (13_000..22_000u32)
        .map(
            |i| serde_json::json!({ "op": "add_entry", "table": "l2", "entry": { "key": [mac(i)], "action": "drop" } }),
        )
        .collect();
    let batch = dir.join("big.json");
    std::fs::write(&batch, Value::Array(ops).to_string()).unwrap();
    let t = Instant::now();
    let o = dpuctl(&sock, &["batch", batch.to_str().unwrap()]);
    let took = t.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "applied 9000 operation(s): version 1");
    let all = entries(&sock);
    assert_eq!(all.len(), 22_001);
    assert_eq!(all[13_001], (mac(13_000), "drop".to_string()));
    assert_eq!(all[22_000], (mac(21_999), "drop".to_string()));
    assert_eq!(all.iter().filter(|e| e.1 == "drop").count(), 9_000);
    // Well within dpuctl's 30 s wait (it took over a minute when each operation walked the table).
    assert!(took < Duration::from_secs(20), "{took:?}");

    // A misspelt table name is refused (exit status 2), and nothing is sent.
    let typo = dir.join("typo.toml");
    let op = "op = \"delete_entry\"\ntable = \"l2\"\nkey = [\"02:00:00:00:00:01\"]\n";
    std::fs::write(&typo, format!("[[ops]]\n{op}")).unwrap();
    let o = dpuctl(&sock, &["batch", typo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        format!("dpuctl: {}: key `ops`: unknown key; expected [[op]] tables only", typo.display())
    );
    std::fs::write(&typo, format!("[[op]]\n{op}[[opp]]\n{op}")).unwrap();
    let o = dpuctl(&sock, &["batch", typo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("key `opp`: unknown key"));
    // A malformed operation: the file, its key, and what was expected.
    std::fs::write(
        &typo,
        format!("[[op]]\n{op}[[op]]\nop = \"add_entry\"\ntable = \"l2\"\nentry = {{ key = [\"02:00:00:00:00:09\"], acton = \"drop\" }}\n"),
    )
    .unwrap();
    let o = dpuctl(&sock, &["batch", typo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        format!(
            "dpuctl: {}: key `op[1].entry.acton`: unknown field `acton`, expected one of `key`, `action`, `priority`",
            typo.display()
        )
    );
    // Nothing changed.
    assert_eq!(ctl_json(&sock, &["tables"])["version"], 1);
    assert_eq!(entries(&sock).len(), 22_001);
    stop(dpu);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Connections are read on threads of their own: clients that connect and send nothing delay no
/// other (each held the control thread for its 5 s before), and are answered with an error once
/// their time is up. `watch` refuses an interval it cannot wait, or shorter than the counters'
/// publication period, without panicking.
#[test]
fn idle_connections_delay_no_other_client() {
    let dir = short_dir("idle");
    let conf = dir.join("dpu.toml");
    std::fs::write(&conf, null_conf("")).unwrap();
    let stats = dir.join("stats.json");
    let (dpu, sock) = start(&conf, &stats, 120);
    let idle: Vec<_> = (0..3).map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let v = ctl_json(&sock, &["stats"]);
    let took = t.elapsed();
    assert_eq!(v["ok"], true);
    assert!(v["stats"]["port_rx_packets/n0"].is_u64(), "{v}");
    assert!(took < Duration::from_secs(2), "three idle clients delayed stats by {took:?}");
    for mut s in idle {
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let r: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(
            (r["ok"].as_bool(), r["error"].as_str()),
            (Some(false), Some("the request took more than 5 s to arrive"))
        );
    }
    for bad in ["1e20", "0.0001", "nan"] {
        let o = dpuctl(&sock, &["watch", "--plain", "--count", "1", "--interval", bad]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--interval: expected seconds from 0.1"), "{bad}: {err}");
    }
    // `dpuctl raw` prints the appliance's reply as it came: an unknown command's error alone.
    let o = dpuctl(&sock, &["raw", r#"{"cmd":"nope"}"#]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["error", "ok"], "{r}");
    assert!(r["error"].as_str().unwrap().contains("unknown variant `nope`"), "{r}");
    stop(dpu);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dpuctl collectives` prints a file that `collective modify` takes back (the members under
/// their collective), and `dpuctl groups` the config file's tables.
#[test]
fn listed_collectives_and_groups_read_back() {
    let dir = short_dir("listed");
    let conf = dir.join("dpu.toml");
    let colls = format!(
        "{}{}",
        functional_tests::grad::Coll { id: 7, n: 2, ..Default::default() }.toml(),
        functional_tests::grad::Coll { id: 8, n: 3, tensor: 12, chunk: 4, ..Default::default() }.toml()
    );
    let groups = "[[multicast_group]]\nid = 2\ncopy = [{ port = 0 }, { port = 0, actions = \"push_vlan(7)\" }]\n";
    std::fs::write(
        &conf,
        format!("{}{groups}{colls}", null_conf(""))
            .replace("name = \"n0\"\n", "name = \"n0\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\n"),
    )
    .unwrap();
    let stats = dir.join("stats.json");
    let (dpu, sock) = start(&conf, &stats, 120);
    let before = ctl_json(&sock, &["collectives"]);
    let o = dpuctl(&sock, &["collectives"]);
    assert!(o.status.success());
    let listed = dir.join("listed.toml");
    std::fs::write(&listed, &o.stdout).unwrap();
    let o = dpuctl(&sock, &["collective", "modify", listed.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stderr),
        std::fs::read_to_string(&listed).unwrap()
    );
    // The same collectives: nothing is installed (their rounds and counters go on).
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "applied 2 operation(s): nothing changed, still version 0");
    let after = ctl_json(&sock, &["collectives"]);
    assert_eq!(after["collectives"], before["collectives"]);
    assert_eq!(after["collectives"][1]["member"].as_array().map(Vec::len), Some(3));
    let o = dpuctl(&sock, &["groups"]);
    let text: toml::Table = toml::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    let g = ctl_json(&sock, &["groups"]);
    assert_eq!(serde_json::to_value(&text).unwrap(), serde_json::json!({ "multicast_group": g["groups"] }));
    stop(dpu);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Collectives too large to address (spec section 2: a 32-bit `tensor_offset`), which once
/// passed with a wrapped memory count and panicked the control thread (after which every
/// request found the socket refusing connections): refused at load and at runtime with the
/// key, the most allowed and where the last chunk would start; the appliance keeps answering
/// and applying changes, and exits cleanly.
#[test]
fn an_unaddressable_collective_is_refused_and_the_control_plane_goes_on() {
    use functional_tests::grad::Coll;
    let dir = short_dir("huge");
    let seven = Coll { id: 7, ..Default::default() };
    let base =
        null_conf("").replace("name = \"n0\"\n", "name = \"n0\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\n");
    let conf = dir.join("dpu.toml");
    std::fs::write(&conf, format!("{base}{}", seven.toml())).unwrap();
    // (2^61 + 1000, chunks of 1, one member): its slots' bytes wrapped to 72,000.
    // (2^32 + 256, chunks of 256): its last chunk would start at 2^32.
    let cases = [((1u64 << 61) + 1000, 1u32, 2305843009213694951u64), ((1 << 32) + 256, 256, 1 << 32)];
    let expected = |tensor: u64, chunk: u32, last: u64| {
        format!(
            "key `collective[0].tensor_elements`: expected at most 4294967296 elements in chunks of {chunk}: the \
             last chunk would start at offset {last}, beyond 4294967295, the most the gradient header's 32-bit \
             tensor_offset carries (spec section 2); found {tensor}"
        )
    };
    // `dpu --check` refuses the file (exit status 2), whatever the memory limit.
    for &(tensor, chunk, last) in &cases {
        let huge = Coll { id: 9, n: 1, tensor, chunk, ..Default::default() };
        let bad = dir.join("bad.toml");
        std::fs::write(
            &bad,
            format!("[dataplane]\nmemory_limit_mb = 17592186044415\n{base}{}", huge.toml())
                .replace("\"-m\", \"256\", ", ""),
        )
        .unwrap();
        let o =
            Command::new(functional_tests::dpu_bin()).args(["--check", "-c", bad.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("bad.toml: {}", expected(tensor, chunk, last))), "{err}");
    }

    let stats = dir.join("stats.json");
    let (dpu, sock) = start(&conf, &stats, 120);
    for &(tensor, chunk, last) in &cases {
        let huge = Coll { id: 9, n: 1, tensor, chunk, ..Default::default() };
        let f = dir.join("huge.toml");
        std::fs::write(&f, huge.toml()).unwrap();
        let o = dpuctl(&sock, &["collective", "add", f.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("huge.toml: {}", expected(tensor, chunk, last))), "{err}");
        // Nothing changed, and the control plane answers.
        let v = ctl_json(&sock, &["collectives"]);
        let ids: Vec<u64> = v["collectives"].as_array().unwrap().iter().map(|c| u(&c["collective_id"])).collect();
        assert_eq!((ids, u(&v["version"])), (vec![7], 0), "{v}");
    }
    // And still applies changes: the largest tensor of chunks of 4 lanes with a memory limit
    // too small for it is refused by the memory check (2^30 slots of 96 bytes: 96 GiB)...
    let big = Coll { id: 9, n: 1, tensor: 1 << 32, chunk: 4, ..Default::default() };
    let f = dir.join("big.toml");
    std::fs::write(&f, big.toml()).unwrap();
    let o = dpuctl(&sock, &["collective", "add", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("big.toml: key `collective[0]`: the collectives need 98305 MiB of slot memory (this one 1073741824 slots, 98304 MiB)"),
        "{err}"
    );
    // ... and a small one is added.
    let nine = Coll { id: 9, ..Default::default() };
    std::fs::write(&f, nine.toml()).unwrap();
    let o = dpuctl(&sock, &["collective", "add", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "applied 1 operation(s): version 1");
    let text = stop(dpu);
    assert!(!text.contains("panicked"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
