//! Stack safety for deeply nested programs, and the one way a run stops when it runs out of
//! stack or memory.
//!
//! Programs are trees, and a straight-line program of n `let`s is a tree of depth n: every
//! recursive pass (parser, checker, compiler, `interpret`, AD, simplifier, evaluators, printers,
//! even `Drop`) would recurse n deep. Rather than cap the depth, every recursive function in the
//! crate runs its body through [`deep`], which switches to a fresh stack segment when the
//! current one runs low. Deep *data* is dropped through [`Deep`], which does the same for
//! destructors. That is the crate's one stack-growth strategy; `tests/reliability.rs` runs
//! programs nested to the parser's limit through every command to keep it complete.
//!
//! **Exhaustion.** A segment is mapped memory counted against the memory budget
//! ([`crate::budget`]), and [`deep`] also checks the budget on every call, so it is the
//! checkpoint where any runaway growth is noticed. When a segment cannot be had (the budget
//! would be passed, or `mmap` fails, e.g. under `ulimit -v`), or the budget is exceeded,
//! [`deep`] does not return: it unwinds with an [`Exhausted`] payload (without running the
//! panic hook, so nothing is printed). [`catch`] turns that unwind into an ordinary runtime
//! [`Error`] at the API boundary: the CLI and the library's entry points that return `Result`
//! run under it. Destructors never unwind: when a destructor cannot get a segment it leaks the
//! value instead. Any other panic passes through [`catch`] untouched (it is a bug).

use crate::budget;
use crate::error::{Error, Result};
use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Stack that must be left when [`deep`] runs its closure on the current segment: the most any
/// code may use between two calls of [`deep`].
const RED_ZONE: usize = 256 * 1024;
/// Size of each new stack segment, unless [`set_segment_size`] changed it.
const SEGMENT: usize = 16 * 1024 * 1024;

static SEGMENT_SIZE: AtomicUsize = AtomicUsize::new(SEGMENT);

/// Sets the size of new stack segments (at least twice the red zone). Small segments make any
/// recursion that does not run under [`deep`] overflow early: the stack-safety tests run the
/// CLI with `CHAD_STACK_KIB=512` to find such recursion at modest depths.
pub fn set_segment_size(bytes: usize) {
    SEGMENT_SIZE.store(bytes.max(2 * RED_ZONE), Relaxed);
}

fn segment_size() -> usize {
    SEGMENT_SIZE.load(Relaxed)
}

/// Runs `f` on a fresh segment of the current segment size (see [`set_segment_size`]), so
/// that all of it runs on segments of that size. Unwinds with [`Exhausted::Stack`] if no
/// segment can be had.
pub fn on_fresh_segment<R>(f: impl FnOnce() -> R) -> R {
    match Segment::map(segment_size(), true) {
        Some(seg) => run_on(seg, f),
        None => exhausted(Exhausted::Stack),
    }
}

/// Why a run was stopped: the payload [`deep`] unwinds with, and [`catch`] turns into an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// A new stack segment could not be had (the program nests too deeply for the memory).
    Stack,
    /// More memory is held than the budget allows: how much was held when that was found.
    Memory {
        /// Bytes held.
        held: usize,
    },
}

impl Exhausted {
    /// The runtime error reporting it.
    pub fn error(self) -> Error {
        match self {
            Exhausted::Stack => Error::runtime(format!(
                "out of stack: the program nests too deeply for the memory available \
                 (another {} of stack would pass the memory budget of {}, or the system \
                 refused it)",
                budget::human(segment_size()),
                budget::human(budget::limit())
            ))
            .with_note("raise the budget with --max-memory, or nest less deeply"),
            Exhausted::Memory { held } => budget::error_holding(0, held),
        }
    }
}

/// Stops the current run: unwinds to the nearest [`catch`] without running the panic hook.
#[cold]
pub fn exhausted(why: Exhausted) -> ! {
    resume_unwind(Box::new(why))
}

