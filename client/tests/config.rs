//! Reading the collective and the endpoint from the appliance's configuration file.

mod fake;

use fake::write_config;
use gradclient::{from_appliance_config, Collective, Dtype, Endpoint, Error, Op};

#[test]
fn collective_and_endpoint_of_a_rank() {
    let path = write_config("rank1", Some(40000), "", &[50000, 50001], false);
    let (c, ep) = from_appliance_config(&path, 9, 1).unwrap();
    let want = Collective {
        collective_id: 9,
        op: Op::Sum,
        dtype: Dtype::F32,
        tensor_elements: 1000,
        chunk_elements: 64,
        num_workers: 2,
        rank: 1,
    };
    assert_eq!(c, want);
    assert_eq!(
        ep,
        Endpoint { bind: "127.0.0.1:50001".parse().unwrap(), appliance: "127.0.0.1:40000".parse().unwrap() }
    );
}

#[test]
fn default_port_and_ipv6_member() {
    let path = write_config("v6", None, "", &[50000], true);
    let (_, ep) = from_appliance_config(&path, 9, 0).unwrap();
    assert_eq!(ep, Endpoint { bind: "[::1]:50000".parse().unwrap(), appliance: "[::1]:49374".parse().unwrap() });
}

#[test]
fn rocev2_unknown_collective_and_rank_are_config_errors() {
    let path = write_config("rocev2", None, "carriage = \"rocev2\"\n", &[50000], false);
    let e = from_appliance_config(&path, 9, 0).unwrap_err();
    assert!(matches!(e, Error::Config(_)) && e.to_string().contains("rocev2 carriage"), "{e}");
    let path = write_config("plain", None, "", &[50000], false);
    let e = from_appliance_config(&path, 8, 0).unwrap_err();
    assert!(e.to_string().contains("no [[collective]] with collective_id = 8 (configured: [9])"), "{e}");
    let e = from_appliance_config(&path, 9, 1).unwrap_err();
    assert!(e.to_string().contains("collective 9 has 1 member (rank 0), no rank 1"), "{e}");
    let e = from_appliance_config(std::path::Path::new("/nonexistent/appliance.toml"), 9, 0).unwrap_err();
    assert!(e.to_string().contains("cannot read the file"), "{e}");
}
