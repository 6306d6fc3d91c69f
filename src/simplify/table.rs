//! Per-variable tables, indexed densely by [`VarId`].
//!
//! The simplifier keeps a few facts per variable (occurrences, uses in the output, what it is
//! substituted by) and looks them up at every variable occurrence and every binder. A hash map
//! scatters consecutive identities over the whole table, so on a large term nearly every lookup
//! is a cache miss. Identities come from one global counter, and the binders of a term are made
//! together (by the AD functors, or by the previous pass), so they occupy a narrow window of
//! identities, and a variable's binder and its occurrences are near each other in that window.
//!
//! An [`IdTable`] stores the window in pages of [`PAGE`] consecutive identities, made when first
//! asked for, under a short directory (a lookup is two indexings). The window grows in either
//! direction by extending the directory only, so nothing is moved, and no page is made (or
//! zeroed, or faulted in) for a stretch of identities nobody asks about. The few identities
//! outside the window (free variables, or identities too scattered to be worth a page each) go
//! to a hash map: pages are made only while their entries stay within a constant factor of the
//! slots asked for, so the memory is bounded by the work done even when the identities of a term
//! are far apart (a term built long ago, combined with one built now).

use crate::target::term::VarId;
use rustc_hash::FxHashMap;

/// Identities per page (a power of two).
const PAGE: usize = 1024;
const SHIFT: u32 = PAGE.trailing_zeros();
const MASK: u32 = PAGE as u32 - 1;

/// Slack allowed beyond a constant factor of the slots asked for, in entries.
const SLACK: usize = 16 * PAGE;
/// How many times more entries than slots asked for the pages may hold.
const FACTOR: usize = 4;

/// A map from variable identities to `T`, where a missing entry reads as `T::default()` on a
/// page that exists.
pub(super) struct IdTable<T> {
    /// The page number of `pages[0]`.
    first: u32,
    /// The directory: page `first + i` at `pages[i]`, if made.
    pages: Vec<Option<Box<[T]>>>,
    /// Pages made.
    made: usize,
    sparse: FxHashMap<u32, T>,
    /// Slots asked for with [`IdTable::slot`] (bounds the pages made).
    asked: usize,
}

impl<T: Default> IdTable<T> {
    /// An empty table.
    pub(super) fn new() -> IdTable<T> {
        IdTable {
            first: 0,
            pages: Vec::new(),
            made: 0,
            sparse: FxHashMap::default(),
            asked: 0,
        }
    }

    /// The page of `id` and the index in it, if the page exists.
    #[inline]
    fn find(&self, id: VarId) -> Option<&T> {
        let p = (id.0 >> SHIFT).wrapping_sub(self.first) as usize;
        match self.pages.get(p) {
            Some(Some(page)) => Some(&page[(id.0 & MASK) as usize]),
            _ => None,
        }
    }

    /// The entry of `id`, if it has one.
    #[inline]
    pub(super) fn get(&self, id: VarId) -> Option<&T> {
        match self.find(id) {
            Some(e) => Some(e),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(&id.0),
        }
    }

