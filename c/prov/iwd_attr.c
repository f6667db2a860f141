/*
 * iwd_attr.c — fi_getinfo (fi_getinfo(3)): what the provider offers per
 * endpoint type, filtered by the application's hints here (libfabric does
 * not filter for external providers), with src_addr filled from the
 * daemon's device address.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iwd.h"

#define IWD_RMA_CAPS (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
#define IWD_COMM_CAPS (FI_LOCAL_COMM | FI_REMOTE_COMM)
#define IWD_RDM_CAPS \
	(FI_MSG | FI_TAGGED | IWD_RMA_CAPS | FI_ATOMIC | FI_REMOTE_CQ_DATA | FI_SEND | FI_RECV | FI_MULTI_RECV | \
	 FI_SOURCE | FI_DIRECTED_RECV | IWD_COMM_CAPS)
#define IWD_DGRAM_CAPS (FI_MSG | FI_SEND | FI_RECV | FI_SOURCE | IWD_COMM_CAPS)
/* MSG: FI_REMOTE_CQ_DATA is fi_writedata (an RDMA Write with Immediate,
 * which consumes a receive: FI_RX_CQ_DATA mode) and fi_senddata (a Send
 * with Immediate merged into one receive: merge_send_imm), docs/libfabric.md. */
#define IWD_MSG_CAPS (FI_MSG | IWD_RMA_CAPS | FI_ATOMIC | FI_REMOTE_CQ_DATA | FI_SEND | FI_RECV | IWD_COMM_CAPS)
#define IWD_MSG_CQ_DATA_SIZE 4 /* the 32-bit verbs immediate */
#define IWD_PRIMARY_CAPS (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_COLLECTIVE)
#define IWD_MR_RMA (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED)

static uint64_t type_caps(enum fi_ep_type t)
{
	switch (t) {
	case FI_EP_RDM:
		return IWD_RDM_CAPS;
	case FI_EP_DGRAM:
		return IWD_DGRAM_CAPS;
	case FI_EP_MSG:
		return IWD_MSG_CAPS;
	default:
		return 0;
	}
}

/* RDM: 8 octets in the provider's header; MSG: the 32-bit immediate. */
static size_t cq_data_size(enum fi_ep_type type, uint64_t caps)
{
	if (type == FI_EP_RDM)
		return IWD_CQ_DATA_SIZE;
	if (type == FI_EP_MSG && (caps & FI_REMOTE_CQ_DATA))
		return IWD_MSG_CQ_DATA_SIZE;
	return 0;
}

/* The wire protocol of each type (fi_endpoint(3) protocol). MSG speaks
 * iWARP itself (RFC 5040/5041/5044): FI_PROTO_IWARP. RDM and DGRAM speak
 * the datagram-iWARP RD and UD profiles over UDP (docs/wire-format.md),
 * which neither FI_PROTO_IWARP_RDM (a reliable datagram over iWARP RC
 * connections) nor FI_PROTO_UDP (raw UDP) describes: provider-specific
 * values (FI_PROV_SPECIFIC), IWD_PROTO_RD and IWD_PROTO_UD. */
static uint32_t ep_protocol(enum fi_ep_type type)
{
	switch (type) {
	case FI_EP_MSG:
		return FI_PROTO_IWARP;
	case FI_EP_RDM:
		return IWD_PROTO_RD;
	default:
		return IWD_PROTO_UD;
	}
}

/* The ordering of messages an endpoint type keeps (fi_endpoint(3)
 * msg_order). MSG: one RC stream, processed in order at the target —
 * Sends, RDMA Writes and RDMA Read Requests alike (RFC 5040 5.5) — so
 * every FI_ORDER_STRICT pair; not FI_ORDER_DATA. RDM and DGRAM: Sends
 * after Sends only. */
static uint64_t msg_order(enum fi_ep_type type)
{
	return type == FI_EP_MSG ? FI_ORDER_STRICT : FI_ORDER_SAS;
}

/* The largest RMA message whose RAW/WAR/WAW ordering holds
 * (fi_endpoint(3) max_order_*_size). */
