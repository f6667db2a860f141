/*
 * iwd_cm.c — CM event dispatch of a fabric (fi_cm(3), fi_eq(3)): pulls the
 * session's connection-manager events and hands each to the object that
 * registered for it — a passive endpoint for a connection request to its
 * listener, a MSG endpoint for an event about its QP — through the
 * handler the object registered (struct iwd_cm_obj, iwd.h). EQ reads
 * drive it; it knows no endpoint type.
 */
#include "iwd.h"

void iwd_cm_register(struct iwd_fabric *fab, struct iwd_cm_obj *obj)
{
	iwd_list_insert_tail(&fab->cm_objs, &obj->link);
}

void iwd_cm_unregister(struct iwd_cm_obj *obj)
{
	iwd_list_remove(&obj->link);
}

/* The fabric lock is held. */
static void dispatch(struct iwd_fabric *fab, struct iwv_cm_event *ev)
{
	const void *key = ev->type == IWV_CM_CONNECT_REQUEST ? (const void *)ev->listener : (const void *)ev->qp;
	struct iwd_list *it;
	if (key) {
		iwd_list_foreach(&fab->cm_objs, it)
		{
			struct iwd_cm_obj *obj = iwd_container_of(it, struct iwd_cm_obj, link);
			if (obj->key == key) {
				obj->event(obj, ev);
				return;
			}
		}
	}
	/* Nobody listens there (any more): the peer hears no, not silence. */
	if (ev->type == IWV_CM_CONNECT_REQUEST)
		iwv_reject(fab->s, ev->conn_id, NULL, 0);
}

void iwd_cm_progress(struct iwd_fabric *fab)
{
	struct iwv_cm_event ev;
	int i;
	for (i = 0; i < 64; i++) {
		if (iwv_cm_get_event(fab->s, &ev, 0))
			break;
		pthread_mutex_lock(&fab->lock);
		dispatch(fab, &ev);
		pthread_mutex_unlock(&fab->lock);
	}
}
