/* zcrpc — grants as type-2 memory windows: a window of the worker's PD is
 * bound to exactly the granted range on one connection's QP (IBV_WR_BIND_MW
 * on its send queue) and revoked with IBV_WR_LOCAL_INV; revoked windows wait
 * in a quarantine FIFO before they are bound again (rxe rotates only 8 rkey
 * bits). Windows are per connection and deallocated before its QP.
 * On a device without type-2 windows a grant is the registration's spare
 * (mr_spare.c), revoked by deregistering it; its answer comes from the
 * worker's next turn (w->revokes_due). */
#include "internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static void free_push(struct zcrpc__mw_set *s, struct zcrpc_grant *g)
{
	g->state = ZCRPC_MW_FREE;
	g->qnext = NULL;
	if (s->free_tail)
		s->free_tail->qnext = g;
	else
		s->free_head = g;
	s->free_tail = g;
	s->nfree++;
}

/* A window to bind: the oldest revoked one once the quarantine is full,
 * else a new one. NULL when none can be allocated. */
static struct zcrpc_grant *take_window(zcrpc_conn *c)
{
	struct zcrpc__mw_set *s = &c->mw;
	struct zcrpc_grant *g;

	if (s->nfree > ZCRPC_MW_QUARANTINE) {
		g = s->free_head;
		s->free_head = g->qnext;
		if (!s->free_head)
			s->free_tail = NULL;
		s->nfree--;
		g->qnext = NULL;
		return g;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->mw = ibv_alloc_mw(c->dev->pd, IBV_MW_TYPE_2);
	if (!g->mw) {
		free(g);
		return NULL;
	}
	g->conn = c;
	g->rkey = g->mw->rkey;
	g->anext = s->all;
	s->all = g;
	return g;
}

/* A grant on a device without windows: the registration's spare, whose
 * rkey reaches its whole range (docs/design.md "Grants without memory
 * windows"). RESOURCE_EXHAUSTED while the spare thread makes the next. */
static zcrpc_status reg_grant(zcrpc_mr *mr, zcrpc_conn *c, size_t offset,
			      size_t len, zcrpc_remote_region *out,
			      zcrpc_grant **grant)
{
	struct zcrpc__mw_set *s = &c->mw;
	struct zcrpc_grant *g = s->reg_free;
	struct ibv_mr *r;
	int idx = c->dev->idx;

	if (!g) {
		g = calloc(1, sizeof(*g));
		if (!g)
			return ZCRPC_RESOURCE_EXHAUSTED;
		g->conn = c;
		g->is_reg = 1;
		g->anext = s->all;
		s->all = g;
	} else {
		s->reg_free = g->qnext;
	}
	g->qnext = NULL;
	r = zcrpc__spare_take(mr, idx);
	if (!r) {
		int err = atomic_load(&mr->refill_err[idx]);

		g->qnext = s->reg_free;
		s->reg_free = g;
		if (err)
			zcrpc__set_last_error(
				"cannot register a grant target on %s: %s "
				"(check `ulimit -l`)",
				c->dev->prof->name, strerror(err));
		return ZCRPC_RESOURCE_EXHAUSTED; /* being registered: retry */
	}
	g->rmr = r;
	g->rkey = r->rkey;
	g->state = ZCRPC_MW_BOUND;
	g->answered = 0;
	g->user_ctx = NULL;
	c->stats.grants++;
	out->addr = (uint64_t)(uintptr_t)mr->addr + offset;
	out->len = len;
	out->rkey = r->rkey;
	out->reserved = 0;
	if (grant)
		*grant = g;
	return ZCRPC_OK;
}

/* Deregisters a registration grant's memory: from now on the device
 * accepts no write through its rkey. */
static void reg_drop(struct zcrpc_grant *g)
{
	if (g->rmr) {
		zcrpc__dev_dereg(g->conn->w->ctx, g->rmr);
		g->rmr = NULL;
	}
}

zcrpc_status zcrpc__mr_grant_access(const zcrpc_mr *mr, zcrpc_conn *c,
				    size_t offset, size_t len, int access,
				    zcrpc_remote_region *out,
				    zcrpc_grant **grant)
{
	struct zcrpc_grant *g;
	struct ibv_send_wr wr;
	struct zcrpc__sq_entry e = {ZCRPC_SQ_BIND, 0, NULL, NULL, NULL, 0};
	uint32_t rkey;
	int rc;

	if (!mr || !c || !out || !len)
		return ZCRPC_INVALID_ARGUMENT;
	if (!(mr->flags & ZCRPC_MR_REMOTE_WRITE))
		return ZCRPC_FAILED_PRECONDITION; /* not registered as a target */
	if (offset > mr->len || len > mr->len - offset)
		return ZCRPC_OUT_OF_RANGE;
	if (mr->ctx != c->w->ctx)
		return ZCRPC_INVALID_ARGUMENT;
	if (!c->dev || c->state != ZCRPC_CONN_ESTABLISHED || c->closing ||
	    ZCRPC_CONN_FROZEN(c))
		return ZCRPC_FAILED_PRECONDITION;
	if (!mr->mrs[c->dev->idx])
		return ZCRPC_FAILED_PRECONDITION; /* registered after a removal */
	if (!c->dev->prof->mw_type2) /* a write grant only: its spare's access */
		return access != IBV_ACCESS_REMOTE_WRITE
			       ? ZCRPC_FAILED_PRECONDITION
			       : reg_grant((zcrpc_mr *)mr, c, offset, len, out,
					   grant);
	if (c->mw.used >= c->mw.depth)
		return ZCRPC_RESOURCE_EXHAUSTED; /* bind slots all in the ring */
	g = take_window(c);
	if (!g)
		return ZCRPC_RESOURCE_EXHAUSTED;
	rkey = ibv_inc_rkey(g->rkey);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = g->mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr->mrs[c->dev->idx];
	wr.bind_mw.bind_info.addr = (uint64_t)(uintptr_t)mr->addr + offset;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = (unsigned)access;
	e.g = g;
	rc = zcrpc__sq_post(c, &wr, &e, 0);
	if (rc) {
		free_push(&c->mw, g); /* never bound: no rkey to fear */
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "ibv_post_send (BIND_MW): %s",
				 strerror(rc));
		return ZCRPC_UNAVAILABLE;
	}
	/* The provider passes mw->rkey as the window's current key with the
	 * next bind (rxe checks it), and does not update it itself. */
	g->mw->rkey = rkey;
	g->rkey = rkey;
	g->state = ZCRPC_MW_BOUND;
	g->answered = 0;
	g->user_ctx = NULL;
	c->stats.grants++;
	out->addr = wr.bind_mw.bind_info.addr;
	out->len = len;
	out->rkey = rkey;
	out->reserved = 0;
	if (grant)
		*grant = g;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_mr_grant(const zcrpc_mr *mr, zcrpc_conn *conn,
			    size_t offset, size_t len, zcrpc_remote_region *out,
			    zcrpc_grant **grant)
{
	return zcrpc__mr_grant_access(mr, conn, offset, len,
				      IBV_ACCESS_REMOTE_WRITE, out, grant);
}

/* Posts the LOCAL_INV of @g (signaled: its completion is the answer). */
static int post_inv(zcrpc_conn *c, struct zcrpc_grant *g)
{
	struct ibv_send_wr wr;
	struct zcrpc__sq_entry e = {ZCRPC_SQ_INV, 0, NULL, NULL, NULL, 0};
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.invalidate_rkey = g->rkey;
	e.g = g;
	rc = zcrpc__sq_post(c, &wr, &e, 1);
	if (rc)
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
				 "ibv_post_send (LOCAL_INV): %s", strerror(rc));
	return rc;
}

