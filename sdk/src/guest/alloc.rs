//! The guest's allocator on `wasm32`: an arena that only moves forward, which
//! [`export_policy!`](crate::export_policy) installs as the module's `#[global_allocator]`.
//!
//! Every evaluation runs in a fresh instance that the host throws away afterwards, so nothing a
//! policy allocates ever has to be given back for the next cycle. The arena hands out memory by
//! moving a pointer (a few instructions, against the free lists and bins of the `dlmalloc` that
//! Rust's standard library brings to `wasm32-unknown-unknown`), grows linear memory with
//! `memory.grow` by the pages it needs, and reuses memory in two cheap cases only:
//!
//! - freeing or shrinking the most recent allocation gives its bytes back (a temporary buffer
//!   allocated and dropped in a loop costs nothing after the first time);
//! - growing the most recent allocation (a `String` being formatted, a `Vec` being pushed to)
//!   extends it in place, with no copy.
//!
//! Everything else freed stays allocated until the instance is dropped. Peak memory is therefore
//! what the policy allocated in total during the evaluation, less what it freed in LIFO order:
//! about 1.6× `dlmalloc`'s peak for `priority-best-fit` at 1,000 nodes and 10,000 pending
//! workloads, well inside the default 256 MiB limit. A policy that churns through far more memory
//! than it keeps can opt out with `export_policy!(MyPolicy, allocator = std)`.
//!
//! When `memory.grow` is refused, the evaluation fails with "out of memory: …" naming the size of
//! the allocation and of the memory; Airtime's host stops the guest at its memory limit itself, with
//! [`MemoryLimit`](https://docs.rs/airtime-policy-host) naming the limit. Alignment is honoured for
//! any power of two; addresses past 4 GiB are refused the same way.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

const PAGE: usize = 64 << 10;

/// The arena. `wasm32-unknown-unknown` is single-threaded, so relaxed atomics are plain loads and
/// stores; they only make the static `Sync` without more `unsafe`.
pub struct Arena {
    /// Next free byte; 0 until the first allocation.
    next: AtomicUsize,
    /// End of linear memory as the arena knows it.
    end: AtomicUsize,
    /// The highest address ever handed out: memory above it is still zero, as `memory.grow` and
    /// the initial memory past the data segments give it.
    dirty: AtomicUsize,
}

impl Arena {
    pub const fn new() -> Self {
        Arena { next: AtomicUsize::new(0), end: AtomicUsize::new(0), dirty: AtomicUsize::new(0) }
    }

    /// `size` bytes aligned to `align`, or a failed evaluation.
    #[inline]
    fn bump(&self, size: usize, align: usize) -> *mut u8 {
        let mut next = self.next.load(Relaxed);
        if next == 0 {
            // First use: start after everything the module put in memory (stack, data), at the end
            // of the initial memory; nothing else in the module grows memory.
            next = wasm32::memory_size(0) * PAGE;
            self.end.store(next, Relaxed);
            self.dirty.store(next, Relaxed);
        }
        let start = align_up(next, align).unwrap_or_else(|| out_of_memory(size, next));
        let stop = start.checked_add(size).unwrap_or_else(|| out_of_memory(size, next));
        if stop > self.end.load(Relaxed) {
            self.grow_to(stop, size);
        }
        self.next.store(stop, Relaxed);
        start as *mut u8
    }

    /// Grows linear memory so that it ends at or after `stop`.
    #[cold]
    fn grow_to(&self, stop: usize, size: usize) {
        let end = self.end.load(Relaxed);
        let pages = (stop - end).div_ceil(PAGE);
        let old = wasm32::memory_grow(0, pages);
        if old == usize::MAX {
            out_of_memory(size, end);
        }
        if old * PAGE != end {
            // Something else grew memory (a policy calling `memory_grow` itself): the pages between
            // are not ours, and carving past them would hand out memory in use.
            super::exports::fail("the SDK's arena allocator found linear memory grown by other code; use export_policy!(MyPolicy, allocator = std) in a policy that grows memory itself")
        }
        self.end.store((old + pages) * PAGE, Relaxed);
    }

