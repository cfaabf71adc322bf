//! Nanoseconds per packet of a trTCM meter (RFC 2698): ours (`dataplane::meter`) beside DPDK's
//! `rte_meter_trtcm_color_blind_check`, both in a tight loop over the same trace (64 Ki packets
//! of 64..=1518 bytes at about 25 Gbit/s against CIR 10 Gbit/s, PIR 20 Gbit/s), colours written
//! to an array. The `rte_meter` loop runs in C, one FFI call per trace.
//!
//! Run with `cargo bench -p dataplane --bench meter`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::meter::{Color, Meter};

#[path = "common/meter_trace.rs"]
mod meter_trace;
use meter_trace::{trace, PACKETS, PROFILE};

fn bench(c: &mut Criterion) {
    #[cfg(feature = "dpdk")]
    let hz = {
        let args: Vec<String> =
            ["meter", "--no-huge", "-m", "64", "--no-pci", "--no-shconf", "--lcores", "0@0", "--log-level", "*:error"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        // Leaked: the EAL lives as long as the bench.
        std::mem::forget(dataplane::dpdk::Eal::init(&args).expect("EAL init"));
        dataplane::dpdk::tsc_hz()
    };
    #[cfg(not(feature = "dpdk"))]
    let hz = 2_500_000_000;
    let (ts, lens) = trace(hz);
    let mut out = vec![Color::Red; PACKETS];
    let mut g = c.benchmark_group("meter/trtcm_color_blind");
    g.throughput(Throughput::Elements(PACKETS as u64));
    g.bench_function("ours", |b| {
        b.iter(|| {
            let mut m = Meter::new(&PROFILE, hz, 0).unwrap();
            for ((o, &t), &l) in out.iter_mut().zip(&ts).zip(&lens) {
                *o = m.color_blind(t, l);
            }
            black_box(&out);
        })
    });
    #[cfg(feature = "dpdk")]
    g.bench_function("rte_meter", |b| {
        b.iter(|| {
            dataplane::dpdk::meter::run(&PROFILE, 0, &ts, &lens, None, &mut out).unwrap();
            black_box(&out);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
