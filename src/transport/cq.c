/* zcrpc — a worker's completion queues on one device, shared by its
 * connections (docs/design.md "Shared completion queues"): send and
 * receive completions of every QP land in one CQ, grown as connections
 * join, polled once per progress turn whatever the connection count, each
 * completion dispatched to its connection by qp_num. Completions a
 * connection being torn down polls for others are held, in order, for the
 * next turn; those of a QP already gone are orphans (a receive's position
 * goes back to the shared receive queue). */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Completions one CQ hands out per progress turn at most (the rest wait). */
#define ZCRPC_CQ_TURN_MAX (4 * ZCRPC_POLL_TURN_MAX)
#define ZCRPC_CQ_MIN_CQE  1024u
/* Entries a shared CQ keeps free beyond what its connections reserve. */
#define ZCRPC_CQ_SLACK 64u
/* The size of a new CQ on a device that cannot resize one. */
#define ZCRPC_CQ_FIXED_CQE 32768u

/* ---- qp_num -> connection (open addressing, linear probing) ---------- */

static uint32_t slot_of(const struct zcrpc__qpmap *m, uint32_t qpn)
{
	return (qpn * 2654435761u) & (m->cap - 1);
}

static int map_grow(struct zcrpc__qpmap *m)
{
	struct zcrpc__qpmap n = {.cap = m->cap ? m->cap * 2 : 64};
	uint32_t i;

	n.e = calloc(n.cap, sizeof(*n.e));
	if (!n.e)
		return -1;
	for (i = 0; i < m->cap; i++) {
		uint32_t j;

		if (!m->e[i].c)
			continue;
		for (j = slot_of(&n, m->e[i].qpn); n.e[j].c;
		     j = (j + 1) & (n.cap - 1))
			;
		n.e[j] = m->e[i];
	}
	n.n = m->n;
	free(m->e);
	*m = n;
	return 0;
}

static zcrpc_conn *map_find(const struct zcrpc__qpmap *m, uint32_t qpn)
{
	uint32_t j;

	if (!m->cap)
		return NULL;
	for (j = slot_of(m, qpn); m->e[j].c; j = (j + 1) & (m->cap - 1))
		if (m->e[j].qpn == qpn)
			return m->e[j].c;
	return NULL;
}

static int map_add(struct zcrpc__qpmap *m, uint32_t qpn, zcrpc_conn *c)
{
	uint32_t j;

	if ((m->n + 1) * 2 > m->cap && map_grow(m))
		return -1;
	for (j = slot_of(m, qpn); m->e[j].c; j = (j + 1) & (m->cap - 1))
		if (m->e[j].qpn == qpn)
			break; /* a stale entry of a number reused: replaced */
	if (!m->e[j].c)
		m->n++;
	m->e[j].qpn = qpn;
	m->e[j].c = c;
	return 0;
}

/* Removal with backward shift: no tombstones, lookups stay short. */
static void map_del(struct zcrpc__qpmap *m, uint32_t qpn)
{
	uint32_t i, j, k;

	if (!m->cap)
		return;
	for (i = slot_of(m, qpn); m->e[i].c && m->e[i].qpn != qpn;
	     i = (i + 1) & (m->cap - 1))
		;
	if (!m->e[i].c)
		return;
	m->e[i].c = NULL;
	m->n--;
	for (j = (i + 1) & (m->cap - 1); m->e[j].c;
	     j = (j + 1) & (m->cap - 1)) {
		k = slot_of(m, m->e[j].qpn);
		/* e[j] may move to the hole at i unless its home lies in (i, j]
		 */
		if ((j > i && (k <= i || k > j)) ||
		    (j < i && k <= i && k > j)) {
			m->e[i] = m->e[j];
			m->e[j].c = NULL;
			i = j;
		}
	}
}

/* ---- held completions ---------------------------------------------------- */

