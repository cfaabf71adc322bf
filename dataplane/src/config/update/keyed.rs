//! A list changed by a batch of operations: finding, adding, replacing and deleting an item by
//! its identity cost the same whatever the list's length, so a batch costs in proportion to its
//! operations plus the lists it touches, not to their product.

use std::collections::HashMap;
use std::hash::Hash;

/// A list of `T` being changed, each item found by its identity `K`: the items in order, those
/// deleted left as holes until [`Keyed::finish`], and an index from identity to place (built
/// once, when the list is first touched). Of two items with the same identity (which the
/// builders refuse), the first is the one found.
#[derive(Debug)]
pub(super) struct Keyed<K, T> {
    slots: Vec<Option<T>>,
    index: HashMap<K, usize>,
}

impl<K: Eq + Hash + Clone, T: Clone> Keyed<K, T> {
    /// `items`, in order, indexed by `key` (an item whose identity cannot be said, `None`, is
    /// kept but never found).
    pub(super) fn new(items: Vec<T>, key: impl Fn(&T) -> Option<K>) -> Self {
        let mut index = HashMap::with_capacity(items.len());
        for (i, t) in items.iter().enumerate() {
            if let Some(k) = key(t) {
                index.entry(k).or_insert(i);
            }
        }
        Keyed { slots: items.into_iter().map(Some).collect(), index }
    }

    /// The slot of the item with identity `k`.
    pub(super) fn find(&self, k: &K) -> Option<usize> {
        self.index.get(k).copied()
    }

    /// The item in slot `slot` (one [`Keyed::find`] gave).
    pub(super) fn get_mut(&mut self, slot: usize) -> Option<&mut T> {
        self.slots.get_mut(slot).and_then(Option::as_mut)
    }

    /// Appends `item`, of identity `k`.
    pub(super) fn push(&mut self, k: K, item: T) {
        self.index.insert(k, self.slots.len());
        self.slots.push(Some(item));
    }

    /// Removes the item of identity `k`, if there is one.
    pub(super) fn remove(&mut self, k: &K) -> Option<T> {
        let slot = self.index.remove(k)?;
        self.slots[slot].take()
    }

    /// Puts `item` (identity `k`) in: appended when `add` (`Err(true)` when an item with its
    /// identity is there already), else in that item's place (`Err(false)` when there is none).
    pub(super) fn upsert(&mut self, k: K, add: bool, item: &T) -> Result<(), bool> {
        match (add, self.find(&k)) {
            (true, Some(_)) => Err(true),
            (true, None) => {
                self.push(k, item.clone());
                Ok(())
            }
            (false, Some(s)) => {
                self.slots[s] = Some(item.clone());
                Ok(())
            }
            (false, None) => Err(false),
        }
    }

    /// The index slot `slot` will have in the finished list (the items before it, holes not
    /// counted). Walks the list: for error messages only.
    pub(super) fn position(&self, slot: usize) -> usize {
        self.slots[..slot.min(self.slots.len())].iter().filter(|s| s.is_some()).count()
    }

    /// The items, in order.
    pub(super) fn items(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }

    /// The list as changed, in order, and each identity's index in it.
    pub(super) fn finish(self) -> (Vec<T>, HashMap<K, usize>) {
        let mut at = Vec::with_capacity(self.slots.len());
        let mut n = 0;
        for s in &self.slots {
            at.push(n);
            n += usize::from(s.is_some());
        }
        let index = self.index.into_iter().map(|(k, slot)| (k, at[slot])).collect();
        (self.slots.into_iter().flatten().collect(), index)
    }
}

#[cfg(test)]
mod tests {
    use super::Keyed;

    /// Deleted items leave holes until the end; the finished list keeps the order, and each
    /// identity's index is its place in it.
    #[test]
    fn finds_adds_replaces_and_deletes_in_order() {
        let mut k = Keyed::new(vec!["a1", "b1", "c1", "a2"], |s: &&str| Some(s.as_bytes()[0]));
        // The first of two with one identity is found.
        assert_eq!(k.find(&b'a'), Some(0));
        assert_eq!(k.remove(&b'b'), Some("b1"));
        assert_eq!(k.remove(&b'b'), None);
        assert_eq!(k.upsert(b'd', true, &"d1"), Ok(()));
        assert_eq!(k.upsert(b'd', true, &"d2"), Err(true));
        assert_eq!(k.upsert(b'e', false, &"e1"), Err(false));
        assert_eq!(k.upsert(b'c', false, &"c2"), Ok(()));
        assert_eq!(k.position(k.find(&b'd').unwrap()), 3);
        *k.get_mut(0).unwrap() = "a0";
        assert_eq!(k.items().copied().collect::<Vec<_>>(), ["a0", "c2", "a2", "d1"]);
        let (items, at) = k.finish();
        assert_eq!(items, ["a0", "c2", "a2", "d1"]);
        let mut at: Vec<(u8, usize)> = at.into_iter().collect();
        at.sort();
        assert_eq!(at, [(b'a', 0), (b'c', 1), (b'd', 3)]);
    }
}
