/*
 * wire.h — the constants of package proto (proto/control.go, proto/queue.go,
 * proto/addrvec.go) that the C core needs. proto is the reference: a change
 * there is an ABI change (IWV_ABI_VERSION) and must be mirrored here.
 */
#ifndef IWV_WIRE_H
#define IWV_WIRE_H

#include <stdint.h>
#include <string.h>

/* Control messages (proto/control.go, proto/abi.go). */
#define W_MAGIC 0x50525749u /* "IWRP" little-endian */
#define W_HEADER_LEN 16
#define W_MAX_MESSAGE (64 << 10)
#define W_MAX_FDS 4

enum w_op {
	W_OP_HELLO = 1,
	W_OP_QUERY_DEVICE = 2,
	W_OP_QUERY_PORT = 3,
	W_OP_ALLOC_PD = 4,
	W_OP_DEALLOC_PD = 5,
	W_OP_REG_MR = 6,
	W_OP_DEREG_MR = 7,
	W_OP_CREATE_COMP_CHANNEL = 8,
	W_OP_DESTROY_COMP_CHANNEL = 9,
	W_OP_CREATE_CQ = 10,
	W_OP_DESTROY_CQ = 11,
	W_OP_CREATE_QP = 12,
	W_OP_MODIFY_QP = 13,
	W_OP_QUERY_QP = 14,
	W_OP_DESTROY_QP = 15,
	/* 16, 17: create-ah, destroy-ah until ABI 2 */
	W_OP_CREATE_SRQ = 18,
	W_OP_DESTROY_SRQ = 19,
	W_OP_INSPECT = 20,
	W_OP_LISTEN = 21,
	W_OP_CLOSE_LISTENER = 22,
	W_OP_ACCEPT = 23,
	W_OP_REJECT = 24,
	W_OP_CONNECT = 25,
	W_OP_DISCONNECT = 26,
	W_OP_ATTACH_MCAST = 27,
	W_OP_DETACH_MCAST = 28,
	W_OP_RESERVE_PORT = 29,
	W_OP_FASTPATH_PAGE = 30,
	W_OP_EVENT = 0x4000,
	W_OP_CM_EVENT = 0x4001,
	W_OP_REPLY = 0x8000,
};

/* Rings (proto/queue.go). */
#define W_RING_MAGIC 0x51525749u /* "IWRQ" */
#define W_RING_HEADER_LEN 256
#define W_OFF_RING_MAGIC 0
#define W_OFF_RING_VERSION 4
#define W_OFF_RING_KIND 6
#define W_OFF_RING_DEPTH 8
#define W_OFF_RING_STRIDE 12
#define W_OFF_RING_PRODUCER 64
#define W_OFF_RING_CONSUMER 128
#define W_OFF_RING_ARM 192
#define W_OFF_RING_OVERRUN 196

enum w_ring_kind {
	W_RING_SQ = 1,
	W_RING_RQ = 2,
	W_RING_CQ = 3,
	W_RING_SRQ = 4,
};

#define W_ARM_NONE 0u
#define W_ARM_NEXT 1u
#define W_ARM_SOLICITED 2u

#define W_PAGE_SIZE 4096
#define W_MAX_DEPTH (1u << 16)

#define W_SGE_LEN 16
#define W_SQE_HEADER_LEN 64
#define W_RQE_HEADER_LEN 16
#define W_CQE_SIZE 64
#define W_OFF_SQE_AH 36
#define W_AV_LEN 20

#define W_SEND_FLAGS_ALL 0x0fu
#define W_OPCODE_COUNT 10
#define W_OFF_SQE_IMM 16
#define W_OFF_SQE_QKEY 56
#define W_OFF_CQE_IMM 56
#define W_ATOMIC_OPERANDS_LEN 16 /* CompareAdd u64, Swap u64, then the result SGE */
#define W_ATOMIC_BODY_MIN (W_ATOMIC_OPERANDS_LEN + W_SGE_LEN)

/* Status page. */
#define W_STATUS_MAGIC 0x54535749u /* "IWST" */
#define W_STATUS_PAGE_LEN 4096
#define W_OFF_STATUS_MAGIC 0
#define W_OFF_STATUS_ASLEEP 64

/* Fast-path page (proto/fastpath.go). */
#define W_FP_MAGIC 0x50465749u /* "IWFP" */
#define W_FP_VERSION 1
#define W_FP_PAGE_LEN 4096
#define W_OFF_FP_MAGIC 0
#define W_OFF_FP_VERSION 4
#define W_OFF_FP_FLAGS 6
#define W_FP_FLAG_GRO 1u
#define W_OFF_FP_OWNER 64
#define W_OFF_FP_BUSY 68
#define W_OFF_FP_WANT 72
#define W_OFF_FP_LEASE 80
#define W_OFF_FP_TAKEOVERS 128
#define W_OFF_FP_HANDBACKS 136
#define W_OFF_FP_RELEASES 144
#define W_FP_OWNER_DAEMON 1u
#define W_FP_OWNER_RANK 2u

