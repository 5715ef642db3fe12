/* zcrpc — a connection's receive ring: one pool slot per receive
 * position, posted while it has one (docs/design.md); a position consumed
 * goes back to the QP with its slot, or with a fresh one when the
 * application kept the slot, or waits for the pool (recv_missing). Every
 * repost is a credit owed to the peer (credits.c returns them). */
#include "internal.h"

#include <stdlib.h>

static int post_recv_at(zcrpc_conn *c, uint32_t pos)
{
	const struct zcrpc__slot *s = &c->recv[pos];
	struct ibv_sge sge = {
		.addr = (uintptr_t)s->ptr,
		.length = s->size,
		.lkey = s->lkeys[c->dev->idx],
	};
	struct ibv_recv_wr wr = {
		.wr_id = ZCRPC_WR_RECV_BIT | pos,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad;

	return ibv_post_recv(c->id->qp, &wr, &bad);
}

/* Gives position @pos a fresh pool slot and posts it. Returns 0, or -1 when
 * the pool has none right now (the position waits; the credit too). */
static int refill(zcrpc_conn *c, uint32_t pos)
{
	zcrpc_worker *w = c->w;

	if (zcrpc__pool_get(w->pool, w->msg_slot_size, &c->recv[pos]) != ZCRPC_OK)
		return -1;
	c->recv_has[pos] = 1;
	if (post_recv_at(c, pos)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL, "ibv_post_recv failed");
		return 0;
	}
	c->stats.recv_posted++;
	return 0;
}

zcrpc_status zcrpc__conn_post_all_recvs(zcrpc_conn *c)
{
	uint32_t n = c->recv_depth;

	/* An authenticating server posts only a few until the proof came. */
	if (c->recv_initial && c->recv_initial < n)
		n = c->recv_initial;
	else
		c->recv_initial = n;
	return zcrpc__conn_post_recvs(c, 0, n);
}

zcrpc_status zcrpc__conn_post_recvs(zcrpc_conn *c, uint32_t from, uint32_t to)
{
	uint32_t i;

	for (i = from; i < to; i++) {
		if (refill(c, i)) {
			const char *why = zcrpc__pool_error(c->w->pool);

			zcrpc__conn_fail(c, ZCRPC_RESOURCE_EXHAUSTED,
					 "the worker's pool has no slot for receive %u of %u (%s)",
					 i + 1, c->recv_depth,
					 why[0] ? why : "pool_max_slots");
			return ZCRPC_RESOURCE_EXHAUSTED;
		}
		if (c->state == ZCRPC_CONN_CLOSED)
			return ZCRPC_INTERNAL;
	}
	return ZCRPC_OK;
}

void zcrpc__conn_retry_reposts(zcrpc_conn *c)
{
	uint32_t i;

	for (i = 0; i < c->recv_depth && c->recv_missing; i++) {
		if (c->recv_has[i])
			continue;
		if (refill(c, i))
			return; /* still none */
		c->recv_missing--;
		c->w->reposts_pending--;
		c->owed++;
	}
	/* nothing else may be coming to carry them */
	zcrpc__credits_maybe_send(c);
}

/* After a receive at @pos was consumed: repost its slot, or (if the
 * application kept it) a fresh one; then the peer gets the credit. */
void zcrpc__recv_recycle(zcrpc_conn *c, uint32_t pos, int kept)
{
	if (c->state == ZCRPC_CONN_CLOSED || c->closing)
		return;
	if (kept) {
		c->recv_has[pos] = 0;
		if (refill(c, pos)) {
			c->recv_missing++;
			c->w->reposts_pending++;
			return;
		}
	} else if (post_recv_at(c, pos)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL, "ibv_post_recv failed");
		return;
	} else {
		c->stats.recv_posted++;
	}
	c->owed++;
}

void zcrpc__conn_recv_consumed(zcrpc_conn *c, uint32_t pos)
{
	zcrpc__recv_recycle(c, pos, 0);
}

/* Teardown: every position's slot goes back to the pool. */
void zcrpc__recv_release(zcrpc_conn *c)
{
	uint32_t i;

	if (c->recv) {
		for (i = 0; i < c->recv_depth; i++) {
			if (c->recv_has[i])
				zcrpc__pool_put(c->w->pool, c->recv[i].id);
			c->recv_has[i] = 0;
		}
	}
	c->w->reposts_pending -= c->recv_missing;
	c->recv_missing = 0;
	c->stats.recv_posted = 0;
	free(c->recv);
	free(c->recv_has);
	c->recv = NULL;
	c->recv_has = NULL;
}
