//! The memory budget: one global limit on the memory a run may hold, and the one place that
//! counts it.
//!
//! * **What is counted.** Live heap bytes, when the process's global allocator is
//!   [`Counting`] (the `chad` binary installs `Counting<`[`Mimalloc`]`>`; tests and fuzz
//!   harnesses that want the budget enforced install `Counting<System>`), plus the stack segments that
//!   [`crate::deep`] maps. Every allocation is counted, so frees are too: the budget bounds what
//!   is *held*, not what was ever allocated, and a long computation that allocates and frees
//!   never runs into it. Without `Counting` installed, [`live`] is always 0 and only each single
//!   request is checked against the limit.
//! * **Where it is checked.** Every allocation of array data (evaluators, the engine, linear
//!   accumulators, and any other interpreter or runtime: the IR interpreter, generated code)
//!   asks first, with [`reserve`] (or allocates through [`vec_with_capacity`], which also turns
//!   a failed allocation into an error instead of an abort). [`crate::deep::deep`], which every
//!   recursive pass runs under, checks [`exceeded`] too, so memory that grows without arrays
//!   (terms, closures, tuples) is caught at the next recursive step.
//! * **What the user sees.** A runtime error "memory budget exceeded" with the size asked for,
//!   what is held and the limit, and the position of the operation when the caller has one
//!   (the evaluators attach the span of the term that allocated). `chad --max-memory` sets the
//!   limit ([`set_limit`]); the default is [`default_limit`].
//!
//! The API other runtimes call: [`reserve`]`(bytes) -> Result<()>` before allocating `bytes` of
//! array data, or [`vec_with_capacity`]`::<T>(n) -> Result<Vec<T>>` to allocate through it.

use crate::error::{Error, Result};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

/// Address space held back for the moment the system refuses an allocation (see [`Counting`]):
/// at most this much, and at most an eighth of the address-space limit.
const EMERGENCY: usize = 256 << 20;

/// The emergency reserve: the address and size of an untouched private mapping, or 0.
static RESERVE_AT: AtomicUsize = AtomicUsize::new(0);
static RESERVE_LEN: AtomicUsize = AtomicUsize::new(0);
/// Set once the system refused an allocation: from then on the budget counts as exceeded.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// The default limit when nothing else bounds it: 4 GiB.
pub const DEFAULT_LIMIT: usize = 4 << 30;

static LIMIT: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The default budget: the smallest of [`DEFAULT_LIMIT`], half the machine's physical memory
/// and three quarters of the address-space limit (`ulimit -v`), so that chad reports a budget
/// error well before the system refuses it memory.
pub fn default_limit() -> usize {
    let mut limit = DEFAULT_LIMIT;
    // SAFETY: sysconf and getrlimit only read system information into plain integers.
    unsafe {
        let pages = libc::sysconf(libc::_SC_PHYS_PAGES);
        let page = libc::sysconf(libc::_SC_PAGESIZE);
        if pages > 0 && page > 0 {
            limit = limit.min((pages as usize).saturating_mul(page as usize) / 2);
        }
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_AS, &mut r) == 0 && r.rlim_cur != libc::RLIM_INFINITY {
            limit = limit.min((r.rlim_cur as usize) / 4 * 3);
        }
    }
    limit
}

/// The current limit in bytes.
pub fn limit() -> usize {
    match LIMIT.load(Relaxed) {
        0 => {
            let l = default_limit();
            LIMIT.store(l, Relaxed);
            l
        }
        l => l,
    }
}

/// Sets the limit in bytes (for the whole process).
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes.max(1), Relaxed);
}

/// The bytes held now: live heap (if [`Counting`] is the global allocator) and stack segments.
pub fn live() -> usize {
    LIVE.load(Relaxed)
}

/// Whether [`Counting`] is the global allocator (so that [`live`] counts the heap).
pub fn counting() -> bool {
    COUNTING.load(Relaxed)
}

