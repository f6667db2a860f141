/*
 * fastpath_req.h — the datagram of an RDMA Read Request (RFC 5040 §4.4)
 * or an RFC 7306 Atomic Request (§5.1) that the rank sends itself on its
 * RD QP's socket (issue 22; docs/fastpath.md "Reads and atomics the rank
 * sends itself"), octet for octet as the daemon builds it
 * (verbsd/rd/send.go prepare, rd/atomic.go prepareAtomic: one untagged
 * DDP segment on QN 1, L set, MO 0, the MSN of QN 1; framed by
 * dgram.AppendRD). test/fastpath TestEncodeRequests compares the two.
 *
 * Internal to libiwverbs (hidden symbols). No allocation.
 */
#ifndef IWV_FASTPATH_REQ_H
#define IWV_FASTPATH_REQ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fastpath.h"

#define FP_READ_REQ_LEN 28   /* Sink STag, Sink TO, Size, Source STag, Source TO */
#define FP_ATOMIC_REQ_LEN 52 /* RFC 7306 §5.1 */
#define FP_REQ_MAX_BODY (FP_DDP_UNTAGGED_LEN + FP_ATOMIC_REQ_LEN)

/* One request: opcode FP_OP_READ_REQUEST (the read fields) or
 * FP_OP_ATOMIC_REQUEST (the atomic fields). */
struct fp_req {
	uint8_t opcode;
	uint32_t msn; /* its MSN of QN 1 */
	/* Read Request */
	uint32_t sink_stag, size, src_stag;
	uint64_t sink_to, src_to;
	/* Atomic Request */
	uint8_t atomic_op; /* 0 FetchAdd, 1 Swap, 2 CmpSwap */
	uint32_t req_id, stag;
	uint64_t to, add_swap, add_swap_mask, compare, compare_mask;
};

/* iwvi_fp_req_body writes q's DDP segment (untagged header and request)
 * into b (FP_REQ_MAX_BODY octets): its length. */
size_t iwvi_fp_req_body(uint8_t *b, const struct fp_req *q);

/* iwvi_fp_req_build writes keys (qkey, src_qkey) | RD DATA (rd's fields)
 * | q's segment | CRC32c (crc, else 0) into buf: its length, -ENOBUFS if
 * cap is short. */
ssize_t iwvi_fp_req_build(uint8_t *buf, size_t cap, uint32_t qkey, uint32_t src_qkey, const struct fp_rd_hdr *rd,
			  const struct fp_req *q, int crc);

#endif
