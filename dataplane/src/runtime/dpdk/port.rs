//! Ethernet ports: configuration with N rx / M tx queues, start, stop, close, stats and xstats.

use super::{DpdkError, Mempool};
use crate::wire::EthernetAddress;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

/// Ports DPDK can have (`RTE_MAX_ETHPORTS`): port ids are below it.
pub const MAX_PORTS: usize = dpdk_sys::RTE_MAX_ETHPORTS as usize;

/// Per DPDK port id: the port is being restarted ([`Port::reconnect`]), or was never started
/// ([`Port::start_or_wait`]); the worker lcores skip
/// its rx queues and drop what they would send on it (counted as `tx_full`).
static PAUSED: [AtomicBool; MAX_PORTS] = [const { AtomicBool::new(false) }; MAX_PORTS];

/// Whether port `id` is paused for a restart: lcores must neither receive nor send on it. One
/// relaxed load; the restart waits for the lcores' grace period ([`super::rcu`]) after pausing,
/// so a worker sees the pause from its next poll-loop turn on.
#[inline(always)]
pub fn paused(id: u16) -> bool {
    PAUSED.get(usize::from(id)).is_some_and(|p| p.load(Ordering::Relaxed))
}

/// Settings of one port's queues.
#[derive(Debug, Clone)]
pub struct PortSetup {
    /// Rx queues (one per worker lcore polling the port).
    pub rx_queues: u16,
    /// Tx queues (one per worker lcore: every worker can send on every port).
    pub tx_queues: u16,
    /// Rx descriptors per queue.
    pub rx_desc: u16,
    /// Tx descriptors per queue.
    pub tx_desc: u16,
    /// MTU to set (bytes of L3 payload), if any.
    pub mtu: Option<u16>,
    /// MAC address to set as the port's default, if any.
    pub mac: Option<EthernetAddress>,
}

/// A configured DPDK ethdev port.
#[derive(Debug)]
pub struct Port {
    id: u16,
    name: String,
    started: bool,
    rx_offloads: u64,
    /// Whether RTE_ETH_TX_OFFLOAD_MULTI_SEGS was offered and enabled.
    tx_multi_segs: bool,
}

/// The basic counters of a port (`struct rte_eth_stats`): packets and bytes.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets the hardware dropped for lack of rx descriptors.
    pub imissed: u64,
    /// Packets received in error (net_pcap: records it could not read).
    pub ierrors: u64,
    /// Packets that failed to send.
    pub oerrors: u64,
    /// Receive-side mbuf allocation failures (net_pcap loses the record it was reading).
    pub rx_nombuf: u64,
}

impl PortStats {
    /// The counts of traffic (packets and bytes either way) are all zero: what net_memif
    /// reports while it has no peer (it sums only the rings of the current connection).
    fn no_traffic(&self) -> bool {
        self.ipackets == 0 && self.opackets == 0 && self.ibytes == 0 && self.obytes == 0
    }

    /// The fields, in declaration order, mutably.
    fn fields_mut(&mut self) -> [&mut u64; 8] {
        let PortStats { ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf } = self;
        [ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf]
    }
}

/// The server socket a `net_memif` client vdev (`role=client`, DPDK's default role) connects
/// to: its `socket=` argument, else DPDK's default `/run/memif.sock`; `None` when `vdev` is not a
/// memif client. One reading for the appliance and pktgen.
pub fn memif_client_socket(vdev: &str) -> Option<String> {
    let mut parts = vdev.split(',');
    if !parts.next()?.trim().starts_with("net_memif") {
        return None;
    }
    let (mut client, mut socket) = (true, None);
    for kv in parts {
        match kv.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("role", r)) => client = r == "client",
            Some(("socket", v)) => socket = Some(v.to_string()),
            _ => {}
        }
    }
    client.then(|| socket.unwrap_or_else(|| "/run/memif.sock".to_string()))
}