/// Whether more is held than the limit allows, or the system has refused an allocation.
#[inline]
pub fn exceeded() -> bool {
    LIVE.load(Relaxed) > limit() || REFUSED.load(Relaxed)
}

/// Whether the system has refused an allocation (the run is being stopped).
pub fn refused() -> bool {
    REFUSED.load(Relaxed)
}

/// The error for a request of `bytes` (0: the budget was found exceeded between requests).
pub fn error(bytes: usize) -> Error {
    error_holding(bytes, live())
}

/// [`error`] with the bytes held when the budget was found exceeded (an error reported after
/// unwinding, which frees memory, says what was held at the time).
pub fn error_holding(bytes: usize, held: usize) -> Error {
    let what = if bytes == 0 {
        "memory budget exceeded".to_string()
    } else {
        format!("memory budget exceeded: allocating {}", human(bytes))
    };
    if refused() {
        return Error::runtime(format!(
            "out of memory: the system refused an allocation with {} held, below the limit of \
             {} (the address space or the machine has less; lower --max-memory)",
            human(held),
            human(limit())
        ));
    }
    Error::runtime(format!(
        "{what} with {} held; the limit is {} (raise it with --max-memory)",
        human(held),
        human(limit())
    ))
}

/// Checks that `bytes` more may be allocated for array data: the one call every allocation of
/// array data makes first. Fails with [`error`] when the held memory plus `bytes` would pass
/// the limit.
#[inline]
pub fn reserve(bytes: usize) -> Result<()> {
    if bytes < 4096 && !exceeded() {
        return Ok(());
    }
    reserve_slow(bytes)
}

#[cold]
fn reserve_slow(bytes: usize) -> Result<()> {
    if refused() || live().saturating_add(bytes) > limit() {
        return Err(error(bytes));
    }
    Ok(())
}

/// [`reserve`] for `n` elements of `T`.
#[inline]
pub fn reserve_elems<T>(n: usize) -> Result<()> {
    reserve(n.saturating_mul(std::mem::size_of::<T>().max(1)))
}

/// An empty vector with room for `n` elements, allocated within the budget; a failed
/// allocation is an error too, not an abort.
pub fn vec_with_capacity<T>(n: usize) -> Result<Vec<T>> {
    reserve_elems::<T>(n)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| error(n.saturating_mul(std::mem::size_of::<T>())))?;
    Ok(v)
}

/// Counts `bytes` as held outside the heap (a stack segment), if the budget allows.
pub(crate) fn acquire_external(bytes: usize) -> bool {
    if live().saturating_add(bytes) > limit() {
        return false;
    }
    LIVE.fetch_add(bytes, Relaxed);
    true
}

/// Stops counting `bytes` acquired with [`acquire_external`].
pub(crate) fn release_external(bytes: usize) {
    LIVE.fetch_sub(bytes, Relaxed);
}

/// `n` bytes for people: `512 B`, `3.0 MiB`, `8.0 GiB`.
pub fn human(n: usize) -> String {
    const K: f64 = 1024.0;
    let x = n as f64;
    if x < K {
        format!("{n} B")
    } else if x < K * K {
        format!("{:.1} KiB", x / K)
    } else if x < K * K * K {
        format!("{:.1} MiB", x / (K * K))
    } else {
        format!("{:.1} GiB", x / (K * K * K))
    }
}

/// Parses a size for `--max-memory`: a number of bytes with an optional suffix `K`, `M`, `G`
/// (powers of 1024; `KiB`, `MB`, ... accepted alike).
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 512M, 4G)"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("`{s}`: unknown unit (use K, M, G or T)")),
    };
    let bytes = x * scale;
    if !(bytes.is_finite() && bytes >= 1.0) {
        return Err(format!("`{s}` is not a positive size"));
    }
    Ok(bytes.min(usize::MAX as f64) as usize)
}

/// A global allocator that counts live bytes for the budget, around any other allocator:
/// `#[global_allocator] static A: Counting<std::alloc::System> = Counting(std::alloc::System);`
pub struct Counting<A>(pub A);

