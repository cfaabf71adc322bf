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
//!
//! With receive offload (`gro`, `UDP_GRO`, Linux 5.0), the kernel may hand several datagrams of
//! one flow and one size, coalesced by the receiving device's GRO, to one message: their
//! payloads back to back, the size of each in a `UDP_GRO` control message (the last may be
//! shorter). The receive then splits the message into the same datagrams again, so the caller
//! sees datagrams either way; a message is up to 64 KiB, so each receive slot is 64 KiB then.
//! Coalescing happens only where the device's GRO sees several of the flow's datagrams in one
//! poll (a NIC's NAPI poll takes a batch; a veth, even with GRO on, is polled per frame as its
//! peer sends, so nothing coalesces there); elsewhere every datagram comes alone, as without
//! the option.

use std::io;
use std::os::fd::RawFd;

/// A send batch: slots of `slot` bytes each, the first `lens.len()` of them holding a datagram.
/// A receive batch: `slots` messages of `msg_bytes` each (`slot`, or 64 KiB with `gro`), and
/// after a receive the datagrams found in them (`spans`). The iovecs, message headers, control
/// buffers and spans are kept too (allocated once, rewritten before every call), so that a
/// send or a receive allocates nothing.
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
    /// Per message, room for one `UDP_SEGMENT` control message on a send (a `cmsghdr` and a
    /// `u16`) or one `UDP_GRO` message on a receive (a `cmsghdr` and an `int`), 8-byte aligned.
    ctrl: Vec<[u64; 4]>,
    /// Messages sent with `UDP_SEGMENT` (each several datagrams), since the batch was made.
    pub gso_sends: u64,
    /// Whether receives take coalesced messages (`UDP_GRO` is on for the socket).
    gro: bool,
    /// Bytes of one receive message: `slot`, or with `gro` 64 KiB (or `slot`, if larger).
    msg_bytes: usize,
    /// The datagrams of the last receive: (offset in `buf`, length; 0 when truncated).
    spans: Vec<(usize, usize)>,
    /// Messages received that carried several datagrams, since the batch was made.
    pub gro_recvs: u64,
}

