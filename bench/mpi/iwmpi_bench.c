/*
 * iwmpi_bench — a small OSU-style MPI benchmark (after the OSU
 * Micro-Benchmarks' osu_latency, osu_bw, osu_bibw and osu_alltoall), run
 * by cmd/iwarp-bench's MPI section (docs/mpi.md, docs/benchmarks.md).
 *
 * Usage: iwmpi_bench SPEC...; each SPEC is MODE:SIZE:ITERS[:WINDOW|:PIDS],
 * run in turn in one job:
 *   lat:SIZE:ITERS          ping-pong between ranks 0 and 1: one-way
 *                           latency (half the round trip)
 *   bw:SIZE:ITERS:WINDOW    rank 0 streams WINDOW MPI_Isends to rank 1,
 *                           which acknowledges each window
 *   bibw:SIZE:ITERS:WINDOW  both directions at once (sum of both)
 *   a2a:SIZE:ITERS          MPI_Alltoall of SIZE octets per pair, all
 *                           ranks: average time per call (slowest rank)
 *   put:SIZE:ITERS          one-sided (MPI-3.1 §11.5.3, passive target):
 *                           rank 0 holds MPI_Win_lock(SHARED) on rank 1 and
 *                           does MPI_Put of SIZE + MPI_Win_flush, ITERS
 *                           times: time per put
 *   get:SIZE:ITERS          the same with MPI_Get
 *   fop:8:ITERS             MPI_Fetch_and_op (int64 MPI_SUM of 1) + flush;
 *                           every fetched value checked (0, 1, 2, ...)
 *   fopx:8:ITERS            the same under MPI_Win_lock(EXCLUSIVE): Open
 *                           MPI 4.1's osc rdma then takes no accumulate
 *                           lock (one network atomic instead of three,
 *                           docs/mpi.md "One-sided")
 *   putbw:SIZE:ITERS:WINDOW WINDOW puts of SIZE, then one flush: Gb/s
 *   passive:MS:ITERS        rank 1 computes MS milliseconds without calling
 *                           MPI; meanwhile rank 0 does lock/MPI_Put 8 B/
 *                           unlock, lock/MPI_Get/unlock and lock/
 *                           MPI_Fetch_and_op/unlock: the time each took
 *                           (three lines, passput, passget, passfop; the
 *                           median of ITERS rounds). With osc rdma over
 *                           iwarpd the target's daemon executes them; a
 *                           target library that must act waits for MS.
 *                           The windows are MPI_Win_create over malloc'd
 *                           memory.
 *   rate:SIZE:ITERS:WINDOW  message rate (after OSU osu_mbw_mr): rank 0
 *                           posts WINDOW MPI_Isends of SIZE, rank 1 WINDOW
 *                           MPI_Irecvs, both wait, rank 1 acknowledges;
 *                           ITERS windows: million messages per second
 *   overlap:SIZE:ITERS      overlap of communication with computation
 *                           (after OSU's non-blocking benchmarks): first
 *                           t_comm, the median time of rank 0 MPI_Isend /
 *                           rank 1 MPI_Irecv of SIZE + MPI_Wait; then ITERS
 *                           times post, compute t_comm without any MPI
 *                           call (floating-point work into a volatile),
 *                           wait: t_total. Per rank, overlap =
 *                           max(0, 1 - (t_total - t_compute) / t_comm);
 *                           the smaller of the two ranks', in percent
 *   mem:SIZE:ITERS[:PIDS]   ITERS MPI_Alltoall (every pair has talked),
 *                           then the proportional set size (Pss,
 *                           /proc/PID/smaps_rollup) of every rank summed,
 *                           and of each PID of the comma-separated PIDS
 *                           (the daemons)
 *
 * lat and rate also print the CPU time per message of the whole node:
 *   RESULT cpulat|cpurate <size> <usec> usec
 * the user + system time of every rank (getrusage) during the timed part,
 * plus that of the processes named by IWMPI_DAEMON_PIDS (comma-separated;
 * the daemons: the sum of /proc/PID/task/STAR/schedstat run times), divided
 * by the messages (lat: 2 per iteration; rate: WINDOW per iteration).
 * IWMPI_BENCH_CPU=N binds every rank to CPU N (sched_setaffinity(2)) at
 * start (iwarp-bench -mpi-layouts engine-cpu).
 *
 * Each mode warms up with ITERS/10 (at least 10) untimed iterations and
 * checks data: every message carries a pattern of (sender, iteration) that
 * the receiver verifies in the last iteration, and its first and last octet
 * in every iteration. Rank 0 prints one line
 *   RESULT <mode> <size> <value> <unit>
 * (usec, Gbps, Mmsgs (rate), pct (overlap), or for mem: "RESULT mem <ranks> <ranks_pss> B <daemons_pss> B").
 * Exit status 0, or 1 when data was wrong, 2 for a usage or MPI error.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, bad;

#define CALL(x)                                                                            \
	do {                                                                               \
		int rc_ = (x);                                                             \
		if (rc_ != MPI_SUCCESS) {                                                  \
			char s_[MPI_MAX_ERROR_STRING];                                     \
			int l_ = 0;                                                        \
			MPI_Error_string(rc_, s_, &l_);                                    \
			fprintf(stderr, "iwmpi_bench rank %d: %s failed: %s\n", rank, #x, s_); \
			MPI_Abort(MPI_COMM_WORLD, 2);                                      \
		}                                                                          \
	} while (0)

static uint8_t pat(int src, long it, size_t i) { return (uint8_t)(src * 67 + it * 13 + i * 31 + (i >> 9)); }

static void fill(uint8_t *b, size_t n, int src, long it)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(src, it, i);
}

/* check verifies the whole buffer when full, else its first and last octet. */
static void check(const uint8_t *b, size_t n, int src, long it, int full, const char *what)
{
	if (n == 0)
		return;
	for (size_t i = 0; i < n; i = (full || i + 1 == n) ? i + 1 : n - 1) {
		if (b[i] != pat(src, it, i)) {
			if (bad++ < 5)
				fprintf(stderr, "iwmpi_bench rank %d: %s: %zu octets from %d, iteration %ld: octet %zu is 0x%02x, want 0x%02x\n",
					rank, what, n, src, it, i, b[i], pat(src, it, i));
			return;
		}
	}
}

