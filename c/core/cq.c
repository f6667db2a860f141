/*
 * cq.c — completion channels and completion queues (ofverbs/cq.go,
 * ibv_create_comp_channel(3), ibv_poll_cq(3), ibv_req_notify_cq(3),
 * ibv_get_cq_event(3)). A CQ is a ring the daemon produces into; arming is
 * a store of the ring's Arm word, which the daemon clears when it signals the
 * channel's eventfd.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

IWV_EXPORT int iwv_create_comp_channel(struct iwv_session *s, struct iwv_comp_channel **out)
{
	*out = NULL;
	struct iwv_comp_channel *ch = calloc(1, sizeof *ch);
	if (!ch)
		return iwvi_seterr(s, ENOMEM, "create-comp-channel");
	ch->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ch->efd < 0) {
		int err = errno;
		free(ch);
		return iwvi_seterr(s, err, "create-comp-channel: eventfd");
	}
	json_t *rep, *req = json_object();
	pthread_mutex_lock(&s->mu);
	int r = req ? iwvi_call_locked(s, W_OP_CREATE_COMP_CHANNEL, req, &ch->efd, 1, &rep) : iwvi_seterr(s, ENOMEM, "create-comp-channel");
	if (r == 0) {
		ch->s = s;
		ch->handle = (uint32_t)iwvi_jget_u64(rep, "handle");
		json_decref(rep);
		pthread_mutex_init(&ch->mu, NULL);
		ch->next = s->channels;
		s->channels = ch;
		*out = ch;
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0) {
		close(ch->efd);
		free(ch);
	}
	return r;
}

IWV_EXPORT int iwv_destroy_comp_channel(struct iwv_comp_channel *ch)
{
	if (!ch)
		return -EINVAL;
	struct iwv_session *s = ch->s;
	int r = iwvi_destroy_handle(s, W_OP_DESTROY_COMP_CHANNEL, ch->handle);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->channels, struct iwv_comp_channel, ch);
	pthread_mutex_unlock(&s->mu);
	close(ch->efd);
	pthread_mutex_destroy(&ch->mu);
	free(ch->pending);
	free(ch);
	return 0;
}

IWV_EXPORT int iwv_comp_channel_fd(const struct iwv_comp_channel *ch)
{
	return ch->efd;
}

/* push_pending queues cq's event (ch->mu held). */
static void push_pending(struct iwv_comp_channel *ch, struct iwv_cq *cq)
{
	if (ch->npending == ch->cappending) {
		unsigned cap = ch->cappending ? 2 * ch->cappending : 8;
		struct iwv_cq **p = realloc(ch->pending, cap * sizeof *p);
		if (!p)
			return; /* the event is lost, as a full event queue loses it */
		ch->pending = p;
		ch->cappending = cap;
	}
	ch->pending[ch->npending++] = cq;
}

static void remove_pending(struct iwv_comp_channel *ch, struct iwv_cq *cq)
{
	unsigned j = 0;
	for (unsigned i = 0; i < ch->npending; i++)
		if (ch->pending[i] != cq)
			ch->pending[j++] = ch->pending[i];
	ch->npending = j;
}

/* scan moves every CQ of ch whose arming the daemon consumed to pending. */
static void scan(struct iwv_comp_channel *ch)
{
	struct iwv_session *s = ch->s;
	pthread_mutex_lock(&s->mu);
	pthread_mutex_lock(&ch->mu);
	for (struct iwv_cq *cq = s->cqs; cq; cq = cq->next) {
		if (cq->ch == ch && cq->armed && __atomic_load_n(cq->ring.arm, __ATOMIC_ACQUIRE) == W_ARM_NONE) {
			cq->armed = 0;
			push_pending(ch, cq);
		}
	}
	pthread_mutex_unlock(&ch->mu);
	pthread_mutex_unlock(&s->mu);
}

