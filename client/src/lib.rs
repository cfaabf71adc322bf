//! The training worker's side of the gradient aggregation protocol
//! (`../shared/spec/gradient-protocol.md` beside the repository, version 1): allreduce of a tensor through the
//! appliance, over plain UDP sockets (the UDP carriage of spec section 1; RoCEv2 needs verbs and
//! is not spoken here).
//!
//! A [`Client`] splits the tensor into chunks of `chunk_elements` elements (spec section 3),
//! sends each as one datagram (the 20-byte header of spec section 2, then the lanes,
//! little-endian) to the appliance, keeps up to [`Options::window`] chunks in flight, and writes
//! each RESULT's payload in place. A chunk whose result does not come by its timer is resent
//! (flag RETRANSMIT; [`Options::initial_rto`], doubled each time up to [`Options::max_rto`]): the
//! appliance folds a contribution once and answers a late one with the kept result (spec section
//! 4, rules 1 and 3). A NAK of reasons 1-6 ends the call with [`Error::Nak`]; a NAK 7 (stale or
//! premature round, rule 4) moves every incomplete chunk to the appliance's expected round (a
//! rejoin). Before the first call the client asks the appliance each chunk's round (PROBE and
//! STATUS, spec section 7: [`Client::sync`]) instead of guessing it, and a call that stalls
//! probes its chunks to name the ranks the appliance waits for. Every call ends within
//! [`Options::deadline`] of its last progress.
//!
//! ```no_run
//! use gradclient::{Client, Options};
//! use std::path::Path;
//!
//! // Collective 1 of the appliance's config, as rank 0: bind to the member's ip and udp_port,
//! // send to the appliance's address on the member's port.
//! let mut client = Client::from_appliance_config(Path::new("conf/default.toml"), 1, 0, Options::default())?;
//! let mut grads = vec![1.0f32; 65536];
//! client.allreduce(&mut grads)?; // the round the appliance said: grads now holds the sum over the 4 workers
//! client.allreduce(&mut grads)?; // the next round
//! println!("{:?}", client.stats());
//! # Ok::<(), gradclient::Error>(())
//! ```
#![warn(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]

mod client;
mod collective;
mod element;
mod error;
#[allow(unsafe_code)] // sendmmsg/recvmmsg through libc, with their SAFETY lines
mod mmsg;

pub use client::{Client, ClientStats};
pub use collective::{
    from_appliance_config, gro_from_env, gso_from_env, Collective, Endpoint, Options, DEFAULT_GRADIENT_UDP_PORT,
    MAX_PAYLOAD,
};
pub use dataplane::wire::gradient::{Dtype, Op};
pub use element::Element;
pub use error::{nak_reason_text, Error};
pub use half;
