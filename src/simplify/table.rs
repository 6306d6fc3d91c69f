//! Per-variable tables, indexed densely by [`VarId`].
//!
//! The simplifier keeps a few facts per variable (occurrences, uses in the output, what it is
//! substituted by) and looks them up at every variable occurrence and every binder. A hash map
//! scatters consecutive identities over the whole table, so on a large term nearly every lookup
//! is a cache miss. Identities come from one global counter, and the binders of a term are made
//! together (by the AD functors, or by the previous pass), so they occupy a narrow window of
//! identities, and a variable's binder and its occurrences are near each other in that window.
//! An [`IdTable`] stores the window as a vector (a lookup is an index), and the few identities
//! outside it (free variables, or a window too sparse to be worth storing) in a hash map.
//!
//! The window only grows when its length stays within a constant factor of the number of slots
//! asked for, so its memory is bounded by the work done, even when the identities of a term are
//! far apart (a term built long ago, combined with one built now).

use crate::target::term::VarId;
use rustc_hash::FxHashMap;

/// A map from variable identities to `T`, where a missing entry reads as `T::default()` inside
/// the dense window.
pub(super) struct IdTable<T> {
    /// The identity of `dense[0]`.
    lo: u32,
    dense: Vec<T>,
    sparse: FxHashMap<u32, T>,
    /// Slots asked for with [`IdTable::slot`] (bounds the window's length).
    asked: usize,
}

/// Slack allowed in the window beyond a constant factor of the slots asked for.
const SLACK: usize = 1024;
/// How many times longer than the slots asked for the window may grow.
const FACTOR: usize = 4;

impl<T: Default> IdTable<T> {
    /// An empty table.
    pub(super) fn new() -> IdTable<T> {
        IdTable {
            lo: 0,
            dense: Vec::new(),
            sparse: FxHashMap::default(),
            asked: 0,
        }
    }

    /// An empty table whose window starts as `[lo, lo + len)`.
    #[cfg(test)]
    pub(super) fn with_window(lo: u32, len: usize) -> IdTable<T> {
        let mut dense = Vec::new();
        dense.resize_with(len, T::default);
        IdTable {
            lo,
            dense,
            sparse: FxHashMap::default(),
            asked: len,
        }
    }

    /// The same identities with every entry mapped by `f`.
    pub(super) fn map<U>(self, mut f: impl FnMut(T) -> U) -> IdTable<U> {
        IdTable {
            lo: self.lo,
            dense: self.dense.into_iter().map(&mut f).collect(),
            sparse: self.sparse.into_iter().map(|(k, v)| (k, f(v))).collect(),
            asked: self.asked,
        }
    }

    /// The window: its first identity and its length.
    #[cfg(test)]
    pub(super) fn window(&self) -> (u32, usize) {
        (self.lo, self.dense.len())
    }

    #[inline]
    fn index(&self, id: VarId) -> Option<usize> {
        let i = id.0.wrapping_sub(self.lo) as usize;
        (i < self.dense.len()).then_some(i)
    }

    /// The entry of `id`, if it has one.
    #[inline]
    pub(super) fn get(&self, id: VarId) -> Option<&T> {
        match self.index(id) {
            Some(i) => Some(&self.dense[i]),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(&id.0),
        }
    }

