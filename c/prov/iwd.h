/*
 * iwd.h — the iwarpd libfabric provider (libiwarpd-fi.so): shared types.
 *
 * The provider is a thin skin over libiwverbs (c/include/iwarpd/verbs.h):
 *   FI_EP_RDM   over RD queue pairs (reliable datagrams), with tag matching,
 *               eager and rendezvous (RDMA Read) protocols in the provider;
 *   FI_EP_DGRAM over UD queue pairs, one message per work request;
 *   FI_EP_MSG   over RC queue pairs (MPA private data carries CM data).
 * One file per libfabric object, as libfabric's own providers are laid out
 * (fi_provider(7)). Each endpoint type is its own object embedding struct
 * iwd_ep and carrying a struct iwd_ep_ops the shared code calls through
 * (as ofi_rxd and tcp do); only iwd_ep.c picks a type. libfabric's util
 * framework is not installed by libfabric-dev, so the provider has a small
 * one of its own (iwd_util_*.c, iwd_list.h). Calls run one way, down:
 * objects and their ops tables (fabric, domain, endpoint types) above the
 * data path (ep_data, rma, atomic), above CQs, counters, EQs and MRs,
 * above progress, CM dispatch and util (docs/libfabric.md, "Layout").
 *
 * Locking: every object hangs off a domain and takes the domain's mutex
 * (FI_THREAD_SAFE), which guards the provider's own state (libiwverbs
 * locks each of its queues itself). Progress is domain-wide: any call that reads a CQ
 * or counter, or finds a queue full, polls every endpoint of the domain.
 */
#ifndef IWD_H
#define IWD_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/uio.h>
#include <netinet/in.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include <iwarpd/verbs.h>

#include "iwd_list.h"

#define IWD_PROV_NAME "iwarpd"
#define IWD_PROV_VERSION FI_VERSION(1, 0)
#define IWD_FI_VERSION FI_VERSION(1, 17)
#define IWD_FABRIC_NAME "iwarpd"

#define IWD_IOV_LIMIT 4
#define IWD_RMA_IOV_LIMIT 1
#define IWD_TX_SIZE 256
#define IWD_RX_SIZE 256
#define IWD_TX_EXTRA 16 /* send queue beyond tx_attr->size: control messages (FIN), rendezvous reads */
#define IWD_MAX_EP_CNT 128
#define IWD_CQ_DATA_SIZE 8
#define IWD_MR_KEY_SIZE 8
#define IWD_CM_DATA_SIZE 256
/* The Q_Key of every datagram QP of the provider: peers are other iwarpd
 * provider endpoints, whose address is all the AV holds. */
#define IWD_QKEY 0x11f1d0e5u /* connection data, carried as MPA private data */

#define IWD_UNUSED(x) ((void)(x))

extern struct fi_provider iwd_prov;

#define IWD_STR_(x) #x
#define IWD_STR(x) IWD_STR_(x)

/* The wait discipline after an empty poll (iwd_idle.c, docs/libfabric.md),
 * FI_IWARPD_IDLE: adaptive (yield until the CPU is seen contended, then
 * sleep), yield, or sleep. */
enum iwd_idle_mode { IWD_IDLE_ADAPTIVE, IWD_IDLE_YIELD, IWD_IDLE_SLEEP };
/* FI_IWARPD_IDLE_SLEEP_US's default and upper bound. */
#define IWD_IDLE_SLEEP_US 1
#define IWD_IDLE_SLEEP_MAX_US 1000
/* FI_IWARPD_IDLE_BLOCK_US: the longest an empty fi_cq_read blocks on the
 * completion channel while every operation it waits for is the daemon's
 * (iwd_progress.c iwd_domain_block); 0 (the default): never blocks —
 * measured no faster for 1 MiB and slower for 64 KiB on the 2-CPU guest
 * (docs/libfabric.md "Blocking while the daemon works"). */
#define IWD_IDLE_BLOCK_US 0
#define IWD_IDLE_BLOCK_MAX_US 1000000
/* Adaptive: a yield or sleep that kept the thread away this much longer
 * than asked means the CPU is contended; the thread then sleeps instead of
 * yielding for IWD_IDLE_HOLD_NS after it. */
#define IWD_IDLE_CONTENDED_NS 1000000LL
#define IWD_IDLE_HOLD_NS 100000000LL
/* Adaptive: the sleeps of one wait double at most this many times. */
#ifndef IWD_IDLE_BACKOFF
#define IWD_IDLE_BACKOFF 5u
#endif

/* FI_IWARPD_* parameters (fi_param_define in iwd_init.c, docs/libfabric.md). */
struct iwd_params {
	char *socket;         /* FI_IWARPD_SOCKET: the daemon's control socket */
	size_t eager_max;     /* FI_IWARPD_EAGER_MAX: RDM rendezvous above */
	size_t rx_bufs;       /* FI_IWARPD_RX_BUFS: bounce receives per RDM endpoint */
	size_t staging;       /* FI_IWARPD_STAGING: staging bytes per domain */
	size_t dgram_max;     /* FI_IWARPD_DGRAM_MAX: largest DGRAM/MSG bounce message */
	int progress_thread;  /* FI_IWARPD_PROGRESS_THREAD: auto progress of protocol steps */
	int timeout_ms;       /* FI_IWARPD_TIMEOUT_MS: daemon answer timeout */
	int atomic_adopt;     /* FI_IWARPD_ATOMIC_ADOPT: adopt heap pages for atomic targets */
	size_t mr_cache;      /* FI_IWARPD_MR_CACHE: registrations a domain caches (0: none) */
	int idle_mode;        /* FI_IWARPD_IDLE: enum iwd_idle_mode (iwd_idle.c) */
	int idle_sleep_us;    /* FI_IWARPD_IDLE_SLEEP_US: one sleep of the wait discipline */
	int idle_block_us;    /* FI_IWARPD_IDLE_BLOCK_US: bound of a block on the channel (iwd_domain_block) */
	int dgram_crc;        /* FI_IWARPD_DGRAM_CRC: CRC32c on RD/UD QPs (every rank alike) */
	int fastpath;         /* FI_IWARPD_FASTPATH: the rank reads and sends on its UD QP's socket */
	int fastpath_rdm;     /* FI_IWARPD_FASTPATH_RDM: the same for RDM's RD QP (default on) */
	int cts;              /* FI_IWARPD_CTS: receiver-ready rendezvous (iwd_rdm_cts.c, default on) */
	int cts_wait_us;      /* FI_IWARPD_CTS_WAIT_US: a send whose last offer crossed waits this long for the next */
	int cts_credit;       /* FI_IWARPD_CTS_CREDIT: standing landing zones for peers that sent rendezvous (iwd_rdm_credit.c) */
};
extern struct iwd_params iwd_env;

