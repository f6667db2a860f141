/*
 * check.h — the data checks shared by the MPI test programs of test/mpi.
 *
 * Every program fills buffers with pattern(), a byte function of (who sent
 * it, tag, sequence, offset) that is not periodic in any power of two, and
 * checks what arrived with expect(), which prints the first differing octet
 * and the number of differing octets. MPI calls go through CALL(), which
 * prints the failing call with its error string and aborts the job (exit
 * status 2). finish() gathers every rank's error count: rank 0 prints
 * "PASS <name>" or "FAIL <name>: N errors", and every rank returns 1 when
 * any rank saw an error (mpirun then exits non-zero).
 */
#ifndef IWMPI_CHECK_H
#define IWMPI_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = -1, g_size = 0, g_errors = 0;
static const char *g_name = "?";

#define CALL(x)                                                             \
	do {                                                                \
		int rc_ = (x);                                              \
		if (rc_ != MPI_SUCCESS) {                                   \
			char s_[MPI_MAX_ERROR_STRING];                      \
			int l_ = 0;                                         \
			MPI_Error_string(rc_, s_, &l_);                     \
			fprintf(stderr, "%s rank %d: %s:%d: %s failed: %s\n", \
				g_name, g_rank, __FILE__, __LINE__, #x, s_); \
			fflush(stderr);                                     \
			MPI_Abort(MPI_COMM_WORLD, 2);                       \
		}                                                           \
	} while (0)

/* fail records one error and prints it with the rank. */
__attribute__((format(printf, 1, 2))) static inline void fail(const char *fmt, ...)
{
	va_list ap;
	g_errors++;
	fprintf(stderr, "%s rank %d: ", g_name, g_rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
}

static inline uint8_t pattern(int src, int tag, int seq, size_t i)
{
	uint32_t x = (uint32_t)src * 131u + (uint32_t)tag * 7u + (uint32_t)seq * 13u +
		     (uint32_t)i * 31u + (uint32_t)(i >> 8) * 17u + (uint32_t)(i >> 16) * 5u;
	return (uint8_t)(x ^ (x >> 7));
}

static inline void fill(void *buf, size_t n, int src, int tag, int seq)
{
	uint8_t *b = buf;
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(src, tag, seq, i);
}

/* expect checks n octets of buf against pattern(src, tag, seq); what names
 * the transfer in the message. Returns 1 when intact. */
static inline int expect(const void *buf, size_t n, int src, int tag, int seq, const char *what)
{
	const uint8_t *b = buf;
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++) {
		if (b[i] != pattern(src, tag, seq, i)) {
			if (bad++ == 0)
				first = i;
		}
	}
	if (bad == 0)
		return 1;
	fail("%s (%zu octets from rank %d, tag %d, seq %d): %zu octets differ, first at offset %zu: got 0x%02x want 0x%02x",
	     what, n, src, tag, seq, bad, first, b[first], pattern(src, tag, seq, first));
	return 0;
}

/* check_status verifies source, tag and the received count in octets. */
static inline void check_status(const MPI_Status *st, int src, int tag, size_t n, const char *what)
{
	int count = -1;
	MPI_Get_count(st, MPI_BYTE, &count);
	if (src != MPI_ANY_SOURCE && st->MPI_SOURCE != src)
		fail("%s: status source %d, want %d", what, st->MPI_SOURCE, src);
	if (tag != MPI_ANY_TAG && st->MPI_TAG != tag)
		fail("%s: status tag %d, want %d", what, st->MPI_TAG, tag);
	if (count < 0 || (size_t)count != n)
		fail("%s: status count %d, want %zu", what, count, n);
}

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "%s rank %d: out of memory (%zu octets)\n", g_name, g_rank, n);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

static inline void start(int *argc, char ***argv, const char *name)
{
	g_name = name;
	CALL(MPI_Init(argc, argv));
	CALL(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
	CALL(MPI_Comm_size(MPI_COMM_WORLD, &g_size));
	setvbuf(stdout, NULL, _IOLBF, 0);
}

/* finish gathers the error counts, prints the verdict on rank 0 and
 * returns the exit status. */
static inline int finish(void)
{
	int total = 0;
	CALL(MPI_Allreduce(&g_errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	if (g_rank == 0) {
		if (total == 0)
			printf("PASS %s (%d ranks)\n", g_name, g_size);
		else
			printf("FAIL %s (%d ranks): %d errors\n", g_name, g_size, total);
	}
	MPI_Finalize();
	return total == 0 ? 0 : 1;
}

#endif
