//! Writing a frame into an mbuf and sending it: the contribution the frame answers when it has
//! the room (in place, saving an allocation), else a new mbuf from the pool.

use crate::buf::{PacketBuf, PacketIo};
use crate::stats::{Counters, Reason};
use crate::wire::build::{self, FrameSpec};
use crate::wire::template;

/// Writes member `r`'s RESULT frame from its template into `spare` or a new mbuf and sends it
/// on `port`.
/// False (counted `no_mbuf`) without an mbuf large enough.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn send_templated<I: PacketIo>(
    io: &mut I,
    spare: &mut Option<I::Buf>,
    port: u16,
    t: &template::Templates,
    r: usize,
    patch: &template::Patch,
    payload: &[u8],
    sums: &build::PayloadSums,
    counters: &mut Counters,
) -> bool {
    let len = t.frame_len(r);
    let Some(mut b) = frame_buf(io, spare, len) else {
        counters.drop(Reason::NoMbuf);
        return false;
    };
    t.write(r, patch, payload, sums, b.data_mut());
    counters.tx(port, len);
    io.send(port, b);
    true
}

/// Member `r`'s RESULT frame from its template, written into `spare` or a new mbuf; `None`
/// without an mbuf large enough.
#[inline]
pub(super) fn templated<I: PacketIo>(
    io: &mut I,
    spare: &mut Option<I::Buf>,
    t: &template::Templates,
    r: usize,
    patch: &template::Patch,
    payload: &[u8],
    sums: &build::PayloadSums,
) -> Option<I::Buf> {
    let mut b = frame_buf(io, spare, t.frame_len(r))?;
    t.write(r, patch, payload, sums, b.data_mut());
    Some(b)
}

/// Sends member `r`'s RESULT frame on `port` over the payload already in `body` (a full
/// chunk at byte `off` of its data): the head and tail from the template, the payload shared
/// ([`PacketIo::share`]). `Some(shared)` when sent, `shared` false when the io copied the
/// payload instead; `None` (counted `no_mbuf`) when the pool runs out.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn send_shared<I: PacketIo>(
    io: &mut I,
    body: &I::Buf,
    off: usize,
    port: u16,
    t: &template::Templates,
    r: usize,
    patch: &template::Patch,
    sums: &build::PayloadSums,
    counters: &mut Counters,
) -> Option<bool> {
    let mut head = [0u8; template::MAX_HEAD];
    let mut tail = [0u8; template::MAX_TAIL];
    let (head, tail) = (&mut head[..t.head_len(r)], &mut tail[..t.tail_len()]);
    t.write_around(r, patch, sums, head, tail);
    let Some((b, shared)) = io.share(head, body, off, t.payload_len(), tail) else {
        counters.drop(Reason::NoMbuf);
        return None;
    };
    counters.tx(port, t.frame_len(r));
    io.send(port, b);
    Some(shared)
}

/// A frame of exactly `len` bytes (content unspecified) for a packet to send: `spare`, taken,
/// when it can be resized to `len`, else a new one from the pool. `None` when the pool is
/// exhausted or its buffers are too small.
#[inline]
fn frame_buf<I: PacketIo>(io: &mut I, spare: &mut Option<I::Buf>, len: usize) -> Option<I::Buf> {
    if let Some(mut b) = spare.take() {
        if b.set_len(len) {
            return Some(b);
        }
    }
    let mut b = io.alloc()?;
    b.append(len).then_some(b)
}

/// Builds `spec` with `payload` into `spare` or a new mbuf and sends it on `port`. False (counted
/// `no_mbuf`) without an mbuf large enough.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_frame<I: PacketIo>(
    io: &mut I,
    spare: &mut Option<I::Buf>,
    port: u16,
    spec: &FrameSpec,
    payload: &[u8],
    sums: Option<&build::PayloadSums>,
    counters: &mut Counters,
) -> bool {
    let len = spec.frame_len(payload.len());
    let Some(mut b) = frame_buf(io, spare, len) else {
        counters.drop(Reason::NoMbuf);
        return false;
    };
    if build::build_with(spec, payload, sums, b.data_mut()).is_err() {
        counters.drop(Reason::NoMbuf);
        return false;
    }
    counters.tx(port, len);
    io.send(port, b);
    true
}
