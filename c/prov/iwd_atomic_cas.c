/*
 * iwd_atomic_cas.c — the fi_atomic(3) operations the daemon has no RFC 7306
 * message for, as the provider's compare-and-swap loop on the 8-aligned
 * word that holds the target (docs/atomics.md, "libfabric provider"):
 *
 *   FI_MIN FI_MAX FI_SUM FI_BOR FI_BAND FI_BXOR FI_ATOMIC_WRITE
 *   FI_ATOMIC_READ FI_CSWAP    on FI_INT32 FI_UINT32 (FI_INT64 FI_UINT64:
 *                              all but FI_SUM, FI_ATOMIC_READ, FI_CSWAP,
 *                              which are FetchAdd / CmpSwap themselves)
 *
 * Each round is one RFC 7306 CmpSwap that the target's daemon executes once
 * (exactly once on RD: docs/atomics.md "Exactly once on RD"):
 *
 *   expect = 0 (a guess); loop:
 *     CmpSwap(word, compare = expect, swap = f(expect)) -> got
 *     got == expect           : f was applied atomically; the original is got
 *     f(got) leaves got as is : nothing to write (MIN not lower, READ, a
 *                               CSWAP that does not match); the original is got
 *     else                    : expect = got, again
 *
 * A round fails only when another writer changed the word in between, so
 * the loop is lock-free (every failed round is someone else's success). A
 * 32-bit target is the low or high half of its word in host byte order (the
 * daemon's atomics are the host's uint64: docs/atomics.md "Atomicity"); the
 * other half is written back as read, so a concurrent change to it fails
 * the round and it is retried. The whole 8-aligned word must lie inside the
 * target's registration (the daemon refuses it otherwise: FI_EACCES).
 */
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

struct iwd_atomic_cas {
	const struct iwv_av *av; /* RDM: the peer (the AV entry outlives the operation) */
	uint64_t word;           /* the 8-aligned remote address */
	uint32_t rkey;
	unsigned shift;          /* 0 or 32: where a 32-bit target sits in the word */
	int size;                /* 4 or 8 */
	int is_signed;
	enum fi_op op;
	uint64_t operand, compare; /* in the low `size` octets */
	uint64_t expect;         /* the word the next CmpSwap compares with */
	void *result;            /* NULL: not fetching */
	uint32_t lkey;
	unsigned rounds;
};

static uint64_t mask_of(int size) { return size == 8 ? ~(uint64_t)0 : 0xffffffffu; }

/* The target's value in the word, zero-extended. */
static uint64_t get_val(const struct iwd_atomic_cas *c, uint64_t word) { return (word >> c->shift) & mask_of(c->size); }

static uint64_t put_val(const struct iwd_atomic_cas *c, uint64_t word, uint64_t v)
{
	uint64_t m = mask_of(c->size) << c->shift;
	return (word & ~m) | ((v << c->shift) & m);
}

static int less(const struct iwd_atomic_cas *c, uint64_t a, uint64_t b)
{
	if (!c->is_signed)
		return a < b;
	if (c->size == 4)
		return (int32_t)(uint32_t)a < (int32_t)(uint32_t)b;
	return (int64_t)a < (int64_t)b;
}

/* f(v): the value the operation leaves in the target (fi_atomic(3) "OPERATIONS"). */
static uint64_t apply(const struct iwd_atomic_cas *c, uint64_t v)
{
	uint64_t x = c->operand, r;
	switch (c->op) {
	case FI_MIN:
		r = less(c, x, v) ? x : v;
		break;
	case FI_MAX:
		r = less(c, v, x) ? x : v;
		break;
	case FI_SUM:
		r = v + x;
		break;
	case FI_BOR:
		r = v | x;
		break;
	case FI_BAND:
		r = v & x;
		break;
	case FI_BXOR:
		r = v ^ x;
		break;
	case FI_ATOMIC_WRITE:
		r = x;
		break;
	case FI_CSWAP:
		r = v == c->compare ? x : v;
		break;
	default: /* FI_ATOMIC_READ */
		r = v;
		break;
	}
	return r & mask_of(c->size);
}

