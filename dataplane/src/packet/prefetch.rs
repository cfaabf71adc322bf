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

/// Prefetches ([`prefetch`]) every cache line that holds a byte of `bytes`: a frame whose
/// payload a later stage reads whole (a contribution's checksum or ICRC pass and its fold),
/// so that the lines arrive while earlier packets are processed instead of one miss after
/// another in that pass. One `prefetcht0` per 64-byte line (17 for a 1 KiB contribution).
#[inline(always)]
pub fn prefetch_all(bytes: &[u8]) {
    const LINE: usize = 64;
    let start = bytes.as_ptr() as usize & !(LINE - 1);
    let end = bytes.as_ptr() as usize + bytes.len();
    let mut line = start;
    while line < end {
        prefetch(line as *const u8);
        line += LINE;
    }
}
