/*
 * post.c — posting work requests (ofverbs/post.go, ibv_post_send(3)): each
 * request is encoded straight into its ring slot (proto.SQE/RQE header,
 * then SGEs or inline bytes), the batch is published with one store of the
 * producer index, and the doorbell eventfd is written only when the status
 * page says the engine sleeps. No system call per work request while the
 * daemon polls; no allocation; no lock (the caller serializes per queue).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static void ring_doorbell(struct iwv_session *s)
{
	/* After the sequentially consistent publish (ring.h): the engine
	 * stores Asleep, then rescans, so one of us sees the other. */
	if (__atomic_load_n(s->asleep, __ATOMIC_SEQ_CST) == 1) {
		uint64_t one = 1;
		ssize_t n = write(s->doorbell, &one, sizeof one);
		(void)n; /* EAGAIN: the counter is already non-zero, the engine will wake */
	}
}

void iwvi_ring_doorbell(struct iwv_session *s)
{
	ring_doorbell(s);
}

static void put_sge(uint8_t *b, const struct iwv_sge *sge)
{
	w_put64(b, sge->addr);
	w_put32(b + 8, sge->length);
	w_put32(b + 12, sge->lkey);
}

/* check_send checks what the slot layout depends on and returns the inline
 * length (or a negative errno). */
static int64_t check_send(struct iwv_qp *qp, const struct iwv_send_wr *w)
{
	if (w->flags & ~W_SEND_FLAGS_ALL)
		return iwvi_seterr(qp->s, EINVAL, "post-send: work request %llu: unknown flags %#x",
			      (unsigned long long)w->wr_id, w->flags);
	if (w->num_sge > 0 && !w->sg_list)
		return iwvi_seterr(qp->s, EINVAL, "post-send: work request %llu: %u SGEs and no list",
			      (unsigned long long)w->wr_id, w->num_sge);
	if (qp->type != IWV_QPT_RC && w->av && !w->remote_qkey && !w->av->qkey)
		return iwvi_seterr(qp->s, EINVAL,
			      "post-send: work request %llu names no Q_Key: set av->qkey (iwv_qp_av of the peer QP) or remote_qkey",
			      (unsigned long long)w->wr_id);
	if (w->opcode == IWV_WR_ATOMIC_FETCH_AND_ADD || w->opcode == IWV_WR_ATOMIC_CMP_AND_SWP) {
		/* one 8-byte result SGE after the operands (the stride leaves room) */
		if ((w->flags & IWV_SEND_INLINE) || w->num_sge != 1 || w->sg_list[0].length != 8)
			return iwvi_seterr(qp->s, EINVAL,
				      "post-send: work request %llu: an atomic takes one 8-byte result SGE and no inline data",
				      (unsigned long long)w->wr_id);
		return 0;
	}
	if (!(w->flags & IWV_SEND_INLINE)) {
		if (w->num_sge > qp->cap.max_send_sge)
			return iwvi_seterr(qp->s, EINVAL, "post-send: work request %llu has %u SGEs, the QP allows %u",
				      (unsigned long long)w->wr_id, w->num_sge, qp->cap.max_send_sge);
		return 0;
	}
	uint64_t total = 0;
	if (w->inline_data) {
		total = w->inline_len;
	} else {
		for (unsigned i = 0; i < w->num_sge; i++)
			total += w->sg_list[i].length;
	}
	if (total > qp->cap.max_inline)
		return iwvi_seterr(qp->s, EINVAL, "post-send: work request %llu has %llu inline bytes, the QP allows %u",
			      (unsigned long long)w->wr_id, (unsigned long long)total, qp->cap.max_inline);
	return (int64_t)total;
}

static void encode_send(struct iwv_qp *qp, uint8_t *slot, const struct iwv_send_wr *w, uint32_t inline_len)
{
	memset(slot, 0, W_SQE_HEADER_LEN);
	w_put64(slot, w->wr_id);
	slot[8] = w->opcode;
	slot[9] = w->flags;
	w_put32(slot + 20, w->rkey);
	w_put64(slot + 24, w->remote_addr);
	w_put32(slot + 32, w->inv_stag);
	w_put32(slot + W_OFF_SQE_IMM, w->imm);
	if (w->av && qp->type != IWV_QPT_RC) {
		uint8_t *av = slot + W_OFF_SQE_AH;
		av[0] = w->av->family;
		av[1] = w->av->flags;
		w_put16(av + 2, w->av->port);
		memcpy(av + 4, w->av->ip, 16);
		w_put32(slot + W_OFF_SQE_QKEY, w->remote_qkey ? w->remote_qkey : w->av->qkey);
	}
	uint8_t *body = slot + W_SQE_HEADER_LEN;
	if (w->flags & IWV_SEND_INLINE) {
		w_put32(slot + 12, inline_len);
		if (w->inline_data) {
			memcpy(body, w->inline_data, inline_len);
		} else {
			size_t off = 0;
			for (unsigned i = 0; i < w->num_sge; i++) {
				memcpy(body + off, (const void *)(uintptr_t)w->sg_list[i].addr, w->sg_list[i].length);
				off += w->sg_list[i].length;
			}
		}
	} else if (w->opcode == IWV_WR_ATOMIC_FETCH_AND_ADD || w->opcode == IWV_WR_ATOMIC_CMP_AND_SWP) {
		/* operands first, then the result SGE (proto.AtomicOperands) */
		w_put64(body, w->compare_add);
		w_put64(body + 8, w->swap);
		w_put16(slot + 10, w->num_sge);
		put_sge(body + W_ATOMIC_OPERANDS_LEN, &w->sg_list[0]);
	} else {
		w_put16(slot + 10, w->num_sge);
		for (unsigned i = 0; i < w->num_sge; i++)
			put_sge(body + i * W_SGE_LEN, &w->sg_list[i]);
	}
}

