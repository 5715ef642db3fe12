/* zcrpc — the send/recv path of a connection: receives posted from the
 * worker's pool, messages sent from pool slots, credits (docs/protocol.md
 * §3), the send-queue ring (every WR signaled), and completions. */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/le.h"

/* ---- queues ------------------------------------------------------------- */

zcrpc_status zcrpc__conn_alloc_queues(zcrpc_conn *c)
{
	c->recv = calloc(c->recv_depth, sizeof(*c->recv));
	c->recv_has = calloc(c->recv_depth, 1);
	c->sq = calloc(c->sq_size, sizeof(*c->sq));
	if (!c->recv || !c->recv_has || !c->sq) {
		zcrpc__conn_fail(c, ZCRPC_RESOURCE_EXHAUSTED, "out of memory");
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

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

static void maybe_send_credits(zcrpc_conn *c);

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
	maybe_send_credits(c); /* nothing else may be coming to carry them */
}

static void reap_entry(zcrpc_conn *c, struct zcrpc__sq_entry *e,
		       enum ibv_wc_status st)
{
	int last = e->kind == ZCRPC_SQ_MSG_LAST;

	if (e->kind == ZCRPC_SQ_MSG || last)
		zcrpc__pool_put(c->w->pool, e->slot);
	else if (e->kind == ZCRPC_SQ_KEEPALIVE)
		c->ka_outstanding = 0;
	else if (e->kind == ZCRPC_SQ_BIND || e->kind == ZCRPC_SQ_INV)
		zcrpc__mw_reaped(c, e, st);
	if (e->op) {
		zcrpc__write_finish(c, e->op,
				    st == IBV_WC_SUCCESS ? ZCRPC_OK : ZCRPC_UNAVAILABLE);
		free(e->op);
	}
	free(e->dw); /* never posted: released with the queues */
	e->dw = NULL;
	e->kind = 0;
	e->op = NULL;
	e->g = NULL;
	if (last)
		zcrpc__auth_last_sent(c); /* a refusal went out: close */
}

void zcrpc__conn_release_queues(zcrpc_conn *c)
{
	struct zcrpc__write_op *op;
	uint32_t i;

	if (c->sq) {
		for (; c->sq_head < c->sq_tail; c->sq_head++)
			reap_entry(c, &c->sq[c->sq_head % c->sq_size],
				   IBV_WC_WR_FLUSH_ERR);
		c->sq_posted = c->sq_tail;
	}
	while ((op = c->wq)) {
		c->wq = op->next;
		zcrpc__write_finish(c, op, ZCRPC_UNAVAILABLE);
		free(op);
	}
	c->wq_tail = NULL;
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
	free(c->sq);
	c->recv = NULL;
	c->recv_has = NULL;
	c->sq = NULL;
}

/* ---- the send ring ------------------------------------------------------ */

/* Room for messages and writes: BIND / INV work requests have slots of
 * their own (c->mw.depth), so grants never starve sends, nor the reverse. */
int zcrpc__sq_room(const zcrpc_conn *c)
{
	return (int)(c->sq_depth -
		     ((uint32_t)(c->sq_tail - c->sq_head) - c->mw.used));
}

/* rxe (Linux 6.1) re-executes a BIND_MW or LOCAL_INV that already ran
 * when a retransmission rewinds the send queue over it (req_retry skips
 * "done" entries, the requester then runs them again): the second bind
 * fails with MW_BIND_ERR and the QP stops retransmitting — calls hang
 * against a dead peer and fail under packet loss. So a local operation is
 * handed to the QP only when every work request before it has completed:
 * it then runs at the head of the queue and is retired before any retry
 * can happen. Work requests posted while one waits are held back, in
 * order (docs/design.md, "Local operations on the send queue"). */
static int is_local_op(const struct ibv_send_wr *wr)
{
	return wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV;
}

static int hand_over(zcrpc_conn *c, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int rc = ibv_post_send(c->id->qp, wr, &bad);

	if (!rc)
		c->sq_posted++;
	return rc;
}

/* Posts @wr, recording @e in the ring under the WR's sequence number.
 * Every WR is signaled, so that the ring knows when the queue has drained
 * (a local operation waits for that); RC completes in order. Returns 0 or
 * the ibv_post_send error (ENOMEM when a WR could not be held back). */
int zcrpc__sq_post(zcrpc_conn *c, struct ibv_send_wr *wr,
		   const struct zcrpc__sq_entry *e, int force_signal)
{
	struct zcrpc__sq_entry *slot = &c->sq[c->sq_tail % c->sq_size];
	int rc;

	(void)force_signal; /* every WR is signaled */
	wr->wr_id = c->sq_tail;
	wr->send_flags |= IBV_SEND_SIGNALED;
	wr->next = NULL;
	if (c->sq_posted != c->sq_tail ||
	    (is_local_op(wr) && c->sq_head != c->sq_posted)) {
		struct zcrpc__deferred_wr *dw = malloc(sizeof(*dw));

		if (!dw)
			return ENOMEM;
		dw->wr = *wr;
		/* The provider reads the window's current key at post time;
		 * mw.c moves it on once this returns. */
		dw->mw_rkey = wr->opcode == IBV_WR_BIND_MW ? wr->bind_mw.mw->rkey : 0;
		if (wr->num_sge) {
			dw->sge = wr->sg_list[0];
			dw->wr.sg_list = &dw->sge;
			dw->wr.num_sge = 1;
		}
		*slot = *e;
		slot->dw = dw;
		c->stats.wr_deferred++;
	} else {
		rc = hand_over(c, wr);
		if (rc)
			return rc;
		*slot = *e;
		slot->dw = NULL;
	}
	if (e->kind == ZCRPC_SQ_BIND || e->kind == ZCRPC_SQ_INV)
		c->mw.used++;
	c->sq_tail++;
	c->last_active_ns = c->w->now_ns;
	return 0;
}

/* Hands held-back WRs to the QP, in order, up to the next local operation
 * that still has uncompleted WRs before it. Runs after completions. */
void zcrpc__sq_post_deferred(zcrpc_conn *c)
{
	while (c->sq_posted != c->sq_tail && !c->torn_down && !c->test_broken &&
	       c->id && c->id->qp) {
		struct zcrpc__sq_entry *e = &c->sq[c->sq_posted % c->sq_size];
		struct zcrpc__deferred_wr *dw = e->dw;
		int rc;

		if (is_local_op(&dw->wr) && c->sq_head != c->sq_posted)
			return;
		if (dw->wr.opcode == IBV_WR_BIND_MW) {
			struct ibv_mw *mw = dw->wr.bind_mw.mw;
			uint32_t now_key = mw->rkey;

			mw->rkey = dw->mw_rkey;
			rc = hand_over(c, &dw->wr);
			mw->rkey = now_key;
		} else {
			rc = hand_over(c, &dw->wr);
		}
		if (rc) {
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "ibv_post_send (held back): %s", strerror(rc));
			return;
		}
		e->dw = NULL;
		free(dw);
	}
}

