//! How a new pipeline version (and collective set) reaches a worker and the old one comes back: one mailbox per
//! worker, two pointer slots. The control thread posts a boxed [`Update`]; the worker takes it
//! at a burst boundary (one relaxed load per poll-loop turn while the slot is empty), switches,
//! and gives the box back holding the old version, which the control thread frees. So a version
//! is freed only once its worker has left it, and the worker never allocates, frees or waits.

use crate::datapath::PipelineSwap;
use crate::live::Board;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

/// A pipeline version on its way to one worker (and, given back, the version it left).
#[derive(Debug)]
pub struct Update {
    /// The version and what it keeps of the old one's counts.
    pub swap: PipelineSwap,
    /// The worker's next collective set, when the update changes the collectives (after the
    /// switch, the set it left).
    pub agg: Option<crate::agg::swap::CollSwap>,
    /// The live board shaped for the new version, to publish into from the switch on.
    pub board: Option<Arc<Board>>,
    /// The version it installs (the control plane's count), to tell a late give-back of an
    /// earlier update from this one's.
    pub version: u64,
}

/// One worker's mailbox.
#[derive(Debug, Default)]
pub struct Mailbox {
    to_worker: AtomicPtr<Update>,
    to_control: AtomicPtr<Update>,
}

impl Mailbox {
    /// Worker side: the update posted for it, if any. Cheap when there is none.
    #[inline]
    pub fn take(&self) -> Option<Box<Update>> {
        if self.to_worker.load(Ordering::Relaxed).is_null() {
            return None;
        }
        let p = self.to_worker.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: a non-null pointer in the slot came from `Box::into_raw` in `post`, and the
        // swap took it out: this is its only owner now.
        (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
    }

    /// Worker side: gives the box back, now holding the version the worker left.
    pub fn give_back(&self, u: Box<Update>) {
        let old = self.to_control.swap(Box::into_raw(u), Ordering::Release);
        if !old.is_null() {
            // SAFETY: as in `take`: the slot owned it, the swap took it out.
            drop(unsafe { Box::from_raw(old) });
        }
    }

    /// Control side: posts `u` for the worker. Returns it if one is already waiting there.
    pub fn post(&self, u: Box<Update>) -> Result<(), Box<Update>> {
        let p = Box::into_raw(u);
        match self.to_worker.compare_exchange(ptr::null_mut(), p, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            // SAFETY: `p` came from `Box::into_raw` above and was not stored.
            Err(_) => Err(unsafe { Box::from_raw(p) }),
        }
    }

    /// Control side: the box the worker gave back, if it has.
    pub fn collect(&self) -> Option<Box<Update>> {
        let p = self.to_control.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: as in `take`.
        (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
    }

    /// Control side: takes back an update the worker has not taken yet.
    pub fn withdraw(&self) -> Option<Box<Update>> {
        let p = self.to_worker.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: as in `take`.
        (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        drop(self.withdraw());
        drop(self.collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Carry, Pipeline};

    fn update() -> Box<Update> {
        Box::new(Update {
            swap: PipelineSwap::new(Pipeline::default(), Arc::new(Carry::default())),
            agg: None,
            board: None,
            version: 1,
        })
    }

    #[test]
    fn an_update_goes_to_the_worker_once_and_comes_back() {
        let m = Mailbox::default();
        assert!(m.take().is_none());
        m.post(update()).unwrap();
        assert!(m.post(update()).is_err(), "one update at a time");
        let u = m.take().expect("posted");
        assert!(m.take().is_none(), "taken once");
        assert!(m.collect().is_none());
        m.give_back(u);
        assert!(m.collect().is_some());
        assert!(m.collect().is_none());
        m.post(update()).unwrap();
        assert!(m.withdraw().is_some());
        assert!(m.take().is_none(), "withdrawn before the worker took it");
        m.post(update()).unwrap(); // freed by Drop
    }
}
