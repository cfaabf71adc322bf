//! Deficit weighted round robin between traffic classes (Shreedhar & Varghese, "Efficient Fair
//! Queuing using Deficit Round Robin", SIGCOMM 1995), with byte quanta.
//!
//! Active classes (non-empty) wait in a round-robin list. When a class's turn starts, its
//! deficit grows by its quantum (`weight × quantum_bytes`); it sends while its head packet's
//! cost (wire bytes: frame + overhead) fits in the deficit, then goes to the back of the list.
//! A class that empties leaves the list with its deficit reset to 0. Over any busy period each
//! backlogged class gets a share of the bytes proportional to its weight, within one maximum
//! packet plus one quantum per round. With quanta of at least one maximum frame, each turn sends
//! at least one packet (O(1) work per packet).
//!
//! Selection and commit are split so that a shaper can hold the selected packet back:
//! [`Dwrr::select`] returns the class whose head fits (advancing turns as needed) and returns it
//! again until [`Dwrr::commit`] removes that packet.

use super::MAX_CLASSES;

/// DWRR state for up to [`MAX_CLASSES`] classes, in fixed arrays (no allocation).
#[derive(Debug, Clone)]
pub(crate) struct Dwrr {
    quantum: [u64; MAX_CLASSES],
    deficit: [u64; MAX_CLASSES],
    /// The active list, a ring of class numbers from `head`, `n` long.
    active: [u8; MAX_CLASSES],
    head: usize,
    n: usize,
    /// The head class's turn has started (its quantum was added).
    in_turn: bool,
}

impl Dwrr {
    /// DWRR with quantum `quanta[c]` bytes per turn for class `c` (each at least 1).
    pub fn new(quanta: &[u64]) -> Self {
        let mut quantum = [0; MAX_CLASSES];
        quantum[..quanta.len()].copy_from_slice(quanta);
        Dwrr { quantum, deficit: [0; MAX_CLASSES], active: [0; MAX_CLASSES], head: 0, n: 0, in_turn: false }
    }

    /// Class `c` became non-empty: it joins the back of the list with deficit 0.
    #[inline]
    pub fn activate(&mut self, c: usize) {
        debug_assert!(self.n < MAX_CLASSES);
        self.active[(self.head + self.n) % MAX_CLASSES] = c as u8;
        self.n += 1;
    }

    /// The class whose head packet is sent next, `cost(c)` giving the wire bytes of class `c`'s
    /// head packet (every active class has one); `None` when no class is active.
    #[inline]
    pub fn select(&mut self, cost: impl Fn(usize) -> u64) -> Option<usize> {
        while self.n > 0 {
            let c = usize::from(self.active[self.head]);
            if !self.in_turn {
                self.deficit[c] += self.quantum[c];
                self.in_turn = true;
            }
            if cost(c) <= self.deficit[c] {
                return Some(c);
            }
            // Turn over: to the back of the list, deficit kept.
            self.head = (self.head + 1) % MAX_CLASSES;
            self.active[(self.head + self.n - 1) % MAX_CLASSES] = c as u8;
            self.in_turn = false;
        }
        None
    }

    /// The packet [`Dwrr::select`] chose for class `c` left (sent: `cost` wire bytes; dropped:
    /// 0); `now_empty` when the class has nothing left, which ends its turn and resets its
    /// deficit.
    #[inline]
    pub fn commit(&mut self, c: usize, cost: u64, now_empty: bool) {
        debug_assert!(self.n > 0 && usize::from(self.active[self.head]) == c && self.in_turn);
        self.deficit[c] -= cost;
        if now_empty {
            self.deficit[c] = 0;
            self.head = (self.head + 1) % MAX_CLASSES;
            self.n -= 1;
            self.in_turn = false;
        }
    }

    /// Every class inactive, deficits 0 (the queues were emptied).
    pub fn reset(&mut self) {
        self.deficit = [0; MAX_CLASSES];
        self.head = 0;
        self.n = 0;
        self.in_turn = false;
    }
}