/* Posts a keepalive probe: a 0-byte RDMA WRITE without immediate data
 * (docs/protocol.md §6), signaled. It costs no credit and makes no
 * completion at the peer; against a peer that no longer answers it fails
 * with retry-exceeded, which fails the connection (on_wc). The caller
 * checked that the connection is established, has ring room and no probe
 * outstanding. */
void zcrpc__conn_keepalive(zcrpc_conn *c)
{
	struct ibv_send_wr wr = {
		.sg_list = NULL,
		.num_sge = 0,
		.opcode = IBV_WR_RDMA_WRITE,
	};
	struct zcrpc__sq_entry e = {ZCRPC_SQ_KEEPALIVE, 0, NULL, NULL, NULL};
	int rc;

	wr.wr.rdma.remote_addr = 0;
	wr.wr.rdma.rkey = 0;
	rc = zcrpc__sq_post(c, &wr, &e, 1);
	if (rc) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
				 "ibv_post_send (keepalive): %s", strerror(rc));
		return;
	}
	c->ka_outstanding = 1;
	c->stats.keepalives_sent++;
}

static void sq_complete(zcrpc_conn *c, uint64_t seq, enum ibv_wc_status st)
{
	if (seq < c->sq_head || seq >= c->sq_posted)
		return; /* already reaped (or never posted: not ours) */
	while (c->sq_head <= seq) {
		struct zcrpc__sq_entry *e = &c->sq[c->sq_head % c->sq_size];

		/* In-order completion: all before @seq succeeded. */
		reap_entry(c, e, c->sq_head == seq ? st : IBV_WC_SUCCESS);
		c->sq_head++;
	}
	if (c->drain_close && c->sq_head == c->sq_tail)
		zcrpc__conn_close_drained(c);
}

