/* Headers bound by bindgen, and the shim's own declarations: one exported wrapper per DPDK
 * `static inline` function (or macro) the appliance calls on the fast path. */
#ifndef DPDK_SYS_SHIM_H
#define DPDK_SYS_SHIM_H

#include <stdint.h>
#include <rte_config.h>
#include <rte_common.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <rte_dev.h>
#include <rte_meter.h>
#include <rte_rcu_qsbr.h>
#include <rte_telemetry.h>

/* rte_eth_rx_burst(): receive up to nb_pkts mbufs from (port, queue). */
uint16_t shim_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t nb_pkts);
/* rte_eth_tx_burst(): hand up to nb_pkts mbufs to (port, queue); returns how many were taken. */
uint16_t shim_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t nb_pkts);
/* rte_pktmbuf_alloc(): one mbuf from the pool, or NULL. */
struct rte_mbuf *shim_pktmbuf_alloc(struct rte_mempool *mp);
/* rte_pktmbuf_alloc_bulk(): n mbufs or none; 0 on success. */
int shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n);
/* rte_mempool_get_bulk: n objects (mbufs of a pktmbuf pool, not reset), all or none (0 or -ENOENT). */
int shim_mempool_get_bulk(struct rte_mempool *mp, void **objs, unsigned int n);
/* rte_pktmbuf_free(): free a (possibly chained) mbuf. */
void shim_pktmbuf_free(struct rte_mbuf *m);
/* rte_pktmbuf_free_seg(): frees one segment (its next pointer cleared by the caller). */
void shim_pktmbuf_free_seg(struct rte_mbuf *m);
/* rte_pktmbuf_mtod(): pointer to the first data byte. */
void *shim_pktmbuf_mtod(struct rte_mbuf *m);
/* rte_pktmbuf_prepend/append/adj/trim: NULL or -1 when there is no room. */
char *shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
uint16_t shim_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t shim_pktmbuf_tailroom(const struct rte_mbuf *m);
/* rte_mbuf_refcnt_read() / rte_pktmbuf_refcnt_update(). */
uint16_t shim_mbuf_refcnt_read(const struct rte_mbuf *m);
void shim_pktmbuf_refcnt_update(struct rte_mbuf *m, int16_t v);
/* rte_pktmbuf_attach(): make mi (a fresh mbuf) an indirect mbuf sharing m's buffer (m's data
 * offset and length; the buffer's reference count, or its external buffer's, goes up by one). */
void shim_pktmbuf_attach(struct rte_mbuf *mi, struct rte_mbuf *m);
/* rte_errno (thread-local: never bind per_lcore__rte_errno directly). */
int shim_errno(void);
/* rte_lcore_id() (thread-local). */
unsigned int shim_lcore_id(void);
/* rte_rdtsc(): the TSC, in cycles. */
uint64_t shim_rdtsc(void);
/* rte_ring_enqueue_burst / dequeue_burst on pointer rings. */
unsigned int shim_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned int n);
unsigned int shim_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned int n);
unsigned int shim_ring_count(const struct rte_ring *r);
/* rte_ring_free_count: free slots (the ring holds capacity - count objects more). */
unsigned int shim_ring_free_count(const struct rte_ring *r);

/* RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP (macros bindgen cannot evaluate). */
uint64_t shim_rss_hf_ip_udp(void);
/* RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM (RTE_BIT64 macros, which bindgen
 * cannot evaluate): rx checksum verification by the NIC. */
uint64_t shim_rx_offload_ipv4_udp_cksum(void);
/* RTE_ETH_TX_OFFLOAD_MULTI_SEGS: the port transmits chained mbufs. */
uint64_t shim_tx_offload_multi_segs(void);

/* rte_meter comparison runs: one meter, a whole trace, no per-packet call across the FFI. */
enum shim_meter_kind { SHIM_METER_SRTCM = 0, SHIM_METER_TRTCM = 1, SHIM_METER_RFC4115 = 2 };
/* A profile in rte_meter's units (bytes/s, bytes). srTCM: c = (CIR, CBS), x = (unused, EBS);
 * trTCM: c = (CIR, CBS), x = (PIR, PBS); RFC 4115: c = (CIR, CBS), x = (EIR, EBS). */
struct shim_meter_params {
	enum shim_meter_kind kind;
	uint64_t c_rate, c_size, x_rate, x_size;
};
/* What rte_meter_*_profile_config made of the rates at rte_get_tsc_hz(): each bucket gains
 * bytes_per_period bytes every period TSC cycles (x: the P or E bucket; 0 for srTCM). */
struct shim_meter_rounding {
	uint64_t hz, c_period, c_bytes_per_period, x_period, x_bytes_per_period;
};
/* Configures the profile (rte_meter_*_profile_config, which reads rte_get_tsc_hz(): EAL must be
 * initialised) and one meter (rte_meter_*_config) whose buckets are full at t0 (TSC cycles),
 * then colours n packets: packet i of len[i] bytes at ts[i] cycles, colour-blind when in_colors
 * is NULL, else colour-aware with in_colors[i] (enum rte_color). Writes each colour (0 green,
 * 1 yellow, 2 red) to out[i] and the profile's rounding to *rounding (may be NULL).
 * Returns 0, or the negative errno of the profile or meter configuration. */
int shim_meter_run(const struct shim_meter_params *params, uint64_t t0, const uint64_t *ts,
	const uint32_t *len, const uint8_t *in_colors, uint32_t n, uint8_t *out,
	struct shim_meter_rounding *rounding);

/* rte_rcu_qsbr (lib/rcu): a reader thread's state changes, and the writer's grace period. */
void shim_rcu_qsbr_thread_online(struct rte_rcu_qsbr *v, unsigned int thread_id);
void shim_rcu_qsbr_thread_offline(struct rte_rcu_qsbr *v, unsigned int thread_id);
void shim_rcu_qsbr_quiescent(struct rte_rcu_qsbr *v, unsigned int thread_id);
/* rte_rcu_qsbr_start(): a new token; rte_rcu_qsbr_check(): 1 once every online reader reported
 * a quiescent state after the token was issued, else 0 (wait=false). */
uint64_t shim_rcu_qsbr_start(struct rte_rcu_qsbr *v);
int shim_rcu_qsbr_check(struct rte_rcu_qsbr *v, uint64_t t, bool wait);

#endif
