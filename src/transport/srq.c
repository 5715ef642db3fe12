/* zcrpc — the shared receive path (docs/design.md "Shared receive path",
 * docs/protocol.md §3): per worker and device one shared receive queue
 * (SRQ) whose receives every connection of the worker on that device
 * consumes, and the budget of credits they are promised from.
 *
 * Accounting, per SRQ: `posted` receives are in the queue; `promised` of
 * them belong to connections, as credits the peer holds (`c->out`) or
 * credits owed back to it (`c->owed`). promised <= posted always, so no
 * honest peer ever finds the queue empty (no RNR). Each connection has a
 * share (`c->share`): what it may hold at most right now, between its
 * guaranteed part (`c->share_min`) and its window (`c->recv_depth`). A
 * consumed receive is reposted and its credit goes back to its connection
 * while that connection is below its share, else to a connection waiting
 * for credits (the hungry list), else it stays free. Shares double when a
 * peer runs low, shrink by one per message under pressure (fewer free
 * receives left than the reserve kept for new connections), and come back
 * to the guaranteed part when an idle peer gives its extra credits back
 * (RELEASE, credits.c). */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Free receives (posted, promised to nobody) kept posted at most: a
 * receive consumed beyond that is not reposted, its slot goes back to the
 * pool, so receive memory follows the credits promised as traffic flows. */
#define ZCRPC_SRQ_SLACK 64
/* has[pos]: 1 holds a slot; 0 waits for one (missing); this: left empty */
#define ZCRPC_SRQ_EMPTY 2

static uint32_t srq_free(const struct zcrpc__srq *q)
{
	return q->posted > q->promised ? q->posted - q->promised : 0;
}

/* Receives kept back from dynamic shares for new connections' guaranteed
 * parts: an eighth of the queue. */
static uint32_t srq_reserve(const struct zcrpc__srq *q)
{
	return q->cap / 8;
}

