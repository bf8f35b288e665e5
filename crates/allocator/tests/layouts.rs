//! The allocator keeps every layout's promise: the alignment asked for, the size, zeroed memory where asked,
//! and contents across a reallocation, for alignments that take the plain path and those that do not.

use std::alloc::{GlobalAlloc, Layout};

use allocator::MiMalloc;

const SIZES: [usize; 14] = [1, 3, 7, 8, 9, 15, 16, 17, 24, 40, 100, 1000, 70_000, 5 << 20];
const ALIGNS: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 4096];

fn fill(ptr: *mut u8, len: usize, seed: u8) {
    for i in 0..len {
        // SAFETY: `ptr` holds at least `len` bytes.
        unsafe { ptr.add(i).write(seed.wrapping_add(i as u8)) };
    }
}

fn holds(ptr: *const u8, len: usize, seed: u8) -> bool {
    // SAFETY: `ptr` holds at least `len` initialised bytes.
    (0..len).all(|i| unsafe { ptr.add(i).read() } == seed.wrapping_add(i as u8))
}

#[test]
fn every_block_has_the_alignment_and_size_its_layout_asks_for() {
    let a = MiMalloc;
    for &align in &ALIGNS {
        for &size in &SIZES {
            let layout = Layout::from_size_align(size, align).unwrap();
            // Several at once, so that they do not all come from the same freed slot.
            let blocks: Vec<*mut u8> = (0..8)
                .map(|n| {
                    // SAFETY: a layout of non-zero size.
                    let p = unsafe { a.alloc(layout) };
                    assert!(!p.is_null(), "{layout:?}");
                    assert_eq!(p as usize % align, 0, "{layout:?} at {p:p}");
                    fill(p, size, n);
                    p
                })
                .collect();
            for (n, &p) in blocks.iter().enumerate() {
                assert!(holds(p, size, n as u8), "{layout:?}: blocks overlap");
                // SAFETY: allocated above with `layout`.
                unsafe { a.dealloc(p, layout) };
            }
        }
    }
}

#[test]
fn zeroed_blocks_are_zero_and_aligned() {
    let a = MiMalloc;
    for &align in &ALIGNS {
        for &size in &SIZES {
            let layout = Layout::from_size_align(size, align).unwrap();
            // Dirty a block of the same layout first, so that a reused one would show.
            // SAFETY: a layout of non-zero size; freed right after.
            unsafe {
                let dirty = a.alloc(layout);
                fill(dirty, size, 0xAB);
                a.dealloc(dirty, layout);
            }
            // SAFETY: a layout of non-zero size.
            let p = unsafe { a.alloc_zeroed(layout) };
            assert_eq!(p as usize % align, 0, "{layout:?}");
            // SAFETY: `p` holds `size` bytes.
            assert!((0..size).all(|i| unsafe { p.add(i).read() } == 0), "{layout:?} is not zeroed");
            // SAFETY: allocated above with `layout`.
            unsafe { a.dealloc(p, layout) };
        }
    }
}

#[test]
fn a_reallocated_block_keeps_its_contents_and_alignment() {
    let a = MiMalloc;
    for &align in &ALIGNS {
        for &(from, to) in &[(8, 100), (100, 8), (24, 70_000), (70_000, 5 << 20), (5 << 20, 17)] {
            let layout = Layout::from_size_align(from, align).unwrap();
            // SAFETY: a layout of non-zero size.
            let p = unsafe { a.alloc(layout) };
            fill(p, from, 7);
            // SAFETY: `p` came from `a` with `layout`; `to` is non-zero.
            let q = unsafe { a.realloc(p, layout, to) };
            assert!(!q.is_null());
            assert_eq!(q as usize % align, 0, "{from} → {to} bytes at alignment {align}");
            assert!(holds(q, from.min(to), 7), "{from} → {to} bytes at alignment {align} lost its contents");
            // SAFETY: `q` is the reallocated block, now of `to` bytes.
            unsafe { a.dealloc(q, Layout::from_size_align(to, align).unwrap()) };
        }
    }
}