/// A port's counters (`rte_eth_stats`) read again and again, made cumulative across the PMD's
/// resets. Field by field, a reading lower than the previous one means the PMD started again
/// from 0 (a PMD that zeroes its counts when its port restarts): the previous reading is added
/// to a base, and the total is the base plus the last reading. A reading with no traffic at all (packets and bytes both ways 0) is skipped: it is
/// what net_memif reports while it has no peer (DPDK 22.11 sums only the current connection's
/// rings, and resumes its old counts at the next connection), which tells nothing, and must not
/// make the resumed counts add up twice.
#[derive(Debug, Clone, Copy, Default)]
pub struct CumulativeStats {
    base: PortStats,
    last: PortStats,
}

impl CumulativeStats {
    /// Starts from the first reading `first`.
    pub fn new(first: PortStats) -> CumulativeStats {
        let mut c = CumulativeStats::default();
        c.update(first);
        c
    }

    /// Takes a new reading (see the type's rule).
    pub fn update(&mut self, reading: PortStats) {
        if reading.no_traffic() && !self.last.no_traffic() {
            return;
        }
        let mut reading = reading;
        for ((base, last), now) in
            self.base.fields_mut().into_iter().zip(self.last.fields_mut()).zip(reading.fields_mut())
        {
            if *now < *last {
                *base += *last;
            }
            *last = *now;
        }
    }

    /// What the port counted in all, over every reset seen.
    pub fn total(&self) -> PortStats {
        let mut t = self.base;
        let mut last = self.last;
        for (t, l) in t.fields_mut().into_iter().zip(last.fields_mut()) {
            *t += *l;
        }
        t
    }
}

impl Port {
    /// Finds the port whose device name is `name` (a vdev name like `net_pcap0` or a PCI
    /// address like `0000:3b:00.0`), as probed by EAL.
    pub fn by_name(name: &str) -> Result<u16, DpdkError> {
        let c = CString::new(name).map_err(|_| DpdkError::new("port lookup", "name holds a NUL byte"))?;
        let mut id: u16 = 0;
        // SAFETY: valid C string and out-parameter.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
        if ret != 0 {
            return Err(DpdkError::new(
                format!("device {name}"),
                "EAL did not create it: the vdev failed to probe (see the driver's message above; net_pcap opens \
                 its files at probe time) or the PCI device is not bound to a DPDK-compatible driver",
            ));
        }
        Ok(id)
    }

    /// The largest frame port `id` accepts to be configured for (bytes, Ethernet header and FCS
    /// included): `max_rx_pktlen` of `rte_eth_dev_info_get`. An MTU is accepted by
    /// `rte_eth_dev_configure` while MTU + 18 stays at or below it (net_memif in DPDK 22.11 says
    /// 1518, yet passes longer frames, chained over its buffers in copy mode).
    ///
    /// Errors: `rte_eth_dev_info_get` fails (no such port).
    pub fn max_frame_len(id: u16) -> Result<u32, DpdkError> {
        // SAFETY: zeroed rte_eth_dev_info is a valid out-parameter.
        let mut info: dpdk_sys::rte_eth_dev_info = unsafe { std::mem::zeroed() };
        // SAFETY: valid port id checked by rte_eth_dev_info_get itself.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(id, &mut info) };
        if ret != 0 {
            return Err(DpdkError::from_ret(format!("rte_eth_dev_info_get(port {id})"), ret));
        }
        Ok(info.max_rx_pktlen)
    }

    /// Configures port `id` with `setup`'s queues on `pool` and starts it (promiscuous).
    ///
    /// Errors: more queues than the device has (net_pcap has one rx queue per `rx_pcap` and
    /// one tx queue per `tx_pcap`), descriptor counts the device refuses, or a start failure
    /// (for net_pcap: an input file that cannot be opened or an output that cannot be created).
    /// A failed start closes the port (a net_memif device is then gone): to wait for a memif
    /// server, use [`Port::start_or_wait`] and [`Port::reconnect`].
    pub fn start(id: u16, name: &str, setup: &PortSetup, pool: &Mempool) -> Result<Port, DpdkError> {
        let (port, failed) = Self::start_or_wait(id, name, setup, pool)?;
        match failed {
            Some(e) => Err(e),
            None => Ok(port),
        }
    }