/* ---- sending ------------------------------------------------------------ */

/* Sends the message in @s (payload of @len bytes already in place) with one
 * credit. The caller checked credits and ring room. */
static int post_msg(zcrpc_conn *c, const struct zcrpc__slot *s, uint8_t type,
		    size_t len, uint8_t kind)
{
	uint32_t give = c->owed > 0xffff ? 0xffff : c->owed;
	struct ibv_sge sge = {
		.addr = (uintptr_t)s->ptr,
		.length = (uint32_t)(ZCRPC_MSG_HDR_LEN + len),
		.lkey = s->lkeys[c->dev->idx],
	};
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
	};
	struct zcrpc__sq_entry e = {kind, s->id, NULL, NULL, NULL};
	int rc;

	s->ptr[0] = type;
	s->ptr[1] = 0;
	zcrpc__put_le16(s->ptr + 2, (uint16_t)give);
	zcrpc__put_le32(s->ptr + 4, (uint32_t)len);
	if (sge.length <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	rc = zcrpc__sq_post(c, &wr, &e, kind == ZCRPC_SQ_MSG_LAST);
	if (rc)
		return rc;
	c->credits--;
	c->owed -= give;
	return 0;
}

/* Sends an explicit credit update when enough receives were reposted and no
 * message carried them back. Uses the credit kept in reserve. */
static void maybe_send_credits(zcrpc_conn *c)
{
	struct zcrpc__slot s;

	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return;
	if (c->owed < c->recv_depth / 2 || c->credits < 1 || zcrpc__sq_room(c) < 1)
		return;
	if (zcrpc__pool_get(c->w->pool, ZCRPC_MSG_HDR_LEN, &s) != ZCRPC_OK)
		return; /* try again after the next completion */
	if (post_msg(c, &s, ZCRPC_MSG_CREDIT, 0, ZCRPC_SQ_MSG)) {
		zcrpc__pool_put(c->w->pool, s.id);
		return;
	}
	c->stats.credit_updates_sent++;
}

int zcrpc_conn_can_send(const zcrpc_conn *c)
{
	return c && c->state == ZCRPC_CONN_ESTABLISHED && !c->closing &&
	       c->credits >= 2 && zcrpc__sq_room(c) >= 1;
}