static size_t rma_order_size(enum fi_ep_type type, size_t max_msg)
{
	return type == FI_EP_MSG ? max_msg : 0;
}

uint64_t iwd_mr_mode_required(uint32_t version, enum fi_ep_type type, uint64_t caps)
{
	IWD_UNUSED(type);
	if (version && FI_VERSION_LT(version, FI_VERSION(1, 5)))
		return FI_MR_BASIC;
	return (caps & (FI_RMA | FI_ATOMIC)) ? IWD_MR_RMA : 0;
}

/* What mr_mode bits an application supports, from its hints. */
static uint64_t app_mr_modes(uint32_t version, const struct fi_info *hints)
{
	uint64_t m;
	if (!hints || !hints->domain_attr)
		return ~0ull; /* no hints: the application takes what we say */
	m = (uint64_t)hints->domain_attr->mr_mode;
	if (version && FI_VERSION_LT(version, FI_VERSION(1, 5))) {
		if (m == FI_MR_UNSPEC || m == FI_MR_BASIC)
			return ~0ull;
		return 0;
	}
	if (m == FI_MR_BASIC)
		return IWD_MR_RMA;
	if (m == FI_MR_SCALABLE)
		return 0;
	return m;
}

struct iwd_dev {
	struct iwv_device_attr attr;
	struct sockaddr_in addr;
	char name[64];
	uint16_t unpriv_port_start; /* the daemon's ip_unprivileged_port_start; 0: not said */
	int priv_bind;              /* this process may have ports below it */
};

static int query_daemon(struct iwd_dev *d)
{
	struct iwv_session *s;
	int ret = iwd_session_open(&s);
	if (ret)
		return ret;
	ret = iwv_query_device(s, &d->attr);
	if (ret) {
		IWD_INFO(FI_LOG_CORE, "iwarpd: query-device failed: %s\n", iwv_last_error(s));
		iwv_close(s);
		return iwd_errno(ret);
	}
	memset(&d->addr, 0, sizeof(d->addr));
	d->addr.sin_family = AF_INET;
	if (inet_pton(AF_INET, iwv_device_addr(s), &d->addr.sin_addr) != 1) {
		IWD_INFO(FI_LOG_CORE, "iwarpd: the daemon's device address %s is not IPv4; the provider speaks FI_SOCKADDR_IN only\n",
			 iwv_device_addr(s));
		iwv_close(s);
		return -FI_ENODATA;
	}
	snprintf(d->name, sizeof(d->name), "%s", iwv_device_name(s));
	{
		struct iwv_port_attr pa;
		d->unpriv_port_start = 0;
		d->priv_bind = 0;
		if (!iwv_query_port(s, &pa)) {
			d->unpriv_port_start = pa.unpriv_port_start;
			d->priv_bind = pa.priv_bind;
		}
	}
	iwv_close(s);
	return 0;
}

/* fi_getinfo refuses a source port that fi_endpoint (create-qp) and
 * fi_listen would: one below the daemon's net.ipv4.ip_unprivileged_port_start
 * (ip(7)) for a process that could not bind it itself — the daemon's rule,
 * docs/security.md; the daemon says both (query-port). */
static int src_port_ok(const struct iwd_dev *d, const struct sockaddr_in *src)
{
	unsigned port = ntohs(src->sin_port);
	if (!port || !d->unpriv_port_start || port >= d->unpriv_port_start || d->priv_bind)
		return 1;
	IWD_WARN(FI_LOG_CORE,
		 "iwarpd: source port %u is privileged (below net.ipv4.ip_unprivileged_port_start %u, ip(7)) and this "
		 "process (uid %u) may not bind it, so fi_endpoint would fail: no info. Name a port from %u up, or 0 "
		 "(the daemon picks one), or run with CAP_NET_BIND_SERVICE\n",
		 port, d->unpriv_port_start, (unsigned)geteuid(), d->unpriv_port_start);
	return 0;
}

