//! The metrics endpoint's HTTP/1.x server: `std`'s TCP listener, a thread per connection (at
//! most [`Limits::connections`] at once; one more is answered 503 without a thread), one
//! request per connection (`Connection: close`), and deadlines on reading the request and on
//! writing the reply, so that no client, idle, slow, pipelining or malformed, holds a thread for
//! longer than [`Limits::read`] + [`Limits::write`] or makes the appliance's memory grow.
//!
//! What it answers (RFC 9110, RFC 9112): `GET` and `HEAD` of [`PATH`] (a query string ignored)
//! 200 with the body the server was given; other paths 404; other methods 405 with `Allow: GET,
//! HEAD`; a request line that is not `METHOD SP TARGET SP HTTP/x.y` in visible ASCII, or header
//! bytes outside ASCII, 400; versions other than HTTP/1.0 and 1.1 505; a request head over
//! [`Limits::head_bytes`] 431; a head not complete within [`Limits::read`] 408. Lines may end in
//! CRLF or a bare LF (RFC 9112 section 2.2). A failing `accept` (out of file descriptors) is
//! reported on stderr at most once per 10 s and retried: the listener never stops on its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The one path served.
pub const PATH: &str = "/metrics";

/// The server's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once (each on a thread).
    pub connections: usize,
    /// The longest request head (request line and headers, bytes).
    pub head_bytes: usize,
    /// How long a client may take to send its request head.
    pub read: Duration,
    /// How long a client may take to read the reply.
    pub write: Duration,
}

impl Default for Limits {
    /// 64 connections, 8 KiB heads, 5 s to send a request, 10 s to read a reply.
    fn default() -> Self {
        Limits { connections: 64, head_bytes: 8192, read: Duration::from_secs(5), write: Duration::from_secs(10) }
    }
}

/// The running server; dropping it stops accepting (connections being answered finish on their
/// own threads, within their deadlines, without holding up the drop).
#[derive(Debug)]
pub struct Server {
    /// The address it listens on (with the port the OS chose for port 0).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Connections being answered now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join(); // it polls `stop` every 10 ms
        }
    }
}

/// Listens on `addr` (`HOST:PORT`) and answers every `GET`/`HEAD` of [`PATH`] with `body()` as
/// `content_type`. Errors: the address cannot be bound (in use, not local, bad syntax) or the
/// accepting thread cannot start, as text.
pub fn serve(
    addr: &str,
    content_type: &'static str,
    limits: Limits,
    body: impl Fn() -> String + Send + Sync + 'static,
) -> Result<Server, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let active = Arc::new(AtomicUsize::new(0));
    let body: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(body);
    let (halt, busy) = (stop.clone(), active.clone());
    let accept = std::thread::Builder::new()
        .name("dpu-metrics".into())
        .spawn(move || accept_loop(&listener, &halt, &busy, limits, content_type, &body))
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    Ok(Server { addr: bound, stop, active, accept: Some(accept) })
}

/// Decrements the count of connections being answered when the connection's thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn accept_loop(
    listener: &TcpListener,
    stop: &AtomicBool,
    active: &Arc<AtomicUsize>,
    limits: Limits,
    content_type: &'static str,
    body: &Arc<dyn Fn() -> String + Send + Sync>,
) {
    let mut last_report: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: transient; say so now and then.
                if last_report.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    eprintln!("dpu: metrics: accept: {e}; still listening, retrying");
                    last_report = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::Relaxed) >= limits.connections {
            active.fetch_sub(1, Ordering::Relaxed);
            // No thread for it: one non-blocking read of what it sent (so that closing does not
            // reset the connection under the reply), one non-blocking write of a short reply.
            let _ = stream.set_nonblocking(true);
            let _ = (&stream).read(&mut [0u8; 8192]);
            let _ = (&stream).write(&head(503, "text/plain; charset=utf-8", 0, false));
            continue;
        }
        let slot = Slot(active.clone());
        let body = body.clone();
        let spawned = std::thread::Builder::new().name("dpu-metrics-c".into()).spawn(move || {
            let _slot = slot;
            connection(stream, limits, content_type, &*body);
        });
        // A thread that cannot start: its closure (and the slot and stream in it) is dropped.
        drop(spawned);
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// `GET` (with a body) or `HEAD` (without) of the metrics.
    Metrics { head_only: bool },
    /// A reply without body of this status (and `Allow` with 405).
    Status(u16),
}

