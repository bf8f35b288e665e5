//! The global allocator of Krait's binaries: mimalloc, asked for a plain block wherever mimalloc's own
//! alignment is enough.
//!
//! The `mimalloc` crate's allocator asks for an aligned block (`mi_malloc_aligned`) on every allocation,
//! whatever the alignment; that path checks the free block's alignment before taking it, about twice the
//! instructions of `mi_malloc`. Nearly every Rust allocation asks for an alignment of 8 or less (bytes,
//! strings, vectors of integers and pointers), which every mimalloc block has: its size classes are whole
//! machine words (on 64-bit targets two words up to 64 bytes, `MI_ALIGN2W` in mimalloc's `page-queue.c`),
//! and its pages start aligned. So those go to `mi_malloc`, and only larger alignments to the aligned path.
//! Measured in `docs/proxy-cost.md`, "stop 65".

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc, mi_zalloc_aligned,
};

/// The alignment every mimalloc block has: one machine word.
const BLOCK_ALIGN: usize = core::mem::size_of::<usize>();

/// mimalloc as Rust's global allocator (see the crate docs).
pub struct MiMalloc;

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes blocks of either path); a
// layout whose alignment is at most `BLOCK_ALIGN` gets a plain block, which mimalloc aligns to a machine
// word at least, and any other gets an aligned one.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; mimalloc returns null on failure, as `GlobalAlloc` expects.
        unsafe {
            if layout.align() <= BLOCK_ALIGN {
                mi_malloc(layout.size()) as *mut u8
            } else {
                mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if layout.align() <= BLOCK_ALIGN {
                mi_zalloc(layout.size()) as *mut u8
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`; the block it moves to keeps the alignment.
        unsafe {
            if layout.align() <= BLOCK_ALIGN {
                mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            } else {
                mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}
