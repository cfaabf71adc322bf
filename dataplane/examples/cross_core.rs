//! The floor under a contribution's cost when another core wrote it: what reading a 1 KiB
//! payload written by the generator's core, folding it and writing the result back costs the
//! core that does it, beside the cost of passing the same buffers on untouched (what
//! `dpdk-testpmd` io does), in one run.
//!
//! ```text
//! cargo run --release -p dataplane --no-default-features --example cross_core [REPS]
//! cargo run --release -p dataplane --no-default-features --example cross_core probe
//! ```
//!
//! Two threads pinned to CPUs 0 and 1 share a pool of buffers (16,383 of 2,176 bytes: the
//! two-process benchmark's mempool) and two single-producer rings of buffer indexes, as two
//! processes share a zero-copy memif region. The producer (CPU 0) writes a frame of
//! `FRAME` bytes (62 bytes of headers and 256 f32 lanes, the goal row's contribution) into
//! each free buffer from a template, as a generator builds one, and sends them in bursts of
//! 32; whatever comes back it reads the way each row says, then reuses the buffer. The
//! consumer (CPU 1) waits for a whole burst, then handles it, timed by the TSC from its
//! first frame to its last (the waits excluded, as testpmd's `--record-core-cycles` counts
//! only bursts):
//!
//! - `echo`: hands the burst back untouched (testpmd io);
//! - `checksum`: prefetches every line of the burst's frames, then computes each frame's
//!   Internet checksum (the appliance's first pass over a contribution) and hands it back;
//! - `fold`: the checksum, then the payload folded into a 256-lane f32 accumulator (the
//!   slot; a round of 4 workers' first member loads it) and the accumulator written back into
//!   the frame's payload (the running sum; the round's result in its last frame), which goes
//!   back; the producer reads every frame it gets back (its checksum pass), as a generator
//!   checks results. A contribution so costs one 1 KiB read of a payload written on the other
//!   core and one 1 KiB write into lines the other core reads next: what replicating each
//!   round's result to its 4 members moves between the cores in copy mode;
//! - `checksum, hot` and `fold, hot`: the same work on frames this core wrote itself (in its
//!   cache): the computation alone.
//!
//! Cycles per frame, median of `REPS` (default 7) measurements of 2^20 frames each, rows
//! alternating; `[min-max]`. What moving the lines between the cores costs is a row less its
//! hot twin: `checksum` less `checksum, hot` for reading a contribution, `fold` less `fold,
//! hot` for reading it and writing a result back; no software avoids those. The hot rows are
//! the kernels' own computation. The producer keeps up to 1024 frames in flight (a memif
//! ring's descriptors): when the consumer is the slower side, the frames it reads were written
//! a while before, and some may have left the producer's caches for the shared last level.
//!
//! `probe` measures the `checksum` row alone over 2^16 frames (a few ms) and prints its
//! cycles per frame: `tools/bench/memif.py` records it beside each run, since a guest's two
//! vCPUs may share a last-level cache or not from one run to the next, which changes this
//! cost about 3.5x.

use dataplane::packet::agg::kernels::Kernels;
use dataplane::packet::prefetch::prefetch_all;
use dataplane::packet::wire::checksum;
use dataplane::packet::wire::gradient::{Dtype, Op};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

/// Bytes per buffer (the benchmark's mbuf data room).
const ROOM: usize = 2176;
/// Buffers in the pool.
const POOL: usize = 16383;
/// Frame bytes: Ethernet, IPv4, UDP and gradient headers (62 B) and 256 f32 lanes, the goal
/// row's contribution.
const FRAME: usize = PAYLOAD + 1024;
/// Where the payload starts in a frame.
const PAYLOAD: usize = 62;
/// Frames the producer keeps in flight at most (a memif ring's 1024 descriptors).
const IN_FLIGHT: usize = 1024;
/// Frames per burst.
const BURST: usize = 32;
/// Workers per round in `fold`.
const WORKERS: usize = 4;
/// Frames per measurement.
const FRAMES: usize = 1 << 20;
/// Ring capacity (a power of two, > POOL).
const RING: usize = 1 << 15;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Echo,
    Checksum,
    Fold,
    ChecksumHot,
    FoldHot,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Echo => "echo (untouched, as testpmd io)",
            Mode::Checksum => "checksum (read 1 KiB the other core wrote)",
            Mode::Fold => "fold (checksum, fold, result written for the other core)",
            Mode::ChecksumHot => "checksum, hot (frames in this core's cache)",
            Mode::FoldHot => "fold, hot (frames in this core's cache)",
        }
    }
}

