/*
 * bench_mr_live.c — what the live-MR table (iwd_mr.c: every desc a data
 * transfer call names is looked up there) costs per lookup, with 1 and 2
 * threads posting at once. No daemon: the MRs are entered into the table
 * as fi_mr_reg does (live_add) without registering memory, and each thread
 * calls iwd_check_iov and iwd_desc_lkey on a desc of its own, as a send
 * does. WORK (argument 1, default 0) is the number of pause loops of other
 * work between two lookups (the rest of a post). Built beside the
 * provider's other sources (it includes iwd_mr.c for live_add), from c/
 * after make build:
 *   cc -std=gnu11 -O2 -D_GNU_SOURCE -Iinclude -Icore -Iprov -o /tmp/bench_mr_live \
 *      prov/tests/bench_mr_live.c $(ls prov/iwd_*.c | grep -v iwd_mr.c) build/libiwverbs.a \
 *      -ljansson -lpthread -lfabric
 *   /tmp/bench_mr_live [WORK]   ns per check+lkey pair, 1 and 2 threads
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "iwd_mr.c"


enum { MRS = 256, CALLS = 2000000 };

static struct iwd_mr *mrs[MRS];
static int work;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *poster(void *arg)
{
	struct iwd_mr *mr = arg;
	struct iovec iov = {.iov_base = mr->addr, .iov_len = 64};
	void *desc = mr;
	uint32_t lkey;
	double t0 = now_s();
	for (int i = 0; i < CALLS; i++) {
		if (iwd_check_iov(&iov, &desc, 1) || iwd_desc_lkey(desc, iov.iov_base, 64, &lkey)) {
			fprintf(stderr, "bench_mr_live: a live desc was refused\n");
			exit(1);
		}
		for (volatile int k = 0; k < work; k++)
			;
	}
	double *ns = malloc(sizeof(*ns));
	*ns = (now_s() - t0) * 1e9 / CALLS;
	return ns;
}

int main(int argc, char **argv)
{
	static char mem[MRS][64];
	work = argc > 1 ? atoi(argv[1]) : 0;
	for (int i = 0; i < MRS; i++) {
		mrs[i] = calloc(1, sizeof(*mrs[i]));
		mrs[i]->addr = mem[i];
		mrs[i]->len = sizeof(mem[i]);
		mrs[i]->mr_fid.fid.fclass = FI_CLASS_MR;
		if (live_add(mrs[i]))
			return 1;
	}
	for (int nt = 1; nt <= 2; nt++) {
		pthread_t th[2];
		double sum = 0;
		for (int t = 0; t < nt; t++)
			pthread_create(&th[t], NULL, poster, mrs[t * 7]);
		for (int t = 0; t < nt; t++) {
			void *r;
			pthread_join(th[t], &r);
			sum += *(double *)r;
			free(r);
		}
		printf("bench_mr_live: work %d, %d thread(s): %.1f ns per check+lkey per thread\n", work, nt, sum / nt);
	}
	for (int i = 0; i < MRS; i++) {
		live_del(mrs[i]);
		free(mrs[i]);
	}
	return 0;
}