/* ---- the wait discipline after an empty poll (iwd_idle.c) ---- */
/* Called by a poll that found nothing (-FI_EAGAIN, no fi_poll event, an
 * unchanged counter): yields or sleeps briefly, never longer than
 * IWD_IDLE_SLEEP_MAX_US. self_served (the domain's, read under its lock
 * after its progress): every endpoint's socket is the rank's own and
 * nothing waits on the daemon; then the default mode returns at once. */
void iwd_idle(int self_served);
/* Called by a poll that found something: the next wait's sleeps start
 * from FI_IWARPD_IDLE_SLEEP_US again. */
void iwd_idle_reset(void);
/* Called by an empty fi_cq_read whose domain waits on the daemon alone:
 * 1 when the read before it was empty too (iwd_idle.c). */
int iwd_idle_block_due(void);

/* errno (negative, as libiwverbs returns it) to -FI_E*. */
int iwd_errno(int err);
/* FI_LOG a libiwverbs failure with the library's explanation. */
#define IWD_WARN(subsys, ...) FI_WARN(&iwd_prov, subsys, __VA_ARGS__)
#define IWD_INFO(subsys, ...) FI_INFO(&iwd_prov, subsys, __VA_ARGS__)
#define IWD_DBG(subsys, ...) FI_DBG(&iwd_prov, subsys, __VA_ARGS__)

/* ---- getinfo (iwd_attr.c) ---- */
int iwd_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		const struct fi_info *hints, struct fi_info **info);
/* Checks an fi_info the application passes to fi_endpoint/fi_passive_ep
 * against what the provider offers. */
int iwd_check_info(const struct fi_info *info);
uint64_t iwd_mr_mode_required(uint32_t version, enum fi_ep_type type, uint64_t caps);

/* ---- fabric (iwd_fabric.c) ---- */
struct iwd_eq;
struct iwd_fp;
struct iwd_fprd;

struct iwd_fabric {
	struct fid_fabric fabric_fid;
	pthread_mutex_t lock;      /* session control calls, CM dispatch, eq list; taken
	                            * before a domain's lock, never while holding one */
	struct iwv_session *s;     /* one session per fabric: listeners and QPs meet in it */
	struct iwv_device_attr dev;
	struct sockaddr_in addr;   /* the device's address (port 0) */
	struct iwd_list eqs;
	struct iwd_list cm_objs;   /* struct iwd_cm_obj: whoever CM events are for */
	int refs;
};

int iwd_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
/* Opens a session with the FI_IWARPD_* parameters; explains failures (iwd_session.c). */
int iwd_session_open(struct iwv_session **s);

/* ---- CM event dispatch (iwd_cm.c) ----
 * Whoever a CM event is for registers here: a passive endpoint keyed by
 * its listener (connection requests), a MSG endpoint by its QP (every
 * other event). Progress calls the owner through its handler, so the
 * dispatch knows no endpoint type. */
struct iwd_cm_obj {
	struct iwd_list link;  /* fab->cm_objs */
	const void *key;       /* the struct iwv_listener or struct iwv_qp its events name */
	/* Handles one event; the fabric lock is held. */
	void (*event)(struct iwd_cm_obj *obj, struct iwv_cm_event *ev);
};
/* Adds or removes obj; the fabric lock is held. */
void iwd_cm_register(struct iwd_fabric *fab, struct iwd_cm_obj *obj);
void iwd_cm_unregister(struct iwd_cm_obj *obj);
/* Pulls every waiting CM event of the fabric's session to its owner; a
 * connection request nobody listens for is rejected. */
void iwd_cm_progress(struct iwd_fabric *fab);

/* ---- free lists of fixed-size objects (iwd_util_freelist.c) ---- */
struct iwd_freelist {
	void *head;
	size_t size;
};
void iwd_freelist_init(struct iwd_freelist *fl, size_t size);
/* A zeroed object: from the list, or newly allocated (NULL: no memory). */
void *iwd_freelist_get(struct iwd_freelist *fl);
void iwd_freelist_put(struct iwd_freelist *fl, void *obj);
void iwd_freelist_fini(struct iwd_freelist *fl);

/* ---- the registration cache (iwd_rcache.c) ---- */
struct iwd_rcache_entry;
struct iwd_rcache {
	struct iwd_list lru;
	size_t n, max;
	uint64_t hits, misses;
};

/* ---- domain (iwd_domain.c) ---- */
struct iwd_ep;

struct iwd_stage; /* staging allocator (iwd_buf.c) */

/* Counters of the receiver-ready rendezvous (iwd_rdm_cts.c, fi_ext_iwarpd.h). */
struct iwd_cts_stats {
	uint64_t offered, accepted, stale, used, declined, done, done_unexp, waits;
	uint64_t credit_granted, credit_taken, credit_used, credit_done, credit_unexp; /* iwd_rdm_credit.c */
};

