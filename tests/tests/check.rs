//! `dpu --check -c CONF`: the configuration is validated as a run would validate it, without
//! starting DPDK, and the exit status says whether it is valid.

use functional_tests::{dpu_bin, scratch, two_null_ports, write_config, EAL, TO_PORT1};
use std::process::Command;

#[test]
fn check_accepts_a_valid_config_and_names_the_key_of_a_bad_one() {
    let dir = scratch("check");
    let good = write_config(&dir, "good.toml", &two_null_ports(EAL, TO_PORT1));
    let o = Command::new(dpu_bin()).args(["--check", "-c", good.to_str().unwrap()]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("good.toml: ok: 2 port(s), 1 worker lcore(s), 1 table(s), 0 meter(s), 0 collective(s)"),
        "{out}"
    );
    // Nothing of DPDK ran: no EAL line.
    assert!(!String::from_utf8_lossy(&o.stderr).contains("EAL"), "{}", String::from_utf8_lossy(&o.stderr));

    let bad = write_config(&dir, "bad.toml", &format!("{EAL}\n[[port]]\nvdev = \"net_null0\"\nrx_desc = \"many\"\n"));
    let o = Command::new(dpu_bin()).args(["--check", "-c", bad.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.toml") && err.contains("port[0].rx_desc"), "{err}");

    let o =
        Command::new(dpu_bin()).args(["--check", "-c", dir.join("missing.toml").to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.toml"));
}
