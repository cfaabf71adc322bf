//! Arbitrary bytes through the full-stack parser: it must never panic, and what it reports must
//! lie inside the frame. A router parse (`Checks::Router`) then `verify_l4` judges every frame
//! exactly as the full parse does: the same fields when both accept, the full parse's reason
//! from `verify_l4` when only the router parse accepts.
#![no_main]

use dataplane::parse::{parse, parse_checked, verify_l4, Checks, Layers, RxChecksum, MAX_VLAN_TAGS};
use libfuzzer_sys::fuzz_target;

/// The gradient UDP port the parser is run with (the default, 0xC0DE), and a second one taken
/// from the input so that the gradient-over-UDP path is reached for any destination port.
const GRADIENT_PORT: u16 = dataplane::wire::gradient::DEFAULT_UDP_PORT;

fuzz_target!(|data: &[u8]| {
    check(data, GRADIENT_PORT);
    if data.len() >= 38 {
        // The UDP destination port of an untagged IPv4 frame without options.
        check(data, u16::from_be_bytes([data[36], data[37]]));
    }
});

fn check(frame: &[u8], port: u16) {
    router_then_verify(frame, port);
    let Ok(p) = parse(frame, port) else { return };
    let n = frame.len();
    assert!(p.has(Layers::ETH));
    assert!(p.vlan_tags() <= MAX_VLAN_TAGS);
    assert_eq!(p.l3_offset as usize, 14 + 4 * p.vlan_tags());
    // Ranges the actions and the aggregator index with are inside the frame.
    if p.has(Layers::IPV4) || p.has(Layers::IPV6) {
        assert!(!(p.has(Layers::IPV4) && p.has(Layers::IPV6)));
        assert!(p.l3_offset <= p.l4_offset);
        assert_eq!(p.l4_offset, p.l3_offset + p.ip_header_len);
        assert!(p.l4_offset <= p.ip_end, "{p:?}");
        assert!(p.ip_end as usize <= n, "{p:?}");
        let _ = &frame[p.ip_datagram()];
    }
    if p.has(Layers::UDP) {
        assert!(p.has(Layers::IPV4) || p.has(Layers::IPV6));
        assert!(!p.has(Layers::IP_FRAGMENT));
        assert!(p.udp_len >= 8);
        assert!(p.l4_offset + p.udp_len <= p.ip_end, "{p:?}");
        let _ = &frame[p.udp_payload()];
    }
    if p.has(Layers::BTH) {
        assert!(p.has(Layers::UDP) && p.udp_dst == 4791);
        let icrc = p.icrc_offset().unwrap();
        assert!(icrc + 4 <= n && icrc >= p.bth_offset as usize + 12, "{p:?}");
        assert!(p.bth_pad <= 3);
    }
    if p.has(Layers::GRADIENT) {
        let r = p.grad_payload();
        assert!(r.start <= r.end && r.end <= n, "{p:?}");
        assert_eq!(p.grad_payload_offset, p.grad_offset + 20);
        if !p.has(Layers::BTH) {
            assert_eq!(r.end, (p.l4_offset + p.udp_len) as usize);
        }
    }
    // Parsing is a pure function of the bytes.
    assert_eq!(parse(frame, port), Ok(p));
}

/// The router parse and `verify_l4` against the full parse.
fn router_then_verify(frame: &[u8], port: u16) {
    let full = parse(frame, port);
    let router = parse_checked(frame, port, RxChecksum::UNKNOWN, Checks::Router);
    match (full, router) {
        (Ok(a), Ok(mut b)) => {
            assert_eq!(verify_l4(frame, &b, RxChecksum::UNKNOWN), Ok(()));
            b.layers.remove(Layers::L4_UNVERIFIED);
            assert_eq!(a, b, "the router parse found other fields");
        }
        (Err(r), Ok(b)) => {
            assert_eq!(verify_l4(frame, &b, RxChecksum::UNKNOWN), Err(r), "{b:?}");
        }
        (Ok(a), Err(r)) => panic!("the router parse refused as {r} what the full parse accepts: {a:?}"),
        // The full parse stopped at a checksum, the router parse later (e.g. at a BTH).
        (Err(_), Err(_)) => {}
    }
}
