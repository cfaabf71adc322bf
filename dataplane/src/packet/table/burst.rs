//! The pipeline over a burst, table by table, as DPDK's l3fwd looks a burst up: for each table
//! in order, what every packet's lookup reads first is prefetched, then every packet is looked
//! up (prefetching the entry it hits and the counter it counts in), then each packet's actions
//! run, in packet order. The cache misses of a table's lookups overlap across the burst instead
//! of stalling each packet in turn, and every table is reached this way, not only the first.
//!
//! A packet goes through the same tables, entries and actions as [`Pipeline::apply`] would
//! take it: its key depends only on its own parse and metadata, which only its own actions
//! change, and `goto` only goes forward (checked when actions are parsed), so applying the
//! tables in index order across the burst applies each packet's tables in its own order. What
//! is shared between packets is counted (table hits, `count`), and sums do not depend on the
//! order. Meters are not: a meter's colour depends on the packets before it, so a pipeline
//! with meters is applied packet after packet ([`Pipeline::stages_bursts`]).

use super::{KeyPath, Pipeline, PipelineState};
use crate::action::Egress;
use crate::buf::PacketBuf;
use crate::meta::Meta;
use crate::parse::Parsed;
use crate::prefetch::prefetch;

/// Bytes of a table's lookup memory above which [`Pipeline::stages_bursts`] stages bursts:
/// the bound under which an exact table's slots are not prefetched either
/// ([`super::exact::PREFETCH_ABOVE`], 256 KiB, more than the L2 cache of most x86 cores keeps
/// beside everything else a worker touches).
pub const STAGE_ABOVE: usize = super::exact::PREFETCH_ABOVE;

/// Most packets [`Pipeline::apply_burst`] takes at once (the data path's `MAX_BURST`).
pub const MAX_LANES: usize = 512;

/// One packet's way through [`Pipeline::apply_burst`]: where it is, what it has chosen.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lane {
    /// The next table to apply (an index); at or past the last table, the packet is done.
    next: usize,
    /// The lookup of table `next` (set by the burst's lookup stage).
    hit: Option<usize>,
    /// The key of table `next` as a word, for a table on a word path.
    word: u64,
    /// The frame's length for the counters (bytes; only the VLAN actions change it).
    len: usize,
    /// The egress its actions chose: final once the packet is done.
    pub egress: Egress,
    /// Its metadata (ingress port, arrival time, colour, class), as actions leave it.
    pub meta: Meta,
}

impl Lane {
    /// A packet of `len` bytes that enters the pipeline with `meta`.
    #[inline(always)]
    pub fn enter(meta: Meta, len: usize) -> Lane {
        Lane { next: 0, hit: None, word: 0, len, egress: Egress::Unset, meta }
    }

    /// A slot of the burst that takes no part (no packet, or one that goes another way).
    #[inline(always)]
    pub fn idle() -> Lane {
        Lane { next: usize::MAX, ..Lane::default() }
    }
}

impl Pipeline {
    /// True when bursts may go through [`Pipeline::apply_burst`]: the pipeline has no meters
    /// (a meter's colours depend on the order of its packets, which the burst's table-by-table
    /// order changes across tables).
    #[inline(always)]
    pub fn can_stage_bursts(&self) -> bool {
        self.meters.is_empty()
    }

    /// True when bursts should go through [`Pipeline::apply_burst`]: they can
    /// ([`Pipeline::can_stage_bursts`]) and a table after the first (whose lookups the data
    /// path batches anyway) reads more than [`STAGE_ABOVE`] bytes of lookup memory. With
    /// smaller tables the lookups hit L1 or L2 and the stages' extra loops cost about what the
    /// overlapped misses save (`examples/big_table.rs`, staged against per-packet: 0.98x with
    /// a 32 KiB exact table, 1.08x at 256 KiB, 1.18x at 512 KiB, 2.06x at 4 MiB, 1.94x at
    /// 64 MiB; the bench pipeline's small tables forced staged ran about 5% slower).
    #[inline]
    pub fn stages_bursts(&self) -> bool {
        self.can_stage_bursts() && self.tables.iter().skip(1).any(|t| t.memory_bytes() > STAGE_ABOVE)
    }

    /// Runs a burst through the tables, table by table (see the module docs): the packets of
    /// the lanes made with [`Lane::enter`] (`bufs[i]`, parsed as `parsed[i]`, which rewrites
    /// keep up to date); [`Lane::idle`] lanes and `None` buffers are left alone. Counts as
    /// [`Pipeline::apply`] does; each lane's `egress` and `meta` are then what `apply` would
    /// have returned and left. The three slices are as long as each other, at most
    /// [`MAX_LANES`] (lanes past it are left alone). For a pipeline whose
    /// [`Pipeline::can_stage_bursts`] is true. Never allocates.
    pub fn apply_burst<B: PacketBuf>(
        &self,
        counts: &mut PipelineState,
        bufs: &mut [Option<B>],
        parsed: &mut [Parsed],
        lanes: &mut [Lane],
    ) {
        debug_assert!(self.can_stage_bursts());
        let n = lanes.len().min(parsed.len()).min(bufs.len()).min(MAX_LANES);
        let (bufs, parsed, lanes) = (&mut bufs[..n], &mut parsed[..n], &mut lanes[..n]);
        // The lanes at each table, by index.
        let mut at = [0u16; MAX_LANES];
        for (t, table) in self.tables.iter().enumerate() {
            let base = counts.base[t];
            let mut k = 0;
            for (i, l) in lanes.iter().enumerate() {
                at[k] = i as u16;
                k += usize::from(l.next == t);
            }
            let here = &at[..k];
            if here.is_empty() {
                continue;
            }
            // Prefetch what each lookup reads first, then look up, prefetching what the
            // actions read (the entry, its counter).
            match table.path {
                KeyPath::ExactWord(f) | KeyPath::LpmWord(f) => {
                    for &i in here {
                        let l = &mut lanes[usize::from(i)];
                        l.word = f.word(&parsed[usize::from(i)], &l.meta);
                        table.prefetch_word(l.word);
                    }
                    for &i in here {
                        let l = &mut lanes[usize::from(i)];
                        l.hit = table.lookup_word(l.word);
                    }
                }
                KeyPath::Bytes => {
                    for &i in here {
                        table.prefetch(&parsed[usize::from(i)], &lanes[usize::from(i)].meta);
                    }
                    for &i in here {
                        let l = &mut lanes[usize::from(i)];
                        l.hit = table.lookup(&parsed[usize::from(i)], &l.meta);
                    }
                }
            }
            for &i in here {
                let hit = lanes[usize::from(i)].hit;
                if let Some(e) = hit.and_then(|e| table.entries.get(e)) {
                    prefetch(e);
                }
                if let Some(c) = counts.hits.get(base + hit.unwrap_or(table.len())) {
                    prefetch(c);
                }
            }
            // The actions, in packet order.
            for &i in here {
                let i = usize::from(i);
                let (l, p) = (&mut lanes[i], &mut parsed[i]);
                let Some(buf) = bufs[i].as_mut() else { continue };
                l.next = self.run_table::<false, B>(
                    t,
                    table,
                    base,
                    l.hit,
                    counts,
                    buf,
                    p,
                    &mut l.meta,
                    &mut l.len,
                    &mut l.egress,
                );
                debug_assert!(l.next > t, "goto goes forward");
            }
        }
    }
}
