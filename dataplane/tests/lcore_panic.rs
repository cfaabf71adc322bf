//! A panicking worker closure is caught and reported by `lcore::launch`/`join`, and its
//! `on_panic` hook runs (the appliance uses it to stop every other worker): never a silent hang.
#![cfg(feature = "dpdk")]

mod common;

use dataplane::dpdk::{lcore, Eal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn worker_panic_is_caught_and_reported() {
    let args = common::eal_args("lcore_panic", "0@0,1@0");
    let eal = Eal::init(&args).expect("EAL init");
    assert_eq!(eal.worker_lcores(), vec![1]);
    static HOOK: AtomicBool = AtomicBool::new(false);
    let h =
        lcore::launch(1, || panic!("boom on purpose"), Some(Arc::new(|| HOOK.store(true, Ordering::SeqCst)))).unwrap();
    let err = h.join().unwrap_err();
    assert_eq!(err, "boom on purpose");
    assert!(HOOK.load(Ordering::SeqCst), "on_panic ran");
    // The lcore is usable again after a caught panic.
    let ok = lcore::launch(1, || {}, None).unwrap();
    assert_eq!(ok.join(), Ok(()));
}
