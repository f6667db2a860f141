/*
 * qp.c — queue pairs and shared receive queues (ofverbs/qp.go,
 * ibv_create_qp(3), ibv_modify_qp(3)): one sealed memfd per QP holding the
 * SQ ring followed by the RQ ring (none with an SRQ); strides as
 * proto.SQEStride/RQEStride. Also UD multicast attach/detach.
 */
#include <errno.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int round_depth(uint32_t n, uint32_t *d)
{
	if (n == 0)
		n = 1;
	if (n > W_MAX_DEPTH)
		return -EINVAL;
	*d = 1;
	while (*d < n)
		*d <<= 1;
	return 0;
}

static json_t *caps_json(const struct iwv_qp_cap *c)
{
	json_t *j = json_object();
	if (!j || iwvi_jset_u64(j, "max_send_wr", c->max_send_wr) || iwvi_jset_u64(j, "max_recv_wr", c->max_recv_wr) ||
	    iwvi_jset_u64(j, "max_send_sge", c->max_send_sge) || iwvi_jset_u64(j, "max_recv_sge", c->max_recv_sge) ||
	    iwvi_jset_u64(j, "max_inline", c->max_inline) ||
	    (c->max_rd_atomic && iwvi_jset_u64(j, "max_rd_atomic", c->max_rd_atomic)) ||
	    (c->max_dest_rd_atomic && iwvi_jset_u64(j, "max_dest_rd_atomic", c->max_dest_rd_atomic))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

static void caps_from_json(json_t *j, struct iwv_qp_cap *c)
{
	c->max_send_wr = (uint32_t)iwvi_jget_u64(j, "max_send_wr");
	c->max_recv_wr = (uint32_t)iwvi_jget_u64(j, "max_recv_wr");
	c->max_send_sge = (uint32_t)iwvi_jget_u64(j, "max_send_sge");
	c->max_recv_sge = (uint32_t)iwvi_jget_u64(j, "max_recv_sge");
	c->max_inline = (uint32_t)iwvi_jget_u64(j, "max_inline");
	c->max_rd_atomic = (uint32_t)iwvi_jget_u64(j, "max_rd_atomic");
	c->max_dest_rd_atomic = (uint32_t)iwvi_jget_u64(j, "max_dest_rd_atomic");
}

IWV_EXPORT int iwv_create_qp(struct iwv_pd *pd, const struct iwv_qp_init_attr *a, struct iwv_qp **out)
{
	*out = NULL;
	if (!pd || !a)
		return -EINVAL;
	struct iwv_session *s = pd->s;
	if (!a->send_cq || !a->recv_cq || a->send_cq->s != s || a->recv_cq->s != s)
		return iwvi_seterr(s, EINVAL, "create-qp: a send CQ and a receive CQ of this session are required");
	if (a->srq && a->srq->s != s)
		return iwvi_seterr(s, EINVAL, "create-qp: shared receive queue of another session");
	if (a->qp_type != IWV_QPT_RC && a->qp_type != IWV_QPT_UD && a->qp_type != IWV_QPT_RD)
		return iwvi_seterr(s, EINVAL, "create-qp: unknown QP type %d", (int)a->qp_type);
	struct iwv_qp_cap caps = a->cap;
	uint32_t sq_depth, rq_depth = 0, rq_stride = 0;
	if (round_depth(caps.max_send_wr, &sq_depth) < 0)
		return iwvi_seterr(s, EINVAL, "create-qp: max_send_wr %u (want at most %u)", caps.max_send_wr, W_MAX_DEPTH);
	if (caps.max_send_sge > 0xffff || caps.max_recv_sge > 0xffff || caps.max_inline > (1u << 20))
		return iwvi_seterr(s, EINVAL, "create-qp: capabilities too large (sge %u/%u, inline %u)", caps.max_send_sge,
			      caps.max_recv_sge, caps.max_inline);
	caps.max_send_wr = sq_depth;
	uint32_t sq_stride = w_sqe_stride(caps.max_send_sge, caps.max_inline);
	size_t sq_bytes = w_ring_bytes(sq_depth, sq_stride), size = sq_bytes;
	if (a->srq) {
		caps.max_recv_wr = caps.max_recv_sge = 0;
	} else {
		if (round_depth(caps.max_recv_wr, &rq_depth) < 0)
			return iwvi_seterr(s, EINVAL, "create-qp: max_recv_wr %u (want at most %u)", caps.max_recv_wr, W_MAX_DEPTH);
		caps.max_recv_wr = rq_depth;
		rq_stride = w_rqe_stride(caps.max_recv_sge);
		size += w_ring_bytes(rq_depth, rq_stride);
	}
	struct iwv_qp *q = calloc(1, sizeof *q);
	if (!q)
		return iwvi_seterr(s, ENOMEM, "create-qp");
	int r = iwvi_region_create(&q->r, "qp", size);
	if (r < 0) {
		free(q);
		return iwvi_seterr(s, r, "create-qp: rings of %zu bytes", size);
	}
	ring_init(&q->sq, q->r.mem, W_RING_SQ, sq_depth, sq_stride, s->abi);
	if (!a->srq) {
		ring_init(&q->rq.ring, (uint8_t *)q->r.mem + sq_bytes, W_RING_RQ, rq_depth, rq_stride, s->abi);
		q->rq.depth = rq_depth;
		q->rq.max_sge = caps.max_recv_sge;
	}
	json_t *req = json_object(), *cj = caps_json(&caps);
	r = !req || !cj ? -ENOMEM : 0;
	if (!r && json_object_set_new(req, "caps", cj))
		r = -ENOMEM;
	cj = NULL;
	r = r ? r : iwvi_jset_u64(req, "pd", pd->handle);
	r = r ? r : iwvi_jset_u64(req, "type", (uint64_t)a->qp_type);
	r = r ? r : iwvi_jset_u64(req, "send_cq", a->send_cq->handle);
	r = r ? r : iwvi_jset_u64(req, "recv_cq", a->recv_cq->handle);
	if (!r && a->srq)
		r = iwvi_jset_u64(req, "srq", a->srq->handle);
	if (!r && a->sq_sig_all)
		r = json_object_set_new(req, "sig_all", json_true()) ? -ENOMEM : 0;
	if (!r && a->port)
		r = iwvi_jset_u64(req, "port", a->port);
	if (!r && a->no_crc)
		r = json_object_set_new(req, "no_crc", json_true()) ? -ENOMEM : 0;
	if (!r && a->qkey)
		r = iwvi_jset_u64(req, "qkey", a->qkey);
	if (!r && a->merge_send_imm)
		r = json_object_set_new(req, "merge_send_imm", json_true()) ? -ENOMEM : 0;
	if (!r && a->hold_recv)
		r = json_object_set_new(req, "hold_recv", json_true()) ? -ENOMEM : 0;
	if (!r && a->quiet_records)
		r = json_object_set_new(req, "quiet_records", json_true()) ? -ENOMEM : 0;
	if (r) {
		json_decref(req);
		iwvi_region_close(&q->r);
		free(q);
		return iwvi_seterr(s, ENOMEM, "create-qp: encoding the request");
	}
	int fds[2] = {q->r.fd, -1};
	q->sock = -1;
	q->quiet_records = a->quiet_records != 0;
	if (s->client_sockets && a->qp_type != IWV_QPT_RC) { /* qpsock.c */
		uint16_t port;
		r = iwvi_qp_socket(s, a->qp_type, a->port, &q->sock, &port);
		r = r ? r : iwvi_jset_u64(req, "port", port);
		r = r ? r : (json_object_set_new(req, "socket", json_true()) ? -ENOMEM : 0);
		if (r) {
			json_decref(req);
			if (q->sock >= 0)
				close(q->sock);
			iwvi_region_close(&q->r);
			free(q);
			return r;
		}
		fds[1] = q->sock;
	}
	json_t *rep;
	pthread_mutex_lock(&s->mu);
	r = iwvi_call_locked(s, W_OP_CREATE_QP, req, fds, fds[1] >= 0 ? 2 : 1, &rep);
	if (r == 0) {
		q->s = s;
		q->pd = pd;
		q->type = a->qp_type;
		q->no_crc = a->no_crc != 0;
		q->cap = caps;
		q->sq_depth = sq_depth;
		q->send_cq = a->send_cq;
		q->recv_cq = a->recv_cq;
		q->srq = a->srq;
		q->handle = (uint32_t)iwvi_jget_u64(rep, "handle");
		q->qpn = (uint32_t)iwvi_jget_u64(rep, "qpn");
		q->qkey = (uint32_t)iwvi_jget_u64(rep, "qkey");
		iwvi_jget_str(rep, "addr", q->addr, sizeof q->addr);
		json_decref(rep);
		if (q->addr[0] && iwv_av_from_string(NULL, &q->av, q->addr) == 0)
			q->have_av = 1;
		q->next = s->qps;
		s->qps = q;
		*out = q;
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0) {
		if (q->sock >= 0)
			close(q->sock);
		iwvi_region_close(&q->r);
		free(q);
	}
	return r;
}

IWV_EXPORT int iwv_modify_qp_qkey(struct iwv_qp *qp, enum iwv_qp_state state, uint32_t qkey)
{
	json_t *req = json_object();
	if (!req || iwvi_jset_u64(req, "qp", qp->handle) || iwvi_jset_u64(req, "state", (uint64_t)state) ||
	    (qkey && iwvi_jset_u64(req, "qkey", qkey))) {
		json_decref(req);
		return iwvi_seterr(qp->s, ENOMEM, "modify-qp");
	}
	int r = iwvi_call(qp->s, W_OP_MODIFY_QP, req, NULL, 0, NULL);
	if (r == 0 && qkey)
		__atomic_store_n(&qp->qkey, qkey, __ATOMIC_RELAXED);
	return r;
}

IWV_EXPORT int iwv_modify_qp(struct iwv_qp *qp, enum iwv_qp_state state)
{
	return iwv_modify_qp_qkey(qp, state, 0);
}

IWV_EXPORT uint32_t iwv_qp_qkey(const struct iwv_qp *qp)
{
	return __atomic_load_n(&qp->qkey, __ATOMIC_RELAXED);
}

IWV_EXPORT int iwv_query_qp(struct iwv_qp *qp, struct iwv_qp_attr *a)
{
	json_t *rep, *req = json_object();
	if (!req || iwvi_jset_u64(req, "handle", qp->handle)) {
		json_decref(req);
		return iwvi_seterr(qp->s, ENOMEM, "query-qp");
	}
	int r = iwvi_call(qp->s, W_OP_QUERY_QP, req, NULL, 0, &rep);
	if (r < 0)
		return r;
	memset(a, 0, sizeof *a);
	a->qp_type = (enum iwv_qp_type)iwvi_jget_u64(rep, "type");
	a->state = (enum iwv_qp_state)iwvi_jget_u64(rep, "state");
	a->qp_num = (uint32_t)iwvi_jget_u64(rep, "qpn");
	iwvi_jget_str(rep, "addr", a->addr, sizeof a->addr);
	caps_from_json(json_object_get(rep, "caps"), &a->cap);
	a->qkey = (uint32_t)iwvi_jget_u64(rep, "qkey");
	json_decref(rep);
	return 0;
}

IWV_EXPORT int iwv_destroy_qp(struct iwv_qp *qp)
{
	if (!qp)
		return -EINVAL;
	struct iwv_session *s = qp->s;
	int r = iwvi_destroy_handle(s, W_OP_DESTROY_QP, qp->handle);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->qps, struct iwv_qp, qp);
	pthread_mutex_unlock(&s->mu);
	if (qp->sock >= 0)
		close(qp->sock);
	iwvi_region_close(&qp->r);
	free(qp);
	return 0;
}

IWV_EXPORT uint32_t iwv_qp_num(const struct iwv_qp *qp)
{
	return qp->qpn;
}
IWV_EXPORT uint32_t iwv_qp_handle(const struct iwv_qp *qp)
{
	return qp->handle;
}
IWV_EXPORT enum iwv_qp_type iwv_qp_type(const struct iwv_qp *qp)
{
	return qp->type;
}
IWV_EXPORT void iwv_qp_cap(const struct iwv_qp *qp, struct iwv_qp_cap *cap)
{
	*cap = qp->cap;
}
IWV_EXPORT int iwv_qp_socket(const struct iwv_qp *qp)
{
	return qp->sock;
}
IWV_EXPORT const char *iwv_qp_addr(const struct iwv_qp *qp)
{
	return qp->addr;
}
IWV_EXPORT int iwv_qp_av(const struct iwv_qp *qp, struct iwv_av *av)
{
	if (!qp->have_av)
		return -EINVAL;
	*av = qp->av;
	av->qkey = iwv_qp_qkey(qp);
	return 0;
}

IWV_EXPORT int iwv_create_srq(struct iwv_pd *pd, const struct iwv_srq_init_attr *a, struct iwv_srq **out)
{
	*out = NULL;
	if (!pd || !a)
		return -EINVAL;
	struct iwv_session *s = pd->s;
	uint32_t depth;
	if (round_depth(a->max_wr, &depth) < 0)
		return iwvi_seterr(s, EINVAL, "create-srq: max_wr %u (want at most %u)", a->max_wr, W_MAX_DEPTH);
	if (a->max_sge > 0xffff)
		return iwvi_seterr(s, EINVAL, "create-srq: max_sge %u", a->max_sge);
	uint32_t stride = w_rqe_stride(a->max_sge);
	struct iwv_srq *q = calloc(1, sizeof *q);
	if (!q)
		return iwvi_seterr(s, ENOMEM, "create-srq");
	int r = iwvi_region_create(&q->r, "srq", w_ring_bytes(depth, stride));
	if (r < 0) {
		free(q);
		return iwvi_seterr(s, r, "create-srq");
	}
	ring_init(&q->rq.ring, q->r.mem, W_RING_SRQ, depth, stride, s->abi);
	q->rq.depth = depth;
	q->rq.max_sge = a->max_sge;
	json_t *rep, *req = json_object();
	if (!req || iwvi_jset_u64(req, "pd", pd->handle) || iwvi_jset_u64(req, "max_wr", depth) ||
	    iwvi_jset_u64(req, "max_sge", a->max_sge) || (a->limit && iwvi_jset_u64(req, "limit", a->limit))) {
		json_decref(req);
		iwvi_region_close(&q->r);
		free(q);
		return iwvi_seterr(s, ENOMEM, "create-srq");
	}
	pthread_mutex_lock(&s->mu);
	r = iwvi_call_locked(s, W_OP_CREATE_SRQ, req, &q->r.fd, 1, &rep);
	if (r == 0) {
		q->s = s;
		q->handle = (uint32_t)iwvi_jget_u64(rep, "handle");
		json_decref(rep);
		q->next = s->srqs;
		s->srqs = q;
		*out = q;
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0) {
		iwvi_region_close(&q->r);
		free(q);
	}
	return r;
}

IWV_EXPORT int iwv_destroy_srq(struct iwv_srq *srq)
{
	if (!srq)
		return -EINVAL;
	struct iwv_session *s = srq->s;
	int r = iwvi_destroy_handle(s, W_OP_DESTROY_SRQ, srq->handle);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->srqs, struct iwv_srq, srq);
	pthread_mutex_unlock(&s->mu);
	iwvi_region_close(&srq->r);
	free(srq);
	return 0;
}

IWV_EXPORT uint32_t iwv_srq_handle(const struct iwv_srq *srq)
{
	return srq->handle;
}

static int mcast(struct iwv_qp *qp, const char *group, enum w_op op)
{
	json_t *req = json_object();
	if (!group)
		return iwvi_seterr(qp->s, EINVAL, "mcast: no group");
	if (!req || iwvi_jset_u64(req, "qp", qp->handle) || iwvi_jset_str(req, "group", group)) {
		json_decref(req);
		return iwvi_seterr(qp->s, EINVAL, "mcast: encoding the request");
	}
	return iwvi_call(qp->s, op, req, NULL, 0, NULL);
}

IWV_EXPORT int iwv_attach_mcast(struct iwv_qp *qp, const char *group)
{
	return mcast(qp, group, W_OP_ATTACH_MCAST);
}

IWV_EXPORT int iwv_detach_mcast(struct iwv_qp *qp, const char *group)
{
	return mcast(qp, group, W_OP_DETACH_MCAST);
}
