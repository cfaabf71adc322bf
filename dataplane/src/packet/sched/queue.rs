//! One traffic class's FIFO: a ring preallocated for `capacity_pkts` entries, bounded in bytes
//! and in packets. Nothing allocates after construction: the ring never holds more than the
//! capacity it was created with.

use std::collections::VecDeque;

/// A queued item with what the scheduler keeps beside it.
#[derive(Debug)]
pub(crate) struct Entry<T> {
    /// The item.
    pub item: T,
    /// Its frame length in bytes, without FCS.
    pub len: u32,
    /// Enqueue time (ticks).
    pub enq: u64,
    /// The dequeue-time marking decision was taken (and applied) for this entry.
    pub decided: bool,
}

/// A FIFO bounded by `capacity_bytes` (sum of frame lengths without FCS) and `capacity_pkts`.
#[derive(Debug)]
pub(crate) struct ClassQueue<T> {
    ring: VecDeque<Entry<T>>,
    bytes: u64,
    capacity_bytes: u64,
    capacity_pkts: usize,
}

impl<T> ClassQueue<T> {
    /// An empty queue; the ring is allocated here, once.
    pub fn new(capacity_bytes: u64, capacity_pkts: usize) -> Self {
        ClassQueue { ring: VecDeque::with_capacity(capacity_pkts), bytes: 0, capacity_bytes, capacity_pkts }
    }

    /// Queued packets.
    #[inline]
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Queued bytes (frame lengths without FCS).
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// True when nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// True when a frame of `len` bytes fits in both bounds.
    #[inline]
    pub fn fits(&self, len: u32) -> bool {
        self.ring.len() < self.capacity_pkts && self.bytes + u64::from(len) <= self.capacity_bytes
    }

    /// Appends `e`; the caller has checked [`ClassQueue::fits`].
    #[inline]
    pub fn push(&mut self, e: Entry<T>) {
        debug_assert!(self.fits(e.len));
        self.bytes += u64::from(e.len);
        self.ring.push_back(e);
    }

    /// The head entry.
    #[inline]
    pub fn head_mut(&mut self) -> Option<&mut Entry<T>> {
        self.ring.front_mut()
    }

    /// The head's frame length (bytes).
    #[inline]
    pub fn head_len(&self) -> Option<u32> {
        self.ring.front().map(|e| e.len)
    }

    /// Removes the head.
    #[inline]
    pub fn pop(&mut self) -> Option<Entry<T>> {
        let e = self.ring.pop_front()?;
        self.bytes -= u64::from(e.len);
        Some(e)
    }

    /// The ring's allocated capacity (entries): at least `capacity_pkts`, never changing.
    #[cfg(test)]
    pub fn ring_capacity(&self) -> usize {
        self.ring.capacity()
    }
}
