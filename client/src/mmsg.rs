//! Batches of datagrams moved with one system call each: `sendmmsg` for the datagrams queued
//! (contributions and PROBEs of a window fill or a timer sweep), `recvmmsg` for the datagrams
//! waiting in the socket (the results of a window). A batch is a row of fixed-size slots.
//!
//! With segmentation offload (`gso`), a run of full slots (datagrams of exactly `slot` bytes:
//! full chunks) lies contiguous in the buffer, so it goes as one message with a `UDP_SEGMENT`
//! control message (Linux 4.18, `udp(7)`): the kernel's UDP and IP layers, and every hop that
//! passes segmentation offload on, handle the run once instead of once per datagram, and the
//! device (or the kernel, before a device that cannot) cuts it into the same datagrams. The run
//! may end with one shorter datagram (a tensor's last chunk, a PROBE). A kernel or route that
//! refuses a segmented message (no checksum offload on the device: `EIO`; a segment above the
//! path MTU, a socket without UDP checksums: `EINVAL`; `ENOPROTOOPT`, `EOPNOTSUPP`) turns it off
//! for the batch's life, and that message and every later one go one datagram per message. A
//! kernel without `UDP_SEGMENT` at all (before 4.18) would ignore the control message, so the
//! client probes for it first ([`gso_supported`]).

use std::io;
use std::os::fd::RawFd;

/// Slots of `slot` bytes each, the first `lens.len()` of them holding a datagram. The iovecs and
/// message headers of the system calls are kept too (allocated once, `slots` of each, rewritten
/// before every call), so that a send or a receive allocates nothing.
#[derive(Debug)]
pub(crate) struct Batch {
    buf: Vec<u8>,
    slot: usize,
    slots: usize,
    lens: Vec<usize>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Whether sends group runs of full slots with `UDP_SEGMENT` (see the module's doc).
    gso: bool,
    /// Per message of the last send: its first datagram and how many it carries.
    groups: Vec<(usize, usize)>,
    /// Per message, room for one `UDP_SEGMENT` control message (a `cmsghdr` and a `u16`,
    /// 8-byte aligned).
    ctrl: Vec<[u64; 4]>,
    /// Messages sent with `UDP_SEGMENT` (each several datagrams), since the batch was made.
    pub gso_sends: u64,
}

/// Most datagrams in one `UDP_SEGMENT` message (the kernel's `UDP_MAX_SEGMENTS`, 64 since
/// Linux 4.18) and most bytes (a UDP datagram's length is 16 bits; headers aside).
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65_000;
/// `UDP_SEGMENT` (`include/uapi/linux/udp.h`), a `SOL_UDP` option and control message.
const UDP_SEGMENT: libc::c_int = 103;

// SAFETY: the raw pointers in `iov` and `hdrs` point only into the batch's own `buf`, `iov` and
// `ctrl` (heap memory that moves with it, never shared), and are rewritten before each system
// call; between calls nothing reads them.
unsafe impl Send for Batch {}
// SAFETY: a shared `&Batch` reads only `buf`, `lens` and the sizes; the pointers are written
// and passed to the kernel only through `&mut self` (no interior mutability).
unsafe impl Sync for Batch {}

/// True when the kernel knows `UDP_SEGMENT` on socket `fd` (a `getsockopt` of it succeeds):
/// Linux 4.18 and later. An older kernel would ignore the control message and send a run as one
/// oversized datagram, so segmentation is not asked of it at all.
pub(crate) fn gso_supported(fd: RawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid fd; `v` and `len` are live and sized for the option's int value.
    unsafe { libc::getsockopt(fd, libc::SOL_UDP, UDP_SEGMENT, (&mut v as *mut libc::c_int).cast(), &mut len) == 0 }
}

impl Batch {
    /// `slots` slots of `slot` bytes (the largest datagram sent or accepted).
    pub fn new(slots: usize, slot: usize) -> Batch {
        Batch::with_gso(slots, slot, false)
    }

