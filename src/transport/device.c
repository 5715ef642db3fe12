/* zcrpc — the devices of the worker's context as this worker uses them:
 * one completion channel each (in the worker's epoll set), opened when a
 * connection first uses the device; its CQs are cq.c's, its shared receive
 * queue srq.c's. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

/* The worker's first use of device @idx: its pool's regions and the
 * application's memory get registered there (docs/design.md "Registration
 * where it is used"). Setup, on the worker thread, once per device. */
static zcrpc_status use_device(zcrpc_worker *w, int idx)
{
	const char *name = w->ctx->dev[idx].prof.name;
	char why[200] = "";
	int err = zcrpc__pool_use_device(w->pool, idx);

	if (err) {
		zcrpc__worker_seterr(w, "the worker's pool on %s: %s", name,
				     zcrpc__pool_error(w->pool));
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	err = zcrpc__context_use_device(w->ctx, idx, why, sizeof(why));
	if (err) {
		zcrpc__worker_seterr(w, "%s", why);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc__device_get(zcrpc_worker *w, struct ibv_context *verbs,
			       struct zcrpc__device **out)
{
	int idx = verbs ? zcrpc__context_dev_index(w->ctx, verbs) : -1;
	struct zcrpc__device *d;

	if (idx < 0 && verbs)
		idx = zcrpc__context_adopt(w->ctx, verbs);
	if (idx < 0) {
		zcrpc__worker_seterr(w, "device %s is not in the worker's context",
				     verbs ? ibv_get_device_name(verbs->device)
					   : "(none)");
		return ZCRPC_UNAVAILABLE;
	}
	d = &w->dev[idx];
	if (!d->comp_ch) {
		zcrpc_status st = use_device(w, idx);

		if (st != ZCRPC_OK)
			return st;
		d->comp_ch = ibv_create_comp_channel(verbs);
		if (!d->comp_ch)
			goto err;
		d->src = (struct zcrpc__src){ZCRPC_SRC_COMP, d, 0};
		if (zcrpc__epoll_add(w, d->comp_ch->fd, &d->src)) {
			ibv_destroy_comp_channel(d->comp_ch);
			d->comp_ch = NULL;
			goto err;
		}
		d->idx = idx;
		d->verbs = verbs;
		zcrpc__list_init(&d->cqs);
		d->pd = w->ctx->dev[idx].pd;
		d->attr = &w->ctx->dev[idx].attr;
		d->prof = &w->ctx->dev[idx].prof;
		d->max_msg_sz = w->ctx->dev[idx].max_msg_sz;
	}
	*out = d;
	return ZCRPC_OK;
err:
	zcrpc__worker_seterr(w, "completion channel on %s: %s",
			     ibv_get_device_name(verbs->device), strerror(errno));
	return ZCRPC_RESOURCE_EXHAUSTED;
}

void zcrpc__device_close(zcrpc_worker *w, int idx)
{
	struct zcrpc__device *d = &w->dev[idx];

	zcrpc__cq_close_all(d); /* held receives back to the queue first */
	zcrpc__srq_close(w, d);
	if (!d->comp_ch)
		return;
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, d->comp_ch->fd, NULL);
	if (ibv_destroy_comp_channel(d->comp_ch))
		zcrpc__worker_seterr(w, "completion channel of device %d still in use",
				     idx);
	d->comp_ch = NULL;
}

void zcrpc__device_close_all(zcrpc_worker *w)
{
	int i;

	for (i = 0; i < ZCRPC_MAX_DEVICES; i++)
		zcrpc__device_close(w, i);
}
