//! The scalar reference kernels: one lane at a time, with the arithmetic of [`super::lanes`].
//!
//! Every function here has the raw kernel contract written in `mod.rs` (valid pointers for
//! `lanes` lanes, `acc` disjoint from `src`/`dst`, `src` and `dst` equal or disjoint). They need no
//! CPU feature; the SIMD kernel sets also call them for their tails.

use super::code::{size, F16, I32, MAX, MIN, SUM};
use super::lanes;

/// Reads payload lane `i` and widens it to accumulator bits.
///
/// # Safety
///
/// `src` is valid for reading lane `i` of dtype `DT`.
#[inline(always)]
unsafe fn read_lane<const DT: u8>(src: *const u8, i: usize) -> u32 {
    if size(DT) == 2 {
        // SAFETY: lane `i` is 2 bytes at `src + 2i`, readable by the caller's contract;
        // `[u8; 2]` needs no alignment.
        let h = u16::from_le_bytes(unsafe { src.add(2 * i).cast::<[u8; 2]>().read() });
        match DT {
            F16 => lanes::f16_to_f32(h),
            _ => lanes::bf16_to_f32(h),
        }
    } else {
        // SAFETY: lane `i` is 4 bytes at `src + 4i`, readable by the caller's contract.
        u32::from_le_bytes(unsafe { src.add(4 * i).cast::<[u8; 4]>().read() })
    }
}

/// Narrows accumulator bits and writes them as payload lane `i`.
///
/// # Safety
///
/// `dst` is valid for writing lane `i` of dtype `DT`.
#[inline(always)]
unsafe fn write_lane<const DT: u8>(dst: *mut u8, i: usize, x: u32) {
    if size(DT) == 2 {
        let h = match DT {
            F16 => lanes::f32_to_f16(x),
            _ => lanes::f32_to_bf16(x),
        };
        // SAFETY: lane `i` is 2 bytes at `dst + 2i`, writable by the caller's contract.
        unsafe { dst.add(2 * i).cast::<[u8; 2]>().write(h.to_le_bytes()) }
    } else {
        // SAFETY: lane `i` is 4 bytes at `dst + 4i`, writable by the caller's contract.
        unsafe { dst.add(4 * i).cast::<[u8; 4]>().write(x.to_le_bytes()) }
    }
}

/// `a op b` on accumulator bits of dtype `DT`.
#[inline(always)]
fn combine<const OP: u8, const DT: u8>(a: u32, b: u32) -> u32 {
    if DT == I32 {
        let (x, y) = (a as i32, b as i32);
        (match OP {
            SUM => x.wrapping_add(y),
            MAX => x.max(y),
            _ => x.min(y),
        }) as u32
    } else {
        match OP {
            SUM => lanes::f32_add(a, b),
            MAX => lanes::f32_maximum(a, b),
            MIN => lanes::f32_minimum(a, b),
            _ => unreachable!("unknown op code {OP}"),
        }
    }
}

/// `acc[i] = widen(src lane i)`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`).
pub(super) unsafe fn load<const DT: u8>(acc: *mut u32, src: *const u8, lanes: usize) {
    for i in 0..lanes {
        // SAFETY: i < lanes, so both lanes are in bounds by the contract.
        unsafe { acc.add(i).write(read_lane::<DT>(src, i)) }
    }
}

/// `acc[i] = acc[i] op widen(src lane i)`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`).
pub(super) unsafe fn fold<const OP: u8, const DT: u8>(acc: *mut u32, src: *const u8, lanes: usize) {
    for i in 0..lanes {
        // SAFETY: i < lanes, so both lanes are in bounds by the contract; `acc` and `src` are
        // disjoint.
        unsafe {
            let a = acc.add(i).read();
            acc.add(i).write(combine::<OP, DT>(a, read_lane::<DT>(src, i)));
        }
    }
}

/// `dst lane i = narrow(acc[i])`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`).
pub(super) unsafe fn store<const DT: u8>(acc: *const u32, dst: *mut u8, lanes: usize) {
    for i in 0..lanes {
        // SAFETY: i < lanes, so both lanes are in bounds by the contract.
        unsafe { write_lane::<DT>(dst, i, acc.add(i).read()) }
    }
}

/// `dst lane i = narrow(acc[i] op widen(src lane i))`; `src` may equal `dst`.
///
/// # Safety
///
/// The raw kernel contract (`mod.rs`).
pub(super) unsafe fn fold_store<const OP: u8, const DT: u8>(
    acc: *const u32,
    src: *const u8,
    dst: *mut u8,
    lanes: usize,
) {
    for i in 0..lanes {
        // SAFETY: i < lanes, so every lane touched is in bounds by the contract; lane i of `src`
        // is read before lane i of `dst` is written, so `src == dst` is fine.
        unsafe {
            let x = combine::<OP, DT>(acc.add(i).read(), read_lane::<DT>(src, i));
            write_lane::<DT>(dst, i, x);
        }
    }
}