static int hold(struct zcrpc__cq *g, const struct ibv_wc *wc)
{
	if (g->held_n == g->held_cap) {
		uint32_t live = g->held_n - g->held_head;
		uint32_t cap = g->held_cap ? g->held_cap * 2 : 64;
		struct ibv_wc *n;

		if (g->held_head && live < g->held_cap / 2) {
			memmove(g->held, g->held + g->held_head,
				sizeof(*wc) * live);
		} else {
			n = realloc(g->held, sizeof(*wc) * cap);
			if (!n)
				return -1;
			g->held = n;
			g->held_cap = cap;
			memmove(g->held, g->held + g->held_head,
				sizeof(*wc) * live);
		}
		g->held_head = 0;
		g->held_n = live;
	}
	g->held[g->held_n++] = *wc;
	return 0;
}

static int held_pending(const struct zcrpc__cq *g)
{
	return g->held_n > g->held_head;
}

/* A completion of a QP that is gone: its receive position goes back. */
static void orphan(struct zcrpc__cq *g, const struct ibv_wc *wc)
{
	if (!(wc->wr_id & ZCRPC_WR_RECV_BIT) || wc->wr_id == ZCRPC_WR_TAKEN)
		return;
	g->dev->srq.posted--;
	zcrpc__srq_recycle(g->w, g->dev, NULL,
			   (uint32_t)(wc->wr_id & ~ZCRPC_WR_RECV_BIT), 0);
}

/* ---- attach / detach ------------------------------------------------------
 */

/* Entries @g needs with @send more send-queue entries and @recv more
 * receive credits out: receive completions of a connection never exceed
 * the credits its peer holds, at most its share (srq.c), so the CQ
 * reserves the shares, which grow only as far as it has room. */
static uint32_t need_of(const struct zcrpc__cq *g, uint32_t send, uint32_t recv)
{
	return g->send_rsv + send + g->recv_rsv + recv + ZCRPC_CQ_SLACK;
}

static struct zcrpc__cq *cq_new(zcrpc_worker *w, struct zcrpc__device *d,
				uint32_t cqe, int private_cq)
{
	struct zcrpc__cq *g = calloc(1, sizeof(*g));
	int nvec =
		d->verbs->num_comp_vectors > 0 ? d->verbs->num_comp_vectors : 1;

	if (!g)
		return NULL;
	g->w = w;
	g->dev = d;
	g->private_cq = private_cq ? 1 : 0;
	g->cq = ibv_create_cq(d->verbs, (int)cqe, g, d->comp_ch,
			      (int)(w->comp_vector % (unsigned)nvec));
	if (!g->cq) {
		free(g);
		return NULL;
	}
	g->cqe = (uint32_t)g->cq->cqe;
	if (ibv_req_notify_cq(g->cq, 0)) {
		ibv_destroy_cq(g->cq);
		free(g);
		return NULL;
	}
	g->armed = 1;
	zcrpc__list_push_back(&d->cqs, &g->link);
	d->ncq++;
	w->cqs_created++;
	return g;
}

/* Room for @need entries in @g, growing it (ibv_resize_cq) if the device
 * allows. Returns 0 when it fits. */
static int fit(struct zcrpc__cq *g, uint32_t need)
{
	uint32_t max = g->dev->prof->max_cqe, want;
	int rc;

	if (need <= g->cqe)
		return 0;
	if (need > max)
		return -1;
	want = g->cqe * 2 > need ? g->cqe * 2 : need;
	if (want > max)
		want = max;
	if (g->dev->cq_fixed)
		return -1;
	rc = ibv_resize_cq(g->cq, (int)want);
	if (rc) {
		/* the provider's error, negative (siw: -EOPNOTSUPP) or not */
		int err = rc < 0 ? -rc : rc;

		if (err == EOPNOTSUPP || err == ENOSYS)
			g->dev->cq_fixed = 1; /* the next CQ is made big */
		return -1;
	}
	g->cqe = (uint32_t)g->cq->cqe;
	g->w->cqs_resized++;
	return need <= g->cqe ? 0 : -1;
}

/* Puts @c on a CQ of its device with room for its send queue and its
 * receive window (a test may ask for a private, undersized one: @test_cqe).
 * Fails the connection on error. */
