/*
 * test_match.c — unit test of the RDM tag matching (iwd_tagged.c): posted
 * and unexpected queues, ignore bits, FI_DIRECTED_RECV, FI_PEEK/FI_CLAIM
 * bookkeeping, cancel, iovec copies. Built and run under AddressSanitizer
 * and UBSan by `make -C c/prov test` (test/libfabric runs it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

/* iwd_tagged.c logs nothing, but iwd.h names the provider object. */
struct fi_provider iwd_prov;

static int failures;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                              \
		}                                                                \
	} while (0)

static struct iwd_rx *post(struct iwd_match *m, int tagged, fi_addr_t src, uint64_t tag, uint64_t ignore, void *ctx)
{
	struct iwd_rx *rx = calloc(1, sizeof(*rx));
	rx->context = ctx;
	rx->flags = FI_RECV | (tagged ? FI_TAGGED : FI_MSG);
	rx->src = src;
	rx->tag = tag;
	rx->ignore = ignore;
	iwd_list_insert_tail(tagged ? &m->posted_tag : &m->posted_msg, &rx->link);
	return rx;
}

static struct iwd_unexp *arrive(struct iwd_match *m, int tagged, fi_addr_t src, uint64_t tag, const char *payload)
{
	size_t n = strlen(payload);
	struct iwd_unexp *u = calloc(1, sizeof(*u) + n);
	u->src = src;
	u->tag = tag;
	u->len = n;
	memcpy(u->payload, payload, n);
	iwd_list_insert_tail(tagged ? &m->unexp_tag : &m->unexp_msg, &u->link);
	m->nunexp++;
	return u;
}

static void test_tag_rule(void)
{
	CHECK(iwd_tag_match(0x1234, 0x1234, 0));
	CHECK(!iwd_tag_match(0x1234, 0x1235, 0));
	CHECK(iwd_tag_match(0x1234, 0x1235, 0x1));
	CHECK(iwd_tag_match(0xdeadbeef00000000ull, 0, ~0ull));
	CHECK(!iwd_tag_match(0xff00, 0x0f00, 0x00ff));
	CHECK(iwd_tag_match(0xff00, 0x0f00, 0xf000));
}

static void test_posted_order_and_ignore(void)
{
	struct iwd_match m;
	int a, b, c;
	struct iwd_rx *rx;
	iwd_match_init(&m, 1);
	post(&m, 1, FI_ADDR_UNSPEC, 0x10, 0x0f, &a); /* matches 0x10..0x1f */
	post(&m, 1, 7, 0x20, 0, &b);                 /* only from 7 */
	post(&m, 1, FI_ADDR_UNSPEC, 0x20, 0, &c);
	/* First match in posting order. */
	rx = iwd_match_posted(&m, 1, 3, 0x1a);
	CHECK(rx && rx->context == &a);
	free(rx);
	/* Directed: the receive for source 7 is skipped for source 3. */
	rx = iwd_match_posted(&m, 1, 3, 0x20);
	CHECK(rx && rx->context == &c);
	free(rx);
	rx = iwd_match_posted(&m, 1, 3, 0x20);
	CHECK(rx == NULL);
	rx = iwd_match_posted(&m, 1, 7, 0x20);
	CHECK(rx && rx->context == &b);
	free(rx);
	/* Untagged and tagged queues are separate. */
	post(&m, 0, FI_ADDR_UNSPEC, 0, 0, &a);
	CHECK(iwd_match_posted(&m, 1, 3, 0) == NULL);
	rx = iwd_match_posted(&m, 0, 3, 0);
	CHECK(rx && rx->context == &a);
	free(rx);
	iwd_match_fini(&m);
}

static void test_not_directed(void)
{
	struct iwd_match m;
	int a;
	struct iwd_rx *rx;
	iwd_match_init(&m, 0); /* without FI_DIRECTED_RECV the source is ignored */
	post(&m, 1, 7, 5, 0, &a);
	rx = iwd_match_posted(&m, 1, 9, 5);
	CHECK(rx && rx->context == &a);
	free(rx);
	iwd_match_fini(&m);
}

