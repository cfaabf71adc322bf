/* Exported wrappers for DPDK's `static inline` fast-path functions; see shim.h. */
#include <errno.h>
#include "shim.h"

uint16_t shim_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t nb_pkts)
{ return rte_eth_rx_burst(port, queue, pkts, nb_pkts); }

uint16_t shim_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t nb_pkts)
{ return rte_eth_tx_burst(port, queue, pkts, nb_pkts); }

struct rte_mbuf *shim_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n)
{ return rte_pktmbuf_alloc_bulk(mp, mbufs, n); }

int shim_mempool_get_bulk(struct rte_mempool *mp, void **objs, unsigned int n)
{ return rte_mempool_get_bulk(mp, objs, n); }

void shim_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

void shim_pktmbuf_free_seg(struct rte_mbuf *m) { rte_pktmbuf_free_seg(m); }

void *shim_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }

char *shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
uint16_t shim_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t shim_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }

uint16_t shim_mbuf_refcnt_read(const struct rte_mbuf *m) { return rte_mbuf_refcnt_read(m); }
void shim_pktmbuf_refcnt_update(struct rte_mbuf *m, int16_t v) { rte_pktmbuf_refcnt_update(m, v); }
void shim_pktmbuf_attach(struct rte_mbuf *mi, struct rte_mbuf *m) { rte_pktmbuf_attach(mi, m); }

int shim_errno(void) { return rte_errno; }
unsigned int shim_lcore_id(void) { return rte_lcore_id(); }
uint64_t shim_rdtsc(void) { return rte_rdtsc(); }

unsigned int shim_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned int n)
{ return rte_ring_enqueue_burst(r, objs, n, NULL); }
unsigned int shim_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned int n)
{ return rte_ring_dequeue_burst(r, objs, n, NULL); }
unsigned int shim_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }
unsigned int shim_ring_free_count(const struct rte_ring *r) { return rte_ring_free_count(r); }

uint64_t shim_rss_hf_ip_udp(void) { return RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP; }
uint64_t shim_rx_offload_ipv4_udp_cksum(void)
{ return RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM; }
uint64_t shim_tx_offload_multi_segs(void) { return RTE_ETH_TX_OFFLOAD_MULTI_SEGS; }

#define SHIM_METER_LOOP(check, ...) do { \
	if (in_colors == NULL) \
		for (uint32_t i = 0; i < n; i++) \
			out[i] = (uint8_t)check##_color_blind_check(__VA_ARGS__, ts[i], len[i]); \
	else \
		for (uint32_t i = 0; i < n; i++) \
			out[i] = (uint8_t)check##_color_aware_check(__VA_ARGS__, ts[i], len[i], \
				(enum rte_color)in_colors[i]); \
} while (0)

int shim_meter_run(const struct shim_meter_params *params, uint64_t t0, const uint64_t *ts,
	const uint32_t *len, const uint8_t *in_colors, uint32_t n, uint8_t *out,
	struct shim_meter_rounding *rounding)
{
	struct shim_meter_rounding r = { .hz = rte_get_tsc_hz() };
	int ret;

	switch (params->kind) {
	case SHIM_METER_SRTCM: {
		struct rte_meter_srtcm_params pp = { .cir = params->c_rate, .cbs = params->c_size,
			.ebs = params->x_size };
		struct rte_meter_srtcm_profile p;
		struct rte_meter_srtcm m;
		if ((ret = rte_meter_srtcm_profile_config(&p, &pp)) != 0 || (ret = rte_meter_srtcm_config(&m, &p)) != 0)
			return ret;
		m.time = t0; /* rte_meter_srtcm_config started the buckets at the current TSC */
		r.c_period = p.cir_period;
		r.c_bytes_per_period = p.cir_bytes_per_period;
		SHIM_METER_LOOP(rte_meter_srtcm, &m, &p);
		break;
	}
	case SHIM_METER_TRTCM: {
		struct rte_meter_trtcm_params pp = { .cir = params->c_rate, .cbs = params->c_size,
			.pir = params->x_rate, .pbs = params->x_size };
		struct rte_meter_trtcm_profile p;
		struct rte_meter_trtcm m;
		if ((ret = rte_meter_trtcm_profile_config(&p, &pp)) != 0 || (ret = rte_meter_trtcm_config(&m, &p)) != 0)
			return ret;
		m.time_tc = m.time_tp = t0;
		r.c_period = p.cir_period;
		r.c_bytes_per_period = p.cir_bytes_per_period;
		r.x_period = p.pir_period;
		r.x_bytes_per_period = p.pir_bytes_per_period;
		SHIM_METER_LOOP(rte_meter_trtcm, &m, &p);
		break;
	}
	case SHIM_METER_RFC4115: {
		struct rte_meter_trtcm_rfc4115_params pp = { .cir = params->c_rate, .cbs = params->c_size,
			.eir = params->x_rate, .ebs = params->x_size };
		struct rte_meter_trtcm_rfc4115_profile p;
		struct rte_meter_trtcm_rfc4115 m;
		if ((ret = rte_meter_trtcm_rfc4115_profile_config(&p, &pp)) != 0 ||
		    (ret = rte_meter_trtcm_rfc4115_config(&m, &p)) != 0)
			return ret;
		m.time_tc = m.time_te = t0;
		r.c_period = p.cir_period;
		r.c_bytes_per_period = p.cir_bytes_per_period;
		r.x_period = p.eir_period;
		r.x_bytes_per_period = p.eir_bytes_per_period;
		SHIM_METER_LOOP(rte_meter_trtcm_rfc4115, &m, &p);
		break;
	}
	default:
		return -EINVAL;
	}
	if (rounding != NULL)
		*rounding = r;
	return 0;
}

void shim_rcu_qsbr_thread_online(struct rte_rcu_qsbr *v, unsigned int thread_id)
{ rte_rcu_qsbr_thread_online(v, thread_id); }
void shim_rcu_qsbr_thread_offline(struct rte_rcu_qsbr *v, unsigned int thread_id)
{ rte_rcu_qsbr_thread_offline(v, thread_id); }
void shim_rcu_qsbr_quiescent(struct rte_rcu_qsbr *v, unsigned int thread_id)
{ rte_rcu_qsbr_quiescent(v, thread_id); }
uint64_t shim_rcu_qsbr_start(struct rte_rcu_qsbr *v) { return rte_rcu_qsbr_start(v); }
int shim_rcu_qsbr_check(struct rte_rcu_qsbr *v, uint64_t t, bool wait)
{ return rte_rcu_qsbr_check(v, t, wait); }