struct iwd_domain {
	struct fid_domain domain_fid;
	struct iwd_fabric *fab;
	pthread_mutex_t lock;
	struct iwv_pd *pd;
	struct iwv_comp_channel *chan;
	uint32_t api_version;
	uint64_t mr_mode;
	uint64_t caps;              /* the fi_info's caps (FI_ATOMIC: MRs take atomics) */
	struct iwd_list eps;        /* every endpoint: domain-wide progress */
	struct iwd_stage *stage;
	struct iwd_rcache rcache;   /* registrations of unregistered send buffers */
	struct iwd_cts_stats cts;   /* receiver-ready rendezvous (iwd_rdm_cts.c) */
	int refs;
	int dead;                   /* the daemon went away */
	int self_served;            /* the last progress: every endpoint on its own socket (iwd_progress.c) */
	int daemon_wait;            /* the last progress: all the domain waits for is the daemon's (iwd_progress.c) */
	int64_t idle_check_ns;      /* CLOCK_MONOTONIC of the last iwd_domain_check_idle probe */
	pthread_t thread;           /* FI_IWARPD_PROGRESS_THREAD */
	int thread_on, thread_stop;
	int stop_fd;                /* eventfd that stops the thread */
};

int iwd_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, void *context);

/* ---- domain-wide progress (iwd_progress.c) ---- */
/* Polls every endpoint of the domain (through its ops); the domain lock is held. */
void iwd_domain_progress(struct iwd_domain *dom);
/* Arms every endpoint's verbs CQ (for a wait); the lock is held. */
void iwd_domain_arm(struct iwd_domain *dom);
/* Drains completion channel events; the lock is held. */
void iwd_domain_drain_chan(struct iwd_domain *dom);
/* -FI_ENODEV style check of the session; sets dom->dead. */
int iwd_domain_check(struct iwd_domain *dom);
/* iwd_domain_check for an empty poll (fi_cq_read, fi_poll): probes the
 * daemon's socket at most every IWD_IDLE_CHECK_NS; the lock is held. */
int iwd_domain_check_idle(struct iwd_domain *dom);
#define IWD_IDLE_CHECK_NS 1000000LL
/* iwd_domain_block, after an empty poll of cq (NULL: none) found
 * dom->daemon_wait (lock not held): arms the endpoints' verbs CQs, polls
 * once more and, if that found nothing, blocks on the completion channel
 * for at most FI_IWARPD_IDLE_BLOCK_US. 1 if it blocked or found a
 * completion in cq (the caller neither yields nor sleeps), 0 if the
 * domain no longer waits on the daemon alone or another of its CQs holds
 * a completion (the caller idles as before). */
struct iwd_cq;
int iwd_domain_block(struct iwd_domain *dom, struct iwd_cq *cq);

/* The registration cache (iwd_rcache.c); the domain lock is held. get
 * returns an entry covering [addr, addr+len) with remote read access and
 * its rkey, registering on a miss (NULL: none could be made); put gives it
 * back, failed when the transmit using it failed (the entry is dropped). */
void iwd_rcache_init(struct iwd_rcache *rc, size_t max);
void iwd_rcache_fini(struct iwd_rcache *rc);
struct iwd_rcache_entry *iwd_rcache_get(struct iwd_domain *dom, const void *addr, size_t len, uint32_t *rkey);
void iwd_rcache_put(struct iwd_domain *dom, struct iwd_rcache_entry *e, int failed);

/* ---- registered bounce buffers and staging (iwd_buf.c) ---- */
struct iwd_pool {
	struct iwv_buffer *buf;
	struct iwv_mr *mr;
	size_t slot_size;
	size_t count;
	uint32_t *free_stack;
	size_t nfree;
};
int iwd_pool_init(struct iwd_domain *dom, struct iwd_pool *p, size_t slot_size, size_t count);
/* The bounce pools hold a slot for each operation the attributes let the
 * application post (tx_attr->size plus IWD_TX_EXTRA, as iwd_ep_create_qp_srq;
 * rx_attr->size), not for the deeper queues the daemon rounds them up to
 * (powers of two): 256 + 16 sends made 512 slots of 64 KiB, 32 MiB of an
 * RxM connection's 48 or of an RDM rank's 112 (docs/memory.md). A post
 * beyond them waits for a slot (-FI_EAGAIN), which fi_endpoint(3) allows
 * past "size". */
static inline size_t iwd_pool_count(size_t asked, size_t depth) { return asked && asked < depth ? asked : depth; }
void iwd_pool_fini(struct iwd_pool *p);
void *iwd_pool_get(struct iwd_pool *p);
void iwd_pool_put(struct iwd_pool *p, void *slot);
uint32_t iwd_pool_lkey(const struct iwd_pool *p);

int iwd_stage_init(struct iwd_domain *dom, size_t size);
void iwd_stage_fini(struct iwd_domain *dom);
/* A contiguous staging chunk of at least len bytes, or NULL (try later). */
void *iwd_stage_alloc(struct iwd_domain *dom, size_t len);
/* The error for an operation iwd_stage_alloc failed: -FI_ENOMEM when the
 * staging memory could not be allocated at its first use, else -FI_EAGAIN
 * (staging busy: completions free it). */
int iwd_stage_err(struct iwd_domain *dom);
void iwd_stage_free(struct iwd_domain *dom, void *p, size_t len);
void *iwd_stage_alloc_tx(struct iwd_domain *dom, size_t len);
/* Staging a receiver-ready offer holds for the sender's Write (at most a
 * quarter of the staging, iwd_rdm_cts.c). */
void *iwd_stage_alloc_cts(struct iwd_domain *dom, size_t len);
void iwd_stage_free_cts(struct iwd_domain *dom, void *p, size_t len);
void iwd_stage_free_tx(struct iwd_domain *dom, void *p, size_t len);
uint32_t iwd_stage_lkey(struct iwd_domain *dom);
uint32_t iwd_stage_rkey(struct iwd_domain *dom);