    /// The entry of `id`, if it has one, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, id: VarId) -> Option<&mut T> {
        let p = (id.0 >> SHIFT).wrapping_sub(self.first) as usize;
        match self.pages.get_mut(p) {
            Some(Some(page)) => Some(&mut page[(id.0 & MASK) as usize]),
            _ if self.sparse.is_empty() => None,
            _ => self.sparse.get_mut(&id.0),
        }
    }

    /// The entry of `id`, made (as `T::default()`) if missing.
    #[inline]
    pub(super) fn slot(&mut self, id: VarId) -> &mut T {
        self.asked += 1;
        let p = (id.0 >> SHIFT).wrapping_sub(self.first) as usize;
        if let Some(Some(_)) = self.pages.get(p) {
            let Some(Some(page)) = self.pages.get_mut(p) else {
                unreachable!("just found")
            };
            return &mut page[(id.0 & MASK) as usize];
        }
        self.make(id)
    }

    /// `slot` for an identity without a page: its page is made (the directory extended to
    /// reach it) if the pages stay few enough, and the entry goes to the sparse map otherwise.
    #[cold]
    fn make(&mut self, id: VarId) -> &mut T {
        if self.sparse.contains_key(&id.0) {
            return self.sparse.get_mut(&id.0).expect("just found");
        }
        let limit = FACTOR * self.asked + SLACK;
        let page = id.0 >> SHIFT;
        let reach = if self.pages.is_empty() {
            1
        } else if page < self.first {
            (self.first - page) as usize + self.pages.len()
        } else {
            (page - self.first) as usize + 1
        };
        // Both the pages and the directory (one word per page) stay within the bound.
        if (self.made + 1) * PAGE > limit || reach.max(self.pages.len()) > limit / 8 {
            return self.sparse.entry(id.0).or_default();
        }
        if self.pages.is_empty() {
            self.first = page;
            self.pages.push(None);
        } else if page < self.first {
            // The directory grows to the left, by at least its length (so moving it costs
            // O(1) per page made, amortised) but not below page 0.
            let more = ((self.first - page) as usize)
                .max(self.pages.len())
                .min(self.first as usize);
            self.pages
                .splice(0..0, std::iter::repeat_with(|| None).take(more));
            self.first -= more as u32;
        } else if (page - self.first) as usize >= self.pages.len() {
            self.pages
                .resize_with((page - self.first) as usize + 1, || None);
        }
        let i = (page - self.first) as usize;
        let mut fresh: Vec<T> = Vec::with_capacity(PAGE);
        fresh.resize_with(PAGE, T::default);
        // Entries of the sparse map that fall on the new page move onto it.
        if !self.sparse.is_empty() {
            let inside: Vec<u32> = self
                .sparse
                .keys()
                .copied()
                .filter(|&k| k >> SHIFT == page)
                .collect();
            for k in inside {
                fresh[(k & MASK) as usize] = self.sparse.remove(&k).expect("a key just listed");
            }
        }
        self.pages[i] = Some(fresh.into_boxed_slice());
        self.made += 1;
        let Some(Some(p)) = self.pages.get_mut(i) else {
            unreachable!("just made")
        };
        &mut p[(id.0 & MASK) as usize]
    }

    /// The pages made (for tests).
    #[cfg(test)]
    fn made(&self) -> usize {
        self.made
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
        assert_eq!(t.made(), 5, "the pages of 4096..9215");
    }

    #[test]
    fn far_identities_go_to_the_sparse_map() {
        let mut t: IdTable<u32> = IdTable::new();
        *t.slot(VarId(10_000_005)) = 1;
        *t.slot(VarId(4_000_000_000)) = 2;
        *t.slot(VarId(3)) = 3;
        assert_eq!(t.made(), 1, "one page, the others too far for three slots");
        assert_eq!(t.get(VarId(10_000_005)), Some(&1));
        assert_eq!(t.get(VarId(4_000_000_000)), Some(&2));
        assert_eq!(t.get(VarId(3)), Some(&3));
        *t.get_mut(VarId(3)).unwrap() += 1;
        assert_eq!(t.get(VarId(3)), Some(&4));
        assert_eq!(t.get(VarId(4)), None);
        // Near the window, a page is made instead.
        *t.slot(VarId(9_998_005)) = 5;
        assert_eq!(t.made(), 2);
        assert_eq!(t.get(VarId(9_998_005)), Some(&5));
        assert_eq!(t.get(VarId(10_000_005)), Some(&1));
    }

    #[test]
    fn a_new_page_takes_in_sparse_entries() {
        let mut t: IdTable<u32> = IdTable::new();
        *t.slot(VarId(0)) = 1;
        // Far enough to be sparse at first ...
        *t.slot(VarId(5000 * PAGE as u32)) = 7;
        assert_eq!(t.made(), 1);
        // ... until enough slots are asked for.
        for id in 0..(100 * PAGE as u32) {
            *t.slot(VarId(id % 5)) += 0;
        }
        *t.slot(VarId(5000 * PAGE as u32 + 1)) = 8;
        assert_eq!(t.made(), 2);
        assert_eq!(t.get(VarId(5000 * PAGE as u32)), Some(&7));
        assert_eq!(t.get(VarId(5000 * PAGE as u32 + 1)), Some(&8));
    }
}
