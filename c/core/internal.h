/*
 * internal.h — the objects of libiwverbs and the functions the files of
 * c/core share. Nothing here is exported (-fvisibility=hidden).
 */
#ifndef IWV_INTERNAL_H
#define IWV_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "iwarpd/verbs.h"
#include "ring.h"
#include "rkeys.h"
#include "wire.h"

#define IWV_ASYNC_QUEUE 1024 /* unread async events kept (as ofverbs) */
#define IWV_CM_QUEUE 1024    /* unread CM events kept */
#define IWV_CALL_TIMEOUT_MS 120000 /* guard against a daemon that never answers */
#define IWV_LIVENESS_NS 50000000LL /* data path checks the socket at most every 50 ms */

/* A queued event (async or CM). */
struct evnode {
	struct evnode *next;
	union {
		struct iwv_async_event async;
		struct iwv_cm_event cm;
	} u;
};

struct evqueue {
	struct evnode *head, *tail;
	unsigned n;
};

/* A shared-memory region: a sealed memfd and its mapping here. */
struct region {
	int fd;
	void *mem;
	size_t len;
};

struct iwv_session {
	pthread_mutex_t mu; /* control calls, socket reads, event queues, object lists */
	int sock;
	int doorbell;          /* engine doorbell eventfd */
	struct region status;  /* read-only status page (fd -1 once mapped) */
	uint32_t *asleep;      /* status page Asleep word */
	int async_efd, cm_efd; /* signalled while their queue is not empty or the session is over */
	int async_set, cm_set; /* whether they are signalled */
	int epfd;              /* iwv_event_fd: sock + async_efd + cm_efd */
	uint32_t seq;
	uint16_t abi;
	int dead;              /* atomic: 1 once the session is over */
	int64_t last_check;    /* atomic: monotonic ns of the last liveness check */
	int fatal_sent;
	uint64_t dropped;
	/* control round trips (iwv_session_stats); mu held */
	uint64_t calls, reg_mr_calls, dereg_mr_calls;
	uint8_t *buf;          /* W_MAX_MESSAGE receive buffer */

	char device[64], daemon[64], addr[64];
	uint64_t netns_cookie; /* the daemon's SO_NETNS_COOKIE (hello), 0: unknown */
	int client_sockets;    /* this process makes its UD/RD QPs' sockets (qpsock.c) */
	int addr_family; /* 4, 6 or 0 (unknown): address vectors must match */
	uint64_t id;

	struct evqueue async_q, cm_q;

	/* objects, for lookups and iwv_close */
	struct iwv_buffer *buffers;
	struct iwv_buffer *arena; /* iwv_adopt_pages (adopt.c); also in buffers */
	struct iwv_pd *pds;
	struct iwv_mr *mrs;
	struct iwvi_rkeys rkeys; /* the MRs by STag, for the rank's RD fast path (rkeys.h) */
	struct iwv_comp_channel *channels;
	struct iwv_cq *cqs;
	struct iwv_qp *qps;
	struct iwv_srq *srqs;
	struct iwv_listener *listeners;
};

struct iwv_buffer {
	struct iwv_session *s;
	struct iwv_buffer *next;
	struct region r;
	size_t size;
	int adopted; /* iwv_adopt_buffer: r.mem is the application's range; IWVI_ARENA: the session's arena (adopt.c) */
};

/* iwv_buffer.adopted of the session's arena: one sparse memfd holding every
 * page iwv_adopt_pages adopted at file offset = its address (adopt.c). */
#define IWVI_ARENA 2

struct iwv_pd {
	struct iwv_session *s;
	struct iwv_pd *next;
	uint32_t handle;
};

struct iwv_mr {
	struct iwv_session *s;
	struct iwv_mr *next;
	struct iwv_pd *pd;
	uint32_t handle, lkey, rkey;
	void *addr;
	size_t len;
	int process;
	int arena; /* registered in the session's arena (adopt.c): keeps its pages adopted */
	int access; /* IWV_ACCESS_* */
};

struct iwv_comp_channel {
	struct iwv_session *s;
	struct iwv_comp_channel *next;
	uint32_t handle;
	int efd;
	pthread_mutex_t mu; /* armed flags of its CQs, the pending list */
	struct iwv_cq **pending;
	unsigned npending, cappending;
};

struct iwv_cq {
	struct iwv_session *s;
	struct iwv_cq *next;
	struct iwv_comp_channel *ch;
	uint32_t handle, depth;
	struct region r;
	struct ring ring;
	int armed; /* guarded by ch->mu */
	uint64_t events, acked; /* atomic */
};

struct rq {
	struct ring ring;
	uint32_t depth, max_sge;
};

struct iwv_qp {
	struct iwv_session *s;
	struct iwv_qp *next;
	struct iwv_pd *pd;
	uint32_t handle, qpn;
	uint32_t qkey; /* atomic: set by create and iwv_modify_qp_qkey */
	enum iwv_qp_type type;
	struct iwv_qp_cap cap;
	char addr[IWV_ADDR_STRLEN];
	struct iwv_av av;
	int have_av;
	struct iwv_cq *send_cq, *recv_cq;
	struct iwv_srq *srq;
	struct region r;
	struct ring sq;
	uint32_t sq_depth;
	struct rq rq; /* unused with an SRQ */
	int sock;     /* its UDP socket, made by this process (qpsock.c); -1: the daemon's */
	int no_crc;   /* created with CRC off (iwv_qp_init_attr.no_crc): the fast paths' codec follows */
	/* Its fast-path page's Owner word when the rank consumes its receives
	 * (fprq.c iwvi_fp_rq_attach): post-recv rings no doorbell while it
	 * says the rank (the engine reads nothing of the RQ then). */
	const uint32_t *fp_owner;
	int quiet_records; /* created with quiet_records (RD): Write-Records take no receive */
};

