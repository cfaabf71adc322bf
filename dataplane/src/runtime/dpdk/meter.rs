//! DPDK's `rte_meter` run over a whole trace, to compare with [`crate::meter`] (tests, benches).
//!
//! # How `rte_meter` rounds a rate
//! `rte_meter_*_profile_config` turns a rate of `rate` bytes/s into "`bytes_per_period` bytes
//! every `period` TSC cycles" at `hz = rte_get_tsc_hz()` (`rte_meter_get_tb_params`, with
//! `RTE_METER_TB_PERIOD_MIN` = 100):
//! - if `hz / rate >= 100`: `bytes_per_period = 1`, `period = ⌊hz / rate⌋` cycles;
//! - else: `bytes_per_period = ⌈100 · rate / hz⌉`, `period = ⌊hz · bytes_per_period / rate⌋`.
//!
//! The meter then adds `bytes_per_period` bytes at the end of each whole period (the leftover
//! cycles are carried to the next packet). Two differences from the RFCs' bucket, which gains one
//! byte exactly `rate` times per second (what [`crate::meter::TokenBucket`] does):
//! 1. **the rate is rounded up** whenever `hz / rate` (or `hz · bytes_per_period / rate`) is not
//!    an integer: `rte_meter` runs at `hz · bytes_per_period / period` bytes/s, up to 1% above the
//!    configured rate when the period is near 100 cycles (e.g. `hz / rate` = 100.5 gives 100, a
//!    rate 0.5% high);
//! 2. **tokens come in chunks** of `bytes_per_period` bytes above `hz / 100` bytes/s (about
//!    200 Mbit/s on a 2.5 GHz TSC; 10 Gbit/s there is 50 bytes every 100 cycles): within a period
//!    `rte_meter` has up to `bytes_per_period - 1` bytes fewer than the RFC bucket, and a chunk
//!    that lands on a nearly full bucket loses its excess.
//!
//! Where `hz / rate` is an integer of at least 100 (one byte every `period` cycles) the two agree
//! on every packet.

use super::DpdkError;
use crate::meter::{Color, Profile};

/// What `rte_meter_*_profile_config` made of a profile's rates at `hz`: the C bucket gains
/// `c_bytes_per_period` bytes every `c_period` TSC cycles, the second bucket (P for trTCM, E for
/// RFC 4115; zeros for srTCM, whose E fills from C) `x_bytes_per_period` every `x_period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rounding {
    /// `rte_get_tsc_hz()`, cycles per second.
    pub hz: u64,
    /// Cycles per C update.
    pub c_period: u64,
    /// Bytes per C update.
    pub c_bytes_per_period: u64,
    /// Cycles per P/E update.
    pub x_period: u64,
    /// Bytes per P/E update.
    pub x_bytes_per_period: u64,
}

/// Runs `rte_meter` for `profile` over a trace: packet `i` of `lens[i]` bytes at `ts[i]` TSC
/// cycles, colour-blind if `in_colors` is `None`, else colour-aware with `in_colors[i]`. The
/// buckets are full at `t0` (cycles). Writes packet `i`'s colour to `out[i]` and returns the
/// profile's [`Rounding`]. The whole loop runs in C (one FFI call per trace).
///
/// Errors: EAL not initialised (`rte_get_tsc_hz()` is 0), slices of different lengths or longer
/// than `u32::MAX`, or `rte_meter_*_config` refusing the profile (`-EINVAL`).
pub fn run(
    profile: &Profile,
    t0: u64,
    ts: &[u64],
    lens: &[u32],
    in_colors: Option<&[Color]>,
    out: &mut [Color],
) -> Result<Rounding, DpdkError> {
    let what = "rte_meter run";
    if super::tsc_hz() == 0 {
        return Err(DpdkError::new(what, "EAL is not initialised (rte_get_tsc_hz() is 0)"));
    }
    let n = ts.len();
    if lens.len() != n || out.len() != n || in_colors.is_some_and(|c| c.len() != n) {
        return Err(DpdkError::new(what, "timestamps, lengths, colours in and out differ in length"));
    }
    let n32 = u32::try_from(n).map_err(|_| DpdkError::new(what, format!("{n} packets, above u32::MAX")))?;
    let (kind, c_rate, c_size, x_rate, x_size) = match *profile {
        Profile::SrTcm { cir, cbs, ebs } => (dpdk_sys::shim_meter_kind_SHIM_METER_SRTCM, cir, cbs, 0, ebs),
        Profile::TrTcm { cir, cbs, pir, pbs } => (dpdk_sys::shim_meter_kind_SHIM_METER_TRTCM, cir, cbs, pir, pbs),
        Profile::Rfc4115 { cir, cbs, eir, ebs } => (dpdk_sys::shim_meter_kind_SHIM_METER_RFC4115, cir, cbs, eir, ebs),
    };
    let params = dpdk_sys::shim_meter_params { kind, c_rate, c_size, x_rate, x_size };
    let mut r = dpdk_sys::shim_meter_rounding::default();
    let in_ptr = in_colors.map_or(std::ptr::null(), |c| c.as_ptr() as *const u8);
    // SAFETY: every pointer covers n elements (checked above); Color is repr(u8) and the shim
    // writes only enum rte_color values 0, 1, 2 (RTE_COLOR_GREEN..RED), Color's discriminants.
    let ret = unsafe {
        dpdk_sys::shim_meter_run(
            &params,
            t0,
            ts.as_ptr(),
            lens.as_ptr(),
            in_ptr,
            n32,
            out.as_mut_ptr() as *mut u8,
            &mut r,
        )
    };
    if ret != 0 {
        return Err(DpdkError::from_ret(format!("rte_meter_{}_config", profile.name()), ret));
    }
    Ok(Rounding {
        hz: r.hz,
        c_period: r.c_period,
        c_bytes_per_period: r.c_bytes_per_period,
        x_period: r.x_period,
        x_bytes_per_period: r.x_bytes_per_period,
    })
}