/* ---- memory regions (iwd_mr.c) ---- */
struct iwd_mr {
	struct fid_mr mr_fid;
	struct iwd_domain *dom;
	struct iwv_mr *vmr;   /* NULL: local-only (the daemon could not register it) */
	void *addr;
	size_t len;
	uint64_t access;
	int atomic;           /* registered with remote atomic access */
	int arena;             /* on the session's arena of adopted pages (iwd_mr.c) */
};
int iwd_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
	       uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
int iwd_mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
		uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
int iwd_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr);
/* The lkey of desc if it covers [addr, addr+len) with a daemon registration. */
int iwd_desc_lkey(void *desc, const void *addr, size_t len, uint32_t *lkey);
/* -FI_EINVAL if a desc is not a live MR of this provider or a buffer is NULL
 * with a non-zero length (checked by every data transfer call before it
 * touches either; docs/libfabric.md "Failures"), else 0. */
int iwd_check_iov(const struct iovec *iov, void **desc, size_t count);

/* ---- address vectors (iwd_av.c) ---- */
struct iwd_av_entry {
	struct sockaddr_in sin;
	struct iwv_av vav;
	int used; /* references: inserts of this address not yet removed; 0 = free */
};

struct iwd_av {
	struct fid_av av_fid;
	struct iwd_domain *dom;
	enum fi_av_type type;
	struct iwd_av_entry *tab;
	size_t count, cap;
	uint32_t *hash;  /* open addressing on (ip, port): index+1, 0 empty */
	size_t hash_cap;
	int refs;
};
int iwd_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
/* The address vector of fi_addr, or NULL. */
const struct iwv_av *iwd_av_lookup(struct iwd_av *av, fi_addr_t addr);
/* The fi_addr of a source (ip, port), or FI_ADDR_NOTAVAIL. */
fi_addr_t iwd_av_reverse(struct iwd_av *av, const uint8_t ip[16], uint16_t port);

/* ---- completion queues (iwd_cq.c) ---- */
struct iwd_cqe {
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
	const void *owner; /* the endpoint that made it (iwd_cq_purge), or NULL */
};

struct iwd_cq_err {
	struct iwd_list link;
	struct fi_cq_err_entry e;
	fi_addr_t src;
	const void *owner;
};

/* ep_attr->protocol of FI_EP_RDM and FI_EP_DGRAM: the datagram-iWARP RD
 * and UD profiles over UDP (docs/wire-format.md), provider-specific values
 * (fi_endpoint(3)). */
#define IWD_PROTO_RD (FI_PROV_SPECIFIC | 1)
#define IWD_PROTO_UD (FI_PROV_SPECIFIC | 2)

/* An op_flags bit of the provider's own (libfabric's flags end below bit
 * 60): the operation reports no completion — fi_inject*, and the
 * provider's own control messages. FI_INJECT alone (fi_sendmsg with the
 * flag) still completes (fi_msg(3)). */
#define IWD_NOCOMP (1ULL << 62)

struct iwd_cq {
	struct fid_cq cq_fid;
	struct iwd_domain *dom;
	enum fi_cq_format format;
	size_t entry_size;
	enum fi_wait_obj wait_obj;
	struct iwd_cqe *ring;
	size_t cap, head, count;
	struct iwd_list errs;
	size_t nerrs;
	struct iwd_cq_err overrun; /* FI_EOVERRUN: completions lost for want of memory */
	size_t lost;
	int efd;  /* eventfd: provider-made completions wake waiters */
	int epfd; /* FI_GETWAIT: efd + the domain's completion channel */
	int refs;
	int signaled; /* fi_cq_signal not yet seen by a blocked read (__atomic) */
};
int iwd_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
/* Adds a completion made by owner (an endpoint, or NULL); the domain lock
 * is held. iwd_cq_push and iwd_cq_push_err are the ownerless forms. */
void iwd_cq_push_owned(struct iwd_cq *cq, const void *owner, void *context, uint64_t flags, size_t len, void *buf,
		       uint64_t data, uint64_t tag, fi_addr_t src);
void iwd_cq_push_err_owned(struct iwd_cq *cq, const void *owner, void *context, uint64_t flags, size_t len,
			   void *buf, uint64_t data, uint64_t tag, size_t olen, int err, int prov_errno,
			   fi_addr_t src);
#define iwd_cq_push(cq, ...) iwd_cq_push_owned(cq, NULL, __VA_ARGS__)
#define iwd_cq_push_err(cq, ...) iwd_cq_push_err_owned(cq, NULL, __VA_ARGS__)
/* Drops the unread completions owner made: fi_close(3) of an endpoint
 * discards its operations, and ofi_rxm reads its CQ right after closing a
 * connection's endpoint, then reposts a receive to the endpoint a
 * completion names (a closed one: use after free). The domain lock is held. */
void iwd_cq_purge(struct iwd_cq *cq, const void *owner);
/* Whether owner has a (successful) completion in cq not read yet; the
 * domain lock is held. */
int iwd_cq_has_owned(const struct iwd_cq *cq, const void *owner);
/* ---- the wait object of CQs and counters (iwd_util_wait.c): epoll on an
 * eventfd and the domain's completion channel ---- */
int iwd_wait_init(struct iwd_domain *dom, int *efd, int *epfd);
void iwd_wait_fini(int efd, int epfd);
void iwd_wait_signal(int efd);
/* Waits on epfd up to timeout_ms, after arming; the domain lock is NOT held. */
int iwd_wait_block(struct iwd_domain *dom, int efd, int epfd, int timeout_ms);

/* fi_trywait of one object: 0 when it may block, -FI_EAGAIN when it has
 * something to read. */
int iwd_cq_trywait(struct iwd_cq *cq);