    /// As [`Port::start`], but a failure of the start itself (`rte_eth_dev_start`: a net_memif
    /// client whose server is not there yet) leaves the port configured, stopped and [`paused`]
    /// (the worker lcores skip it) and comes back as the second value, for [`Port::reconnect`]
    /// to start it later. Errors: those of the configuration, as [`Port::start`]'s.
    pub fn start_or_wait(
        id: u16,
        name: &str,
        setup: &PortSetup,
        pool: &Mempool,
    ) -> Result<(Port, Option<DpdkError>), DpdkError> {
        let what = |op: &str| format!("{op}(port {id} {name})");
        // SAFETY: zeroed rte_eth_dev_info is a valid out-parameter.
        let mut info: dpdk_sys::rte_eth_dev_info = unsafe { std::mem::zeroed() };
        // SAFETY: valid port id checked by rte_eth_dev_info_get itself.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(id, &mut info) };
        if ret != 0 {
            return Err(DpdkError::from_ret(what("rte_eth_dev_info_get"), ret));
        }
        if setup.rx_queues > info.max_rx_queues || setup.tx_queues > info.max_tx_queues {
            return Err(DpdkError::new(
                what("rte_eth_dev_configure"),
                format!(
                    "needs {} rx and {} tx queues (one tx queue per worker lcore), the device has {} and {}",
                    setup.rx_queues, setup.tx_queues, info.max_rx_queues, info.max_tx_queues
                ),
            ));
        }
        // SAFETY: an all-zero rte_eth_conf is DPDK's default configuration.
        let mut conf: dpdk_sys::rte_eth_conf = unsafe { std::mem::zeroed() };
        // SAFETY: returns a constant.
        let rss = info.flow_type_rss_offloads & unsafe { dpdk_sys::shim_rss_hf_ip_udp() };
        if setup.rx_queues > 1 && rss != 0 {
            conf.rxmode.mq_mode = dpdk_sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss;
        }
        if let Some(mtu) = setup.mtu {
            conf.rxmode.mtu = mtu as u32;
        }
        // Rx checksum verification (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM, RTE_ETH_RX_OFFLOAD_UDP_CKSUM),
        // each only if the device offers it (`rx_offload_capa`): the PMD then sets the
        // RTE_MBUF_F_RX_*_CKSUM_GOOD/BAD flags that the parser trusts instead of summing again.
        // Without it (net_pcap, net_af_packet) the flags stay UNKNOWN and the parser verifies.
        // SAFETY: returns a constant.
        let rx_offloads = info.rx_offload_capa & unsafe { dpdk_sys::shim_rx_offload_ipv4_udp_cksum() };
        conf.rxmode.offloads |= rx_offloads;
        // Chained mbufs on tx (RTE_ETH_TX_OFFLOAD_MULTI_SEGS) where the device offers it: jumbo
        // transit frames received over several segments, and RESULT frames sent as a header
        // mbuf chained to the shared payload (`[dataplane] zero_copy_results`). The software
        // vdevs take chains whether they list it or not (`app/start.rs: CHAIN_VDEVS`).
        // SAFETY: returns a constant.
        let multi_segs = info.tx_offload_capa & unsafe { dpdk_sys::shim_tx_offload_multi_segs() };
        conf.txmode.offloads |= multi_segs;
        // SAFETY: conf is fully initialised.
        let ret = unsafe { dpdk_sys::rte_eth_dev_configure(id, setup.rx_queues, setup.tx_queues, &conf) };
        if ret != 0 {
            return Err(DpdkError::from_ret(what("rte_eth_dev_configure"), ret));
        }
        let mut rx_desc = setup.rx_desc;
        let mut tx_desc = setup.tx_desc;
        // SAFETY: plain in/out parameters.
        let ret = unsafe { dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rx_desc, &mut tx_desc) };
        if ret != 0 {
            return Err(DpdkError::from_ret(what("rte_eth_dev_adjust_nb_rx_tx_desc"), ret));
        }
        // SAFETY: a valid port id.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id) };
        let socket = if socket < 0 { dpdk_sys::SOCKET_ID_ANY } else { socket };
        for q in 0..setup.rx_queues {
            // SAFETY: the port is configured; NULL rxconf means the device default.
            let ret = unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(id, q, rx_desc, socket as u32, std::ptr::null(), pool.as_ptr())
            };
            if ret != 0 {
                return Err(DpdkError::from_ret(format!("rte_eth_rx_queue_setup(port {id} {name}, queue {q})"), ret));
            }
        }
        for q in 0..setup.tx_queues {
            // SAFETY: the port is configured; NULL txconf means the device default.
            let ret = unsafe { dpdk_sys::rte_eth_tx_queue_setup(id, q, tx_desc, socket as u32, std::ptr::null()) };
            if ret != 0 {
                return Err(DpdkError::from_ret(format!("rte_eth_tx_queue_setup(port {id} {name}, queue {q})"), ret));
            }
        }
        if let Some(mac) = setup.mac {
            let mut addr = dpdk_sys::rte_ether_addr { addr_bytes: mac.0 };
            // SAFETY: valid out/in parameter.
            let ret = unsafe { dpdk_sys::rte_eth_dev_default_mac_addr_set(id, &mut addr) };
            // Drivers without MAC programming (net_pcap, net_null) refuse with ENOTSUP: the
            // configured MAC is then only the source of the appliance's own packets.
            if ret != 0 && ret != -(libc::ENOTSUP) {
                return Err(DpdkError::from_ret(what("rte_eth_dev_default_mac_addr_set"), ret));
            }
        }
        let mut port = Port { id, name: name.to_string(), started: false, rx_offloads, tx_multi_segs: multi_segs != 0 };
        // SAFETY: the port is configured with its queues.
        let ret = unsafe { dpdk_sys::rte_eth_dev_start(id) };
        if ret != 0 {
            PAUSED[usize::from(id)].store(true, Ordering::SeqCst);
            return Ok((port, Some(DpdkError::from_ret(what("rte_eth_dev_start"), ret))));
        }
        port.started = true;
        // Promiscuous mode is best effort: some PMDs (net_null) do not support it.
        // SAFETY: a started port.
        unsafe { dpdk_sys::rte_eth_promiscuous_enable(id) };
        Ok((port, None))
    }

    /// The DPDK port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Whether the port is started: false for one whose start is still to succeed
    /// ([`Port::start_or_wait`], [`Port::reconnect`]).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether the link is up now (`rte_eth_link_get_nowait`, which does not wait); a PMD that
    /// cannot tell (an error such as -ENOTSUP) counts as up; a port not started is down.
    pub fn link_up(&self) -> bool {
        if !self.started {
            return false;
        }
        // SAFETY: a plain C struct of integers, written by DPDK for a valid port id.
        let mut link: dpdk_sys::rte_eth_link = unsafe { std::mem::zeroed() };
        // SAFETY: a started port and a valid out-pointer.
        let rc = unsafe { dpdk_sys::rte_eth_link_get_nowait(self.id, &mut link) };
        rc != 0 || link.link_status() != 0
    }

    /// The device name (vdev name or PCI address).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the device offered, and the port enabled, chained mbufs on tx
    /// (`RTE_ETH_TX_OFFLOAD_MULTI_SEGS`).
    pub fn tx_multi_segs(&self) -> bool {
        self.tx_multi_segs
    }

    /// The rx checksum offloads enabled on the port (`RTE_ETH_RX_OFFLOAD_IPV4_CKSUM` and
    /// `RTE_ETH_RX_OFFLOAD_UDP_CKSUM` bits, those of the two the device supports).
    pub fn rx_checksum_offloads(&self) -> u64 {
        self.rx_offloads
    }

    /// The port's MAC address (`rte_eth_macaddr_get`).
    pub fn mac(&self) -> EthernetAddress {
        let mut addr = dpdk_sys::rte_ether_addr { addr_bytes: [0; 6] };
        // SAFETY: valid out-parameter.
        unsafe { dpdk_sys::rte_eth_macaddr_get(self.id, &mut addr) };
        EthernetAddress(addr.addr_bytes)
    }

    /// The port's basic counters (`rte_eth_stats_get`), as the PMD reports them now (net_memif's
    /// restart from 0 at each connection: [`CumulativeStats`] adds them up).
    pub fn stats(&self) -> PortStats {
        stats_of(self.id)
    }

    /// Packets and bytes tx queue `queue` sent (`rte_eth_stats_get`'s `q_opackets` and
    /// `q_obytes`); `None` for queues from `RTE_ETHDEV_QUEUE_STAT_CNTRS` (16) on, which those
    /// arrays do not reach, or when the PMD cannot tell. net_pcap counts what it handed to
    /// `pcap_dump` for the queue's file.
    pub fn tx_queue_stats(&self, queue: u16) -> Option<(u64, u64)> {
        // SAFETY: zeroed out-parameter.
        let mut s: dpdk_sys::rte_eth_stats = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-parameter.
        let ret = unsafe { dpdk_sys::rte_eth_stats_get(self.id, &mut s) };
        let q = usize::from(queue);
        (ret == 0 && q < s.q_opackets.len()).then(|| (s.q_opackets[q], s.q_obytes[q]))
    }

    /// The port's extended counters (`rte_eth_xstats_get`), by name.
    pub fn xstats(&self) -> Vec<(String, u64)> {
        // SAFETY: NULL/0 asks for the count.
        let n = unsafe { dpdk_sys::rte_eth_xstats_get_names(self.id, std::ptr::null_mut(), 0) };
        if n <= 0 {
            return Vec::new();
        }
        // SAFETY: both are plain C structs (integers and a char array) for which all-zero bytes
        // are a valid value; zeroed arrays are valid out-parameters of the size given.
        let mut names: Vec<dpdk_sys::rte_eth_xstat_name> = vec![unsafe { std::mem::zeroed() }; n as usize];
        // SAFETY: as above.
        let mut vals: Vec<dpdk_sys::rte_eth_xstat> = vec![unsafe { std::mem::zeroed() }; n as usize];
        // SAFETY: arrays of n elements.
        let got_n = unsafe { dpdk_sys::rte_eth_xstats_get_names(self.id, names.as_mut_ptr(), n as u32) };
        // SAFETY: arrays of n elements.
        let got_v = unsafe { dpdk_sys::rte_eth_xstats_get(self.id, vals.as_mut_ptr(), n as u32) };
        if got_n <= 0 || got_v <= 0 {
            return Vec::new();
        }
        vals.iter()
            .take(got_v as usize)
            .filter_map(|v| {
                let name = names.get(v.id as usize)?;
                // SAFETY: DPDK writes NUL-terminated names into the fixed-size array.
                let s = unsafe { CStr::from_ptr(name.name.as_ptr()) }.to_string_lossy().into_owned();
                Some((s, v.value))
            })
            .collect()
    }

    /// Restarts the port while the worker lcores run (`rte_eth_dev_stop`, `rte_eth_dev_start`):
    /// how a net_memif client, which connects only when its port starts, reaches a server that
    /// came back. The port is [`paused`] first and the lcores' grace period awaited
    /// ([`super::rcu::workers`]), so no lcore is in a burst on it; it is resumed only once
    /// started again. Errors: the grace period timed out, or the stop or start failed (a memif
    /// server not there yet): the port then stays paused and stopped, and a later call tries
    /// again.
    pub fn reconnect(&mut self) -> Result<(), DpdkError> {
        let what = |call: &str| format!("{call}(port {}, {})", self.id, self.name);
        let flag = &PAUSED[usize::from(self.id)];
        flag.store(true, Ordering::SeqCst);
        if !super::rcu::workers().synchronize(super::rcu::GRACE_TIMEOUT) {
            if self.started {
                flag.store(false, Ordering::SeqCst);
            }
            return Err(DpdkError::new(what("pause"), "the worker lcores did not pass a quiescent state"));
        }
        if self.started {
            self.started = false;
            // SAFETY: a started port that no lcore polls (paused, grace period over).
            let ret = unsafe { dpdk_sys::rte_eth_dev_stop(self.id) };
            if ret != 0 {
                return Err(DpdkError::from_ret(what("rte_eth_dev_stop"), ret));
            }
        }
        // SAFETY: a configured, stopped port that no lcore polls.
        let ret = unsafe { dpdk_sys::rte_eth_dev_start(self.id) };
        if ret != 0 {
            return Err(DpdkError::from_ret(what("rte_eth_dev_start"), ret));
        }
        // SAFETY: a started port.
        unsafe { dpdk_sys::rte_eth_promiscuous_enable(self.id) };
        self.started = true;
        flag.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Stops the port (`rte_eth_dev_stop`): net_pcap closes and flushes its output files here.
    pub fn stop(&mut self) -> Result<(), DpdkError> {
        if self.started {
            self.started = false;
            // SAFETY: a started port; no lcore polls it any more.
            let ret = unsafe { dpdk_sys::rte_eth_dev_stop(self.id) };
            if ret != 0 {
                return Err(DpdkError::from_ret(format!("rte_eth_dev_stop(port {})", self.id), ret));
            }
        }
        Ok(())
    }
}