/// Reads one request head from `s` and answers it; the connection then closes.
fn connection(mut s: TcpStream, limits: Limits, content_type: &'static str, body: &dyn Fn() -> String) {
    let _ = s.set_nonblocking(false);
    let ask = read_head(&mut s, limits);
    let reply = match ask {
        Ask::Metrics { head_only } => {
            let text = body();
            let mut r = head(200, content_type, text.len(), false);
            if !head_only {
                r.extend_from_slice(text.as_bytes());
            }
            r
        }
        Ask::Status(code) => {
            let text = phrases(code).1;
            let mut r = head(code, "text/plain; charset=utf-8", text.len() + 1, code == 405);
            r.extend_from_slice(text.as_bytes());
            r.push(b'\n');
            r
        }
    };
    let deadline = Instant::now() + limits.write;
    let mut off = 0;
    while off < reply.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_write_timeout(Some(left)).is_err() {
            return;
        }
        match s.write(&reply[off..]) {
            Ok(0) => return,
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
}

/// Reads until the end of the request head (an empty line), at most `limits.head_bytes`, within
/// `limits.read`, and says what it asks.
fn read_head(s: &mut TcpStream, limits: Limits) -> Ask {
    let deadline = Instant::now() + limits.read;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = head_end(&buf) {
            return if end > limits.head_bytes { Ask::Status(431) } else { judge(&buf[..end]) };
        }
        if buf.len() > limits.head_bytes {
            return Ask::Status(431);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return Ask::Status(408);
        }
        match s.read(&mut chunk) {
            Ok(0) => return Ask::Status(400), // closed before the head ended
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Ask::Status(408)
            }
            Err(_) => return Ask::Status(400),
        }
    }
}

/// The length of the head in `buf` up to its empty line (CRLF CRLF, or bare LFs), if complete.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b == b'\n' {
            let line = &buf[line_start..i];
            if line.is_empty() || line == b"\r" {
                return Some(line_start);
            }
            line_start = i + 1;
        }
    }
    None
}

/// What the request head `h` (without its empty line) asks for.
fn judge(h: &[u8]) -> Ask {
    if !h.iter().all(|&b| b == b'\r' || b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b)) {
        return Ask::Status(400);
    }
    let text = std::str::from_utf8(h).unwrap_or("");
    let line = text.split('\n').next().unwrap_or("").trim_end_matches('\r');
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else { return Ask::Status(400) };
    if method.is_empty() || target.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Ask::Status(400);
    }
    match version {
        "HTTP/1.1" | "HTTP/1.0" => {}
        v if v.starts_with("HTTP/") && v.len() > 5 => return Ask::Status(505),
        _ => return Ask::Status(400),
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Ask::Status(405),
    };
    if target.split('?').next() == Some(PATH) {
        Ask::Metrics { head_only }
    } else {
        Ask::Status(404)
    }
}

/// A status's reason phrase, and for a reply without the metrics, a line saying what to do.
fn phrases(code: u16) -> (&'static str, &'static str) {
    match code {
        200 => ("OK", ""),
        404 => ("Not Found", "not found: try GET /metrics"),
        405 => ("Method Not Allowed", "read-only: GET /metrics"),
        408 => ("Request Timeout", "the request took too long to arrive"),
        431 => ("Request Header Fields Too Large", "request head too large"),
        503 => ("Service Unavailable", "too many connections: try again"),
        505 => ("HTTP Version Not Supported", "HTTP/1.0 and HTTP/1.1 only"),
        _ => ("Bad Request", "bad request"),
    }
}

