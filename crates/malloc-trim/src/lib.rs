//! Gives the C allocator's free memory back to the system: glibc's `malloc_trim(0)`.
//!
//! glibc returns freed memory to the system only from the top of its heap, past the trim
//! threshold; free blocks below a live one stay resident. After the operator renders and
//! applies a release, most of its anonymous memory is such holes (docs/performance.md:
//! 21 MB taken from the system at Ready, 7.5 MB of it in use). `malloc_trim(0)` walks every
//! arena and gives back each whole free page in them.
//!
//! The workspace forbids unsafe code; this crate holds the one call it cannot make without it.
//! The call takes no pointer and glibc locks each arena while it walks it, so it is sound to
//! make from any thread at any time: its only cost is the walk, which is why the operator
//! calls it once a burst of reconciles has settled, never on a hot path.

/// Asks glibc to return the free pages of all its arenas to the system. Returns whether it
/// gave any back. Elsewhere than on glibc it does nothing and returns false: other C
/// libraries have no such call, and musl's allocator returns freed pages itself.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointer and has no precondition; glibc serializes it with
    // the other allocator calls (MT-Safe in its manual).
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Asks the C allocator to return free pages: nothing to do off glibc (see the glibc version).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    /// Freed blocks below a live one are holes the trim threshold cannot return; trim gives
    /// them back (glibc answers 1). Off glibc the call answers false.
    #[test]
    fn trim_returns_freed_holes() {
        let mut blocks: Vec<Vec<u8>> = (0..256).map(|i| vec![i as u8; 64 * 1024]).collect();
        let keep = blocks.pop();
        drop(blocks);
        let released = super::trim();
        assert_eq!(released, cfg!(all(target_os = "linux", target_env = "gnu")));
        assert!(keep.is_some_and(|k| k.len() == 64 * 1024));
    }
}