struct iwv_srq {
	struct iwv_session *s;
	struct iwv_srq *next;
	uint32_t handle;
	struct region r;
	struct rq rq;
};

struct iwv_listener {
	struct iwv_session *s;
	struct iwv_listener *next;
	uint32_t handle;
	char addr[IWV_ADDR_STRLEN];
};

/* errors.c */
int iwvi_seterr(struct iwv_session *s, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int iwvi_seterr_open(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* seterr with a constant text, for the data path's expected failures (a
 * full queue): no formatting, no lock (errors.c). */
int iwvi_seterr_fixed(struct iwv_session *s, int err, const char *what);

/* control.c: one request and its reply. body is consumed (decref'd); *reply
 * receives the decoded reply body (NULL if empty) to decref. mu is taken. */
int iwvi_call(struct iwv_session *s, enum w_op op, json_t *body, const int *fds, int nfds, json_t **reply);
/* The same with mu already held. */
int iwvi_call_locked(struct iwv_session *s, enum w_op op, json_t *body, const int *fds, int nfds, json_t **reply);
int iwvi_destroy_handle(struct iwv_session *s, enum w_op op, uint32_t handle);
/* pump reads every message waiting on the socket (mu held), dispatching
 * events; returns -ENODEV once the session is over. */
int iwvi_pump(struct iwv_session *s);
int iwvi_send_msg(int sock, uint16_t version, uint16_t op, uint32_t seq, const char *body, size_t len, const int *fds,
	     int nfds);
/* recv_msg reads one message; waits up to timeout_ms (-1: no limit). 0 and
 * the lengths, -ETIMEDOUT, -ENODEV (closed), -EPROTO (malformed). */
int iwvi_recv_msg(int sock, uint8_t *buf, int timeout_ms, size_t *len, int *fds, int *nfds);
void iwvi_session_end(struct iwv_session *s); /* mu held */
int iwvi_session_dead(struct iwv_session *s);  /* data path: cheap, rate-limited socket check */
int64_t iwvi_now_ns(void);
/* post.c: write the doorbell if the status page says the engine sleeps
 * (after a sequentially consistent store the engine rescans for). */
void iwvi_ring_doorbell(struct iwv_session *s);
/* The poll(2) timeout until deadline (monotonic ns; -1: none): -1, the
 * milliseconds left rounded up, or -ETIMEDOUT once it has passed. */
int iwvi_poll_ms(int64_t deadline);

/* events.c (mu held) */
void iwvi_dispatch_event(struct iwv_session *s, const uint8_t *body, size_t len);
void iwvi_dispatch_cm_event(struct iwv_session *s, const uint8_t *body, size_t len);
void iwvi_evq_push(struct evqueue *q, struct evnode *n);
struct evnode *iwvi_evq_pop(struct evqueue *q);
void iwvi_evq_free(struct evqueue *q);
void iwvi_update_evfd(struct iwv_session *s);
/* The objects an event names, looked up when it is handed out. */
void iwvi_resolve_cm(struct iwv_session *s, struct iwv_cm_event *ev);
void iwvi_resolve_async(struct iwv_session *s, struct iwv_async_event *ev);
void iwvi_cm_event_from_json(struct iwv_session *s, json_t *j, struct iwv_cm_event *ev);

/* qpsock.c: client-made QP sockets. iwvi_client_sockets decides at open
 * (IWV_ENV_QP_SOCKET, the daemon's netns cookie); iwvi_qp_socket reserves a
 * port (iwvi_call: mu not held) and returns a socket bound to it. */
int iwvi_client_sockets(uint64_t daemon_cookie);
int iwvi_qp_socket(struct iwv_session *s, enum iwv_qp_type type, uint16_t port, int *fd, uint16_t *bound);

/* json.c */
json_t *iwvi_jparse(const uint8_t *body, size_t len);
uint64_t iwvi_jget_u64(json_t *o, const char *key);
int iwvi_jget_bool(json_t *o, const char *key);
void iwvi_jget_str(json_t *o, const char *key, char *buf, size_t len);
int iwvi_jset_u64(json_t *o, const char *key, uint64_t v);
int iwvi_jset_str(json_t *o, const char *key, const char *v);
int iwvi_jset_bytes(json_t *o, const char *key, const void *b, size_t n);
/* jget_bytes decodes base64 (Go's []byte) into buf; returns the length or -1. */
int iwvi_jget_bytes(json_t *o, const char *key, uint8_t *buf, size_t cap);

/* shm.c */
int iwvi_region_create(struct region *r, const char *name, size_t size);
void iwvi_region_close(struct region *r);
/* Unmaps a buffer, or gives an adopted one private pages back (mr.c). */
void iwvi_buffer_release(struct iwv_buffer *b);
/* 1 when [addr, addr+len) is still b's memory (an adopted buffer's pages
 * may have been unmapped or mapped anew by the application: adopt.c). */
int iwvi_buffer_holds(const struct iwv_buffer *b, uintptr_t addr, size_t len);

/* lists */
#define LIST_REMOVE(headp, type, obj)                    \
	do {                                             \
		type **pp_ = (headp);                    \
		while (*pp_ && *pp_ != (obj))            \
			pp_ = &(*pp_)->next;             \
		if (*pp_)                                \
			*pp_ = (obj)->next;              \
	} while (0)

struct iwv_qp *iwvi_find_qp(struct iwv_session *s, uint32_t handle);

/* av.c */
int iwvi_av_check(struct iwv_session *s, const struct iwv_av *av);

#endif
