/*
 * iwarpd/verbs.h — libiwverbs, the C client of iwarpd (the C twin of the Go
 * package ofverbs, speaking package proto: docs/c-client.md).
 *
 * A session is one SOCK_SEQPACKET connection to the daemon (control
 * messages: 16-octet header + JSON body, descriptors by SCM_RIGHTS); the
 * data path is shared memory: send, receive and completion rings in sealed
 * memfds (proto/queue.go), a status page and a doorbell eventfd. Verbs are
 * shaped as libibverbs' (ibv_*), with rdma_cm-style connection management
 * for RC queue pairs.
 *
 * Errors: every function returning int returns 0 (or a count) on success and
 * a negative errno on failure: -EINVAL bad argument, -ENOMEM queue full or no
 * memory, -ENODEV the daemon is gone (or the session closed), -ETIMEDOUT,
 * or the errno the daemon chose. iwv_last_error() gives the explanation.
 *
 * Threads: control calls (create/destroy/modify/query, CM, events) take the
 * session mutex and may be made from any thread. The data path takes a lock
 * per queue, as libibverbs providers do (siw's sq_lock and rq_lock) and as
 * ofverbs does: iwv_post_send (the QP's SQ), iwv_post_recv (its RQ),
 * iwv_post_srq_recv (the SRQ) and iwv_poll_cq (the CQ) may be called on one
 * queue from several threads at once; each call's work requests stay
 * together and in order. Different queues never contend. Destroying a queue
 * while another thread uses it is the caller's to prevent.
 *
 * Fork: descriptors are close-on-exec; a forked child must not use its
 * parent's session (it shares the parent's socket and rings). It may open
 * its own. Buffers (iwv_alloc_buffer) are MAP_SHARED: the child sees the
 * same memory as the parent.
 *
 * A dead daemon: every call that needs the daemon fails with -ENODEV; no
 * call blocks longer than about one second after the daemon died; no call
 * raises SIGPIPE.
 */
#ifndef IWARPD_VERBS_H
#define IWARPD_VERBS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define IWV_EXPORT __attribute__((visibility("default")))
#else
#define IWV_EXPORT
#endif

/* IWV_ABI_VERSION must equal proto.ABIVersion (checked by a Go test,
 * test/cclient). Client and daemon must agree exactly. */
#define IWV_ABI_VERSION 5

/* Environment variable naming the control socket (as ofverbs.EnvSocket). */
#define IWV_ENV_SOCKET "IWARPD_SOCKET"

/* Environment variable choosing who makes the UDP sockets of UD and RD QPs
 * (as ofverbs.EnvQPSocket; docs/c-client.md "QP sockets"): "daemon" lets
 * iwarpd make them (their datagrams then leave as iwarpd's user); unset or
 * anything else, the client does, when it runs in iwarpd's network
 * namespace. */
#define IWV_ENV_QP_SOCKET "IWARPD_QP_SOCKET"

/* Limits of the protocol. */
#define IWV_MAX_PRIVATE_DATA 512 /* MPA private data, octets */
#define IWV_ADDR_STRLEN 64       /* "[v6addr%zone]:port" and NUL */
#define IWV_DETAIL_LEN 256

/* Opaque objects. */
struct iwv_session;
struct iwv_pd;
struct iwv_buffer;
struct iwv_mr;
struct iwv_comp_channel;
struct iwv_cq;
struct iwv_srq;
struct iwv_qp;
struct iwv_listener;

/* ---- enums (values are proto's) ---- */

enum iwv_qp_type {
	IWV_QPT_RC = 1, /* reliable connected: RDMAP/DDP/MPA over TCP */
	IWV_QPT_UD = 2, /* unreliable datagram over UDP */
	IWV_QPT_RD = 3, /* reliable datagram */
};

enum iwv_qp_state {
	IWV_QPS_RESET = 0,
	IWV_QPS_INIT = 1,
	IWV_QPS_RTR = 2,
	IWV_QPS_RTS = 3,
	IWV_QPS_SQD = 4,
	IWV_QPS_SQE = 5,
	IWV_QPS_ERR = 6,
};

enum iwv_access {
	IWV_ACCESS_LOCAL_WRITE = 1 << 0,
	IWV_ACCESS_REMOTE_WRITE = 1 << 1,
	IWV_ACCESS_REMOTE_READ = 1 << 2,
	IWV_ACCESS_REMOTE_ATOMIC = 1 << 3,
};