static int resolve(const char *node, const char *service, struct sockaddr_in *sin)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res = NULL;
	int ret = getaddrinfo(node, service, &hints, &res);
	if (ret || !res) {
		IWD_INFO(FI_LOG_CORE, "iwarpd: cannot resolve %s:%s: %s\n", node ? node : "", service ? service : "",
			 gai_strerror(ret));
		return -FI_ENODATA;
	}
	memcpy(sin, res->ai_addr, sizeof(*sin));
	freeaddrinfo(res);
	return 0;
}

static int addr_ok(uint32_t fmt)
{
	return fmt == FI_FORMAT_UNSPEC || fmt == FI_SOCKADDR || fmt == FI_SOCKADDR_IN;
}

static int sockaddr_in_of(const void *addr, size_t len, struct sockaddr_in *sin)
{
	const struct sockaddr *sa = addr;
	if (!addr || len < sizeof(struct sockaddr_in) || sa->sa_family != AF_INET)
		return -FI_ENODATA;
	memcpy(sin, addr, sizeof(*sin));
	return 0;
}

/* Explains (at FI_LOG_LEVEL=info) why hints exclude an endpoint type. */
static int reject(enum fi_ep_type type, int line)
{
	IWD_INFO(FI_LOG_CORE, "iwarpd: hints exclude %s (iwd_attr.c:%d)\n", fi_tostr(&type, FI_TYPE_EP_TYPE), line);
	return -FI_ENODATA;
}

