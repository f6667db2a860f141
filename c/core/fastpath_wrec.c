/*
 * fastpath_wrec.c — building the rank's Write-Record datagram
 * (fastpath_wrec.h).
 */
#include <errno.h>
#include <string.h>

#include "fastpath_wrec.h"

static uint8_t *put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
	return b + 4;
}

ssize_t iwvi_fp_wrec_build(uint8_t *buf, size_t cap, const struct fp_wrec *w, const struct fp_rd_hdr *rd,
			   const struct iovec *iov, size_t count, size_t len)
{
	const size_t pre = FP_KEYS_LEN + FP_RD_HDR_LEN;
	if (len > FP_MAX_DATAGRAM - pre - FP_WREC_BODY_HDR - FP_CRC_LEN)
		return -EMSGSIZE;
	size_t total = pre + FP_WREC_BODY_HDR + len + FP_CRC_LEN;
	if (cap < total)
		return -ENOBUFS;
	/* Key and RD headers as for a Send (iwvi_fp_send_hdr writes an
	 * untagged DDP header after them, which is not kept). */
	struct fp_send fs = {.qkey = w->qkey, .src_qkey = w->src_qkey, .last = 1};
	uint8_t hdr[FP_MAX_HDR];
	(void)iwvi_fp_send_hdr(hdr, &fs, rd);
	memcpy(buf, hdr, pre);
	uint8_t *p = buf + pre;
	p[0] = 0x80 | 0x40 | 1;                       /* T, L, DV 1 (RFC 5041 §4.2) */
	p[1] = (uint8_t)(1 << 6 | FP_OP_WRITE_RECORD); /* RDMAP RV 1, opcode 0xC */
	p = put32(p + 2, w->stag);
	p = put32(p, (uint32_t)(w->to >> 32));
	p = put32(p, (uint32_t)w->to);
	p = put32(p, w->record_id);
	p = put32(p, (uint32_t)len); /* Message Length */
	p = put32(p, 0);             /* Message Offset: the only segment */
	for (size_t i = 0, k = 0; i < count && k < len; i++) {
		size_t c = iov[i].iov_len < len - k ? iov[i].iov_len : len - k;
		if (c)
			memcpy(p + k, iov[i].iov_base, c);
		k += c;
	}
	p += len;
	uint32_t c = w->crc ? iwvi_fp_crc32c(0, buf, (size_t)(p - buf)) : 0;
	p[0] = (uint8_t)c; /* the trailer is little-endian (wire-format.md §1) */
	p[1] = (uint8_t)(c >> 8);
	p[2] = (uint8_t)(c >> 16);
	p[3] = (uint8_t)(c >> 24);
	return (ssize_t)total;
}