enum iwv_wr_opcode {
	IWV_WR_SEND = 0,
	IWV_WR_SEND_WITH_INV = 1,
	IWV_WR_RDMA_WRITE = 2,
	IWV_WR_RDMA_READ = 3,
	IWV_WR_WRITE_RECORD = 4,
	IWV_WR_LOCAL_INV = 5,
	IWV_WR_SEND_WITH_IMM = 6,        /* Send carrying imm (RC, UD, RD) */
	IWV_WR_RDMA_WRITE_WITH_IMM = 7,  /* RDMA Write + RFC 7306 Immediate Data (RC) */
	IWV_WR_ATOMIC_FETCH_AND_ADD = 8, /* RFC 7306 FetchAdd (RC, RD) */
	IWV_WR_ATOMIC_CMP_AND_SWP = 9,   /* RFC 7306 CmpSwap (RC, RD) */
	/* A Write-Record carrying imm (UD, RD): the target's
	 * IWV_WC_RECV_WRITE_RECORD completion has IWV_WC_FLAG_IMM and imm. */
	IWV_WR_WRITE_RECORD_WITH_IMM = 10,
};

enum iwv_send_flags {
	IWV_SEND_SIGNALED = 1 << 0,
	IWV_SEND_SOLICITED = 1 << 1,
	IWV_SEND_INLINE = 1 << 2,
	IWV_SEND_FENCE = 1 << 3,
};

enum iwv_wc_status {
	IWV_WC_SUCCESS = 0,
	IWV_WC_LOC_LEN_ERR = 1,
	IWV_WC_LOC_QP_OP_ERR = 2,
	IWV_WC_LOC_PROT_ERR = 4,
	IWV_WC_WR_FLUSH_ERR = 5,
	IWV_WC_BAD_RESP_ERR = 7,
	IWV_WC_LOC_ACCESS_ERR = 8,
	IWV_WC_REM_INV_REQ_ERR = 9,
	IWV_WC_REM_ACCESS_ERR = 10,
	IWV_WC_REM_OP_ERR = 11,
	IWV_WC_RETRY_EXC_ERR = 12,
	IWV_WC_RNR_RETRY_EXC_ERR = 13,
	IWV_WC_REM_ABORT_ERR = 16,
	IWV_WC_FATAL_ERR = 19,
	IWV_WC_RESP_TIMEOUT_ERR = 20,
	IWV_WC_GENERAL_ERR = 21,
};

enum iwv_wc_opcode {
	IWV_WC_SEND = 0,
	IWV_WC_RDMA_WRITE = 1,
	IWV_WC_RDMA_READ = 2,
	IWV_WC_WRITE_RECORD = 3,
	IWV_WC_LOCAL_INV = 4,
	IWV_WC_FETCH_ADD = 5,
	IWV_WC_COMP_SWAP = 6,
	IWV_WC_RECV = 128,
	IWV_WC_RECV_WRITE_RECORD = 129,
	IWV_WC_RECV_RDMA_WITH_IMM = 130, /* an RDMA Write with immediate data (RC): imm valid, byte_len 0 */
};

enum iwv_wc_flags {
	IWV_WC_FLAG_SOLICITED = 1 << 0,
	IWV_WC_FLAG_WITH_INV = 1 << 1,
	IWV_WC_FLAG_SRC_VALID = 1 << 2,
	IWV_WC_FLAG_TERM_VALID = 1 << 3,
	IWV_WC_FLAG_RECORD_TRIM = 1 << 4,
	IWV_WC_FLAG_IMM = 1 << 5, /* imm holds immediate data */
};

/* A device's atomicity guarantee (iwv_device_attr.atomic_cap), as enum
 * ibv_atomic_cap. */
enum iwv_atomic_cap {
	IWV_ATOMIC_NONE = 0, /* no remote atomics */
	IWV_ATOMIC_HCA = 1,  /* atomic against other remote atomics only */
	IWV_ATOMIC_GLOB = 2, /* atomic against remote atomics and CPU atomics */
};

enum iwv_event_type {
	IWV_EVENT_QP_FATAL = 1,
	IWV_EVENT_QP_ACCESS_ERR = 2,
	IWV_EVENT_CQ_ERR = 3,
	IWV_EVENT_SRQ_LIMIT_REACHED = 4,
	IWV_EVENT_DEVICE_FATAL = 5,
	IWV_EVENT_REMOTE_ACCESS_REFUSED = 6, /* a peer's access through a datagram QP was refused; the QP stays up */
};

enum iwv_cm_event_type {
	IWV_CM_CONNECT_REQUEST = 1,
	IWV_CM_ESTABLISHED = 2,
	IWV_CM_REJECTED = 3,
	IWV_CM_UNREACHABLE = 4,
	IWV_CM_TIMED_OUT = 5,
	IWV_CM_DISCONNECTED = 6,
	IWV_CM_CONNECTION_ERROR = 7,
};

/* ---- session ---- */