/* Fills one fi_info for type, or returns -FI_ENODATA when the hints exclude it. */
static int fill_info(uint32_t version, enum fi_ep_type type, const struct iwd_dev *dev, const struct fi_info *hints,
		     const struct sockaddr_in *src, const struct sockaddr_in *dst, struct fi_info **out)
{
	uint64_t offered = type_caps(type), caps, required;
	size_t max_msg;
	struct fi_info *fi;

	caps = offered;
	if (hints && hints->caps) {
		if ((hints->caps & ~offered) & ~(uint64_t)(FI_RMA_EVENT | FI_TRIGGER | FI_FENCE | FI_HMEM))
			return reject(type, __LINE__);
		if (hints->caps & (FI_RMA_EVENT | FI_TRIGGER | FI_HMEM | FI_FENCE))
			return reject(type, __LINE__);
		caps = hints->caps & offered;
		/* FI_MSG alone means both directions; keep secondary caps asked for. */
	}
	required = iwd_mr_mode_required(version, type, caps);
	if (FI_VERSION_GE(version ? version : IWD_FI_VERSION, FI_VERSION(1, 5)) && (required & ~app_mr_modes(version, hints))) {
		if (hints && (hints->caps & (FI_RMA | FI_ATOMIC)))
			return reject(type, __LINE__);
		caps &= ~(uint64_t)(IWD_RMA_CAPS | FI_ATOMIC);
		required = iwd_mr_mode_required(version, type, caps);
	} else if (version && FI_VERSION_LT(version, FI_VERSION(1, 5)) && !app_mr_modes(version, hints) &&
		   (caps & FI_RMA)) {
		if (hints && (hints->caps & (FI_RMA | FI_ATOMIC)))
			return reject(type, __LINE__);
		caps &= ~(uint64_t)(IWD_RMA_CAPS | FI_ATOMIC);
	}
	/* FI_REMOTE_CQ_DATA is a secondary capability (fi_getinfo(3)): offer it
	 * on MSG to whoever accepts FI_RX_CQ_DATA even without asking. ofi_rxm
	 * asks for its core MSG endpoint that way and copies the cq_data_size
	 * it gets; with 0, Open MPI 4.1's mtl ofi takes its no-CQ-data path,
	 * whose MPI_Ssend acknowledgement never arrives from a rank other than
	 * fi_addr 0 (docs/mpi.md). */
	if (type == FI_EP_MSG && (!hints || (hints->mode & FI_RX_CQ_DATA)))
		caps |= FI_REMOTE_CQ_DATA;
	/* RDM: always (its CQ data rides in the provider's header, costing a
	 * receive nothing), so cq_data_size 8 and fi_writedata,
	 * fi_inject_writedata and fi_senddata agree with caps (issue 19). */
	if (type == FI_EP_RDM)
		caps |= FI_REMOTE_CQ_DATA;
	/* An MSG Write with Immediate consumes a posted receive (RFC 7306): the
	 * application must accept FI_RX_CQ_DATA to get FI_REMOTE_CQ_DATA. */
	if (type == FI_EP_MSG && (caps & FI_REMOTE_CQ_DATA) && hints && !(hints->mode & FI_RX_CQ_DATA)) {
		if (hints->caps & FI_REMOTE_CQ_DATA)
			return reject(type, __LINE__);
		caps &= ~(uint64_t)FI_REMOTE_CQ_DATA;
	}
	if (type == FI_EP_RDM) {
		max_msg = (size_t)1 << 30;
	} else if (type == FI_EP_DGRAM) {
		max_msg = iwd_env.dgram_max;
		if (dev->attr.max_msg_ud && max_msg > dev->attr.max_msg_ud)
			max_msg = dev->attr.max_msg_ud;
	} else {
		max_msg = (size_t)1 << 30;
	}

	if (hints) {
		if (hints->mode && (hints->mode & 0) != 0)
			return reject(type, __LINE__);
		if (hints->ep_attr) {
			if (hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != type)
				return reject(type, __LINE__);
			if (hints->ep_attr->max_msg_size > max_msg)
				return reject(type, __LINE__);
			if (hints->ep_attr->max_order_raw_size > rma_order_size(type, max_msg) ||
			    hints->ep_attr->max_order_war_size > rma_order_size(type, max_msg) ||
			    hints->ep_attr->max_order_waw_size > rma_order_size(type, max_msg))
				return reject(type, __LINE__);
			if (hints->ep_attr->protocol != FI_PROTO_UNSPEC) {
				uint32_t p = hints->ep_attr->protocol;
				if (p != ep_protocol(type))
					return reject(type, __LINE__);
			}
			if (hints->ep_attr->tx_ctx_cnt > 1 || (hints->ep_attr->rx_ctx_cnt > 1 &&
							       hints->ep_attr->rx_ctx_cnt != FI_SHARED_CONTEXT))
				return reject(type, __LINE__);
			/* A shared receive context: MSG endpoints (iwd_srx.c). */
			if (hints->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT && type != FI_EP_MSG)
				return reject(type, __LINE__);
		}
		if (hints->tx_attr) {
			if (hints->tx_attr->iov_limit > IWD_IOV_LIMIT || hints->tx_attr->size > 65536 ||
			    hints->tx_attr->rma_iov_limit > IWD_RMA_IOV_LIMIT)
				return reject(type, __LINE__);
			if (hints->tx_attr->inject_size > (type == FI_EP_DGRAM ? max_msg : type == FI_EP_MSG ? 16384 : iwd_env.eager_max))
				return reject(type, __LINE__);
			if (hints->tx_attr->comp_order & ~(uint64_t)FI_ORDER_NONE)
				return reject(type, __LINE__);
			if (hints->tx_attr->msg_order & ~msg_order(type))
				return reject(type, __LINE__);
		}
		if (hints->rx_attr) {
			if (hints->rx_attr->iov_limit > IWD_IOV_LIMIT || hints->rx_attr->size > 65536)
				return reject(type, __LINE__);
			if (hints->rx_attr->total_buffered_recv > 0 && type == FI_EP_MSG)
				return reject(type, __LINE__);
			if (hints->rx_attr->msg_order & ~msg_order(type))
				return reject(type, __LINE__);
		}
		if (hints->domain_attr) {
			const struct fi_domain_attr *d = hints->domain_attr;
			if (d->name && strcmp(d->name, dev->name))
				return reject(type, __LINE__);
			if (d->cq_data_size > cq_data_size(type, caps))
				return reject(type, __LINE__);
			if (d->mr_key_size > IWD_MR_KEY_SIZE)
				return reject(type, __LINE__);
			if (d->data_progress == FI_PROGRESS_AUTO && !iwd_env.progress_thread)
				return reject(type, __LINE__);
			if (d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_MAP && d->av_type != FI_AV_TABLE)
				return reject(type, __LINE__);
			if (d->caps & ~(uint64_t)IWD_COMM_CAPS)
				return reject(type, __LINE__);
		}
		if (hints->fabric_attr && hints->fabric_attr->name && strcmp(hints->fabric_attr->name, IWD_FABRIC_NAME))
			return reject(type, __LINE__);
		if (!addr_ok(hints->addr_format))
			return reject(type, __LINE__);
	}

	fi = fi_allocinfo();
	if (!fi)
		return -FI_ENOMEM;
	/* fi_getinfo(3) handle: a passive endpoint named in the hints comes
	 * back, so that fi_endpoint opens on its address (fi_endpoint(3)). */
	fi->handle = hints ? hints->handle : NULL;
	fi->caps = caps;
	fi->mode = (type == FI_EP_MSG && (caps & FI_REMOTE_CQ_DATA)) ? FI_RX_CQ_DATA : 0;
	fi->addr_format = FI_SOCKADDR_IN;

	fi->ep_attr->type = type;
	fi->ep_attr->protocol = ep_protocol(type);
	fi->ep_attr->protocol_version = 1;
	fi->ep_attr->max_msg_size = max_msg;
	fi->ep_attr->msg_prefix_size = 0;
	fi->ep_attr->tx_ctx_cnt = 1;
	fi->ep_attr->rx_ctx_cnt = type == FI_EP_MSG && hints && hints->ep_attr &&
						  hints->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT
					  ? FI_SHARED_CONTEXT
					  : 1;
	/* RMA ordering (RAW, WAR, WAW) holds for a whole message on MSG's one
	 * stream (msg_order FI_ORDER_STRICT); the other types keep none. */
	fi->ep_attr->max_order_raw_size = rma_order_size(type, max_msg);
	fi->ep_attr->max_order_war_size = rma_order_size(type, max_msg);
	fi->ep_attr->max_order_waw_size = rma_order_size(type, max_msg);
	/* All 64 tag bits match; echo a format the application asked for. */
	fi->ep_attr->mem_tag_format = (caps & FI_TAGGED) ? 0xAAAAAAAAAAAAAAAAull : 0;
	if ((caps & FI_TAGGED) && hints && hints->ep_attr && hints->ep_attr->mem_tag_format)
		fi->ep_attr->mem_tag_format = hints->ep_attr->mem_tag_format;

	/* tx_attr/rx_attr caps are the primary capabilities and their
	 * modifiers for that direction (fi_endpoint(3)); FI_REMOTE_CQ_DATA,
	 * FI_LOCAL_COMM and FI_REMOTE_COMM are the endpoint's and the domain's. */
	fi->tx_attr->caps = caps & ~(uint64_t)(FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_MULTI_RECV |
					       FI_DIRECTED_RECV | FI_SOURCE | FI_REMOTE_CQ_DATA | IWD_COMM_CAPS);
	fi->tx_attr->mode = 0;
	fi->tx_attr->op_flags = hints && hints->tx_attr ? hints->tx_attr->op_flags : 0;
	fi->tx_attr->msg_order = msg_order(type);
	fi->tx_attr->comp_order = FI_ORDER_NONE;
	fi->tx_attr->inject_size = type == FI_EP_DGRAM ? max_msg : iwd_env.eager_max;
	/* MSG: ofi_rxm offers its own inject size derived from ours but then
	 * checks the application's echo against its 16 KiB buffer: stay there. */
	if (type == FI_EP_MSG)
		fi->tx_attr->inject_size = iwd_env.eager_max < 16384 ? iwd_env.eager_max : 16384;
	/* The sizes asked for (fi_getinfo(3): hints are the minimum wanted;
	 * libfabric's own util providers return them, ofi_alter_info), else
	 * the defaults: each posted operation may hold a bounce slot of up to
	 * 64 KiB (iwd_ep_dgram.c), so ofi_rxm's MSG endpoints, which ask for
	 * 128, must not get 256 (docs/memory.md, "RxM's MSG endpoints"). */
	fi->tx_attr->size = hints && hints->tx_attr && hints->tx_attr->size ? hints->tx_attr->size : IWD_TX_SIZE;
	fi->tx_attr->iov_limit = IWD_IOV_LIMIT;
	fi->tx_attr->rma_iov_limit = (caps & FI_RMA) ? IWD_RMA_IOV_LIMIT : 0;

	fi->rx_attr->caps = caps & ~(uint64_t)(FI_SEND | FI_READ | FI_WRITE | FI_REMOTE_CQ_DATA | IWD_COMM_CAPS);
	fi->rx_attr->mode = fi->mode;
	fi->rx_attr->op_flags = hints && hints->rx_attr ? hints->rx_attr->op_flags : 0;
	fi->rx_attr->msg_order = msg_order(type);
	fi->rx_attr->comp_order = FI_ORDER_NONE;
	fi->rx_attr->total_buffered_recv = 0;
	fi->rx_attr->size = hints && hints->rx_attr && hints->rx_attr->size ? hints->rx_attr->size : IWD_RX_SIZE;
	fi->rx_attr->iov_limit = IWD_IOV_LIMIT;

	fi->domain_attr->name = strdup(dev->name);
	fi->domain_attr->threading = (hints && hints->domain_attr && hints->domain_attr->threading)
					     ? hints->domain_attr->threading
					     : FI_THREAD_SAFE;
	/* Connections are made and ended by the daemon, address vectors are
	 * synchronous: control operations progress without the application
	 * (FI_PROGRESS_AUTO, as verbs), which may still ask for MANUAL. */
	fi->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	if (hints && hints->domain_attr && hints->domain_attr->control_progress == FI_PROGRESS_AUTO)
		fi->domain_attr->control_progress = FI_PROGRESS_AUTO;
	fi->domain_attr->data_progress = iwd_env.progress_thread ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
	if (hints && hints->domain_attr && hints->domain_attr->data_progress == FI_PROGRESS_MANUAL)
		fi->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	fi->domain_attr->resource_mgmt = (hints && hints->domain_attr && hints->domain_attr->resource_mgmt)
						 ? hints->domain_attr->resource_mgmt
						 : FI_RM_ENABLED;
	fi->domain_attr->av_type = (hints && hints->domain_attr) ? hints->domain_attr->av_type : FI_AV_UNSPEC;
	fi->domain_attr->mr_mode = (int)required;
	/* An application of API 1.5 or later asking FI_MR_BASIC gets
	 * FI_MR_BASIC, which is exactly VIRT_ADDR|ALLOCATED|PROV_KEY
	 * (fi_mr(3)). */
	if (hints && hints->domain_attr && hints->domain_attr->mr_mode == FI_MR_BASIC &&
	    FI_VERSION_GE(version ? version : IWD_FI_VERSION, FI_VERSION(1, 5)) && !(required & ~(uint64_t)IWD_MR_RMA))
		fi->domain_attr->mr_mode = FI_MR_BASIC;
	fi->domain_attr->mr_key_size = 4;
	fi->domain_attr->cq_data_size = cq_data_size(type, caps);
	fi->domain_attr->cq_cnt = dev->attr.max_cq ? dev->attr.max_cq : 256;
	fi->domain_attr->ep_cnt = dev->attr.max_qp ? dev->attr.max_qp : IWD_MAX_EP_CNT;
	fi->domain_attr->tx_ctx_cnt = fi->domain_attr->ep_cnt;
	fi->domain_attr->rx_ctx_cnt = fi->domain_attr->ep_cnt;
	fi->domain_attr->max_ep_tx_ctx = 1;
	fi->domain_attr->max_ep_rx_ctx = 1;
	fi->domain_attr->max_ep_stx_ctx = 0;
	fi->domain_attr->max_ep_srx_ctx = type == FI_EP_MSG ? 1 : 0; /* iwd_srx.c */
	fi->domain_attr->cntr_cnt = 1024;
	fi->domain_attr->mr_iov_limit = 1;
	fi->domain_attr->caps = IWD_COMM_CAPS;
	fi->domain_attr->mode = 0;
	fi->domain_attr->max_err_data = 0;
	fi->domain_attr->mr_cnt = dev->attr.max_mr ? dev->attr.max_mr : 4096;

	fi->fabric_attr->name = strdup(IWD_FABRIC_NAME);
	fi->fabric_attr->prov_version = IWD_PROV_VERSION;
	fi->fabric_attr->api_version = IWD_FI_VERSION;

	fi->src_addr = malloc(sizeof(struct sockaddr_in));
	if (!fi->src_addr || !fi->domain_attr->name || !fi->fabric_attr->name) {
		fi_freeinfo(fi);
		return -FI_ENOMEM;
	}
	memcpy(fi->src_addr, src, sizeof(*src));
	fi->src_addrlen = sizeof(struct sockaddr_in);
	if (dst) {
		fi->dest_addr = malloc(sizeof(struct sockaddr_in));
		if (!fi->dest_addr) {
			fi_freeinfo(fi);
			return -FI_ENOMEM;
		}
		memcpy(fi->dest_addr, dst, sizeof(*dst));
		fi->dest_addrlen = sizeof(struct sockaddr_in);
	}
	*out = fi;
	return 0;
}