    /// Marks `[start, stop)` as handed out; returns where the zero memory began before.
    #[inline]
    fn touch(&self, stop: usize) -> usize {
        let dirty = self.dirty.load(Relaxed);
        if stop > dirty {
            self.dirty.store(stop, Relaxed);
        }
        dirty
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

// SAFETY: `alloc` returns a block of `layout.size()` bytes aligned to `layout.align()` that no
// other live allocation overlaps: blocks are carved from `[next, end)`, which only moves forward
// except when the most recent block is freed or shrunk, and that block is then no longer live.
// Linear memory never shrinks, so a block stays valid until the instance is dropped.
unsafe impl GlobalAlloc for Arena {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = self.bump(layout.size(), layout.align());
        self.touch(ptr as usize + layout.size());
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = self.bump(layout.size(), layout.align());
        let stop = ptr as usize + layout.size();
        // Only the part that was handed out before (and freed) can be non-zero.
        let dirty = self.touch(stop).min(stop);
        if dirty > ptr as usize {
            // SAFETY: `[ptr, dirty)` lies inside the block just allocated.
            unsafe { core::ptr::write_bytes(ptr, 0, dirty - ptr as usize) };
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // The most recent block goes back; any other stays until the instance is dropped.
        if ptr as usize + layout.size() == self.next.load(Relaxed) {
            self.next.store(ptr as usize, Relaxed);
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (start, old_size) = (ptr as usize, layout.size());
        if start + old_size == self.next.load(Relaxed) {
            // The most recent block: grow or shrink it where it is.
            let stop = start.checked_add(new_size).unwrap_or_else(|| out_of_memory(new_size, start));
            if stop > self.end.load(Relaxed) {
                self.grow_to(stop, new_size);
            }
            self.next.store(stop, Relaxed);
            self.touch(stop);
            return ptr;
        }
        if new_size <= old_size {
            return ptr;
        }
        // SAFETY: the caller guarantees `layout.align()` is a power of two and that `new_size`
        // rounded up to it does not overflow `isize`, which is what `Layout` requires.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid layout of non-zero size (`new_size > old_size`).
        let new = unsafe { self.alloc(new_layout) };
        // SAFETY: both blocks are live, `old_size` bytes fit in each, and they do not overlap (the
        // new one was carved after the old one).
        unsafe { core::ptr::copy_nonoverlapping(ptr, new, old_size) };
        new
    }
}

fn align_up(at: usize, align: usize) -> Option<usize> {
    Some(at.checked_add(align - 1)? & !(align - 1))
}

/// Ends the evaluation with a message naming the allocation, formatted without allocating.
#[cold]
fn out_of_memory(size: usize, memory: usize) -> ! {
    let mut message = Message { bytes: [0; 160], len: 0 };
    message.push("out of memory: allocating ");
    message.number(size);
    message.push(" bytes with ");
    message.number(memory);
    message.push(" bytes of linear memory in use, and memory.grow refused more");
    super::exports::fail(message.as_str())
}

/// A fixed buffer for [`out_of_memory`]'s message.
struct Message {
    bytes: [u8; 160],
    len: usize,
}

impl Message {
    fn push(&mut self, text: &str) {
        for &byte in text.as_bytes() {
            if let Some(slot) = self.bytes.get_mut(self.len) {
                *slot = byte;
                self.len += 1;
            }
        }
    }

    fn number(&mut self, mut n: usize) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for &digit in &digits[at..] {
            if let Some(slot) = self.bytes.get_mut(self.len) {
                *slot = digit;
                self.len += 1;
            }
        }
    }

    fn as_str(&self) -> &str {
        // Only ASCII was pushed.
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("out of memory")
    }
}