struct iwv_open_attr {
	const char *socket;      /* NULL: iwv_default_socket() */
	const char *client_name; /* NULL: the program's name (iwarpctl shows it) */
	int hello_timeout_ms;    /* 0: 10000 */
	uint16_t abi;            /* 0: IWV_ABI_VERSION (tests only: another ABI) */
};

/* Writes the control socket a client uses by default into buf: $IWARPD_SOCKET
 * if set, else /run/iwarpd/iwarpd.sock as root, else
 * $XDG_RUNTIME_DIR/iwarpd/iwarpd.sock, else $TMPDIR/iwarpd-UID/iwarpd.sock
 * ($TMPDIR defaulting to /tmp), exactly as ofverbs.DefaultSocket.
 * Returns 0, or -ENAMETOOLONG when buf is too small. */
IWV_EXPORT int iwv_default_socket(char *buf, size_t len);

/* Opens a session (attr may be NULL). On failure *out is NULL and
 * iwv_last_error(NULL) explains it to this thread; an ABI mismatch is
 * -EPROTO. */
IWV_EXPORT int iwv_open(const struct iwv_open_attr *attr, struct iwv_session **out);

/* Ends the session and frees every object of it (the daemon drops them with
 * the session): pointers to its objects and buffers are invalid afterwards.
 * NULL is ignored. */
IWV_EXPORT void iwv_close(struct iwv_session *s);

/* 0 while the session is alive, else -ENODEV. Checks the socket (no wait). */
IWV_EXPORT int iwv_session_status(struct iwv_session *s);

/* Control round trips the session made so far (requests sent to the
 * daemon over the control socket and waited for), and how many of them
 * registered or deregistered memory: what a data path that should not
 * touch the control plane is measured by (docs/c-client.md). */
struct iwv_session_stats {
	uint64_t control_calls;
	uint64_t reg_mr_calls;
	uint64_t dereg_mr_calls;
};
IWV_EXPORT void iwv_session_stats(struct iwv_session *s, struct iwv_session_stats *out);

/* The last failure's explanation, per thread as errno is: of this thread's
 * last failed call on s, or with s NULL of this thread's last iwv_open.
 * Another thread's failure never overwrites it. Never NULL. The text is
 * copied to a thread-local buffer valid until this thread's next call of
 * iwv_last_error. A full queue (-ENOMEM from a post) is explained by a
 * fixed text: the data path formats nothing. */
IWV_EXPORT const char *iwv_last_error(struct iwv_session *s);

/* strerror of a negative errno returned by this library. */
IWV_EXPORT const char *iwv_strerror(int err);

IWV_EXPORT const char *iwv_device_name(const struct iwv_session *s);
IWV_EXPORT const char *iwv_daemon_version(const struct iwv_session *s);
IWV_EXPORT const char *iwv_device_addr(const struct iwv_session *s); /* IP, "" if unknown */
IWV_EXPORT uint64_t iwv_session_id(const struct iwv_session *s);
IWV_EXPORT int iwv_abi_version(void); /* IWV_ABI_VERSION of the library */

struct iwv_device_attr {
	char name[64];
	uint32_t max_qp, max_qp_wr, max_sge, max_cq, max_cqe, max_mr;
	uint64_t max_mr_size;
	uint64_t max_registered; /* bytes per session */
	uint32_t max_pd, max_srq, max_srq_wr, max_inline, max_msg_ud, datagram_size;
	uint32_t max_comp_channel;
	uint32_t atomic_cap;                     /* enum iwv_atomic_cap */
	uint32_t max_qp_rd_atom, max_qp_init_rd_atom; /* IRD / ORD bounds of a QP */
};

struct iwv_port_attr {
	char state[16]; /* "active" */
	char addr[IWV_ADDR_STRLEN];
	uint32_t datagram_size;
	uint16_t ud_port_first, ud_port_last;
	/* Explicit ports below unpriv_port_start (the daemon's
	 * net.ipv4.ip_unprivileged_port_start, ip(7)) are refused to this
	 * session unless priv_bind (uid 0 or CAP_NET_BIND_SERVICE); 0: a
	 * daemon that does not say. */
	uint16_t unpriv_port_start;
	int priv_bind;
};

IWV_EXPORT int iwv_query_device(struct iwv_session *s, struct iwv_device_attr *attr);
IWV_EXPORT int iwv_query_port(struct iwv_session *s, struct iwv_port_attr *attr);

/* ---- addresses (the address vector of a datagram work request) ---- */

/* An address vector, as proto.AddressVector: family 4 or 6, the UDP port,
 * the IPv6 address or the IPv4-mapped form of an IPv4 address. The client
 * keeps it; it travels in every datagram SQE. */
