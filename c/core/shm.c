/*
 * shm.c — sealed memfd regions (as internal/shm.Create): sized, sealed
 * against shrinking and growing (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL,
 * memfd_create(2), fcntl(2) "File Sealing") before the descriptor leaves the
 * process, so the daemon can never be made to fault on it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

int iwvi_region_create(struct region *r, const char *name, size_t size)
{
	char full[64];
	int err;
	r->fd = -1;
	r->mem = NULL;
	r->len = 0;
	if (size == 0 || size > ((size_t)1 << 40))
		return -EINVAL;
	size = (size + W_PAGE_SIZE - 1) & ~(size_t)(W_PAGE_SIZE - 1);
	snprintf(full, sizeof full, "iwarpd:%s", name);
	int fd = memfd_create(full, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0)
		goto fail;
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail;
	void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED)
		goto fail;
	/* The creator allocates every page now (charged to it, as a verbs
	 * registration pins its pages): the daemon refuses a region with a page
	 * not allocated and never allocates one itself (docs/memory-registration.md
	 * "Who pays for the pages"). MADV_POPULATE_WRITE is Linux 5.14; before,
	 * a write to each page does it (the region is new: all zero). */
	if (madvise(mem, size, MADV_POPULATE_WRITE) != 0) {
		for (size_t off = 0; off < size; off += W_PAGE_SIZE)
			((volatile char *)mem)[off] = 0;
	}
	r->fd = fd;
	r->mem = mem;
	r->len = size;
	return 0;
fail:
	err = -errno;
	close(fd);
	return err;
}

void iwvi_region_close(struct region *r)
{
	if (r->mem)
		munmap(r->mem, r->len);
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	r->mem = NULL;
	r->len = 0;
}
