//! Software prefetch: a hint to bring a cache line in before a dependent load needs it.

/// Asks the CPU to load the cache line holding `p` into all cache levels (x86 `prefetcht0`).
/// A hint only: it never faults, whatever `p` points at, and is a no-op on other architectures.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
