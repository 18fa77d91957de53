//! The process's allocator: mimalloc, asked through its plain entry points
//! whenever the layout allows.
//!
//! The `mimalloc` crate hands every allocation to `mi_malloc_aligned`. Its
//! fast path only serves a block that happens to be aligned from a page
//! whose free list is not empty; otherwise (every time a page's free list
//! runs dry, which with a server's churn of small blocks is often) it
//! takes the generic aligned path, which over-allocates and adjusts. An
//! alignment of at most 16 that is no larger than the size is what every
//! mimalloc block already has, so `mi_malloc` serves it, and refills the
//! free list on its cheap path.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment `mi_malloc` gives every block of at least that size: two
/// machine words (mimalloc rounds its small size classes to them).
const PLAIN_ALIGN: usize = 2 * std::mem::size_of::<usize>();

/// mimalloc as the global allocator (see the module's docs).
pub struct Mimalloc;

/// Whether `layout` can be served without asking for an alignment.
fn plain(layout: &Layout) -> bool {
    layout.align() <= PLAIN_ALIGN && layout.align() <= layout.size()
}

// SAFETY: each method forwards to the mimalloc function made for it, with
// the layout's alignment whenever `mi_malloc`'s own would not do; every
// block comes from mimalloc, whose `mi_free` and resizes take blocks from
// either entry point.
unsafe impl GlobalAlloc for Mimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let resized = Layout::from_size_align_unchecked(new_size, layout.align());
        if plain(&layout) && plain(&resized) {
            mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block honours its layout's alignment, through an allocation,
    /// a zeroed one and resizes up and down that keep its bytes, across
    /// mimalloc's small size classes and past them.
    #[test]
    fn blocks_are_aligned_as_their_layouts_ask() {
        let sizes = (1..=160).chain([255, 256, 1000, 4096, 70_000]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                // SAFETY: non-zero sizes; each block is written within its
                // size and freed once, with the layout it was made with.
                unsafe {
                    let block = Mimalloc.alloc(layout);
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "size {size}, align {align}");
                    block.write_bytes(0xA5, size);
                    let grown = Mimalloc.realloc(block, layout, size * 3);
                    assert_eq!(grown as usize % align, 0, "grown {size}, align {align}");
                    assert!((0..size).all(|at| *grown.add(at) == 0xA5));
                    // Shrunk below its alignment too, where `mi_malloc`'s
                    // own would not do.
                    let kept = size.div_ceil(4);
                    let grown_layout = Layout::from_size_align_unchecked(size * 3, align);
                    let shrunk = Mimalloc.realloc(grown, grown_layout, kept);
                    assert_eq!(shrunk as usize % align, 0, "shrunk {size}, align {align}");
                    assert!((0..kept).all(|at| *shrunk.add(at) == 0xA5));
                    Mimalloc.dealloc(shrunk, Layout::from_size_align_unchecked(kept, align));

                    let zeroed = Mimalloc.alloc_zeroed(layout);
                    assert_eq!(zeroed as usize % align, 0, "zeroed {size}, align {align}");
                    assert!((0..size).all(|at| *zeroed.add(at) == 0));
                    Mimalloc.dealloc(zeroed, layout);
                }
            }
        }
    }
}
