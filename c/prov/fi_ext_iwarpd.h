/*
 * fi_ext_iwarpd.h — what the iwarpd provider offers beyond libfabric's API,
 * through fi_open_ops(3) on a domain (as other providers' fi_ext_*.h do).
 *
 *   struct fi_iwarpd_stats_ops *ops;
 *   fi_open_ops(&domain->fid, FI_IWARPD_STATS_OPS, 0, (void **)&ops, NULL);
 *   ops->get(domain, &stats);
 *
 * Counters of the domain's fabric session with the daemon and of the
 * domain's registration cache (docs/libfabric.md "Registration cache"),
 * and of the receiver-ready rendezvous of its RDM endpoints (docs/libfabric.md
 * "Progress while both ranks compute"; those fields were appended in issue
 * 20: get fills the whole struct, so a caller must be built with this header).
 */
#ifndef FI_EXT_IWARPD_H
#define FI_EXT_IWARPD_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_domain.h>

#define FI_IWARPD_STATS_OPS "iwarpd_stats"

struct fi_iwarpd_stats {
	uint64_t control_calls;    /* control round trips of the fabric's session */
	uint64_t reg_mr_calls;     /* ... of them memory registrations */
	uint64_t dereg_mr_calls;   /* ... and deregistrations */
	uint64_t mr_cache_hits;    /* rendezvous sends that reused a cached registration */
	uint64_t mr_cache_misses;  /* ... that registered */
	uint64_t mr_cache_entries; /* registrations the cache holds now */
	uint64_t cts_offered;      /* receives that offered their staging to the sender (CTS sent) */
	uint64_t cts_accepted;     /* offers this side's senders took */
	uint64_t cts_stale;        /* ... found stale (a message of ours was in flight) and dropped */
	uint64_t cts_used;         /* rendezvous sends written into an offer (Write-Record + DONE) */
	uint64_t cts_declined;     /* held offers a message sent as before ended */
	uint64_t cts_done;         /* receives completed by a DONE */
	uint64_t cts_done_unexp;   /* DONEs of cancelled receives, taken as arriving messages */
	uint64_t credit_granted;   /* standing credits (landing zones) granted to peers */
	uint64_t credit_taken;     /* credits of peers this side's senders took */
	uint64_t credit_used;      /* rendezvous sends written into a peer's credit */
	uint64_t credit_done;      /* messages that arrived in a credit (DONE), matched on arrival */
};

struct fi_iwarpd_stats_ops {
	size_t size; /* sizeof(struct fi_iwarpd_stats_ops) */
	void (*get)(struct fid_domain *domain, struct fi_iwarpd_stats *out);
};

#endif /* FI_EXT_IWARPD_H */
