//! `dpu`: the software DPU appliance.
//!
//! ```text
//! dpu [--config conf/default.toml]                     run the config's ports
//! dpu -c CONF --rx 0=in.pcap --tx 0=a.pcap --tx 1=b.pcap   replay pcaps, exit when input is consumed
//! dpu -c CONF --duration 10 -- --lcores 0@0,1@1         extra EAL arguments after `--`
//! dpu --check -c CONF                                   validate the config and exit
//! ```
//! SIGINT and SIGTERM stop it; SIGHUP reloads the config's tables, groups and meters (the
//! other parts need a restart); `dpuctl` changes them through the control socket it prints.
//! Exit status: 0 on success, 1 when the appliance cannot run (DPDK, ports, inputs, a worker's
//! panic, an output that cannot be written whole) or a finite replay ended short or lost packets
//! for lack of resources, 2 for a bad configuration or command line. Every way out returns from
//! `main` (no `process::exit` after start-up), so the run's guards remove its temporary
//! directory and files.

use clap::Parser;

// A PMD's `munmap` of memory the workers may be reading (net_memif's when its peer leaves) waits
// for the workers' grace period first (dataplane::dpdk::rcu).
dataplane::guard_unmaps!();
// net_memif zero-copy closes EAL's memory-segment fds at each connection: they stay open
// (dataplane::dpdk::fdguard), so the next peer can map them.
dataplane::guard_closes!();

use dataplane::app::{self, AppError, Options};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The software DPU: a DPDK data-plane appliance for in-network gradient aggregation.
#[derive(Parser, Debug)]
#[command(name = "dpu", version, about)]
struct Cli {
    /// The TOML configuration.
    #[arg(short, long, default_value = "conf/default.toml")]
    config: PathBuf,
    /// Replay: read PORT's input from a pcap file (PORT=FILE; repeatable: several files for one
    /// port are merged by capture time). Every port then becomes a net_pcap vdev that reads its
    /// input once: these files, else the config's rx_pcap, else nothing. Relative paths are
    /// relative to the current directory, like the config's.
    #[arg(long, value_parser = port_file, value_name = "PORT=FILE")]
    rx: Vec<(usize, PathBuf)>,
    /// Replay: write what PORT sends to a pcap file (PORT=FILE; one per port; never an input).
    /// Ports without one write to the config's tx_pcap, else nowhere.
    #[arg(long, value_parser = port_file, value_name = "PORT=FILE")]
    tx: Vec<(usize, PathBuf)>,
    /// Stop after this many seconds, more than 0 (default: at the end of finite pcap input, else on SIGINT/SIGTERM).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    duration: Option<f64>,
    /// Also write the final stats as JSON to this file.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Print only errors.
    #[arg(short, long)]
    quiet: bool,
    /// Check the configuration and exit (0: valid, 2: the error, naming file and key), without
    /// starting DPDK: syntax, keys, ranges and references, not whether the devices exist.
    #[arg(long)]
    check: bool,
    /// Extra EAL arguments, appended to the config's `[eal] args`.
    #[arg(last = true)]
    eal: Vec<String>,
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v < 1e9 => Ok(v),
        _ => Err(format!("expected a number of seconds above 0, found {s:?}")),
    }
}

fn port_file(s: &str) -> Result<(usize, PathBuf), String> {
    let (p, f) = s.split_once('=').ok_or_else(|| format!("expected PORT=FILE, found {s:?}"))?;
    let p: usize = p.trim().parse().map_err(|_| format!("expected a port index before '=', found {p:?}"))?;
    if f.is_empty() {
        return Err("expected a file name after '='".into());
    }
    Ok((p, PathBuf::from(f)))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.check {
        return match dataplane::config::load(&cli.config) {
            Ok(l) => {
                println!(
                    "{}: ok: {} port(s), {} worker lcore(s), {} table(s), {} meter(s), {} collective(s)",
                    cli.config.display(),
                    l.config.ports.len(),
                    l.lcores().len(),
                    l.pipeline.tables.len(),
                    l.pipeline.meters.len(),
                    l.collectives.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dpu: error: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Err(e) = dataplane::control::install_signal_handlers() {
        eprintln!("dpu: {e}");
        return ExitCode::from(1);
    }
    let opts = Options {
        config: cli.config,
        rx: cli.rx,
        tx: cli.tx,
        duration: cli.duration.map(Duration::from_secs_f64),
        stats_json: cli.stats_json,
        eal_extra: cli.eal,
        quiet: cli.quiet,
    };
    match app::run(&opts) {
        Ok(summary) => {
            // The outputs and the stats JSON are in place (written, verified, synced, renamed).
            if !opts.quiet {
                print!("{}", summary.report());
            }
            if let Some(why) = summary.failure() {
                eprintln!("dpu: error: {why}");
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dpu: error: {e}");
            ExitCode::from(match e {
                AppError::Config(_) | AppError::Usage(_) => 2,
                _ => 1,
            })
        }
    }
}
