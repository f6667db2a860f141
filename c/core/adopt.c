/*
 * adopt.c — the application's own pages turned into shared memory in place,
 * so that the daemon can map them (zero copy, and remote atomics, which
 * process memory cannot take: docs/memory-registration.md). Their contents
 * move into a sealed memfd mapped MAP_SHARED at the same address
 * (mremap(2), never unmapped in between).
 *
 *  - iwv_adopt_buffer: one memfd per call, a buffer of its own.
 *  - iwv_adopt_pages: the session's arena, one sparse memfd holding every
 *    page it adopts at file offset = the page's address. Ranges adopted at
 *    different times, adjacent or overlapping, are one contiguous range of
 *    one file, so one MR can span them (a registration cache registers
 *    overlapping ranges: Open MPI's, under btl ofi, made the provider
 *    refuse atomic access to a window whose pages partly overlapped an
 *    earlier adoption). iwv_release_pages gives back the pages no MR on
 *    the arena covers and frees them in the file (a punched hole).
 *
 * The application owns the address range, not this library: it may unmap
 * adopted pages (free(3) of a large block is munmap(2)) and the kernel may
 * hand the range to a new mapping. The adoption is then stale there, and
 * two things must not happen: a registration at those addresses going to
 * the memfd (the daemon would place data where the application no longer
 * looks), and the release putting the old contents back over the new
 * mapping (memory corruption, seen as Open MPI's ob1 messages differing
 * after its registration cache let go of a buffer it had freed). So the
 * pages are checked against proc(5) /proc/self/maps: a page is adopted
 * while its mapping is the memfd (same device and inode) at its own
 * offset; only such pages are registered as the buffer and given back.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"

/* Copies between the memfd at offset off and memory with raw pread/pwrite
 * system calls: the kernel reads or writes whole pages, and no user-space
 * copy (which a sanitizer would check against its redzones around the
 * application's objects on those pages) is involved. */
static int fd_copy(int fd, void *mem, size_t len, off_t off, int to_fd)
{
	size_t done = 0;
	while (done < len) {
		long n = syscall(to_fd ? SYS_pwrite64 : SYS_pread64, fd, (char *)mem + done, len - done,
				 off + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

/* Puts mapping tmp (len bytes) at dst in one mremap(2): MREMAP_FIXED
 * unmaps what was there, so dst is never unmapped in between. */
static int move_over(void *tmp, void *dst, size_t len)
{
	if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == MAP_FAILED)
		return -errno;
	return 0;
}

IWV_EXPORT int iwv_adopt_buffer(struct iwv_session *s, void *addr, size_t len, struct iwv_buffer **out)
{
	*out = NULL;
	if (!addr || len == 0 || ((uintptr_t)addr | len) & (W_PAGE_SIZE - 1))
		return iwvi_seterr(s, EINVAL, "adopt-buffer: %p+%zu is not whole pages", addr, len);
	if (__atomic_load_n(&s->dead, __ATOMIC_ACQUIRE))
		return iwvi_seterr(s, ENODEV, "adopt-buffer: iwarpd: daemon closed the session");
	struct iwv_buffer *b = calloc(1, sizeof *b);
	if (!b)
		return iwvi_seterr(s, ENOMEM, "adopt-buffer");
	int r = iwvi_region_create(&b->r, "adopted", len);
	if (r == 0) {
		r = fd_copy(b->r.fd, addr, len, 0, 1);
		if (r == 0)
			r = move_over(b->r.mem, addr, len);
		if (r < 0)
			iwvi_region_close(&b->r);
	}
	if (r < 0) {
		free(b);
		return iwvi_seterr(s, r, "adopt-buffer: %p+%zu", addr, len);
	}
	b->r.mem = addr;
	b->s = s;
	b->size = len;
	b->adopted = 1;
	pthread_mutex_lock(&s->mu);
	b->next = s->buffers;
	s->buffers = b;
	pthread_mutex_unlock(&s->mu);
	*out = b;
	return 0;
}

/* Calls fn(b, lo, hi) for each piece [lo, hi) of [from, to) that is still
 * b's memfd at its own offset (proc(5) /proc/self/maps: device, inode,
 * offset); returns the octets of [from, to) that are, or -errno. */
static long adopted_pieces(const struct iwv_buffer *b, uintptr_t from, uintptr_t to,
			   void (*fn)(const struct iwv_buffer *, uintptr_t, uintptr_t))
{
	struct stat st;
	char line[512];
	uintptr_t base = (uintptr_t)b->r.mem, lo, hi;
	uint64_t off, ino;
	unsigned maj, mnr;
	long total = 0;
	if (fstat(b->r.fd, &st) < 0)
		return -errno;
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %" SCNx64 " %x:%x %" SCNu64, &lo, &hi, &off, &maj, &mnr,
			   &ino) != 6)
			continue;
		if (hi <= from || lo >= to || ino != (uint64_t)st.st_ino || maj != major(st.st_dev) ||
		    mnr != minor(st.st_dev) || lo < base || off != (uint64_t)(lo - base))
			continue;
		lo = lo < from ? from : lo;
		hi = hi > to ? to : hi;
		total += (long)(hi - lo);
		if (fn)
			fn(b, lo, hi);
	}
	fclose(f);
	return total;
}