/// The counters of port `id` (`rte_eth_stats_get`); zeros if the port is invalid.
pub fn stats_of(id: u16) -> PortStats {
    // SAFETY: zeroed out-parameter.
    let mut s: dpdk_sys::rte_eth_stats = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-parameter; an invalid id returns an error and leaves zeros.
    unsafe { dpdk_sys::rte_eth_stats_get(id, &mut s) };
    PortStats {
        ipackets: s.ipackets,
        opackets: s.opackets,
        ibytes: s.ibytes,
        obytes: s.obytes,
        imissed: s.imissed,
        ierrors: s.ierrors,
        oerrors: s.oerrors,
        rx_nombuf: s.rx_nombuf,
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        let _ = self.stop();
        // SAFETY: the port is stopped and no lcore uses it.
        unsafe { dpdk_sys::rte_eth_dev_close(self.id) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(opackets: u64) -> PortStats {
        PortStats { opackets, obytes: 64 * opackets, ..Default::default() }
    }

    /// A reading below the last one is a restart from 0: 10, 20, then 5 and 8 of a new
    /// connection make 28.
    #[test]
    fn readings_add_up_across_a_restart() {
        let mut c = CumulativeStats::new(tx(10));
        for r in [20, 5, 8] {
            c.update(tx(r));
        }
        assert_eq!((c.total().opackets, c.total().obytes), (28, 28 * 64));
        // Field by field: a counter that kept growing (rx_nombuf, kept by ethdev) is not added.
        let mut c = CumulativeStats::new(PortStats { opackets: 10, rx_nombuf: 3, ..Default::default() });
        c.update(PortStats { opackets: 4, rx_nombuf: 5, ..Default::default() });
        assert_eq!((c.total().opackets, c.total().rx_nombuf), (14, 5));
    }

    /// The zeros of a port without peer tell nothing: a PMD that restarts from 0 and one that
    /// resumes its old counts at the next connection are both counted right.
    #[test]
    fn a_reading_without_traffic_is_skipped() {
        let mut restarts = CumulativeStats::new(tx(100));
        let mut resumes = restarts;
        for (a, b) in [(0, 0), (0, 0), (30, 130), (40, 140)] {
            restarts.update(tx(a));
            resumes.update(tx(b));
        }
        assert_eq!(restarts.total().opackets, 140);
        assert_eq!(resumes.total().opackets, 140);
        // Never a reading: zeros.
        assert_eq!(CumulativeStats::new(PortStats::default()).total().opackets, 0);
    }
}