    /// As [`Batch::new`], sending runs of full slots with `UDP_SEGMENT` when `gso` (and a slot
    /// leaves room for two segments in a message).
    pub fn with_gso(slots: usize, slot: usize, gso: bool) -> Batch {
        let slots = slots.max(1);
        Batch {
            buf: vec![0; slots * slot],
            slot,
            slots,
            lens: Vec::with_capacity(slots),
            iov: Vec::with_capacity(slots),
            hdrs: Vec::with_capacity(slots),
            gso: gso && slot > 0 && GSO_MAX_BYTES / slot >= 2,
            groups: Vec::with_capacity(slots),
            ctrl: vec![[0; 4]; slots],
            gso_sends: 0,
        }
    }

    /// Whether sends still use `UDP_SEGMENT` (false once the kernel refused it).
    #[cfg(test)]
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// Every slot holds a datagram.
    pub fn is_full(&self) -> bool {
        self.lens.len() == self.slots
    }

    /// Forgets the datagrams held.
    pub fn clear(&mut self) {
        self.lens.clear();
    }

    /// The next free slot, to write a datagram into before [`Batch::push`]. Panics when full.
    pub fn free_slot(&mut self) -> &mut [u8] {
        let at = self.lens.len() * self.slot;
        &mut self.buf[at..at + self.slot]
    }

    /// The free slot now holds a datagram of `len` bytes.
    pub fn push(&mut self, len: usize) {
        debug_assert!(len <= self.slot && !self.is_full());
        self.lens.push(len);
    }

    /// Datagram `k` (empty when it arrived truncated: larger than a slot).
    pub fn datagram(&self, k: usize) -> &[u8] {
        let at = k * self.slot;
        &self.buf[at..at + self.lens[k]]
    }

    /// Sends every datagram held on the connected socket `fd` with `sendmmsg` (runs of full
    /// slots as `UDP_SEGMENT` messages when segmentation offload is on) and empties the batch;
    /// returns the system calls made (one, unless the kernel took part of the batch).
    ///
    /// # Errors
    /// The first send's error. Datagrams not yet sent when the error came are dropped with the
    /// batch (a transient error is like loss: the caller's retransmit timers resend them). A
    /// refusal of `UDP_SEGMENT` is not an error: segmentation goes off and the rest is sent
    /// one datagram per message.
    pub fn send(&mut self, fd: RawFd) -> io::Result<u64> {
        let (mut first, mut calls) = (0usize, 0u64);
        let r = 'outer: loop {
            self.headers_from(first);
            let mut done = 0usize;
            loop {
                if done == self.hdrs.len() {
                    break 'outer Ok(calls);
                }
                // SAFETY: `hdrs[done..]` are valid msghdrs whose iovecs (`self.iov`) point into
                // `self.buf` and whose control data (`self.ctrl`) is initialised, all alive and
                // unmoved for the call.
                let n = unsafe {
                    libc::sendmmsg(fd, self.hdrs[done..].as_mut_ptr(), (self.hdrs.len() - done) as libc::c_uint, 0)
                };
                calls += 1;
                if n < 0 {
                    let e = io::Error::last_os_error();
                    let refused = matches!(
                        e.raw_os_error(),
                        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                    );
                    if self.groups[done].1 > 1 && refused {
                        // The kernel or the route does not segment: send the rest (this
                        // message's datagrams on) one per message from now on.
                        self.gso = false;
                        first = self.groups[done].0;
                        continue 'outer;
                    }
                    break 'outer Err(e);
                }
                self.gso_sends += self.groups[done..done + n as usize].iter().filter(|g| g.1 > 1).count() as u64;
                done += n as usize;
            }
        };
        self.lens.clear();
        r
    }