int iwvi_buffer_holds(const struct iwv_buffer *b, uintptr_t addr, size_t len)
{
	if (!b->adopted)
		return 1;
	if (b->r.fd < 0 || len == 0)
		return 0;
	return adopted_pieces(b, addr, addr + len, NULL) == (long)len;
}

IWV_EXPORT int iwv_buffer_mapped(const struct iwv_buffer *b, const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, base;
	if (!b)
		return 0;
	base = (uintptr_t)b->r.mem;
	if (a < base || a - base > b->size || len > b->size - (a - base))
		return 0;
	return iwvi_buffer_holds(b, a, len);
}

/* Gives one still-adopted piece back as private pages with the same
 * contents; if that fails the shared mapping stays (the memory stays
 * valid). */
static void give_back(const struct iwv_buffer *b, uintptr_t lo, uintptr_t hi)
{
	size_t n = hi - lo;
	void *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return;
	if (fd_copy(b->r.fd, tmp, n, (off_t)(lo - (uintptr_t)b->r.mem), 0) < 0 || move_over(tmp, (void *)lo, n) < 0)
		munmap(tmp, n);
}

void iwvi_buffer_release(struct iwv_buffer *b)
{
	if (!b->adopted) {
		iwvi_region_close(&b->r);
		return;
	}
	/* Only the pages still adopted: what the application unmapped, or
	 * mapped anew, since is not ours to touch. */
	adopted_pieces(b, (uintptr_t)b->r.mem, (uintptr_t)b->r.mem + b->r.len, give_back);
	close(b->r.fd);
	b->r.fd = -1;
	b->r.mem = NULL;
}

/* ---- the session's arena (iwv_adopt_pages) ---- */

/* The arena's size: above every user-space address (x86-64 with five-level
 * paging ends at 2^56); the file is sparse, only adopted pages take memory. */
#define ARENA_SIZE ((uint64_t)1 << 57)

/* One mapping of /proc/self/maps clipped to a range. */
struct mapping {
	uintptr_t lo, hi;
	int arena;  /* the arena's memfd at its own offset */
	int shared; /* any other shared mapping */
	int rw;     /* readable and writable */
};

/* The mappings over [from, to) in address order (at most max; -E2BIG
 * beyond), clipped; gaps are left out. arena may be NULL. */
static int maps_in(const struct iwv_buffer *arena, uintptr_t from, uintptr_t to, struct mapping *out, int max)
{
	struct stat st = {0};
	char line[512], perms[8];
	uintptr_t lo, hi;
	uint64_t off, ino;
	unsigned maj, mnr;
	int n = 0;
	if (arena && fstat(arena->r.fd, &st) < 0)
		return -errno;
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %" SCNx64 " %x:%x %" SCNu64, &lo, &hi, perms, &off, &maj,
			   &mnr, &ino) != 7 ||
		    hi <= from || lo >= to)
			continue;
		if (n == max) {
			fclose(f);
			return -E2BIG;
		}
		struct mapping *m = &out[n++];
		m->arena = arena && ino == (uint64_t)st.st_ino && maj == major(st.st_dev) && mnr == minor(st.st_dev) &&
			   off == (uint64_t)lo;
		m->shared = perms[3] == 's' && !m->arena;
		m->rw = perms[0] == 'r' && perms[1] == 'w';
		m->lo = lo < from ? from : lo;
		m->hi = hi > to ? to : hi;
	}
	fclose(f);
	return n;
}

enum { MAX_MAPPINGS = 256 };

static int arena_create(struct iwv_session *s)
{
	struct iwv_buffer *b = calloc(1, sizeof *b);
	if (!b)
		return -ENOMEM;
	int fd = memfd_create("iwarpd:adopted", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)ARENA_SIZE) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		free(b);
		return -e;
	}
	b->r.fd = fd;
	b->r.mem = NULL; /* file offset = address */
	b->r.len = ARENA_SIZE;
	b->size = ARENA_SIZE;
	b->s = s;
	b->adopted = IWVI_ARENA;
	b->next = s->buffers;
	s->buffers = b;
	s->arena = b;
	return 0;
}

