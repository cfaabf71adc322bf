//! `gradclient`: one worker's allreduce of a tensor file through the appliance, for scripts and
//! end-to-end tests.
//!
//! Exit status: 0 on success, 1 when an allreduce fails (the error on stderr), 2 on bad usage or
//! configuration (unreadable config, unknown collective or rank, input of the wrong size).

use clap::Parser;
use gradclient::{Client, Error, Options};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Allreduce a tensor with the other members of a collective, through the appliance (UDP
/// carriage of the gradient protocol).
#[derive(Debug, Parser)]
#[command(name = "gradclient", version)]
struct Args {
    /// The appliance's TOML configuration (the collective, the members, the ports' addresses).
    #[arg(long, value_name = "APPLIANCE.toml")]
    config: PathBuf,
    /// The collective's `collective_id`.
    #[arg(long, value_name = "ID")]
    collective: u16,
    /// This worker's rank (its member's `ip` and `udp_port` are bound).
    #[arg(long, value_name = "K")]
    rank: u16,
    /// The tensor: `tensor_elements` raw little-endian lanes of the collective's dtype.
    #[arg(long, value_name = "IN.bin")]
    input: PathBuf,
    /// Where to write the reduced tensor (same layout as the input).
    #[arg(long, value_name = "OUT.bin")]
    output: PathBuf,
    /// Allreduce calls on the same input, in successive rounds; the output is the last result.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// The round of the first call for a chunk whose slot has no history; every other chunk's
    /// round is asked of the appliance first (PROBE, spec section 7), unless --no-probe.
    #[arg(long, value_name = "R", default_value_t = 0)]
    start_round: u32,
    /// Do not probe: start every chunk at --start-round (a wrong guess is corrected by a NAK 7
    /// rejoin; a guess equal to the last completed round gets that round's old result).
    #[arg(long)]
    no_probe: bool,
    /// Send one datagram per message, without UDP segmentation offload (also the default when
    /// the environment has GRADCLIENT_GSO=0).
    #[arg(long)]
    no_gso: bool,
    /// Receive one datagram per message, without UDP receive offload (also the default when
    /// the environment has GRADCLIENT_GRO=0).
    #[arg(long)]
    no_gro: bool,
    /// Chunks in flight.
    #[arg(long, value_name = "W", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    window: u32,
    /// How long an allreduce call may go without progress (no chunk completing) before it fails (ms).
    #[arg(long, value_name = "T", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: u64,
    /// Write the counters and per-call durations here as JSON.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("gradclient: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Allreduce(m)) => {
            eprintln!("gradclient: allreduce failed: {m}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    /// Bad usage or configuration: exit 2.
    Usage(String),
    /// The allreduce failed: exit 1.
    Allreduce(String),
}

fn run(a: &Args) -> Result<(), Failure> {
    let opts = Options {
        window: a.window as usize,
        deadline: Duration::from_millis(a.timeout_ms),
        start_round: a.start_round,
        probe: !a.no_probe,
        gso: !a.no_gso && gradclient::gso_from_env(),
        gro: !a.no_gro && gradclient::gro_from_env(),
        ..Options::default()
    };
    let config_error = |e: Error| match e {
        Error::Config(_) | Error::Invalid(_) | Error::Socket { .. } => Failure::Usage(e.to_string()),
        e => Failure::Allreduce(e.to_string()),
    };
    // The collective and the input first, then the socket: a wrong input is reported as such
    // even on a host that does not own the member's address.
    let (c, endpoint) = gradclient::from_appliance_config(&a.config, a.collective, a.rank).map_err(config_error)?;
    let input = std::fs::read(&a.input)
        .map_err(|e| Failure::Usage(format!("cannot read the input {}: {e}", a.input.display())))?;
    let want = c.tensor_elements * c.dtype.size() as u64;
    if input.len() as u64 != want {
        return Err(Failure::Usage(format!(
            "{}: {} bytes, expected {want} ({} {:?} lanes of collective {})",
            a.input.display(),
            input.len(),
            c.tensor_elements,
            c.dtype,
            c.collective_id
        )));
    }
    let mut client = Client::new(c, endpoint, opts).map_err(config_error)?;
    let mut data = input.clone();
    let mut seconds = Vec::with_capacity(a.repeat as usize);
    let mut failure = None;
    for i in 0..a.repeat {
        if i > 0 {
            data.copy_from_slice(&input);
        }
        let r = client.allreduce_bytes(&mut data);
        seconds.push(client.stats().seconds);
        if let Err(e) = r {
            failure = Some(Failure::Allreduce(format!("call {} of {}: {e}", i + 1, a.repeat)));
            break;
        }
    }
    if let Some(path) = &a.stats_json {
        let s = client.stats();
        let json = serde_json::json!({
            "impl": "rust",
            "rank": a.rank,
            "collective": a.collective,
            "seconds": seconds,
            "chunks": s.chunks,
            "sent": s.sent,
            "retransmits": s.retransmits,
            "results": s.results,
            "stale_results": s.stale_results,
            "naks": s.naks,
            "rejoins": s.rejoins,
            "probes": s.probes,
            "statuses": s.statuses,
            "send_calls": s.send_calls,
            "gso_sends": s.gso_sends,
            "gro_recvs": s.gro_recvs,
            "recv_calls": s.recv_calls,
        });
        let text = serde_json::to_string_pretty(&json).expect("a JSON value serializes");
        std::fs::write(path, text + "\n")
            .map_err(|e| Failure::Usage(format!("cannot write the stats {}: {e}", path.display())))?;
    }
    if let Some(f) = failure {
        return Err(f);
    }
    std::fs::write(&a.output, &data)
        .map_err(|e| Failure::Usage(format!("cannot write the output {}: {e}", a.output.display())))?;
    Ok(())
}
