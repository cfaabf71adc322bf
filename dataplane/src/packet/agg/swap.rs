//! Changing the collectives of a running appliance (the control plane's `add_collective`,
//! `modify_collective`, `delete_collective` and SIGHUP's reload): a new collective set for each
//! worker's aggregator, built with all its slot memory by the control thread ([`CollSwap::new`])
//! and switched to by the worker at a burst boundary ([`Aggregator::swap_collectives`]) without
//! allocating, freeing or locking: the states of the collectives the change keeps move into the
//! new set, and the old set (with the deleted and replaced collectives' states) goes back to be
//! read and freed by the control thread.

use super::collective::Collective;
use super::context::AggContext;
use super::nak::SharedNakLimiter;
use super::state::CollState;
use super::{Aggregator, CollCounters};
use std::sync::Arc;

/// One worker's next collective set, for [`Aggregator::swap_collectives`]: before the swap the
/// new set (the slots of the collectives this worker owns and the change does not keep, fresh;
/// placeholders for the kept ones), after it the old set (the kept collectives' places holding
/// the placeholders, the others their last state, to be read with [`CollSwap::left`]).
#[derive(Debug)]
pub struct CollSwap {
    colls: Vec<CollState>,
    index: Vec<u16>,
    owners: Vec<u16>,
    /// Per new collective: the index in the old set of the collective whose state it keeps.
    keep: Vec<Option<usize>>,
    /// Per old collective (its index): whether the new set keeps its state.
    kept_old: Vec<bool>,
    naks: Option<Arc<SharedNakLimiter>>,
    swapped: bool,
}

impl CollSwap {
    /// Worker `me`'s set of `collectives` (in their new order), collective `k` owned by worker
    /// `owners[k]` and keeping the state of the old set's collective `keep[k]` if `Some` (the
    /// same collective, unchanged: its owner must be the same). `old_len` is the old set's
    /// length. `naks`: a new NAK limiter for the new members' sources
    /// ([`SharedNakLimiter::successor`]), or `None` to keep the running one. Allocates every
    /// slot of the new collectives this worker owns (spec section 3).
    ///
    /// # Panics
    /// If `owners` or `keep` is not as long as `collectives`, or a `keep` index is not below
    /// `old_len` (the control plane's own bookkeeping, never a request's).
    pub fn new(
        ctx: &AggContext,
        me: u16,
        collectives: &[Collective],
        owners: &[u16],
        keep: &[Option<usize>],
        old_len: usize,
        naks: Option<Arc<SharedNakLimiter>>,
    ) -> CollSwap {
        assert!(owners.len() == collectives.len() && keep.len() == collectives.len());
        let mut index = vec![0u16; 1 << 16];
        for (i, c) in collectives.iter().enumerate() {
            index[c.id as usize] = i as u16 + 1;
        }
        let mut kept_old = vec![false; old_len];
        for i in keep.iter().flatten() {
            kept_old[*i] = true;
        }
        let colls = collectives
            .iter()
            .zip(owners.iter().zip(keep))
            .map(|(c, (&owner, keep))| match keep {
                // A placeholder: the worker moves the kept state here.
                Some(_) => CollState::unowned(c.clone()),
                None => CollState::for_worker(ctx, c, owner, me),
            })
            .collect();
        CollSwap {
            colls,
            index,
            owners: std::iter::once(me).chain(owners.iter().copied()).collect(),
            keep: keep.to_vec(),
            kept_old,
            naks,
            swapped: false,
        }
    }

    /// After the swap: the collectives of the old set that the new one does not keep (deleted
    /// or replaced), each with its id, its last counters and its slots that had a round in
    /// progress (discarded with it). Nothing before the swap.
    pub fn left(&self) -> impl Iterator<Item = (u16, &CollCounters, u64)> {
        let n = if self.swapped { self.colls.len() } else { 0 };
        self.colls[..n]
            .iter()
            .zip(self.kept_old.iter().chain(std::iter::repeat(&false)))
            .filter(|(_, kept)| !**kept)
            .map(|(c, _)| (c.spec.id, &c.counters, c.slots_in_use()))
    }
}

impl Aggregator {
    /// Switches to the collective set `s` (at a burst boundary): the states `s` keeps move from
    /// this aggregator into it (slots with their rounds in progress and kept results, PSN
    /// counters, straggler view, counters), then the two sets change places, with the NAK
    /// limiter if `s` brings one. Afterwards `s` holds the old set, to be freed off the fast
    /// path. No allocation, free or lock: the control plane built everything. A collective
    /// absent from the new set is unknown from here on (NAK reason 1, rule 5).
    pub fn swap_collectives(&mut self, s: &mut CollSwap) {
        for (new, keep) in s.colls.iter_mut().zip(&s.keep) {
            if let Some(old) = keep.and_then(|i| self.colls.get_mut(i)) {
                std::mem::swap(new, old);
            }
        }
        std::mem::swap(&mut self.colls, &mut s.colls);
        std::mem::swap(&mut self.index, &mut s.index);
        std::mem::swap(&mut self.owners, &mut s.owners);
        if let Some(n) = &mut s.naks {
            std::mem::swap(&mut self.naks, n);
        }
        s.swapped = true;
    }

    /// The NAK limiter this aggregator uses (shared by every worker's).
    pub fn nak_limiter(&self) -> &Arc<SharedNakLimiter> {
        &self.naks
    }
}
