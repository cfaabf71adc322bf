//! The main lcore's wait while the workers run: until a stop is requested, `--duration` passes,
//! or a replay's input has been consumed (or stopped arriving). Meanwhile it restarts the
//! net_memif client ports that have no server (one that went away, or none yet at the start),
//! until they connect.

use crate::dpdk::{CumulativeStats, Port};
use crate::live;
use crate::pcapfile;
use crate::stop;
use std::time::{Duration, Instant};

/// How often a memif client port whose link is down is restarted to reconnect.
pub(super) const RECONNECT_INTERVAL: Duration = Duration::from_secs(1);

/// What the monitor does for one port.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Watch {
    /// A net_memif client (it connects only when started): restarted while its link is down.
    pub reconnect: bool,
    /// net_memif, which reports zero counts once its peer has gone: its driver counts are read
    /// every turn (1 ms) rather than every 100 ms.
    pub forgetful: bool,
}

/// How the watch ended.
pub(super) struct Watched {
    /// A replay's input ended short (the idle fallback fired before every record arrived).
    pub input_short: bool,
    /// Per port: times its link came back up after a restart ([`Port::reconnect`]).
    pub reconnects: Vec<u64>,
    /// Per port: the counts its PMD reported while the workers ran (read every 100 ms, every
    /// 1 ms for the [`Watch::forgetful`] ones), made cumulative across the PMD's resets
    /// ([`CumulativeStats`]).
    pub ethdev_seen: Vec<CumulativeStats>,
}

/// One memif client port's outage.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    last_try: Option<Instant>,
    tried: bool,
    said_error: bool,
    /// The port never started: its first start found no server ([`Port::start_or_wait`]).
    never_up: bool,
}

/// Waits on the main lcore until a stop is due (a stop asked by a signal included, see
/// [`stop::stop_asked`]). With `stats` = an interval, prints the periodic stats line on stderr
/// every interval ([`live::stats_line`]), each from the reading before: a runtime change of the
/// tables or collectives between them (a new board) skips no line and loses no growth. Ports
/// whose [`Watch`] says `reconnect` (net_memif clients: they connect only when started) are
/// restarted every [`RECONNECT_INTERVAL`] while
/// their link is down, the workers skipping them meanwhile; each outage and recovery is
/// logged on stderr unless `quiet`.
///
/// The ports' driver counts (`rte_eth_stats`) are read every 100 ms, and every turn (1 ms) for
/// ports whose [`Watch`] says `forgetful` (net_memif: it reports zeros once its peer has gone, so what
/// a connection counted after the last reading is lost with it).
///
/// A replay is over once net_pcap has consumed every record and error `expected` counts: each
/// record is a packet received (`ipackets`), a record read without an mbuf (`rx_nombuf`) or one
/// no mbuf chain could hold (`ierrors`); each read error of libpcap is one `ierrors`.
pub(super) fn monitor(
    ports: &mut [Port],
    watch: &[Watch],
    stats: Option<Duration>,
    expected: Option<pcapfile::Input>,
    duration: Option<Duration>,
    idle: Duration,
    quiet: bool,
) -> Watched {
    let start = Instant::now();
    let mut last_seen = 0u64;
    let mut last_change = Instant::now();
    // A port that never started (no memif server at its start) is in an outage already, said.
    let mut outages: Vec<Outage> = ports
        .iter()
        .map(|p| match p.started() {
            true => Outage::default(),
            false => Outage { since: Some(start), never_up: true, said_error: true, ..Outage::default() },
        })
        .collect();
    let mut reconnects = vec![0u64; ports.len()];
    let mut next_link_check = Instant::now();
    let mut ethdev_seen: Vec<CumulativeStats> = ports.iter().map(|p| CumulativeStats::new(p.stats())).collect();
    let done = |input_short, reconnects, ethdev_seen| Watched { input_short, reconnects, ethdev_seen };
    // The periodic stats line: the last reading and when it was taken.
    let reading = || live::current().map(|b| live::StatsReading::of(&b, &b.totals()));
    let mut last_stats: Option<(Option<live::StatsReading>, Instant)> = stats.map(|_| (reading(), Instant::now()));
    loop {
        if let (Some(every), Some((prev, at))) = (stats, &mut last_stats) {
            if at.elapsed() >= every {
                let now = reading();
                if let (Some(p), Some(n)) = (prev.as_ref(), now.as_ref()) {
                    let (dt, t) = (at.elapsed().as_secs_f64(), start.elapsed().as_secs_f64());
                    eprintln!("{}", live::stats_line(p, n, dt, t));
                }
                *prev = now;
                *at = Instant::now();
            }
        }
        if stop::quitting() || stop::stop_asked() {
            return done(false, reconnects, ethdev_seen);
        }
        if duration.is_some_and(|d| start.elapsed() >= d) {
            return done(false, reconnects, ethdev_seen);
        }
        // net_memif ports every turn: what a peer's connection counted reads 0 as soon as it
        // leaves, so the last reading before is all the run keeps of its last moments. A
        // reading counts only if the link is still up after it: the PMD marks the link down
        // before it tears the connection's rings down, one direction's count before the
        // other's, and a reading in between (one direction 0, the other not) would look like a
        // reset of the first and count it twice once the next connection resumes it.
        for ((seen, p), _) in ethdev_seen.iter_mut().zip(ports.iter()).zip(watch).filter(|(_, w)| w.forgetful) {
            let reading = p.stats();
            if p.link_up() {
                seen.update(reading);
            }
        }
        if Instant::now() >= next_link_check {
            next_link_check = Instant::now() + Duration::from_millis(100);
            for ((seen, p), _) in ethdev_seen.iter_mut().zip(ports.iter()).zip(watch).filter(|(_, w)| !w.forgetful) {
                seen.update(p.stats());
            }
            for (i, p) in ports.iter_mut().enumerate() {
                if watch.get(i).is_some_and(|w| w.reconnect) && watch_link(p, &mut outages[i], quiet) {
                    reconnects[i] += 1;
                }
            }
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
                return done(false, reconnects, ethdev_seen);
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
                return done(true, reconnects, ethdev_seen);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One look at a memif client port's link: an outage starts when it goes down (or at the start,
/// for a port whose first start found no server); from [`RECONNECT_INTERVAL`] on, the port is
/// restarted once per interval until the link is up. True when the link came back after a
/// restart (a first connection is no reconnection).
fn watch_link(p: &mut Port, o: &mut Outage, quiet: bool) -> bool {
    let now = Instant::now();
    if p.link_up() {
        let Some(since) = o.since.take() else { return false };
        let back = o.tried && !o.never_up;
        if !quiet {
            let again = if o.never_up { "" } else { " again" };
            eprintln!("dpu: port {}: link up{again} after {:.1} s", p.name(), since.elapsed().as_secs_f64());
        }
        *o = Outage::default();
        return back;
    }
    let since = *o.since.get_or_insert_with(|| {
        if !quiet {
            eprintln!(
                "dpu: port {}: link down (its memif server is gone); restarting the port every {} s until it connects",
                p.name(),
                RECONNECT_INTERVAL.as_secs()
            );
        }
        now
    });
    let due = now.duration_since(since) >= RECONNECT_INTERVAL
        && o.last_try.is_none_or(|t| now.duration_since(t) >= RECONNECT_INTERVAL);
    if due {
        o.last_try = Some(now);
        o.tried = true;
        if let Err(e) = p.reconnect() {
            if !quiet && !o.said_error {
                eprintln!("dpu: port {}: {e}; trying again every {} s", p.name(), RECONNECT_INTERVAL.as_secs());
            }
            o.said_error = true;
        }
    }
    false
}