/* ---- counters (iwd_cntr.c) ---- */
struct iwd_cntr {
	struct fid_cntr cntr_fid;
	struct iwd_domain *dom;
	uint64_t value, err;
	uint64_t last_read; /* the value fi_cntr_read returned last (iwd_cntr.c) */
	enum fi_wait_obj wait_obj;
	int efd, epfd;
	int refs;
};
int iwd_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr, void *context);

/* ---- poll sets (iwd_poll.c, fi_poll(3)): CQs and counters of a domain ---- */
int iwd_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **pollset);
void iwd_cntr_inc(struct iwd_cntr *c);
int iwd_cntr_trywait(struct iwd_cntr *c);
void iwd_cntr_err(struct iwd_cntr *c);

/* ---- event queues (iwd_eq.c) ---- */
struct iwd_eq {
	struct fid_eq eq_fid;
	struct iwd_fabric *fab;
	struct iwd_list link;    /* fab->eqs */
	struct iwd_list events;
	size_t nevents;
	enum fi_wait_obj wait_obj;
	int efd;  /* provider-made events */
	int epfd; /* FI_GETWAIT: efd + the session's event descriptor */
	int refs;
};
int iwd_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq, void *context);
/* Queues an event (entry of len bytes copied); the fabric lock is held. */
int iwd_eq_trywait(struct iwd_eq *eq);
int iwd_eq_push(struct iwd_eq *eq, uint32_t event, const void *entry, size_t len, int is_err);
/* Queues an event that is read only once ready(arg) returns nonzero:
 * the FI_SHUTDOWN of a connection comes after the completions that arrived
 * before it (iwd_eq.c). ready is called with the fabric lock held; the
 * event is purged (iwd_eq_purge) before arg goes away. */
int iwd_eq_push_after(struct iwd_eq *eq, uint32_t event, const void *entry, size_t len, int (*ready)(void *arg),
		      void *arg);
/* Drops the unread events about fid (a closed endpoint): fi_close(3) frees
 * them, and ofi_rxm relies on it (rxm_cm_progress). fab->lock is held. */
void iwd_eq_purge(struct iwd_eq *eq, const struct fid *fid);

/* ---- tag matching (iwd_tagged.c): posted and unexpected queues ---- */
#define IWD_RX_TAGGED_FLAG FI_TAGGED /* in iwd_rx.flags */
struct iwd_rx {              /* a posted receive */
	struct iwd_list link;
	void *context;
	uint64_t flags;          /* FI_MSG/FI_TAGGED | FI_RECV | FI_MULTI_RECV | FI_COMPLETION ... */
	fi_addr_t src;           /* FI_ADDR_UNSPEC: any */
	uint64_t tag, ignore;
	struct iovec iov[IWD_IOV_LIMIT];
	void *desc[IWD_IOV_LIMIT];
	size_t iov_count;
	size_t len;              /* total */
	size_t used;             /* FI_MULTI_RECV: bytes consumed */
	size_t inflight;         /* FI_MULTI_RECV: rendezvous reads still landing */
	int released;            /* FI_MULTI_RECV: FI_MULTI_RECV completion owed */
	void *cts_stage;         /* RDM: a receiver-ready offer is out (iwd_rdm_cts.c): staging for the sender's Write */
	size_t cts_len;
	uint64_t cts_id;
};

struct iwd_unexp {           /* an arrived message nobody asked for yet */
	struct iwd_list link;
	fi_addr_t src;
	uint64_t tag;
	uint64_t data;
	uint32_t hflags;         /* header flags (tagged, cq data) */
	int rndv;
	size_t len;              /* message length */
	uint32_t rkey;           /* rendezvous: the sender's buffer */
	uint64_t raddr;
	uint64_t id;             /* rendezvous: the sender's request id */
	uint8_t ip[16];
	uint16_t port;
	int claimed;             /* FI_PEEK|FI_CLAIM: held for a later FI_CLAIM receive */
	void *claim_ctx;
	void *zone;              /* a credit's landing zone holds the payload (iwd_rdm_credit.c) */
	size_t zone_len;
	unsigned char payload[]; /* eager payload (none when zone) */
};

struct iwd_match {
	struct iwd_list posted_msg, posted_tag;
	struct iwd_list unexp_msg, unexp_tag;
	size_t nunexp;
	size_t nunknown;         /* unexpected messages whose source was not in the AV yet */
	int directed;            /* FI_DIRECTED_RECV negotiated */
};
void iwd_match_init(struct iwd_match *m, int directed);
void iwd_match_fini(struct iwd_match *m);
int iwd_tag_match(uint64_t tag, uint64_t want, uint64_t ignore);
/* The first posted receive matching an arrival (removed), or NULL. */
struct iwd_rx *iwd_match_posted(struct iwd_match *m, int tagged, fi_addr_t src, uint64_t tag);
/* The first unexpected message matching a receive, or NULL; removed unless
 * peek. claim_ctx non-NULL selects the message claimed with that context. */
struct iwd_unexp *iwd_match_unexp(struct iwd_match *m, int tagged, fi_addr_t src, uint64_t tag, uint64_t ignore,
				  int peek, void *claim_ctx);
/* Removes a posted receive by context (fi_cancel); NULL if none. */
struct iwd_rx *iwd_match_cancel(struct iwd_match *m, void *context);
/* Copies len bytes of src into the receive's iovecs from offset off. */
size_t iwd_iov_copy_in(const struct iovec *iov, size_t cnt, size_t off, const void *src, size_t len);
size_t iwd_iov_copy_out(void *dst, const struct iovec *iov, size_t cnt, size_t len);
size_t iwd_iov_len(const struct iovec *iov, size_t cnt);

/* ---- endpoints: work requests and the RDM header ---- */

