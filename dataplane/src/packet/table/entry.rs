//! A table entry as lookups see it: its action list in one cache line.
//!
//! A hit runs the entry's actions; keeping them in one 64-byte, 64-byte aligned [`Entry`] makes
//! that a single cache line with no pointer to follow (the entry's counter is the worker's, in
//! [`super::PipelineState`]). Lists of
//! up to [`INLINE_ACTIONS`] actions (every entry of the usual route, ACL and L2 tables) are held
//! inline; a longer list lives in its table's action pool (one flat `Vec<Action>` per table) and
//! the entry holds its range there.

use crate::action::Action;

/// Actions an [`Entry`] holds inline; a longer list goes to the table's action pool.
pub const INLINE_ACTIONS: usize = 5;

/// One entry's actions (or, for a table's miss, the default action). 64 bytes, aligned to a
/// cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Entry {
    /// The first `len` actions when `len <= INLINE_ACTIONS`; unused otherwise.
    inline: [Action; INLINE_ACTIONS],
    /// Start of the list in the table's action pool when `len > INLINE_ACTIONS`.
    pool_start: u32,
    /// Number of actions.
    len: u16,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 64);

impl Entry {
    /// An entry running `actions`; a list longer than [`INLINE_ACTIONS`] is
    /// appended to `pool`.
    ///
    /// Panics if `actions` is longer than 65535 actions or `pool` would exceed 2^32 actions
    /// (config-time limits far beyond any action list).
    pub fn new(actions: &[Action], pool: &mut Vec<Action>) -> Entry {
        let len = u16::try_from(actions.len()).expect("at most 65535 actions per entry");
        let mut inline = [Action::Exit; INLINE_ACTIONS];
        let mut pool_start = 0;
        if actions.len() <= INLINE_ACTIONS {
            inline[..actions.len()].copy_from_slice(actions);
        } else {
            pool_start = u32::try_from(pool.len()).expect("a table's action pool below 2^32 actions");
            pool.extend_from_slice(actions);
        }
        Entry { inline, pool_start, len }
    }

    /// The entry's actions, in order; `pool` is its table's action pool.
    #[inline(always)]
    pub fn actions<'a>(&'a self, pool: &'a [Action]) -> &'a [Action] {
        let len = self.len as usize;
        if len <= INLINE_ACTIONS {
            &self.inline[..len]
        } else {
            let start = self.pool_start as usize;
            &pool[start..start + len]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_lists_are_inline_and_long_ones_pooled() {
        let mut pool = vec![Action::Flood];
        let short = [Action::DecTtl, Action::Forward(3)];
        let long: Vec<Action> = (0..7).map(Action::Count).collect();
        let e = Entry::new(&short, &mut pool);
        assert_eq!(pool.len(), 1);
        assert_eq!(e.actions(&pool), &short);
        let f = Entry::new(&long, &mut pool);
        assert_eq!(pool.len(), 8);
        assert_eq!(f.actions(&pool), &long[..]);
        assert_eq!(e.actions(&pool), &short);
        assert_eq!(Entry::new(&[], &mut pool).actions(&pool), &[]);
        let five = [Action::PopVlan; INLINE_ACTIONS];
        assert_eq!(Entry::new(&five, &mut pool).actions(&pool), &five);
        assert_eq!(pool.len(), 8);
        assert_eq!(std::mem::align_of::<Entry>(), 64);
    }
}
