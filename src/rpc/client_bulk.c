/* zcrpc — the client's bulk parts: writing the request's part into the
 * server's grant, granting a target for the reply's part (parked while the
 * connection has no room for the bind or the BULK_GRANT) and revoking it
 * before the reply is read, and completed calls whose grant is still out
 * (zombies). docs/design.md "Bulk". */
#include "client_internal.h"
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reply of @c announced a bulk part, in @f (inside on_recv): keep the
 * reply's frame until the part lands and take the target for it (the
 * caller's reply_into or a cached buffer, scrubbed). -1 when @c failed. */
static int take_reply_target(zcrpc_channel *ch, zcrpc_conn *conn,
			     struct ccall *c, const struct zcrpc_frame *f)
{
	const zcrpc_mr *mr;
	size_t off;

	if (zcrpc_conn_recv_keep(conn, &c->reply_msg) != ZCRPC_OK) {
		zcrpc__ccall_complete(ch, c, ZCRPC_INTERNAL,
				      "cannot grant the reply target");
		return -1;
	}
	c->has_reply_msg = 1;
	c->reply = *f;
	if (c->has_reply_into) {
		if (f->bulk_len > c->reply_into.len) {
			zcrpc__ccall_send_cancel(ch, c);
			zcrpc__ccall_complete(
				ch, c, ZCRPC_RESOURCE_EXHAUSTED,
				"reply attachment larger than reply_into");
			return -1;
		}
		mr = c->reply_into.mr;
		off = c->reply_into.offset;
	} else {
		if (zcrpc__bulk_get(&ch->bulk, f->bulk_len, &c->dst_buf) !=
		    ZCRPC_OK) {
			zcrpc__ccall_send_cancel(ch, c);
			zcrpc__ccall_complete(
				ch, c, ZCRPC_RESOURCE_EXHAUSTED,
				"no memory for the reply attachment");
			return -1;
		}
		mr = c->dst_buf->mr;
		off = 0;
	}
	/* Bytes a split write may skip must not show what the
	 * memory held before (docs/protocol.md §4). */
	zcrpc__bulk_scrub_for(conn, (uint8_t *)zcrpc__mr_addr(mr) + off,
			      (size_t)f->bulk_len);
	return 0;
}

/* @c waits for room on its connection: for a window bind (no reply_grant
 * yet; no callback says when, so the channel's timer retries) or for the
 * BULK_GRANT's send (built in c->out; on_writable says when). */
static void park_grant(zcrpc_channel *ch, struct ccall *c)
{
	c->grant_parked = 1;
	zcrpc__list_push_back(&ch->grants, &c->qlink);
	if (!c->reply_grant)
		zcrpc__timer_start(ch->w, &ch->timer,
				   zcrpc__now_ns() + ZCRPC_GRANT_RETRY_NS);
}

void zcrpc__ccall_bind_and_grant(zcrpc_channel *ch, zcrpc_conn *conn,
				 struct ccall *c)
{
	const struct zcrpc_frame *f = &c->reply;
	zcrpc_remote_region r;
	struct zcrpc_frame g;
	zcrpc_status st;

	st = c->has_reply_into
		     ? zcrpc_mr_grant(c->reply_into.mr, conn,
				      c->reply_into.offset, f->bulk_len, &r,
				      &c->reply_grant)
		     : zcrpc_mr_grant(c->dst_buf->mr, conn, 0, f->bulk_len, &r,
				      &c->reply_grant);
	if (st == ZCRPC_RESOURCE_EXHAUSTED) {
		c->reply_grant = NULL;
		park_grant(ch, c); /* the bind slots are all in the ring */
		return;
	}
	if (st != ZCRPC_OK) {
		c->reply_grant = NULL;
		zcrpc__ccall_complete(ch, c, ZCRPC_INTERNAL,
				      "cannot grant the reply target");
		return;
	}
	memset(&g, 0, sizeof(g));
	g.type = ZCRPC_FRAME_BULK_GRANT;
	g.call_id = f->bulk_token; /* the server's reference */
	g.bulk_addr = r.addr;
	g.bulk_len = r.len;
	g.bulk_rkey = r.rkey;
	g.bulk_token = zcrpc__ccall_ref(ch, c);
	/* c->out held the request, sent long ago: it holds the grant now. */
	st = zcrpc__out_build(ch->w, &g, NULL, 0, 0, NULL, NULL, NULL, &c->out);
	if (st == ZCRPC_OK) {
		st = zcrpc_conn_send_msg(conn, &c->out.msg, c->out.len);
		if (st == ZCRPC_RESOURCE_EXHAUSTED) {
			/* No room now (the send queue or the server's
			 * credits): the grant waits, built. */
			park_grant(ch, c);
			return;
		}
		if (st != ZCRPC_OK)
			zcrpc_msg_free(ch->w, &c->out.msg);
	}
	if (st != ZCRPC_OK) {
		/* The server never learnt the key; the window goes. */
		zcrpc_grant_revoke(c->reply_grant, NULL);
		c->reply_grant = NULL;
		zcrpc__ccall_complete(ch, c, ZCRPC_UNAVAILABLE,
				      "cannot send the grant");
		return;
	}
	c->state = CS_REPLY_BULK;
	c->granted = 1;
}