static int post_at(struct zcrpc__device *d, uint32_t pos)
{
	struct zcrpc__srq *q = &d->srq;
	const struct zcrpc__slot *s = &q->slot[pos];
	struct ibv_sge sge = {
		.addr = (uintptr_t)s->ptr,
		.length = s->size,
		.lkey = s->lkeys[d->idx],
	};
	struct ibv_recv_wr wr = {
		.wr_id = ZCRPC_WR_RECV_BIT | pos,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad;

	if (ibv_post_srq_recv(q->srq, &wr, &bad))
		return -1;
	q->posted++;
	return 0;
}

/* Gives position @pos a fresh pool slot and posts it. -1 when the pool has
 * none right now or the post failed (the position waits in `missing`). */
static int refill(zcrpc_worker *w, struct zcrpc__device *d, uint32_t pos)
{
	struct zcrpc__srq *q = &d->srq;

	if (zcrpc__pool_get(w->pool, w->msg_slot_size, &q->slot[pos]) !=
	    ZCRPC_OK)
		return -1;
	q->has[pos] = 1;
	if (post_at(d, pos)) {
		zcrpc__pool_put(w->pool, q->slot[pos].id);
		q->has[pos] = 0;
		return -1;
	}
	return 0;
}

zcrpc_status zcrpc__srq_open(zcrpc_worker *w, struct zcrpc__device *d)
{
	struct zcrpc__srq *q = &d->srq;
	struct ibv_srq_init_attr attr;
	uint32_t cap = (uint32_t)w->opts.recv_budget; /* <= 2^20 */

	if (q->srq)
		return ZCRPC_OK;
	if (d->attr->max_srq_wr > 0 && cap > (uint32_t)d->attr->max_srq_wr)
		cap = (uint32_t)d->attr->max_srq_wr;
	memset(&attr, 0, sizeof(attr));
	attr.attr.max_wr = cap;
	attr.attr.max_sge = 1;
	q->slot = calloc(cap, sizeof(*q->slot));
	q->has = calloc(cap, 1);
	q->empty = malloc(sizeof(*q->empty) * cap);
	if (!q->slot || !q->has || !q->empty)
		goto err;
	q->srq = ibv_create_srq(d->pd, &attr);
	if (!q->srq) {
		zcrpc__worker_seterr(w, "ibv_create_srq(%u receives) on %s: %s",
				     cap, ibv_get_device_name(d->verbs->device),
				     strerror(errno));
		goto err;
	}
	q->cap = cap;
	q->npos = q->posted = q->promised = q->missing = q->nempty = 0;
	zcrpc__list_init(&q->hungry);
	return ZCRPC_OK;
err:
	free(q->slot);
	free(q->has);
	free(q->empty);
	q->slot = NULL;
	q->has = NULL;
	q->empty = NULL;
	return ZCRPC_RESOURCE_EXHAUSTED;
}

void zcrpc__srq_close(zcrpc_worker *w, struct zcrpc__device *d)
{
	struct zcrpc__srq *q = &d->srq;
	uint32_t i;

	if (!q->srq)
		return;
	if (ibv_destroy_srq(q->srq)) {
		/* a QP still uses it (a test's frozen connection): kept */
		zcrpc__worker_seterr(w,
				     "shared receive queue of %s still in use",
				     ibv_get_device_name(d->verbs->device));
		return;
	}
	q->srq = NULL;
	for (i = 0; i < q->npos; i++)
		if (q->has[i] == 1)
			zcrpc__pool_put(w->pool, q->slot[i].id);
	w->reposts_pending -= q->missing;
	free(q->slot);
	free(q->has);
	free(q->empty);
	memset(q, 0, sizeof(*q));
}

/* Makes up to @want more receives posted (empty positions first, then new
 * ones), as far as the budget and the pool allow. Returns how many. */
static uint32_t grow(zcrpc_worker *w, struct zcrpc__device *d, uint32_t want)
{
	struct zcrpc__srq *q = &d->srq;
	uint32_t added = 0;

	while (added < want && q->nempty) {
		if (refill(w, d, q->empty[q->nempty - 1]))
			return added;
		q->nempty--;
		added++;
	}
	while (added < want && q->npos < q->cap) {
		if (refill(w, d, q->npos))
			break;
		q->npos++;
		added++;
	}
	return added;
}

/* Promises up to @n free receives to @c (growing the queue for them);
 * returns how many. */
static uint32_t take(zcrpc_conn *c, uint32_t n)
{
	struct zcrpc__srq *q = &c->dev->srq;
	uint32_t k;

	if (srq_free(q) < n)
		grow(c->w, c->dev, n - srq_free(q));
	k = srq_free(q) < n ? srq_free(q) : n;
	q->promised += k;
	return k;
}

static void hungry_update(zcrpc_conn *c)
{
	struct zcrpc__srq *q = &c->dev->srq;
	int below = c->out + c->owed < c->share;

	if (below && !c->hungry_linked) {
		zcrpc__list_push_back(&q->hungry, &c->hungry);
		c->hungry_linked = 1;
	} else if (!below && c->hungry_linked) {
		zcrpc__list_remove(&c->hungry);
		c->hungry_linked = 0;
	}
}

/* Free receives to the connections waiting for credits, first come first
 * served; each then returns them when it can (credits.c). */
static void feed(struct zcrpc__device *d)
{
	struct zcrpc__srq *q = &d->srq;
	struct zcrpc__list *it;

	while (srq_free(q) && (it = zcrpc__list_first(&q->hungry))) {
		zcrpc_conn *c = zcrpc__container_of(it, zcrpc_conn, hungry);
		uint32_t need = c->share - c->out - c->owed;
		uint32_t k = srq_free(q) < need ? srq_free(q) : need;

		q->promised += k;
		c->owed += k;
		hungry_update(c);
		zcrpc__credits_maybe_send(c);
	}
}

zcrpc_status zcrpc__srq_admit(zcrpc_conn *c, uint32_t n)
{
	struct zcrpc__srq *q = &c->dev->srq;
	zcrpc_status st = zcrpc__srq_open(c->w, c->dev);

	if (st != ZCRPC_OK) {
		zcrpc__conn_fail(c, st, "%s", c->w->err);
		return st;
	}
	if (srq_free(q) < n)
		grow(c->w, c->dev, n - srq_free(q));
	if (srq_free(q) < n && q->promised + n <= q->cap) {
		const char *why = zcrpc__pool_error(c->w->pool);

		zcrpc__conn_fail(c, ZCRPC_RESOURCE_EXHAUSTED,
				 "the worker's pool has no slot for the shared "
				 "receive queue (%s)",
				 why[0] ? why : "pool_max_slots");
		if (!q->conns) /* nothing of it stays behind the refusal */
			zcrpc__srq_close(c->w, c->dev);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (srq_free(q) < n) {
		c->w->rejected_budget++;
		zcrpc__conn_fail(
			c, ZCRPC_RESOURCE_EXHAUSTED,
			"the worker's receive budget on %s is spent: %u of its "
			"%u receives are promised to %u connections",
			ibv_get_device_name(c->dev->verbs->device), q->promised,
			q->cap, q->conns);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	q->promised += n;
	q->conns++;
	c->srq_admitted = 1;
	c->out = n;
	c->owed = 0;
	c->share = n;
	return ZCRPC_OK;
}

uint32_t zcrpc__srq_raise(zcrpc_conn *c, uint32_t share)
{
	uint32_t k;

	if (share <= c->share)
		return 0;
	k = take(c, zcrpc__cq_share_room(c, share - c->share));
	c->share += k;
	c->owed += k;
	zcrpc__cq_share_sync(c);
	return k;
}

/* A message (or a write with immediate) consumed one of @c's credits.
 * Returns 0, or -1 after failing the connection when the peer had none. */
int zcrpc__srq_consume(zcrpc_conn *c)
{
	struct zcrpc__srq *q = &c->dev->srq;

	if (!c->out) {
		zcrpc__conn_fail(
			c, ZCRPC_INTERNAL,
			"protocol violation: the peer sent past its credits");
		return -1;
	}
	c->out--;
	q->promised--;
	/* A peer that runs low gets its share doubled (up to its window)
	 * while no pressure is on the budget. */
	if ((c->features & ZCRPC_FEAT_SHARED) && c->out < c->share / 4 &&
	    c->share < c->recv_depth &&
	    q->promised + srq_reserve(q) + c->share <= q->cap) {
		uint32_t more = c->share;

		if (more > c->recv_depth - c->share)
			more = c->recv_depth - c->share;
		more = zcrpc__cq_share_room(c, more); /* its CQ holds them */
		if (more) {
			c->share += more;
			c->owed += take(c, more);
			c->stats.share_raises++;
			zcrpc__cq_share_sync(c);
		}
	}
	hungry_update(c);
	return 0;
}

/* The delivery of position @pos ended (@c: the connection it was for, NULL
 * when it has none any more): repost its slot, or a fresh one when the
 * application kept it (@kept), and place the credit. */
void zcrpc__srq_recycle(zcrpc_worker *w, struct zcrpc__device *d, zcrpc_conn *c,
			uint32_t pos, int kept)
{
	struct zcrpc__srq *q = &d->srq;
	int wanted = (c && c->srq_admitted && c->state != ZCRPC_CONN_CLOSED &&
		      !c->closing && c->out + c->owed < c->share) ||
		     !zcrpc__list_empty(&q->hungry) ||
		     srq_free(q) < ZCRPC_SRQ_SLACK;

	if (!wanted) { /* not needed: back to the pool, the position empty */
		if (!kept)
			zcrpc__pool_put(w->pool, q->slot[pos].id);
		q->has[pos] = ZCRPC_SRQ_EMPTY;
		q->empty[q->nempty++] = pos;
		return;
	}
	if (kept) {
		q->has[pos] = 0;
		if (refill(w, d, pos)) {
			q->missing++;
			w->reposts_pending++;
			return;
		}
	} else if (post_at(d, pos)) {
		/* the SRQ is broken: keep the slot with the position */
		zcrpc__worker_seterr(w, "ibv_post_srq_recv failed");
		return;
	}
	if (c && c->srq_admitted && c->state != ZCRPC_CONN_CLOSED &&
	    !c->closing) {
		if (c->share > c->share_min &&
		    q->promised + srq_reserve(q) > q->cap) {
			c->share--; /* pressure: shrink by one */
			zcrpc__cq_share_sync(c);
			hungry_update(c);
		} else if (c->out + c->owed < c->share) {
			q->promised++;
			c->owed++;
			hungry_update(c);
			return;
		}
	}
	feed(d);
}

void zcrpc__srq_retry(zcrpc_worker *w)
{
	int i;

	for (i = 0; i < ZCRPC_MAX_DEVICES && w->reposts_pending; i++) {
		struct zcrpc__device *d = &w->dev[i];
		struct zcrpc__srq *q = &d->srq;
		uint32_t pos;

		for (pos = 0; q->srq && q->missing && pos < q->npos; pos++) {
			if (q->has[pos])
				continue;
			if (refill(w, d, pos))
				break; /* still none */
			q->missing--;
			w->reposts_pending--;
		}
		if (q->srq)
			feed(d);
	}
}

void zcrpc__srq_released(zcrpc_conn *c, uint32_t n)
{
	struct zcrpc__srq *q = &c->dev->srq;

	c->out -= n;
	q->promised -= n;
	/* It was idle: back to its guaranteed part (or what it holds). */
	c->share = c->out + c->owed > c->share_min ? c->out + c->owed
						    : c->share_min;
	zcrpc__cq_share_sync(c);
	hungry_update(c);
	feed(c->dev);
}

/* @c leaves its SRQ (teardown, after its QP was destroyed and its CQ
 * drained): its credits are free again; the last connection closes the
 * queue, so an idle worker holds no receive memory. */
void zcrpc__srq_leave(zcrpc_conn *c)
{
	struct zcrpc__srq *q;

	if (!c->srq_admitted)
		return;
	q = &c->dev->srq;
	c->srq_admitted = 0;
	q->promised -= c->out + c->owed;
	c->out = c->owed = 0;
	if (c->hungry_linked) {
		zcrpc__list_remove(&c->hungry);
		c->hungry_linked = 0;
	}
	if (--q->conns == 0)
		zcrpc__srq_close(c->w, c->dev);
	else
		feed(c->dev);
}