struct iwv_av {
	uint8_t family; /* 4 or 6; 0 = none */
	uint8_t flags;  /* zero */
	uint16_t port;  /* host order */
	uint8_t ip[16];
	/* The destination QP's Q_Key (docs/wire-format.md §5.1): every datagram
	 * must name it. iwv_qp_av fills it; the iwv_av_from_* functions leave
	 * it 0 (set it from what the peer told you, or use
	 * iwv_send_wr.remote_qkey). */
	uint32_t qkey;
};

/* Fills av from a sockaddr_in / sockaddr_in6 (an IPv4-mapped IPv6 address is
 * IPv4) and checks it as ofverbs.CreateAH does: port not 0, IPv6 not ::, of
 * the device's address family. -EINVAL otherwise. */
IWV_EXPORT int iwv_av_from_sockaddr(struct iwv_session *s, struct iwv_av *av, const struct sockaddr *sa);
/* Same, from "ip:port" or "[ip6]:port". */
IWV_EXPORT int iwv_av_from_string(struct iwv_session *s, struct iwv_av *av, const char *addr);
/* Formats av as "ip:port" / "[ip6]:port" (len >= IWV_ADDR_STRLEN is enough). */
IWV_EXPORT int iwv_av_format(const struct iwv_av *av, char *buf, size_t len);
/* Fills a sockaddr_storage (sockaddr_in for family 4); returns its length or
 * -EINVAL. */
IWV_EXPORT int iwv_av_to_sockaddr(const struct iwv_av *av, struct sockaddr_storage *ss);

/* ---- protection domains and memory ---- */

IWV_EXPORT int iwv_alloc_pd(struct iwv_session *s, struct iwv_pd **out);
/* -EBUSY while MRs, QPs or SRQs use it. */
IWV_EXPORT int iwv_dealloc_pd(struct iwv_pd *pd);
IWV_EXPORT uint32_t iwv_pd_handle(const struct iwv_pd *pd);

/* Allocates size zeroed bytes of shared memory (a sealed memfd mapped here,
 * rounded up to whole pages): memory registered inside it is reached by the
 * daemon without copies. */
IWV_EXPORT int iwv_alloc_buffer(struct iwv_session *s, size_t size, struct iwv_buffer **out);
IWV_EXPORT void *iwv_buffer_addr(const struct iwv_buffer *b);
IWV_EXPORT size_t iwv_buffer_len(const struct iwv_buffer *b);
/* Unmaps the buffer; MRs on it stay registered in the daemon until
 * deregistered, but this process must not touch the memory any more. */
IWV_EXPORT int iwv_free_buffer(struct iwv_buffer *b);
/* Turns the application's own whole pages [addr, addr+len) into a buffer in
 * place: their contents move into a new sealed memfd mapped MAP_SHARED at
 * the same address (mremap(2), never unmapped in between), so memory
 * registered inside is zero-copy and may grant IWV_ACCESS_REMOTE_ATOMIC
 * (which process memory cannot: docs/memory-registration.md). Caveats: a
 * write by another thread to these pages while they are copied is lost; a
 * child forked afterwards shares the pages instead of copying them.
 * iwv_free_buffer (or closing the session) puts private pages with the
 * same contents back instead of unmapping. -EINVAL unless page-aligned. */
IWV_EXPORT int iwv_adopt_buffer(struct iwv_session *s, void *addr, size_t len, struct iwv_buffer **out);
/* 1 when [addr, addr+len) lies in b and is still b's memory: always for
 * iwv_alloc_buffer's; for an adopted buffer, while the application has
 * neither unmapped those pages nor mapped something else there (proc(5)
 * /proc/self/maps: the memfd at its own offset). iwv_reg_mr registers
 * pages that are no longer adopted as process memory, and iwv_free_buffer
 * gives back only the pages still adopted. 0 otherwise. */
IWV_EXPORT int iwv_buffer_mapped(const struct iwv_buffer *b, const void *addr, size_t len);
/* Adopts the application's whole pages [addr, addr+len) into the session's
 * arena, in place as iwv_adopt_buffer does: one sparse memfd holding each
 * page at file offset = its address, so that ranges adopted at different
 * times (adjacent or overlapping) are one range of one file and an MR may
 * span them. Pages adopted already stay as they are. Refused: a range not
 * all mapped (-EFAULT), not readable and writable (-EACCES), or holding a
 * shared mapping of another object (-EXDEV: adoption would unshare it from
 * the processes that map it). iwv_reg_mr inside adopted pages registers
 * the arena (zero copy; remote atomic access allowed). */
IWV_EXPORT int iwv_adopt_pages(struct iwv_session *s, void *addr, size_t len);
/* Gives back the arena's pages of [addr, addr+len) (rounded out to pages)
 * that no live MR on the arena covers: private again with the same
 * contents, the arena's copy freed. Pages the application has unmapped or
 * mapped anew since are left alone (iwv_buffer_mapped). */