/// Runs `f`, turning an [`Exhausted`] unwind from anywhere inside it into a runtime error.
/// Every public entry point that returns a `Result` and may run deep passes is wrapped in it.
pub fn catch<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_exhausted(f).unwrap_or_else(|why| Err(why.error()))
}

/// Runs `f`, returning why it was stopped if it unwound with [`Exhausted`] (any other panic
/// passes through).
pub fn catch_exhausted<T>(f: impl FnOnce() -> T) -> std::result::Result<T, Exhausted> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(payload) => match payload.downcast::<Exhausted>() {
            Ok(why) => Err(*why),
            Err(other) => resume_unwind(other),
        },
    }
}

thread_local! {
    /// The lowest address the current stack segment may be used down to plus [`RED_ZONE`]
    /// (0: not known yet on this thread).
    static LOW: Cell<usize> = const { Cell::new(0) };
    /// One unused segment kept for the next switch, so recursion that hovers around a segment
    /// boundary does not map and unmap on every call.
    static SPARE: Cell<Option<Segment>> = const { Cell::new(None) };
}

/// The lowest safe stack address of this thread's current stack: computed once per thread
/// from the OS stack's limit (a thread whose limit is unknown gets a segment at once).
#[cold]
fn init_low() -> usize {
    let sp = psm::stack_pointer() as usize;
    let low = match stacker::remaining_stack() {
        Some(rem) => sp.saturating_sub(rem).saturating_add(RED_ZONE),
        None => usize::MAX,
    };
    LOW.with(|l| l.set(low));
    low
}

#[inline]
fn enough_stack() -> bool {
    let low = match LOW.with(Cell::get) {
        0 => init_low(),
        l => l,
    };
    psm::stack_pointer() as usize >= low
}

/// Runs `f`, first moving to a new stack segment if less than `RED_ZONE` of stack remains.
/// Also the budget's checkpoint: unwinds with [`Exhausted::Memory`] when the memory budget is
/// exceeded, and with [`Exhausted::Stack`] when no segment can be had (see the module doc).
///
/// Wrap the body of every function that recurses on the structure of a term, type or value.
#[inline]
pub fn deep<R>(f: impl FnOnce() -> R) -> R {
    if budget::exceeded() {
        exhausted(Exhausted::Memory {
            held: budget::live(),
        });
    }
    if enough_stack() {
        return f();
    }
    match on_new_segment(segment_size(), f) {
        Ok(r) => r,
        Err(_) => exhausted(Exhausted::Stack),
    }
}

/// [`deep`] for destructors (a `Drop` impl whose fields may hold a long chain of values):
/// never unwinds; when no segment can be had, `f` is not run (what it would drop is leaked).
#[inline]
pub fn deep_drop(f: impl FnOnce()) {
    if enough_stack() {
        return f();
    }
    let _ = on_new_segment(segment_size(), f);
}

/// Runs `f` on a fresh stack of `size` bytes (reserved, committed as used), for recursion in code
/// we do not control (the `pretty` crate's document builders and destructors). Unwinds with
/// [`Exhausted::Stack`] if no such stack can be had.
pub fn with_large_stack<R>(f: impl FnOnce() -> R) -> R {
    // Reserved address space, not memory: not counted against the budget, and tried smaller
    // when the address space is limited.
    let mut f = Some(f);
    for size in [1usize << 30, 256 << 20, 64 << 20] {
        let Some(seg) = Segment::map(size, false) else {
            continue;
        };
        let g = f.take().expect("runs once");
        return run_on(seg, g);
    }
    exhausted(Exhausted::Stack)
}

/// Runs `f` on a new segment of `size` bytes, or gives `f` back if none can be had.
#[cold]
#[inline(never)]
fn on_new_segment<R, F: FnOnce() -> R>(size: usize, f: F) -> std::result::Result<R, F> {
    let seg = match SPARE.with(Cell::take) {
        Some(s) if s.size == size => s,
        other => {
            drop(other);
            match Segment::map(size, true) {
                Some(s) => s,
                None => return Err(f),
            }
        }
    };
    Ok(run_on(seg, f))
}