// SAFETY: every method forwards to the inner allocator unchanged and only adds bookkeeping on
// an atomic counter (which allocates nothing).
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let mut p = unsafe { self.0.alloc(layout) };
        if p.is_null() && release_emergency() {
            // SAFETY: as above.
            p = unsafe { self.0.alloc(layout) };
        }
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let mut p = unsafe { self.0.alloc_zeroed(layout) };
        if p.is_null() && release_emergency() {
            // SAFETY: as above.
            p = unsafe { self.0.alloc_zeroed(layout) };
        }
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let mut p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if p.is_null() && release_emergency() {
            // SAFETY: as above (a failed realloc leaves `ptr` valid).
            p = unsafe { self.0.realloc(ptr, layout, new_size) };
        }
        if !p.is_null() {
            if new_size >= layout.size() {
                LIVE.fetch_add(new_size - layout.size(), Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        p
    }
}

/// mimalloc as a global allocator, through its plain entry points where they suffice: the
/// `chad` binary's allocator (inside [`Counting`]) and the one native libraries are handed
/// ([`crate::native`]). The `mimalloc` crate's `MiMalloc` calls `mi_malloc_aligned` for every
/// request; when its fast path finds no free block in the size class's current page, it
/// allocates a block of `size + align - 1` bytes and points into it unless the class's size
/// is a power of two (24-, 40- or 80-byte requests: an `Arc`'s header, short arrays), a
/// slower path and a larger block. Every mimalloc block is aligned to at least a word (its
/// size classes are multiples of the word size), so a request aligned to a word or less
/// (every array of reals, tuple and `Arc` the engine and native code allocate) goes to
/// `mi_malloc`, `mi_zalloc` and `mi_realloc`, the others to the aligned functions.
/// GMM's derivatives at N = 1000 in a harness around the emitted module (minimum of 60, four
/// alternated rounds): forward 12.6–13.9 → 12.1–12.3 ms, reverse 13.8–15.3 → 12.7–13.0 ms.
pub struct Mimalloc;

/// The alignment every mimalloc block has.
const MI_WORD: usize = std::mem::size_of::<usize>();

/// A new mimalloc block for `layout`, zeroed if asked: the plain function for alignments up
/// to a word, the aligned one above.
///
/// # Safety
/// As `GlobalAlloc::alloc`: `layout` has a non-zero size.
#[inline]
unsafe fn mi_block(layout: Layout, zeroed: bool) -> *mut u8 {
    use libmimalloc_sys as mi;
    let (size, align) = (layout.size(), layout.align());
    // SAFETY: plain calls into mimalloc with a valid size and a power-of-two alignment.
    unsafe {
        (match (align <= MI_WORD, zeroed) {
            (true, false) => mi::mi_malloc(size),
            (true, true) => mi::mi_zalloc(size),
            (false, false) => mi::mi_malloc_aligned(size, align),
            (false, true) => mi::mi_zalloc_aligned(size, align),
        }) as *mut u8
    }
}

// SAFETY: each method calls mimalloc's function for the request, with alignments above a word
// passed on; `mi_free` frees blocks of either kind.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain calls into mimalloc; a word-aligned block satisfies `layout`.
        unsafe { mi_block(layout, false) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { mi_block(layout, true) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from one of this allocator's mimalloc calls.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys as mi;
        // SAFETY: `ptr` came from this allocator with `layout`; the new block keeps its
        // alignment (a word, or the aligned function's).
        unsafe {
            if layout.align() <= MI_WORD {
                mi::mi_realloc(ptr.cast(), new_size) as *mut u8
            } else {
                mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()) as *mut u8
            }
        }
    }
}