static void *xalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "iwmpi_bench: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}


/* self_cpu is this process's user + system time, in seconds (getrusage(2),
 * every thread). */
static double self_cpu(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* pid_cpu is the CPU time of process pid in seconds: the sum of its
 * threads' run time in /proc/PID/task/N/schedstat (proc(5)), -1 when none
 * can be read. */
static double pid_cpu(long pid)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/%ld/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	double sum = 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%ld/task/%.32s/schedstat", pid, e->d_name);
		FILE *f = fopen(path, "r");
		unsigned long long ns;
		if (!f)
			continue;
		if (fscanf(f, "%llu", &ns) == 1) {
			sum += (double)ns / 1e9;
			n++;
		}
		fclose(f);
	}
	closedir(d);
	return n ? sum : -1;
}

/* daemons_cpu is the summed CPU time of IWMPI_DAEMON_PIDS (0 without). */
static double daemons_cpu(void)
{
	const char *v = getenv("IWMPI_DAEMON_PIDS");
	if (!v || !*v)
		return 0;
	char buf[256], *save = NULL;
	snprintf(buf, sizeof buf, "%s", v);
	double sum = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		double c = pid_cpu(strtol(t, NULL, 10));
		if (c < 0) {
			fprintf(stderr, "iwmpi_bench: cannot read the CPU time of pid %s\n", t);
			bad++;
			return 0;
		}
		sum += c;
	}
	return sum;
}

/* cpu_mark / cpu_report: the whole node's CPU time per message (usec)
 * between them, printed by rank 0 as "RESULT <name> <size> <usec> usec". */
static double cpu_rank0, cpu_daemons0;