/// The shared buffers, 64-byte aligned as an mbuf's data is (so a 1086-byte frame spans 17
/// lines, as in the appliance): each owned by one side at a time, handed over through a
/// [`Ring`].
struct Pool {
    base: *mut u8,
}

const POOL_LAYOUT: std::alloc::Layout = match std::alloc::Layout::from_size_align(POOL * ROOM, 64) {
    Ok(l) => l,
    Err(_) => panic!("the pool's layout"),
};

// Safety: a buffer is written only by the side holding its index; the rings' release/acquire
// order every hand-over.
unsafe impl Sync for Pool {}
// Safety: the pool owns its memory; `base` points into it for the pool's life.
unsafe impl Send for Pool {}

impl Pool {
    fn new() -> Pool {
        // Safety: the layout's size is not zero.
        let base = unsafe { std::alloc::alloc_zeroed(POOL_LAYOUT) };
        assert!(!base.is_null(), "the pool's {} bytes", POOL * ROOM);
        Pool { base }
    }

    /// Buffer `i` (below `POOL`).
    ///
    /// # Safety
    /// The caller holds index `i` (it took it from a ring or its free list) and makes no other
    /// reference to the same buffer meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn buf(&self, i: u32) -> &mut [u8] {
        assert!((i as usize) < POOL);
        // Safety: in bounds (above); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(i as usize * ROOM), ROOM) }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Safety: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base, POOL_LAYOUT) }
    }
}

/// A single-producer, single-consumer ring of buffer indexes.
struct Ring {
    slots: Vec<AtomicUsize>,
    head: CachePadded,
    tail: CachePadded,
}

#[repr(align(128))]
struct CachePadded(AtomicUsize);

impl Ring {
    fn new() -> Ring {
        Ring {
            slots: (0..RING).map(|_| AtomicUsize::new(0)).collect(),
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
        }
    }
    fn push(&self, xs: &[u32]) {
        let h = self.head.0.load(Ordering::Relaxed);
        for (k, &x) in xs.iter().enumerate() {
            self.slots[(h + k) % RING].store(x as usize, Ordering::Relaxed);
        }
        self.head.0.store(h + xs.len(), Ordering::Release);
    }
    /// Takes up to `out.len()` indexes, only if at least `min` are there.
    fn pop(&self, out: &mut [u32], min: usize) -> usize {
        let t = self.tail.0.load(Ordering::Relaxed);
        let n = (self.head.0.load(Ordering::Acquire) - t).min(out.len());
        if n < min {
            return 0;
        }
        for (k, o) in out[..n].iter_mut().enumerate() {
            *o = self.slots[(t + k) % RING].load(Ordering::Relaxed) as u32;
        }
        self.tail.0.store(t + n, Ordering::Release);
        n
    }
}

fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // Safety: RDTSC has no preconditions.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}

/// One measurement: the consumer's TSC cycles per frame.
fn measure(mode: Mode, frames_wanted: usize, cpus: &[core_affinity::CoreId], kernels: Kernels) -> f64 {
    let pool = Arc::new(Pool::new());
    let (to_consumer, back) = (Arc::new(Ring::new()), Arc::new(Ring::new()));
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(2));
    let template: Vec<u8> = (0..FRAME).map(|i| (i * 7 + 3) as u8).collect();
    let hot = matches!(mode, Mode::ChecksumHot | Mode::FoldHot);
    let producer = {
        let (pool, to_consumer, back, done, start, cpu) =
            (pool.clone(), to_consumer.clone(), back.clone(), done.clone(), start.clone(), cpus[0]);
        let template = template.clone();
        std::thread::spawn(move || {
            assert!(core_affinity::set_for_current(cpu), "cross_core: cannot pin the producer to {cpu:?}");
            let mut free: Vec<u32> = (0..POOL as u32).collect();
            let mut got = [0u32; BURST];
            let mut seq = 0u32;
            let mut sink = 0u64;
            start.wait();
            while !done.load(Ordering::Relaxed) {
                let n = back.pop(&mut got, 1);
                for &i in &got[..n] {
                    if mode == Mode::Fold {
                        // A generator checks each result: one pass over it.
                        // Safety: the producer holds `i` (it came back on `back`).
                        sink += checksum::sum(unsafe { &pool.buf(i)[..FRAME] }) as u64;
                    }
                    free.push(i);
                }
                if hot || free.len() < BURST || POOL - free.len() + BURST > IN_FLIGHT {
                    continue;
                }
                let burst = &free[free.len() - BURST..];
                for &i in burst {
                    // Safety: `i` is on the producer's free list.
                    let b = unsafe { &mut pool.buf(i)[..FRAME] };
                    b.copy_from_slice(&template);
                    b[PAYLOAD - 4..PAYLOAD].copy_from_slice(&seq.to_le_bytes());
                    seq = seq.wrapping_add(1);
                }
                to_consumer.push(burst);
                free.truncate(free.len() - BURST);
            }
            std::hint::black_box(sink);
        })
    };
    assert!(core_affinity::set_for_current(cpus[1]), "cross_core: cannot pin the consumer to {:?}", cpus[1]);
    let mut got = [0u32; BURST];
    let mut acc = vec![0u32; 256];
    let mut hot_frames: Vec<Vec<u8>> = (0..BURST).map(|_| template.clone()).collect();
    let (mut frames, mut cycles, mut sink, mut member) = (0usize, 0u64, 0u64, 0usize);
    start.wait();
    while frames < frames_wanted {
        if hot {
            let t0 = rdtsc();
            for f in hot_frames.iter_mut() {
                sink += checksum::sum(f) as u64;
                if mode == Mode::FoldHot {
                    fold(kernels, &mut acc, f, &mut member);
                }
            }
            cycles += rdtsc() - t0;
            frames += BURST;
            continue;
        }
        if to_consumer.pop(&mut got, BURST) == 0 {
            continue;
        }
        let t0 = rdtsc();
        if mode != Mode::Echo {
            for &i in &got {
                // Safety: the consumer holds the burst's indexes until it pushes them back.
                prefetch_all(unsafe { &pool.buf(i)[..FRAME] });
            }
            for &i in &got {
                // Safety: as above.
                let f = unsafe { &mut pool.buf(i)[..FRAME] };
                sink += checksum::sum(f) as u64;
                if mode == Mode::Fold {
                    fold(kernels, &mut acc, f, &mut member);
                }
            }
        }
        back.push(&got);
        cycles += rdtsc() - t0;
        frames += BURST;
    }
    done.store(true, Ordering::Relaxed);
    producer.join().expect("the producer thread");
    std::hint::black_box((sink, &hot_frames));
    cycles as f64 / frames as f64
}

