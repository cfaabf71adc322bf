//! Build script: finds the system DPDK with pkg-config, generates bindings with bindgen and
//! compiles the C shim (`shim/shim.c`) with the raw `pkg-config --cflags libdpdk` output.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const MIN_VERSION: &str = "22.11";
const INSTALL_HINT: &str = "\n\n\
    dpdk-sys: DPDK development files were not found (pkg-config cannot find `libdpdk` >= 22.11).\n\
    Install them (Debian 12):\n\n\
    \x20   sudo apt-get install libdpdk-dev dpdk dpdk-dev libpcap-dev clang libclang-dev pkg-config\n\n\
    or run `make deps` from the repository root.\n\n";

fn fail(detail: &str) -> ! {
    // A panic in a build script prints its message verbatim; keep it the last thing printed.
    panic!("{INSTALL_HINT}({detail})\n");
}

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .cargo_metadata(true)
        .probe("libdpdk")
        .unwrap_or_else(|e| fail(&e.to_string()));

    // The raw cflags carry `-include rte_config.h` and `-march=...`, which the pkg-config crate
    // does not expose; the shim and bindgen both need them.
    let out = Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run pkg-config: {e}")));
    if !out.status.success() {
        fail(&String::from_utf8_lossy(&out.stderr));
    }
    let cflags: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect();

    let mut build = cc::Build::new();
    build.file("shim/shim.c").include("shim").opt_level(3).warnings(false);
    for flag in &cflags {
        build.flag(flag);
    }
    build.compile("dpdk_shim");

    let mut clang_args: Vec<String> = cflags.iter().filter(|f| !f.starts_with("-march")).cloned().collect();
    for path in &lib.include_paths {
        clang_args.push(format!("-I{}", path.display()));
    }
    clang_args.push("-Ishim".into());

    let bindings = bindgen::Builder::default()
        .header("shim/shim.h")
        .clang_args(&clang_args)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("rte_eal_.*")
        .allowlist_function("rte_eth_.*")
        .allowlist_function("rte_pktmbuf_.*")
        .allowlist_function("rte_mempool_.*")
        .allowlist_function("rte_mbuf_.*")
        .allowlist_function("rte_lcore_.*")
        .allowlist_function("rte_get_.*")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_dev_probe")
        .allowlist_function("rte_delay_us_block")
        .allowlist_function("rte_ring_.*")
        .allowlist_function("rte_rcu_qsbr_.*")
        .allowlist_function("rte_memseg_.*")
        .allowlist_type("rte_rcu_qsbr")
        .allowlist_function("rte_tel_data_.*")
        .allowlist_function("rte_telemetry_register_cmd")
        .allowlist_type("telemetry_cb")
        .allowlist_var("RTE_TEL_.*")
        .allowlist_function("shim_.*")
        .allowlist_type("rte_mbuf")
        .allowlist_type("rte_eth_.*")
        .allowlist_type("rte_ether_.*")
        .allowlist_var("RTE_.*")
        .allowlist_var("SOCKET_ID_ANY")
        .allowlist_var("RING_F_.*")
        .blocklist_item("per_lcore_.*")
        .opaque_type("rte_arp_(hdr|ipv4)")
        .no_debug("rte_flow_item_gtp_psc")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(true)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed: {e}")));

    let out_path = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(out_path).expect("dpdk-sys: cannot write bindings.rs");
}
