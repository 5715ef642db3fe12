/* zcrpc — an RDMA device that goes away (RDMA_CM_EVENT_DEVICE_REMOVAL,
 * e.g. `rdma link delete rxe0`). The kernel finishes the removal only when
 * every user object on the device is gone (rxe cannot disassociate a
 * process), so the library releases them all:
 *   1. the worker that sees the event marks the device removed in the
 *      context and wakes every other worker of the context (eventfd);
 *   2. each worker sweeps: fails and tears down its connections on the
 *      device (UNAVAILABLE, "RDMA device removed"), releases its listeners
 *      there, drops its pool's registrations and its completion channel;
 *   3. the last worker to sweep deregisters the user MRs on the device,
 *      frees the PD and refreshes librdmacm's device list
 *      (rdma_free_devices + rdma_get_devices), which closes the device.
 * The other devices of the context keep working. When the device comes
 * back (`rdma link add`, a reset after DEVICE_FATAL) and a connection of
 * a worker lands on it, the context takes it back into its old slot
 * (zcrpc__context_adopt: profile, PD, async events, removal watch); the
 * workers register their pools there again on first use. */
#include "internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void wake(zcrpc_worker *w)
{
	uint64_t one = 1;
	ssize_t rc = write(w->evfd, &one, sizeof(one));

	(void)rc; /* EAGAIN: the counter is already non-zero, it will wake */
}

/* The context's own objects on device @idx, once no worker holds any.
 * Called with ctx->lock held. */
static void release_ctx_dev(zcrpc_context *ctx, int idx)
{
	struct zcrpc__ctx_dev *d = &ctx->dev[idx];
	struct zcrpc__list *it;
	int n = 0;

	zcrpc__list_foreach(it, &ctx->mrs) {
		zcrpc_mr *mr = zcrpc__container_of(it, zcrpc_mr, link);

		struct ibv_mr *spare = atomic_exchange(&mr->spare[idx], NULL);

		if (spare) /* a refill after this finds no PD (mr_spare.c) */
			zcrpc__dev_dereg(ctx, spare);
		if (mr->mrs[idx]) {
			zcrpc__dev_dereg(ctx, mr->mrs[idx]);
			mr->mrs[idx] = NULL;
		}
	}
	if (atomic_load(&d->used)) {
		atomic_store(&d->used, 0);
		ctx->nused--;
	}
	if (d->pd && ibv_dealloc_pd(d->pd) == 0)
		d->pd = NULL;
	if (d->watch) {
		rdma_destroy_id(d->watch);
		d->watch = NULL;
	}
	d->verbs = NULL;
	/* librdmacm keeps a removed device open until its list is refreshed
	 * (seen on rxe: `rdma link delete` returns only then). */
	if (ctx->list)
		rdma_free_devices(ctx->list);
	ctx->list = rdma_get_devices(&n);
}

void zcrpc__context_add_worker(zcrpc_context *ctx, zcrpc_worker *w)
{
	int i;

	pthread_mutex_lock(&ctx->lock);
	zcrpc__list_push_front(&ctx->workers, &w->ctx_link);
	for (i = 0; i < ctx->ndev; i++)
		if (ctx->dev[i].removed)
			w->removed_seen |= 1u << i; /* nothing of it to hold */
	w->removed_gen = atomic_load(&ctx->removed_gen);
	pthread_mutex_unlock(&ctx->lock);
}

/* The worker released everything it had (zcrpc_worker_destroy): count it
 * as having swept every removed device it had not swept yet. */
