/*
 * fastpath_wrec.h — the RDMA Write-Record datagram of the rank's fast path
 * (issue 22; docs/fastpath.md "RDMA Writes the rank sends itself"): one
 * RD DATA carrying a whole Write-Record message in one tagged DDP segment,
 * byte for byte as the daemon builds it (verbsd/rd/wrec_rd.go
 * prepareWriteRecord and writeRecordHeader, verbsd/ud/wrec_send.go
 * WriteRecordSegments, ddp.Header.Append, rdmap.WriteRecord.Append,
 * dgram.AppendRD; docs/wire-format.md §5, §7, §8). test/fastpath checks it
 * against the Go encoders. Internal to libiwverbs, like fastpath.h: no
 * allocation, no system call.
 */
#ifndef IWV_FASTPATH_WREC_H
#define IWV_FASTPATH_WREC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "fastpath.h"

#define FP_WREC_HDR_LEN 12                                  /* Record ID, Message Length, Message Offset */
#define FP_WREC_BODY_HDR (FP_DDP_TAGGED_LEN + FP_WREC_HDR_LEN) /* 26: before the payload, after the RD header */

/* One Write-Record message of one segment. */
struct fp_wrec {
	uint32_t qkey;      /* destination QP's Q_Key */
	uint32_t src_qkey;  /* our QP's Q_Key */
	uint32_t stag;      /* the target's STag (the fi_write key) */
	uint64_t to;        /* tagged offset of the first octet */
	uint32_t record_id; /* the work request's MSN of QN 0 */
	uint8_t crc;        /* CRC on (else the trailer is 0) */
};

/* iwvi_fp_wrec_build writes keys | RD DATA (rd's fields) | tagged DDP
 * header (T, L, DV 1; RDMAP RV 1, opcode 0xC) | Write-Record header
 * (Record ID, Message Length len, Message Offset 0) | iov[0, count)'s
 * first len octets | CRC32c into buf[0, cap) and returns its length, or
 * -ENOBUFS (cap too small; buf untouched) or -EMSGSIZE (over
 * FP_MAX_DATAGRAM). */
ssize_t iwvi_fp_wrec_build(uint8_t *buf, size_t cap, const struct fp_wrec *w, const struct fp_rd_hdr *rd,
			   const struct iovec *iov, size_t count, size_t len);

#endif