/// Folds a frame's payload into the slot (a round's first member loads it) and writes the
/// slot's state back into the payload: a round of `WORKERS` contributions writes `WORKERS`
/// payloads of 1 KiB, as replicating its result to its members does (here the running sums,
/// the result only in the last; the memory traffic is the same).
fn fold(kernels: Kernels, acc: &mut [u32], frame: &mut [u8], member: &mut usize) {
    let payload = &mut frame[PAYLOAD..];
    if *member == 0 {
        kernels.load(Dtype::F32, acc, payload);
    } else {
        kernels.fold(Op::Sum, Dtype::F32, acc, payload);
    }
    kernels.store(Dtype::F32, acc, payload);
    *member = (*member + 1) % WORKERS;
}

fn main() {
    let arg = std::env::args().nth(1);
    let cpus = core_affinity::get_core_ids().unwrap_or_default();
    if cpus.len() < 2 {
        eprintln!("cross_core: needs two CPUs, found {}", cpus.len());
        std::process::exit(2);
    }
    let kernels = Kernels::detect();
    if arg.as_deref() == Some("probe") {
        println!("{:.0}", measure(Mode::Checksum, 1 << 16, &cpus, kernels));
        return;
    }
    let reps: usize = arg.map_or(7, |s| s.parse().expect("REPS: a count, or probe"));
    assert!(reps > 0, "cross_core: REPS must be at least 1");
    let modes = [Mode::Echo, Mode::Checksum, Mode::Fold, Mode::ChecksumHot, Mode::FoldHot];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..reps {
        for (k, &m) in modes.iter().enumerate() {
            res[k].push(measure(m, FRAMES, &cpus, kernels));
        }
    }
    println!(
        "Frames of {FRAME} B written on CPU 0, handled on CPU 1 in bursts of {BURST}; checksum kernel {}, fold kernels {}; {reps} x {FRAMES} frames per row, alternating. TSC cycles per frame on CPU 1, median [min-max].",
        checksum::SumKernel::active().name(),
        kernels.name()
    );
    println!();
    println!("| CPU 1's work per frame | cycles per frame | beyond echo |");
    println!("| --- | ---: | ---: |");
    let echo = median(&res[0]);
    for (k, m) in modes.iter().enumerate() {
        let (lo, hi) = res[k].iter().fold((f64::MAX, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
        let med = median(&res[k]);
        println!("| {} | {med:.0} [{lo:.0}-{hi:.0}] | {:.0} |", m.name(), med - echo);
    }
    let m = |k: usize| median(&res[k]);
    println!();
    println!(
        "Moving the lines between the cores: {:.0} cycles per frame to read a contribution (checksum less checksum, hot), {:.0} to read it and write a result back (fold less fold, hot).",
        m(1) - m(3),
        m(2) - m(4)
    );
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