void zcrpc__ccall_grant_reply_target(zcrpc_channel *ch, zcrpc_conn *conn,
				     struct ccall *c,
				     const struct zcrpc_frame *f)
{
	if (take_reply_target(ch, conn, c, f) == 0)
		zcrpc__ccall_bind_and_grant(ch, conn, c);
}

/* @c's grant, parked, will not go (the call completed): the server never
 * learnt the key, so a window bound goes now and no zombie waits for a
 * write. */
void zcrpc__ccall_drop_grant(zcrpc_channel *ch, struct ccall *c)
{
	zcrpc__list_remove(&c->qlink);
	c->grant_parked = 0;
	if (c->out.msg.data)
		zcrpc_msg_free(ch->w, &c->out.msg);
	if (c->reply_grant)
		zcrpc_grant_revoke(c->reply_grant, NULL);
	c->reply_grant = NULL;
}

int zcrpc__channel_send_grants(zcrpc_channel *ch, zcrpc_conn *conn)
{
	struct zcrpc__list *n, *tmp;

	zcrpc__list_foreach_safe(n, tmp, &ch->grants)
	{
		struct ccall *c = zcrpc__ccall_of(n, qlink);
		zcrpc_status st;

		if (c->conn != conn)
			continue;
		if (!c->reply_grant) { /* waiting for a bind slot */
			zcrpc__list_remove(&c->qlink);
			c->grant_parked = 0;
			zcrpc__ccall_bind_and_grant(ch, conn, c);
			if (c->grant_parked)
				return 1; /* parked again, at the back */
			continue;
		}
		st = zcrpc_conn_send_msg(conn, &c->out.msg, c->out.len);
		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return 1; /* on_writable brings us back */
		zcrpc__list_remove(&c->qlink);
		c->grant_parked = 0;
		if (st != ZCRPC_OK) {
			zcrpc_msg_free(ch->w, &c->out.msg);
			zcrpc_grant_revoke(c->reply_grant, NULL);
			c->reply_grant = NULL;
			zcrpc__ccall_complete(ch, c, ZCRPC_UNAVAILABLE,
					      "cannot send the grant");
			continue;
		}
		c->state = CS_REPLY_BULK;
		c->granted = 1;
	}
	return 0;
}

void zcrpc__ccall_on_grant(zcrpc_channel *ch, zcrpc_conn *conn,
			   const struct zcrpc_frame *f)
{
	struct ccall *c = zcrpc__ccall_lookup(ch, f->call_id);
	zcrpc_remote_region r;
	const zcrpc_mr *mr;
	size_t off;
	uint32_t imm = f->bulk_token;
	zcrpc_status st;

	if (!c || c->conn != conn || c->state != CS_SENT || !c->bulk_len) {
		ch->st.late_replies++;
		return;
	}
	if (f->bulk_len < c->bulk_len) {
		zcrpc__channel_protocol_error(
			ch, conn, "grant smaller than the bulk part");
		return;
	}
	r.addr = f->bulk_addr;
	r.len = f->bulk_len;
	r.rkey = f->bulk_rkey;
	r.reserved = 0;
	if (c->src_buf) {
		mr = c->src_buf->mr;
		off = 0;
	} else {
		mr = c->src_mr;
		off = c->src_off;
	}
	st = zcrpc_conn_write(conn, mr, off, c->bulk_len, &r, 0, &imm,
			      (void *)(uintptr_t)zcrpc__ccall_ref(ch, c));
	if (st != ZCRPC_OK) {
		zcrpc__ccall_complete(ch, c, st,
				      "writing the request attachment failed");
		return;
	}
	c->state = CS_WRITING;
}

void zcrpc__ccall_on_write_done(zcrpc_conn *conn, void *uctx, zcrpc_status st,
				void *arg)
{
	zcrpc_channel *ch = arg;
	struct ccall *c;

	if ((uintptr_t)uctx & ZCRPC__STREAM_WRITE_TAG) {
		zcrpc__cstream_on_write_done(ch, conn, (uint32_t)(uintptr_t)uctx,
					     st);
		return;
	}
	c = zcrpc__ccall_lookup(ch, (uint32_t)(uintptr_t)uctx);
	if (!c || c->state != CS_WRITING)
		return;
	c->state = CS_SENT;
	zcrpc__bulk_put(&ch->bulk, c->src_buf);
	c->src_buf = NULL;
	if (c->cancel_after_write) {
		/* Now that our write is out, CANCEL cannot overtake it. */
		c->cancel_after_write = 0;
		zcrpc__ccall_send_cancel(ch, c);
	}
	if (c->write_pending_status) {
		c->write_pending_status = 0;
		zcrpc__ccall_complete(ch, c, c->pending_status, c->pending_msg);
		return;
	}
	if (st != ZCRPC_OK)
		zcrpc__ccall_complete(ch, c, ZCRPC_UNAVAILABLE,
				      "writing the request attachment failed");
}

