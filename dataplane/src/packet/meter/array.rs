//! The meters a pipeline uses, as configured ([`MeterSpec`]), and one worker's state of one of
//! them ([`MeterArray`]): its instances' buckets and its packets and bytes per colour.

use super::{Color, Meter, Profile};
use crate::stats::Counter;

/// The clock meters run on in the appliance: microseconds (the TSC live, converted once per
/// burst; the capture timestamps net_pcap gives in a replay).
pub const METER_HZ: u64 = 1_000_000;

/// A configured meter (`[[meter]]`): its profile, its mode and how many instances it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterSpec {
    /// The name actions use.
    pub name: String,
    /// The marker and its rates (bytes/s) and burst sizes (bytes).
    pub profile: Profile,
    /// Colour-aware: the packet's colour so far is the marker's input colour.
    pub color_aware: bool,
    /// Instances (at least 1): an indexed meter's size, or a direct meter's number of users.
    pub instances: u32,
}

/// One worker's state of one meter: a [`Meter`] per instance, and what it coloured.
#[derive(Debug, Clone)]
pub struct MeterArray {
    instances: Vec<Meter>,
    color_aware: bool,
    /// Packets and bytes coloured green, yellow and red (indexed by [`Color`] as u8).
    pub colors: [Counter; 3],
}

impl MeterArray {
    /// The state of `spec`: every instance's buckets full at `now` (µs, [`METER_HZ`]).
    ///
    /// Errors: the profile's or clock's refusal ([`super::MeterError`]), which a loaded
    /// configuration has already ruled out.
    pub fn new(spec: &MeterSpec, now: u64) -> Result<MeterArray, super::MeterError> {
        let one = Meter::new(&spec.profile, METER_HZ, now)?;
        Ok(MeterArray {
            instances: vec![one; spec.instances.max(1) as usize],
            color_aware: spec.color_aware,
            colors: [Counter::default(); 3],
        })
    }

    /// Colours a packet of `bytes` (frame without FCS or padding) at `now` (µs) with instance
    /// `index` (taken modulo the number of instances) and counts it under its colour.
    /// `in_color` is the packet's colour so far, used in colour-aware mode.
    #[inline]
    pub fn color(&mut self, index: u64, now: u64, bytes: u32, in_color: Color) -> Color {
        let i = self.slot(index);
        let m = &mut self.instances[i];
        let c = if self.color_aware { m.color_aware(now, bytes, in_color) } else { m.color_blind(now, bytes) };
        self.colors[c as usize].hit(bytes as usize);
        c
    }

    /// [`MeterArray::color`] for a packet whose instance has nothing to refill at `now`
    /// ([`Meter::is_refilled`]: the packet before it arrived in the same tick); `None`, with
    /// nothing changed, when it has: then [`MeterArray::color`] is the call to make. Kept
    /// apart so that its caller's common path is a few loads and compares, without a call.
    #[inline(always)]
    pub fn color_if_refilled(&mut self, index: u64, now: u64, bytes: u32, in_color: Color) -> Option<Color> {
        let i = self.slot(index);
        let m = &mut self.instances[i];
        if !m.is_refilled(now) {
            return None;
        }
        let c = m.color_refilled(bytes, if self.color_aware { in_color } else { Color::Green });
        self.colors[c as usize].hit(bytes as usize);
        Some(c)
    }

    /// The instance of `index` (taken modulo the number of instances).
    #[inline(always)]
    fn slot(&self, index: u64) -> usize {
        let n = self.instances.len() as u64;
        (if index < n { index } else { index % n }) as usize
    }

    /// Copies the buckets of `old`'s instances into `self`'s, as (old instance, new instance)
    /// pairs: a runtime change keeping a direct meter's users ([`crate::table::Carry`]). Pairs
    /// out of range are skipped; no allocation.
    pub fn carry_instances(&mut self, old: &MeterArray, pairs: &[(u32, u32)]) {
        for &(o, n) in pairs {
            if let (Some(m), Some(d)) = (old.instances.get(o as usize), self.instances.get_mut(n as usize)) {
                d.clone_from(m);
            }
        }
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// Never true: a meter has at least one instance.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }
}