zcrpc_status zcrpc__cq_attach(zcrpc_conn *c, uint32_t test_cqe)
{
	struct zcrpc__device *d = c->dev;
	uint32_t send = c->sq_size, recv = c->share;
	struct zcrpc__cq *g = NULL;
	struct zcrpc__list *it;

	if (!test_cqe) {
		zcrpc__list_foreach(it, &d->cqs) {
			struct zcrpc__cq *o =
				zcrpc__container_of(it, struct zcrpc__cq, link);

			if (!o->private_cq &&
			    fit(o, need_of(o, send, recv)) == 0) {
				g = o;
				break;
			}
		}
	}
	if (!g) {
		uint32_t cqe =
			test_cqe ? test_cqe : send + recv + ZCRPC_CQ_SLACK;

		if (!test_cqe && cqe < ZCRPC_CQ_MIN_CQE)
			cqe = ZCRPC_CQ_MIN_CQE;
		/* A device that cannot grow a CQ gets it at its full size
		 * (as large as a grown one would be) */
		if (!test_cqe && d->cq_fixed && cqe < ZCRPC_CQ_FIXED_CQE)
			cqe = ZCRPC_CQ_FIXED_CQE;
		if (!test_cqe && cqe > d->prof->max_cqe)
			cqe = d->prof->max_cqe;
		if (!test_cqe && send + recv + ZCRPC_CQ_SLACK > cqe) {
			zcrpc__conn_fail(
				c, ZCRPC_INVALID_ARGUMENT,
				"queue depths exceed the device (max_cqe %u)",
				d->prof->max_cqe);
			return ZCRPC_INVALID_ARGUMENT;
		}
		g = cq_new(c->w, d, cqe, test_cqe != 0);
		if (!g) {
			zcrpc_status st = zcrpc_status_from_errno(errno);

			if (st == ZCRPC_OK || st == ZCRPC_UNKNOWN)
				st = ZCRPC_RESOURCE_EXHAUSTED;
			zcrpc__conn_fail(
				c, st, "creating a completion queue on %s: %s",
				d->prof->name, strerror(errno));
			return st;
		}
	}
	g->send_rsv += send;
	g->recv_rsv += recv;
	g->conns++;
	c->cq_share = recv;
	c->cqg = g;
	c->cq = g->cq;
	return ZCRPC_OK;
}

/* How far (of @want more) @c's receive share may grow on its CQ, which
 * grows for it if the device allows. */
uint32_t zcrpc__cq_share_room(zcrpc_conn *c, uint32_t want)
{
	struct zcrpc__cq *g = c->cqg;
	uint32_t used;

	if (!g || g->private_cq || !want)
		return want; /* not on a CQ yet: zcrpc__cq_attach reserves it */
	if (fit(g, need_of(g, 0, want)) == 0)
		return want;
	used = need_of(g, 0, 0);
	return used >= g->cqe ? 0
			      : (g->cqe - used < want ? g->cqe - used : want);
}

/* @c's share changed (srq.c): its CQ's reservation follows. */
void zcrpc__cq_share_sync(zcrpc_conn *c)
{
	struct zcrpc__cq *g = c->cqg;

	if (!g)
		return;
	g->recv_rsv = g->recv_rsv - c->cq_share + c->share;
	c->cq_share = c->share;
}

