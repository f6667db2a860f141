/*
 * fastpath_tx.c — building the fast path's datagrams (fastpath.h): an RD
 * or UD untagged Send segment and an RD ACK, the bytes verbsd/rd
 * (send.go batch.add) and verbsd/ud (send.go) put on the wire for the same
 * fields (docs/wire-format.md §5–§7).
 */
#include <errno.h>
#include <string.h>

#include "fastpath.h"

static inline uint8_t *put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
	return b + 4;
}

static inline void put32le(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)(v >> 16);
	b[3] = (uint8_t)(v >> 24);
}

/* The RD header (dgram.RDHeader.Append) of type typ. */
static uint8_t *put_rd(uint8_t *b, const struct fp_rd_hdr *rd, uint8_t typ)
{
	b[0] = (uint8_t)(FP_RD_VERSION << 4 | (typ & 0x0f));
	b[1] = rd->flags;
	b[2] = (uint8_t)(rd->window >> 8);
	b[3] = (uint8_t)rd->window;
	b = put32(b + 4, rd->inc);
	b = put32(b, rd->echoed);
	b = put32(b, rd->seq);
	b = put32(b, rd->cum_ack);
	return put32(b, rd->sack);
}

size_t iwvi_fp_send_hdr(uint8_t *hdr, const struct fp_send *s, const struct fp_rd_hdr *rd)
{
	uint8_t *b = put32(hdr, s->qkey);
	b = put32(b, s->src_qkey);
	if (rd)
		b = put_rd(b, rd, FP_RD_DATA);
	uint8_t op = s->has_imm ? (s->solicited ? FP_OP_IMMEDIATE_SE : FP_OP_IMMEDIATE)
				: (s->solicited ? FP_OP_SEND_SE : FP_OP_SEND);
	b[0] = (uint8_t)((s->last ? 0x40 : 0) | 1); /* T=0, L, DV 1 (RFC 5041 §4.3) */
	b[1] = (uint8_t)(1 << 6 | op);              /* RDMAP RV 1, opcode (RFC 5040 §4.3) */
	b = put32(b + 2, 0);                        /* RsvdULP[8:39]: no Invalidate on datagram QPs */
	b = put32(b, 0);                            /* QN 0 */
	b = put32(b, s->msn);
	b = put32(b, s->mo);
	if (s->has_imm) {
		b = put32(b, s->imm); /* rdmap.MakeImmediateData: value, then 4 zero octets */
		b = put32(b, 0);
	}
	return (size_t)(b - hdr);
}

int iwvi_fp_send_iov(struct fp_dgram *d, const struct fp_send *s, const struct fp_rd_hdr *rd,
		     const void *payload, size_t len)
{
	size_t h = iwvi_fp_send_hdr(d->hdr, s, rd);
	if (len > FP_MAX_DATAGRAM - h - FP_CRC_LEN)
		return -EMSGSIZE;
	uint32_t c = 0;
	if (s->crc)
		c = iwvi_fp_crc32c(iwvi_fp_crc32c(0, d->hdr, h), payload, len);
	put32le(d->trailer, c);
	int k = 0;
	d->iov[k++] = (struct iovec){.iov_base = d->hdr, .iov_len = h};
	if (len > 0)
		d->iov[k++] = (struct iovec){.iov_base = (void *)payload, .iov_len = len};
	d->iov[k++] = (struct iovec){.iov_base = d->trailer, .iov_len = FP_CRC_LEN};
	d->iovcnt = k;
	d->len = h + len + FP_CRC_LEN;
	return 0;
}

ssize_t iwvi_fp_send_build(uint8_t *buf, size_t cap, const struct fp_send *s, const struct fp_rd_hdr *rd,
			   const void *payload, size_t len)
{
	uint8_t hdr[FP_MAX_HDR];
	size_t h = iwvi_fp_send_hdr(hdr, s, rd);
	if (len > FP_MAX_DATAGRAM - h - FP_CRC_LEN)
		return -EMSGSIZE;
	size_t total = h + len + FP_CRC_LEN;
	if (cap < total)
		return -ENOBUFS;
	memcpy(buf, hdr, h);
	if (len > 0)
		memcpy(buf + h, payload, len);
	uint32_t c = s->crc ? iwvi_fp_crc32c(0, buf, h + len) : 0;
	put32le(buf + h + len, c);
	return (ssize_t)total;
}

ssize_t iwvi_fp_rd_ack_build(uint8_t *buf, size_t cap, uint32_t qkey, uint32_t src_qkey, const struct fp_rd_hdr *rd,
			     int crc)
{
	if (cap < FP_RD_ACK_LEN)
		return -ENOBUFS;
	uint8_t *b = put32(buf, qkey);
	b = put32(b, src_qkey);
	b = put_rd(b, rd, FP_RD_ACK);
	uint32_t c = crc ? iwvi_fp_crc32c(0, buf, (size_t)(b - buf)) : 0;
	put32le(b, c);
	return FP_RD_ACK_LEN;
}

size_t iwvi_fp_max_payload(size_t datagram_size, int rd, int has_imm)
{
	size_t over = FP_KEYS_LEN + FP_CRC_LEN + FP_DDP_UNTAGGED_LEN + (rd ? FP_RD_HDR_LEN : 0) +
		      (has_imm ? FP_IMM_LEN : 0);
	if (datagram_size > FP_MAX_DATAGRAM)
		datagram_size = FP_MAX_DATAGRAM;
	return datagram_size > over ? datagram_size - over : 0;
}
