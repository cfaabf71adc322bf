//! Shared by the integration tests that bring up an EAL.

/// EAL arguments for a test process `name` (argv\[0\]): no hugepages (64 MB of memory), no PCI
/// devices, no shared config, the lcores `lcores` (EAL's `--lcores` syntax, like `0@0,1@0`),
/// errors only in the log.
pub fn eal_args(name: &str, lcores: &str) -> Vec<String> {
    [name, "--no-huge", "-m", "64", "--no-pci", "--no-shconf", "--lcores", lcores, "--log-level", "*:error"]
        .map(String::from)
        .to_vec()
}
