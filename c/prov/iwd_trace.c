/* iwd_trace.c — the rendezvous event trace (iwd_trace.h); empty unless
 * built with -DIWD_TRACE. */
#include "iwd_trace.h"

#ifdef IWD_TRACE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TRACE_N (1 << 16)

struct ev {
	uint64_t ns;
	const char *what;
	uint64_t a, b;
};

static struct ev *evs;
static unsigned nev;
static int state; /* 0 not yet looked, 1 on, -1 off */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void dump(void)
{
	char path[512];
	FILE *f;
	snprintf(path, sizeof(path), "%s/trace.%d", getenv("IWD_TRACE"), (int)getpid());
	f = fopen(path, "w");
	if (!f)
		return;
	for (unsigned i = 0; i < nev; i++)
		fprintf(f, "%llu %s %llu %llu\n", (unsigned long long)evs[i].ns, evs[i].what, (unsigned long long)evs[i].a,
			(unsigned long long)evs[i].b);
	fclose(f);
}

static int on(void)
{
	if (state == 0) {
		state = getenv("IWD_TRACE") ? 1 : -1;
		if (state == 1) {
			evs = calloc(TRACE_N, sizeof(*evs));
			if (!evs || atexit(dump))
				state = -1;
		}
	}
	return state > 0;
}

void iwd_trace_ev(const char *what, uint64_t a, uint64_t b)
{
	if (!on() || nev >= TRACE_N)
		return;
	evs[nev++] = (struct ev){now_ns(), what, a, b};
}

void iwd_trace_progress(void)
{
	static uint64_t last;
	uint64_t n;
	if (!on())
		return;
	n = now_ns();
	if (n - last > 200000)
		iwd_trace_ev("prog_gap", (n - last) / 1000, 0);
	last = n;
}
#else
typedef int iwd_trace_unused; /* ISO C wants a declaration */
#endif
