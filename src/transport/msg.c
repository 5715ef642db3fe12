/* zcrpc — messages: the public message API (zcrpc_conn_send,
 * zcrpc_conn_send_msg, zcrpc_msg_alloc / free, zcrpc_conn_recv_keep), the
 * transport's own control messages, and a received message's delivery
 * (header checks, the credits it returns, CLOSE, on_recv). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "../core/le.h"

/* Credits an ordinary message needs (docs/protocol.md §3): one is kept for
 * credit updates, and — when the peer granted at least 8 — one more for
 * urgent control frames (zcrpc__conn_send_msg_urgent: a CANCEL). */
uint32_t zcrpc__credits_for_data(const zcrpc_conn *c)
{
	return c->peer_recv_depth >= 8 ? 3 : 2;
}

int zcrpc_conn_can_send(const zcrpc_conn *c)
{
	return c && c->state == ZCRPC_CONN_ESTABLISHED && !c->closing &&
	       c->credits >= zcrpc__credits_for_data(c) &&
	       zcrpc__sq_room(c) >= 1;
}

static zcrpc_status check_send(zcrpc_conn *c, size_t len, uint32_t need)
{
	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return ZCRPC_FAILED_PRECONDITION;
	if (len > c->peer_max_msg)
		return ZCRPC_INVALID_ARGUMENT;
	if (c->credits < need) {
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
	int rc = zcrpc__credits_post_msg(c, s, ZCRPC_MSG_DATA, len,
					 ZCRPC_SQ_MSG);

	if (rc) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "ibv_post_send: %s",
				 strerror(rc));
		return ZCRPC_UNAVAILABLE;
	}
	c->stats.msgs_sent++;
	c->stats.bytes_sent += len;
	c->last_data_ns = c->w->now_ns;
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
	rc = zcrpc__credits_post_msg(c, &s, type, len,
				     last ? ZCRPC_SQ_MSG_LAST : ZCRPC_SQ_MSG);
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

static zcrpc_status send_msg(zcrpc_conn *c, zcrpc_msg *m, size_t len,
			     uint32_t need)
{
	struct zcrpc__slot s;
	zcrpc_status st;

	if (!c || !m)
		return ZCRPC_INVALID_ARGUMENT;
	if (zcrpc__pool_lookup(c->w->pool, m->id, &s) != ZCRPC_OK ||
	    m->data != s.ptr + ZCRPC_MSG_HDR_LEN ||
	    len > s.size - ZCRPC_MSG_HDR_LEN)
		return ZCRPC_INVALID_ARGUMENT;
	st = check_send(c, len, need);
	if (st != ZCRPC_OK)
		return st;
	st = send_slot(c, &s, len);
	if (st == ZCRPC_OK)
		memset(m, 0, sizeof(*m));
	return st;
}

zcrpc_status zcrpc_conn_send_msg(zcrpc_conn *c, zcrpc_msg *m, size_t len)
{
	return c ? send_msg(c, m, len, zcrpc__credits_for_data(c))
		 : ZCRPC_INVALID_ARGUMENT;
}

zcrpc_status zcrpc__conn_send_msg_urgent(zcrpc_conn *c, zcrpc_msg *m,
					 size_t len)
{
	return send_msg(c, m, len, 2); /* the credit for updates stays */
}

zcrpc_status zcrpc_conn_send(zcrpc_conn *c, const void *data, size_t len)
{
	struct zcrpc__slot s;
	zcrpc_status st;

	if (!c || (!data && len))
		return ZCRPC_INVALID_ARGUMENT;
	st = check_send(c, len, zcrpc__credits_for_data(c));
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
	s = &c->dev->srq.slot[c->cur_recv];
	out->data = s->ptr + ZCRPC_MSG_HDR_LEN;
	out->capacity = s->size - ZCRPC_MSG_HDR_LEN;
	out->id = s->id;
	c->kept = 1;
	return ZCRPC_OK;
}

/* A well-formed CLOSE (docs/protocol.md §5): only on a connection that
 * negotiated it, 8 bytes, a status code; the reserved word is ignored. */
static int is_close(const zcrpc_conn *c, const uint8_t *p, uint32_t len)
{
	return p[0] == ZCRPC_MSG_CLOSE && (c->features & ZCRPC_FEAT_CLOSE) &&
	       len == ZCRPC_CLOSE_MSG_LEN &&
	       zcrpc__get_le32(p + ZCRPC_MSG_HDR_LEN) < ZCRPC_STATUS_COUNT;
}

/* A well-formed RELEASE (docs/protocol.md §3): only with FEAT_SHARED, a
 * 4-byte count. */
static int is_release(const zcrpc_conn *c, const uint8_t *p, uint32_t len)
{
	return p[0] == ZCRPC_MSG_RELEASE && (c->features & ZCRPC_FEAT_SHARED) &&
	       len == ZCRPC_RELEASE_MSG_LEN;
}

/* A well-formed WRITTEN (docs/protocol.md §4): only on a connection whose
 * writes end with it, 8 bytes. */
static int is_written(const zcrpc_conn *c, const uint8_t *p, uint32_t len)
{
	return p[0] == ZCRPC_MSG_WRITTEN && c->use_written &&
	       len == ZCRPC_WRITTEN_MSG_LEN;
}

void zcrpc__msg_on_recv(zcrpc_conn *c, uint32_t pos, uint32_t byte_len)
{
	const uint8_t *p = c->dev->srq.slot[pos].ptr;
	uint32_t len;
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
	if (len != byte_len - ZCRPC_MSG_HDR_LEN || len > c->w->opts.max_msg ||
	    p[1] != 0 ||
	    (p[0] != ZCRPC_MSG_DATA && p[0] != ZCRPC_MSG_CREDIT &&
	     !is_close(c, p, len) && !is_release(c, p, len) &&
	     !is_written(c, p, len)) ||
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
	if (zcrpc__credits_returned(c, zcrpc__get_le16(p + 2)))
		return;
	if (p[0] == ZCRPC_MSG_WRITTEN) { /* as a write with immediate */
		zcrpc__write_on_imm(c, pos, zcrpc__get_le32(p + ZCRPC_MSG_HDR_LEN),
				    zcrpc__get_le32(p + ZCRPC_MSG_HDR_LEN + 4));
		return;
	}
	kept = 0;
	if (p[0] == ZCRPC_MSG_CLOSE)
		zcrpc__conn_on_close_msg(c, p + ZCRPC_MSG_HDR_LEN);
	if (p[0] == ZCRPC_MSG_RELEASE &&
	    zcrpc__credits_on_release(c,
				      zcrpc__get_le32(p + ZCRPC_MSG_HDR_LEN)))
		return;
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
	/* kept: the application owns the slot now; the position gets a
	 * fresh one */
	zcrpc__conn_recv_done(c, kept);
}
