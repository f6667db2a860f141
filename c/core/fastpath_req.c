/*
 * fastpath_req.c — building the rank's Read Request and Atomic Request
 * datagrams (fastpath_req.h).
 */
#include <errno.h>
#include <string.h>

#include "fastpath_req.h"

static uint8_t *put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
	return b + 4;
}

static uint8_t *put64(uint8_t *b, uint64_t v)
{
	return put32(put32(b, (uint32_t)(v >> 32)), (uint32_t)v);
}

size_t iwvi_fp_req_body(uint8_t *b, const struct fp_req *q)
{
	b[0] = 0x40 | 1;                        /* L, DV 1 (RFC 5041 §4.3) */
	b[1] = (uint8_t)(1 << 6 | q->opcode);   /* RDMAP RV 1 */
	uint8_t *p = put32(b + 2, 0);           /* RsvdULP */
	p = put32(p, 1);                        /* QN 1 */
	p = put32(p, q->msn);
	p = put32(p, 0); /* MO */
	if (q->opcode == FP_OP_READ_REQUEST) {
		p = put64(put32(p, q->sink_stag), q->sink_to);
		p = put32(p, q->size);
		p = put64(put32(p, q->src_stag), q->src_to);
	} else {
		p = put32(p, (uint32_t)(q->atomic_op & 0x0f));
		p = put32(p, q->req_id);
		p = put64(put32(p, q->stag), q->to);
		p = put64(put64(p, q->add_swap), q->add_swap_mask);
		p = put64(put64(p, q->compare), q->compare_mask);
	}
	return (size_t)(p - b);
}

ssize_t iwvi_fp_req_build(uint8_t *buf, size_t cap, uint32_t qkey, uint32_t src_qkey, const struct fp_rd_hdr *rd,
			  const struct fp_req *q, int crc)
{
	const size_t pre = FP_KEYS_LEN + FP_RD_HDR_LEN;
	uint8_t body[FP_REQ_MAX_BODY];
	size_t bl = iwvi_fp_req_body(body, q);
	size_t total = pre + bl + FP_CRC_LEN;
	if (cap < total)
		return -ENOBUFS;
	/* Key and RD headers as for a Send (fastpath_wrec.c). */
	struct fp_send fs = {.qkey = qkey, .src_qkey = src_qkey, .last = 1};
	uint8_t hdr[FP_MAX_HDR];
	(void)iwvi_fp_send_hdr(hdr, &fs, rd);
	memcpy(buf, hdr, pre);
	memcpy(buf + pre, body, bl);
	uint8_t *p = buf + pre + bl;
	uint32_t c = crc ? iwvi_fp_crc32c(0, buf, (size_t)(p - buf)) : 0;
	p[0] = (uint8_t)c; /* the trailer is little-endian (wire-format.md §1) */
	p[1] = (uint8_t)(c >> 8);
	p[2] = (uint8_t)(c >> 16);
	p[3] = (uint8_t)(c >> 24);
	return (ssize_t)total;
}