static void test_unexpected_peek_claim(void)
{
	struct iwd_match m;
	struct iwd_unexp *u, *v;
	int ctx;
	iwd_match_init(&m, 1);
	arrive(&m, 1, 1, 0x100, "one");
	arrive(&m, 1, 2, 0x200, "two");
	arrive(&m, 1, 1, 0x101, "three");
	CHECK(m.nunexp == 3);
	/* Peek leaves the message queued. */
	u = iwd_match_unexp(&m, 1, FI_ADDR_UNSPEC, 0x200, 0, 1, NULL);
	CHECK(u && u->src == 2 && m.nunexp == 3);
	/* Claim: a later plain receive does not see a claimed message. */
	u->claimed = 1;
	u->claim_ctx = &ctx;
	CHECK(iwd_match_unexp(&m, 1, FI_ADDR_UNSPEC, 0x200, 0, 0, NULL) == NULL);
	v = iwd_match_unexp(&m, 1, FI_ADDR_UNSPEC, 0, 0, 0, &ctx);
	CHECK(v == u && m.nunexp == 2);
	free(v);
	/* Ignore bits and source over the unexpected queue, in arrival order. */
	u = iwd_match_unexp(&m, 1, 1, 0x100, 0xff, 0, NULL);
	CHECK(u && memcmp(u->payload, "one", 3) == 0);
	free(u);
	u = iwd_match_unexp(&m, 1, 2, 0x100, 0xff, 0, NULL);
	CHECK(u == NULL);
	u = iwd_match_unexp(&m, 1, FI_ADDR_UNSPEC, 0x100, 0xff, 0, NULL);
	CHECK(u && memcmp(u->payload, "three", 5) == 0 && m.nunexp == 0);
	free(u);
	/* Thousands of unexpected messages, matched in order. */
	for (int i = 0; i < 5000; i++) {
		char p[16];
		snprintf(p, sizeof(p), "m%d", i);
		arrive(&m, 1, (fi_addr_t)(i % 4), (uint64_t)i, p);
	}
	for (int i = 4999; i >= 0; i -= 7) {
		char p[16];
		u = iwd_match_unexp(&m, 1, (fi_addr_t)(i % 4), (uint64_t)i, 0, 0, NULL);
		snprintf(p, sizeof(p), "m%d", i);
		CHECK(u && u->len == strlen(p) && memcmp(u->payload, p, u->len) == 0);
		free(u);
	}
	iwd_match_fini(&m); /* frees the rest: ASan checks for leaks */
}

static void test_cancel(void)
{
	struct iwd_match m;
	int a, b;
	struct iwd_rx *rx;
	iwd_match_init(&m, 0);
	post(&m, 0, FI_ADDR_UNSPEC, 0, 0, &a);
	post(&m, 1, FI_ADDR_UNSPEC, 9, 0, &b);
	rx = iwd_match_cancel(&m, &b);
	CHECK(rx && rx->context == &b);
	free(rx);
	CHECK(iwd_match_cancel(&m, &b) == NULL);
	CHECK(iwd_match_posted(&m, 1, 0, 9) == NULL);
	iwd_match_fini(&m);
}

static void test_iov(void)
{
	char a[3], b[5], out[8];
	struct iovec iov[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
	CHECK(iwd_iov_len(iov, 2) == 8);
	CHECK(iwd_iov_copy_in(iov, 2, 0, "abcdefgh", 8) == 8);
	CHECK(memcmp(a, "abc", 3) == 0 && memcmp(b, "defgh", 5) == 0);
	CHECK(iwd_iov_copy_in(iov, 2, 2, "XY", 2) == 2); /* across the boundary */
	CHECK(a[2] == 'X' && b[0] == 'Y');
	CHECK(iwd_iov_copy_in(iov, 2, 6, "123", 3) == 2); /* truncated at the end */
	CHECK(iwd_iov_copy_out(out, iov, 2, 8) == 8);
	CHECK(memcmp(out, "abXYef12", 8) == 0);
}

int main(void)
{
	test_tag_rule();
	test_posted_order_and_ignore();
	test_not_directed();
	test_unexpected_peek_claim();
	test_cancel();
	test_iov();
	if (failures) {
		fprintf(stderr, "test_match: %d checks failed\n", failures);
		return 1;
	}
	printf("test_match: ok\n");
	return 0;
}