    /// Receives up to a batch of datagrams from the connected socket `fd` with `recvmmsg`:
    /// waits for the first (for the socket's read timeout, or not at all when `wait` is false),
    /// then takes what is already queued. Returns the datagrams received (0 when the wait
    /// ended without one); [`Batch::datagram`] reads them.
    ///
    /// # Errors
    /// The socket's error (an ICMP error reported on the socket, ...); a timeout, a signal or
    /// an empty socket is `Ok(0)`.
    pub fn recv(&mut self, fd: RawFd, wait: bool) -> io::Result<usize> {
        self.lens.clear();
        self.lens.resize(self.slots, self.slot);
        self.headers();
        let hdrs = &mut self.hdrs;
        let flags = libc::MSG_WAITFORONE | if wait { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `hdrs` are valid msghdrs whose iovecs point into `self.buf`, alive and
        // unmoved for the call; no timeout pointer (the socket's read timeout applies).
        let n = unsafe {
            libc::recvmmsg(fd, hdrs.as_mut_ptr(), hdrs.len() as libc::c_uint, flags as _, std::ptr::null_mut())
        };
        if n < 0 {
            self.lens.clear();
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        self.lens.truncate(n);
        for (len, h) in self.lens.iter_mut().zip(&self.hdrs[..n]) {
            *len = if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 { 0 } else { h.msg_len as usize };
        }
        Ok(n)
    }

    /// The messages for the datagrams held from `first` on (`lens`): one iovec per message,
    /// over one slot, or over a run of full slots and the datagram after it when segmentation
    /// offload is on (then with a `UDP_SEGMENT` control message of one slot), and one message
    /// header per iovec, for a connected socket (no address), in the batch's own vectors: their
    /// capacity is `slots`, so nothing is allocated and `iov` and `ctrl` do not move while
    /// `hdrs` points into them.
    fn headers_from(&mut self, first: usize) {
        let base = self.buf.as_mut_ptr();
        let max_run = if self.gso { (GSO_MAX_BYTES / self.slot).min(GSO_MAX_SEGMENTS) } else { 1 };
        self.iov.clear();
        self.groups.clear();
        let mut k = first;
        while k < self.lens.len() {
            // A run: full slots, then at most one shorter datagram, up to `max_run` in all.
            let start = k;
            let mut bytes = 0;
            while k < self.lens.len() && k - start < max_run {
                bytes += self.lens[k];
                k += 1;
                if self.lens[k - 1] != self.slot {
                    break;
                }
            }
            // SAFETY: slot `start` lies within `buf` (start < slots), so the offset stays in
            // bounds; the run's bytes are its contiguous slots.
            self.iov.push(libc::iovec { iov_base: unsafe { base.add(start * self.slot) }.cast(), iov_len: bytes });
            self.groups.push((start, k - start));
        }
        self.hdrs.clear();
        for ((v, g), c) in self.iov.iter_mut().zip(&self.groups).zip(self.ctrl.iter_mut()) {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            if g.1 > 1 {
                let seg = self.slot as u16;
                // SAFETY: `c` is 32 bytes, 8-byte aligned: room for CMSG_SPACE(2) (24 on
                // 64-bit Linux); the header and the data are written within it.
                unsafe {
                    let space = libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as usize;
                    debug_assert!(space <= std::mem::size_of_val(c));
                    h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                    h.msg_hdr.msg_controllen = space as _;
                    let cm = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                    (*cm).cmsg_level = libc::SOL_UDP;
                    (*cm).cmsg_type = UDP_SEGMENT;
                    (*cm).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), seg);
                }
            }
            self.hdrs.push(h);
        }
    }

    /// One iovec per slot for a receive (every slot, `lens` its size), one header each.
    fn headers(&mut self) {
        let gso = std::mem::replace(&mut self.gso, false);
        self.headers_from(0);
        self.gso = gso;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        (a, b)
    }

    #[test]
    fn five_datagrams_go_in_one_sendmmsg_and_come_in_one_recvmmsg() {
        let (a, b) = pair();
        let mut tx = Batch::new(8, 16);
        for k in 0..5u8 {
            tx.free_slot()[..3].copy_from_slice(&[k, k + 1, k + 2]);
            tx.push(3);
        }
        assert_eq!(tx.send(a.as_raw_fd()).unwrap(), 1);
        assert_eq!(tx.len(), 0);
        let mut rx = Batch::new(8, 16);
        // Loopback delivers synchronously: all five are queued when the first is read.
        assert_eq!(rx.recv(b.as_raw_fd(), true).unwrap(), 5);
        for k in 0..5u8 {
            assert_eq!(rx.datagram(k as usize), &[k, k + 1, k + 2]);
        }
        assert_eq!(rx.recv(b.as_raw_fd(), false).unwrap(), 0, "nothing left, no wait");
    }

    /// Writes datagram `k` (`len` bytes, each `k * 7 + i`) into the batch's free slot.
    fn queue(tx: &mut Batch, k: usize, len: usize) {
        for (i, b) in tx.free_slot()[..len].iter_mut().enumerate() {
            *b = (k * 7 + i) as u8;
        }
        tx.push(len);
    }