IWV_EXPORT int iwv_release_pages(struct iwv_session *s, void *addr, size_t len);

/* Registers [addr, addr+len). Inside one buffer of iwv_alloc_buffer the
 * buffer's memfd range is registered (zero-copy: the daemon maps it);
 * anywhere else (heap, stack, static memory) the application's own memory is
 * registered (proto RegMRRequest.Process: the daemon reaches it through
 * this process's /proc/self/mem, handed over by iwv_open). Remote write or atomic access requires local
 * write (-EINVAL). */
IWV_EXPORT int iwv_reg_mr(struct iwv_pd *pd, void *addr, size_t len, int access, struct iwv_mr **out);
IWV_EXPORT int iwv_dereg_mr(struct iwv_mr *mr);
IWV_EXPORT uint32_t iwv_mr_lkey(const struct iwv_mr *mr);
IWV_EXPORT uint32_t iwv_mr_rkey(const struct iwv_mr *mr);
IWV_EXPORT void *iwv_mr_addr(const struct iwv_mr *mr);
IWV_EXPORT size_t iwv_mr_len(const struct iwv_mr *mr);
/* 1 when the MR is application memory (the process form), 0 for a buffer. */
IWV_EXPORT int iwv_mr_is_process(const struct iwv_mr *mr);
/* 1 when the MR is registered on the session's arena of adopted pages
 * (iwv_adopt_pages): iwv_release_pages after its deregistration gives back
 * the pages no other MR covers. */
IWV_EXPORT int iwv_mr_is_adopted(const struct iwv_mr *mr);

/* ---- completion channels and completion queues ---- */

IWV_EXPORT int iwv_create_comp_channel(struct iwv_session *s, struct iwv_comp_channel **out);
/* -EBUSY while CQs use it. */
IWV_EXPORT int iwv_destroy_comp_channel(struct iwv_comp_channel *ch);
/* The channel's descriptor for poll/epoll: readable when an event may be
 * waiting; then call iwv_get_cq_event. */
IWV_EXPORT int iwv_comp_channel_fd(const struct iwv_comp_channel *ch);
/* Waits up to timeout_ms (-1: no limit, 0: do not wait) for an armed CQ of
 * the channel to get a completion; returns that CQ (disarmed: re-arm with
 * iwv_req_notify_cq). -ETIMEDOUT, -ENODEV when the session ends. */
IWV_EXPORT int iwv_get_cq_event(struct iwv_comp_channel *ch, struct iwv_cq **cq, int timeout_ms);
IWV_EXPORT void iwv_ack_cq_events(struct iwv_cq *cq, unsigned int n);

/* Creates a CQ of at least depth entries (rounded up to a power of two),
 * bound to ch if not NULL. */
IWV_EXPORT int iwv_create_cq(struct iwv_session *s, int depth, struct iwv_comp_channel *ch, struct iwv_cq **out);
/* -EBUSY while QPs use it. */
IWV_EXPORT int iwv_destroy_cq(struct iwv_cq *cq);
IWV_EXPORT int iwv_cq_depth(const struct iwv_cq *cq);
IWV_EXPORT uint32_t iwv_cq_handle(const struct iwv_cq *cq);
/* 1 if the daemon found the CQ full when it had to complete (its QPs went to
 * the Error state). */
IWV_EXPORT int iwv_cq_overrun(const struct iwv_cq *cq);

/* A work completion (proto.CQE). */
struct iwv_wc {
	uint64_t wr_id;
	uint8_t status; /* enum iwv_wc_status */
	uint8_t opcode; /* enum iwv_wc_opcode */
	uint8_t flags;  /* enum iwv_wc_flags */
	uint8_t reserved;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t inv_stag;
	uint8_t src_ip[16]; /* IPv6 or IPv4-mapped (flags & IWV_WC_FLAG_SRC_VALID) */
	uint16_t src_port;
	uint32_t term; /* iWARP error layer<<16|type<<8|code (IWV_WC_FLAG_TERM_VALID) */
	uint64_t to;   /* Write-Record tagged offset */
	uint32_t imm;  /* immediate data (IWV_WC_FLAG_IMM) */
};

/* Moves up to n completions into wc; returns how many (0: none), never
 * blocks. -ENODEV once the CQ is empty and the session has ended; -EIO if
 * the daemon corrupted the ring. Caller-serialized per CQ. */
IWV_EXPORT int iwv_poll_cq(struct iwv_cq *cq, int n, struct iwv_wc *wc);
/* Arms the CQ: the next completion (solicited_only: the next solicited
 * receive or error) produces one channel event. A store to shared memory. */
IWV_EXPORT int iwv_req_notify_cq(struct iwv_cq *cq, int solicited_only);

