//! Stack safety for deeply nested programs.
//!
//! Programs are trees, and a straight-line program of n `let`s is a tree of depth n: every
//! recursive pass (parser, checker, compiler, `interpret`, evaluators, printers, even `Drop`) would
//! recurse n deep. Rather than cap the depth, every recursive function in the crate runs its body
//! through [`deep`], which switches to a fresh heap-allocated stack segment when the current one
//! runs low (via the `stacker` crate). Deep *data* is dropped through [`Deep`], which does the
//! same for destructors. Together they make "no input overflows the stack" hold for any caller's
//! thread, including 2 MiB test threads.

use std::mem::ManuallyDrop;
use std::ops::Deref;

/// Stack left before [`deep`] switches to a new segment.
const RED_ZONE: usize = 128 * 1024;
/// Size of each new stack segment.
const SEGMENT: usize = 8 * 1024 * 1024;

/// Runs `f`, first moving to a new stack segment if fewer than 128 KiB of stack remain.
///
/// Wrap the body of every function that recurses on the structure of a term, type or value.
#[inline]
pub fn deep<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, SEGMENT, f)
}

/// Runs `f` on a fresh stack large enough for recursion in code we do not control (the `pretty`
/// crate's document builders and destructors). The memory is reserved, not committed.
pub fn with_large_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::grow(1 << 30, f)
}

/// An owned value whose destructor runs under [`deep`], so dropping a long chain of nodes
/// (`Rc<Deep<Node>>` where `Node` holds more such pointers) cannot overflow the stack. `T` may be
/// unsized, e.g. `Rc<Deep<dyn Fn(..)>>` for trees of closures.
pub struct Deep<T: ?Sized>(ManuallyDrop<T>);

impl<T> Deep<T> {
    /// Wraps a value.
    pub fn new(value: T) -> Self {
        Deep(ManuallyDrop::new(value))
    }

    /// Unwraps the value (the caller now owns it, destructor included).
    pub fn into_inner(self) -> T {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped (ManuallyDrop), so the value is taken exactly once and
        // `Deep`'s destructor does not run on the emptied wrapper.
        unsafe { ManuallyDrop::take(&mut me.0) }
    }
}

impl<T: ?Sized> Deref for Deep<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> Drop for Deep<T> {
    fn drop(&mut self) {
        let inner = &mut self.0;
        // SAFETY: the value is dropped exactly once, here, and never used again: this is the
        // destructor, and the ManuallyDrop wrapper keeps the compiler from dropping it too.
        deep(move || unsafe { ManuallyDrop::drop(inner) });
    }
}

impl<T: std::fmt::Debug + ?Sized> std::fmt::Debug for Deep<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    enum List {
        Nil,
        Cons(Rc<Deep<(u32, List)>>),
    }

    #[test]
    fn dropping_a_million_deep_list_does_not_overflow() {
        let mut l = List::Nil;
        for i in 0..1_000_000 {
            l = List::Cons(Rc::new(Deep::new((i, l))));
        }
        let mut n = 0;
        let mut cur = &l;
        while let List::Cons(c) = cur {
            n += 1;
            cur = &c.1;
        }
        assert_eq!(n, 1_000_000);
        drop(l);
    }

    #[test]
    fn deep_recursion_survives_small_thread_stacks() {
        fn depth(n: u32) -> u32 {
            deep(|| if n == 0 { 0 } else { 1 + depth(n - 1) })
        }
        let h = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| depth(200_000))
            .unwrap();
        assert_eq!(h.join().unwrap(), 200_000);
    }
}
