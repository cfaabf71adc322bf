//! The files a run writes: checked against the files it reads before anything is written,
//! written under temporary names beside their final ones, verified, synced to disk and renamed
//! into place only when complete. Whatever way a run ends otherwise, the temporary files (and
//! the directories it created for them, when left empty) are removed: no partial file ever sits
//! under a final name, and a file that existed there before is left as it was.
//!
//! Files are compared by identity (device and inode, `stat(2)`), so a hard link or a symbolic
//! link to an input is that input. A file that does not exist yet cannot be an input; two such
//! outputs are the same file when their paths are, once the existing part of each is made
//! canonical and the rest normalised (`.` and `..`).
//!
//! net_pcap writes its tx files itself with libpcap's `pcap_dump` (stdio: a full disk or an I/O
//! error is never reported). So each tx queue's file is read back once the port is closed and
//! must hold exactly the records and bytes the queue reported sent (`rte_eth_stats`'
//! `q_opackets` and `q_obytes`) and nothing cut short; when it does not, the missing bytes are
//! written again to learn the OS error that lost them (such as "No space left on device").

use crate::pcapfile;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// What a path names, for telling whether two paths are one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// An existing file: its device and inode numbers.
    Inode(u64, u64),
    /// A file that does not exist yet: its absolute path, the existing part canonical.
    Path(PathBuf),
}

/// The identity of the file `path` names (following symbolic links).
pub fn identity(path: &Path) -> Identity {
    if let Ok(m) = std::fs::metadata(path) {
        return Identity::Inode(m.dev(), m.ino());
    }
    Identity::Path(normalise(path))
}

/// `path` made absolute: its longest existing ancestor canonical, the rest normalised lexically.
fn normalise(path: &Path) -> PathBuf {
    let abs =
        if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(path) };
    let mut base = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(base) {
            let mut out = c;
            for comp in rest.iter().rev() {
                match comp {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(n) => out.push(n),
                    _ => {}
                }
            }
            return out;
        }
        match (base.parent(), base.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                base = parent;
            }
            _ => return abs,
        }
    }
}

