/*
 * iwd_util_freelist.c — free lists of fixed-size objects (libfabric's
 * ofi_freelist / ofi_bufpool idea): transmit contexts are taken from and
 * given back to their endpoint's list, so a send allocates only while the
 * number in flight grows past what it was before. The list owns the
 * objects it holds; objects in use belong to their user until put back.
 */
#include <stdlib.h>
#include <string.h>

#include "iwd.h"

struct fl_node {
	struct fl_node *next;
};

void iwd_freelist_init(struct iwd_freelist *fl, size_t size)
{
	fl->head = NULL;
	fl->size = size < sizeof(struct fl_node) ? sizeof(struct fl_node) : size;
}

void *iwd_freelist_get(struct iwd_freelist *fl)
{
	struct fl_node *n = fl->head;
	if (!n)
		return calloc(1, fl->size);
	fl->head = n->next;
	memset(n, 0, fl->size);
	return n;
}

void iwd_freelist_put(struct iwd_freelist *fl, void *obj)
{
	struct fl_node *n = obj;
	n->next = fl->head;
	fl->head = n;
}

void iwd_freelist_fini(struct iwd_freelist *fl)
{
	while (fl->head) {
		struct fl_node *n = fl->head;
		fl->head = n->next;
		free(n);
	}
}