void zcrpc__ccall_on_write_imm(zcrpc_conn *conn, uint32_t imm, size_t len,
			       void *arg)
{
	zcrpc_channel *ch = arg;
	struct ccall *c = zcrpc__ccall_lookup(ch, imm);

	if (!c || c->conn != conn) {
		ch->st.late_replies++;
		return;
	}
	if ((c->state == CS_ZOMBIE || (c->state == CS_DONE && c->granted)) &&
	    !c->revoking) {
		/* Completed (its callback may still be queued) while the
		 * server wrote: the write landed, so it can write no more. */
		c->revoking = 1;
		if (zcrpc_grant_revoke(c->reply_grant, (void *)(uintptr_t)imm) !=
		    ZCRPC_OK)
			zcrpc_conn_close(conn); /* closing: freed with it */
		c->reply_grant = NULL;
		return;
	}
	if (c->state != CS_REPLY_BULK) {
		zcrpc__channel_protocol_error(ch, conn, "unexpected write");
		return;
	}
	if (len != zcrpc__bulk_last_piece((size_t)c->reply.bulk_len,
					  zcrpc_conn_write_piece(conn))) {
		c->bulk_bad = 1; /* fails once revoked: nothing may change */
		ch->st.bulk_bad_writes++;
	}
	/* The reply is read only once the server cannot change it. */
	c->state = CS_REPLY_REVOKING;
	if (zcrpc_grant_revoke(c->reply_grant, (void *)(uintptr_t)imm) != ZCRPC_OK)
		zcrpc_conn_close(conn); /* closing: the call fails with it */
	c->reply_grant = NULL;
	c->granted = 0;
}

void zcrpc__ccall_on_revoked(zcrpc_conn *conn, void *uctx, zcrpc_status st,
			     void *arg)
{
	zcrpc_channel *ch = arg;
	struct ccall *c =
		uctx ? zcrpc__ccall_lookup(ch, (uint32_t)(uintptr_t)uctx)
		     : NULL;
	const void *bulk;

	if (!c || c->conn != conn)
		return;
	if (c->revoking) {
		/* The grant is over (a failed revoke means a dead QP: safe
		 * too). A call still on the done list is freed by
		 * zcrpc__channel_run_done. */
		c->revoking = 0;
		c->granted = 0;
		if (c->state == CS_ZOMBIE)
			zcrpc__ccall_free(ch, c);
		return;
	}
	if (c->state != CS_REPLY_REVOKING || st != ZCRPC_OK)
		return; /* the connection is going: the call fails with it */
	if (c->write_pending_status) { /* cancelled or expired meanwhile */
		c->write_pending_status = 0;
		c->state = CS_SENT;
		zcrpc__ccall_complete(ch, c, c->pending_status, c->pending_msg);
		return;
	}
	if (c->bulk_bad && c->stream_part) {
		c->state = CS_SENT;
		zcrpc__ccall_complete(
			ch, c, ZCRPC_INVALID_ARGUMENT,
			"a stream message by RDMA WRITE: the server's write "
			"with immediate carried another byte count than it "
			"announced");
		return;
	}
	if (c->bulk_bad) {
		c->state = CS_SENT;
		zcrpc__ccall_complete(
			ch, c, ZCRPC_INTERNAL,
			"reply attachment: the server's write with immediate "
			"carried another byte count than the reply announced");
		return;
	}
	bulk = c->dst_buf ? c->dst_buf->ptr
			  : (const uint8_t *)zcrpc__mr_addr(c->reply_into.mr) +
				    c->reply_into.offset;
	/* c->reply points into the kept receive slot, valid until
	 * zcrpc__ccall_free releases it. */
	zcrpc__ccall_complete_with_reply(ch, c, &c->reply, bulk,
					 (size_t)c->reply.bulk_len);
}

/* The completed calls whose reply target is still granted: one whose
 * server has not written for ZCRPC_GRANT_GRACE_NS has its connection closed
 * (only that ends the grant safely). Lowers *@next_due to when this must
 * run again. */
void zcrpc__channel_check_zombies(zcrpc_channel *ch, int64_t now,
				  int64_t *next_due)
{
	struct zcrpc__list *n, *tmp;
	struct ccall *c;

	zcrpc__list_foreach_safe(n, tmp, &ch->zombies)
	{
		c = zcrpc__ccall_of(n, link);
		if (c->revoking)
			continue;
		if (now >= c->zombie_deadline_ns) {
			/* The server holds a grant it does not use: only
			 * tearing the connection down ends it safely. Closing
			 * answers revokes, which may free other zombies: scan
			 * again on the next run. */
			c->zombie_deadline_ns = now + ZCRPC_GRANT_GRACE_NS;
			if (!zcrpc__conn_closing(c->conn) &&
			    zcrpc_conn_get_state(c->conn) ==
				    ZCRPC_CONN_ESTABLISHED) {
				ch->st.grant_timeouts++;
				zcrpc_conn_close(c->conn);
				*next_due = now;
				break;
			}
			continue;
		}
		if (!*next_due || c->zombie_deadline_ns < *next_due)
			*next_due = c->zombie_deadline_ns;
	}
}
