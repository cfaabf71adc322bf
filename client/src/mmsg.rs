//! Batches of datagrams moved with one system call each: `sendmmsg` for the datagrams queued
//! (contributions and PROBEs of a window fill or a timer sweep), `recvmmsg` for the datagrams
//! waiting in the socket (the results of a window). A batch is a row of fixed-size slots.

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
}

// SAFETY: the raw pointers in `iov` and `hdrs` point only into the batch's own `buf` and `iov`
// (heap memory that moves with it, never shared), and are rewritten before each system call;
// between calls nothing reads them.
unsafe impl Send for Batch {}
// SAFETY: a shared `&Batch` reads only `buf`, `lens` and the sizes; the pointers are written
// and passed to the kernel only through `&mut self` (no interior mutability).
unsafe impl Sync for Batch {}

impl Batch {
    /// `slots` slots of `slot` bytes (the largest datagram sent or accepted).
    pub fn new(slots: usize, slot: usize) -> Batch {
        let slots = slots.max(1);
        Batch {
            buf: vec![0; slots * slot],
            slot,
            slots,
            lens: Vec::with_capacity(slots),
            iov: Vec::with_capacity(slots),
            hdrs: Vec::with_capacity(slots),
        }
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

    /// Sends every datagram held on the connected socket `fd` with `sendmmsg` and empties the
    /// batch; returns the system calls made (one, unless the kernel took part of the batch).
    ///
    /// # Errors
    /// The first send's error. Datagrams not yet sent when the error came are dropped with the
    /// batch (a transient error is like loss: the caller's retransmit timers resend them).
    pub fn send(&mut self, fd: RawFd) -> io::Result<u64> {
        self.headers();
        let hdrs = &mut self.hdrs;
        let (mut done, mut calls) = (0usize, 0u64);
        let r = loop {
            if done == hdrs.len() {
                break Ok(calls);
            }
            // SAFETY: `hdrs[done..]` are valid msghdrs whose iovecs (`self.iov`) point into
            // `self.buf`, alive and unmoved for the call.
            let n = unsafe { libc::sendmmsg(fd, hdrs[done..].as_mut_ptr(), (hdrs.len() - done) as libc::c_uint, 0) };
            calls += 1;
            if n < 0 {
                break Err(io::Error::last_os_error());
            }
            done += n as usize;
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

    /// One iovec per datagram held (`lens`) over its slot, and one message header per iovec,
    /// for a connected socket (no address), in the batch's own vectors: their capacity is
    /// `slots`, so nothing is allocated and `iov` does not move while `hdrs` points into it.
    fn headers(&mut self) {
        let base = self.buf.as_mut_ptr();
        self.iov.clear();
        for (k, &len) in self.lens.iter().enumerate() {
            // SAFETY: slot k lies within `buf` (k < slots), so the offset stays in bounds.
            self.iov.push(libc::iovec { iov_base: unsafe { base.add(k * self.slot) }.cast(), iov_len: len });
        }
        self.hdrs.clear();
        for v in self.iov.iter_mut() {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            self.hdrs.push(h);
        }
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
