/* zcrpc — per-worker device state: protection domain and completion channel
 * of each RDMA device the worker's connections use. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

zcrpc_status zcrpc__device_get(zcrpc_worker *w, struct ibv_context *verbs,
			       struct zcrpc__device **out)
{
	struct zcrpc__device *d;

	if (!verbs)
		return ZCRPC_UNAVAILABLE;
	for (d = w->devices; d; d = d->next) {
		if (d->verbs == verbs) {
			*out = d;
			return ZCRPC_OK;
		}
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return ZCRPC_RESOURCE_EXHAUSTED;
	d->verbs = verbs;
	if (ibv_query_device(verbs, &d->attr))
		goto err_free;
	d->pd = ibv_alloc_pd(verbs);
	if (!d->pd)
		goto err_free;
	d->comp_ch = ibv_create_comp_channel(verbs);
	if (!d->comp_ch)
		goto err_pd;
	d->src = (struct zcrpc__src){ZCRPC_SRC_COMP, d};
	if (zcrpc__epoll_add(w, d->comp_ch->fd, &d->src))
		goto err_ch;
	d->next = w->devices;
	w->devices = d;
	*out = d;
	return ZCRPC_OK;

err_ch:
	ibv_destroy_comp_channel(d->comp_ch);
err_pd:
	ibv_dealloc_pd(d->pd);
err_free:
	zcrpc__worker_seterr(w, "opening device %s: %s",
			     ibv_get_device_name(verbs->device),
			     strerror(errno));
	free(d);
	return ZCRPC_RESOURCE_EXHAUSTED;
}

/* The completion channel is readable: take each CQ event, note that its CQ
 * is no longer armed, and poll that CQ. Events are acknowledged in batches
 * (conn.c). */
void zcrpc__device_drain(zcrpc_worker *w, struct zcrpc__device *dev)
{
	struct ibv_cq *cq;
	void *ctx;

	(void)w;
	while (ibv_get_cq_event(dev->comp_ch, &cq, &ctx) == 0) {
		zcrpc_conn *c = ctx;

		c->cq_unacked++;
		c->cq_armed = 0;
		if (c->cq_unacked >= 64) {
			ibv_ack_cq_events(c->cq, c->cq_unacked);
			c->cq_unacked = 0;
		}
		if (!c->torn_down)
			zcrpc__conn_poll(c);
	}
}

void zcrpc__device_close_all(zcrpc_worker *w)
{
	while (w->devices) {
		struct zcrpc__device *d = w->devices;

		w->devices = d->next;
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, d->comp_ch->fd, NULL);
		ibv_destroy_comp_channel(d->comp_ch);
		ibv_dealloc_pd(d->pd);
		free(d);
	}
}
