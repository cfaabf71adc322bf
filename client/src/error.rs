//! The client's errors: each names what failed and the values involved, so that a training
//! script's log says what to fix.

use crate::Dtype;
use dataplane::wire::gradient::NakReason;
use std::net::SocketAddr;

/// Why an allreduce or a client set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The appliance's configuration file could not be used for this client (unreadable, invalid,
    /// no such collective or rank, or a carriage this client does not speak).
    #[error("config: {0}")]
    Config(String),

    /// The collective or the options are inconsistent (zero chunk size, rank >= num_workers, ...).
    #[error("invalid collective or options: {0}")]
    Invalid(String),

    /// The buffer's element type is not the collective's dtype.
    #[error("dtype mismatch: collective {collective} carries {expected:?} lanes, the buffer holds {found:?} elements")]
    DtypeMismatch {
        /// The collective.
        collective: u16,
        /// The collective's dtype.
        expected: Dtype,
        /// The buffer's element type.
        found: Dtype,
    },

    /// The buffer does not hold exactly the tensor.
    #[error("length mismatch: collective {collective} has a tensor of {expected} {unit}, the buffer holds {found}")]
    Length {
        /// The collective.
        collective: u16,
        /// Expected length.
        expected: u64,
        /// The buffer's length.
        found: u64,
        /// `"elements"` or `"bytes"`.
        unit: &'static str,
    },

    /// The local socket could not be created, bound or connected.
    #[error("cannot {what} UDP socket {addr}: {source}")]
    Socket {
        /// `"bind"` or `"connect"`.
        what: &'static str,
        /// The address concerned.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },

    /// The appliance refused a contribution (spec section 5). Reasons 1-6 end the call at once;
    /// reason 7 only does when rejoining failed (see [`Error::Rejoins`]).
    #[error(
        "NAK from the appliance: reason {reason} ({}) for the chunk at offset {offset} elements, round {round}, of collective {collective}",
        nak_reason_text(*.reason)
    )]
    Nak {
        /// The collective.
        collective: u16,
        /// The reason code (1..=7).
        reason: u8,
        /// The refused chunk's `tensor_offset` (elements).
        offset: u32,
        /// The NAK's round field (for reason 7, the appliance's expected round).
        round: u32,
    },

    /// The appliance does not answer: the deadline passed with no answer to this client's
    /// PROBEs (spec section 7; at start, or while a call stalled), or with nothing at all from
    /// the appliance (probing off), or the network said the appliance's host cannot be reached
    /// (`EHOSTUNREACH`, `ENETUNREACH`: no ARP/NDP answer, no route).
    #[error("appliance unreachable: no answer from {addr} in {waited_ms} ms{note}")]
    Unreachable {
        /// The appliance's address (IP, `gradient_udp_port`).
        addr: SocketAddr,
        /// How long the call waited (ms).
        waited_ms: u64,
        /// Empty, or what was tried and the network's reason, like ` (host unreachable: ...)`.
        note: String,
    },

    /// An ICMP port unreachable came back: a host answers at the appliance's IP but nothing
    /// listens on the gradient port (wrong address or `gradient_udp_port`, or the appliance is
    /// not running).
    #[error("appliance refused: {addr} answered ICMP port unreachable (nothing listens there: check the appliance's address and gradient_udp_port, and that it runs)")]
    Refused {
        /// The appliance's address.
        addr: SocketAddr,
    },

    /// The appliance answered, but some chunks got no result before the deadline. While the call
    /// stalled the client probed them (spec section 7): `waiting_for` holds the ranks whose
    /// contribution the appliance's slots still wait for (absent or late peers); empty when the
    /// STATUS answers named none (results lost on the way back); `None` when no STATUS came
    /// (probing off).
    #[error(
        "timeout: {missing} of {chunks} chunks of collective {collective} got no result from {addr} in {waited_ms} ms{}",
        waiting_text(.waiting_for)
    )]
    Timeout {
        /// The collective.
        collective: u16,
        /// Chunks without a result.
        missing: usize,
        /// Chunks of the call: the tensor's, or those of the range reduced.
        chunks: usize,
        /// The appliance's address.
        addr: SocketAddr,
        /// How long the call waited (ms).
        waited_ms: u64,
        /// Ranks the stalled chunks' slots wait for, ascending.
        waiting_for: Option<Vec<u16>>,
    },

    /// The appliance kept answering NAK 7 (stale or premature round) after `limit` rejoins in one
    /// call: the workers do not agree on rounds.
    #[error("rejoin limit: the appliance still answers NAK 7 (stale or premature round: expected {expected}, chunk at offset {offset} elements sent round {sent}) after {limit} rejoins in this call")]
    Rejoins {
        /// The rejoin limit ([`crate::Options::max_rejoins`]).
        limit: u32,
        /// The NAKed chunk's offset (elements).
        offset: u32,
        /// The round the chunk was sent with.
        sent: u32,
        /// The round the appliance expects.
        expected: u32,
    },

    /// Another socket error while sending or receiving.
    #[error("socket error while {what} (appliance {addr}): {source}")]
    Io {
        /// `"sending"` or `"receiving"`.
        what: &'static str,
        /// The appliance's address.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The end of a [`Error::Timeout`] message: which ranks the appliance waits for.
fn waiting_text(ranks: &Option<Vec<u16>>) -> String {
    let Some(ranks) = ranks else {
        return " (the appliance answered: peers may be absent or late)".into();
    };
    if ranks.is_empty() {
        return " (the appliance answered and waits for no rank: results may be lost on the way back)".into();
    }
    let list: Vec<String> = ranks.iter().map(u16::to_string).collect();
    let s = if ranks.len() == 1 { "" } else { "s" };
    format!(": the appliance is waiting for rank{s} {}", list.join(", "))
}

/// The meaning of a NAK reason code (spec section 5).
pub fn nak_reason_text(reason: u8) -> &'static str {
    match reason {
        NakReason::UNKNOWN_COLLECTIVE => "unknown collective",
        NakReason::BAD_VERSION => "bad version",
        NakReason::MISMATCH => "op/dtype/carriage mismatch",
        NakReason::BAD_RANK => "bad rank",
        NakReason::NOT_MEMBER => "not the rank's member",
        NakReason::BAD_LENGTH_OR_OFFSET => "bad length or offset",
        NakReason::STALE_ROUND => "stale or premature round",
        _ => "unknown reason",
    }
}
