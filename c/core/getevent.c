/*
 * getevent.c — handing out the session's queued events (events.c):
 * iwv_get_async_event (ibv_get_async_event(3)), iwv_cm_get_event
 * (rdma_get_cm_event(3)) and iwv_event_fd. A waiter reads the socket
 * (iwvi_pump) under the session mutex, then polls the socket and the
 * queue's eventfd without it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int wait_events(struct iwv_session *s, int efd, int64_t deadline)
{
	int wait = iwvi_poll_ms(deadline);
	if (wait == -ETIMEDOUT)
		return -ETIMEDOUT;
	struct pollfd p[2] = {{.fd = s->sock, .events = POLLIN}, {.fd = efd, .events = POLLIN}};
	if (poll(p, 2, wait) < 0 && errno != EINTR)
		return -errno;
	return 0;
}

static int64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : iwvi_now_ns() + (int64_t)timeout_ms * 1000000LL;
}

IWV_EXPORT int iwv_event_fd(struct iwv_session *s)
{
	return s->epfd;
}

IWV_EXPORT int iwv_get_async_event(struct iwv_session *s, struct iwv_async_event *ev, int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	for (;;) {
		pthread_mutex_lock(&s->mu);
		iwvi_pump(s);
		struct evnode *n = iwvi_evq_pop(&s->async_q);
		if (n) {
			*ev = n->u.async;
			free(n);
			iwvi_resolve_async(s, ev);
			iwvi_update_evfd(s);
			pthread_mutex_unlock(&s->mu);
			return 0;
		}
		if (__atomic_load_n(&s->dead, __ATOMIC_ACQUIRE)) {
			int first = !s->fatal_sent;
			s->fatal_sent = 1;
			pthread_mutex_unlock(&s->mu);
			if (first) {
				memset(ev, 0, sizeof *ev);
				ev->type = IWV_EVENT_DEVICE_FATAL;
				strcpy(ev->detail, "iwarpd: daemon closed the session");
				return 0;
			}
			return iwvi_seterr(s, ENODEV, "get-async-event: iwarpd: daemon closed the session");
		}
		pthread_mutex_unlock(&s->mu);
		if (wait_events(s, s->async_efd, deadline) == -ETIMEDOUT)
			return iwvi_seterr(s, ETIMEDOUT, "get-async-event: no event within %d ms", timeout_ms);
	}
}

IWV_EXPORT int iwv_cm_get_event(struct iwv_session *s, struct iwv_cm_event *ev, int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	for (;;) {
		pthread_mutex_lock(&s->mu);
		iwvi_pump(s);
		struct evnode *n = iwvi_evq_pop(&s->cm_q);
		if (n) {
			*ev = n->u.cm;
			free(n);
			iwvi_resolve_cm(s, ev);
			iwvi_update_evfd(s);
			pthread_mutex_unlock(&s->mu);
			return 0;
		}
		int dead = __atomic_load_n(&s->dead, __ATOMIC_ACQUIRE);
		pthread_mutex_unlock(&s->mu);
		if (dead)
			return iwvi_seterr(s, ENODEV, "cm-get-event: iwarpd: daemon closed the session");
		if (wait_events(s, s->cm_efd, deadline) == -ETIMEDOUT)
			return iwvi_seterr(s, ETIMEDOUT, "cm-get-event: no event within %d ms", timeout_ms);
	}
}