/// Most datagrams in one `UDP_SEGMENT` message (the kernel's `UDP_MAX_SEGMENTS`, 64 since
/// Linux 4.18) and most bytes (a UDP datagram's length is 16 bits; headers aside).
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65_000;
/// `UDP_SEGMENT` (`include/uapi/linux/udp.h`), a `SOL_UDP` option and control message.
const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (`include/uapi/linux/udp.h`), a `SOL_UDP` option and control message (its data an
/// `int`: the size of each coalesced datagram).
const UDP_GRO: libc::c_int = 104;
/// Bytes of a receive message with `UDP_GRO`: the largest UDP payload (a 16-bit length) fits.
const GRO_MSG_BYTES: usize = 65_536;

// SAFETY: the raw pointers in `iov` and `hdrs` point only into the batch's own `buf`, `iov` and
// `ctrl` (heap memory that moves with it, never shared), and are rewritten before each system
// call; between calls nothing reads them.
unsafe impl Send for Batch {}
// SAFETY: a shared `&Batch` reads only `buf`, `lens`, `spans` and the sizes; the pointers are written
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

/// Asks the kernel to coalesce datagrams for socket `fd` (`UDP_GRO`, Linux 5.0): true when it
/// took the option. Only a batch made by [`Batch::receiving`] with `gro` can read such a
/// socket's messages (a plain one would see a coalesced message as one oversized datagram).
pub(crate) fn enable_gro(fd: RawFd) -> bool {
    let one: libc::c_int = 1;
    // SAFETY: a valid fd; `one` is a live int of the option's size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            UDP_GRO,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

impl Batch {
    /// `slots` slots of `slot` bytes (the largest datagram sent or accepted).
    #[cfg(test)]
    pub fn new(slots: usize, slot: usize) -> Batch {
        Batch::with_gso(slots, slot, false)
    }

    /// A batch to receive into: `slots` messages, each one datagram of at most `slot` bytes, or
    /// with `gro` (the socket has `UDP_GRO`, [`enable_gro`]) up to 64 KiB of coalesced ones.
    pub fn receiving(slots: usize, slot: usize, gro: bool) -> Batch {
        let mut b = Batch::with_gso(slots, slot, false);
        if gro {
            b.gro = true;
            b.msg_bytes = GRO_MSG_BYTES.max(slot);
            b.buf = vec![0; b.slots * b.msg_bytes];
            // A message carries at most the kernel's 64 segments.
            b.spans = Vec::with_capacity(b.slots * GSO_MAX_SEGMENTS);
        }
        b
    }

    /// A send batch of `slots` slots of `slot` bytes (the largest datagram sent), sending runs
    /// of full slots with `UDP_SEGMENT` when `gso` (and a slot leaves room for two segments in
    /// a message).
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
            gro: false,
            msg_bytes: slot,
            spans: Vec::with_capacity(slots),
            gro_recvs: 0,
        }
    }

    /// Whether sends still use `UDP_SEGMENT` (false once the kernel refused it).
    #[cfg(test)]
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Datagrams held (a send batch's; a receive returns its count instead).
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

    /// Datagram `k` of the last receive (empty when it was larger than a slot).
    pub fn datagram(&self, k: usize) -> &[u8] {
        let (at, len) = self.spans[k];
        &self.buf[at..at + len]
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

    /// Receives up to a batch of messages from the connected socket `fd` with `recvmmsg`:
    /// waits for the first (for the socket's read timeout, or not at all when `wait` is false),
    /// then takes what is already queued. Returns the datagrams received (0 when the wait ended
    /// without one; with `gro`, a coalesced message counts each of its datagrams);
    /// [`Batch::datagram`] reads them.
    ///
    /// # Errors
    /// The socket's error (an ICMP error reported on the socket, ...); a timeout, a signal or
    /// an empty socket is `Ok(0)`.
    pub fn recv(&mut self, fd: RawFd, wait: bool) -> io::Result<usize> {
        self.lens.clear();
        self.spans.clear();
        self.recv_headers();
        let hdrs = &mut self.hdrs;
        let flags = libc::MSG_WAITFORONE | if wait { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `hdrs` are valid msghdrs whose iovecs point into `self.buf` and whose control
        // buffers (with `gro`) into `self.ctrl`, alive and unmoved for the call; no timeout
        // pointer (the socket's read timeout applies).
        let n = unsafe {
            libc::recvmmsg(fd, hdrs.as_mut_ptr(), hdrs.len() as libc::c_uint, flags as _, std::ptr::null_mut())
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        for (m, h) in self.hdrs[..n as usize].iter().enumerate() {
            let at = m * self.msg_bytes;
            let len = h.msg_len as usize;
            // Truncated data, or a control message cut short (its segment size lost): one empty
            // datagram, as a truncated lone one reads.
            if h.msg_hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
                self.spans.push((at, 0));
                continue;
            }
            let seg = if self.gro { gro_size(&h.msg_hdr) } else { 0 };
            if seg == 0 || seg >= len {
                self.spans.push((at, if len > self.slot { 0 } else { len }));
                continue;
            }
            self.gro_recvs += 1;
            let mut off = 0;
            while off < len {
                let l = seg.min(len - off);
                self.spans.push((at + off, if l > self.slot { 0 } else { l }));
                off += l;
            }
        }
        Ok(self.spans.len())
    }

    /// One message per receive slot (`msg_bytes` each), with room for a `UDP_GRO` control
    /// message when `gro`; in the batch's own vectors (no allocation).
    fn recv_headers(&mut self) {
        let base = self.buf.as_mut_ptr();
        self.iov.clear();
        for m in 0..self.slots {
            // SAFETY: message `m` lies within `buf` (`slots * msg_bytes` bytes).
            let at = unsafe { base.add(m * self.msg_bytes) };
            self.iov.push(libc::iovec { iov_base: at.cast(), iov_len: self.msg_bytes });
        }
        self.hdrs.clear();
        for (v, c) in self.iov.iter_mut().zip(self.ctrl.iter_mut()) {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            if self.gro {
                // SAFETY: CMSG_SPACE only computes a size.
                let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
                debug_assert!(space <= std::mem::size_of_val(c));
                h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = std::mem::size_of_val(c) as _;
            }
            self.hdrs.push(h);
        }
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
}

/// The size in bytes of each datagram coalesced into a received message: its `UDP_GRO`
/// control message's value, 0 without one (a lone datagram).
fn gro_size(h: &libc::msghdr) -> usize {
    // SAFETY: `h` is a header the kernel filled: its control buffer holds `msg_controllen`
    // bytes of well-formed control messages, walked with the libc macros only.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(h);
        while !cm.is_null() {
            if (*cm).cmsg_level == libc::SOL_UDP && (*cm).cmsg_type == UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>());
                return v.max(0) as usize;
            }
            cm = libc::CMSG_NXTHDR(h, cm);
        }
    }
    0
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

    /// A receiver with `UDP_GRO` takes a segmented send over loopback (which hands the run to a
    /// socket that accepts coalesced messages without cutting it) as coalesced messages and
    /// splits them into the same datagrams, in order; the short datagram ending a run comes in
    /// the same message; a lone datagram comes alone.
    #[test]
    fn coalesced_datagrams_are_split_into_the_same_datagrams() {
        let (a, b) = pair();
        assert!(enable_gro(b.as_raw_fd()), "this kernel has UDP_GRO (Linux 5.0)");
        let slot = 1428;
        let mut lens = vec![slot; 50];
        lens.push(100);
        lens.push(slot);
        let mut tx = Batch::with_gso(lens.len(), slot, true);
        for (k, &len) in lens.iter().enumerate() {
            queue(&mut tx, k, len);
        }
        tx.send(a.as_raw_fd()).unwrap();
        assert_eq!(tx.gso_sends, 2);
        let mut rx = Batch::receiving(8, slot, true);
        let mut got = Vec::new();
        while got.len() < lens.len() {
            let n = rx.recv(b.as_raw_fd(), true).unwrap();
            assert!(n > 0, "only {} of {} datagrams came", got.len(), lens.len());
            got.extend((0..n).map(|k| rx.datagram(k).to_vec()));
        }
        assert_eq!(rx.gro_recvs, 2, "the two segmented runs came coalesced");
        assert_eq!(got.len(), lens.len());
        for (k, (d, &len)) in got.iter().zip(&lens).enumerate() {
            assert_eq!(d.len(), len, "datagram {k}");
            assert!(d.iter().enumerate().all(|(i, &x)| x == (k * 7 + i) as u8), "datagram {k}'s bytes");
        }
    }

    /// Coalesced datagrams larger than the receiver's slot read as empty, each (as a lone one
    /// does), and the ones after them are still read.
    #[test]
    fn coalesced_datagrams_larger_than_a_slot_read_as_empty() {
        let (a, b) = pair();
        assert!(enable_gro(b.as_raw_fd()));
        let mut tx = Batch::with_gso(4, 600, true);
        for k in 0..3 {
            queue(&mut tx, k, 600);
        }
        tx.send(a.as_raw_fd()).unwrap();
        assert_eq!(tx.gso_sends, 1);
        a.send(&[5u8; 7]).unwrap();
        let mut rx = Batch::receiving(4, 100, true);
        let mut got = Vec::new();
        while got.len() < 4 {
            let n = rx.recv(b.as_raw_fd(), true).unwrap();
            assert!(n > 0);
            got.extend((0..n).map(|k| rx.datagram(k).to_vec()));
        }
        assert_eq!(rx.gro_recvs, 1, "the three came coalesced");
        assert_eq!(got, vec![vec![], vec![], vec![], vec![5u8; 7]]);
    }

    /// With `UDP_GRO` on, a lone datagram larger than a slot (but within the 64 KiB message)
    /// still reads as empty, and a lone one that fits reads whole.
    #[test]
    fn a_lone_datagram_larger_than_a_slot_reads_as_empty_with_gro() {
        let (a, b) = pair();
        assert!(enable_gro(b.as_raw_fd()));
        a.send(&[7u8; 40]).unwrap();
        a.send(&[9u8; 4]).unwrap();
        let mut rx = Batch::receiving(4, 16, true);
        assert_eq!(rx.recv(b.as_raw_fd(), true).unwrap(), 2);
        assert_eq!(rx.datagram(0), &[] as &[u8]);
        assert_eq!(rx.datagram(1), &[9, 9, 9, 9]);
        assert_eq!(rx.gro_recvs, 0);
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
