/* zcrpc — the RDMA transport's side of the seam (seam.h): its connection
 * verbs as the table every RDMA connection points at, and the worker and
 * memory verbs the RPC layer may use. The timers are in timer.c, the clock
 * in worker.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "internal.h"
#include "seam.h"

_Static_assert(offsetof(struct zcrpc_conn, base) == 0,
	       "a connection starts with its struct zcrpc__conn_base");

static int rdma_closing(const zcrpc_conn *c)
{
	return c->closing;
}

static int rdma_peer_closed(const zcrpc_conn *c)
{
	return c->peer_closed;
}

static uint32_t rdma_features(const zcrpc_conn *c)
{
	return c->features;
}

static uint32_t rdma_peer_max_msg(const zcrpc_conn *c)
{
	return c->peer_max_msg;
}

_Static_assert(ZCRPC_SEAM_FEAT_STREAMS == ZCRPC_FEAT_STREAMS,
	       "the seam's stream bit is the hello's");
_Static_assert(ZCRPC_SEAM_FEAT_STREAM_BULK == ZCRPC_FEAT_STREAM_BULK,
	       "the seam's stream-bulk bit is the hello's");
_Static_assert(ZCRPC_SEAM_FEAT_BATCH == ZCRPC_FEAT_BATCH,
	       "the seam's BATCH bit is the hello's");
_Static_assert(ZCRPC_SEAM_FEAT_SERVER_STREAM_BULK ==
		       ZCRPC_FEAT_SERVER_STREAM_BULK,
	       "the seam's server-stream-bulk bit is the hello's");
_Static_assert(ZCRPC_SEAM_FEAT_DRAIN == ZCRPC_FEAT_DRAIN,
	       "the seam's drain bit is the hello's");

static void rdma_abort(zcrpc_conn *c, zcrpc_status st, const char *why)
{
	zcrpc__conn_close_error(c, st, "%s", why);
}

const struct zcrpc__conn_ops zcrpc__rdma_conn_ops = {
	.kind = "rdma",
	.closing = rdma_closing,
	.peer_closed = rdma_peer_closed,
	.abort = rdma_abort,
	.send_urgent = zcrpc__conn_send_msg_urgent,
	.features = rdma_features,
	.peer_max_msg = rdma_peer_max_msg,
};

void zcrpc__conn_abort(zcrpc_conn *c, zcrpc_status st, const char *fmt, ...)
{
	char why[192]; /* as long as the reason a connection keeps */
	va_list ap;

	if (!c)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	zcrpc__conn_ops_of(c)->abort(c, st, why);
}

uint32_t zcrpc__worker_max_msg(const zcrpc_worker *w)
{
	return w->opts.max_msg;
}

zcrpc_worker *zcrpc__conn_worker(const zcrpc_conn *c)
{
	return c->w;
}

int zcrpc__worker_in_progress(const zcrpc_worker *w)
{
	return w->in_progress;
}

uint32_t zcrpc__worker_pool_trim(zcrpc_worker *w, int64_t now, int64_t idle_ns)
{
	return zcrpc__pool_trim(w->pool, now, idle_ns);
}

size_t zcrpc__worker_pool_pinned(const zcrpc_worker *w)
{
	return zcrpc__pool_pinned(w->pool);
}

void *zcrpc__mr_addr(const zcrpc_mr *mr)
{
	return mr->addr;
}

int zcrpc__mr_covers(const zcrpc_mr *mr, const zcrpc_context *ctx, size_t off,
		     size_t len, unsigned flags)
{
	return mr && (mr->flags & flags) == flags && off <= mr->len &&
	       len <= mr->len - off && (!ctx || mr->ctx == ctx);
}