    /// Sends `lens` through a batch with segmentation offload asked for and reads every
    /// datagram back: (the datagrams received, the batch's `UDP_SEGMENT` messages, whether it
    /// still uses them).
    fn gso_round_trip(a: &UdpSocket, b: &UdpSocket, lens: &[usize], slot: usize) -> (Vec<Vec<u8>>, u64, bool) {
        let mut tx = Batch::with_gso(lens.len(), slot, true);
        for (k, &len) in lens.iter().enumerate() {
            queue(&mut tx, k, len);
        }
        tx.send(a.as_raw_fd()).unwrap();
        let mut rx = Batch::new(lens.len() + 1, slot + 1);
        let mut got = Vec::new();
        while got.len() < lens.len() {
            let n = rx.recv(b.as_raw_fd(), true).unwrap();
            assert!(n > 0, "only {} of {} datagrams came", got.len(), lens.len());
            got.extend((0..n).map(|k| rx.datagram(k).to_vec()));
        }
        (got, tx.gso_sends, tx.gso())
    }

    /// With segmentation offload, runs of full slots go as `UDP_SEGMENT` messages (at most
    /// `GSO_MAX_BYTES` each) and arrive as the same datagrams, in order: a run may end with one
    /// shorter datagram, which ends its message; a lone datagram goes alone.
    #[test]
    fn runs_of_full_slots_go_segmented_and_arrive_as_the_same_datagrams() {
        let (a, b) = pair();
        let slot = 1428;
        // 50 full (two messages: 45, then 5 and the short one), 1 short, 1 full alone at the end.
        let mut lens = vec![slot; 50];
        lens.push(100);
        lens.push(slot);
        assert!(gso_supported(a.as_raw_fd()), "this kernel has UDP_SEGMENT (Linux 4.18)");
        let (got, sends, on) = gso_round_trip(&a, &b, &lens, slot);
        assert!(on);
        assert_eq!(sends, 2, "two UDP_SEGMENT messages");
        for (k, (d, &len)) in got.iter().zip(&lens).enumerate() {
            assert_eq!(d.len(), len, "datagram {k}");
            assert!(d.iter().enumerate().all(|(i, &x)| x == (k * 7 + i) as u8), "datagram {k}'s bytes");
        }
    }

    /// A socket the kernel will not segment for (`SO_NO_CHECK`: no UDP checksum, which
    /// `UDP_SEGMENT` refuses with EINVAL) turns segmentation off at the first refusal and sends
    /// everything one datagram per message: nothing is lost.
    #[test]
    fn a_refused_segmentation_falls_back_and_loses_nothing() {
        let (a, b) = pair();
        let one: libc::c_int = 1;
        // SAFETY: a valid socket and a c_int option value of the right size.
        let r = unsafe {
            libc::setsockopt(
                a.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        let lens = vec![600usize; 10];
        let (got, sends, on) = gso_round_trip(&a, &b, &lens, 600);
        assert!(!on, "segmentation turned off");
        assert_eq!(sends, 0);
        assert_eq!(got.len(), 10);
        for (k, d) in got.iter().enumerate() {
            assert_eq!(d.len(), 600);
            assert!(d.iter().enumerate().all(|(i, &x)| x == (k * 7 + i) as u8), "datagram {k}'s bytes");
        }
    }

    #[test]
    fn a_datagram_larger_than_a_slot_reads_as_empty() {
        let (a, b) = pair();
        a.send(&[7u8; 40]).unwrap();
        a.send(&[9u8; 4]).unwrap();
        let mut rx = Batch::new(4, 16);
        assert_eq!(rx.recv(b.as_raw_fd(), true).unwrap(), 2);
        assert_eq!(rx.datagram(0), &[] as &[u8]);
        assert_eq!(rx.datagram(1), &[9, 9, 9, 9]);
    }

    #[test]
    fn a_full_batch_says_so_and_a_timeout_is_zero() {
        let (_a, b) = pair();
        let mut tx = Batch::new(2, 8);
        tx.push(1);
        assert!(!tx.is_full());
        tx.push(2);
        assert!(tx.is_full());
        b.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        let mut rx = Batch::new(2, 8);
        assert_eq!(rx.recv(b.as_raw_fd(), true).unwrap(), 0);
    }
}