int iwd_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		const struct fi_info *hints, struct fi_info **info)
{
	static const enum fi_ep_type types[] = {FI_EP_RDM, FI_EP_DGRAM, FI_EP_MSG};
	struct iwd_dev dev;
	struct sockaddr_in src, dst, *dstp = NULL;
	struct fi_info *head = NULL, *tail = NULL, *fi = NULL;
	size_t i;
	int ret;

	*info = NULL;
	if (hints && !addr_ok(hints->addr_format))
		return -FI_ENODATA;
	if (hints && hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM &&
	    hints->ep_attr->type != FI_EP_DGRAM && hints->ep_attr->type != FI_EP_MSG)
		return -FI_ENODATA;

	ret = query_daemon(&dev);
	if (ret)
		return -FI_ENODATA;
	src = dev.addr;

	if (node || service) {
		struct sockaddr_in a;
		if (flags & FI_SOURCE) {
			ret = resolve(node ? node : NULL, service, &a);
			if (ret)
				return ret;
			if (a.sin_addr.s_addr != htonl(INADDR_ANY) && a.sin_addr.s_addr != dev.addr.sin_addr.s_addr)
				return -FI_ENODATA;
			src.sin_port = a.sin_port;
		} else if (node) {
			ret = resolve(node, service, &dst);
			if (ret)
				return ret;
			dstp = &dst;
		} else {
			ret = resolve(NULL, service, &a);
			if (ret)
				return ret;
			src.sin_port = a.sin_port;
		}
	}
	if (hints && hints->src_addr) {
		struct sockaddr_in a;
		if (sockaddr_in_of(hints->src_addr, hints->src_addrlen, &a))
			return -FI_ENODATA;
		if (a.sin_addr.s_addr != htonl(INADDR_ANY) && a.sin_addr.s_addr != dev.addr.sin_addr.s_addr)
			return -FI_ENODATA;
		src.sin_port = a.sin_port;
	}
	if (hints && hints->dest_addr) {
		if (sockaddr_in_of(hints->dest_addr, hints->dest_addrlen, &dst))
			return -FI_ENODATA;
		dstp = &dst;
	}
	if (!src_port_ok(&dev, &src))
		return -FI_ENODATA;

	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		ret = fill_info(version, types[i], &dev, hints, &src, dstp, &fi);
		if (ret == -FI_ENODATA)
			continue;
		if (ret) {
			fi_freeinfo(head);
			return ret;
		}
		if (tail)
			tail->next = fi;
		else
			head = fi;
		tail = fi;
	}
	if (!head)
		return -FI_ENODATA;
	*info = head;
	return 0;
}

int iwd_check_info(const struct fi_info *info)
{
	if (!info || !info->ep_attr || !info->domain_attr)
		return -FI_EINVAL;
	if (info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_DGRAM && info->ep_attr->type != FI_EP_MSG)
		return -FI_EINVAL;
	if (info->caps & ~type_caps(info->ep_attr->type))
		return -FI_ENOSYS;
	if (!addr_ok(info->addr_format))
		return -FI_EINVAL;
	return 0;
}
