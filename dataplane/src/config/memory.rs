//! What the appliance's memory needs come to, against the EAL memory `-m` (or `--socket-mem`)
//! reserves: checked when the configuration loads, so that a pool or a memory limit that cannot
//! fit is refused with the keys to change instead of failing at start-up (or never).
//!
//! The EAL memory holds the mbuf pool (`rte_pktmbuf_pool_create`), the hand-off rings
//! (`rte_ring_create`), and EAL's and the ports' own allocations; the collectives' slot memory
//! (`dataplane.memory_limit_mb`) is budgeted from what is left. The sizes below follow DPDK
//! 22.11's `rte_mempool_calc_obj_size`, `rte_mempool_op_calc_mem_size_helper` and
//! `rte_ring_get_memsize`, and were measured on this machine with `rte_malloc_get_socket_stats`
//! and `rte_memzone_dump` (`--no-huge -m 512`, Debian's DPDK 22.11: `RTE_MAX_LCORE` 128).

/// Bytes in a MiB (EAL's `-m` unit).
pub const MIB: u64 = 1 << 20;
/// The most MiB whose bytes a `u64` counts (2^44 - 1, just under 16 EiB): the bound of `-m`,
/// `--socket-mem` and `dataplane.memory_limit_mb`.
pub const MAX_MIB: u64 = u64::MAX / MIB;
/// `struct rte_mbuf` (bytes; two cache lines).
pub const MBUF_STRUCT: u64 = 128;
/// A cache line (bytes): DPDK's `RTE_MEMPOOL_ALIGN` on x86.
const CACHE_LINE: u64 = 64;
/// `struct rte_mempool_objhdr` rounded up to a cache line (bytes), before every object.
const OBJ_HEADER: u64 = 64;
/// Memory channels `rte_mempool_calc_obj_size` spreads objects over when EAL is given no `-n`
/// (4), times ranks (1): an object's size in cache lines is made coprime with it.
const CHANNELS: u64 = 4;
/// The mempool's own memzone without caches: `struct rte_mempool` and the pktmbuf pool's
/// private area (bytes, measured: 0x100).
const MEMPOOL_HEADER: u64 = 256;
/// One `struct rte_mempool_cache` (bytes: 64 + 2 x 512 object pointers), one per possible lcore
/// (`RTE_MAX_LCORE` = 128) in the mempool's memzone when the pool has a cache (measured: the
/// memzone is 0x102100 bytes with a cache, 0x100 without).
const MEMPOOL_CACHE: u64 = 8256;
/// `RTE_MAX_LCORE` of Debian's DPDK 22.11.
const MAX_LCORE: u64 = 128;
/// `struct rte_ring` (bytes) before a ring's slots.
const RING_HEADER: u64 = 384;
/// Bytes the EAL heap spends around each memzone (malloc element header and trailer; measured:
/// a default pool's three memzones took 960 bytes more than their lengths).
const MALLOC_OVERHEAD: u64 = 320;
/// What EAL, one port and the mbuf dynamic field take of the EAL memory besides the pool
/// (bytes): measured 511,488 with a net_pcap port (the most mbufs that fit in `-m 60` and
/// `-m 50`, 4 KiB each), of which EAL itself after `rte_eal_init` 155,904.
pub const EAL_OVERHEAD: u64 = 512 << 10;
/// What each further port takes (bytes): measured 151,552 per port (4 ports and 2 workers
/// against 1 port and 1 worker).
pub const PORT_OVERHEAD: u64 = 160 << 10;
/// The most slots a hand-off ring gets (`app.rs` sizes one per worker when several share
/// collectives, from what the mempool leaves, up to this): what the memory check charges per ring.
pub const HAND_OFF_RING_SLOTS: u32 = 4096;

