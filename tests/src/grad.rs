//! Gradient workloads for the functional tests: the traffic generator's workloads, hand-built
//! contributions for the rules it does not exercise, and the independent checker.

use crate::{root, run_with_timeout};
use dataplane::agg::collective::{Carriage, Collective, Member};
use dataplane::testing::contribution;
use dataplane::wire::build::{FrameSpec, IpAddrBytes};
use dataplane::wire::gradient::{Dtype, Op};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The `pktgen` binary (`$PKTGEN_BIN` overrides; see [`crate::project_bin`]).
pub fn pktgen_bin() -> PathBuf {
    crate::project_bin("pktgen", "PKTGEN_BIN")
}

/// Runs `pktgen allreduce --out DIR ARGS` and returns DIR (holding input.pcap, appliance.toml).
pub fn pktgen(dir: &Path, args: &[&str]) -> PathBuf {
    let out = Command::new(pktgen_bin()).arg("allreduce").arg("--out").arg(dir).args(args).output().expect("pktgen");
    assert!(out.status.success(), "pktgen {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    dir.to_path_buf()
}

/// Runs the shared checker; returns (passed, its last lines).
pub fn gradcheck(config: &Path, inputs: &[&Path], outputs: &[&Path]) -> (bool, String) {
    gradcheck_with(config, inputs, outputs, None)
}

/// Runs the shared checker on collective `id` of the config alone (`--only-collective`).
pub fn gradcheck_only(config: &Path, inputs: &[&Path], outputs: &[&Path], id: u16) -> (bool, String) {
    gradcheck_with(config, inputs, outputs, Some(id))
}

fn gradcheck_with(config: &Path, inputs: &[&Path], outputs: &[&Path], only: Option<u16>) -> (bool, String) {
    let script = root().join("../shared/tools/gradcheck.py");
    assert!(script.exists(), "{} is missing: the shared tools must sit beside the repository", script.display());
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg("--config").arg(config);
    for i in inputs {
        cmd.arg("--in").arg(i);
    }
    for o in outputs {
        cmd.arg("--out").arg(o);
    }
    if let Some(id) = only {
        cmd.arg("--only-collective").arg(id.to_string());
    }
    let out = run_with_timeout(cmd, Duration::from_secs(300));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A collective written by hand, with pktgen's address plan: member k is 10.0.0.(k+1) or
/// fd00::(k+1), UDP port 50000+k, QPN 0x100+k, MAC 02:00:00:00:01:kk; the appliance is
/// 10.0.0.254 / fd00::fe, MAC 02:00:00:00:00:fe, QPN 1.
#[derive(Debug, Clone)]
pub struct Coll {
    /// collective_id.
    pub id: u16,
    /// "sum", "max", "min".
    pub op: &'static str,
    /// "f32", ...
    pub dtype: &'static str,
    /// RoCEv2 carriage.
    pub roce: bool,
    /// IPv6 members.
    pub v6: bool,
    /// Workers.
    pub n: usize,
    /// Tensor elements.
    pub tensor: u64,
    /// Chunk elements.
    pub chunk: u32,
    /// Extra keys of the `[[collective]]` table.
    pub extra: &'static str,
}

impl Default for Coll {
    fn default() -> Self {
        Coll { id: 1, op: "sum", dtype: "f32", roce: false, v6: false, n: 2, tensor: 8, chunk: 4, extra: "" }
    }
}

/// The `[[port]]` of hand-written configs.
pub const PORT: &str = "[[port]]\nname = \"p0\"\nvdev = \"net_null0\"\nmac = \"02:00:00:00:00:fe\"\nipv4 = \"10.0.0.254\"\nipv6 = \"fd00::fe\"\n";

impl Coll {
    /// Member k's IP.
    pub fn ip(&self, k: usize) -> IpAddrBytes {
        if self.v6 {
            let mut a: [u8; 16] = "fd00::".parse::<std::net::Ipv6Addr>().unwrap().octets();
            a[15] = k as u8 + 1;
            IpAddrBytes::V6(a)
        } else {
            IpAddrBytes::V4([10, 0, 0, k as u8 + 1])
        }
    }

    /// The `[[collective]]` table.
    pub fn toml(&self) -> String {
        let mut s = format!(
            "[[collective]]\ncollective_id = {}\nop = \"{}\"\ndtype = \"{}\"\ncarriage = \"{}\"\ntensor_elements = {}\nchunk_elements = {}\n{}\n",
            self.id,
            self.op,
            self.dtype,
            if self.roce { "rocev2" } else { "udp" },
            self.tensor,
            self.chunk,
            self.extra
        );
        for k in 0..self.n {
            s += &format!(
                "[[collective.member]]\nrank = {k}\nip = \"{}\"\nmac = \"02:00:00:00:01:{k:02x}\"\n",
                self.ip(k)
            );
            // Each carriage's own keys (the other's would be unused).
            s += &if self.roce {
                format!("qpn = {}\nqkey = 286331153\n", 0x100 + k)
            } else {
                format!("udp_port = {}\n", 50000 + k)
            };
        }
        s
    }

    /// The collective's identity, shape and members as [`Coll::toml`] writes them (the address
    /// plan): what a contribution's headers need. Not the whole loaded collective: `extra` keys
    /// are not read (slot timeout 0, no result VLANs, not deterministic); an unknown op or dtype
    /// name, for tests of refusals, becomes min or i32.
    pub fn collective(&self) -> Collective {
        let members = (0..self.n)
            .map(|k| Member {
                rank: k as u16,
                ip: self.ip(k),
                udp_port: 50000 + k as u16,
                mac: format!("02:00:00:00:01:{k:02x}").parse().unwrap(),
                vlan: None,
                port: 0,
                qpn: 0x100 + k as u32,
                qkey: 0x1111_1111,
            })
            .collect();
        Collective {
            id: self.id,
            op: Op::from_name(self.op).unwrap_or(Op::Min),
            dtype: Dtype::from_name(self.dtype).unwrap_or(Dtype::I32),
            carriage: if self.roce { Carriage::Rocev2 } else { Carriage::Udp },
            tensor_elements: self.tensor,
            chunk_elements: self.chunk,
            deterministic: false,
            slot_timeout_us: 0,
            dscp: 0,
            members,
        }
    }

    /// A contribution from rank `k` ([`dataplane::testing::contribution`]); `tweak` may change
    /// anything (spoofing, bad fields, another rank in the header). Panics when `k` is not a
    /// member (`k >= n`).
    pub fn frame(&self, k: usize, offset: u32, round: u32, payload: &[u8], tweak: impl Fn(&mut FrameSpec)) -> Vec<u8> {
        contribution(&self.collective(), k, offset, round, payload, tweak)
    }
}

impl Coll {
    /// A PROBE (spec section 7) from rank `k` for the chunk at `offset`: flags PROBE, round 0,
    /// ceil(n / 8) zero bytes of payload; `tweak` may change anything.
    pub fn probe(&self, k: usize, offset: u32, tweak: impl Fn(&mut FrameSpec)) -> Vec<u8> {
        self.frame(k, offset, 0, &vec![0; self.n.div_ceil(8)], |s| {
            s.header.flags = 0x8;
            tweak(s);
        })
    }
}

/// f32 lanes, little-endian.
pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