fn run_on<R>(seg: Segment, f: impl FnOnce() -> R) -> R {
    let old = LOW.with(Cell::get);
    LOW.with(|l| l.set(seg.base + RED_ZONE));
    let mut ret = None;
    let slot = &mut ret;
    // SAFETY: `seg` is a mapped, writable region of `seg.size` bytes that outlives the call and
    // that nothing else uses; the callback does not unwind out of `on_stack` (it catches).
    let panic = unsafe {
        psm::on_stack(seg.base as *mut u8, seg.size, move || {
            catch_unwind(AssertUnwindSafe(move || *slot = Some(f()))).err()
        })
    };
    LOW.with(|l| l.set(old));
    if seg.counted {
        // Keep it as the spare unless there is one already.
        SPARE.with(|s| match s.take() {
            None => s.set(Some(seg)),
            spare => s.set(spare),
        });
    }
    if let Some(p) = panic {
        resume_unwind(p);
    }
    ret.expect("the callback ran")
}

/// A mapped stack segment with a guard page below it.
struct Segment {
    /// Lowest usable address.
    base: usize,
    /// Usable bytes.
    size: usize,
    /// Whether it is counted against the memory budget.
    counted: bool,
}

const GUARD: usize = 64 * 1024;

impl Segment {
    fn map(size: usize, counted: bool) -> Option<Segment> {
        if counted && !budget::acquire_external(size) {
            return None;
        }
        let total = size + GUARD;
        // SAFETY: a fresh anonymous private mapping; on success its first GUARD bytes stay
        // inaccessible (an overflow faults instead of corrupting memory) and the rest is made
        // readable and writable.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                None
            } else if libc::mprotect(
                (p as *mut u8).add(GUARD) as *mut libc::c_void,
                size,
                libc::PROT_READ | libc::PROT_WRITE,
            ) != 0
            {
                libc::munmap(p, total);
                None
            } else {
                Some(p as usize + GUARD)
            }
        };
        match base {
            Some(base) => Some(Segment {
                base,
                size,
                counted,
            }),
            None => {
                if counted {
                    budget::release_external(size);
                }
                None
            }
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `Segment::map`, which nothing uses now.
        unsafe {
            libc::munmap((self.base - GUARD) as *mut libc::c_void, self.size + GUARD);
        }
        if self.counted {
            budget::release_external(self.size);
        }
    }
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
        // SAFETY: the value is dropped at most once, here, and never used again: this is the
        // destructor, and the ManuallyDrop wrapper keeps the compiler from dropping it too.
        // (When no stack segment can be had it is not dropped at all: leaked.)
        deep_drop(move || unsafe { ManuallyDrop::drop(inner) });
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

    #[test]
    fn panics_pass_through_segments_and_exhaustion_becomes_an_error() {
        fn dive(n: u32, at: u32) -> u32 {
            deep(|| {
                if n == at {
                    exhausted(Exhausted::Stack)
                } else {
                    1 + dive(n + 1, at)
                }
            })
        }
        let h = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let e = catch(|| Ok(dive(0, 100_000))).unwrap_err();
                assert!(e.message().contains("out of stack"), "{e:?}");
                // An ordinary panic is not swallowed.
                let r = catch_unwind(|| catch(|| -> Result<()> { panic!("a bug") }));
                assert!(r.is_err());
                // And the thread can go on recursing afterwards.
                assert_eq!(
                    catch(|| Ok(dive(0, 1000))).map_err(|e| e.kind()),
                    Err(crate::ErrorKind::Runtime)
                );
                assert!(catch(|| Ok(deep(|| 7))).is_ok());
            })
            .unwrap();
        h.join().unwrap();
    }
}