IWV_EXPORT int iwv_get_cq_event(struct iwv_comp_channel *ch, struct iwv_cq **cqp, int timeout_ms)
{
	struct iwv_session *s = ch->s;
	int64_t deadline = timeout_ms < 0 ? -1 : iwvi_now_ns() + (int64_t)timeout_ms * 1000000LL;
	*cqp = NULL;
	for (;;) {
		pthread_mutex_lock(&ch->mu);
		if (ch->npending > 0) {
			struct iwv_cq *cq = ch->pending[0];
			memmove(ch->pending, ch->pending + 1, (ch->npending - 1) * sizeof *ch->pending);
			ch->npending--;
			pthread_mutex_unlock(&ch->mu);
			__atomic_add_fetch(&cq->events, 1, __ATOMIC_RELAXED);
			*cqp = cq;
			return 0;
		}
		pthread_mutex_unlock(&ch->mu);
		if (__atomic_load_n(&s->dead, __ATOMIC_ACQUIRE))
			return iwvi_seterr(s, ENODEV, "get-cq-event: iwarpd: daemon closed the session");
		int wait = -1;
		if (deadline >= 0) {
			int64_t left = deadline - iwvi_now_ns();
			wait = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
		}
		/* The socket is watched for its hang-up only (events 0). */
		struct pollfd p[2] = {{.fd = ch->efd, .events = POLLIN}, {.fd = s->sock, .events = 0}};
		int n = poll(p, 2, wait);
		if (n < 0 && errno != EINTR)
			return iwvi_seterr(s, errno, "get-cq-event: poll");
		if (n > 0 && p[0].revents) {
			uint64_t v;
			if (read(ch->efd, &v, sizeof v) < 0 && errno != EAGAIN)
				return iwvi_seterr(s, errno, "get-cq-event: reading the channel");
			scan(ch);
			continue;
		}
		if (n > 0 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL))) {
			__atomic_store_n(&s->dead, 1, __ATOMIC_RELEASE);
			continue;
		}
		if (n == 0 && deadline >= 0 && iwvi_now_ns() >= deadline)
			return iwvi_seterr(s, ETIMEDOUT, "get-cq-event: no completion event within %d ms", timeout_ms);
	}
}

IWV_EXPORT void iwv_ack_cq_events(struct iwv_cq *cq, unsigned int n)
{
	__atomic_add_fetch(&cq->acked, n, __ATOMIC_RELAXED);
}

static int round_depth(int n, uint32_t *d)
{
	if (n <= 0 || (uint32_t)n > W_MAX_DEPTH)
		return -EINVAL;
	*d = 1;
	while (*d < (uint32_t)n)
		*d <<= 1;
	return 0;
}

IWV_EXPORT int iwv_create_cq(struct iwv_session *s, int depth, struct iwv_comp_channel *ch, struct iwv_cq **out)
{
	uint32_t d;
	*out = NULL;
	if (round_depth(depth, &d) < 0)
		return iwvi_seterr(s, EINVAL, "create-cq: depth %d (want 1..%u)", depth, W_MAX_DEPTH);
	if (ch && ch->s != s)
		return iwvi_seterr(s, EINVAL, "create-cq: completion channel of another session");
	struct iwv_cq *cq = calloc(1, sizeof *cq);
	if (!cq)
		return iwvi_seterr(s, ENOMEM, "create-cq");
	int r = iwvi_region_create(&cq->r, "cq", w_ring_bytes(d, W_CQE_SIZE));
	if (r < 0) {
		free(cq);
		return iwvi_seterr(s, r, "create-cq: ring of %u entries", d);
	}
	ring_init(&cq->ring, cq->r.mem, W_RING_CQ, d, W_CQE_SIZE, s->abi);
	json_t *rep, *req = json_object();
	if (!req || iwvi_jset_u64(req, "depth", d) || (ch && iwvi_jset_u64(req, "channel", ch->handle))) {
		json_decref(req);
		iwvi_region_close(&cq->r);
		free(cq);
		return iwvi_seterr(s, ENOMEM, "create-cq");
	}
	pthread_mutex_lock(&s->mu);
	r = iwvi_call_locked(s, W_OP_CREATE_CQ, req, &cq->r.fd, 1, &rep);
	if (r == 0) {
		cq->s = s;
		cq->ch = ch;
		cq->depth = d;
		cq->handle = (uint32_t)iwvi_jget_u64(rep, "handle");
		json_decref(rep);
		cq->next = s->cqs;
		s->cqs = cq;
		*out = cq;
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0) {
		iwvi_region_close(&cq->r);
		free(cq);
	}
	return r;
}