/* What a work request id points at: every context starts with this kind. */
enum iwd_wr_kind {
	IWD_WR_RX_BOUNCE = 1, /* RDM bounce receive */
	IWD_WR_TX_REQ,        /* a send/RMA request of the application */
	IWD_WR_CTRL,          /* a provider control send (FIN); bounce slot only */
	IWD_WR_RX_REQ,        /* DGRAM/MSG receive (user buffer or bounce) */
	IWD_WR_READ,          /* RDM rendezvous read of a receive */
};

struct iwd_wr {
	uint32_t kind;
};

/* The RDM header, little-endian, before every RDM message (docs/libfabric.md). */
enum iwd_hop {
	IWD_OP_EAGER = 1, /* payload follows */
	IWD_OP_RTS = 2,   /* rendezvous: read len bytes at (rkey, addr), then FIN id */
	IWD_OP_FIN = 3,   /* rendezvous done: the sender may complete request id */
	IWD_OP_WDATA = 4, /* fi_writedata: the Write of len octets before this is placed; data */
	IWD_OP_CTS = 5,   /* receiver ready (iwd_rdm_cts.c): receive id (tag, ignore in data) takes len octets at (rkey, addr) */
	IWD_OP_DONE = 6,  /* the message (tag, data, len) was written into receive id's (rkey, addr) before this */
	IWD_OP_CREDIT = 7, /* receiver ready for any (iwd_rdm_credit.c): one message of up to len octets may be written at (rkey, addr), then DONE (IWD_HF_CREDIT) id */
};
#define IWD_HF_TAGGED 0x1u
#define IWD_HF_CQDATA 0x2u
#define IWD_HF_CREDIT 0x4u /* DONE: written into credit id (iwd_rdm_credit.c), not an offer */
#define IWD_HDR_MAGIC 0x4977u /* "wI" */
#define IWD_HDR_LEN 48

struct iwd_hdr {
	uint8_t op;
	uint8_t flags;
	uint16_t magic;
	uint32_t rkey;
	uint64_t tag;
	uint64_t data;
	uint64_t len;
	uint64_t addr;
	uint64_t id;
};

struct iwd_ep;

/* An RDM bounce receive (IWD_WR_RX_BOUNCE). */
struct iwd_bounce {
	struct iwd_wr wr;
	void *slot;
};

/* A transmit request (IWD_WR_TX_REQ). */
struct iwd_tx {
	struct iwd_wr wr;
	struct iwd_list link;       /* ep->tx_active */
	struct iwd_ep *ep;
	void *context;
	uint64_t flags;             /* completion flags (FI_SEND|FI_MSG...) */
	uint64_t op_flags;          /* FI_COMPLETION, FI_INJECT ... */
	size_t len;
	void *bounce;               /* tx pool slot (eager header + payload) */
	void *stage;                /* rendezvous staging chunk */
	size_t stage_len;
	int stage_tx;               /* stage is a rendezvous send's copy (iwd_stage_alloc_tx) */
	struct iwv_mr *tmp_mr;      /* registered on the fly (FI_IWARPD_MR_CACHE=0) */
	struct iwd_rcache_entry *rc; /* a cached registration of the buffer */
	int failed;                 /* completed in error: rc is dropped */
	uint64_t id;                /* rendezvous id (FIN) */
	int waiting_fin;
	int posted;                 /* the SQ WR is outstanding */
	int cntr_kind;              /* which counter to bump: 0 send, 1 write, 2 read */
	/* RMA and atomics: completes the request (iwd_rma_done); NULL: the
	 * type's own send completion. */
	void (*done)(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_wc *wc);
	struct iwd_atomic_cas *cas; /* an atomic run as compare-and-swap rounds (iwd_atomic_cas.c) */
	/* RMA read into a non-registered buffer: copy out on completion */
	struct iovec iov[IWD_IOV_LIMIT];
	size_t iov_count;
};

/* A DGRAM/MSG receive or an RDM rendezvous read (IWD_WR_RX_REQ, IWD_WR_READ). */
struct iwd_rxreq {
	struct iwd_wr wr;
	struct iwd_list link;
	struct iwd_ep *ep;
	struct iwd_rx *rx;          /* RDM: the matched receive */
	void *context;
	uint64_t flags;
	struct iovec iov[IWD_IOV_LIMIT];
	size_t iov_count;
	size_t len;                 /* capacity */
	size_t off;                 /* FI_MULTI_RECV offset into the receive */
	void *bounce;               /* pool or staging slot */
	size_t bounce_len;
	int stage;                  /* bounce is a staging chunk */
	struct iwv_mr *tmp_mr;
	/* RDM rendezvous */
	uint64_t tag, data, id;
	uint32_t hflags;
	size_t mlen;                /* message length */
	size_t olen;                /* truncated octets */
	fi_addr_t src;
	uint8_t ip[16];
	uint16_t port;
	uint32_t rkey;
	uint64_t raddr;
	int pending;                /* waiting for SQ space or staging */
};

/* What an endpoint type does differently: the shared code (iwd_ep_base.c,
 * iwd_ep_data.c, iwd_rma.c, iwd_atomic.c, iwd_progress.c) calls through
 * this table and never asks which type it has; each type's file fills one
 * (iwd_ep_rdm.c, iwd_ep_dgram.c, iwd_ep_msg.c), as libfabric's util
 * endpoints carry a progress function and rxd/tcp their own ops. */
