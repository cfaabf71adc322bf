/* Exported wrappers for DPDK's `static inline` fast-path functions; see shim.h. */
#include "shim.h"

uint16_t shim_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t nb_pkts)
{ return rte_eth_rx_burst(port, queue, pkts, nb_pkts); }

uint16_t shim_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t nb_pkts)
{ return rte_eth_tx_burst(port, queue, pkts, nb_pkts); }

struct rte_mbuf *shim_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n)
{ return rte_pktmbuf_alloc_bulk(mp, mbufs, n); }

void shim_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

void *shim_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }

char *shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
uint16_t shim_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t shim_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }

uint16_t shim_mbuf_refcnt_read(const struct rte_mbuf *m) { return rte_mbuf_refcnt_read(m); }
void shim_pktmbuf_refcnt_update(struct rte_mbuf *m, int16_t v) { rte_pktmbuf_refcnt_update(m, v); }

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