IWV_EXPORT int iwv_destroy_cq(struct iwv_cq *cq)
{
	if (!cq)
		return -EINVAL;
	struct iwv_session *s = cq->s;
	int r = iwvi_destroy_handle(s, W_OP_DESTROY_CQ, cq->handle);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	LIST_REMOVE(&s->cqs, struct iwv_cq, cq);
	if (cq->ch) {
		pthread_mutex_lock(&cq->ch->mu);
		remove_pending(cq->ch, cq);
		pthread_mutex_unlock(&cq->ch->mu);
	}
	pthread_mutex_unlock(&s->mu);
	iwvi_region_close(&cq->r);
	free(cq);
	return 0;
}

IWV_EXPORT int iwv_cq_depth(const struct iwv_cq *cq)
{
	return (int)cq->depth;
}

IWV_EXPORT uint32_t iwv_cq_handle(const struct iwv_cq *cq)
{
	return cq->handle;
}

IWV_EXPORT int iwv_cq_overrun(const struct iwv_cq *cq)
{
	return __atomic_load_n(cq->ring.overrun, __ATOMIC_ACQUIRE) != 0;
}

/* get_cqe decodes a CQE (proto.GetCQE). */
static void get_cqe(const uint8_t *b, struct iwv_wc *wc)
{
	wc->wr_id = w_get64(b);
	wc->status = b[8];
	wc->opcode = b[9];
	wc->flags = b[10];
	wc->reserved = 0;
	wc->byte_len = w_get32(b + 12);
	wc->qp_num = w_get32(b + 16);
	wc->inv_stag = w_get32(b + 20);
	memcpy(wc->src_ip, b + 24, 16);
	wc->src_port = w_get16(b + 40);
	wc->term = w_get32(b + 44);
	wc->to = w_get64(b + 48);
	wc->imm = w_get32(b + W_OFF_CQE_IMM);
}

IWV_EXPORT int iwv_poll_cq(struct iwv_cq *cq, int n, struct iwv_wc *wc)
{
	if (n < 0 || (n > 0 && !wc))
		return -EINVAL;
	pthread_mutex_lock(&cq->ring.lock);
	int64_t avail = ring_available(&cq->ring);
	if (avail < 0) {
		pthread_mutex_unlock(&cq->ring.lock);
		return iwvi_seterr(cq->s, EIO, "poll-cq: the daemon stored an impossible producer index");
	}
	int k = avail < n ? (int)avail : n;
	for (int i = 0; i < k; i++) {
		uint8_t e[W_CQE_SIZE];
		/* copy out first: the other side may still write the slot */
		memcpy(e, ring_slot(&cq->ring, cq->ring.tail), sizeof e);
		get_cqe(e, &wc[i]);
		cq->ring.tail++;
	}
	ring_release(&cq->ring);
	pthread_mutex_unlock(&cq->ring.lock);
	if (k == 0 && n > 0 && iwvi_session_dead(cq->s))
		return iwvi_seterr(cq->s, ENODEV, "poll-cq: iwarpd: daemon closed the session");
	return k;
}

IWV_EXPORT int iwv_req_notify_cq(struct iwv_cq *cq, int solicited_only)
{
	struct iwv_comp_channel *ch = cq->ch;
	if (!ch)
		return iwvi_seterr(cq->s, EINVAL, "req-notify-cq: the CQ has no completion channel");
	if (iwvi_session_dead(cq->s))
		return iwvi_seterr(cq->s, ENODEV, "req-notify-cq: iwarpd: daemon closed the session");
	pthread_mutex_lock(&ch->mu);
	if (cq->armed && __atomic_load_n(cq->ring.arm, __ATOMIC_ACQUIRE) == W_ARM_NONE)
		push_pending(ch, cq); /* the previous arming fired and nobody collected it: keep that event */
	cq->armed = 1;
	__atomic_store_n(cq->ring.arm, solicited_only ? W_ARM_SOLICITED : W_ARM_NEXT, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&ch->mu);
	return 0;
}
