/* zcrpc — the RDMA-write path: WRITE and WRITE-with-immediate from memory
 * registered with zcrpc_mr_register() into a region the peer granted,
 * checked against both ranges before anything is posted, split at the
 * device's max_msg_sz, queued while the send queue is full; where either
 * side lacks write with immediate, a WRITE and a WRITTEN message. */
#include "internal.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "../core/le.h"

uint32_t zcrpc__conn_own_piece(const zcrpc_conn *c)
{
	uint32_t own = c->dev ? c->dev->max_msg_sz : 1U << 30;

#ifdef ZCRPC_TESTING
	own = zcrpc__testing_write_piece(own); /* small pieces for tests */
#endif
	return own;
}

size_t zcrpc_conn_write_piece(const zcrpc_conn *c)
{
	uint32_t own;

	if (!c)
		return 0;
	own = zcrpc__conn_own_piece(c);
	/* The peer's limit counts only when both sides use PIECE. */
	if ((c->features & ZCRPC_FEAT_PIECE) && c->peer_max_write &&
	    c->peer_max_write < own)
		return c->peer_max_write;
	return own;
}

void zcrpc__write_finish(zcrpc_conn *c, struct zcrpc__write_op *op,
			 zcrpc_status st)
{
	if (op->done)
		return;
	op->done = 1;
	if (st == ZCRPC_OK) {
		c->stats.writes++;
		c->stats.write_bytes += op->len;
	}
	if (!c->dead && c->h.on_write_done)
		c->h.on_write_done(c, op->user_ctx, st, c->h.arg);
}

/* Answers every write not answered yet (queued or in the send queue). The
 * ring still frees what it holds when its entries are reaped. */
void zcrpc__conn_fail_writes(zcrpc_conn *c, zcrpc_status st)
{
	struct zcrpc__write_op *op;
	uint64_t seq;

	while ((op = c->wq)) {
		c->wq = op->next;
		zcrpc__write_finish(c, op, st);
		free(op);
	}
	c->wq_tail = NULL;
	if (!c->sq)
		return;
	for (seq = c->sq_head; seq < c->sq_tail; seq++) {
		struct zcrpc__sq_entry *e = &c->sq[seq % c->sq_size];

		if (e->op)
			zcrpc__write_finish(c, e->op, st);
	}
}

/* The WRITTEN message that follows the last WRITE of @op on a connection
 * without write with immediate: its value and the last piece's length
 * (docs/protocol.md §4). RC delivers it after the WRITE's data. */
static int post_written(zcrpc_conn *c, const struct zcrpc__slot *s,
			const struct zcrpc__write_op *op, uint32_t piece)
{
	zcrpc__put_le32(s->ptr + ZCRPC_MSG_HDR_LEN, op->imm);
	zcrpc__put_le32(s->ptr + ZCRPC_MSG_HDR_LEN + 4, piece);
	return zcrpc__credits_post_msg(c, s, ZCRPC_MSG_WRITTEN,
				       ZCRPC_WRITTEN_MSG_LEN, ZCRPC_SQ_MSG);
}

/* Posts pieces of queued writes while the send queue has room (and, for the
 * piece carrying an immediate, while a credit is there; on a connection
 * that ends writes with WRITTEN, room for it and a pool slot as well). */
void zcrpc__conn_pump_writes(zcrpc_conn *c)
{
	struct zcrpc__write_op *op;

	uint64_t max_piece = zcrpc_conn_write_piece(c);

	while ((op = c->wq) && c->state == ZCRPC_CONN_ESTABLISHED &&
	       !c->closing && zcrpc__sq_room(c) >= 1) {
		uint64_t piece = op->left < max_piece ? op->left : max_piece;
		int last = piece == op->left;
		int imm = last && op->with_imm;
		int written = imm && c->use_written;
		struct zcrpc__slot ws;
		struct ibv_sge sge = {
			.addr = op->src,
			.length = (uint32_t)piece,
			.lkey = op->lkey,
		};
		struct ibv_send_wr wr = {
			.sg_list = &sge,
			.num_sge = piece ? 1 : 0, /* 0: test hook only */
			.opcode = imm && !written ? IBV_WR_RDMA_WRITE_WITH_IMM
						  : IBV_WR_RDMA_WRITE,
		};
		struct zcrpc__sq_entry e = {
			ZCRPC_SQ_WRITE, 0, last ? op : NULL, NULL, NULL, 0};
		int rc;

		if (imm && c->credits < zcrpc__credits_for_data(c)) {
			/* it consumes a peer receive, as a message does */
			c->stats.credit_stalls++;
			return; /* resumes when credits come back */
		}
		if (written && zcrpc__sq_room(c) < 2)
			return; /* the WRITE and its WRITTEN go together */
		if (written &&
		    zcrpc__pool_get(c->w->pool,
				    ZCRPC_MSG_HDR_LEN + ZCRPC_WRITTEN_MSG_LEN,
				    &ws) != ZCRPC_OK)
			return; /* no send slot now: after the next completion */
		wr.wr.rdma.remote_addr = op->dst;
		wr.wr.rdma.rkey = op->rkey;
		if (imm && !written)
			wr.imm_data = htonl(op->imm);
		rc = zcrpc__sq_post(c, &wr, &e, last);
		if (rc) {
			if (written)
				zcrpc__pool_put(c->w->pool, ws.id);
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "ibv_post_send (RDMA WRITE): %s",
					 strerror(rc));
			return;
		}
		if (imm && !written)
			c->credits--; /* post_written takes its own */
		op->src += piece;
		op->dst += piece;
		op->left -= piece;
		if (last) { /* the ring holds it now, whatever follows */
			c->wq = op->next;
			if (!c->wq)
				c->wq_tail = NULL;
			op->in_ring = 1;
		}
		if (written && (rc = post_written(c, &ws, op, (uint32_t)piece))) {
			zcrpc__pool_put(c->w->pool, ws.id);
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "ibv_post_send (WRITTEN): %s",
					 strerror(rc));
			return;
		}
	}
}

