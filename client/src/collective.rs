//! What a worker needs to know of its collective (spec section 3), where to send (the appliance's
//! address and the worker's own), and how to retry; read from the appliance's TOML file by
//! [`from_appliance_config`].

use crate::{Dtype, Error, Op};
use dataplane::agg::collective::Carriage;
use dataplane::wire::build::IpAddrBytes;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

/// The gradient protocol's default UDP port (spec section 1: 49374, 0xC0DE).
pub const DEFAULT_GRADIENT_UDP_PORT: u16 = dataplane::wire::gradient::DEFAULT_UDP_PORT;

/// One collective as this worker takes part in it (spec section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collective {
    /// Which collective (the header's `collective_id`).
    pub collective_id: u16,
    /// The reduction.
    pub op: Op,
    /// The lane type.
    pub dtype: Dtype,
    /// Elements in the tensor.
    pub tensor_elements: u64,
    /// Elements per chunk, one chunk per datagram (the last chunk may be shorter).
    pub chunk_elements: u32,
    /// Members of the collective (ranks are `0..num_workers`).
    pub num_workers: u16,
    /// This worker's rank.
    pub rank: u16,
}

impl Collective {
    /// Number of chunks: ceil(tensor_elements / chunk_elements).
    pub fn chunks(&self) -> u64 {
        self.tensor_elements.div_ceil(self.chunk_elements.max(1) as u64)
    }

    /// Elements of chunk `i` (the last one may be shorter).
    pub fn chunk_len(&self, i: u64) -> u32 {
        let first = i * self.chunk_elements as u64;
        (self.tensor_elements - first).min(self.chunk_elements as u64) as u32
    }

    /// Checks what the wire can carry: a non-empty tensor whose offsets fit in 32 bits, chunks
    /// of 1 or more elements whose datagram fits in UDP, and `rank < num_workers`.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Invalid(format!("collective {}: {m}", self.collective_id)));
        if self.tensor_elements == 0 {
            return bad("tensor_elements is 0".into());
        }
        if self.tensor_elements > u32::MAX as u64 + 1 {
            return bad(format!(
                "tensor_elements = {} does not fit the 32-bit tensor_offset field",
                self.tensor_elements
            ));
        }
        if self.chunk_elements == 0 {
            return bad("chunk_elements is 0".into());
        }
        let bytes = self.chunk_elements as u64 * self.dtype.size() as u64;
        if bytes > MAX_PAYLOAD as u64 {
            return bad(format!("a chunk of {} elements is {bytes} bytes, more than a UDP datagram carries after the 20-byte header ({MAX_PAYLOAD})", self.chunk_elements));
        }
        if self.rank >= self.num_workers {
            return bad(format!("rank {} is not below num_workers = {}", self.rank, self.num_workers));
        }
        Ok(())
    }
}

/// The largest payload (bytes) a UDP datagram carries after the 20-byte gradient header.
pub const MAX_PAYLOAD: usize = 65507 - dataplane::wire::gradient::HEADER_LEN;

/// Where this worker sends from and to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The local address to bind: the member's `ip` and `udp_port` (the appliance accepts
    /// contributions only from them, spec section 4 rule 5, and sends results there).
    pub bind: SocketAddr,
    /// The appliance: its address on the member's port and `gradient_udp_port`.
    pub appliance: SocketAddr,
}

/// Timers and limits of an allreduce call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Chunks sent and not yet answered at any time (default 64).
    pub window: usize,
    /// Retransmit timeout of a chunk until the first round-trip sample (default 20 ms). After
    /// that a chunk's first timeout is 4 x the smallest round trip of the current or previous
    /// call (samples only from chunks answered without a resend, Karn's rule), kept within
    /// [`min_rto`](Self::min_rto)..[`max_rto`](Self::max_rto); each resend doubles it.
    pub initial_rto: Duration,
    /// Lower bound of the retransmit timeout (default 10 ms: below that, a worker descheduled on a
    /// busy host resends chunks that were not lost).
    pub min_rto: Duration,
    /// Upper bound of the retransmit timeout (default 500 ms).
    pub max_rto: Duration,
    /// Longest an allreduce call may go without progress (no chunk's result, no rejoin) before it
    /// fails (default 10 s).
    pub deadline: Duration,
    /// The round a chunk starts at when its slot has no history (default 0), or every chunk's
    /// when [`probe`](Self::probe) is off; each completed call advances it by one.
    pub start_round: u32,
    /// Before its first call the client asks the appliance, for every chunk, which round its
    /// slot accepts from this rank (PROBE and STATUS, spec section 7) instead of guessing
    /// (default `true`). A worker that starts or restarts must not guess (rule 4): a guess equal
    /// to the slot's last completed round is answered with that old result. `false` trusts
    /// [`start_round`](Self::start_round) (and a NAK 7 rejoin when it is wrong), for an
    /// appliance older than revision 1.1.
    pub probe: bool,
    /// Rejoins (NAK 7 realignments) allowed per call (default 8).
    pub max_rejoins: u32,
    /// Sends a window's full chunks with UDP segmentation offload (`UDP_SEGMENT`, Linux 4.18):
    /// one message per run of datagrams (at most 64, and at most 65,000 bytes: 45 chunks of 1408
    /// bytes, 7 of 8896), cut into the same datagrams by the device or by the kernel before a
    /// device that cannot, which spares the kernel's UDP and IP layers (and the hops that pass
    /// offload on) their per-datagram work. On by default ([`gso_from_env`] gives the command
    /// line and Python clients' default). A kernel without it (the socket option is probed when
    /// the client starts) leaves it off; one that refuses it on a send (a device without
    /// checksum offload, a chunk above the path MTU) turns it off for the client, and that
    /// message and every later one go one datagram per message, losing nothing.
    pub gso: bool,
    /// Receives results with UDP receive offload (`UDP_GRO`, Linux 5.0): where the receiving
    /// device coalesces datagrams (GRO over a batch of frames: a NIC's NAPI poll; a veth is
    /// polled per frame and coalesces nothing), several results of the same size come in one
    /// message and are split again by size, so the kernel's IP and UDP layers and the receive
    /// call handle a run of results once instead of once per datagram. Each receive slot (as
    /// many as the window, at most 64) is then 64 KiB (up to 4 MiB per client). On by default
    /// ([`gro_from_env`] gives the command line and Python clients' default); a kernel without
    /// it (the socket option is refused when the client starts) leaves it off. Where the device
    /// does not coalesce, every result comes alone, as without it.
    pub gro: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            window: 64,
            initial_rto: Duration::from_millis(20),
            min_rto: Duration::from_millis(10),
            max_rto: Duration::from_millis(500),
            deadline: Duration::from_secs(10),
            start_round: 0,
            probe: true,
            max_rejoins: 8,
            gso: true,
            gro: true,
        }
    }
}