int iwd_atomic_cas_supported(enum fi_datatype dt, enum fi_op op)
{
	if (dt != FI_INT32 && dt != FI_UINT32 && dt != FI_INT64 && dt != FI_UINT64)
		return 0;
	switch (op) {
	case FI_MIN:
	case FI_MAX:
	case FI_SUM:
	case FI_BOR:
	case FI_BAND:
	case FI_BXOR:
	case FI_ATOMIC_WRITE:
	case FI_ATOMIC_READ:
	case FI_CSWAP:
		return 1;
	default:
		return 0;
	}
}

static int post_round(struct iwd_ep *ep, struct iwd_tx *tx)
{
	struct iwd_atomic_cas *c = tx->cas;
	struct iwv_send_wr wr;
	struct iwv_sge sge = {(uint64_t)(uintptr_t)tx->bounce, sizeof(uint64_t), c->lkey};
	int ret;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)tx;
	wr.flags = IWV_SEND_SIGNALED;
	wr.num_sge = 1;
	wr.sg_list = &sge;
	wr.av = c->av;
	wr.remote_addr = c->word;
	wr.rkey = c->rkey;
	wr.opcode = IWV_WR_ATOMIC_CMP_AND_SWP;
	wr.compare_add = c->expect;
	wr.swap = put_val(c, c->expect, apply(c, get_val(c, c->expect)));
	c->rounds++;
	ret = iwd_ep_post_send(ep, &wr);
	if (!ret)
		tx->posted = 1;
	return ret;
}

/* The completion of one round (tx->done): finish, or post the next round
 * from the completion (the slot this completion freed takes it). */
static void cas_done(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_wc *wc)
{
	struct iwd_atomic_cas *c = tx->cas;
	int err = iwd_wc_errno(wc), prov_errno = wc->status;
	uint64_t got, orig;

	if (!err) {
		memcpy(&got, tx->bounce, sizeof(got));
		if (got != c->expect && apply(c, get_val(c, got)) != get_val(c, got)) {
			c->expect = got;
			if (!post_round(ep, tx))
				return;
			IWD_WARN(FI_LOG_EP_DATA, "iwarpd: atomic: posting compare-and-swap round %u failed\n",
				 c->rounds);
			err = FI_EIO;
			prov_errno = 0;
		}
	}
	if (err) {
		iwd_ep_tx_err(ep, tx->context, tx->flags, err, prov_errno, tx->cntr_kind);
	} else {
		orig = get_val(c, got);
		if (c->result) {
			if (c->size == 4) {
				uint32_t v = (uint32_t)orig;
				memcpy(c->result, &v, sizeof(v));
			} else {
				memcpy(c->result, &orig, sizeof(orig));
			}
		}
		iwd_ep_tx_done(ep, tx->context, tx->flags, tx->op_flags, (size_t)c->size, tx->cntr_kind);
	}
	iwd_tx_free(ep, tx);
}

int iwd_atomic_cas_start(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_av *av, uint64_t addr, uint32_t rkey,
			 enum fi_datatype dt, enum fi_op op, uint64_t operand, uint64_t compare, void *result)
{
	struct iwd_atomic_cas *c = calloc(1, sizeof(*c));
	if (!c)
		return -FI_ENOMEM;
	c->size = (dt == FI_INT32 || dt == FI_UINT32) ? 4 : 8;
	c->is_signed = dt == FI_INT32 || dt == FI_INT64;
	c->av = av;
	/* A misaligned target goes to the daemon as it is: it refuses it
	 * (FI_EACCES), as it refuses the FetchAdd and CmpSwap of one. */
	c->word = addr % (uint64_t)c->size ? addr : addr & ~(uint64_t)7;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	c->shift = (c->size == 4 && !(addr & 4)) ? 32 : 0;
#else
	c->shift = c->size == 4 ? (unsigned)(addr & 4) * 8 : 0; /* octet 4 of the word is bit 32 */
#endif
	c->rkey = rkey;
	c->op = op;
	c->operand = operand & mask_of(c->size);
	c->compare = compare & mask_of(c->size);
	c->result = result;
	c->lkey = iwd_pool_lkey(&ep->txp);
	tx->cas = c;
	tx->done = cas_done;
	return post_round(ep, tx);
}