/* ---- queue pairs and shared receive queues ---- */

struct iwv_qp_cap {
	uint32_t max_send_wr; /* rounded up to a power of two */
	uint32_t max_recv_wr; /* rounded up to a power of two; ignored with an SRQ */
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline;
	/* RDMA Reads and atomics outstanding as requester (ORD) / answered as
	 * responder (IRD) on an RD QP (0: the daemon's); RC takes them from
	 * the connection's IRD/ORD. */
	uint32_t max_rd_atomic;
	uint32_t max_dest_rd_atomic;
};

struct iwv_qp_init_attr {
	enum iwv_qp_type qp_type;
	struct iwv_cq *send_cq;
	struct iwv_cq *recv_cq;
	struct iwv_srq *srq; /* NULL: the QP has its own receive queue */
	struct iwv_qp_cap cap;
	int sq_sig_all;  /* every send completes */
	uint16_t port;   /* datagram QPs: this UDP port (0: any in the daemon's range) */
	int no_crc;      /* datagram QPs: no CRC (agreed with peers out of band) */
	uint32_t qkey;   /* datagram QPs: the Q_Key (0: the daemon draws a random one, iwv_qp_qkey) */
	/* RC only: a Send with Immediate takes ONE receive at the target (its
	 * completion has the data, the length, IWV_WC_FLAG_IMM and the value):
	 * the Immediate Data message goes first, marked, then the Send; both
	 * ends must set it (docs/atomics.md "Send with Immediate, merged").
	 * 0: RFC 7306 as is, two receives. */
	int merge_send_imm;
	/* RC only: an untagged message (a Send, an Immediate Data taking a
	 * receive) that arrives before a receive is posted is kept by the
	 * daemon (bounded per QP: -rc-hold-msgs, -rc-hold-bytes; past it the
	 * QP is terminated) and completes the receives posted next, in order.
	 * 0: RFC 5040 as is (Terminate "no buffer"). docs/iwarpd.md "RC
	 * receive hold". */
	int hold_recv;
	/* RD only: a Write-Record (IWV_WR_WRITE_RECORD) this QP receives is
	 * placed and acknowledged but takes no receive and completes nothing
	 * here (no NOTREADY waits for one either); a Write-Record with
	 * Immediate still takes one. For a client that never reads the
	 * records (the libfabric provider's RDM endpoints). 0: every record
	 * takes a receive (docs/write-record.md "Quiet records"). */
	int quiet_records;
};

struct iwv_qp_attr {
	enum iwv_qp_type qp_type;
	enum iwv_qp_state state;
	uint32_t qp_num;
	char addr[IWV_ADDR_STRLEN]; /* datagram QPs: ip:port */
	struct iwv_qp_cap cap;
	uint32_t qkey; /* datagram QPs: the Q_Key */
};

/* Creates a QP in RESET. A datagram QP is bound to its UDP port at once
 * (iwv_qp_av / iwv_qp_addr). */
IWV_EXPORT int iwv_create_qp(struct iwv_pd *pd, const struct iwv_qp_init_attr *attr, struct iwv_qp **out);
/* Moves the QP to state: RESET->INIT->RTR->RTS, any->ERR, ERR->RESET. */
IWV_EXPORT int iwv_modify_qp(struct iwv_qp *qp, enum iwv_qp_state state);
/* iwv_modify_qp that also sets a datagram QP's Q_Key (as IBV_QP_QKEY; 0: keep it). */
IWV_EXPORT int iwv_modify_qp_qkey(struct iwv_qp *qp, enum iwv_qp_state state, uint32_t qkey);
/* A datagram QP's Q_Key (0 for RC): peers need it with the QP's address. */
IWV_EXPORT uint32_t iwv_qp_qkey(const struct iwv_qp *qp);
IWV_EXPORT int iwv_query_qp(struct iwv_qp *qp, struct iwv_qp_attr *attr);
IWV_EXPORT int iwv_destroy_qp(struct iwv_qp *qp);
IWV_EXPORT uint32_t iwv_qp_num(const struct iwv_qp *qp);
IWV_EXPORT uint32_t iwv_qp_handle(const struct iwv_qp *qp);
IWV_EXPORT enum iwv_qp_type iwv_qp_type(const struct iwv_qp *qp);
IWV_EXPORT void iwv_qp_cap(const struct iwv_qp *qp, struct iwv_qp_cap *cap);
/* A datagram QP's address: "ip:port" ("" for RC) and as an address vector
 * (-EINVAL for RC). */