static zcrpc_status check_send(zcrpc_conn *c, size_t len)
{
	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return ZCRPC_FAILED_PRECONDITION;
	if (len > c->peer_max_msg)
		return ZCRPC_INVALID_ARGUMENT;
	if (c->credits < 2) { /* one credit is kept for credit updates */
		c->stats.credit_stalls++;
		c->want_writable = 1;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (zcrpc__sq_room(c) < 1) {
		c->want_writable = 1;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

static zcrpc_status send_slot(zcrpc_conn *c, const struct zcrpc__slot *s,
			      size_t len)
{
	int rc = post_msg(c, s, ZCRPC_MSG_DATA, len, ZCRPC_SQ_MSG);

	if (rc) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "ibv_post_send: %s",
				 strerror(rc));
		return ZCRPC_UNAVAILABLE;
	}
	c->stats.msgs_sent++;
	c->stats.bytes_sent += len;
	return ZCRPC_OK;
}

zcrpc_status zcrpc__conn_send_ctrl(zcrpc_conn *c, uint8_t type,
				   const void *data, size_t len, int last)
{
	struct zcrpc__slot s;
	int rc;

	if (len > c->peer_max_msg)
		return ZCRPC_INVALID_ARGUMENT;
	if (c->credits < 1 || zcrpc__sq_room(c) < 1 ||
	    zcrpc__pool_get(c->w->pool, ZCRPC_MSG_HDR_LEN + len, &s) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (len)
		memcpy(s.ptr + ZCRPC_MSG_HDR_LEN, data, len);
	rc = post_msg(c, &s, type, len, last ? ZCRPC_SQ_MSG_LAST : ZCRPC_SQ_MSG);
	if (rc) {
		zcrpc__pool_put(c->w->pool, s.id);
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "ibv_post_send: %s",
				 strerror(rc));
		return ZCRPC_UNAVAILABLE;
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc_msg_alloc(zcrpc_worker *w, size_t len, zcrpc_msg *out)
{
	struct zcrpc__slot s;
	zcrpc_status st;

	if (!w || !out || len > w->opts.max_msg)
		return ZCRPC_INVALID_ARGUMENT;
	st = zcrpc__pool_get(w->pool, ZCRPC_MSG_HDR_LEN + len, &s);
	if (st != ZCRPC_OK)
		return st == ZCRPC_INVALID_ARGUMENT ? st : ZCRPC_RESOURCE_EXHAUSTED;
	out->data = s.ptr + ZCRPC_MSG_HDR_LEN;
	out->capacity = s.size - ZCRPC_MSG_HDR_LEN;
	out->id = s.id;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_msg_free(zcrpc_worker *w, zcrpc_msg *m)
{
	zcrpc_status st;

	if (!w || !m)
		return ZCRPC_INVALID_ARGUMENT;
	st = zcrpc__pool_put(w->pool, m->id);
	if (st == ZCRPC_OK)
		memset(m, 0, sizeof(*m));
	return st;
}

zcrpc_status zcrpc_conn_send_msg(zcrpc_conn *c, zcrpc_msg *m, size_t len)
{
	struct zcrpc__slot s;
	zcrpc_status st;

	if (!c || !m)
		return ZCRPC_INVALID_ARGUMENT;
	if (zcrpc__pool_lookup(c->w->pool, m->id, &s) != ZCRPC_OK ||
	    m->data != s.ptr + ZCRPC_MSG_HDR_LEN ||
	    len > s.size - ZCRPC_MSG_HDR_LEN)
		return ZCRPC_INVALID_ARGUMENT;
	st = check_send(c, len);
	if (st != ZCRPC_OK)
		return st;
	st = send_slot(c, &s, len);
	if (st == ZCRPC_OK)
		memset(m, 0, sizeof(*m));
	return st;
}

zcrpc_status zcrpc_conn_send(zcrpc_conn *c, const void *data, size_t len)
{
	struct zcrpc__slot s;
	zcrpc_status st;

	if (!c || (!data && len))
		return ZCRPC_INVALID_ARGUMENT;
	st = check_send(c, len);
	if (st != ZCRPC_OK)
		return st;
	if (zcrpc__pool_get(c->w->pool, ZCRPC_MSG_HDR_LEN + len, &s) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (len)
		memcpy(s.ptr + ZCRPC_MSG_HDR_LEN, data, len);
	st = send_slot(c, &s, len);
	if (st != ZCRPC_OK) {
		zcrpc__pool_put(c->w->pool, s.id);
		return st;
	}
	c->stats.copied_bytes += len;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_conn_recv_keep(zcrpc_conn *c, zcrpc_msg *out)
{
	const struct zcrpc__slot *s;

	if (!c || !out)
		return ZCRPC_INVALID_ARGUMENT;
	if (!c->in_recv || c->kept)
		return ZCRPC_FAILED_PRECONDITION;
	s = &c->recv[c->cur_recv];
	out->data = s->ptr + ZCRPC_MSG_HDR_LEN;
	out->capacity = s->size - ZCRPC_MSG_HDR_LEN;
	out->id = s->id;
	c->kept = 1;
	return ZCRPC_OK;
}

/* ---- receiving ---------------------------------------------------------- */

/* After a receive at @pos was consumed: repost its slot, or (if the
 * application kept it) a fresh one; then the peer gets the credit. */
static void recycle(zcrpc_conn *c, uint32_t pos, int kept)
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
	recycle(c, pos, 0);
}

/* A well-formed CLOSE (docs/protocol.md §5): only on a connection that
 * negotiated it, 8 bytes, a status code; the reserved word is ignored. */
static int is_close(const zcrpc_conn *c, const uint8_t *p, uint32_t len)
{
	return p[0] == ZCRPC_MSG_CLOSE && (c->features & ZCRPC_FEAT_CLOSE) &&
	       len == ZCRPC_CLOSE_MSG_LEN &&
	       zcrpc__get_le32(p + ZCRPC_MSG_HDR_LEN) < ZCRPC_STATUS_COUNT;
}

static void on_recv(zcrpc_conn *c, uint32_t pos, uint32_t byte_len)
{
	const uint8_t *p = c->recv[pos].ptr;
	uint32_t len, got;
	int kept;

	if (c->auth_phase) { /* nothing but the admission exchange */
		zcrpc__auth_on_msg(c, pos, p, byte_len);
		return;
	}
	if (byte_len < ZCRPC_MSG_HDR_LEN) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: %u-byte message", byte_len);
		return;
	}
	len = zcrpc__get_le32(p + 4);
	if (len != byte_len - ZCRPC_MSG_HDR_LEN ||
	    len > c->w->opts.max_msg || p[1] != 0 ||
	    (p[0] != ZCRPC_MSG_DATA && p[0] != ZCRPC_MSG_CREDIT &&
	     !is_close(c, p, len)) ||
	    (p[0] == ZCRPC_MSG_CREDIT && len != 0)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: type %u flags %u length %u in a %u-byte message",
				 p[0], p[1], len, byte_len);
		return;
	}
	if (c->peer_closed) { /* nothing follows a CLOSE */
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: type %u after the peer's CLOSE",
				 p[0]);
		return;
	}
	got = zcrpc__get_le16(p + 2);
	if (got > c->peer_recv_depth - c->credits) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: peer returned more credits than it granted");
		return;
	}
	c->credits += got;
	kept = 0;
	if (p[0] == ZCRPC_MSG_CLOSE)
		zcrpc__conn_on_close_msg(c, p + ZCRPC_MSG_HDR_LEN);
	if (p[0] == ZCRPC_MSG_DATA) {
		c->stats.msgs_recv++;
		c->stats.bytes_recv += len;
		if (c->h.on_recv && !c->dead) {
			c->in_recv = 1;
			c->kept = 0;
			c->cur_recv = pos;
			c->cur_len = len;
			c->h.on_recv(c, p + ZCRPC_MSG_HDR_LEN, len, c->h.arg);
			c->in_recv = 0;
			kept = c->kept;
			c->kept = 0;
		}
	}
	if (kept && (c->state == ZCRPC_CONN_CLOSED || c->closing)) {
		/* The application owns the slot now; the position is empty. */
		c->recv_has[pos] = 0;
		return;
	}
	recycle(c, pos, kept);
}

static void on_write_imm(zcrpc_conn *c, uint32_t pos, uint32_t imm,
			 uint32_t byte_len)
{
	c->stats.write_imms_recv++;
	if (c->h.on_write_imm && !c->dead)
		c->h.on_write_imm(c, imm, byte_len, c->h.arg);
	recycle(c, pos, 0);
}

static void on_wc(zcrpc_conn *c, const struct ibv_wc *wc)
{
	if (!(wc->wr_id & ZCRPC_WR_RECV_BIT)) {
		static const char *const kinds[] = {"?", "send", "RDMA write",
						    "keepalive", "memory window bind",
						    "memory window invalidate"};
		int kind = wc->status != IBV_WC_SUCCESS &&
				   wc->wr_id >= c->sq_head && wc->wr_id < c->sq_tail
			   ? c->sq[wc->wr_id % c->sq_size].kind
			   : 0;
		int probe = kind == ZCRPC_SQ_KEEPALIVE;

		sq_complete(c, wc->wr_id, wc->status);
		if (wc->status == IBV_WC_SUCCESS)
			return;
		if (wc->status == IBV_WC_RNR_RETRY_EXC_ERR)
			c->stats.rnr_events++;
		if (c->state == ZCRPC_CONN_CLOSED || c->closing)
			return;
		if (probe)
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "peer unreachable: keepalive failed (%s)",
					 ibv_wc_status_str(wc->status));
		else
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "send completion (%s): %s",
					 kinds[kind <= ZCRPC_SQ_INV ? kind : 0],
					 ibv_wc_status_str(wc->status));
		return;
	}
	if (c->stats.recv_posted)
		c->stats.recv_posted--; /* this receive is no longer posted */
	if (wc->status != IBV_WC_SUCCESS) {
		if (c->state == ZCRPC_CONN_CLOSED || c->closing)
			return; /* flushes after a close are expected */
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "receive completion: %s",
				 ibv_wc_status_str(wc->status));
		return;
	}
	if (c->state == ZCRPC_CONN_CONNECTING && c->passive && !c->auth_phase) {
		/* Data may arrive before ESTABLISHED on the passive side
		 * (rxe raises no COMM_EST): the client only sends once it
		 * is established, so we are too. */
		zcrpc__conn_established(c);
	}
	if (c->state != ZCRPC_CONN_ESTABLISHED && !c->auth_phase)
		return;
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && c->auth_phase)
		zcrpc__auth_on_imm(c, (uint32_t)(wc->wr_id & ~ZCRPC_WR_RECV_BIT));
	else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		on_write_imm(c, (uint32_t)(wc->wr_id & ~ZCRPC_WR_RECV_BIT),
			     ntohl(wc->imm_data), wc->byte_len);
	else
		on_recv(c, (uint32_t)(wc->wr_id & ~ZCRPC_WR_RECV_BIT),
			wc->byte_len);
}

