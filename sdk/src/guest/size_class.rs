//! The size classes of the guest's allocator ([`alloc`](super::alloc), `wasm32` only), here so that
//! native tests cover the arithmetic.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

/// Every block is aligned to this; larger alignments bypass the free lists.
pub(crate) const MIN_ALIGN: usize = 8;

/// The smallest block: room for the free list's next pointer, and the class of every size up to it.
#[cfg(test)]
pub(crate) const MIN_BLOCK: usize = 16;

/// How many classes there are: 16, 24 and 32 bytes, then four per power of two up to the largest
/// size a `Layout` allows (`isize::MAX`): 107 on `wasm32`.
pub(crate) const CLASSES: usize = 4 * usize::BITS as usize - 21;

/// The class of an allocation of `size` bytes and its block size: 16, 24 or 32 bytes up to 32, then
/// for `2^k < size ≤ 2^(k+1)` the smallest of `2^k + i·2^(k-2)` (`i` = 1 to 4) that holds `size`.
/// A block is at most 25% larger than asked (past 32 bytes), and always a multiple of 8, so a
/// block split off the front of a bigger one leaves an 8-aligned rest. `size` is at most
/// `isize::MAX` (a `Layout`'s limit).
#[inline]
pub(crate) fn class_of(size: usize) -> (usize, usize) {
    match size {
        0..=16 => (0, 16),
        17..=24 => (1, 24),
        25..=32 => (2, 32),
        _ => {
            let k = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize;
            let step = 1usize << (k - 2);
            let i = (size - (1usize << k)).div_ceil(step);
            (3 + (k - 5) * 4 + (i - 1), (1usize << k) + i * step)
        }
    }
}

/// The block size of class `class` (below [`CLASSES`]).
#[inline]
pub(crate) fn class_size(class: usize) -> usize {
    match class {
        0 => 16,
        1 => 24,
        2 => 32,
        _ => {
            let (k, i) = (5 + (class - 3) / 4, (class - 3) % 4 + 1);
            (1usize << k) + i * (1usize << (k - 2))
        }
    }
}

/// The largest class whose blocks fit in `bytes`, if any: where the rest of a split block goes.
#[inline]
pub(crate) fn class_within(bytes: usize) -> Option<(usize, usize)> {
    let block = match bytes {
        0..16 => return None,
        16..24 => 16,
        24..32 => 24,
        _ => {
            let k = (usize::BITS - 1 - bytes.leading_zeros()) as usize;
            let step = 1usize << (k - 2);
            (1usize << k) + (bytes - (1usize << k)) / step * step
        }
    };
    Some(class_of(block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_hold_their_sizes_within_a_quarter() {
        let mut previous = (0, MIN_BLOCK);
        for size in 1..=70_000usize {
            let (class, block) = class_of(size);
            assert!(block >= size, "{size} fits its block {block}");
            assert!(class < CLASSES);
            assert_eq!(block % 8, 0, "{size} → {block}");
            if size > 32 {
                assert!(block * 4 <= size * 5 + 4 * 8, "{size} → {block} wastes at most a quarter");
            }
            // Classes are ordered, one class is one block size, and a block size is its own class.
            assert!(class >= previous.0);
            if class == previous.0 {
                assert_eq!(block, previous.1, "class {class}");
            } else {
                assert_eq!(class, previous.0 + 1, "no class is skipped at {size}");
            }
            assert_eq!(class_of(block), (class, block));
            assert_eq!(class_size(class), block);
            previous = (class, block);
        }
        assert_eq!(class_of(16), (0, 16));
        assert_eq!(class_of(17), (1, 24));
        assert_eq!(class_of(32), (2, 32));
        assert_eq!(class_of(33), (3, 40));
        assert_eq!(class_of(100), (9, 112));
        assert_eq!(class_of(1 << 20), (3 + 14 * 4 + 3, 1 << 20));
    }

    #[test]
    fn the_rest_of_a_split_goes_to_the_largest_class_it_holds() {
        assert_eq!(class_within(15), None);
        for bytes in 16..=70_000usize {
            let (class, block) = class_within(bytes).expect("a class");
            assert!(block <= bytes, "{bytes} holds {block}");
            // The next class up would not fit.
            let (next_class, next_block) = class_of(block + 1);
            assert_eq!(next_class, class + 1);
            assert!(next_block > bytes, "{bytes}: class {next_class} ({next_block}) would fit too");
        }
    }

    #[test]
    fn the_largest_layout_has_a_class() {
        let (class, block) = class_of(isize::MAX as usize);
        assert_eq!(class, CLASSES - 1);
        assert_eq!(block, 1usize << (usize::BITS - 1));
    }
}