static void answer(zcrpc_conn *c, struct zcrpc_grant *g, zcrpc_status st)
{
	if (g->answered)
		return;
	g->answered = 1;
	if (!c->dead && c->h.on_revoked)
		c->h.on_revoked(c, g->user_ctx, st, c->h.arg);
}

/* A registration grant's revoke: its memory was deregistered at the
 * revoke; the answer, and the record back for reuse. */
static void reg_answered(zcrpc_conn *c, struct zcrpc_grant *g)
{
	c->stats.revokes++;
	answer(c, g, ZCRPC_OK);
	g->state = ZCRPC_MW_FREE;
	g->qnext = c->mw.reg_free;
	c->mw.reg_free = g;
}

/* Posts the revokes that waited for send-queue room (and answers those of
 * registration grants, which need none). */
void zcrpc__mw_pump(zcrpc_conn *c)
{
	struct zcrpc_grant *g;

	while ((g = c->mw.inv_head) &&
	       (g->is_reg || c->mw.used < c->mw.depth) && /* reg: no slot */
	       c->state == ZCRPC_CONN_ESTABLISHED && !c->closing) {
		c->mw.inv_head = g->qnext;
		if (!c->mw.inv_head)
			c->mw.inv_tail = NULL;
		g->qnext = NULL;
		if (g->is_reg) {
			reg_answered(c, g);
			continue;
		}
		if (post_inv(c, g))
			return;
	}
}

