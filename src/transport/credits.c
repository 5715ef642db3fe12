/* zcrpc — credit-based flow control (docs/protocol.md §3): a message
 * costs one credit and carries back the credits owed to the peer (its
 * share of the shared receive queue, srq.c); an explicit CREDIT message
 * returns them when no message did; credits a peer returns are checked
 * against what it may grant; an idle connection gives the extra credits
 * the peer granted back with RELEASE. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "../core/le.h"

/* Sends the message in @s (payload of @len bytes already in place) with one
 * credit. The caller checked credits and ring room. */
int zcrpc__credits_post_msg(zcrpc_conn *c, const struct zcrpc__slot *s,
			    uint8_t type, size_t len, uint8_t kind)
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
	struct zcrpc__sq_entry e = {kind, s->id, NULL, NULL, NULL, 0};
	int rc;

	s->ptr[0] = type;
	s->ptr[1] = 0;
	zcrpc__put_le16(s->ptr + 2, (uint16_t)give);
	zcrpc__put_le32(s->ptr + 4, (uint32_t)len);
	if (sge.length <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	/* The last message and a CLOSE are signaled: the close waits for
	 * their completion (conn.c). */
	rc = zcrpc__sq_post(c, &wr, &e,
			    kind == ZCRPC_SQ_MSG_LAST ||
				    type == ZCRPC_MSG_CLOSE);
	if (rc)
		return rc;
	c->credits--;
	c->owed -= give;
	c->out += give; /* still promised: the peer holds them now */
	return 0;
}

/* Sends an explicit credit update when enough receives were reposted and no
 * message carried them back. Uses the credit kept in reserve. */
void zcrpc__credits_maybe_send(zcrpc_conn *c)
{
	struct zcrpc__slot s;

	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return;
	if (!c->owed || c->owed < c->share / 2 || c->credits < 1 ||
	    zcrpc__sq_room(c) < 1)
		return;
	if (zcrpc__pool_get(c->w->pool, ZCRPC_MSG_HDR_LEN, &s) != ZCRPC_OK)
		return; /* try again after the next completion */
	if (zcrpc__credits_post_msg(c, &s, ZCRPC_MSG_CREDIT, 0, ZCRPC_SQ_MSG)) {
		zcrpc__pool_put(c->w->pool, s.id);
		return;
	}
	c->stats.credit_updates_sent++;
}

/* The peer returned @got credits in a message header. Returns 0, or -1
 * after failing the connection when that is more than it was granted. */
int zcrpc__credits_returned(zcrpc_conn *c, uint32_t got)
{
	/* A peer with shared receives grants beyond its hello, never more
	 * than a window can hold. */
	uint32_t most = (c->features & ZCRPC_FEAT_SHARED)
				? ZCRPC_MAX_QUEUE_DEPTH
				: c->peer_recv_depth;

	/* The flow-control-off hook added 2^20 credits the peer never
	 * granted: its returns then always look excessive (T10 flaked with
	 * this violation instead of the RNR it is after). */
	if (ZCRPC_TEST_NO_FLOW(c)) {
		c->credits += got;
		return 0;
	}
	if (c->credits > most || got > most - c->credits) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: peer returned more credits than it granted");
		return -1;
	}
	c->credits += got;
	return 0;
}

int zcrpc__credits_on_release(zcrpc_conn *c, uint32_t n)
{
	if (n > c->out) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: the peer released %u "
				 "credits of %u",
				 n, c->out);
		return -1;
	}
	zcrpc__srq_released(c, n);
	return 0;
}

/* Gives back what the peer granted beyond its guaranteed part (its hello's
 * recv_depth) once nothing was sent for @idle_ns: the RELEASE costs one
 * credit and returns the rest of the extra ones. */
void zcrpc__credits_maybe_release(zcrpc_conn *c, int64_t now, int64_t idle_ns)
{
	uint8_t msg[ZCRPC_RELEASE_MSG_LEN];
	uint32_t k;

	if (!(c->features & ZCRPC_FEAT_SHARED) ||
	    c->state != ZCRPC_CONN_ESTABLISHED || c->closing ||
	    c->credits < c->peer_recv_depth + ZCRPC_RELEASE_MIN + 1 ||
	    now - c->last_data_ns < idle_ns)
		return;
	k = c->credits - 1 - c->peer_recv_depth;
	zcrpc__put_le32(msg, k);
	if (zcrpc__conn_send_ctrl(c, ZCRPC_MSG_RELEASE, msg, sizeof(msg), 0) !=
	    ZCRPC_OK)
		return;
	c->credits -= k;
	c->stats.credits_released += k;
}