/// [`Options::gso`] as the environment asks: false when `GRADCLIENT_GSO` is `0`, `false`, `off`
/// or `no` (any case), true otherwise. The command-line client and the Python binding take
/// their default from it, so that a run can be compared with and without segmentation offload
/// without changing code.
pub fn gso_from_env() -> bool {
    env_flag("GRADCLIENT_GSO")
}

/// [`Options::gro`] as the environment asks: false when `GRADCLIENT_GRO` is `0`, `false`, `off`
/// or `no` (any case), true otherwise (as [`gso_from_env`]).
pub fn gro_from_env() -> bool {
    env_flag("GRADCLIENT_GRO")
}

/// An on/off environment variable that defaults to on.
fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map_or(true, |v| !matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "off" | "no"))
}

/// Reads the appliance's TOML configuration at `path` (with the appliance's own loader, so a
/// file the appliance refuses is refused here too) and returns collective `collective_id` as
/// seen by `rank`, with its endpoint: bind to the member's `ip` and `udp_port`; send to the
/// `ipv4` (or `ipv6` for an IPv6 member) of the `[[port]]` the member names (`port`, default 0),
/// at `[dataplane] gradient_udp_port` (default 49374).
///
/// # Errors
/// [`Error::Config`] when the file does not load, has no such collective or rank, or the
/// collective uses the RoCEv2 carriage (this client speaks only UDP; RoCEv2 needs verbs).
pub fn from_appliance_config(path: &Path, collective_id: u16, rank: u16) -> Result<(Collective, Endpoint), Error> {
    let loaded = dataplane::config::load(path).map_err(|e| Error::Config(e.to_string()))?;
    let c = loaded.collectives.iter().find(|c| c.id == collective_id).ok_or_else(|| {
        let ids: Vec<String> = loaded.collectives.iter().map(|c| c.id.to_string()).collect();
        Error::Config(format!(
            "{}: no [[collective]] with collective_id = {collective_id} (configured: [{}])",
            path.display(),
            ids.join(", ")
        ))
    })?;
    if c.carriage == Carriage::Rocev2 {
        return Err(Error::Config(format!(
            "{}: collective {collective_id} uses the rocev2 carriage: this client speaks only the UDP carriage (RoCEv2 needs verbs)",
            path.display()
        )));
    }
    let m = c.members.get(rank as usize).ok_or_else(|| {
        let has = match c.members.len() {
            0 => "no members".to_string(),
            1 => "1 member (rank 0)".to_string(),
            n => format!("{n} members (ranks 0 to {})", n - 1),
        };
        Error::Config(format!("{}: collective {collective_id} has {has}, no rank {rank}", path.display()))
    })?;
    let port = m.port as usize;
    let (local, appliance): (IpAddr, Option<IpAddr>) = match m.ip {
        IpAddrBytes::V4(a) => (Ipv4Addr::from(a).into(), loaded.port_ipv4[port].map(|a| Ipv4Addr::from(a).into())),
        IpAddrBytes::V6(a) => (Ipv6Addr::from(a).into(), loaded.port_ipv6[port].map(|a| Ipv6Addr::from(a).into())),
    };
    // The loader already refuses a member whose port lacks an address of its family.
    let appliance = appliance.ok_or_else(|| {
        Error::Config(format!("{}: port[{port}] has no address of member {rank}'s family", path.display()))
    })?;
    let coll = Collective {
        collective_id,
        op: c.op,
        dtype: c.dtype,
        tensor_elements: c.tensor_elements,
        chunk_elements: c.chunk_elements,
        num_workers: c.members.len() as u16,
        rank,
    };
    coll.validate()?;
    let ep = Endpoint {
        bind: SocketAddr::new(local, m.udp_port),
        appliance: SocketAddr::new(appliance, loaded.config.dataplane.gradient_udp_port),
    };
    Ok((coll, ep))
}