/* The RD halves of an RD QP's fast-path page (proto/fastpath_rd.go). */
#define W_FP_RD_PAGE_LEN 151552 /* one page + slots × ring × copy + requests × copy */
#define W_FP_RD_SLOTS 4
#define W_FP_RD_RING 16
#define W_FP_RD_COPY_LEN 2048
#define W_FP_RD_MIN_BODY 18
#define W_FP_RD_SLOT_LEN 512
#define W_FP_RD_ENTRY_LEN 16
#define W_OFF_FP_RD_SEND_MSN 160
#define W_OFF_FP_RD_READ_REQ_MSN 164
#define W_OFF_FP_RD_ATOMIC_RESP_MSN 172
#define W_OFF_FP_RD_NEXT_REQ_ID 176
#define W_OFF_FP_RD_REQS 2304
#define W_OFF_FP_RD_REQ_DATA 135168
#define W_FP_RD_REQS 8
#define W_FP_RD_REQ_LEN 48
#define W_OFF_FP_RD_REQ_STATE 0
#define W_OFF_FP_RD_REQ_KIND 4
#define W_OFF_FP_RD_REQ_SLOT 8
#define W_OFF_FP_RD_REQ_MSN 12
#define W_OFF_FP_RD_REQ_ID 16
#define W_OFF_FP_RD_REQ_LEN_W 20
#define W_OFF_FP_RD_REQ_SINK_TO 24
#define W_OFF_FP_RD_REQ_STATUS 32
#define W_OFF_FP_RD_REQ_TERM 36
#define W_FP_RD_REQ_SENT 1u
#define W_FP_RD_REQ_DONE 2u
#define W_FP_RD_REQ_FAILED 3u
#define W_FP_RD_REQ_READ 1u
#define W_FP_RD_REQ_ATOMIC 2u
#define W_OFF_FP_RD_SLOTS 256
#define W_OFF_FP_RD_COPIES 4096
#define W_OFF_FP_RD_STATE 0
#define W_OFF_FP_RD_PORT 4
#define W_OFF_FP_RD_ADDR 8
#define W_OFF_FP_RD_QKEY 24
#define W_OFF_FP_RD_ADV_WND 28
#define W_OFF_FP_RD_OUR_INC 32
#define W_OFF_FP_RD_PEER_INC 36
#define W_OFF_FP_RD_COOKIE 40
#define W_OFF_FP_RD_IN_FLIGHT 44
#define W_OFF_FP_RD_RTO 48
#define W_OFF_FP_RD_NEXT_SEQ 64
#define W_OFF_FP_RD_SND_UNA 68
#define W_OFF_FP_RD_ACK_CUM 72
#define W_OFF_FP_RD_LIMIT 76
#define W_OFF_FP_RD_OUT_HEAD 80
#define W_OFF_FP_RD_OUT_N 84
#define W_OFF_FP_RD_RCV_NEXT 96
#define W_OFF_FP_RD_UNACKED 100
#define W_OFF_FP_RD_ACK_DUE 104
#define W_OFF_FP_RD_RING 128
#define W_OFF_FP_RD_ENTRY_SEQ 0
#define W_OFF_FP_RD_ENTRY_LEN 4
#define W_OFF_FP_RD_ENTRY_SENT_AT 8
#define W_FP_RD_VALID 1u
#define W_FP_RD_SEND 2u
#define W_FP_RD_RECV 4u

/* Address vector families. */
#define W_AV_IPV4 4
#define W_AV_IPV6 6

static inline uint32_t w_ring_bytes(uint32_t depth, uint32_t stride)
{
	uint64_t n = W_RING_HEADER_LEN + (uint64_t)depth * stride;
	return (uint32_t)((n + W_PAGE_SIZE - 1) & ~(uint64_t)(W_PAGE_SIZE - 1));
}

static inline uint32_t w_sqe_stride(uint32_t max_sge, uint32_t max_inline)
{
	uint32_t body = max_sge * W_SGE_LEN;
	if (max_inline > body)
		body = max_inline;
	if (body < W_ATOMIC_BODY_MIN)
		body = W_ATOMIC_BODY_MIN; /* room for an atomic's operands and result SGE */
	return (W_SQE_HEADER_LEN + body + 63) & ~63u;
}

static inline uint32_t w_rqe_stride(uint32_t max_sge)
{
	return W_RQE_HEADER_LEN + (max_sge ? max_sge : 1) * W_SGE_LEN;
}

/* Little-endian stores and loads (the rings are little-endian; so is every
 * host this runs on, but the code does not depend on it). */
static inline void w_put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}
static inline void w_put32(uint8_t *b, uint32_t v)
{
	w_put16(b, (uint16_t)v);
	w_put16(b + 2, (uint16_t)(v >> 16));
}
static inline void w_put64(uint8_t *b, uint64_t v)
{
	w_put32(b, (uint32_t)v);
	w_put32(b + 4, (uint32_t)(v >> 32));
}
static inline uint16_t w_get16(const uint8_t *b)
{
	return (uint16_t)(b[0] | (b[1] << 8));
}
static inline uint32_t w_get32(const uint8_t *b)
{
	return (uint32_t)w_get16(b) | ((uint32_t)w_get16(b + 2) << 16);
}
static inline uint64_t w_get64(const uint8_t *b)
{
	return (uint64_t)w_get32(b) | ((uint64_t)w_get32(b + 4) << 32);
}

#endif