struct iwd_ep_ops {
	/* The QP is RD or UD: destinations come from an AV (fi_ep_bind
	 * FI_CLASS_AV, required by fi_enable), sends carry IWD_QKEY, and
	 * fi_close lingers until the endpoint's sends completed. */
	int datagram;
	/* fi_enable: bounce pools and what else the type needs; the domain
	 * lock is held. On failure it leaves nothing set up. */
	int (*enable)(struct iwd_ep *ep);
	/* fi_close, before the QP is destroyed; no lock held. May be NULL. */
	void (*disconnect)(struct iwd_ep *ep);
	/* fi_close, after the QP is destroyed: frees the type's requests;
	 * the domain lock is held. */
	void (*fini)(struct iwd_ep *ep);
	/* Polls the endpoint and runs its protocol (iwd_progress.c); the
	 * domain lock is held. */
	void (*progress)(struct iwd_ep *ep);
	/* One verbs completion of the endpoint's CQ; the domain lock is held. */
	void (*wc)(struct iwd_ep *ep, struct iwv_wc *wc);
	/* After a poll: protocol steps that waited for queue space. May be NULL. */
	void (*retry)(struct iwd_ep *ep);
	/* fi_cancel; the domain lock is held. */
	ssize_t (*cancel)(struct iwd_ep *ep, void *context);
	/* fi_rx_size_left when receives are not QP receives. May be NULL. */
	ssize_t (*rx_size_left)(struct iwd_ep *ep);
	/* Where a transmit to dest goes: the AV entry (*av) of a datagram
	 * endpoint, or NULL for a connected one; -FI_ENOTCONN / -FI_EINVAL.
	 * The domain lock is held. */
	int (*tx_dest)(struct iwd_ep *ep, fi_addr_t dest, const struct iwv_av **av);
	/* Posts an RDMA Write (the opcode is the type's) and, with
	 * FI_REMOTE_CQ_DATA, what delivers data to the target; the domain
	 * lock is held. NULL: no RMA. */
	int (*rma_write)(struct iwd_ep *ep, struct iwv_send_wr *wr, uint64_t op_flags, uint64_t data, size_t len,
			 const struct iwv_av *av);
	/* The application is about to block (fi_trywait, sread: the CQs are
	 * armed); the domain lock is held. May be NULL. */
	void (*idle)(struct iwd_ep *ep);
	/* Whether a transfer the daemons move is in flight (RDM: a rendezvous
	 * send not complete, a rendezvous Read): an empty fi_cq_read may then
	 * block on the completion channel (iwd_progress.c); the domain lock
	 * is held. May be NULL (never). */
	int (*bulk)(struct iwd_ep *ep);
};

/* What every endpoint type has. Each type embeds it first in its own
 * object (struct iwd_rdm_ep in iwd_rdm.h, struct iwd_dgram_ep and
 * struct iwd_msg_ep in iwd_dgram.h). */
struct iwd_ep {
	struct fid_ep ep_fid;
	const struct iwd_ep_ops *ops;
	struct iwd_domain *dom;
	struct fi_info *info;
	uint64_t caps;
	uint64_t cq_data_max;           /* largest FI_REMOTE_CQ_DATA value; 0: none */
	struct iwd_list link;           /* dom->eps */
	struct iwd_cq *tx_cq, *rx_cq;
	int tx_selective, rx_selective; /* FI_SELECTIVE_COMPLETION */
	struct iwd_cntr *send_cntr, *recv_cntr, *read_cntr, *write_cntr, *rread_cntr, *rwrite_cntr;
	struct iwd_av *av;
	struct iwd_eq *eq;
	uint64_t tx_op_flags, rx_op_flags;
	struct iwv_cq *vcq;
	struct iwv_qp *qp;
	struct sockaddr_in name;        /* bound address (datagram QPs: ip:port) */
	uint16_t want_port;             /* src_addr port asked for */
	int enabled;
	/* bounce buffers */
	struct iwd_pool txp, rxp;
	size_t sq_depth, sq_used;
	size_t rq_depth, rq_used;
	size_t min_multi_recv;          /* FI_OPT_MIN_MULTI_RECV */
	struct iwd_list tx_active;      /* transmit requests not yet completed */
	struct iwd_freelist tx_free;    /* struct iwd_tx for reuse */
	struct iwd_fp *fp;              /* the fast path (iwd_fastpath.c); NULL: off */
	struct iwd_fprd *fprd;          /* RDM's fast path (iwd_fastpath_rd.c); NULL: off */
	/* atomics posted (iwd_atomic.c), by kind: fi_atomic, fi_fetch_atomic,
	 * fi_compare_atomic; logged at the close (FI_LOG_LEVEL=info) */
	uint64_t at_posted[3];
};

/* ---- the endpoint object (iwd_ep_base.c) ---- */
/* Fills the common part of a new endpoint of any type. */
void iwd_ep_init(struct iwd_ep *ep, struct iwd_domain *dom, struct fi_info *info, void *context,
		 const struct iwd_ep_ops *ops);
/* The endpoint's verbs CQ and QP (at open). */
int iwd_ep_create_qp(struct iwd_ep *ep, enum iwv_qp_type qpt, size_t rx_depth);
/* The same with the QP's receives from srq (NULL: its own RQ). */
int iwd_ep_create_qp_srq(struct iwd_ep *ep, enum iwv_qp_type qpt, size_t rx_depth, struct iwv_srq *srq);
/* Adds an opened endpoint to its domain, or undoes iwd_ep_init and
 * iwd_ep_create_qp when ret is an error; frees ep then. Returns ret. */
int iwd_ep_opened(struct iwd_ep *ep, int ret, struct fid_ep **out);
int iwd_ep_getname(fid_t fid, void *addr, size_t *addrlen);
/* The rx queue depth an fi_info asks for. */
size_t iwd_ep_rx_depth(const struct fi_info *info);
/* Transmit bounce slots: tx_attr->size (else IWD_TX_SIZE) + IWD_TX_EXTRA,
 * at most the send queue's depth (iwd_pool_count). */
size_t iwd_ep_tx_pool_count(const struct iwd_ep *ep);

/* ---- the data path every type shares (iwd_ep_data.c) ---- */
/* Polls ep's verbs CQ, hands each completion to ep->ops->wc, then
 * ep->ops->retry; the domain lock is held. */
