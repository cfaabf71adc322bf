//! `pktgen`: writes gradient AllReduce workloads as pcap files with the appliance config and
//! the expected results (`pktgen allreduce`), and sends live UDP and RoCEv2 streams on DPDK
//! ports, measuring what comes back (`pktgen run`).

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use dataplane::agg::collective::Carriage;
use dataplane::wire::gradient::{Dtype, Op};
use pktgen::values::ValueKind;
use pktgen::workload::{Family, Impairments, Params, Workload};
use std::path::PathBuf;
use std::process::ExitCode;

// A PMD's `munmap` of memory the lcores may be reading (net_memif's when its peer leaves) waits
// for their grace period first (dataplane::dpdk::rcu).
dataplane::guard_unmaps!();
// net_memif zero-copy closes EAL's memory-segment fds at each connection: they stay open
// (dataplane::dpdk::fdguard), so a later peer can map them.
dataplane::guard_closes!();

/// Traffic generator for the gradient aggregation protocol.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Writes an AllReduce workload: DIR/input.pcap (every worker's contributions),
    /// DIR/appliance.toml (the appliance config) and DIR/expected.json (reference results).
    Allreduce(AllreduceArgs),
    /// Sends the streams of a config on DPDK ports and measures what comes back: a line per
    /// second, a summary table at the end (and as JSON and CSV files).
    Run(RunArgs),
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The config (TOML: [eal], [mempool], [pktgen], [[port]], [[stream]]).
    #[arg(short = 'c', long = "config", value_name = "CONF")]
    config: PathBuf,
    /// Seconds to run (default: the config's duration_s, else until SIGINT).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Write the summary as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the summary as CSV (one row per stream).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// No line per second.
    #[arg(short, long)]
    quiet: bool,
    /// Each stream stops after N packets (split among its tx lcores); the run ends when all
    /// have stopped.
    #[arg(long, value_name = "N")]
    packets: Option<u64>,
    /// More EAL arguments, after `--`.
    #[arg(last = true)]
    eal: Vec<String>,
}

#[derive(Args, Debug)]
struct AllreduceArgs {
    /// Output directory (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Number of workers (1..=253).
    #[arg(long, default_value_t = 4)]
    workers: u16,
    /// Elements in the tensor.
    #[arg(long, default_value_t = 4096)]
    tensor_elements: u64,
    /// Elements per chunk (one packet; at most 8900 bytes of payload).
    #[arg(long, default_value_t = 256)]
    chunk_elements: u32,
    /// Lane type: f32, f16, bf16, i32.
    #[arg(long, default_value = "f32", value_parser = parse_dtype)]
    dtype: Dtype,
    /// Reduction: sum, max, min.
    #[arg(long, default_value = "sum", value_parser = parse_op)]
    op: Op,
    /// Carriage: udp or rocev2.
    #[arg(long, default_value = "udp", value_parser = parse_carriage)]
    carriage: Carriage,
    /// IP family: v4 or v6.
    #[arg(long, default_value = "v4", value_parser = parse_family)]
    family: Family,
    /// Tag every frame with this 802.1Q VID (1..=4094).
    #[arg(long)]
    vlan: Option<u16>,
    /// Number of rounds; each re-sends every chunk.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// The first round's number (later rounds count up modulo 2^32).
    #[arg(long, default_value_t = 0)]
    first_round: u32,
    /// Collective id.
    #[arg(long, default_value_t = 1)]
    collective_id: u16,
    /// Values: normal (fresh N(0,1)-like tensors every round; the reference is the rank-order
    /// reduction) or exact (period-61 tables of small integers; the reference holds in any
    /// fold order).
    #[arg(long, default_value = "normal", value_parser = parse_values)]
    values: ValueKind,
    /// Seed of the values and the schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Time between two consecutive sends (µs).
    #[arg(long, default_value_t = 1)]
    gap_us: u64,
    /// Write `deterministic = false` (arrival-order float sums) into the config.
    #[arg(long)]
    non_deterministic: bool,
    /// Send each round's contributions in a random order across ranks and chunks.
    #[arg(long)]
    shuffle: bool,
    /// Fraction of contributions delivered twice.
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Fraction of contributions lost and retransmitted (flag RETRANSMIT).
    #[arg(long, default_value_t = 0.0)]
    drop: f64,
    /// Fraction of contributions resent (RETRANSMIT) after their round completed.
    #[arg(long, default_value_t = 0.0)]
    late: f64,
    /// Delay of a lost contribution's retransmission (µs).
    #[arg(long, default_value_t = 200)]
    retransmit_delay_us: u64,
}

