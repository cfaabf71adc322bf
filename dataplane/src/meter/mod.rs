//! P4 meters: three-colour markers (RFC 2697 srTCM, RFC 2698 trTCM, RFC 4115) on exact integer
//! token buckets, and the [`TokenBucket`] a port shaper uses too.
//!
//! # Units
//! Rates are in bytes per second, burst sizes and token counts in bytes. Time is a clock in
//! ticks with `hz` ticks per second, given when a meter or bucket is made: the TSC
//! (`rte_get_tsc_hz()`) on a live port, `hz` = 1_000_000_000 for a virtual nanosecond clock when
//! a capture is replayed.
//!
//! # The bytes a meter counts
//! A meter counts the Ethernet frame as it is sent on the wire **without the FCS** (the 4-byte
//! CRC the NIC appends) and **without padding**: a frame shorter than 60 bytes is padded to 60
//! by the NIC, and the meter counts the unpadded length. That is the length the data path holds
//! (`rte_pktmbuf_pkt_len`, the length of a frame in a pcap), so the caller passes it unchanged.
//! Preamble, start-of-frame delimiter and inter-frame gap are not counted either. (DPDK's
//! `rte_meter` says "bytes of IP packets"; it counts whatever length its caller passes.)
//!
//! # Exactness
//! Every bucket is incremented by one token `rate` times per second at fixed instants, as the
//! RFCs say, with no token or fraction of one lost to rounding: see [`bucket`]. DPDK's
//! `rte_meter` approximates the rate instead (`docs/meters.md` and `crate::dpdk::meter` give the
//! rule and the measured differences).
//!
//! # Per-lcore state
//! A [`Meter`] belongs to one worker lcore and is never shared. A flow whose packets are spread
//! over N workers (RSS) meets N independent meters of the same profile and may pass at up to N
//! times the configured rates.

pub mod bucket;
pub mod profile;
pub mod tcm;

#[cfg(test)]
mod tests;

pub use bucket::{BucketError, TokenBucket};
pub use profile::{Profile, ProfileError};
pub use tcm::{Meter, MeterError};

/// A packet's colour (RFC 2697, RFC 2698, RFC 4115), with P4's V1Model meter values
/// (`V1MODEL_METER_COLOR_GREEN` = 0, `YELLOW` = 1, `RED` = 2), which are also DPDK's
/// `enum rte_color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Color {
    /// Within the committed rate and burst.
    Green = 0,
    /// Above the committed, within the excess or peak rate and burst.
    Yellow = 1,
    /// Above every rate.
    Red = 2,
}

impl Color {
    /// The colour of a V1Model / `rte_color` value (0, 1, 2); `None` for anything else.
    pub fn from_u8(v: u8) -> Option<Color> {
        match v {
            0 => Some(Color::Green),
            1 => Some(Color::Yellow),
            2 => Some(Color::Red),
            _ => None,
        }
    }
}
