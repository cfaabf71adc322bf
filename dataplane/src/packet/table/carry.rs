//! Counts carried from one pipeline version to the next when the control plane swaps a
//! worker's pipeline at runtime: the counters of an entry, a table's miss, a named counter and
//! a meter's state that both versions hold move to their places in the new version's
//! [`PipelineState`]; what the new version adds starts at zero, what it removes leaves with the
//! old version.

use super::PipelineState;

/// Where each kept counter goes, as (index in the old version, index in the new one). Built off
/// the fast path by the control plane (which knows which entries are the same), applied by
/// each worker at the burst boundary where it switches ([`PipelineState::carry_from`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carry {
    /// Entry and miss counters, as flat indexes (entry `i` of table `t` at `base[t] + i`, the
    /// miss after the table's last entry: see [`PipelineState`]).
    pub hits: Vec<(usize, usize)>,
    /// Named counters (`count(name)`), by index.
    pub named: Vec<(usize, usize)>,
    /// Meters whose whole state carries (buckets and colour counts), by index: a meter whose
    /// configuration did not change and whose instances stay the same.
    pub meters: Vec<(usize, usize)>,
    /// Meters whose colour counts alone carry (their buckets start full): the others present
    /// in both versions under the same name.
    pub meter_colors: Vec<(usize, usize)>,
    /// Direct meters whose configuration did not change but whose users did: their colour
    /// counts carry, and the buckets of the instances listed as (old instance, new instance);
    /// the others start full.
    pub meter_instances: Vec<(usize, usize, InstancePairs)>,
}

/// A direct meter's kept instances, as (instance in the old version, instance in the new one).
pub type InstancePairs = Vec<(u32, u32)>;

impl PipelineState {
    /// Where table `t`'s counters start in the flat array (see [`Carry::hits`]).
    pub fn base_of(&self, t: usize) -> usize {
        self.base[t]
    }

    /// Moves what `carry` names from `old` (the worker's state of the version it leaves) into
    /// `self` (a fresh state of the new version): counters are copied, meter states swapped.
    /// No allocation: a worker calls it at a burst boundary. Indexes out of range are skipped
    /// (a carry made for other versions never panics; it carries less).
    pub fn carry_from(&mut self, old: &mut PipelineState, carry: &Carry) {
        for &(o, n) in &carry.hits {
            if let (Some(c), Some(d)) = (old.hits.get(o), self.hits.get_mut(n)) {
                *d = *c;
            }
        }
        for &(o, n) in &carry.named {
            if let (Some(c), Some(d)) = (old.named.get(o), self.named.get_mut(n)) {
                *d = *c;
            }
        }
        for &(o, n) in &carry.meters {
            if let (Some(m), Some(d)) = (old.meters.get_mut(o), self.meters.get_mut(n)) {
                std::mem::swap(m, d);
            }
        }
        for &(o, n) in &carry.meter_colors {
            if let (Some(m), Some(d)) = (old.meters.get(o), self.meters.get_mut(n)) {
                d.colors = m.colors;
            }
        }
        for (o, n, pairs) in &carry.meter_instances {
            if let (Some(m), Some(d)) = (old.meters.get(*o), self.meters.get_mut(*n)) {
                d.colors = m.colors;
                d.carry_instances(m, pairs);
            }
        }
    }
}