/// A reply's status line and headers for a body of `len` bytes.
fn head(code: u16, content_type: &str, len: usize, allow: bool) -> Vec<u8> {
    let reason = phrases(code).0;
    let allow = if allow { "Allow: GET, HEAD\r\n" } else { "" };
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n{allow}Connection: close\r\n\r\n"
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(limits: Limits) -> Server {
        serve("127.0.0.1:0", "text/plain", limits, || "dpu_x_total 1\n# EOF\n".to_string()).unwrap()
    }

    /// Sends `req`, reads the whole reply (the server closes).
    fn ask(s: &Server, req: &[u8]) -> String {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(req).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn answers_what_rfc_9110_and_9112_say() {
        let s = server(Limits::default());
        let ok = ask(&s, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 20\r\n") && ok.ends_with("\r\n\r\ndpu_x_total 1\n# EOF\n"), "{ok}");
        assert!(ok.contains("Connection: close\r\n"), "{ok}");
        // HEAD: the same head, no body; a query string and bare LFs are fine.
        let h = ask(&s, b"HEAD /metrics?x=1 HTTP/1.0\n\n");
        assert!(h.starts_with("HTTP/1.1 200 OK\r\n") && h.contains("Content-Length: 20\r\n"), "{h}");
        assert!(h.ends_with("\r\n\r\n"), "{h}");
        let status = |r: &str| r.split(' ').nth(1).unwrap_or("").to_string();
        for (req, code) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], "404"),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", "404"),
            (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "405"),
            (b"GET /metrics HTTP/2.0\r\n\r\n", "505"),
            (b"GET /metrics\r\n\r\n", "400"),
            (b"GET /metr\xff\xfe HTTP/1.1\r\n\r\n", "400"),
            (b"GET /metrics HTTP/1.1\r\nX: \xff\r\n\r\n", "400"),
            (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", "400"),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", "400"),
        ] {
            let r = ask(&s, req);
            assert_eq!(status(&r), code, "{:?}: {r}", String::from_utf8_lossy(req));
        }
        let r = ask(&s, b"PUT /metrics HTTP/1.1\r\n\r\n");
        assert!(r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");
        let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
        assert_eq!(status(&ask(&s, big.as_bytes())), "431");
    }

    /// A client that sends nothing is answered 408 when its time is up; meanwhile others are
    /// served. Past the connection limit a connection is answered 503 at once, without a thread.
    #[test]
    fn idle_clients_time_out_and_connections_are_bounded() {
        let limits = Limits { connections: 4, read: Duration::from_millis(400), ..Limits::default() };
        let s = server(limits);
        let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(s.addr).unwrap()).collect();
        let t = Instant::now();
        assert!(ask(&s, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
        assert!(t.elapsed() < Duration::from_millis(300), "served beside idle clients: {:?}", t.elapsed());
        let mut fourth = TcpStream::connect(s.addr).unwrap();
        // Wait until the four hold every slot, then one more is refused.
        let until = Instant::now() + Duration::from_secs(5);
        while s.active() < 4 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(ask(&s, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 503"));
        for mut c in idle {
            let mut out = String::new();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = c.read_to_string(&mut out);
            assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        }
        let mut out = String::new();
        fourth.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = fourth.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        let until = Instant::now() + Duration::from_secs(5);
        while s.active() > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(s.active(), 0);
        assert!(ask(&s, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    /// 30,000 pipelined requests on one connection that never reads: one answer, then the
    /// connection closes; one thread at most, and other scrapes go on.
    #[test]
    fn a_pipelining_client_that_never_reads_costs_one_thread() {
        let s = server(Limits::default());
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(30_000);
        let _ = c.write_all(&req); // the server may close while it sends
                                   // The server answered once and closed: the connection ends (EOF or a reset), it does
                                   // not stay open answering the rest.
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let ended = match c.read_to_end(&mut out) {
            Ok(_) => true,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        };
        assert!(ended, "the connection stayed open");
        let replies = String::from_utf8_lossy(&out).matches("HTTP/1.1 200").count();
        assert!(replies <= 1, "{replies} replies");
        let until = Instant::now() + Duration::from_secs(5);
        while s.active() > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(s.active(), 0);
        assert!(ask(&s, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }
}