zcrpc_status zcrpc_conn_write(zcrpc_conn *c, const zcrpc_mr *src,
			      size_t src_offset, size_t len,
			      const zcrpc_remote_region *dst,
			      uint64_t dst_offset, const uint32_t *imm,
			      void *user_ctx)
{
	struct zcrpc__write_op *op;

	if (!c || !src || !dst || (!len && !ZCRPC_TEST_ZERO_WRITES_OK))
		return ZCRPC_INVALID_ARGUMENT;
	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return ZCRPC_FAILED_PRECONDITION;
	if (src->ctx != c->w->ctx || !src->mrs[c->dev->idx])
		return ZCRPC_FAILED_PRECONDITION;
	if (imm && c->no_write_end) {
		zcrpc__set_last_error(
			"%s has no RDMA WRITE with immediate and the peer does "
			"not take WRITTEN messages (an older zcrpc)",
			c->dev->prof->name);
		return ZCRPC_FAILED_PRECONDITION;
	}
	if (src_offset > src->len || len > src->len - src_offset)
		return ZCRPC_OUT_OF_RANGE;
	if (dst_offset > dst->len || len > dst->len - dst_offset ||
	    dst->addr + dst_offset < dst->addr ||
	    dst->addr + dst_offset + len < dst->addr)
		return ZCRPC_OUT_OF_RANGE;
	op = calloc(1, sizeof(*op));
	if (!op)
		return ZCRPC_RESOURCE_EXHAUSTED;
	op->user_ctx = user_ctx;
	op->src = (uint64_t)(uintptr_t)src->addr + src_offset;
	op->lkey = src->mrs[c->dev->idx]->lkey;
	op->dst = dst->addr + dst_offset;
	op->rkey = dst->rkey;
	op->len = op->left = len;
	if (imm) {
		op->with_imm = 1;
		op->imm = *imm;
	}
	if (c->wq_tail)
		c->wq_tail->next = op;
	else
		c->wq = op;
	c->wq_tail = op;
	zcrpc__conn_pump_writes(c);
	return ZCRPC_OK;
}

void zcrpc_remote_region_encode(const zcrpc_remote_region *r, uint8_t *buf)
{
	zcrpc__put_le32(buf + 0, (uint32_t)r->addr);
	zcrpc__put_le32(buf + 4, (uint32_t)(r->addr >> 32));
	zcrpc__put_le32(buf + 8, (uint32_t)r->len);
	zcrpc__put_le32(buf + 12, (uint32_t)(r->len >> 32));
	zcrpc__put_le32(buf + 16, r->rkey);
	zcrpc__put_le32(buf + 20, 0);
}

zcrpc_status zcrpc_remote_region_decode(const void *data, size_t len,
					zcrpc_remote_region *out)
{
	const uint8_t *buf = data;
	zcrpc_remote_region r;

	if (!buf || !out || len < ZCRPC_REMOTE_REGION_LEN)
		return ZCRPC_INVALID_ARGUMENT;
	r.addr = zcrpc__get_le32(buf) | (uint64_t)zcrpc__get_le32(buf + 4) << 32;
	r.len = zcrpc__get_le32(buf + 8) | (uint64_t)zcrpc__get_le32(buf + 12) << 32;
	r.rkey = zcrpc__get_le32(buf + 16);
	r.reserved = zcrpc__get_le32(buf + 20);
	if (!r.len || r.reserved || r.addr + r.len < r.addr)
		return ZCRPC_INVALID_ARGUMENT;
	*out = r;
	return ZCRPC_OK;
}

/* A WRITE WITH IMMEDIATE landed (receive position @pos): on_write_imm,
 * then the position is reposted. */
void zcrpc__write_on_imm(zcrpc_conn *c, uint32_t pos, uint32_t imm,
			 uint32_t byte_len)
{
	c->stats.write_imms_recv++;
	if (c->h.on_write_imm && !c->dead)
		c->h.on_write_imm(c, imm, byte_len, c->h.arg);
	(void)pos; /* c->cur_recv */
	zcrpc__conn_recv_done(c, 0);
}

/* Teardown: every write not fully posted is answered UNAVAILABLE. */
void zcrpc__write_release_all(zcrpc_conn *c)
{
	struct zcrpc__write_op *op;

	while ((op = c->wq)) {
		c->wq = op->next;
		zcrpc__write_finish(c, op, ZCRPC_UNAVAILABLE);
		free(op);
	}
	c->wq_tail = NULL;
}