IWV_EXPORT const char *iwv_qp_addr(const struct iwv_qp *qp);
IWV_EXPORT int iwv_qp_av(const struct iwv_qp *qp, struct iwv_av *av);
/* A datagram QP's UDP socket when this process made it (ABI 5, the default:
 * docs/c-client.md "QP sockets"); -1 when iwarpd did (IWV_ENV_QP_SOCKET,
 * another network namespace) or for RC. The library owns it (closed by
 * iwv_destroy_qp); iwarpd reads and writes it with MSG_DONTWAIT, so the
 * application must not read from it, shut it down or reconfigure it: that
 * only breaks this QP (it moves to ERROR). */
IWV_EXPORT int iwv_qp_socket(const struct iwv_qp *qp);

struct iwv_srq_init_attr {
	uint32_t max_wr; /* rounded up to a power of two */
	uint32_t max_sge;
	uint32_t limit; /* IWV_EVENT_SRQ_LIMIT_REACHED below this (0: off) */
};

IWV_EXPORT int iwv_create_srq(struct iwv_pd *pd, const struct iwv_srq_init_attr *attr, struct iwv_srq **out);
IWV_EXPORT int iwv_destroy_srq(struct iwv_srq *srq);
IWV_EXPORT uint32_t iwv_srq_handle(const struct iwv_srq *srq);

/* UD multicast (docs/multicast.md): group "a.b.c.d:port". */
IWV_EXPORT int iwv_attach_mcast(struct iwv_qp *qp, const char *group);
IWV_EXPORT int iwv_detach_mcast(struct iwv_qp *qp, const char *group);

/* ---- posting ---- */

/* A scatter/gather element; the layout is proto.SGE's. */
struct iwv_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct iwv_send_wr {
	uint64_t wr_id;
	uint8_t opcode; /* enum iwv_wr_opcode (IWV_WR_SEND on datagram QPs) */
	uint8_t flags;  /* enum iwv_send_flags */
	uint16_t num_sge;
	const struct iwv_sge *sg_list;
	/* IWV_SEND_INLINE: the payload is copied into the queue entry at post
	 * time (at most cap.max_inline octets), from inline_data when it is not
	 * NULL, else gathered from sg_list (whose lkeys are then not used). */
	const void *inline_data;
	uint32_t inline_len;
	const struct iwv_av *av; /* datagram QPs: the destination */
	uint64_t remote_addr;    /* RDMA Write/Read, Write-Record */
	uint32_t rkey;
	uint32_t inv_stag; /* Send with Invalidate, local invalidate */
	uint32_t imm;      /* IWV_WR_SEND_WITH_IMM, IWV_WR_RDMA_WRITE_WITH_IMM, IWV_WR_WRITE_RECORD_WITH_IMM */
	/* Atomics (as ibv_send_wr.wr.atomic): the 8 octets at remote_addr
	 * (8-aligned, in an MR with IWV_ACCESS_REMOTE_ATOMIC) get compare_add
	 * added (FetchAdd), or swap stored if they equal compare_add
	 * (CmpSwap); the original value lands in sg_list[0], exactly one SGE of
	 * 8 bytes, in host byte order. */
	uint64_t compare_add;
	uint64_t swap;
	/* Datagram QPs: the destination's Q_Key (0: av->qkey; a datagram
	 * request naming none is -EINVAL). */
	uint32_t remote_qkey;
};

struct iwv_recv_wr {
	uint64_t wr_id;
	uint16_t num_sge;
	const struct iwv_sge *sg_list;
};

/* Posts n work requests in order, publishes them with one store and rings
 * the doorbell only if the engine sleeps. Returns how many were posted; when
 * the first cannot be posted, a negative errno: -ENOMEM queue full, -EINVAL
 * a request beyond the QP's capabilities or flags unknown, -ENODEV session
 * over. (A later failure stops the batch: the count says where.) Keys,
 * bounds, opcode and state are checked by the daemon and reported in the
 * completion, as verbs do. Caller-serialized per queue. */
IWV_EXPORT int iwv_post_send(struct iwv_qp *qp, const struct iwv_send_wr *wr, int n);
IWV_EXPORT int iwv_post_recv(struct iwv_qp *qp, const struct iwv_recv_wr *wr, int n);
IWV_EXPORT int iwv_post_srq_recv(struct iwv_srq *srq, const struct iwv_recv_wr *wr, int n);

/* ---- events ---- */

/* One descriptor for poll/epoll that becomes readable when an asynchronous
 * event or a CM event may be waiting (or the session ended); then call
 * iwv_get_async_event / iwv_cm_get_event with timeout 0. */
IWV_EXPORT int iwv_event_fd(struct iwv_session *s);

struct iwv_async_event {
	enum iwv_event_type type;
	uint32_t handle;   /* daemon handle of the QP, CQ or SRQ */
	struct iwv_qp *qp; /* the object, when this session knows it */
	struct iwv_cq *cq;
	struct iwv_srq *srq;
	char detail[IWV_DETAIL_LEN];
};