/* @c's QP exists: its completions reach it from now on. */
zcrpc_status zcrpc__cq_map(zcrpc_conn *c)
{
	c->qp_num = c->id->qp->qp_num;
	if (map_add(&c->dev->qpmap, c->qp_num, c)) {
		zcrpc__conn_fail(c, ZCRPC_RESOURCE_EXHAUSTED, "out of memory");
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	c->qp_mapped = 1;
	return ZCRPC_OK;
}

void zcrpc__cq_unmap(zcrpc_conn *c)
{
	if (!c->qp_mapped)
		return;
	map_del(&c->dev->qpmap, c->qp_num);
	c->qp_mapped = 0;
}

static void cq_free(struct zcrpc__cq *g)
{
	struct zcrpc__device *d = g->dev;

	while (held_pending(g))
		orphan(g, &g->held[g->held_head++]);
	ibv_ack_cq_events(g->cq, g->unacked);
	g->unacked = 0;
	if (ibv_destroy_cq(g->cq)) {
		/* a QP still uses it (a test's frozen connection): kept */
		zcrpc__worker_seterr(g->w,
				     "completion queue of %s still in use",
				     d->prof->name);
		return;
	}
	zcrpc__list_remove(&g->link);
	d->ncq--;
	free(g->held);
	free(g);
}

/* @c leaves its CQ (its QP is gone). The device's CQs go with its last
 * connection, as its shared receive queue does. */
void zcrpc__cq_detach(zcrpc_conn *c)
{
	struct zcrpc__cq *g = c->cqg;
	struct zcrpc__device *d = c->dev;
	struct zcrpc__list *it, *next;
	int any = 0;

	zcrpc__cq_unmap(c);
	if (!g)
		return;
	g->send_rsv -= c->sq_size;
	g->recv_rsv -= c->cq_share;
	c->cq_share = 0;
	g->conns--;
	c->cqg = NULL;
	c->cq = NULL;
	zcrpc__list_foreach(it, &d->cqs)
		any |= zcrpc__container_of(it, struct zcrpc__cq, link)->conns >
		       0;
	if (any && !(g->private_cq && g->conns == 0))
		return;
	zcrpc__list_foreach_safe(it, next, &d->cqs) {
		struct zcrpc__cq *o =
			zcrpc__container_of(it, struct zcrpc__cq, link);

		if (o->conns == 0)
			cq_free(o);
	}
}

/* The device is gone (or the worker closes): every CQ of it, whatever
 * still holds it. */
void zcrpc__cq_close_all(struct zcrpc__device *d)
{
	struct zcrpc__list *it, *next;

	if (!d->cqs.next)
		return;
	zcrpc__list_foreach_safe(it, next, &d->cqs)
		cq_free(zcrpc__container_of(it, struct zcrpc__cq, link));
	free(d->qpmap.e);
	memset(&d->qpmap, 0, sizeof(d->qpmap));
}

/* ---- polling ----------------------------------------------------------------
 */

/* Completions of @c only, for its teardown: those of other connections are
 * held for the next turn, in order; no callback runs. Returns how many of
 * @c's were put in @wc (at most @max), or -1 when the CQ cannot be read. */
int zcrpc__cq_take(zcrpc_conn *c, struct ibv_wc *wc, int max)
{
	struct zcrpc__cq *g = c->cqg;
	struct ibv_wc batch[ZCRPC_POLL_BATCH];
	int n, i, got = 0;
	uint32_t h;

	if (!g)
		return 0;
	/* held ones of @c first (taken out of the order: they are @c's) */
	for (h = g->held_head; h < g->held_n && got < max; h++) {
		if (g->held[h].qp_num != c->qp_num ||
		    g->held[h].wr_id == ZCRPC_WR_TAKEN)
			continue;
		wc[got++] = g->held[h];
		g->held[h].wr_id = ZCRPC_WR_TAKEN;
	}
	while (got < max) {
		n = ibv_poll_cq(g->cq,
				max - got < ZCRPC_POLL_BATCH ? max - got
							     : ZCRPC_POLL_BATCH,
				batch);
		if (n < 0)
			return got ? got : -1;
		if (n == 0)
			break;
		for (i = 0; i < n; i++) {
			if (batch[i].qp_num == c->qp_num)
				wc[got++] = batch[i];
			else if (hold(g, &batch[i]))
				orphan(g, &batch[i]); /* out of memory: lost */
		}
	}
	return got;
}

/* After a share of completions: what they made possible for @c. */
static void after(zcrpc_conn *c)
{
	c->touched = 0;
	if (c->torn_down)
		return;
	c->last_active_ns = c->w->now_ns;
	if (c->sq_posted != c->sq_tail)
		zcrpc__sq_post_deferred(c);
	if (c->wq)
		zcrpc__conn_pump_writes(c);
	if (c->mw.inv_head)
		zcrpc__mw_pump(c);
	zcrpc__credits_maybe_send(c);
	if (c->want_writable && zcrpc_conn_can_send(c)) {
		c->want_writable = 0;
		if (c->h.on_writable && !c->dead)
			c->h.on_writable(c, c->h.arg);
	}
}

static void dispatch(struct zcrpc__cq *g, const struct ibv_wc *wc,
		     zcrpc_conn **touched, int *nt)
{
	zcrpc_conn *c;

	if (wc->wr_id == ZCRPC_WR_TAKEN)
		return; /* taken by its connection's teardown */
	c = map_find(&g->dev->qpmap, wc->qp_num);
	if (!c || c->torn_down || ZCRPC_CONN_FROZEN(c)) {
		orphan(g, wc);
		return;
	}
	zcrpc__conn_on_wc(c, wc);
	if (!c->touched) {
		c->touched = 1;
		touched[(*nt)++] = c;
	}
}

/* Handles up to ZCRPC_CQ_TURN_MAX completions of @g (held ones first), then
 * what they made possible per connection. Not reentrant: a poll from
 * inside one of its callbacks returns 0. Returns how many were handled. */
int zcrpc__cq_poll(struct zcrpc__cq *g)
{
	struct ibv_wc wc[ZCRPC_POLL_BATCH];
	zcrpc_conn *touched[ZCRPC_CQ_TURN_MAX];
	int n, i, nt = 0, total = 0;

	if (!g || g->polling)
		return 0;
	g->polling = 1;
	while (held_pending(g) && total < ZCRPC_CQ_TURN_MAX) {
		struct ibv_wc one = g->held[g->held_head++];

		dispatch(g, &one, touched, &nt);
		total++;
	}
	if (!held_pending(g))
		g->held_head = g->held_n = 0;
	while (total < ZCRPC_CQ_TURN_MAX) {
		n = ibv_poll_cq(g->cq, ZCRPC_POLL_BATCH, wc);
		if (n <= 0)
			break;
		for (i = 0; i < n; i++)
			dispatch(g, &wc[i], touched, &nt);
		total += n;
		if (n < ZCRPC_POLL_BATCH)
			break;
	}
	for (i = 0; i < nt; i++)
		after(touched[i]);
	g->polling = 0;
	return total;
}

/* Every CQ of the worker, one share each. */
int zcrpc__cq_poll_all(zcrpc_worker *w)
{
	struct zcrpc__list *it;
	int i, n = 0;

	for (i = 0; i < ZCRPC_MAX_DEVICES; i++) {
		if (!w->dev[i].ncq)
			continue;
		zcrpc__list_foreach(it, &w->dev[i].cqs)
			n += zcrpc__cq_poll(zcrpc__container_of(
				it, struct zcrpc__cq, link));
	}
	return n;
}

/* Arms @g for a sleeping worker. A completion may have arrived between the
 * last poll and arming (it raises no event): it is held for the next poll
 * (arm runs no callback). Returns nonzero when something waits. */
static int arm(struct zcrpc__cq *g)
{
	struct ibv_wc wc[ZCRPC_POLL_BATCH];
	int n, i;

	if (!g->armed) {
		if (ibv_req_notify_cq(g->cq, 0))
			return 0;
		g->armed = 1;
		n = ibv_poll_cq(g->cq, ZCRPC_POLL_BATCH, wc);
		for (i = 0; i < n; i++)
			if (hold(g, &wc[i]))
				return 1; /* out of memory: keep busy, poll it
					   */
	}
	return held_pending(g);
}

int zcrpc__cq_arm_all(zcrpc_worker *w)
{
	struct zcrpc__list *it;
	int i, busy = 0;

	for (i = 0; i < ZCRPC_MAX_DEVICES; i++) {
		if (!w->dev[i].ncq)
			continue;
		zcrpc__list_foreach(it, &w->dev[i].cqs)
			busy += arm(zcrpc__container_of(it, struct zcrpc__cq,
							link));
	}
	return busy;
}

/* The device's completion channel is readable: take each CQ event, note its
 * CQ is no longer armed, poll it. Events are acknowledged in batches (and
 * the rest when the CQ goes). */
void zcrpc__device_drain(zcrpc_worker *w, struct zcrpc__device *dev)
{
	struct ibv_cq *cq;
	void *ctx;

	(void)w;
	while (dev->comp_ch && ibv_get_cq_event(dev->comp_ch, &cq, &ctx) == 0) {
		struct zcrpc__cq *g = ctx;

		g->unacked++;
		g->armed = 0;
		if (g->unacked >= 64) {
			ibv_ack_cq_events(g->cq, g->unacked);
			g->unacked = 0;
		}
		zcrpc__cq_poll(g);
	}
}
