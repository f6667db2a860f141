/*
 * fprq.c — the rank consumes its UD QP's posted receives while it owns the
 * QP's socket (fprq.h).
 */
#include <errno.h>

#include "fprq.h"
#include "ring.h"

/* check: the rank owns the socket now and the QP has a queue of its own;
 * under the ring's lock, the consumer index and how many entries wait. */
static int rq_at(struct iwvi_fp_own *o, uint32_t *cons)
{
	struct ring *r = &o->qp->rq.ring;
	uint32_t c = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
	uint32_t n = r->pub - c; /* our own published producer index */
	if (n > r->depth)
		return -EIO;
	*cons = c;
	return n ? 0 : -EAGAIN;
}

static int usable(const struct iwvi_fp_own *o)
{
	if (!o->qp || !o->in_busy)
		return -EPERM;
	if (o->qp->srq)
		return -EOPNOTSUPP;
	return 0;
}

void iwvi_fp_rq_attach(struct iwvi_fp_own *o)
{
	if (o->qp && !o->qp->srq)
		o->qp->fp_owner = (const uint32_t *)(const void *)(o->page + W_OFF_FP_OWNER);
}

int iwvi_fp_rq_head(struct iwvi_fp_own *o, struct iwvi_fp_rqe *out)
{
	int err = usable(o);
	if (err)
		return err;
	struct ring *r = &o->qp->rq.ring;
	uint32_t c;
	pthread_mutex_lock(&r->lock);
	err = rq_at(o, &c);
	if (!err) { /* our own entry (post_rq wrote it) */
		const uint8_t *slot = ring_slot(r, c);
		out->wr_id = w_get64(slot);
		out->num_sge = w_get16(slot + 8);
		if (out->num_sge > IWVI_FP_RQE_SGE || out->num_sge > o->qp->rq.max_sge)
			err = -E2BIG;
		for (unsigned i = 0; !err && i < out->num_sge; i++) {
			const uint8_t *b = slot + W_RQE_HEADER_LEN + i * W_SGE_LEN;
			out->sge[i] = (struct iwv_sge){w_get64(b), w_get32(b + 8), w_get32(b + 12)};
		}
	}
	pthread_mutex_unlock(&r->lock);
	return err;
}

int iwvi_fp_rq_consume(struct iwvi_fp_own *o)
{
	int err = usable(o);
	if (err)
		return err;
	struct ring *r = &o->qp->rq.ring;
	uint32_t c;
	pthread_mutex_lock(&r->lock);
	err = rq_at(o, &c);
	if (!err)
		__atomic_store_n(r->consumer, c + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&r->lock);
	return err;
}
