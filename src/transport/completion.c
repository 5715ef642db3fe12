/* zcrpc — a connection's work completions, each handed to its role (the
 * send queue, the receive path, admission, RDMA-write immediates). The
 * shared CQs they come from, and what runs after a share of them, are
 * cq.c's. */
#include "internal.h"

#include <arpa/inet.h>
#include <string.h>

/* A receive completed: one position of the device's shared receive queue
 * (srq.c), consumed for @c. Whatever happens to the message, the position
 * is recycled exactly once: by the path that delivered it, or here. */
static void on_recv_wc(zcrpc_conn *c, const struct ibv_wc *wc)
{
	uint32_t pos = (uint32_t)(wc->wr_id & ~ZCRPC_WR_RECV_BIT);
	int live = c->state != ZCRPC_CONN_CLOSED && !c->closing;

	c->dev->srq.posted--;
	if (wc->status != IBV_WC_SUCCESS || !live) {
		zcrpc__srq_recycle(c->w, c->dev, NULL, pos, 0);
		if (live) /* flushes after a close are expected */
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "receive completion: %s",
					 ibv_wc_status_str(wc->status));
		return;
	}
	if (zcrpc__srq_consume(c)) { /* it sent past its credits */
		zcrpc__srq_recycle(c->w, c->dev, NULL, pos, 0);
		return;
	}
	if (c->state == ZCRPC_CONN_CONNECTING && c->passive && !c->auth_phase) {
		/* Data may arrive before ESTABLISHED on the passive side
		 * (rxe raises no COMM_EST): the client only sends once it
		 * is established, so we are too. */
		zcrpc__conn_established(c);
	}
	c->cur_recv = pos;
	c->recv_pending = 1;
	if (c->state != ZCRPC_CONN_ESTABLISHED && !c->auth_phase)
		; /* nothing to deliver it to */
	else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && c->auth_phase)
		zcrpc__auth_on_imm(c, pos);
	else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		zcrpc__write_on_imm(c, pos, ntohl(wc->imm_data), wc->byte_len);
	else
		zcrpc__msg_on_recv(c, pos, wc->byte_len);
	if (c->recv_pending) /* a path that failed or dropped it */
		zcrpc__conn_recv_done(c, 0);
}

void zcrpc__conn_recv_done(zcrpc_conn *c, int kept)
{
	int live = c->state != ZCRPC_CONN_CLOSED && !c->closing;

	if (!c->recv_pending)
		return;
	c->recv_pending = 0;
	zcrpc__srq_recycle(c->w, c->dev, live ? c : NULL, c->cur_recv, kept);
}

/* One completion of @c's QP, from its CQ (cq.c dispatches by qp_num). */
void zcrpc__conn_on_wc(zcrpc_conn *c, const struct ibv_wc *wc)
{
	if (!(wc->wr_id & ZCRPC_WR_RECV_BIT)) {
		static const char *const kinds[] = {"?", "send", "RDMA write",
						    "keepalive", "memory window bind",
						    "memory window invalidate"};
		int kind = wc->status != IBV_WC_SUCCESS &&
				   wc->wr_id >= c->sq_head && wc->wr_id < c->sq_tail
			   ? c->sq[wc->wr_id % c->sq_size].kind
			   : 0;

		if (kind == ZCRPC_SQ_INLINE || kind == ZCRPC_SQ_MSG_LAST)
			kind = ZCRPC_SQ_MSG;
		else if (kind == ZCRPC_SQ_FENCE)
			kind = ZCRPC_SQ_KEEPALIVE; /* the same 0-byte write */
		int probe = kind == ZCRPC_SQ_KEEPALIVE;

		zcrpc__sq_complete(c, wc->wr_id, wc->status);
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
	on_recv_wc(c, wc);
}

/* Polls @c's CQ: a share of every connection's completions on it (cq.c).
 * Returns how many were handled. */
int zcrpc__conn_poll(zcrpc_conn *c)
{
	if (ZCRPC_CONN_FROZEN(c) || c->torn_down || !c->cqg)
		return 0;
	return zcrpc__cq_poll(c->cqg);
}