static void cpu_mark(void)
{
	cpu_rank0 = self_cpu();
	if (rank == 0)
		cpu_daemons0 = daemons_cpu();
}

static void cpu_report(const char *name, size_t n, double msgs)
{
	double mine = self_cpu() - cpu_rank0, all = 0, dm = 0;
	if (rank == 0)
		dm = daemons_cpu() - cpu_daemons0;
	CALL(MPI_Reduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
	if (rank == 0 && msgs > 0)
		printf("RESULT %s %zu %.3f usec\n", name, n, (all + dm) * 1e6 / msgs);
}

static double lat(size_t n, long iters)
{
	uint8_t *s = xalloc(n), *r = xalloc(n);
	long warm = iters / 10 > 10 ? iters / 10 : 10;
	double t0 = 0;
	int peer = 1 - rank;
	for (long it = -warm; it < iters; it++) {
		int full = it == iters - 1;
		if (it == 0) {
			CALL(MPI_Barrier(MPI_COMM_WORLD));
			cpu_mark();
			t0 = MPI_Wtime();
		}
		if (rank > 1)
			continue;
		if (rank == 0) {
			fill(s, n, 0, it);
			CALL(MPI_Send(s, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
			CALL(MPI_Recv(r, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			check(r, n, 1, it, full, "lat");
		} else {
			CALL(MPI_Recv(r, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			check(r, n, 0, it, full, "lat");
			fill(s, n, 1, it);
			CALL(MPI_Send(s, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
		}
	}
	double t = MPI_Wtime() - t0;
	cpu_report("cpulat", n, 2.0 * (double)iters);
	free(s);
	free(r);
	return t * 1e6 / (2.0 * (double)iters);
}

/* bw: both = 0 (rank 0 -> 1) or 1 (both directions); returns Gb/s of
 * payload (both directions summed for bibw). rate (both = 0): returns
 * million messages per second instead and prints the CPU per message. */
static double bw(size_t n, long iters, int window, int both, int rate)
{
	uint8_t **s = xalloc(sizeof(*s) * (size_t)window), **r = xalloc(sizeof(*r) * (size_t)window);
	MPI_Request *req = xalloc(sizeof(*req) * 2 * (size_t)window);
	for (int w = 0; w < window; w++) {
		s[w] = xalloc(n);
		r[w] = xalloc(n);
		fill(s[w], n, rank, w);
	}
	long warm = iters / 10 > 2 ? iters / 10 : 2;
	double t0 = 0;
	int peer = 1 - rank;
	char ack = 0;
	for (long it = -warm; it < iters; it++) {
		int full = it == iters - 1;
		if (it == 0) {
			CALL(MPI_Barrier(MPI_COMM_WORLD));
			cpu_mark();
			t0 = MPI_Wtime();
		}
		if (rank > 1)
			continue;
		int nr = 0;
		int sends = rank == 0 || both, recvs = rank == 1 || both;
		if (recvs)
			for (int w = 0; w < window; w++)
				CALL(MPI_Irecv(r[w], (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[nr++]));
		if (sends)
			for (int w = 0; w < window; w++)
				CALL(MPI_Isend(s[w], (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[nr++]));
		CALL(MPI_Waitall(nr, req, MPI_STATUSES_IGNORE));
		if (recvs)
			for (int w = 0; w < window; w++)
				check(r[w], n, peer, w, full, both ? "bibw" : "bw");
		if (!both) { /* the receiver acknowledges each window */
			if (rank == 1)
				CALL(MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD));
			else
				CALL(MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		}
	}
	double t = MPI_Wtime() - t0;
	if (rate)
		cpu_report("cpurate", n, (double)window * (double)iters);
	for (int w = 0; w < window; w++) {
		free(s[w]);
		free(r[w]);
	}
	free(s);
	free(r);
	free(req);
	if (rate)
		return (double)window * (double)iters / t / 1e6;
	return (double)n * 8.0 * (double)window * (double)iters * (both ? 2.0 : 1.0) / t / 1e9;
}

static double a2a(size_t n, long iters)
{
	uint8_t *s = xalloc(n * (size_t)size), *r = xalloc(n * (size_t)size);
	long warm = iters / 10 > 10 ? iters / 10 : 10;
	double t0 = 0;
	for (long it = -warm; it < iters; it++) {
		int full = it == iters - 1;
		if (it == 0) {
			CALL(MPI_Barrier(MPI_COMM_WORLD));
			t0 = MPI_Wtime();
		}
		for (int p = 0; p < size; p++)
			fill(s + (size_t)p * n, n, rank * 1000 + p, it);
		CALL(MPI_Alltoall(s, (int)n, MPI_BYTE, r, (int)n, MPI_BYTE, MPI_COMM_WORLD));
		for (int p = 0; p < size; p++)
			check(r + (size_t)p * n, n, p * 1000 + rank, it, full, "alltoall");
	}
	double t = MPI_Wtime() - t0, tmax = 0;
	CALL(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
	free(s);
	free(r);
	return tmax * 1e6 / (double)iters;
}

/* A window over malloc'd memory of n octets (at least 64). */
static uint8_t *win_new(size_t n, MPI_Win *win)
{
	uint8_t *b = xalloc(n < 64 ? 64 : n);
	memset(b, 0, n < 64 ? 64 : n);
	CALL(MPI_Win_create(b, (MPI_Aint)(n < 64 ? 64 : n), 1, MPI_INFO_NULL, MPI_COMM_WORLD, win));
	return b;
}

/* rma: put, get, fop (time per operation, usec) and putbw (Gb/s) between
 * ranks 0 (origin) and 1 (target) under a shared lock. */
static double rma(const char *mode, size_t n, long iters, int window)
{
	int bwmode = !strcmp(mode, "putbw"), excl = !strcmp(mode, "fopx"), fop = excl || !strcmp(mode, "fop"),
	    get = !strcmp(mode, "get");
	size_t span = bwmode ? n * (size_t)window : n;
	MPI_Win win;
	uint8_t *wb = win_new(fop ? 8 : span, &win), *lb = xalloc(span < 8 ? 8 : span);
	long warm = iters / 10 > 10 ? iters / 10 : 10;
	int64_t one = 1, got = -1;
	double t0 = 0;
	if (rank == 1 && get)
		fill(wb, n, 1, 0);
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	if (rank == 0) {
		CALL(MPI_Win_lock(excl ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, 1, 0, win));
		for (long it = -warm; it < iters; it++) {
			if (it == 0)
				t0 = MPI_Wtime();
			if (fop) {
				CALL(MPI_Fetch_and_op(&one, &got, MPI_INT64_T, 1, 0, MPI_SUM, win));
				CALL(MPI_Win_flush(1, win));
				if (got != it + warm) {
					fprintf(stderr, "iwmpi_bench: fop: fetched %lld, want %ld\n", (long long)got, it + warm);
					bad++;
				}
			} else if (get) {
				CALL(MPI_Get(lb, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, win));
				CALL(MPI_Win_flush(1, win));
				check(lb, n, 1, 0, it == iters - 1, "get");
			} else if (bwmode) {
				for (int w = 0; w < window; w++)
					CALL(MPI_Put(lb + (size_t)w * n, (int)n, MPI_BYTE, 1, (MPI_Aint)((size_t)w * n), (int)n,
						     MPI_BYTE, win));
				CALL(MPI_Win_flush(1, win));
			} else {
				fill(lb, n, 0, it);
				CALL(MPI_Put(lb, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, win));
				CALL(MPI_Win_flush(1, win));
			}
		}
		t0 = MPI_Wtime() - t0;
		CALL(MPI_Win_unlock(1, win));
	}
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	if (rank == 1 && !strcmp(mode, "put")) {
		CALL(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win)); /* public and private copy */
		check(wb, n, 0, iters - 1, 1, "put");
		CALL(MPI_Win_unlock(1, win));
	}
	CALL(MPI_Win_free(&win));
	free(wb);
	free(lb);
	if (bwmode)
		return (double)n * 8.0 * (double)window * (double)iters / t0 / 1e9;
	return t0 * 1e6 / (double)iters;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void busy(double s)
{
	volatile double x = 1;
	double end = MPI_Wtime() + s;
	while (MPI_Wtime() < end)
		for (int i = 0; i < 1000; i++)
			x = x * 1.0000001 + 1e-9;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile double sink;

/* compute works s seconds without any MPI call (floating point into a
 * volatile the compiler must keep); returns the time it took. */
static double compute(double s)
{
	double t0 = now(), x = sink + 1.0;
	do {
		for (int i = 0; i < 256; i++)
			x = x * 1.0000001 + 1e-9;
	} while (now() - t0 < s);
	sink = x;
	return now() - t0;
}

/* xfer posts rank 0's MPI_Isend / rank 1's MPI_Irecv of b (n octets),
 * computes c seconds (0: none), waits; returns {total, compute} time. */
static double xfer_t0, xfer_tc, xfer_tw; /* the last xfer's start, compute end, wait end */

static void xfer(uint8_t *b, size_t n, long it, double c, int full, double *total, double *comp)
{
	MPI_Request req;
	if (rank == 0)
		fill(b, n, 0, it);
	CALL(MPI_Barrier(MPI_COMM_WORLD));
	double t0 = now();
	*comp = 0;
	if (rank == 0)
		CALL(MPI_Isend(b, (int)n, MPI_BYTE, 1, 4, MPI_COMM_WORLD, &req));
	else if (rank == 1)
		CALL(MPI_Irecv(b, (int)n, MPI_BYTE, 0, 4, MPI_COMM_WORLD, &req));
	if (rank <= 1) {
		if (c > 0)
			*comp = compute(c);
		xfer_tc = now();
		CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
	}
	*total = now() - t0;
	xfer_t0 = t0;
	xfer_tw = t0 + *total;
	if (rank == 1)
		check(b, n, 0, it, full, "overlap");
}

/* overlap returns the overlap of an n-octet transfer with computation in
 * percent (OSU style; the smaller of ranks 0 and 1). */
static double overlap(size_t n, long iters)
{
	uint8_t *b = xalloc(n);
	double *tc = xalloc(sizeof(double) * (size_t)iters), tot = 0, comp = 0, t, c;
	long warm = iters / 10 > 3 ? iters / 10 : 3;
	for (long it = -warm; it < iters; it++) {
		xfer(b, n, it, 0, it == iters - 1, &t, &c);
		if (it >= 0)
			tc[it] = t;
	}
	qsort(tc, (size_t)iters, sizeof(double), cmp_double);
	double tcomm = tc[iters / 2], sumt = 0, sumc = 0;
	double *ts = xalloc(sizeof(double) * 3 * (size_t)iters);
	for (long it = 0; it < iters; it++) {
		xfer(b, n, it, tcomm, it == iters - 1, &tot, &comp);
		sumt += tot;
		sumc += comp;
		ts[3 * it] = xfer_t0;
		ts[3 * it + 1] = xfer_tc;
		ts[3 * it + 2] = xfer_tw;
	}
	/* IWMPI_BENCH_VERBOSE=2: each overlapped iteration's start (after the
	 * barrier), compute end and wait end, CLOCK_MONOTONIC ns. */
	if (rank <= 1 && getenv("IWMPI_BENCH_VERBOSE") && atoi(getenv("IWMPI_BENCH_VERBOSE")) >= 2)
		for (long it = 0; it < iters; it++)
			fprintf(stderr, "overlap rank %d iter %ld: start %.0f compute-end %.0f wait-end %.0f ns\n", rank, it,
				ts[3 * it] * 1e9, ts[3 * it + 1] * 1e9, ts[3 * it + 2] * 1e9);
	free(ts);
	double ov = 100.0 * (1.0 - (sumt - sumc) / (double)iters / tcomm), worst = 0;
	if (ov < 0)
		ov = 0;
	if (rank > 1)
		ov = 100;
	else if (getenv("IWMPI_BENCH_VERBOSE"))
		fprintf(stderr, "overlap rank %d: t_comm %.1f us, per iteration total %.1f us, compute %.1f us: %.1f %%\n",
			rank, tcomm * 1e6, sumt / (double)iters * 1e6, sumc / (double)iters * 1e6, ov);
	CALL(MPI_Reduce(&ov, &worst, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD));
	free(b);
	free(tc);
	return worst;
}

/* passive: the target computes ms milliseconds without MPI while rank 0
 * does one put, one get and one fetch-and-op, each under its own lock;
 * prints the median time of each over iters rounds. */
static void passive(long ms, long iters)
{
	MPI_Win win;
	uint8_t *wb = win_new(64, &win);
	double *t = xalloc(sizeof(double) * 3 * (size_t)iters);
	int64_t v = 0x1122334455667788, got = 0, one = 1, fetched = -1;
	for (long it = 0; it < iters; it++) {
		CALL(MPI_Barrier(MPI_COMM_WORLD));
		if (rank == 1) {
			busy((double)ms / 1e3);
		} else if (rank == 0) {
			double a = MPI_Wtime();
			CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
			CALL(MPI_Put(&v, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, win));
			CALL(MPI_Win_unlock(1, win));
			double b = MPI_Wtime();
			CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
			CALL(MPI_Get(&got, 1, MPI_INT64_T, 1, 0, 1, MPI_INT64_T, win));
			CALL(MPI_Win_unlock(1, win));
			double c = MPI_Wtime();
			CALL(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
			CALL(MPI_Fetch_and_op(&one, &fetched, MPI_INT64_T, 1, 8, MPI_SUM, win));
			CALL(MPI_Win_unlock(1, win));
			double d = MPI_Wtime();
			t[it] = (b - a) * 1e6;
			t[iters + it] = (c - b) * 1e6;
			t[2 * iters + it] = (d - c) * 1e6;
			if (got != v || fetched != it) {
				fprintf(stderr, "iwmpi_bench: passive: got %llx (want %llx), fetched %lld (want %ld)\n",
					(unsigned long long)got, (unsigned long long)v, (long long)fetched, it);
				bad++;
			}
		}
		CALL(MPI_Barrier(MPI_COMM_WORLD));
	}
	int allbad = 0;
	CALL(MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	if (rank == 0 && !allbad) {
		static const char *names[] = {"passput", "passget", "passfop"};
		for (int k = 0; k < 3; k++) {
			qsort(t + k * iters, (size_t)iters, sizeof(double), cmp_double);
			printf("RESULT %s %ld %.3f usec\n", names[k], ms, t[k * iters + iters / 2]);
		}
	} else if (rank == 0) {
		printf("FAIL passive %ld: data errors\n", ms);
	}
	CALL(MPI_Win_free(&win));
	free(wb);
	free(t);
}

/* pss returns the Pss of process pid ("self" when pid is 0) in octets, or
 * -1 when it cannot be read. */
static long long pss(long pid)
{
	char path[64], line[256];
	if (pid)
		snprintf(path, sizeof path, "/proc/%ld/smaps_rollup", pid);
	else
		snprintf(path, sizeof path, "/proc/self/smaps_rollup");
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long long kb = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Pss: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

/* run1 runs one spec "mode:size:iters[:window|:pids]"; returns 0, or 2 for
 * a bad spec. */
static int run1(char *spec)
{
	char *save = NULL, *mode = strtok_r(spec, ":", &save), *a = strtok_r(NULL, ":", &save),
	     *b = strtok_r(NULL, ":", &save), *c = strtok_r(NULL, ":", &save);
	if (!mode || !a || !b) {
		if (rank == 0)
			fprintf(stderr, "iwmpi_bench: bad spec (want mode:size:iters[:window|:pids])\n");
		return 2;
	}
	size_t n = strtoull(a, NULL, 0);
	long iters = strtol(b, NULL, 0);
	int window = c ? atoi(c) : 64;
	int isrma = !strcmp(mode, "put") || !strcmp(mode, "get") || !strcmp(mode, "fop") || !strcmp(mode, "fopx") ||
		    !strcmp(mode, "putbw");
	int p2p = !strcmp(mode, "lat") || !strcmp(mode, "bw") || !strcmp(mode, "rate") || !strcmp(mode, "overlap") ||
		  !strcmp(mode, "bibw") || isrma || !strcmp(mode, "passive");
	if (iters < 1 || window < 1 || (p2p && size < 2)) {
		if (rank == 0)
			fprintf(stderr, "iwmpi_bench: ITERS and WINDOW must be >= 1; lat, bw, bibw and the one-sided modes need 2 ranks\n");
		return 2;
	}
	double v = 0;
	const char *unit = "usec";
	int before = bad;
	if (!strcmp(mode, "lat")) {
		v = lat(n, iters);
	} else if (!strcmp(mode, "bw") || !strcmp(mode, "bibw")) {
		v = bw(n, iters, window, mode[1] == 'i', 0);
		unit = "Gbps";
	} else if (!strcmp(mode, "rate")) {
		v = bw(n, iters, window, 0, 1);
		unit = "Mmsgs";
	} else if (!strcmp(mode, "overlap")) {
		v = overlap(n, iters);
		unit = "pct";
	} else if (isrma) {
		v = rma(mode, n, iters, window);
		if (mode[3] == 'b')
			unit = "Gbps";
	} else if (!strcmp(mode, "passive")) {
		passive((long)n, iters);
		return 0;
	} else if (!strcmp(mode, "a2a")) {
		v = a2a(n, iters);
	} else if (!strcmp(mode, "mem")) {
		a2a(n, iters);
		CALL(MPI_Barrier(MPI_COMM_WORLD));
		long long mine = pss(0), total = 0, daemons = 0;
		if (mine < 0) {
			fprintf(stderr, "iwmpi_bench rank %d: cannot read /proc/self/smaps_rollup\n", rank);
			bad++;
		}
		CALL(MPI_Reduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
		if (rank == 0 && c) {
			char *s2 = NULL;
			for (char *t = strtok_r(c, ",", &s2); t; t = strtok_r(NULL, ",", &s2)) {
				long long d = pss(strtol(t, NULL, 10));
				if (d < 0) {
					fprintf(stderr, "iwmpi_bench: cannot read the Pss of pid %s\n", t);
					bad++;
				}
				daemons += d;
			}
		}
		int allbad = 0, mybad = bad - before;
		CALL(MPI_Allreduce(&mybad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		if (rank == 0 && allbad == 0)
			printf("RESULT mem %d %lld B %lld B\n", size, total, daemons);
		return 0;
	} else {
		if (rank == 0)
			fprintf(stderr, "iwmpi_bench: unknown mode %s\n", mode);
		return 2;
	}
	int allbad = 0, mybad = bad - before;
	CALL(MPI_Allreduce(&mybad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	if (rank == 0) {
		if (allbad)
			printf("FAIL %s %zu: %d data errors\n", mode, n, allbad);
		else
			printf("RESULT %s %zu %.3f %s\n", mode, n, v, unit);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *cpu = getenv("IWMPI_BENCH_CPU");
	if (cpu && *cpu) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(atoi(cpu), &set);
		if (sched_setaffinity(0, sizeof set, &set) != 0) {
			perror("iwmpi_bench: sched_setaffinity(IWMPI_BENCH_CPU)");
			return 2;
		}
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int rc = argc < 2 ? 2 : 0;
	if (argc < 2 && rank == 0)
		fprintf(stderr, "usage: iwmpi_bench SPEC... (SPEC: lat|bw|bibw|rate|overlap|a2a|put|get|fop|fopx|putbw:SIZE:ITERS[:WINDOW], passive:MS:ITERS, mem:SIZE:ITERS[:PID,...])\n");
	for (int i = 1; i < argc && rc == 0; i++)
		rc = run1(argv[i]);
	int allbad = 0;
	MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Finalize();
	return rc ? rc : allbad ? 1 : 0;
}
