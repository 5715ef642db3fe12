/* zcrpc — device async events (ibv_get_async_event). Each device's async
 * fd is made non-blocking and polled by every worker of the context; the
 * worker that reads an event handles it and always acknowledges it (an
 * unacknowledged event makes destroying the object it names hang):
 *   PORT_ERR / PORT_ACTIVE  one port of the device went down / came back:
 *                           new connections on that port fail fast
 *                           (UNAVAILABLE) while it is down; the device's
 *                           other ports are not affected;
 *   QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, CQ_ERR
 *                           the connection owning the QP (or CQ) fails
 *                           UNAVAILABLE; it may belong to another worker,
 *                           which is handed the event (zcrpc_worker_post);
 *   DEVICE_FATAL            handled as a removal of the device.
 * rxe 6.1 raises only the port and CQ events; the QP events are exercised
 * by injecting them (zcrpc__worker_test_async_event). */
#include "internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which connection an event names, as plain values: the object itself may
 * be gone by the time another worker looks. */
struct async_target {
	int dev_idx;
	uint32_t qp_num; /* QP events */
	const void *cq;	 /* CQ_ERR: compared, never dereferenced */
	enum ibv_event_type type;
};

static void fail_target(zcrpc_worker *w, const struct async_target *t)
{
	struct zcrpc__list *it;
	zcrpc_conn *c;

	zcrpc__foreach_conn(c, it, w) {
		int match;

		if (c->torn_down || !c->dev || c->dev->idx != t->dev_idx)
			continue;
		match = t->cq ? (const void *)c->cq == t->cq
			      : (c->id && c->id->qp && c->id->qp->qp_num == t->qp_num);
		if (!match)
			continue;
		w->async_events++;
		if (c->state != ZCRPC_CONN_CLOSED)
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "%s (device async event)",
					 ibv_event_type_str(t->type));
		w->need_reap = 1;
		if (!t->cq)
			return; /* a CQ's error fails every connection on it */
	}
}

static void posted_fail(zcrpc_worker *w, void *arg)
{
	fail_target(w, arg);
	free(arg);
}

/* Hands @t to every worker of the context: the owner of the QP acts, the
 * others find nothing. */
static void route(zcrpc_worker *w, const struct async_target *t)
{
	zcrpc_context *ctx = w->ctx;
	struct zcrpc__list *it;

	fail_target(w, t);
	pthread_mutex_lock(&ctx->lock);
	zcrpc__list_foreach(it, &ctx->workers) {
		zcrpc_worker *o =
			zcrpc__container_of(it, zcrpc_worker, ctx_link);
		struct async_target *copy;

		if (o == w || !(copy = malloc(sizeof(*copy))))
			continue;
		*copy = *t;
		if (zcrpc_worker_post(o, posted_fail, copy) != ZCRPC_OK)
			free(copy);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* @qp_num and @cq were read from the event before it was acknowledged. */
static unsigned port_bit(int port)
{
	return port >= 1 && port < 32 ? 1u << port : 0;
}

int zcrpc__port_down(const zcrpc_context *ctx, int idx, int port)
{
	return (atomic_load(&ctx->dev[idx].ports_down) & port_bit(port)) != 0;
}

void zcrpc__worker_async_event(zcrpc_worker *w, int idx,
			       enum ibv_event_type type, uint32_t qp_num,
			       const void *cq, int port)
{
	zcrpc_context *ctx = w->ctx;
	struct async_target t;

	memset(&t, 0, sizeof(t));
	t.dev_idx = idx;
	t.type = type;
	switch (type) {
	case IBV_EVENT_PORT_ERR:
		atomic_fetch_or(&ctx->dev[idx].ports_down, port_bit(port));
		w->async_events++;
		zcrpc__worker_seterr(w, "%s: port %d down",
				     ctx->dev[idx].prof.name, port);
		break;
	case IBV_EVENT_PORT_ACTIVE:
		atomic_fetch_and(&ctx->dev[idx].ports_down, ~port_bit(port));
		w->async_events++;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		t.qp_num = qp_num;
		route(w, &t);
		break;
	case IBV_EVENT_CQ_ERR:
		t.cq = cq;
		route(w, &t);
		break;
	case IBV_EVENT_DEVICE_FATAL:
		w->async_events++;
		if (ctx->dev[idx].verbs)
			zcrpc__device_removed(w, ctx->dev[idx].verbs);
		break;
	default: /* LID/GID/SM changes, SRQ, COMM_EST...: nothing to do */
		break;
	}
}

void zcrpc__context_async_init_dev(zcrpc_context *ctx, int i)
{
	int fd = ctx->dev[i].verbs->async_fd;

	atomic_store(&ctx->dev[i].ports_down, 0);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void zcrpc__context_async_init(zcrpc_context *ctx)
{
	int i;

	for (i = 0; i < ctx->ndev; i++)
		zcrpc__context_async_init_dev(ctx, i);
}

int zcrpc__worker_async_watch_dev(zcrpc_worker *w, int i)
{
	zcrpc_context *ctx = w->ctx;

	w->async_src[i] = (struct zcrpc__src){ZCRPC_SRC_ASYNC, w, 0};
	w->async_src[i].idx = i;
	return ctx->dev[i].verbs ? zcrpc__epoll_add(w, ctx->dev[i].verbs->async_fd,
						     &w->async_src[i])
				 : 0;
}

zcrpc_status zcrpc__worker_async_watch(zcrpc_worker *w)
{
	int i;

	for (i = 0; i < w->ctx->ndev; i++)
		if (zcrpc__worker_async_watch_dev(w, i))
			return ZCRPC_RESOURCE_EXHAUSTED;
	return ZCRPC_OK;
}

/* Device @idx's async fd is readable. Reads under the context's lock, so a
 * removal (which closes the device) cannot run meanwhile. */
void zcrpc__worker_on_async(zcrpc_worker *w, int idx)
{
	zcrpc_context *ctx = w->ctx;
	struct ibv_async_event ev;

	for (;;) {
		uint32_t qp_num = 0;
		const void *cq = NULL;
		int got, port = 0;

		pthread_mutex_lock(&ctx->lock);
		got = ctx->dev[idx].verbs &&
		      ibv_get_async_event(ctx->dev[idx].verbs, &ev) == 0;
		if (got) {
			if (ev.event_type == IBV_EVENT_CQ_ERR)
				cq = ev.element.cq;
			else if (ev.event_type == IBV_EVENT_PORT_ERR ||
				 ev.event_type == IBV_EVENT_PORT_ACTIVE)
				port = ev.element.port_num;
			else if (ev.element.qp &&
				 (ev.event_type == IBV_EVENT_QP_FATAL ||
				  ev.event_type == IBV_EVENT_QP_REQ_ERR ||
				  ev.event_type == IBV_EVENT_QP_ACCESS_ERR))
				qp_num = ev.element.qp->qp_num;
			ibv_ack_async_event(&ev);
		}
		pthread_mutex_unlock(&ctx->lock);
		if (!got)
			break;
		zcrpc__worker_async_event(w, idx, ev.event_type, qp_num, cq,
					  port);
	}
}
