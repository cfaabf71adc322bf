//! The address plan of generated workloads: where every member and the appliance sit.
//!
//! | who | MAC | IPv4 | IPv6 | UDP port | QPN | Q_Key |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | member rank k (k < 253) | `02:00:00:00:01:kk` (k in hex) | `10.0.0.(k+1)` | `fd00::(k+1)` (hex) | `50000 + k` | `0x100 + k` | `0x11111111` |
//! | appliance | `02:00:00:00:00:fe` | `10.0.0.254` | `fd00::fe` | 49374 (`gradient_udp_port`), 4791 (RoCEv2) | 1 (`appliance_qpn`) | |
//!
//! A RoCEv2 member's UDP source port is `50000 + k` too (any port is allowed there: the
//! appliance identifies a RoCEv2 member by its IP and DETH source QP).

use crate::workload::Family;
use dataplane::wire::build::IpAddrBytes;
use dataplane::wire::EthernetAddress;

/// The appliance's MAC.
pub const APPLIANCE_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0xfe]);
/// The appliance's IPv4 address.
pub const APPLIANCE_IPV4: [u8; 4] = [10, 0, 0, 254];
/// The appliance's IPv6 address (`fd00::fe`).
pub const APPLIANCE_IPV6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe];
/// The appliance's QP number (`dataplane.appliance_qpn`), the DestQP of RoCEv2 contributions.
pub const APPLIANCE_QPN: u32 = 1;
/// The gradient protocol's UDP port (`dataplane.gradient_udp_port`).
pub const GRADIENT_UDP_PORT: u16 = dataplane::wire::gradient::DEFAULT_UDP_PORT;
/// Every member's Q_Key.
pub const MEMBER_QKEY: u32 = 0x1111_1111;
/// Member k's UDP port is this plus k.
pub const MEMBER_UDP_BASE: u16 = 50000;
/// Member k's QP number is this plus k.
pub const MEMBER_QPN_BASE: u32 = 0x100;
/// The P_Key of contributions (the default partition).
pub const PKEY: u16 = 0xffff;

/// Member `rank`'s MAC: `02:00:00:00:01:kk`.
pub fn member_mac(rank: u16) -> EthernetAddress {
    EthernetAddress([0x02, 0, 0, 0, 0x01, rank as u8])
}

/// Member `rank`'s IP address: `10.0.0.(k+1)` or `fd00::(k+1)`.
pub fn member_ip(family: Family, rank: u16) -> IpAddrBytes {
    let host = rank + 1;
    match family {
        Family::V4 => IpAddrBytes::V4([10, 0, 0, host as u8]),
        Family::V6 => {
            let mut a = [0u8; 16];
            a[0] = 0xfd;
            a[14..16].copy_from_slice(&host.to_be_bytes());
            IpAddrBytes::V6(a)
        }
    }
}

/// The appliance's IP address in `family`.
pub fn appliance_ip(family: Family) -> IpAddrBytes {
    match family {
        Family::V4 => IpAddrBytes::V4(APPLIANCE_IPV4),
        Family::V6 => IpAddrBytes::V6(APPLIANCE_IPV6),
    }
}

/// Member `rank`'s UDP port: `50000 + k`.
pub fn member_udp_port(rank: u16) -> u16 {
    MEMBER_UDP_BASE + rank
}

/// Member `rank`'s QP number: `0x100 + k`.
pub fn member_qpn(rank: u16) -> u32 {
    MEMBER_QPN_BASE + rank as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_addresses() {
        assert_eq!(member_mac(0x1a).to_string(), "02:00:00:00:01:1a");
        assert_eq!(member_ip(Family::V4, 0).to_string(), "10.0.0.1");
        assert_eq!(member_ip(Family::V6, 15).to_string(), "fd00::10");
        assert_eq!(appliance_ip(Family::V6).to_string(), "fd00::fe");
        assert_eq!((member_udp_port(3), member_qpn(3)), (50003, 0x103));
    }
}