void zcrpc__context_remove_worker(zcrpc_context *ctx, zcrpc_worker *w)
{
	int i;

	pthread_mutex_lock(&ctx->lock);
	zcrpc__list_remove(&w->ctx_link);
	for (i = 0; i < ctx->ndev; i++) {
		struct zcrpc__ctx_dev *d = &ctx->dev[i];

		if (!d->removed || (w->removed_seen & (1u << i)))
			continue;
		w->removed_seen |= 1u << i;
		if (--d->sweeps_left == 0)
			release_ctx_dev(ctx, i);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* What worker @w holds on device @idx: released now. */
static void sweep_one(zcrpc_worker *w, int idx)
{
	struct ibv_context *verbs = w->ctx->dev[idx].verbs;
	struct zcrpc__list *it;
	zcrpc_conn *c;

	zcrpc__foreach_conn(c, it, w) {
		int on_dev = (c->dev && c->dev->idx == idx && c->dev->comp_ch) ||
			     (c->id && verbs && c->id->verbs == verbs);

		if (!on_dev || c->torn_down)
			continue;
		c->disconnected = 1; /* the device is gone: no DREQ */
		c->dev_gone = 1;     /* nor flush completions to wait for */
		if (c->state != ZCRPC_CONN_CLOSED)
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "RDMA device removed");
		zcrpc__conn_teardown(c);
		w->need_reap = 1;
	}
	zcrpc__list_foreach(it, &w->listeners) {
		zcrpc_listener *l = zcrpc__listener_of(it);

		if (verbs && l->id && l->id->verbs == verbs)
			zcrpc__listener_drop_device(l);
	}
	zcrpc__srq_close(w, &w->dev[idx]); /* its slots back to the pool */
	zcrpc__pool_drop_device(w->pool, idx);
	zcrpc__device_close(w, idx);
}

void zcrpc__worker_sweep_removed(zcrpc_worker *w)
{
	zcrpc_context *ctx = w->ctx;
	unsigned gen = atomic_load(&ctx->removed_gen);
	int i;

	if (gen == w->removed_gen)
		return;
	w->removed_gen = gen;
	for (i = 0; i < ctx->ndev; i++) {
		int removed;

		pthread_mutex_lock(&ctx->lock);
		removed = ctx->dev[i].removed && !(w->removed_seen & (1u << i));
		pthread_mutex_unlock(&ctx->lock);
		if (!removed)
			continue;
		sweep_one(w, i);
		pthread_mutex_lock(&ctx->lock);
		w->removed_seen |= 1u << i;
		if (--ctx->dev[i].sweeps_left == 0)
			release_ctx_dev(ctx, i);
		pthread_mutex_unlock(&ctx->lock);
	}
}

void zcrpc__device_removed(zcrpc_worker *w, struct ibv_context *verbs)
{
	zcrpc_context *ctx = w->ctx;
	struct zcrpc__list *it;
	int idx;

	pthread_mutex_lock(&ctx->lock);
	idx = verbs ? zcrpc__context_dev_index(ctx, verbs) : -1;
	if (idx >= 0 && !ctx->dev[idx].removed) {
		int n = 0;

		zcrpc__list_foreach(it, &ctx->workers) n++;
		ctx->dev[idx].removed = 1;
		ctx->dev[idx].sweeps_left = n;
		atomic_fetch_add(&ctx->removed_gen, 1);
		zcrpc__list_foreach(it, &ctx->workers) {
			zcrpc_worker *o =
				zcrpc__container_of(it, zcrpc_worker, ctx_link);

			if (o != w)
				wake(o);
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	zcrpc__worker_sweep_removed(w);
}

/* An IP address of @verbs's port 1, from its RoCE v2 GIDs: IPv4-mapped
 * first, else a global IPv6 one. Returns 0 when found. */
static int device_addr(struct ibv_context *verbs, struct sockaddr_storage *ss)
{
	static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	struct ibv_port_attr pa;
	union ibv_gid gid;
	int i, v6 = -1;

	if (ibv_query_port(verbs, 1, &pa))
		return -1;
	memset(ss, 0, sizeof(*ss));
	for (i = 0; i < pa.gid_tbl_len && i < 64; i++) {
		if (ibv_query_gid(verbs, 1, i, &gid))
			continue;
		if (!memcmp(gid.raw, v4map, sizeof(v4map))) {
			struct sockaddr_in *in = (struct sockaddr_in *)ss;

			in->sin_family = AF_INET;
			memcpy(&in->sin_addr, gid.raw + 12, 4);
			return 0;
		}
		if (v6 < 0 && gid.raw[0] != 0xfe && gid.global.subnet_prefix)
			v6 = i;
	}
	if (v6 >= 0 && ibv_query_gid(verbs, 1, v6, &gid) == 0) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_addr, gid.raw, 16);
		return 0;
	}
	return -1;
}

void zcrpc__context_watch_dev(zcrpc_context *ctx, int i)
{
	struct zcrpc__ctx_dev *d = &ctx->dev[i];
	struct sockaddr_storage ss;
	struct rdma_cm_id *id;

	if (!ctx->watch_ch || !d->verbs || device_addr(d->verbs, &ss))
		return; /* no IP on it: removal heard through ids only */
	if (rdma_create_id(ctx->watch_ch, &id, NULL, RDMA_PS_TCP))
		return;
	if (rdma_bind_addr(id, (struct sockaddr *)&ss) ||
	    id->verbs != d->verbs) {
		rdma_destroy_id(id);
		return;
	}
	d->watch = id;
}

void zcrpc__context_watch_devices(zcrpc_context *ctx)
{
	int i;

	ctx->watch_ch = rdma_create_event_channel();
	if (!ctx->watch_ch)
		return;
	fcntl(ctx->watch_ch->fd, F_SETFL,
	      fcntl(ctx->watch_ch->fd, F_GETFL) | O_NONBLOCK);
	for (i = 0; i < ctx->ndev; i++)
		zcrpc__context_watch_dev(ctx, i);
}

void zcrpc__context_unwatch(zcrpc_context *ctx)
{
	int i;

	for (i = 0; i < ctx->ndev; i++)
		if (ctx->dev[i].watch) {
			rdma_destroy_id(ctx->dev[i].watch);
			ctx->dev[i].watch = NULL;
		}
	if (ctx->watch_ch) {
		rdma_destroy_event_channel(ctx->watch_ch);
		ctx->watch_ch = NULL;
	}
}

/* The watch channel is readable (every worker of the context polls it;
 * one of them gets each event). */
void zcrpc__worker_on_watch(zcrpc_worker *w)
{
	zcrpc_context *ctx = w->ctx;
	struct rdma_cm_event *ev;

	for (;;) {
		struct ibv_context *verbs = NULL;
		int i;

		pthread_mutex_lock(&ctx->lock);
		if (rdma_get_cm_event(ctx->watch_ch, &ev)) {
			pthread_mutex_unlock(&ctx->lock);
			break;
		}
		if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
			for (i = 0; i < ctx->ndev; i++)
				if (ctx->dev[i].watch && ctx->dev[i].watch == ev->id)
					verbs = ctx->dev[i].verbs;
		rdma_ack_cm_event(ev);
		pthread_mutex_unlock(&ctx->lock);
		if (verbs)
			zcrpc__device_removed(w, verbs);
	}
}