IWV_EXPORT int iwv_post_send(struct iwv_qp *qp, const struct iwv_send_wr *wr, int n)
{
	if (!qp || n < 0 || (n > 0 && !wr))
		return -EINVAL;
	if (iwvi_session_dead(qp->s))
		return iwvi_seterr(qp->s, ENODEV, "post-send: iwarpd: daemon closed the session");
	int posted = 0, err = 0;
	pthread_mutex_lock(&qp->sq.lock);
	for (int i = 0; i < n; i++) {
		int64_t inl = check_send(qp, &wr[i]);
		if (inl < 0) {
			err = (int)inl;
			break;
		}
		uint8_t *slot = ring_next(&qp->sq, &err);
		if (!slot) {
			err = err ? iwvi_seterr(qp->s, EIO, "post-send: the daemon stored an impossible consumer index")
				  : iwvi_seterr_fixed(qp->s, ENOMEM, "post-send: send queue full: wait for completions");
			break;
		}
		encode_send(qp, slot, &wr[i], (uint32_t)inl);
		posted++;
	}
	if (posted > 0)
		ring_publish(&qp->sq);
	pthread_mutex_unlock(&qp->sq.lock);
	if (posted > 0) {
		ring_doorbell(qp->s);
		return posted;
	}
	return err;
}

/* quiet: the QP's fast-path Owner word (NULL: none). While the rank owns
 * the socket the engine consumes no receive (fprq.h), so a new one needs no
 * doorbell: the engine reads the producer index when it takes the socket
 * over (after its compare-and-swap of Owner, which comes after this load in
 * the sequentially consistent order if the load still saw the rank). */
static int post_rq(struct iwv_session *s, struct rq *rq, const struct iwv_recv_wr *wr, int n, const char *what,
		   const uint32_t *quiet)
{
	if (n < 0 || (n > 0 && !wr))
		return -EINVAL;
	if (iwvi_session_dead(s))
		return iwvi_seterr(s, ENODEV, "post-recv: iwarpd: daemon closed the session");
	int posted = 0, err = 0;
	pthread_mutex_lock(&rq->ring.lock);
	for (int i = 0; i < n; i++) {
		const struct iwv_recv_wr *w = &wr[i];
		if (w->num_sge > rq->max_sge || (w->num_sge > 0 && !w->sg_list)) {
			err = iwvi_seterr(s, EINVAL, "post-recv: work request %llu has %u SGEs, the %s allows %u",
				     (unsigned long long)w->wr_id, w->num_sge, what, rq->max_sge);
			break;
		}
		uint8_t *slot = ring_next(&rq->ring, &err);
		if (!slot) {
			err = err ? iwvi_seterr(s, EIO, "post-recv: the daemon stored an impossible consumer index")
				  : iwvi_seterr_fixed(s, ENOMEM, "post-recv: receive queue full: wait for completions");
			break;
		}
		memset(slot, 0, W_RQE_HEADER_LEN);
		w_put64(slot, w->wr_id);
		w_put16(slot + 8, w->num_sge);
		for (unsigned j = 0; j < w->num_sge; j++)
			put_sge(slot + W_RQE_HEADER_LEN + j * W_SGE_LEN, &w->sg_list[j]);
		posted++;
	}
	if (posted > 0)
		ring_publish(&rq->ring);
	pthread_mutex_unlock(&rq->ring.lock);
	if (posted > 0) {
		if (!quiet || __atomic_load_n(quiet, __ATOMIC_SEQ_CST) != W_FP_OWNER_RANK)
			ring_doorbell(s);
		return posted;
	}
	return err;
}

IWV_EXPORT int iwv_post_recv(struct iwv_qp *qp, const struct iwv_recv_wr *wr, int n)
{
	if (!qp)
		return -EINVAL;
	if (qp->srq)
		return iwvi_seterr(qp->s, EINVAL, "post-recv: the QP receives from a shared receive queue");
	return post_rq(qp->s, &qp->rq, wr, n, "receive queue", qp->fp_owner);
}

IWV_EXPORT int iwv_post_srq_recv(struct iwv_srq *srq, const struct iwv_recv_wr *wr, int n)
{
	if (!srq)
		return -EINVAL;
	return post_rq(srq->s, &srq->rq, wr, n, "shared receive queue", NULL);
}
