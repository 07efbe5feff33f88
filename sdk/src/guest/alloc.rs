//! The guest's allocator on `wasm32`, which [`export_policy!`](crate::export_policy) installs as the
//! module's `#[global_allocator]`: a bump arena with free lists by size class.
//!
//! Every evaluation runs in a fresh instance that the host throws away afterwards, so the allocator
//! never has to give memory back to anyone or keep fragmentation down over a long life: it only has
//! to be fast and not waste too much memory within one evaluation. So:
//!
//! - a block is carved from the top of the heap by moving a pointer, its size rounded up to a
//!   size class (16, 24 and 32 bytes, then four classes per power of two: 40, 48, 56, 64, 80, …,
//!   at most 25% over what was asked, always a multiple of 8);
//! - a freed block goes on its class's free list (a pointer kept in the block), and the next
//!   allocation of that class takes it back: a loop that allocates and drops a buffer reuses the
//!   same block. With its own list empty, an allocation takes the smallest free block of up to
//!   four times its size and puts the rest on the list of the largest class the rest holds;
//! - freeing or shrinking the block at the top gives its bytes back to the top, and growing it
//!   (a `String` being formatted, a `Vec` being pushed to) extends it in place, with no copy;
//! - linear memory grows with `memory.grow` by the pages needed, never more, so a policy is
//!   stopped at its memory limit no earlier than it must be.
//!
//! Each operation is a handful of instructions, against the bins, splitting and coalescing of the
//! `dlmalloc` that the standard library brings to `wasm32-unknown-unknown`. Measured at 1,000 nodes
//! and 10,000 pending workloads: `priority-best-fit` 3–4% faster than with `dlmalloc` (7% before it
//! stopped allocating in its hot loops), `slo-first` 3% faster; peak memory 9.6 against 9 MiB and
//! 10 against 8 MiB. Neighbouring free blocks are never merged, so a policy that keeps freeing and
//! allocating large blocks of ever different sizes fragments: the SDK probe's churn test (168 MB
//! allocated in blocks of up to 1 MiB, 1.3 MB live) peaks at 31 MiB here, 11 MiB with `dlmalloc`,
//! and runs 15% slower. Such a policy keeps the standard allocator with
//! `export_policy!(MyPolicy, allocator = std)`, as does one that grows memory itself or brings its
//! own `#[global_allocator]`.
//!
//! When `memory.grow` is refused, the evaluation fails with "out of memory: …" naming the size of
//! the allocation and of the memory in use; Airtime's host stops a guest at its memory limit before
//! that, with an error naming the limit. Alignments above 8 are honoured (such blocks bypass the
//! free lists); addresses past 4 GiB are refused like a refused `memory.grow`.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use super::size_class::{CLASSES, MIN_ALIGN, class_of, class_size, class_within};

const PAGE: usize = 64 << 10;

/// How many classes above its own a request may take a free block from (four per power of two:
/// up to four times its size).
const SPLIT_CLASSES: usize = 8;

/// The allocator. `wasm32-unknown-unknown` is single-threaded, so relaxed atomics are plain loads
/// and stores; they only make the static `Sync` without more `unsafe`.
pub struct Arena {
    /// Next free byte at the top of the heap; 0 until the first allocation.
    next: AtomicUsize,
    /// End of linear memory as the arena knows it.
    end: AtomicUsize,
    /// The highest address ever handed out: memory at or above it is still zero, as
    /// `memory.grow` and the initial memory past the data segments give it.
    dirty: AtomicUsize,
    /// Per size class, the first free block (0: none); each free block holds the next one's address.
    free: [AtomicUsize; CLASSES],
    /// Bit `c` set: class `c` has a free block. Finds the smallest free block that is big enough in
    /// a few instructions.
    nonempty: [AtomicU64; 2],
}

impl Arena {
    pub const fn new() -> Self {
        Arena {
            next: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            dirty: AtomicUsize::new(0),
            free: [const { AtomicUsize::new(0) }; CLASSES],
            nonempty: [const { AtomicU64::new(0) }; 2],
        }
    }

    /// A block of `size` bytes (a class size) aligned to `align`, from the top, or a failed
    /// evaluation.
    #[inline]
    fn bump(&self, size: usize, align: usize) -> usize {
        let mut next = self.next.load(Relaxed);
        if next == 0 {
            // First use: start after everything the module put in memory (stack, data), at the end
            // of the initial memory; nothing but this allocator grows memory.
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
        start
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
            super::exports::fail(
                "the SDK's allocator found linear memory grown by other code; a policy that grows \
                 memory itself needs export_policy!(MyPolicy, allocator = std)",
            )
        }
        self.end.store((old + pages) * PAGE, Relaxed);
    }

