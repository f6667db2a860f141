/*
 * events.c — asynchronous events (OpEvent, proto.Event) and connection
 * manager events (OpCMEvent, proto.CMEvent): queued in the session as they
 * are read off the socket, by whichever call reads it (control.c), and
 * handed out by iwv_get_async_event / iwv_cm_get_event (getevent.c). No
 * thread of our own: a waiter
 * polls the socket and the queue's eventfd without holding the session
 * mutex, then reads under it (as rdma_cm's event channel, rdma_get_cm_event(3)).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "internal.h"

void iwvi_evq_push(struct evqueue *q, struct evnode *n)
{
	n->next = NULL;
	if (q->tail)
		q->tail->next = n;
	else
		q->head = n;
	q->tail = n;
	q->n++;
}

struct evnode *iwvi_evq_pop(struct evqueue *q)
{
	struct evnode *n = q->head;
	if (!n)
		return NULL;
	q->head = n->next;
	if (!q->head)
		q->tail = NULL;
	q->n--;
	return n;
}

void iwvi_evq_free(struct evqueue *q)
{
	struct evnode *n;
	while ((n = iwvi_evq_pop(q)))
		free(n);
}

static void set_efd(int fd, int *set, int want)
{
	uint64_t v = 1;
	if (want && !*set) {
		if (write(fd, &v, sizeof v) == sizeof v)
			*set = 1;
	} else if (!want && *set) {
		if (read(fd, &v, sizeof v) == sizeof v)
			*set = 0;
	}
}

void iwvi_update_evfd(struct iwv_session *s)
{
	int dead = __atomic_load_n(&s->dead, __ATOMIC_ACQUIRE);
	set_efd(s->async_efd, &s->async_set, dead || s->async_q.n > 0);
	set_efd(s->cm_efd, &s->cm_set, dead || s->cm_q.n > 0);
}

struct iwv_qp *iwvi_find_qp(struct iwv_session *s, uint32_t handle)
{
	for (struct iwv_qp *q = s->qps; q; q = q->next)
		if (q->handle == handle)
			return q;
	return NULL;
}

void iwvi_dispatch_event(struct iwv_session *s, const uint8_t *body, size_t len)
{
	json_t *j = iwvi_jparse(body, len);
	struct evnode *n = j ? calloc(1, sizeof *n) : NULL;
	if (!n) {
		json_decref(j);
		s->dropped++;
		return;
	}
	struct iwv_async_event *ev = &n->u.async;
	ev->type = (enum iwv_event_type)iwvi_jget_u64(j, "type");
	ev->handle = (uint32_t)iwvi_jget_u64(j, "handle");
	iwvi_jget_str(j, "detail", ev->detail, sizeof ev->detail);
	json_decref(j);
	if (ev->type == IWV_EVENT_DEVICE_FATAL) {
		if (s->fatal_sent) {
			free(n);
			return;
		}
		s->fatal_sent = 1; /* may take the slot beyond the queue's bound */
	} else if (s->async_q.n >= IWV_ASYNC_QUEUE) {
		free(n);
		s->dropped++;
		return;
	}
	iwvi_evq_push(&s->async_q, n);
	iwvi_update_evfd(s);
}

/* iwvi_resolve_cm and iwvi_resolve_async find the objects an event names, when it is
 * handed out (mu held): an object destroyed meanwhile is not returned. */
void iwvi_resolve_cm(struct iwv_session *s, struct iwv_cm_event *ev)
{
	ev->listener = NULL;
	for (struct iwv_listener *l = s->listeners; l && ev->listener_handle; l = l->next)
		if (l->handle == ev->listener_handle)
			ev->listener = l;
	ev->qp = ev->qp_handle ? iwvi_find_qp(s, ev->qp_handle) : NULL;
}

void iwvi_resolve_async(struct iwv_session *s, struct iwv_async_event *ev)
{
	ev->qp = NULL;
	ev->cq = NULL;
	ev->srq = NULL;
	switch (ev->type) {
	case IWV_EVENT_QP_FATAL:
	case IWV_EVENT_QP_ACCESS_ERR:
		ev->qp = iwvi_find_qp(s, ev->handle);
		break;
	case IWV_EVENT_CQ_ERR:
		for (struct iwv_cq *c = s->cqs; c; c = c->next)
			if (c->handle == ev->handle)
				ev->cq = c;
		break;
	case IWV_EVENT_SRQ_LIMIT_REACHED:
		for (struct iwv_srq *q = s->srqs; q; q = q->next)
			if (q->handle == ev->handle)
				ev->srq = q;
		break;
	default:
		break;
	}
}

void iwvi_cm_event_from_json(struct iwv_session *s, json_t *j, struct iwv_cm_event *ev)
{
	memset(ev, 0, sizeof *ev);
	ev->type = (enum iwv_cm_event_type)iwvi_jget_u64(j, "type");
	ev->listener_handle = (uint32_t)iwvi_jget_u64(j, "listener");
	ev->conn_id = (uint32_t)iwvi_jget_u64(j, "conn");
	ev->qp_handle = (uint32_t)iwvi_jget_u64(j, "qp");
	iwvi_resolve_cm(s, ev);
	iwvi_jget_str(j, "peer", ev->peer, sizeof ev->peer);
	iwvi_jget_str(j, "local", ev->local, sizeof ev->local);
	int n = iwvi_jget_bytes(j, "private_data", ev->private_data, sizeof ev->private_data);
	ev->private_data_len = n > 0 ? (uint16_t)n : 0;
	ev->ird = (uint16_t)iwvi_jget_u64(j, "ird");
	ev->ord = (uint16_t)iwvi_jget_u64(j, "ord");
	json_t *st = json_object_get(j, "status");
	ev->status = st && json_is_integer(st) ? (int)json_integer_value(st) : 0;
	iwvi_jget_str(j, "detail", ev->detail, sizeof ev->detail);
	json_t *m = json_object_get(j, "mpa");
	if (m && json_is_object(m)) {
		ev->mpa_valid = 1;
		ev->mpa.revision = (uint8_t)iwvi_jget_u64(m, "revision");
		ev->mpa.enhanced = (uint8_t)iwvi_jget_bool(m, "enhanced");
		ev->mpa.crc = (uint8_t)iwvi_jget_bool(m, "crc");
		ev->mpa.markers_tx = (uint8_t)iwvi_jget_bool(m, "markers_tx");
		ev->mpa.markers_rx = (uint8_t)iwvi_jget_bool(m, "markers_rx");
		ev->mpa.peer_to_peer = (uint8_t)iwvi_jget_bool(m, "peer_to_peer");
		ev->mpa.rtr = (uint8_t)iwvi_jget_u64(m, "rtr");
		ev->mpa.peer_ird = (uint16_t)iwvi_jget_u64(m, "peer_ird");
		ev->mpa.peer_ord = (uint16_t)iwvi_jget_u64(m, "peer_ord");
	}
}

void iwvi_dispatch_cm_event(struct iwv_session *s, const uint8_t *body, size_t len)
{
	json_t *j = iwvi_jparse(body, len);
	struct evnode *n = j && s->cm_q.n < IWV_CM_QUEUE ? malloc(sizeof *n) : NULL;
	if (!n) {
		json_decref(j);
		s->dropped++;
		return;
	}
	iwvi_cm_event_from_json(s, j, &n->u.cm);
	json_decref(j);
	iwvi_evq_push(&s->cm_q, n);
	iwvi_update_evfd(s);
}
