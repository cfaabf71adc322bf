//! Build script: exports the binary's `munmap` and `close` (see `dataplane::dpdk::rcu` and
//! `dataplane::dpdk::fdguard`), so that the DPDK
//! drivers, shared libraries, call it instead of libc's.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=munmap");
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=close");
}