/// Bytes one mbuf takes in the pool, as `rte_mempool_calc_obj_size` computes it for
/// `rte_pktmbuf_pool_create` (no private area): the object header (64), `struct rte_mbuf` (128)
/// plus `data_room` rounded up to a cache line, the whole padded until its number of cache lines
/// is coprime with the memory channels (4). 2368 for the default 2176-byte data room, 9536 for
/// 9344.
pub fn mbuf_object_size(data_room: u16) -> u64 {
    let elt = (MBUF_STRUCT + data_room as u64).next_multiple_of(CACHE_LINE);
    let mut lines = (OBJ_HEADER + elt) / CACHE_LINE;
    while gcd(lines, CHANNELS) != 1 {
        lines += 1;
    }
    lines * CACHE_LINE
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Bytes of EAL memory a pool of `mbufs` mbufs of `data_room` bytes with a per-lcore `cache`
/// takes, on pages of `page` bytes (4096 with `--no-huge`; objects never cross a page then, so a
/// 2368-byte mbuf takes a whole 4 KiB page): its objects (`rte_mempool_op_calc_mem_size_helper`),
/// the ring that holds the free ones (the next power of two above `mbufs` slots), the mempool's
/// header with its per-lcore cache structures, and the heap's overhead for the three memzones.
/// The default pool (8191 x 2176, cache 256) measured 34,674,880 bytes here.
///
/// Counted in saturating arithmetic (at most `u64::MAX`, more than any `-m` allows): the
/// inputs' types bound the pool near 2^48 bytes (2^32 mbufs of at most 64 KiB), but a count
/// that a page size or a later change could push beyond 64 bits must stay above the budget it
/// is checked against, never wrap below it.
pub fn mempool_bytes(mbufs: u32, cache: u32, data_room: u16, page: u64) -> u64 {
    let n = mbufs as u64;
    let page = page.max(1);
    let obj = mbuf_object_size(data_room);
    let objects = if n == 0 {
        0
    } else if obj > page {
        round_up(obj, page).saturating_mul(n)
    } else {
        let per_page = page / obj;
        let in_last = (n - 1) % per_page + 1;
        ((n - in_last) / per_page).saturating_mul(page).saturating_add(in_last * obj).saturating_add(obj - 1)
    };
    let header = MEMPOOL_HEADER + if cache > 0 { MAX_LCORE * MEMPOOL_CACHE } else { 0 };
    saturating_sum([header, ring_memzone(n + 1), round_up(objects, CACHE_LINE), 3 * MALLOC_OVERHEAD])
}

/// `x` rounded up to a multiple of `to` (at least 1), saturating at the largest multiple below
/// `u64::MAX` instead of overflowing.
fn round_up(x: u64, to: u64) -> u64 {
    let to = to.max(1);
    x.checked_next_multiple_of(to).unwrap_or(u64::MAX / to * to)
}

/// The largest number of mbufs (at most `mbufs`) whose pool fits in `room` bytes
/// ([`mempool_bytes`] grows with the count).
pub fn mbufs_that_fit(mbufs: u32, cache: u32, data_room: u16, page: u64, room: u64) -> u32 {
    let (mut lo, mut hi) = (0u32, mbufs);
    while lo < hi {
        let mid = hi - (hi - lo) / 2;
        if mempool_bytes(mid, cache, data_room, page) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// `rte_ring_get_memsize` for at least `slots` slots: the header and 8 bytes per slot of the
/// next power of two (saturating at `u64::MAX` for a count beyond 2^60 slots, which no ring has).
fn ring_memzone(slots: u64) -> u64 {
    slots.checked_next_power_of_two().map_or(u64::MAX, |p| p.saturating_mul(8)).saturating_add(RING_HEADER)
}

/// Bytes of a ring of at least `slots` slots (`rte_ring_get_memsize` of the next power of two)
/// and its heap overhead: 33,472 for a 4096-slot hand-off ring.
pub fn ring_bytes(slots: u64) -> u64 {
    ring_memzone(slots) + MALLOC_OVERHEAD
}

/// The EAL memory the `[eal]` arguments reserve (MiB): `-m N` (`-mN`, `-m=N`), or the sum of
/// `--socket-mem a,b,...` (`--socket-mem=`). `None` when they set none (EAL then takes the
/// hugepages it finds as it needs them). `Err` names an argument whose value is not a number,
/// or more than [`MAX_MIB`] in all.
pub fn eal_memory_mb(args: &[String]) -> Result<Option<u64>, String> {
    let mut it = args.iter();
    let mut found = None;
    while let Some(a) = it.next() {
        let (value, which) = if a == "-m" || a == "--socket-mem" {
            (it.next().map(String::as_str), a.as_str())
        } else if let Some(v) = a.strip_prefix("--socket-mem=") {
            (Some(v), "--socket-mem")
        } else if let Some(v) = a.strip_prefix("-m").filter(|_| !a.starts_with("--")) {
            (Some(v.strip_prefix('=').unwrap_or(v)), "-m")
        } else {
            continue;
        };
        let v = value.ok_or_else(|| format!("{which} without a value"))?;
        let mut mb = 0u64;
        for x in v.split(',') {
            let n = x
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{which} {v:?}: expected MiB as an integer (or integers separated by ',')"))?;
            mb = mb
                .checked_add(n)
                .filter(|m| *m <= MAX_MIB)
                .ok_or_else(|| format!("{which} {v:?}: expected at most {MAX_MIB} MiB in all (16 EiB)"))?;
        }
        found = Some(mb);
    }
    Ok(found)
}

/// True when the arguments run EAL without hugepages (`--no-huge`): 4 KiB pages.
pub fn no_huge(args: &[String]) -> bool {
    args.iter().any(|a| a == "--no-huge")
}

/// The page size pools are laid out on: 4096 with `--no-huge`, else a 2 MiB hugepage (x86's
/// default hugepage size).
pub fn page_size(args: &[String]) -> u64 {
    if no_huge(args) {
        4096
    } else {
        2 * MIB
    }
}

/// Bytes of EAL memory that EAL, `ports` ports and `rings` rings (hand-off rings, and the
/// rings to shaped ports' scheduler owners, each charged as a hand-off ring) take besides the
/// mbuf pool. Saturating: the counts come from the lengths of the file's lists.
pub fn fixed_overhead(ports: usize, rings: usize) -> u64 {
    EAL_OVERHEAD
        .saturating_add(PORT_OVERHEAD.saturating_mul(ports.saturating_sub(1) as u64))
        .saturating_add((rings as u64).saturating_mul(ring_bytes(HAND_OFF_RING_SLOTS as u64)))
}

/// The shortest frame an egress scheduler's class is sized for (bytes, without FCS): an
/// Ethernet header, the shortest frame the parser passes. A class of `capacity_bytes` can hold
/// `capacity_bytes / 14 + 1` such frames, one mbuf each.
pub const QUEUE_MIN_FRAME: u64 = 14;

/// Mbufs one class of `capacity_bytes` (frames without FCS) can hold at once: one per
/// [`QUEUE_MIN_FRAME`] bytes plus the frame that may overrun the last, at most `bound` (the
/// pool), at least 1. 18,725 for the default 262,144 bytes, unbounded.
pub fn class_mbufs(capacity_bytes: u64, bound: u64) -> u64 {
    (capacity_bytes / QUEUE_MIN_FRAME + 1).min(bound).max(1)
}

/// The fewest mbufs a class of `capacity_bytes` is cut to when the pool is short: as many
/// frames of `max_frame` bytes as fill its byte capacity (so that with full-size frames the
/// byte capacity, not the mbufs, still bounds the queue), at least 1.
pub fn class_mbufs_floor(capacity_bytes: u64, max_frame: u32) -> u64 {
    capacity_bytes.div_ceil(u64::from(max_frame.max(1))).max(1)
}

/// The mbufs a class of `capacity_bytes` on a shaped port whose frames reach `max_frame` bytes
/// may hold beyond one per frame: 0 when every frame fits one mbuf (`mbuf_frame` bytes: the data
/// room less the headroom), else `capacity_bytes / mbuf_frame`. A chain of `L` bytes takes
/// `ceil(L / mbuf_frame)` mbufs, at most one more than `(L - 1) / mbuf_frame`, and the class
/// holds at most `capacity_bytes` of frames, so its chains take at most that many extra.
pub fn class_chain_mbufs(max_frame: u32, capacity_bytes: u64, mbuf_frame: u32) -> u64 {
    if max_frame > mbuf_frame {
        capacity_bytes / u64::from(mbuf_frame.max(1))
    } else {
        0
    }
}

/// Fits the egress schedulers' classes into the `spare` mbufs the pool leaves once the workers,
/// the ports and the rings have theirs, so that full queues never take the mbufs rx needs.
/// `demand[i]` is class `i`'s packet capacity ([`class_mbufs`]), `floor[i]` the least it may be
/// cut to ([`class_mbufs_floor`], at most `demand[i]`). When the demands fit, they are kept;
/// otherwise each class keeps its floor plus a share of what the floors leave, in proportion to
/// what it asked beyond its floor (rounded down, so the sum never exceeds `spare`).
///
/// # Errors
/// The mbufs missing (`Σ floor − spare`) when even the floors do not fit.
pub fn fit_class_mbufs(demand: &[u64], floor: &[u64], spare: u64) -> Result<Vec<u64>, u64> {
    let floor: Vec<u64> = demand.iter().zip(floor).map(|(d, f)| (*f).min(*d)).collect();
    // Saturating sums: many classes of large capacities stay more than the pool, never wrap.
    let want = saturating_sum(demand.iter().copied());
    if want <= spare {
        return Ok(demand.to_vec());
    }
    let base = saturating_sum(floor.iter().copied());
    if base > spare {
        return Err(base - spare);
    }
    let (extra, room) = ((want - base) as u128, (spare - base) as u128);
    Ok(demand.iter().zip(&floor).map(|(d, f)| f + ((d - f) as u128 * room / extra) as u64).collect())
}

/// The sum of `counts` (bytes, mbufs, slots: any count made of a configuration's sizes),
/// saturating at `u64::MAX` instead of wrapping around: a sum beyond 64 bits stays beyond every
/// budget it is checked against.
pub fn saturating_sum(counts: impl IntoIterator<Item = u64>) -> u64 {
    counts.into_iter().fold(0u64, u64::saturating_add)
}

/// `bytes` in MiB with two decimals, for messages.
pub fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / MIB as f64)
}
