//! Folding a contribution into its slot's accumulator (spec section 4 rule 6, in rank order for
//! a deterministic collective: rule 7), and writing the kept result on the round's last one.

use super::check::Contribution;
use super::Aggregator;

impl Aggregator {
    /// Folds a contribution's lanes (rule 6); on the last one, writes the kept result.
    pub(super) fn fold(&mut self, c: Contribution, payload: &[u8], first: bool, last: bool) {
        // Disjoint borrows: the kernel table (272 bytes of function pointers) is read in
        // place, not copied per contribution.
        let Aggregator { kernels: k, colls, counters, .. } = self;
        let st = &mut colls[c.coll];
        let lanes = st.lanes(c.chunk);
        let chunk = st.spec.chunk_elements as usize;
        let size = st.spec.dtype.size();
        let (op, dt) = (st.spec.op, st.spec.dtype);
        let payload = &payload[..lanes * size];
        counters.payload_bytes += payload.len() as u64;
        st.counters.payload_bytes += payload.len() as u64;
        let res = c.slot * chunk * size;
        let result = &mut st.result[res..res + lanes * size];
        if st.spec.deterministic {
            // Rule 7: reduce in rank order. The accumulator holds ranks 0..folded; a rank that
            // arrives in turn is folded straight from its frame (then any later ranks already
            // kept), one that arrives early is kept until its turn. The last contribution is
            // always the one in turn (every other rank has arrived), so the round ends folded.
            // The kernel calls are those of a fold of every rank in order: load rank 0, fold the
            // middle ranks, fold_store rank n-1 (load and store when n is 1).
            let n = st.spec.workers();
            let base = c.slot * n * chunk * size;
            if first {
                st.folded[c.slot] = 0;
            }
            let next = st.folded[c.slot] as usize;
            if c.rank != next {
                let at = base + c.rank * chunk * size;
                st.ranks[at..at + lanes * size].copy_from_slice(payload);
                return;
            }
            let acc = &mut st.acc[c.slot * chunk..c.slot * chunk + lanes];
            let step = |r: usize, acc: &mut [u32], src: &[u8], result: &mut [u8]| {
                if r == 0 {
                    k.load(dt, acc, src);
                    if n == 1 {
                        k.store(dt, acc, result);
                    }
                } else if r == n - 1 {
                    k.fold_store(op, dt, acc, src, result);
                } else {
                    k.fold(op, dt, acc, src);
                }
            };
            step(next, acc, payload, result);
            let words = st.words;
            let bm = &st.bitmaps[c.slot * words..(c.slot + 1) * words];
            let mut r = next + 1;
            while r < n && bm[r / 64] & (1 << (r % 64)) != 0 {
                let at = base + r * chunk * size;
                step(r, acc, &st.ranks[at..at + lanes * size], result);
                r += 1;
            }
            st.folded[c.slot] = r as u32;
            debug_assert!(!last || r == n, "the last contribution completes the rank-order fold");
            return;
        }
        let acc = &mut st.acc[c.slot * chunk..c.slot * chunk + lanes];
        match (first, last) {
            (true, true) => {
                k.load(dt, acc, payload);
                k.store(dt, acc, result);
            }
            (true, false) => k.load(dt, acc, payload),
            (false, false) => k.fold(op, dt, acc, payload),
            (false, true) => k.fold_store(op, dt, acc, payload, result),
        }
    }
}