static void handle(zcrpc_conn *c, struct ibv_wc *wc, int n)
{
	int i;

	for (i = 0; i < n && !c->torn_down; i++)
		on_wc(c, &wc[i]);
}

/* Handles the connection's completions, at most ZCRPC_POLL_TURN_MAX (the
 * rest stay in the CQ for the next progress turn). Returns how many. */
int zcrpc__conn_poll(zcrpc_conn *c)
{
	struct ibv_wc wc[ZCRPC_POLL_BATCH];
	int n, total = 0;

	if (c->test_broken)
		return 0; /* frozen: leave its flushes in the CQ */
	if (c->nstash) { /* completions taken by zcrpc__conn_arm() */
		n = c->nstash;
		memcpy(wc, c->stash, sizeof(wc[0]) * (size_t)n);
		c->nstash = 0;
		handle(c, wc, n);
		total += n;
	}
	while (!c->torn_down && c->cq && total < ZCRPC_POLL_TURN_MAX) {
		n = ibv_poll_cq(c->cq, ZCRPC_POLL_BATCH, wc);
		if (n <= 0)
			break;
		handle(c, wc, n);
		total += n;
		if (n < ZCRPC_POLL_BATCH)
			break;
	}
	if (total && !c->torn_down) {
		c->last_active_ns = c->w->now_ns;
		if (c->sq_posted != c->sq_tail)
			zcrpc__sq_post_deferred(c);
		if (c->wq)
			zcrpc__conn_pump_writes(c);
		if (c->mw.inv_head)
			zcrpc__mw_pump(c);
		maybe_send_credits(c);
		if (c->want_writable && zcrpc_conn_can_send(c)) {
			c->want_writable = 0;
			if (c->h.on_writable && !c->dead)
				c->h.on_writable(c, c->h.arg);
		}
	}
	return total;
}

int zcrpc__conn_arm(zcrpc_conn *c)
{
	if (c->test_broken)
		return 0;
	if (c->cq_armed)
		return c->nstash > 0;
	if (ibv_req_notify_cq(c->cq, 0))
		return 0;
	c->cq_armed = 1;
	/* A completion may have arrived between the last poll and arming; it
	 * raises no event. Keep it for the next poll: arm runs no callback. */
	if (c->nstash < ZCRPC_POLL_BATCH) {
		int n = ibv_poll_cq(c->cq, ZCRPC_POLL_BATCH - c->nstash,
				    c->stash + c->nstash);
		if (n > 0)
			c->nstash += n;
	}
	return c->nstash > 0;
}