/* Waits up to timeout_ms (-1: no limit) for an asynchronous event. When the
 * daemon goes away one IWV_EVENT_DEVICE_FATAL event is returned, then
 * -ENODEV. -ETIMEDOUT when none came. */
IWV_EXPORT int iwv_get_async_event(struct iwv_session *s, struct iwv_async_event *ev, int timeout_ms);

/* ---- connection management (RC) ---- */

struct iwv_mpa_options {
	uint8_t revision;     /* 1 or 2; 0: the device's */
	uint8_t crc;          /* 0 default, 1 preferred, 2 required, 3 off */
	uint8_t markers;      /* 0 default, 1 on, 2 off */
	uint8_t peer_to_peer; /* 0 default, 1 on, 2 off */
	uint8_t rtr;          /* RFC 6581 RTR types: 1 send, 2 write, 4 read */
};

struct iwv_conn_param {
	const void *private_data; /* at most 508 octets with MPA Rev 2, 512 with Rev 1 */
	uint16_t private_data_len;
	uint16_t ird, ord; /* 0: the device default */
	struct iwv_mpa_options mpa; /* iwv_connect only */
	uint32_t timeout_ms;        /* iwv_connect only; 0: the device's MPA timeout */
	uint16_t local_port;        /* iwv_connect only; the TCP port to connect from (0: the kernel's) */
};

struct iwv_mpa_params {
	uint8_t revision;
	uint8_t enhanced, crc, markers_tx, markers_rx, peer_to_peer;
	uint8_t rtr;
	uint16_t peer_ird, peer_ord;
};

struct iwv_cm_event {
	enum iwv_cm_event_type type;
	struct iwv_listener *listener; /* IWV_CM_CONNECT_REQUEST */
	uint32_t conn_id;              /* IWV_CM_CONNECT_REQUEST: for iwv_accept / iwv_reject */
	struct iwv_qp *qp;             /* the QP concerned, when this session knows it */
	uint32_t qp_handle;
	char peer[IWV_ADDR_STRLEN];
	char local[IWV_ADDR_STRLEN];
	uint8_t private_data[IWV_MAX_PRIVATE_DATA];
	uint16_t private_data_len;
	uint16_t ird, ord;
	int status; /* an errno (positive), 0 for success */
	int mpa_valid;
	struct iwv_mpa_params mpa;
	char detail[IWV_DETAIL_LEN];
	uint32_t listener_handle; /* IWV_CM_CONNECT_REQUEST */
};

/* Listens on addr ("ip:port", ":port" for the device address, port 0 for
 * an ephemeral one); backlog 0: 16. Connection requests arrive as
 * IWV_CM_CONNECT_REQUEST events. */
IWV_EXPORT int iwv_listen(struct iwv_session *s, const char *addr, int backlog, struct iwv_listener **out);
IWV_EXPORT const char *iwv_listener_addr(const struct iwv_listener *l); /* with the actual port */
IWV_EXPORT uint32_t iwv_listener_handle(const struct iwv_listener *l);
IWV_EXPORT int iwv_listener_close(struct iwv_listener *l);

/* Starts connecting qp (RC, INIT) to the listener at addr; returns at once.
 * The outcome is a CM event of the QP: IWV_CM_ESTABLISHED (qp is in RTS),
 * IWV_CM_REJECTED (the peer's private data), IWV_CM_UNREACHABLE,
 * IWV_CM_TIMED_OUT or IWV_CM_CONNECTION_ERROR. p may be NULL. */
IWV_EXPORT int iwv_connect(struct iwv_qp *qp, const char *addr, const struct iwv_conn_param *p);
/* Accepts request conn_id onto qp (RC, INIT); returns when the connection is
 * established (qp in RTS). ev, if not NULL, receives the established event
 * (peer, local, private data of the request, MPA parameters). */
IWV_EXPORT int iwv_accept(struct iwv_session *s, uint32_t conn_id, struct iwv_qp *qp, const struct iwv_conn_param *p,
			  struct iwv_cm_event *ev);
IWV_EXPORT int iwv_reject(struct iwv_session *s, uint32_t conn_id, const void *private_data, uint16_t len);
/* Ends qp's connection: gracefully (posted work finishes, then FIN) or with
 * abort at once with a Terminate. The end is an IWV_CM_DISCONNECTED event. */
IWV_EXPORT int iwv_disconnect(struct iwv_qp *qp, int abort);

/* Waits up to timeout_ms (-1: no limit) for a CM event of the session.
 * -ETIMEDOUT when none came, -ENODEV when the session ended. */
IWV_EXPORT int iwv_cm_get_event(struct iwv_session *s, struct iwv_cm_event *ev, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* IWARPD_VERBS_H */