IWV_EXPORT int iwv_adopt_pages(struct iwv_session *s, void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	struct mapping *m;
	int n, r = 0;
	if (!addr || len == 0 || (a | len) & (W_PAGE_SIZE - 1) || a + len < a || a + len > ARENA_SIZE)
		return iwvi_seterr(s, EINVAL, "adopt-pages: %p+%zu is not whole pages", addr, len);
	if (__atomic_load_n(&s->dead, __ATOMIC_ACQUIRE))
		return iwvi_seterr(s, ENODEV, "adopt-pages: iwarpd: daemon closed the session");
	m = calloc(MAX_MAPPINGS, sizeof *m);
	if (!m)
		return iwvi_seterr(s, ENOMEM, "adopt-pages");
	pthread_mutex_lock(&s->mu);
	if (!s->arena && (r = arena_create(s)) < 0) {
		pthread_mutex_unlock(&s->mu);
		free(m);
		return iwvi_seterr(s, r, "adopt-pages: creating the arena memfd");
	}
	n = maps_in(s->arena, a, a + len, m, MAX_MAPPINGS);
	if (n < 0)
		r = iwvi_seterr(s, n, "adopt-pages: reading /proc/self/maps");
	/* Every page mapped, readable and writable, and none another shared
	 * mapping: moving that into a memfd of this process alone would
	 * silently unshare it from every other process mapping it. */
	for (int i = 0, want = 1; r == 0 && i < n; i++) {
		if ((i == 0 && m[i].lo != a) || (i > 0 && m[i].lo != m[i - 1].hi))
			want = 0;
		if (!want)
			r = iwvi_seterr(s, EFAULT, "adopt-pages: %p+%zu is not all mapped", addr, len);
		else if (m[i].shared)
			r = iwvi_seterr(s, EXDEV, "adopt-pages: %p+%zu holds a shared mapping (MAP_SHARED) of another object, "
						  "which adoption would unshare", addr, len);
		else if (!m[i].rw)
			r = iwvi_seterr(s, EACCES, "adopt-pages: %p+%zu is not all readable and writable", addr, len);
	}
	if (r == 0 && (n == 0 || m[n - 1].hi != a + len))
		r = iwvi_seterr(s, EFAULT, "adopt-pages: %p+%zu is not all mapped", addr, len);
	for (int i = 0; r == 0 && i < n; i++) {
		size_t k = m[i].hi - m[i].lo;
		if (m[i].arena)
			continue; /* adopted already */
		void *tmp = mmap(NULL, k, PROT_READ | PROT_WRITE, MAP_SHARED, s->arena->r.fd, (off_t)m[i].lo);
		if (tmp == MAP_FAILED) {
			r = iwvi_seterr(s, errno, "adopt-pages: mapping the arena at %#" PRIxPTR "+%zu", m[i].lo, k);
			break;
		}
		int e = fd_copy(s->arena->r.fd, (void *)m[i].lo, k, (off_t)m[i].lo, 1);
		if (e == 0)
			e = move_over(tmp, (void *)m[i].lo, k);
		if (e < 0) {
			munmap(tmp, k);
			r = iwvi_seterr(s, e, "adopt-pages: %#" PRIxPTR "+%zu", m[i].lo, k);
		}
	}
	pthread_mutex_unlock(&s->mu);
	free(m);
	return r;
}

/* Gives back [lo, hi) minus the pages of the arena's MRs from mr on:
 * adopted pages become private again with the same contents, and the
 * arena's copy is freed (mu held). */
static void release_range(struct iwv_session *s, struct iwv_mr *mr, uintptr_t lo, uintptr_t hi, struct mapping *m)
{
	for (; mr && lo < hi; mr = mr->next) {
		uintptr_t mlo = (uintptr_t)mr->addr & ~(uintptr_t)(W_PAGE_SIZE - 1);
		uintptr_t mhi = ((uintptr_t)mr->addr + mr->len + W_PAGE_SIZE - 1) & ~(uintptr_t)(W_PAGE_SIZE - 1);
		if (!mr->arena || mhi <= lo || mlo >= hi)
			continue;
		if (mlo > lo)
			release_range(s, mr->next, lo, mlo, m);
		lo = mhi;
	}
	if (lo >= hi)
		return;
	int n = maps_in(s->arena, lo, hi, m, MAX_MAPPINGS);
	for (int i = 0; i < n; i++)
		if (m[i].arena)
			give_back(s->arena, m[i].lo, m[i].hi);
	/* Free the arena's copy wherever the arena is not mapped now (a page
	 * the give-back failed for stays, and stays the application's memory). */
	n = maps_in(s->arena, lo, hi, m, MAX_MAPPINGS);
	if (n < 0)
		return;
	uintptr_t at = lo;
	for (int i = 0; i <= n; i++) {
		uintptr_t end = i < n ? m[i].lo : hi;
		if (i < n && !m[i].arena)
			continue;
		if (end > at)
			fallocate(s->arena->r.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)(end - at));
		if (i < n)
			at = m[i].hi;
	}
}

IWV_EXPORT int iwv_release_pages(struct iwv_session *s, void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(W_PAGE_SIZE - 1);
	uintptr_t e = ((uintptr_t)addr + len + W_PAGE_SIZE - 1) & ~(uintptr_t)(W_PAGE_SIZE - 1);
	struct mapping *m;
	if (len == 0 || e < a || e > ARENA_SIZE)
		return iwvi_seterr(s, EINVAL, "release-pages: %p+%zu", addr, len);
	m = calloc(MAX_MAPPINGS, sizeof *m);
	if (!m)
		return iwvi_seterr(s, ENOMEM, "release-pages");
	pthread_mutex_lock(&s->mu);
	if (s->arena)
		release_range(s, s->mrs, a, e, m);
	pthread_mutex_unlock(&s->mu);
	free(m);
	return 0;
}
