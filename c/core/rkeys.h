/*
 * rkeys.h — the session's memory regions by STag (rkey), for the rank's
 * side of an RD QP's fast path when it serves RDMA itself (fprd_rma_rx.h):
 * what the daemon's rnic checkRemote looks up (verbsd/rnic/remote.go:
 * STag of the session, PD, access rights, bounds), kept in c/core so that
 * the poll path finds a region without allocating or asking the daemon.
 *
 * iwv_reg_mr adds a region once the daemon registered it; iwv_dereg_mr
 * removes it before the daemon deregisters it, under the table's lock, so
 * that once iwv_dereg_mr returns the rank touches the region no more
 * (a lookup holds the lock for as long as it uses the memory). Internal to
 * libiwverbs.
 */
#ifndef IWV_RKEYS_H
#define IWV_RKEYS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct iwv_pd;

/* One region as the daemon registered it. */
struct iwvi_rkey_ent {
	uint32_t rkey;
	uint32_t access; /* IWV_ACCESS_* */
	const struct iwv_pd *pd;
	uint64_t addr; /* its address (the tagged offset of its first octet) */
	uint64_t len;
	uint8_t used;
};

/* The table: open addressing, linear probing, cap a power of 2 (or 0). */
struct iwvi_rkeys {
	pthread_mutex_t mu;
	struct iwvi_rkey_ent *t;
	uint32_t cap, n;
};

void iwvi_rkeys_init(struct iwvi_rkeys *k);
void iwvi_rkeys_free(struct iwvi_rkeys *k);

/* iwvi_rkeys_add records a region: 0 or -ENOMEM (the table grows here,
 * never in a lookup). A second region with the same rkey replaces it. */
int iwvi_rkeys_add(struct iwvi_rkeys *k, const struct iwvi_rkey_ent *e);

/* iwvi_rkeys_del forgets rkey (nothing if unknown). */
void iwvi_rkeys_del(struct iwvi_rkeys *k, uint32_t rkey);

/* iwvi_rkeys_lock / unlock bracket a lookup and every use of the memory
 * it found. */
void iwvi_rkeys_lock(struct iwvi_rkeys *k);
void iwvi_rkeys_unlock(struct iwvi_rkeys *k);

/* iwvi_rkeys_find (locked) returns rkey's region, or NULL. */
const struct iwvi_rkey_ent *iwvi_rkeys_find(const struct iwvi_rkeys *k, uint32_t rkey);

#endif
