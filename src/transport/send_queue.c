/* zcrpc — a connection's send queue: the ring of every posted, unreaped
 * work request (messages, write pieces, keepalive probes, memory-window
 * binds and invalidations), selective signaling (RC completes in order: a
 * signaled completion reaps every entry before it), the deferral of work
 * requests behind a local operation (docs/design.md, "Local operations on
 * the send queue"), and reaping on completion. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Reaps ring entry @e: the entry is emptied first, then what it held is
 * released and answered. The answers run callbacks (on_write_done,
 * on_revoked, a refusal's close) that may tear the connection down and
 * free the ring; nothing here touches @e after them, and callers check
 * c->sq before going on. */
static void reap_entry(zcrpc_conn *c, struct zcrpc__sq_entry *e,
		       enum ibv_wc_status st)
{
	struct zcrpc__sq_entry x = *e;
	int last = x.kind == ZCRPC_SQ_MSG_LAST;

	free(x.dw); /* never posted: released with the queues */
	memset(e, 0, sizeof(*e));
	if (x.kind == ZCRPC_SQ_MSG || last)
		zcrpc__pool_put(c->w->pool, x.slot);
	else if (x.kind == ZCRPC_SQ_KEEPALIVE)
		c->ka_outstanding = 0;
	else if (x.kind == ZCRPC_SQ_FENCE)
		c->sq_fences--;
	else if (x.kind == ZCRPC_SQ_BIND || x.kind == ZCRPC_SQ_INV)
		zcrpc__mw_reaped(c, &x, st);
	if (x.op) {
		zcrpc__write_finish(c, x.op,
				    st == IBV_WC_SUCCESS ? ZCRPC_OK : ZCRPC_UNAVAILABLE);
		free(x.op);
	}
	if (last)
		zcrpc__auth_last_sent(c); /* a refusal went out: close */
}

/* Teardown: every entry still in the ring is reaped as flushed. */
void zcrpc__sq_flush_all(zcrpc_conn *c)
{
	if (!c->sq)
		return;
	while (c->sq && c->sq_head < c->sq_tail) {
		uint64_t seq = c->sq_head++;

		reap_entry(c, &c->sq[seq % c->sq_size], IBV_WC_WR_FLUSH_ERR);
	}
	c->sq_posted = c->sq_tail;
}

/* Room for messages and writes: BIND / INV work requests have slots of
 * their own (c->mw.depth), so grants never starve sends, nor the reverse. */
int zcrpc__sq_room(const zcrpc_conn *c)
{
	return (int)(c->sq_depth - ((uint32_t)(c->sq_tail - c->sq_head) -
				    c->mw.used - c->sq_fences));
}

/* rxe (Linux 6.1) re-executes a BIND_MW or LOCAL_INV that already ran
 * when a retransmission rewinds the send queue over it (req_retry skips
 * "done" entries, the requester then runs them again): the second bind
 * fails with MW_BIND_ERR and the QP stops retransmitting — calls hang
 * against a dead peer and fail under packet loss. So a local operation is
 * handed to the QP only when every work request before it has completed:
 * it then runs at the head of the queue and is retired before any retry
 * can happen. Work requests posted while one waits are held back, in
 * order (docs/design.md, "Local operations on the send queue"). Only on
 * devices whose profile has the quirk (bind_needs_drain, profile.c). */
static int is_local_op(const struct ibv_send_wr *wr)
{
	return wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV;
}

/* Whether the WR of ring entry @e (sequence @seq) is posted signaled.
 * Unsignaled where the device allows it, except every Nth (N = 16, at most
 * half the send depth, so the ring's room always comes back), each one
 * while the ring's room is N or less, and those
 * whose completion returns something: a message's pool slot (one sent
 * inline gave its slot back at post), a write's on_write_done, a probe's
 * verdict, a window's bind or invalidation, the last message. */
static int must_signal(const zcrpc_conn *c, const struct ibv_send_wr *wr,
		       const struct zcrpc__sq_entry *e, uint64_t seq)
{
	uint32_t every = c->sq_depth / 2 < 16 ? c->sq_depth / 2 : 16;

	if (e->force_signal || !c->dev->prof->selective_signal || every < 2 ||
	    c->sq_signal_all)
		return 1;
	/* A ring running low signals each WR: entries reaped at once, so an
	 * unreaped run never costs the room an all-signaled ring would have. */
	if (zcrpc__sq_room(c) <= (int)every)
		return 1;
	if (e->kind == ZCRPC_SQ_MSG) {
		if (!(wr->send_flags & IBV_SEND_INLINE))
			return 1;
	} else if (e->kind != ZCRPC_SQ_WRITE || e->op) {
		return 1;
	}
	return seq + 1 - c->sq_sig_next >= every;
}

/* Posts @wr of ring entry @e. A message sent inline gives its slot back at
 * once (the device copied it). */
static int hand_over(zcrpc_conn *c, struct ibv_send_wr *wr,
		     struct zcrpc__sq_entry *e)
{
	struct ibv_send_wr *bad;
	int sig = must_signal(c, wr, e, wr->wr_id), rc;