    /// A block for `layout`: from its class's free list; else split off the smallest free block of
    /// a larger class (the rest goes on the list of the largest class it holds); else from the top.
    /// Returns the block and whether it may hold old data (a reused block, or top memory handed out
    /// before).
    #[inline]
    fn take(&self, layout: Layout) -> (*mut u8, bool) {
        let (class, size) = class_of(layout.size());
        if layout.align() <= MIN_ALIGN
            && let Some(found) = self.smallest_free_from(class)
            // At most four times the size: a small request does not break up a big block that a
            // big request could have used (the top serves it instead).
            && found <= class + SPLIT_CLASSES
        {
            let block = self.pop(found);
            if found != class {
                let found_size = class_size(found);
                if let Some((rest_class, _)) = class_within(found_size - size) {
                    self.push(rest_class, block + size);
                }
            }
            return (block as *mut u8, true);
        }
        let start = self.bump(size, layout.align().max(MIN_ALIGN));
        let dirty = self.dirty.load(Relaxed);
        if start + size > dirty {
            self.dirty.store(start + size, Relaxed);
        }
        (start as *mut u8, start < dirty)
    }

    /// Gives back a block of `layout`: to the top if it is the top block, else to its class's list.
    #[inline]
    fn give(&self, ptr: *mut u8, layout: Layout) {
        let (class, size) = class_of(layout.size());
        let block = ptr as usize;
        if block + size == self.next.load(Relaxed) {
            self.next.store(block, Relaxed);
        } else {
            self.push(class, block);
        }
    }

    /// The smallest class at or above `class` with a free block.
    #[inline]
    fn smallest_free_from(&self, class: usize) -> Option<usize> {
        let (word, bit) = (class / 64, class % 64);
        let low = self.nonempty[0].load(Relaxed);
        let high = self.nonempty[1].load(Relaxed);
        let (low, high) = if word == 0 { (low >> bit << bit, high) } else { (0, high >> bit << bit) };
        if low != 0 {
            Some(low.trailing_zeros() as usize)
        } else if high != 0 {
            Some(64 + high.trailing_zeros() as usize)
        } else {
            None
        }
    }

    /// Takes the first free block of `class`, which has one.
    #[inline]
    fn pop(&self, class: usize) -> usize {
        let head = &self.free[class];
        let block = head.load(Relaxed);
        // SAFETY: `block` is a free block of this class that `push` linked in; its first word holds
        // the next free block (or 0), written there by `push`.
        let after = unsafe { (block as *const usize).read() };
        head.store(after, Relaxed);
        if after == 0 {
            self.nonempty[class / 64].fetch_and(!(1u64 << (class % 64)), Relaxed);
        }
        block
    }

    /// Puts `block`, at least `class`'s size, 8-aligned and unused, on `class`'s free list.
    #[inline]
    fn push(&self, class: usize, block: usize) {
        let head = &self.free[class];
        // SAFETY: the block is at least 16 bytes, 8-aligned, and no longer in use: its first word is
        // ours to keep the list in.
        unsafe { (block as *mut usize).write(head.load(Relaxed)) };
        head.store(block, Relaxed);
        self.nonempty[class / 64].fetch_or(1u64 << (class % 64), Relaxed);
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

// SAFETY: every block handed out is `class_of(size).1 ≥ size` bytes, aligned to at least the
// layout's alignment (list blocks only serve alignments up to 8, and every block is 8-aligned),
// and belongs to one owner at a time: a block is either carved fresh from `[next, end)` (which
// only moves forward, or back over a block given back at the top), or taken off a free list that
// only blocks given back are put on. `dealloc` and `realloc` get the layout the block was
// allocated with (GlobalAlloc's contract), so `class_of` finds the same class size again. Linear
// memory never shrinks, so a block stays valid until the instance is dropped.
unsafe impl GlobalAlloc for Arena {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.take(layout).0
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let (ptr, used) = self.take(layout);
        if used {
            // SAFETY: `ptr` is a block of at least `layout.size()` bytes that we own.
            unsafe { core::ptr::write_bytes(ptr, 0, layout.size()) };
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.give(ptr, layout);
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (_, size) = class_of(layout.size());
        let (_, new_class_size) = class_of(new_size);
        let block = ptr as usize;
        if new_class_size == size {
            return ptr;
        }
        let top = block + size == self.next.load(Relaxed);
        if !top && new_size <= size {
            // Shrinking in place: the block keeps its tail until it is freed (under the smaller
            // class, which it more than fills).
            return ptr;
        }
        if top {
            // The top block: grow or shrink it where it is.
            let stop = block.checked_add(new_class_size).unwrap_or_else(|| out_of_memory(new_size, block));
            if stop > self.end.load(Relaxed) {
                self.grow_to(stop, new_size);
            }
            self.next.store(stop, Relaxed);
            if stop > self.dirty.load(Relaxed) {
                self.dirty.store(stop, Relaxed);
            }
            return ptr;
        }
        // SAFETY: the caller guarantees `layout.align()` is a power of two and that `new_size`
        // rounded up to it does not overflow `isize`: a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (new, _) = self.take(new_layout);
        // SAFETY: both blocks are ours and distinct (the old one is still in use, so `take` cannot
        // have handed it out), and both hold at least the smaller of the two sizes.
        unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
        self.give(ptr, layout);
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
