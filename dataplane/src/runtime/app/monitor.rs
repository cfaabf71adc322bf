//! The main lcore's wait while the workers run: until a stop is requested, `--duration` passes,
//! or a replay's input has been consumed (or stopped arriving).

use crate::dpdk::Port;
use crate::pcapfile;
use crate::worker;
use std::time::{Duration, Instant};

/// Waits on the main lcore until a stop is due. Returns true if a replay's input ended short
/// (the idle fallback fired before every record arrived).
///
/// A replay is over once net_pcap has consumed every record and error `expected` counts: each
/// record is a packet received (`ipackets`), a record read without an mbuf (`rx_nombuf`) or one
/// no mbuf chain could hold (`ierrors`); each read error of libpcap is one `ierrors`.
pub(super) fn monitor(
    ports: &[Port],
    expected: Option<pcapfile::Input>,
    duration: Option<Duration>,
    idle: Duration,
    quiet: bool,
) -> bool {
    let start = Instant::now();
    let mut last_seen = 0u64;
    let mut last_change = Instant::now();
    loop {
        if worker::quitting() {
            return false;
        }
        if duration.is_some_and(|d| start.elapsed() >= d) {
            return false;
        }
        if let Some(input) = expected {
            let want = input.records + input.errors;
            let seen: u64 = ports
                .iter()
                .map(|p| {
                    let s = p.stats();
                    s.ipackets + s.rx_nombuf + s.ierrors
                })
                .sum();
            if seen >= want {
                return false;
            }
            if seen != last_seen {
                last_seen = seen;
                last_change = Instant::now();
            } else if last_change.elapsed() >= idle {
                if !quiet {
                    eprintln!(
                        "dpu: input ended short: {seen} of {want} records (and read errors) consumed after {} ms without input",
                        idle.as_millis()
                    );
                }
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