	if (sig)
		wr->send_flags |= IBV_SEND_SIGNALED;
	else
		wr->send_flags &= ~(unsigned)IBV_SEND_SIGNALED;
	rc = ibv_post_send(c->id->qp, wr, &bad);
	if (rc)
		return rc;
	c->sq_posted++;
	if (sig)
		c->sq_sig_next = c->sq_posted;
	else
		c->stats.wr_unsignaled++;
	if (e->kind == ZCRPC_SQ_MSG && (wr->send_flags & IBV_SEND_INLINE)) {
		zcrpc__pool_put(c->w->pool, e->slot);
		e->kind = ZCRPC_SQ_INLINE;
	}
	return 0;
}

/* A local operation must wait for the queue to drain (the rxe quirk) but
 * the WRs posted last are unsignaled: nothing would ever say they
 * completed. A signaled 0-byte WRITE (no completion at the peer, as the
 * keepalive probe) goes first; its ring entry is the extra one. */
static int post_fence(zcrpc_conn *c)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE};
	struct zcrpc__sq_entry *slot = &c->sq[c->sq_tail % c->sq_size];
	int rc;

	memset(slot, 0, sizeof(*slot));
	slot->kind = ZCRPC_SQ_FENCE;
	slot->force_signal = 1;
	wr.wr_id = c->sq_tail;
	rc = hand_over(c, &wr, slot);
	if (rc) {
		slot->kind = 0;
		return rc;
	}
	c->sq_fences++;
	c->sq_tail++;
	return 0;
}

/* Posts @wr, recording @e in the ring under the WR's sequence number (RC
 * completes in order). Returns 0 or the ibv_post_send error (ENOMEM when
 * a WR could not be held back). */
int zcrpc__sq_post(zcrpc_conn *c, struct ibv_send_wr *wr,
		   const struct zcrpc__sq_entry *e, int force_signal)
{
	struct zcrpc__sq_entry *slot;
	int drain = is_local_op(wr) && c->dev->prof->bind_needs_drain;
	int rc;

	if (drain && c->sq_posted == c->sq_tail &&
	    c->sq_sig_next < c->sq_posted && !c->sq_fences) {
		rc = post_fence(c);
		if (rc)
			return rc;
	}
	if (drain)
		c->sq_signal_all = 1; /* windows in use: no fence from now on */
	slot = &c->sq[c->sq_tail % c->sq_size];
	wr->wr_id = c->sq_tail;
	wr->next = NULL;
	if (c->sq_posted != c->sq_tail ||
	    (drain && c->sq_head != c->sq_posted)) {
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
		slot->force_signal = force_signal ? 1 : 0;
		slot->dw = dw;
		c->stats.wr_deferred++;
	} else {
		*slot = *e;
		slot->force_signal = force_signal ? 1 : 0;
		slot->dw = NULL;
		rc = hand_over(c, wr, slot);
		if (rc) {
			memset(slot, 0, sizeof(*slot));
			return rc;
		}
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
	while (c->sq_posted != c->sq_tail && !c->torn_down &&
	       !ZCRPC_CONN_FROZEN(c) && c->id && c->id->qp) {
		struct zcrpc__sq_entry *e = &c->sq[c->sq_posted % c->sq_size];
		struct zcrpc__deferred_wr *dw = e->dw;
		int rc;

		if (is_local_op(&dw->wr) && c->dev->prof->bind_needs_drain &&
		    c->sq_head != c->sq_posted)
			return;
		/* The WR before a local operation that will wait for the
		 * drain is signaled: its completion says the queue drained. */
		if (c->dev->prof->bind_needs_drain &&
		    c->sq_posted + 1 < c->sq_tail) {
			struct zcrpc__sq_entry *nx =
				&c->sq[(c->sq_posted + 1) % c->sq_size];

			if (nx->dw && is_local_op(&nx->dw->wr))
				e->force_signal = 1;
		}
		if (dw->wr.opcode == IBV_WR_BIND_MW) {
			struct ibv_mw *mw = dw->wr.bind_mw.mw;
			uint32_t now_key = mw->rkey;

			mw->rkey = dw->mw_rkey;
			rc = hand_over(c, &dw->wr, e);
			mw->rkey = now_key;
		} else {
			rc = hand_over(c, &dw->wr, e);
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
	struct zcrpc__sq_entry e = {ZCRPC_SQ_KEEPALIVE, 0, NULL, NULL, NULL, 0};
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

/* The send completion of ring entry @seq: reaps it and every entry
 * before it. */
void zcrpc__sq_complete(zcrpc_conn *c, uint64_t seq, enum ibv_wc_status st)
{
	if (seq < c->sq_head || seq >= c->sq_posted)
		return; /* already reaped (or never posted: not ours) */
	while (c->sq && c->sq_head <= seq) {
		uint64_t at = c->sq_head++;

		/* In-order completion: all before @seq succeeded. A callback
		 * may have torn the connection down (c->sq freed). */
		reap_entry(c, &c->sq[at % c->sq_size],
			   at == seq ? st : IBV_WC_SUCCESS);
	}
	if (!c->sq)
		return;
	if (c->drain_close && c->sq_head == c->sq_tail)
		zcrpc__conn_close_drained(c);
}
