/*
 * cm.c — connection management of RC queue pairs (proto/cm.go,
 * ofverbs/cm.go), in the manner of rdma_cm (rdma_listen(3),
 * rdma_connect(3), rdma_accept(3), rdma_reject(3), rdma_disconnect(3)).
 * The daemon runs TCP and the MPA exchange (RFC 5044 §7.1, RFC 6581); the
 * client sees private data, IRD/ORD and the outcome as CM events.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

IWV_EXPORT int iwv_listen(struct iwv_session *s, const char *addr, int backlog, struct iwv_listener **out)
{
	*out = NULL;
	if (!addr || backlog < 0)
		return iwvi_seterr(s, EINVAL, "listen: address and a backlog >= 0 are required");
	struct iwv_listener *l = calloc(1, sizeof *l);
	json_t *rep, *req = json_object();
	if (!l || !req || iwvi_jset_str(req, "addr", addr) || (backlog && iwvi_jset_u64(req, "backlog", (uint64_t)backlog))) {
		free(l);
		json_decref(req);
		return iwvi_seterr(s, EINVAL, "listen: encoding the request for %s", addr);
	}
	pthread_mutex_lock(&s->mu);
	int r = iwvi_call_locked(s, W_OP_LISTEN, req, NULL, 0, &rep);
	if (r == 0) {
		l->s = s;
		l->handle = (uint32_t)iwvi_jget_u64(rep, "handle");
		iwvi_jget_str(rep, "addr", l->addr, sizeof l->addr);
		json_decref(rep);
		l->next = s->listeners;
		s->listeners = l;
		*out = l;
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0)
		free(l);
	return r;
}

IWV_EXPORT const char *iwv_listener_addr(const struct iwv_listener *l)
{
	return l->addr;
}

IWV_EXPORT uint32_t iwv_listener_handle(const struct iwv_listener *l)
{
	return l->handle;
}

IWV_EXPORT int iwv_listener_close(struct iwv_listener *l)
{
	if (!l)
		return -EINVAL;
	struct iwv_session *s = l->s;
	int r = iwvi_destroy_handle(s, W_OP_CLOSE_LISTENER, l->handle);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->listeners, struct iwv_listener, l);
	pthread_mutex_unlock(&s->mu);
	free(l);
	return 0;
}

/* conn_params adds private data and IRD/ORD to a request. */
static int conn_params(json_t *req, const struct iwv_conn_param *p)
{
	if (!p)
		return 0;
	if (p->private_data_len > IWV_MAX_PRIVATE_DATA || (p->private_data_len && !p->private_data))
		return -EINVAL;
	if (p->private_data_len && iwvi_jset_bytes(req, "private_data", p->private_data, p->private_data_len))
		return -EINVAL;
	if (p->ird && iwvi_jset_u64(req, "ird", p->ird))
		return -ENOMEM;
	if (p->ord && iwvi_jset_u64(req, "ord", p->ord))
		return -ENOMEM;
	return 0;
}

IWV_EXPORT int iwv_connect(struct iwv_qp *qp, const char *addr, const struct iwv_conn_param *p)
{
	struct iwv_session *s = qp->s;
	json_t *req = json_object(), *mpa = json_object();
	int r = !req || !mpa || !addr ? -EINVAL : 0;
	r = r ? r : iwvi_jset_u64(req, "qp", qp->handle);
	r = r ? r : iwvi_jset_str(req, "addr", addr);
	r = r ? r : conn_params(req, p);
	if (!r && p) {
		const struct iwv_mpa_options *m = &p->mpa;
		if ((m->revision && iwvi_jset_u64(mpa, "revision", m->revision)) || (m->crc && iwvi_jset_u64(mpa, "crc", m->crc)) ||
		    (m->markers && iwvi_jset_u64(mpa, "markers", m->markers)) ||
		    (m->peer_to_peer && iwvi_jset_u64(mpa, "peer_to_peer", m->peer_to_peer)) ||
		    (m->rtr && iwvi_jset_u64(mpa, "rtr", m->rtr)))
			r = -ENOMEM;
		if (!r && p->timeout_ms)
			r = iwvi_jset_u64(req, "timeout_ms", p->timeout_ms);
		if (!r && p->local_port)
			r = iwvi_jset_u64(req, "local_port", p->local_port);
	}
	if (!r) {
		r = json_object_set_new(req, "mpa", mpa) ? -ENOMEM : 0;
		mpa = NULL;
	}
	json_decref(mpa);
	if (r) {
		json_decref(req);
		return iwvi_seterr(s, EINVAL, "connect: bad parameters (address %s, private data at most %d octets)",
			      addr ? addr : "(null)", IWV_MAX_PRIVATE_DATA);
	}
	return iwvi_call(s, W_OP_CONNECT, req, NULL, 0, NULL);
}

IWV_EXPORT int iwv_accept(struct iwv_session *s, uint32_t conn_id, struct iwv_qp *qp, const struct iwv_conn_param *p,
			  struct iwv_cm_event *ev)
{
	if (!qp || qp->s != s)
		return iwvi_seterr(s, EINVAL, "accept: a QP of this session is required");
	json_t *rep, *req = json_object();
	int r = !req ? -ENOMEM : 0;
	r = r ? r : iwvi_jset_u64(req, "conn", conn_id);
	r = r ? r : iwvi_jset_u64(req, "qp", qp->handle);
	r = r ? r : conn_params(req, p);
	if (r) {
		json_decref(req);
		return iwvi_seterr(s, EINVAL, "accept: bad parameters (private data at most %d octets)", IWV_MAX_PRIVATE_DATA);
	}
	pthread_mutex_lock(&s->mu);
	r = iwvi_call_locked(s, W_OP_ACCEPT, req, NULL, 0, &rep);
	if (r == 0) {
		if (ev) {
			iwvi_cm_event_from_json(s, rep, ev);
			ev->type = IWV_CM_ESTABLISHED;
			ev->qp = qp;
			ev->qp_handle = qp->handle;
		}
		json_decref(rep);
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

IWV_EXPORT int iwv_reject(struct iwv_session *s, uint32_t conn_id, const void *private_data, uint16_t len)
{
	json_t *req = json_object();
	int r = !req ? -ENOMEM : 0;
	r = r ? r : iwvi_jset_u64(req, "conn", conn_id);
	if (!r && len > 0)
		r = private_data ? iwvi_jset_bytes(req, "private_data", private_data, len) : -EINVAL;
	if (r) {
		json_decref(req);
		return iwvi_seterr(s, EINVAL, "reject: bad parameters (private data at most %d octets)", IWV_MAX_PRIVATE_DATA);
	}
	return iwvi_call(s, W_OP_REJECT, req, NULL, 0, NULL);
}

IWV_EXPORT int iwv_disconnect(struct iwv_qp *qp, int abort)
{
	json_t *req = json_object();
	if (!req || iwvi_jset_u64(req, "qp", qp->handle) || (abort && json_object_set_new(req, "abort", json_true()))) {
		json_decref(req);
		return iwvi_seterr(qp->s, ENOMEM, "disconnect");
	}
	return iwvi_call(qp->s, W_OP_DISCONNECT, req, NULL, 0, NULL);
}