int zcrpc__mw_answer_due(zcrpc_worker *w)
{
	struct zcrpc__list *it;
	int n = 0;

	while ((it = zcrpc__list_first(&w->revokes_due))) {
		zcrpc_conn *c = zcrpc__container_of(it, zcrpc_conn, due_link);

		zcrpc__list_remove(it);
		c->due_linked = 0;
		if (c->mw.inv_head)
			zcrpc__mw_pump(c);
		n++;
	}
	return n;
}

zcrpc_status zcrpc_grant_revoke(zcrpc_grant *g, void *user_ctx)
{
	zcrpc_conn *c;

	if (!g)
		return ZCRPC_INVALID_ARGUMENT;
	c = g->conn;
	if (g->state != ZCRPC_MW_BOUND)
		return ZCRPC_INVALID_ARGUMENT; /* revoked twice */
	if (g->is_reg)
		reg_drop(g); /* now, whatever the connection's state */
	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing) {
		/* The QP is in error: nothing can land. Kept until teardown
		 * (never bound again on a dead connection). */
		g->state = ZCRPC_MW_ORPHAN;
		g->answered = 1;
		return ZCRPC_UNAVAILABLE;
	}
	g->state = ZCRPC_MW_REVOKING;
	g->answered = 0;
	g->user_ctx = user_ctx;
	if (g->is_reg && !c->due_linked) { /* answered in the next turn */
		zcrpc__list_push_back(&c->w->revokes_due, &c->due_link);
		c->due_linked = 1;
	}
	if (!g->is_reg && c->mw.used < c->mw.depth && !c->mw.inv_head) {
		/* A failed post fails the connection, which answers. */
		post_inv(c, g);
		return ZCRPC_OK;
	}
	g->qnext = NULL;
	if (c->mw.inv_tail)
		c->mw.inv_tail->qnext = g;
	else
		c->mw.inv_head = g;
	c->mw.inv_tail = g;
	return ZCRPC_OK;
}

/* A BIND or INV left the ring (@st is its completion, or a flush). */
void zcrpc__mw_reaped(zcrpc_conn *c, const struct zcrpc__sq_entry *e,
		      enum ibv_wc_status st)
{
	struct zcrpc_grant *g = e->g;

	if (c->mw.used)
		c->mw.used--;
	if (!g || e->kind != ZCRPC_SQ_INV || g->state != ZCRPC_MW_REVOKING)
		return; /* a failed BIND fails the connection (on_wc) */
	if (st == IBV_WC_SUCCESS) {
		c->stats.revokes++;
		answer(c, g, ZCRPC_OK);
		free_push(&c->mw, g); /* quarantined before its next bind */
		return;
	}
	answer(c, g, ZCRPC_UNAVAILABLE);
	g->state = ZCRPC_MW_ORPHAN;
}

/* The connection failed or is closing: every revoke still waiting gets its
 * answer now (its QP is in error; nothing can land any more). */
void zcrpc__mw_fail_all(zcrpc_conn *c)
{
	struct zcrpc_grant *g;

	c->mw.inv_head = c->mw.inv_tail = NULL;
	for (g = c->mw.all; g; g = g->anext) {
		if (g->is_reg) /* other QPs of the PD could still use it */
			reg_drop(g);
		if (g->state == ZCRPC_MW_REVOKING)
			answer(c, g, ZCRPC_UNAVAILABLE);
	}
}

/* Teardown, before the QP is destroyed: every window goes. */
void zcrpc__mw_dealloc(zcrpc_conn *c)
{
	struct zcrpc_grant *g;

	for (g = c->mw.all; g; g = g->anext) {
		if (g->mw)
			ibv_dealloc_mw(g->mw);
		g->mw = NULL;
		reg_drop(g);
	}
}

/* Teardown, after the send ring was reaped: the grant records go. */
void zcrpc__mw_free(zcrpc_conn *c)
{
	struct zcrpc_grant *g;

	while ((g = c->mw.all)) {
		c->mw.all = g->anext;
		if (g->mw)
			ibv_dealloc_mw(g->mw);
		reg_drop(g);
		free(g);
	}
	if (c->due_linked) {
		zcrpc__list_remove(&c->due_link);
		c->due_linked = 0;
	}
	memset(&c->mw.free_head, 0,
	       sizeof(c->mw) - offsetof(struct zcrpc__mw_set, free_head));
}