    /// The entry of `id`, if it has one, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, id: VarId) -> Option<&mut T> {
        match self.index(id) {
            Some(i) => Some(&mut self.dense[i]),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get_mut(&id.0),
        }
    }

    /// The entry of `id`, made (as `T::default()`) if missing.
    #[inline]
    pub(super) fn slot(&mut self, id: VarId) -> &mut T {
        self.asked += 1;
        match self.index(id) {
            Some(i) => &mut self.dense[i],
            None => self.grow(id),
        }
    }

    /// `slot` for an identity outside the window: the window grows to take it in if it stays
    /// dense enough, and the entry goes to the sparse map otherwise.
    #[cold]
    fn grow(&mut self, id: VarId) -> &mut T {
        if self.sparse.contains_key(&id.0) {
            return self.sparse.get_mut(&id.0).expect("just found");
        }
        let len = self.dense.len();
        let limit = FACTOR * self.asked + SLACK;
        let id = id.0;
        if len == 0 {
            // The first entry: a window around it, to grow from.
            let lo = id.saturating_sub(SLACK as u32 / 2);
            self.lo = lo;
            self.dense
                .resize_with((id - lo) as usize + SLACK / 2, T::default);
        } else if id >= self.lo {
            // To the right: at least doubling, so growing is amortised O(1) per slot.
            let need = (id - self.lo) as usize + 1;
            if need > limit {
                return self.sparse.entry(id).or_default();
            }
            let new_len = need.max(2 * len).min(limit.max(need));
            self.dense.resize_with(new_len, T::default);
        } else {
            // To the left: the same, moving the entries.
            let hi = self.lo as usize + len;
            let need = hi - id as usize;
            if need > limit {
                return self.sparse.entry(id).or_default();
            }
            let new_len = need.max(2 * len).min(limit.max(need)).min(hi);
            let new_lo = (hi - new_len) as u32;
            let mut dense = Vec::with_capacity(new_len.max(self.dense.capacity()));
            dense.resize_with(new_len - len, T::default);
            dense.append(&mut self.dense);
            self.dense = dense;
            self.lo = new_lo;
        }
        // Entries of the sparse map that now fall in the window move into it.
        if !self.sparse.is_empty() {
            let (lo, len) = (self.lo, self.dense.len());
            let inside: Vec<u32> = self
                .sparse
                .keys()
                .copied()
                .filter(|&k| (k.wrapping_sub(lo) as usize) < len)
                .collect();
            for k in inside {
                let v = self.sparse.remove(&k).expect("a key just listed");
                self.dense[(k - lo) as usize] = v;
            }
        }
        let i = self
            .index(VarId(id))
            .expect("the window now holds the identity");
        &mut self.dense[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_both_ways_and_keeps_entries() {
        let mut t: IdTable<u32> = IdTable::new();
        for id in (5000..6000).rev().chain(6000..9000) {
            *t.slot(VarId(id)) += id;
        }
        for id in 5000..9000 {
            assert_eq!(t.get(VarId(id)), Some(&id));
        }
        assert_eq!(t.get(VarId(1)), None);
        assert!(t.window().1 < 4 * 4000 + SLACK * 2, "{:?}", t.window());
    }

    #[test]
    fn far_identities_go_to_the_sparse_map() {
        let mut t: IdTable<u32> = IdTable::with_window(1_000_000, 10);
        *t.slot(VarId(1_000_005)) = 1;
        *t.slot(VarId(4_000_000_000)) = 2;
        *t.slot(VarId(3)) = 3;
        assert_eq!(t.window(), (1_000_000, 10));
        assert_eq!(t.get(VarId(1_000_005)), Some(&1));
        assert_eq!(t.get(VarId(4_000_000_000)), Some(&2));
        assert_eq!(t.get(VarId(3)), Some(&3));
        *t.get_mut(VarId(3)).unwrap() += 1;
        assert_eq!(t.get(VarId(3)), Some(&4));
        assert_eq!(t.get(VarId(4)), None);
        // Near the window it grows instead.
        *t.slot(VarId(999_990)) = 5;
        assert_eq!(t.window().0, 999_990);
        assert_eq!(t.get(VarId(1_000_005)), Some(&1));
    }

    #[test]
    fn a_growing_window_takes_in_sparse_entries() {
        let mut t: IdTable<u32> = IdTable::with_window(0, 10);
        *t.slot(VarId(2000)) = 7;
        for id in 10..1500 {
            *t.slot(VarId(id)) = 1;
        }
        *t.slot(VarId(1990)) = 1;
        assert_eq!(t.get(VarId(2000)), Some(&7));
    }
}
