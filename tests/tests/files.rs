//! What the appliance reads and writes is never lost or clobbered silently: outputs that would
//! destroy an input are refused (by file identity, not by name), an output that cannot be
//! written whole (a full disk) fails the run and leaves nothing under its name, an input that
//! cannot be read whole fails the run, and no way out leaves the run's temporary files behind.

use functional_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Two ports (replays turn them into net_pcap vdevs), everything forwarded to port 1.
fn two_ports() -> String {
    two_null_ports(EAL, TO_PORT1)
}

/// The same with two worker lcores, each polling one port: every port has two tx queues, so a
/// replay writes one file per tx queue and merges them.
fn two_ports_two_workers() -> String {
    two_null_ports(TWO_WORKERS, TO_PORT1)
}

/// A `len`-byte Ethernet frame of a local experimental EtherType (0x88b5), its payload marked
/// with `i`: forwarded as it is.
fn frame(i: usize, len: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5];
    f.extend((0..len - 14).map(|k| (k ^ i ^ (i >> 8)) as u8));
    f
}

/// Writes `n` frames of `len` bytes to `path`.
fn input(path: &Path, n: usize, len: usize) {
    let frames: Vec<(Vec<u8>, Option<u32>)> = (0..n).map(|i| (frame(i, len), None)).collect();
    write_pcap(path, &frames);
}

