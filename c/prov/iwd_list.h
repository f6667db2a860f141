/* Minimal intrusive doubly linked list (the provider cannot use
 * libfabric's internal ofi_list.h: it is not installed by libfabric-dev). */
#ifndef IWD_LIST_H
#define IWD_LIST_H

#include <stddef.h>

struct iwd_list {
	struct iwd_list *next, *prev;
};

#define iwd_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline void iwd_list_init(struct iwd_list *h) { h->next = h->prev = h; }
static inline int iwd_list_empty(const struct iwd_list *h) { return h->next == h; }

static inline void iwd_list_insert_tail(struct iwd_list *h, struct iwd_list *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}

static inline void iwd_list_insert_head(struct iwd_list *h, struct iwd_list *e)
{
	e->next = h->next;
	e->prev = h;
	h->next->prev = e;
	h->next = e;
}

static inline void iwd_list_remove(struct iwd_list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = e->prev = e;
}

#define iwd_list_foreach(h, it) for ((it) = (h)->next; (it) != (h); (it) = (it)->next)
#define iwd_list_foreach_safe(h, it, tmp) \
	for ((it) = (h)->next, (tmp) = (it)->next; (it) != (h); (it) = (tmp), (tmp) = (it)->next)

#endif