fn parse_dtype(s: &str) -> Result<Dtype, String> {
    Dtype::from_name(s).ok_or_else(|| format!("expected f32, f16, bf16 or i32, found {s:?}"))
}

fn parse_values(s: &str) -> Result<ValueKind, String> {
    ValueKind::from_name(s).ok_or_else(|| format!("expected normal or exact, found {s:?}"))
}

fn parse_op(s: &str) -> Result<Op, String> {
    Op::from_name(s).ok_or_else(|| format!("expected sum, max or min, found {s:?}"))
}

fn parse_carriage(s: &str) -> Result<Carriage, String> {
    match s {
        "udp" => Ok(Carriage::Udp),
        "rocev2" => Ok(Carriage::Rocev2),
        _ => Err(format!("expected udp or rocev2, found {s:?}")),
    }
}

fn parse_family(s: &str) -> Result<Family, String> {
    match s {
        "v4" | "ipv4" => Ok(Family::V4),
        "v6" | "ipv6" => Ok(Family::V6),
        _ => Err(format!("expected v4 or v6, found {s:?}")),
    }
}

fn allreduce(a: AllreduceArgs) -> Result<()> {
    let params = Params {
        workers: a.workers,
        tensor_elements: a.tensor_elements,
        chunk_elements: a.chunk_elements,
        dtype: a.dtype,
        op: a.op,
        carriage: a.carriage,
        family: a.family,
        vlan: a.vlan,
        rounds: a.rounds,
        first_round: a.first_round,
        collective_id: a.collective_id,
        seed: a.seed,
        gap_us: a.gap_us,
        deterministic: !a.non_deterministic,
        impair: Impairments {
            shuffle: a.shuffle,
            duplicate: a.duplicate,
            drop: a.drop,
            late: a.late,
            retransmit_delay_us: a.retransmit_delay_us,
        },
        values: a.values,
    };
    let w = Workload::generate(params)?;
    let s = pktgen::write_dir(&w, &a.out)?;
    let c = w.counts;
    println!(
        "pktgen: {} packets, {} bytes, {} slots x {} workers, {} rounds ({} dropped+retransmitted, {} duplicates, {} late); {} results due -> {}",
        s.packets,
        s.bytes,
        s.slots,
        w.params.workers,
        s.rounds,
        c.dropped,
        c.duplicates,
        c.late,
        s.result_packets,
        a.out.display()
    );
    Ok(())
}

fn run(a: RunArgs) -> ExitCode {
    let opts = pktgen::live::RunOptions {
        duration_s: a.duration,
        json: a.json,
        csv: a.csv,
        quiet: a.quiet,
        eal_extra: a.eal,
        packets: a.packets,
    };
    match pktgen::live::run(&a.config, &opts) {
        Ok(s) => match s.failure() {
            // Wrong results, or slots refused or incomplete: the appliance failed the check.
            Some(why) => {
                eprintln!("pktgen: {why}");
                ExitCode::from(3)
            }
            None => ExitCode::SUCCESS,
        },
        Err(e) => {
            eprintln!("pktgen: {e}");
            ExitCode::from(match e {
                pktgen::live::RunError::Config(_) => 2,
                pktgen::live::RunError::Runtime(_) => 1,
            })
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Allreduce(a) => allreduce(a),
        Cmd::Run(a) => return run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pktgen: {e:#}");
            ExitCode::from(2)
        }
    }
}