/// Marks [`Counting`] as installed; called once by a program whose global allocator it is (the
/// first allocation cannot tell, since a static cannot know it is the global allocator).
///
/// Also holds back the emergency reserve: address space (an untouched mapping, so no memory)
/// that [`Counting`] gives back to the system when an allocation is refused, before trying
/// again. The retried allocation then usually succeeds, the budget counts as [`exceeded`] from
/// then on, and the next checkpoint ([`reserve`], or [`crate::deep::deep`] in every recursive
/// step) stops the run with an "out of memory" runtime error instead of the abort that a
/// failed allocation means in Rust. (It matters when `--max-memory` is set above what the
/// system gives, e.g. under `ulimit -v`; the default limit stays below that.)
pub fn note_counting() {
    COUNTING.store(true, Relaxed);
    if RESERVE_AT.load(Relaxed) != 0 {
        return;
    }
    let mut len = EMERGENCY;
    // SAFETY: getrlimit and mmap only read system information / create a fresh mapping.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_AS, &mut r) == 0 && r.rlim_cur != libc::RLIM_INFINITY {
            len = len.min(r.rlim_cur as usize / 8);
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p != libc::MAP_FAILED {
            RESERVE_LEN.store(len, Relaxed);
            RESERVE_AT.store(p as usize, Relaxed);
        }
    }
}

/// Gives the emergency reserve back to the system (once) and marks the budget exceeded;
/// whether there was one to give.
#[cold]
fn release_emergency() -> bool {
    REFUSED.store(true, Relaxed);
    let at = RESERVE_AT.swap(0, Relaxed);
    if at == 0 {
        return false;
    }
    // SAFETY: `at` is the mapping made in `note_counting`, of that length, unmapped only here
    // (the swap hands it to one caller).
    unsafe { libc::munmap(at as *mut libc::c_void, RESERVE_LEN.load(Relaxed)) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("2 MiB"), Ok(2 << 20));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("3X").is_err());
    }

    #[test]
    fn a_single_request_over_the_limit_is_refused() {
        // Without the counting allocator (test binaries use the system one) only the request
        // itself is measured.
        assert!(reserve(limit().saturating_add(1)).is_err());
        assert!(vec_with_capacity::<f64>(usize::MAX / 16).is_err());
        assert!(reserve(1024).is_ok());
        let e = error(1 << 30);
        assert!(e.message().contains("memory budget exceeded"), "{e:?}");
        assert!(e.message().contains("1.0 GiB"), "{e:?}");
    }

    /// Every layout gets a block with its alignment that holds its bytes: zeroed when asked,
    /// kept by `realloc` (which may move it) up to the smaller size. The sizes cover each
    /// small size class (powers of two and not), the alignments a word and more; the blocks
    /// of one alignment stay allocated until all were checked, so that consecutive blocks of
    /// a size class are checked, not one block handed back again.
    #[test]
    fn mimalloc_blocks_have_their_layouts() {
        let sizes = (1..=40).chain([63, 64, 65, 100, 1000, 4095, 4097, 100_000, 1 << 21]);
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            let mut live = Vec::new();
            for size in sizes.clone() {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; each block is used within its size and freed once,
                // with the layout it has.
                unsafe {
                    let z = Mimalloc.alloc_zeroed(layout);
                    assert!(!z.is_null() && z as usize % align == 0, "{size} / {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0), "zeroed {size} / {align}");
                    live.push((z, layout));
                    for new in [size / 2 + 1, size + 1, 3 * size + 17] {
                        let p = Mimalloc.alloc(layout);
                        assert!(!p.is_null() && p as usize % align == 0, "{size} / {align}");
                        for i in 0..size {
                            *p.add(i) = i as u8;
                        }
                        let q = Mimalloc.realloc(p, layout, new);
                        assert!(
                            !q.is_null() && q as usize % align == 0,
                            "{size}->{new} / {align}"
                        );
                        assert!((0..size.min(new)).all(|i| *q.add(i) == i as u8));
                        live.push((q, Layout::from_size_align(new, align).unwrap()));
                    }
                }
            }
            for (p, layout) in live {
                // SAFETY: allocated above with this layout, freed once.
                unsafe { Mimalloc.dealloc(p, layout) }
            }
        }
    }
}