/// Whether `path` is not a file to stage: `/dev/null`, or an existing directory, device or
/// FIFO (written, or refused, as named).
pub fn is_special(path: &Path) -> bool {
    path == Path::new("/dev/null") || std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// A file the run reads or writes, described for messages.
#[derive(Debug, Clone)]
pub struct Named {
    /// What it is, as a subject ("port 1 output", "port 0's input", "the config file").
    pub what: String,
    /// Whose it is, as an object ("port 1's output").
    pub whose: String,
    /// The path as the user named it.
    pub path: PathBuf,
}

impl Named {
    /// A file described by `what` and `whose`.
    pub fn new(what: impl Into<String>, whose: impl Into<String>, path: &Path) -> Named {
        Named { what: what.into(), whose: whose.into(), path: path.to_path_buf() }
    }
}

/// Refuses a run whose outputs would destroy one of its inputs, or each other: every output
/// (final and temporary names alike) against every input, and the outputs against each other.
///
/// Errors: the first such pair, named.
pub fn check(inputs: &[Named], outputs: &[Named]) -> Result<(), String> {
    let ins: Vec<Identity> = inputs.iter().map(|i| identity(&i.path)).collect();
    let mut seen: Vec<(Identity, &Named)> = Vec::new();
    for out in outputs {
        let id = identity(&out.path);
        if let Some(k) = ins.iter().position(|i| *i == id) {
            return Err(format!(
                "{} {} is {} {}: writing it would destroy the input",
                out.what,
                out.path.display(),
                inputs[k].whose,
                inputs[k].path.display()
            ));
        }
        if let Some((_, other)) = seen.iter().find(|(o, other)| *o == id && other.whose != out.whose) {
            return Err(format!(
                "{} {} is also {}: each output needs its own file",
                out.what,
                out.path.display(),
                other.whose
            ));
        }
        seen.push((id, out));
    }
    Ok(())
}

/// One tx queue's file, as net_pcap writes it.
#[derive(Debug, Clone)]
struct Part {
    port: usize,
    queue: u16,
    path: PathBuf,
    /// Packets and bytes the queue reported sent, once known.
    sent: Option<(u64, u64)>,
}

/// One output: written to `temp`, renamed to `target` by [`Staged::commit`].
#[derive(Debug)]
struct Output {
    what: String,
    /// The path as the user named it.
    shown: PathBuf,
    /// The final file (a symbolic link resolved: the link keeps pointing at the output).
    target: PathBuf,
    temp: PathBuf,
    /// For pcap outputs: the per-tx-queue files net_pcap writes (one alone is `temp` itself).
    parts: Vec<Part>,
}

/// The outputs of a run, staged under temporary names: see the module's documentation.
/// Dropping it removes every temporary file not yet renamed into place, and the directories
/// [`Staged::create_dirs`] created unless the run committed.
#[derive(Debug, Default)]
pub struct Staged {
    outputs: Vec<Output>,
    created_dirs: Vec<PathBuf>,
    committed: bool,
}

/// The final file and temporary name of an output named `path`: beside the final file, hidden,
/// marked with the process id, `suffix` last.
fn temp_name(target: &Path, suffix: &str) -> PathBuf {
    let dir = target.parent().unwrap_or(Path::new(""));
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join(format!(".{name}.dpu-{}.{suffix}", std::process::id()))
}

fn target_of(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

impl Staged {
    /// Nothing staged yet.
    pub fn new() -> Staged {
        Staged::default()
    }

    /// Stages a pcap output `path` (`what`: "port 1 output") written by the tx queues `queues`
    /// (port, queue) of net_pcap; returns the file each queue's `tx_pcap` should name, in the
    /// same order.
    pub fn add_pcap(&mut self, what: &str, path: &Path, queues: &[(usize, u16)]) -> Vec<PathBuf> {
        let target = target_of(path);
        let temp = temp_name(&target, "tmp");
        let parts: Vec<Part> = queues
            .iter()
            .map(|&(port, queue)| Part {
                port,
                queue,
                path: if queues.len() == 1 { temp.clone() } else { temp_name(&target, &format!("q{queue}")) },
                sent: None,
            })
            .collect();
        let paths = parts.iter().map(|p| p.path.clone()).collect();
        self.outputs.push(Output { what: what.to_string(), shown: path.to_path_buf(), target, temp, parts });
        paths
    }

    /// Stages a plain output `path` (`what`: "stats JSON") that [`Staged::write_file`] writes.
    pub fn add_file(&mut self, what: &str, path: &Path) {
        let target = target_of(path);
        let temp = temp_name(&target, "tmp");
        self.outputs.push(Output {
            what: what.to_string(),
            shown: path.to_path_buf(),
            target,
            temp,
            parts: Vec::new(),
        });
    }

    /// Every file the run will write, final and temporary, for [`check`].
    pub fn files(&self) -> Vec<Named> {
        let mut v = Vec::new();
        for o in &self.outputs {
            let whose = match o.what.strip_suffix(" output") {
                Some(port) => format!("{port}'s output"),
                None => format!("the {}", o.what),
            };
            v.push(Named::new(&o.what, &whose, &o.shown));
            v.push(Named::new(format!("{} (its temporary file)", o.what), &whose, &o.temp));
            for p in o.parts.iter().filter(|p| p.path != o.temp) {
                v.push(Named::new(format!("{} (tx queue {}'s file)", o.what, p.queue), &whose, &p.path));
            }
        }
        v
    }

    /// Creates the missing directories of every output (removed again, if still empty, when
    /// the run does not commit).
    ///
    /// Errors: a directory that cannot be created, named with the output.
    pub fn create_dirs(&mut self) -> Result<(), String> {
        for o in &self.outputs {
            let Some(dir) = o.target.parent().filter(|d| !d.as_os_str().is_empty()) else { continue };
            let mut missing: Vec<&Path> =
                dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).collect();
            missing.reverse();
            for d in missing {
                match std::fs::create_dir(d) {
                    Ok(()) => self.created_dirs.push(d.to_path_buf()),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(format!("{} {}: cannot create {}: {e}", o.what, o.shown.display(), d.display()))
                    }
                }
            }
        }
        Ok(())
    }

    /// Records what tx queue `queue` of port `port` reported sent (packets, bytes; `None`: not
    /// known, only the file's integrity is checked).
    pub fn set_sent(&mut self, port: usize, queue: u16, sent: Option<(u64, u64)>) {
        for p in self.outputs.iter_mut().flat_map(|o| o.parts.iter_mut()) {
            if p.port == port && p.queue == queue {
                p.sent = sent;
            }
        }
    }

    /// Verifies every tx queue's file against what the queue sent, merges the files of each
    /// output with several into its temporary file by time ([`pcapfile::merge`]), and syncs it
    /// to disk. Call once the ports are closed (net_pcap closes its files there).
    ///
    /// Errors: a file short of what was sent or cut short (the message names the output, the
    /// OS error that lost the rest, and the records that reached the file), or a failed write
    /// of the merge or sync.
    pub fn finish_pcaps(&mut self) -> Result<(), String> {
        for o in self.outputs.iter().filter(|o| !o.parts.is_empty()) {
            for p in &o.parts {
                verify(o, p)?;
            }
            let fail = |e: String| format!("{} {}: {e}", o.what, o.shown.display());
            if o.parts.len() > 1 {
                let parts: Vec<&Path> = o.parts.iter().map(|p| p.path.as_path()).collect();
                pcapfile::merge(&parts, &o.temp).map_err(fail)?;
                for p in &o.parts {
                    let _ = std::fs::remove_file(&p.path);
                }
            } else {
                let f = std::fs::File::open(&o.temp).map_err(|e| fail(format!("{}: {e}", o.temp.display())))?;
                f.sync_all().map_err(|e| fail(format!("{}: cannot write: {e}", o.temp.display())))?;
            }
        }
        Ok(())
    }

    /// Writes the staged plain output `what` to its temporary file, checking every write, and
    /// syncs it to disk.
    ///
    /// Errors: the write or sync failed (the message names the file and the OS error).
    pub fn write_file(&mut self, what: &str, bytes: &[u8]) -> Result<(), String> {
        let Some(o) = self.outputs.iter().find(|o| o.what == what && o.parts.is_empty()) else {
            return Err(format!("{what}: not staged"));
        };
        let fail = |e: std::io::Error| format!("{} {}: cannot write: {e}", o.what, o.shown.display());
        let mut f = std::fs::File::create(&o.temp).map_err(fail)?;
        f.write_all(bytes).map_err(fail)?;
        f.sync_all().map_err(fail)
    }

    /// Renames every temporary file into place, then syncs the directories.
    ///
    /// Errors: a rename that failed (the files renamed before it stay in place).
    pub fn commit(&mut self) -> Result<(), String> {
        for o in &self.outputs {
            std::fs::rename(&o.temp, &o.target).map_err(|e| {
                format!("{} {}: cannot rename {} into place: {e}", o.what, o.shown.display(), o.temp.display())
            })?;
            let dir = o.target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            // The rename is durable once the directory is synced (some filesystems cannot).
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for o in &self.outputs {
            if !self.committed {
                let _ = std::fs::remove_file(&o.temp);
            }
            for p in &o.parts {
                if p.path != o.temp {
                    let _ = std::fs::remove_file(&p.path);
                }
            }
        }
        if !self.committed {
            for d in self.created_dirs.iter().rev() {
                let _ = std::fs::remove_dir(d); // only when empty
            }
        }
    }
}

/// Checks that tx queue `p`'s file holds exactly what the queue sent, nothing cut short.
fn verify(o: &Output, p: &Part) -> Result<(), String> {
    // A file without even its header (the disk was full from the start) reads as no records.
    let read = pcapfile::contents(&p.path);
    let got = read.as_ref().copied().unwrap_or_default();
    let complete = read.is_ok()
        && match p.sent {
            Some((packets, bytes)) => got.records == packets && got.bytes == bytes && got.errors == 0,
            None => got.errors == 0,
        };
    if complete {
        return Ok(());
    }
    let (want, want_bytes) = p.sent.unwrap_or((got.records, got.bytes));
    // libpcap wrote through stdio and lost the error: write the missing bytes again to learn
    // it (a full disk, a quota, an I/O error). A pcap file is a 24-byte header and a 16-byte
    // header per record.
    let expected_len = 24 + 16 * want + want_bytes;
    let len = std::fs::metadata(&p.path).map(|m| m.len()).unwrap_or(0);
    let cause = match (probe(&p.path, expected_len.saturating_sub(len).max(1)), read) {
        (Err(e), _) => format!("cannot write: {e}"),
        (Ok(()), Err(e)) => e,
        (Ok(()), Ok(_)) => "the data were lost without an error being reported".to_string(),
    };
    Err(format!(
        "{} {}: {cause}: {} of the {want} records ({} of {want_bytes} bytes) tx queue {} sent reached the file{}",
        o.what,
        o.shown.display(),
        got.records,
        got.bytes,
        p.queue,
        if got.errors > 0 { ", the last one cut short" } else { "" }
    ))
}

/// Appends `n` zero bytes (at most 1 GiB) to `path` and syncs it: the first error is why the
/// file came out short.
fn probe(path: &Path, n: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    let zeros = vec![0u8; 1 << 16];
    let mut left = n.min(1 << 30);
    while left > 0 {
        let k = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..k])?;
        left -= k as u64;
    }
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dpu-outputs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn hard_links_symlinks_and_aliases_are_one_file() {
        let d = dir("identity");
        let a = d.join("a.pcap");
        std::fs::write(&a, b"x").unwrap();
        std::fs::hard_link(&a, d.join("hard.pcap")).unwrap();
        std::os::unix::fs::symlink(&a, d.join("soft.pcap")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        let inputs = [Named::new("port 0's input", "port 0's input", &a)];
        for alias in ["hard.pcap", "soft.pcap", "sub/../a.pcap", "./a.pcap"] {
            let out = [Named::new("port 1 output", "port 1's output", &d.join(alias))];
            let e = check(&inputs, &out).unwrap_err();
            assert!(e.contains("would destroy the input") && e.contains("port 0's input"), "{alias}: {e}");
        }
        // Files that do not exist yet: one when their paths are, even through missing directories.
        let outs = [
            Named::new("port 0 output", "port 0's output", &d.join("new/x/../o.pcap")),
            Named::new("port 1 output", "port 1's output", &d.join("new/./o.pcap")),
        ];
        assert!(check(&inputs, &outs).unwrap_err().contains("is also port 0's output"));
        let outs = [
            Named::new("port 0 output", "port 0's output", &d.join("new/o.pcap")),
            Named::new("port 1 output", "port 1's output", &d.join("new/p.pcap")),
        ];
        assert_eq!(check(&inputs, &outs), Ok(()));
        // A copy is another file.
        std::fs::copy(&a, d.join("copy.pcap")).unwrap();
        assert_eq!(check(&inputs, &[Named::new("port 1 output", "port 1's output", &d.join("copy.pcap"))]), Ok(()));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn staged_files_appear_only_when_committed_and_vanish_otherwise() {
        let d = dir("staged");
        let json = d.join("deep/er/stats.json");
        {
            let mut s = Staged::new();
            s.add_file("stats JSON", &json);
            s.create_dirs().unwrap();
            s.write_file("stats JSON", b"{}").unwrap();
            assert!(!json.exists());
            assert_eq!(std::fs::read_dir(d.join("deep/er")).unwrap().count(), 1, "the temporary file");
        }
        assert!(!d.join("deep").exists(), "not committed: the temporary file and the created directories go");
        let mut s = Staged::new();
        s.add_file("stats JSON", &json);
        s.create_dirs().unwrap();
        s.write_file("stats JSON", b"{\"a\": 1}").unwrap();
        s.commit().unwrap();
        drop(s);
        assert_eq!(std::fs::read(&json).unwrap(), b"{\"a\": 1}");
        assert_eq!(std::fs::read_dir(d.join("deep/er")).unwrap().count(), 1, "no temporary file left");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_tx_file_short_of_what_was_sent_is_refused() {
        let d = dir("short");
        let out = d.join("o.pcap");
        // Two records of 10 and 20 bytes written; the queue sent `sent`.
        let stage = |sent| {
            let mut s = Staged::new();
            let parts = s.add_pcap("port 1 output", &out, &[(1, 0)]);
            let mut w = pcapfile::Writer::create(&parts[0], 1, 65535, false).unwrap();
            w.record(1, 0, 10, &[1; 10]).unwrap();
            w.record(1, 1, 20, &[2; 20]).unwrap();
            w.finish().unwrap();
            s.set_sent(1, 0, Some(sent));
            s
        };
        for sent in [(3, 40), (2, 31), (1, 10)] {
            let mut s = stage(sent);
            let e = s.finish_pcaps().unwrap_err();
            let want = format!("2 of the {} records (30 of {} bytes) tx queue 0 sent", sent.0, sent.1);
            assert!(e.contains("port 1 output") && e.contains("o.pcap") && e.contains(&want), "{e}");
            drop(s);
            assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "{sent:?}: no file left");
        }
        let mut s = stage((2, 30));
        s.finish_pcaps().unwrap();
        s.commit().unwrap();
        drop(s);
        assert_eq!(pcapfile::contents(&out).unwrap(), pcapfile::Contents { records: 2, bytes: 30, errors: 0 });
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "the output alone");
        let _ = std::fs::remove_dir_all(&d);
    }
}