void iwd_ep_progress(struct iwd_ep *ep);
/* Completion helpers (selective completion, counters). */
void iwd_ep_tx_done(struct iwd_ep *ep, void *context, uint64_t flags, uint64_t op_flags, size_t len, int cntr_kind);
void iwd_ep_tx_err(struct iwd_ep *ep, void *context, uint64_t flags, int err, int prov_errno, int cntr_kind);
void iwd_ep_rx_done(struct iwd_ep *ep, void *context, uint64_t flags, size_t len, void *buf, uint64_t data,
		    uint64_t tag, fi_addr_t src);
void iwd_ep_rx_err(struct iwd_ep *ep, void *context, uint64_t flags, size_t len, uint64_t data, uint64_t tag,
		   size_t olen, int err, int prov_errno, fi_addr_t src);
/* The source fi_addr of a completion (FI_SOURCE), or FI_ADDR_NOTAVAIL. */
fi_addr_t iwd_ep_src(struct iwd_ep *ep, const struct iwv_wc *wc);
int iwd_wc_errno(const struct iwv_wc *wc);
/* The AV entry of dest (ops->tx_dest of datagram endpoints). */
int iwd_ep_av_dest(struct iwd_ep *ep, fi_addr_t dest, const struct iwv_av **av);
/* Posts a send WR; maps queue full to -FI_EAGAIN. */
int iwd_ep_post_send(struct iwd_ep *ep, struct iwv_send_wr *wr);
/* n work requests in one post (one doorbell): how many were posted (0 to
 * n), or a negative fi_errno when none was. */
int iwd_ep_post_send_n(struct iwd_ep *ep, struct iwv_send_wr *wr, int n);
/* Common transmit preparation: gathers iov into SGEs (desc, bounce or staging). */
int iwd_tx_gather(struct iwd_ep *ep, struct iwd_tx *tx, const struct iovec *iov, void **desc, size_t count,
		  const void *hdr, size_t hdr_len, struct iwv_sge *sge, int *nsge, int force_copy);
struct iwd_tx *iwd_tx_new(struct iwd_ep *ep, void *context, uint64_t flags, uint64_t op_flags);
void iwd_tx_free(struct iwd_ep *ep, struct iwd_tx *tx);

/* The creator of endpoints (iwd_ep.c): the one place that picks a type,
 * and each type's open (iwd_rdm_ops.c, iwd_ep_dgram.c, iwd_ep_msg.c). */
int iwd_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);
int iwd_rdm_ep_open(struct iwd_domain *dom, struct fi_info *info, struct fid_ep **ep, void *context);
int iwd_dgram_ep_open(struct iwd_domain *dom, struct fi_info *info, struct fid_ep **ep, void *context);
int iwd_msg_ep_open(struct iwd_domain *dom, struct fi_info *info, struct fid_ep **ep, void *context);

/* RMA over RD and RC (iwd_rma.c), atomics (iwd_atomic.c). */
extern struct fi_ops_rma iwd_rma_ops;
extern struct fi_ops_atomic iwd_atomic_ops;
/* The completion of an RMA or atomic transmit (tx->done). */
void iwd_rma_done(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_wc *wc);

/* FI_ATOMIC (iwd_atomic.c): kind 0 write, 1 fetch, 2 compare. */
int iwd_atomic_valid(int kind, enum fi_datatype dt, enum fi_op op);
int iwd_atomic_cas_supported(enum fi_datatype dt, enum fi_op op);
int iwd_atomic_cas_start(struct iwd_ep *ep, struct iwd_tx *tx, const struct iwv_av *av, uint64_t addr, uint32_t rkey,
			 enum fi_datatype dt, enum fi_op op, uint64_t operand, uint64_t compare, void *result);
int iwd_query_atomic(struct fid_domain *domain, enum fi_datatype dt, enum fi_op op, struct fi_atomic_attr *attr,
		     uint64_t flags);

/* fi_srx_context of MSG endpoints (iwd_srx.c; iwd_srx.h for the rest). */
int iwd_srx_open(struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context);

/* Passive endpoints (iwd_pep.c). */
int iwd_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep, void *context);

/* ---- operations an object does not offer (iwd_util_noops.c) ---- */
int iwd_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int iwd_no_control(struct fid *fid, int command, void *arg);
int iwd_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context);
int iwd_no_setname(fid_t fid, void *addr, size_t addrlen);
int iwd_no_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen);
int iwd_no_connect(struct fid_ep *ep, const void *addr, const void *param, size_t paramlen);
int iwd_no_listen(struct fid_pep *pep);
int iwd_no_accept(struct fid_ep *ep, const void *param, size_t paramlen);
int iwd_no_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen);
int iwd_no_shutdown(struct fid_ep *ep, uint64_t flags);
int iwd_no_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc, void *context);
ssize_t iwd_no_cancel(fid_t fid, void *context);
int iwd_no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr, struct fid_ep **tx_ep, void *context);
int iwd_no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context);
extern struct fi_ops_tagged iwd_no_tagged_ops;
extern struct fi_ops_rma iwd_no_rma_ops;
extern struct fi_ops_atomic iwd_no_atomic_ops;

/* ---- addresses (iwd_util_addr.c) ---- */
/* "a.b.c.d:port" to a sockaddr_in; -FI_EINVAL if it is not one. */
int iwd_parse_sockaddr(const char *ipport, struct sockaddr_in *sin);
/* Copies sin out as fi_getname / fi_getpeer do: -FI_ETOOSMALL with the
 * size needed in *addrlen when it does not fit. */
int iwd_give_sockaddr(const struct sockaddr_in *sin, void *addr, size_t *addrlen);

static inline void iwd_lock(struct iwd_domain *d) { pthread_mutex_lock(&d->lock); }
static inline void iwd_unlock(struct iwd_domain *d) { pthread_mutex_unlock(&d->lock); }

#endif /* IWD_H */