/// Runs `dpu -c conf ARGS` in `dir` (no `--stats-json` unless `args` has one).
fn dpu(dir: &Path, conf: &Path, args: &[String]) -> Run {
    let mut cmd = Command::new(dpu_bin());
    cmd.current_dir(dir).arg("-c").arg(conf).args(args);
    let start = std::time::Instant::now();
    let output = run_with_timeout(cmd, Duration::from_secs(60));
    Run { output, stats: None, elapsed: start.elapsed() }
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn arg(flag: &str, port: usize, path: &Path) -> String {
    format!("--{flag}={port}={}", path.display())
}

#[test]
fn a_hard_link_to_the_input_given_as_tx_is_refused() {
    let dir = scratch("files-hardlink");
    let conf = write_config(&dir, "c.toml", &two_ports());
    let input_file = dir.join("in.pcap");
    input(&input_file, 50, 100);
    let before = std::fs::read(&input_file).unwrap();
    let link = dir.join("link.pcap");
    std::fs::hard_link(&input_file, &link).unwrap();
    let sym = dir.join("sym.pcap");
    std::os::unix::fs::symlink(&input_file, &sym).unwrap();
    for (out, port) in [(&link, 1), (&link, 0), (&sym, 1)] {
        let run = dpu(&dir, &conf, &[arg("rx", 0, &input_file), arg("tx", port, out)]);
        assert_eq!(run.code(), 2, "{}: {}", out.display(), run.stderr());
        let e = run.stderr();
        assert!(
            e.contains(&format!("port {port} output {}", out.display()))
                && e.contains(&format!("is port 0's input {}", input_file.display()))
                && e.contains("would destroy the input"),
            "{e}"
        );
        assert_eq!(std::fs::read(&input_file).unwrap(), before, "the input is intact");
    }
    assert_eq!(names(&dir), ["c.toml", "in.pcap", "link.pcap", "sym.pcap"], "nothing written");
}

#[test]
fn stats_json_naming_an_input_pcap_or_the_config_is_refused() {
    let dir = scratch("files-stats-input");
    let conf = write_config(&dir, "c.toml", &two_ports());
    let conf_before = std::fs::read(&conf).unwrap();
    let input_file = dir.join("in.pcap");
    input(&input_file, 50, 100);
    let before = std::fs::read(&input_file).unwrap();
    let out = dir.join("out.pcap");
    for (json, what) in [
        (input_file.clone(), format!("is port 0's input {}", input_file.display())),
        (conf.clone(), format!("is the config file {}", conf.display())),
        (dir.join("x/../c.toml"), "is the config file".to_string()),
        (out.clone(), "is also port 1's output".to_string()),
    ] {
        std::fs::create_dir_all(dir.join("x")).unwrap();
        let run = dpu(
            &dir,
            &conf,
            &[arg("rx", 0, &input_file), arg("tx", 1, &out), "--stats-json".into(), json.display().to_string()],
        );
        assert_eq!(run.code(), 2, "{}: {}", json.display(), run.stderr());
        let e = run.stderr();
        assert!(e.contains(&format!("stats JSON {}", json.display())) && e.contains(&what), "{e}");
        assert_eq!(std::fs::read(&input_file).unwrap(), before, "the input is intact");
        assert_eq!(std::fs::read(&conf).unwrap(), conf_before, "the config is intact");
        assert!(!out.exists(), "nothing written");
    }
}

#[test]
fn tx_naming_the_config_is_refused() {
    let dir = scratch("files-tx-config");
    let conf = write_config(&dir, "c.toml", &two_ports());
    let conf_before = std::fs::read(&conf).unwrap();
    let input_file = dir.join("in.pcap");
    input(&input_file, 5, 100);
    // Named as it is, relatively, and through a hard link.
    std::fs::hard_link(&conf, dir.join("conf-link.toml")).unwrap();
    for out in [conf.clone(), PathBuf::from("c.toml"), dir.join("conf-link.toml")] {
        for port in [0, 1] {
            let run = dpu(&dir, &conf, &[arg("rx", 0, &input_file), arg("tx", port, &out)]);
            assert_eq!(run.code(), 2, "{}: {}", out.display(), run.stderr());
            let e = run.stderr();
            assert!(
                e.contains(&format!("port {port} output {}", out.display())) && e.contains("is the config file"),
                "{e}"
            );
            assert_eq!(std::fs::read(&conf).unwrap(), conf_before, "the config is intact");
        }
    }
    // And the config's own output naming the config.
    let text = format!(
        "{EAL}\n[[port]]\nvdev = \"net_pcap0,rx_pcap={},tx_pcap={}\"\n[[table]]\nname = \"l2\"\nkey = [{{ field = \"eth.dst\", match = \"exact\" }}]\ndefault_action = \"forward(0)\"\n",
        input_file.display(),
        dir.join("self.toml").display()
    );
    let own = write_config(&dir, "self.toml", &text);
    let run = dpu(&dir, &own, &[]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(run.stderr().contains("port 0 output") && run.stderr().contains("is the config file"), "{}", run.stderr());
    assert_eq!(std::fs::read_to_string(&own).unwrap(), text);
}

/// Runs `dpu ARGS` in `dir` inside a private mount namespace where `small` is a fresh 2 MiB
/// tmpfs, after `prepare` (shell) ran there; returns the run and the names left on the tmpfs.
/// Fails (never skips) when the namespace or the mount cannot be made.
fn on_small_tmpfs(dir: &Path, small: &Path, prepare: &str, args: &[String]) -> (Run, Vec<String>) {
    std::fs::create_dir_all(small).unwrap();
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "mount -t tmpfs -o size=2m tmpfs '{small}' || exit 97\n{prepare}\n'{dpu}' {args}\nrc=$?\necho 'left on the tmpfs:'\nls -A '{small}'\nexit $rc\n",
        small = small.display(),
        dpu = dpu_bin().display(),
        args = quoted.join(" ")
    );
    let mut cmd = Command::new("unshare");
    cmd.current_dir(dir).args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let start = std::time::Instant::now();
    let output = run_with_timeout(cmd, Duration::from_secs(60));
    let run = Run { output, stats: None, elapsed: start.elapsed() };
    let out = run.stdout();
    let Some((_, left)) = out.split_once("left on the tmpfs:\n") else {
        panic!("no private tmpfs (unshare and mount need root): exit {}, stderr:\n{}", run.code(), run.stderr())
    };
    let left = left.lines().map(str::to_string).collect();
    (run, left)
}

#[test]
fn a_full_disk_fails_the_replay_and_leaves_no_file() {
    let dir = scratch("files-full-disk");
    // 20000 frames of 200 bytes: 4.3 MB of output for a 2 MiB tmpfs.
    let input_file = dir.join("in.pcap");
    input(&input_file, 20_000, 200);
    for (conf_text, what) in
        [(two_ports(), "one worker"), (two_ports_two_workers(), "two workers: a file per tx queue")]
    {
        let conf = write_config(&dir, "c.toml", &conf_text);
        let small = dir.join("small");
        let out = small.join("out.pcap");
        let stats = dir.join("stats.json");
        let (run, left) = on_small_tmpfs(
            &dir,
            &small,
            "",
            &[
                "-c".into(),
                conf.display().to_string(),
                arg("rx", 0, &input_file),
                arg("tx", 1, &out),
                "--stats-json".into(),
                stats.display().to_string(),
            ],
        );
        assert_eq!(run.code(), 1, "{what}: {}", run.stderr());
        let e = run.stderr();
        assert!(
            e.contains(&format!("port 1 output {}", out.display())) && e.contains("No space left on device"),
            "{what}: {e}"
        );
        assert!(e.contains("of the 20000 records"), "{what}: {e}");
        assert_eq!(left, Vec::<String>::new(), "{what}: neither the output nor a temporary file is left");
        assert!(!stats.exists(), "{what}: a failed run writes no stats");
        assert!(run.elapsed < Duration::from_secs(20), "{what}: took {:?}", run.elapsed);
    }
}

#[test]
fn stats_json_on_a_full_disk_fails_and_leaves_no_file() {
    let dir = scratch("files-full-stats");
    let conf = write_config(&dir, "c.toml", &two_ports());
    let input_file = dir.join("in.pcap");
    input(&input_file, 100, 100);
    let small = dir.join("small");
    let json = small.join("stats.json");
    let out = dir.join("out.pcap");
    // Fill the tmpfs first (head stops at "No space left on device").
    let fill = format!("head -c 4000000 /dev/zero > '{}/fill' 2>/dev/null", small.display());
    let (run, left) = on_small_tmpfs(
        &dir,
        &small,
        &fill,
        &[
            "-c".into(),
            conf.display().to_string(),
            arg("rx", 0, &input_file),
            arg("tx", 1, &out),
            "--stats-json".into(),
            json.display().to_string(),
        ],
    );
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let e = run.stderr();
    assert!(e.contains(&format!("stats JSON {}", json.display())) && e.contains("No space left on device"), "{e}");
    assert_eq!(left, ["fill"], "no stats JSON, no temporary file");
    assert!(!out.exists(), "a failed run commits no output either");
    assert_eq!(names(&dir), ["c.toml", "in.pcap", "small"], "and leaves no temporary file");
}

#[test]
fn a_damaged_record_mid_file_fails_the_replay_naming_it() {
    let dir = scratch("files-garbage");
    let conf = write_config(&dir, "c.toml", &two_ports());
    let good = dir.join("good.pcap");
    input(&good, 6, 82);
    let bytes = std::fs::read(&good).unwrap();
    // Record 3's header claims a caplen of 0x7fffffff: what follows is unreadable as written.
    let at = 24 + 2 * (16 + 82);
    let mut damaged = bytes.clone();
    damaged[at + 8..at + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let input_file = dir.join("in.pcap");
    std::fs::write(&input_file, &damaged).unwrap();
    let out = dir.join("out.pcap");
    let stats = dir.join("stats.json");
    // Alone, and merged with another input (read before anything is written either way).
    for args in [
        vec![arg("rx", 0, &input_file)],
        vec![arg("rx", 0, &good), arg("rx", 0, &input_file)],
        vec![arg("rx", 1, &good), arg("rx", 0, &input_file)],
    ] {
        let mut args = args.clone();
        args.extend([arg("tx", 1, &out), "--stats-json".into(), stats.display().to_string()]);
        let run = dpu(&dir, &conf, &args);
        assert_eq!(run.code(), 1, "{args:?}: {}", run.stderr());
        let e = run.stderr();
        assert!(
            e.contains(&input_file.display().to_string())
                && e.contains(&format!("record 3 at byte offset {at} cannot be read")),
            "{args:?}: {e}"
        );
        assert_eq!(names(&dir), ["c.toml", "good.pcap", "in.pcap"], "{args:?}: nothing written");
    }
    // Cut at the end instead (the last record short): counted, and the replay succeeds.
    std::fs::write(&input_file, &bytes[..bytes.len() - 10]).unwrap();
    let run = run_dpu(&dir, &conf, &[arg("rx", 0, &input_file), arg("tx", 1, &out)]);
    run.assert_ok();
    assert_eq!(run.stats()["input_records"], 5);
    assert_eq!(run.stats()["input_errors"], 1);
    assert_eq!(read_pcap(&out).len(), 5);
}

/// The run's temporary directory (`$TMPDIR/dpu-PID`, holding merged inputs and an empty one
/// for ports without input) is gone however the run ends.
#[test]
fn error_exits_leave_no_temporary_directory() {
    let dir = scratch("files-tmpdir");
    let conf = write_config(&dir, "c.toml", &two_ports());
    let input_file = dir.join("in.pcap");
    input(&input_file, 20, 100);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = dir.join("out.pcap");
    let run_in_tmp = |args: &[String]| {
        let mut cmd = Command::new(dpu_bin());
        cmd.current_dir(&dir).env("TMPDIR", &tmp).arg("-c").arg(&conf).args(args);
        let output = run_with_timeout(cmd, Duration::from_secs(60));
        Run { output, stats: None, elapsed: Duration::ZERO }
    };
    for (args, code, want) in [
        // Port 1's empty input is made before port 0's input turns out missing.
        (vec![arg("rx", 0, Path::new("/nonexistent/in.pcap")), arg("tx", 1, &out)], 1, "cannot open"),
        // Merged inputs made, then EAL refuses an option.
        (
            vec![
                arg("rx", 0, &input_file),
                arg("rx", 0, &input_file),
                arg("tx", 1, &out),
                "--".into(),
                "--no-such-eal-option".into(),
            ],
            1,
            "rte_eal_init",
        ),
        // A port that fails to probe: the output is a directory.
        (vec![arg("rx", 0, &input_file), arg("tx", 1, &tmp)], 1, "failed to probe"),
        // A usage error.
        (vec![arg("rx", 0, &input_file), arg("tx", 1, &input_file)], 2, "would destroy the input"),
        // And a run that succeeds.
        (vec![arg("rx", 0, &input_file), arg("rx", 0, &input_file), arg("tx", 1, &out)], 0, ""),
    ] {
        let run = run_in_tmp(&args);
        assert_eq!(run.code(), code, "{args:?}: {}", run.stderr());
        assert!(run.stderr().contains(want), "{args:?}: {}", run.stderr());
        assert_eq!(names(&tmp), Vec::<String>::new(), "{args:?}: the temporary directory is gone");
        let mut want_names = vec!["c.toml", "in.pcap"];
        if code == 0 {
            want_names.push("out.pcap");
        } else {
            assert!(!out.exists(), "{args:?}: no output");
        }
        want_names.push("tmp");
        assert_eq!(names(&dir), want_names, "{args:?}: no temporary file beside the output");
    }
    assert_eq!(read_pcap(&out).len(), 40, "both copies of the input, merged");
}

#[test]
fn a_replay_writes_its_output_whole_under_the_final_name_and_no_temporary_file() {
    let dir = scratch("files-success");
    let input_file = dir.join("in.pcap");
    input(&input_file, 3000, 300);
    let want = read_pcap(&input_file);
    for (conf_text, what) in [(two_ports(), "one worker"), (two_ports_two_workers(), "two workers")] {
        let conf = write_config(&dir, "c.toml", &conf_text);
        let sub = dir.join("out");
        let _ = std::fs::remove_dir_all(&sub);
        // The output's directory is created; an older output there is replaced whole.
        let out = sub.join("deeper/out.pcap");
        let stats = sub.join("stats.json");
        let run = dpu(
            &dir,
            &conf,
            &[arg("rx", 0, &input_file), arg("tx", 1, &out), "--stats-json".into(), stats.display().to_string()],
        );
        assert_eq!(run.code(), 0, "{what}: {}", run.stderr());
        assert_eq!(read_pcap(&out), want, "{what}: every frame, in order");
        let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        assert_eq!(s["ports"][1]["ethdev"]["opackets"], 3000, "{what}");
        assert_eq!(names(&sub), ["deeper", "stats.json"], "{what}");
        assert_eq!(names(&sub.join("deeper")), ["out.pcap"], "{what}: no temporary file left");
        // Again over the existing output, through a symbolic link: the link stays, its target
        // is replaced.
        let real = sub.join("deeper/real.pcap");
        std::fs::rename(&out, &real).unwrap();
        std::os::unix::fs::symlink("real.pcap", &out).unwrap();
        let run = dpu(&dir, &conf, &[arg("rx", 0, &input_file), arg("tx", 1, &out)]);
        assert_eq!(run.code(), 0, "{what}: {}", run.stderr());
        assert!(std::fs::symlink_metadata(&out).unwrap().file_type().is_symlink(), "{what}");
        assert_eq!(read_pcap(&real), want, "{what}");
        assert_eq!(names(&sub.join("deeper")), ["out.pcap", "real.pcap"], "{what}: no temporary file left");
    }
}

/// SIGTERM at any moment of a replay (while its inputs are merged, or while the ports run): the
/// run ends cleanly either way, its temporary directory and files go, and the output is either
/// whole in place (stopped while running: what was sent, checked) or absent (stopped before
/// the ports started).
#[test]
fn sigterm_leaves_no_temporary_file_and_no_partial_output() {
    let dir = scratch("files-sigterm");
    let conf = write_config(&dir, "c.toml", &two_ports());
    let (a, b) = (dir.join("a.pcap"), dir.join("b.pcap"));
    input(&a, 100_000, 60);
    input(&b, 100_000, 60);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = dir.join("out.pcap");
    let stats = dir.join("stats.json");
    // When the merged input is being made (before the ports start), and a little after
    // net_pcap created the output's temporary file (while the ports run, usually).
    for (wait_for_output, delay_ms) in [(false, 0), (true, 100), (true, 250)] {
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(&stats);
        let child = dpu_command(&conf, &stats)
            .current_dir(&dir)
            .env("TMPDIR", &tmp)
            .args(["-q".into(), arg("rx", 0, &a), arg("rx", 0, &b), arg("tx", 1, &out)])
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let ready = || {
            if wait_for_output {
                names(&dir).iter().any(|n| n.starts_with(".out.pcap.dpu-"))
            } else {
                std::fs::read_dir(&tmp).unwrap().next().is_some()
            }
        };
        while !ready() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("SIGTERM after {delay_ms} ms: exit {:?}", output.status.code());
        assert_eq!(names(&tmp), Vec::<String>::new(), "{delay_ms} ms: the temporary directory is gone");
        match output.status.code() {
            Some(0) => {
                let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
                let sent = s["ports"][1]["ethdev"]["opackets"].as_u64().unwrap();
                assert_eq!(read_pcap(&out).len() as u64, sent, "{delay_ms} ms: what was sent, whole");
                assert_eq!(names(&dir), ["a.pcap", "b.pcap", "c.toml", "out.pcap", "stats.json", "tmp"]);
            }
            Some(1) => {
                assert!(stderr.contains("before the ports started"), "{delay_ms} ms: {stderr}");
                assert_eq!(names(&dir), ["a.pcap", "b.pcap", "c.toml", "tmp"], "{delay_ms} ms: nothing written");
            }
            other => panic!("{delay_ms} ms: exit {other:?}: {stderr}"),
        }
    }
}
