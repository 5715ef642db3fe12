/* zcrpc — a client's large stream messages by RDMA WRITE (docs/protocol.md
 * §8, "Large messages"): the client copies the message into registered
 * memory of its channel's bulk cache and announces it (MESSAGE with BULK);
 * the server grants memory for it with the call-record machinery of
 * request parts (server_bulk.c: budget, buffer registered off-thread,
 * window, the write's time limit, the revoke before anybody reads it) and
 * hands the landed message to the stream in place. A stream has at most
 * one such message going out (the writer) and one granted (the reader);
 * what arrives behind it waits, in order, as for a paused reader. */
#include "client_internal.h"
#include "server_internal.h"
#include "stream_internal.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(uintptr_t) >= 8,
	       "a write's context holds a tag above a 32-bit reference");

/* A buffer whose stream went while its WRITE was posted. */
struct zcrpc__stream_orphan {
	struct zcrpc__stream_orphan *next;
	uint32_t ref;
	int cancel; /* its stream's CANCEL goes once the write completed */
	struct zcrpc__bulkbuf *b;
};

/* ---- the writer (client) ------------------------------------------------ */

int zcrpc__cstream_attaches(const zcrpc_stream *s, size_t len)
{
	return s->client && s->sent_open && s->conn &&
	       len > s->ch->o.bulk_threshold &&
	       zcrpc_conn_get_state(s->conn) == ZCRPC_CONN_ESTABLISHED &&
	       zcrpc__conn_has_stream_bulk(s->conn);
}

zcrpc_status zcrpc__cstream_write_attached(zcrpc_stream *s, size_t len,
					   zcrpc_fill_fn fill, void *ctx,
					   const void *data,
					   const zcrpc_bulk *src)
{
	zcrpc_channel *ch = s->ch;
	struct zcrpc__bulkbuf *b = NULL;
	struct zcrpc__out out;
	struct zcrpc_frame f;
	zcrpc_status st;

	if (!src && zcrpc__bulk_get(&ch->bulk, len, &b) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_MESSAGE;
	f.flags = ZCRPC_FRAME_F_BULK;
	f.call_id = s->ref;
	f.bulk_len = len;
	st = zcrpc__out_build(s->w, &f, NULL, 0, 0, NULL, NULL, NULL, &out);
	if (st != ZCRPC_OK) {
		zcrpc__bulk_put(&ch->bulk, b);
		return st;
	}
	if (src) { /* in place: written from the caller's registration */
		s->att_user = 1;
		s->att_mr = src->mr;
		s->att_off = src->offset;
	} else if (fill) {
		fill(b->ptr, len, ctx);
	} else {
		memcpy(b->ptr, data, len);
	}
	if (!src)
		ch->st.copied_bytes += len;
	s->att_out = b;
	s->att_len = len;
	s->att_writing = 0;
	s->send_window--;
	s->sent_any = 1;
	zcrpc__stream_ic_message(s, 1, len);
	zcrpc__cstream_send(s, &out);
	return ZCRPC_OK;
}

void zcrpc__cstream_on_grant(zcrpc_stream *s, zcrpc_conn *conn,
			     const struct zcrpc_frame *f)
{
	zcrpc_remote_region r;
	uint32_t imm = f->bulk_token;

	if ((!s->att_out && !s->att_user) || s->att_writing) {
		zcrpc__channel_protocol_error(
			s->ch, conn, "a grant for no stream message");
		return;
	}
	if (f->bulk_len < s->att_len) {
		zcrpc__channel_protocol_error(
			s->ch, conn, "grant smaller than the stream message");
		return;
	}
	r.addr = f->bulk_addr;
	r.len = f->bulk_len;
	r.rkey = f->bulk_rkey;
	r.reserved = 0;
	if (zcrpc_conn_write(conn, s->att_out ? s->att_out->mr : s->att_mr,
			     s->att_out ? 0 : s->att_off, s->att_len, &r, 0,
			     &imm, (void *)(ZCRPC__STREAM_WRITE_TAG | s->ref)) !=
	    ZCRPC_OK) {
		zcrpc_conn_close(conn); /* its streams end UNAVAILABLE */
		return;
	}
	s->att_writing = 1;
}

void zcrpc__cstream_on_write_done(zcrpc_channel *ch, zcrpc_conn *conn,
				  uint32_t ref, zcrpc_status st)
{
	zcrpc_stream *s = ch->has_streams
				  ? zcrpc__call_table_lookup(&ch->streams, ref)
				  : NULL;
	struct zcrpc__stream_orphan **pp, *o;

	if (s && (s->att_out || s->att_user) && s->att_writing) {
		zcrpc__bulk_put(&ch->bulk, s->att_out);
		s->att_out = NULL;
		s->att_user = 0;
		s->att_writing = 0;
		if (s->cancel_after_write && st == ZCRPC_OK)
			zcrpc__channel_cancel_ref(ch, conn, ref,
						  ZCRPC_FRAME_F_STREAM);
		s->cancel_after_write = 0;
		if (s->ended) {
			/* its on_finish may have waited for the device to let
			 * go of the caller's memory */
			zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns());
			return;
		}
		if (st != ZCRPC_OK) {
			zcrpc__stream_end(s, ZCRPC_UNAVAILABLE,
					  "writing a stream message failed");
			return;
		}
		ch->st.stream_bulk_msgs++;
		zcrpc__stream_pump(s); /* the half-close that waited */
		zcrpc__stream_writable_again(s);
		return;
	}
	for (pp = &ch->orphans; (o = *pp); pp = &o->next) {
		if (o->ref != ref)
			continue;
		*pp = o->next;
		if (o->cancel && st == ZCRPC_OK)
			zcrpc__channel_cancel_ref(ch, conn, ref,
						  ZCRPC_FRAME_F_STREAM);
		zcrpc__bulk_put(&ch->bulk, o->b);
		free(o);
		return;
	}
}

void zcrpc__cstream_drop_attachment(zcrpc_stream *s)
{
	zcrpc_channel *ch = s->ch;
	struct zcrpc__stream_orphan *o;

	if (!s->att_out) {
		/* in place: its write completed, or the channel goes */
		s->att_user = 0;
		s->att_writing = 0;
		return;
	}
	if (s->att_writing && !ch->destroying &&
	    (o = malloc(sizeof(*o)))) {
		/* The device may still read the buffer: it goes back with the
		 * write's completion. */
		o->ref = s->ref;
		o->cancel = s->cancel_after_write;
		o->b = s->att_out;
		o->next = ch->orphans;
		ch->orphans = o;
	} else {
		/* Not written yet (or the channel's connections go now, or
		 * no memory for the note: it is only ever read). */
		zcrpc__bulk_put(&ch->bulk, s->att_out);
	}
	s->att_out = NULL;
	s->att_writing = 0;
}

void zcrpc__cstreams_free_orphans(zcrpc_channel *ch)
{
	struct zcrpc__stream_orphan *o;

	while ((o = ch->orphans)) {
		ch->orphans = o->next;
		zcrpc__bulk_put(&ch->bulk, o->b);
		free(o);
	}
}

/* ---- the reader (server) ------------------------------------------------ */

void zcrpc__sstream_start_part(zcrpc_stream *st, uint64_t len)
{
	struct sconn *sc = st->sc;
	zcrpc_server *s = st->s;
	zcrpc_server_call *c;

	if (!sc || st->ended)
		return;
	if (len > st->max_message) {
		zcrpc__sstream_refuse(st, ZCRPC_RESOURCE_EXHAUSTED,
				      "a stream message above the reader's limit");
		return;
	}
	c = zcrpc__call_table_take(&s->calls);
	if (!c) {
		zcrpc__sstream_refuse(st, ZCRPC_RESOURCE_EXHAUSTED,
				      "too many calls at the server to take "
				      "a stream message by RDMA WRITE");
		return;
	}
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->qlink);
	c->s = s;
	c->sc = sc;
	c->m = NULL;
	c->client_ref = st->ref;
	c->stream_part = ZCRPC__PART_IN;
	c->stream = st;
	memset(&c->f, 0, sizeof(c->f));
	c->f.type = ZCRPC_FRAME_MESSAGE;
	c->f.flags = ZCRPC_FRAME_F_BULK;
	c->f.call_id = st->ref;
	c->f.bulk_len = len;
	c->n_md = 0;
	st->att_ref = zcrpc__scall_ref(s, c);
	zcrpc__list_push_front(&sc->calls, &c->link);
	zcrpc__scall_request_bulk(s, sc, c); /* may refuse and free it */
}

void zcrpc__sstream_part_landed(zcrpc_server *s, zcrpc_server_call *c)
{
	zcrpc_stream *st = c->stream;

	c->stream = NULL;
	c->state = SS_RUNNING;
	if (st) {
		st->att_ref = 0; /* (the next may be granted from in here) */
		s->st.stream_bulk_msgs++;
		zcrpc__stream_take_landed(st, c->req_bulk->ptr,
					  (size_t)c->f.bulk_len);
	}
	zcrpc__scall_free(s, c); /* the buffer goes back to the cache */
}

void zcrpc__sstream_part_release(zcrpc_stream *st, int cancel)
{
	zcrpc_server_call *c;

	if (st->att_out_ref) {
		/* The writer's record runs its course without the stream: its
		 * buffer goes back when the write completed or its time for a
		 * grant ran out. */
		c = zcrpc__scall_lookup(st->s, st->att_out_ref);
		st->att_out_ref = 0;
		st->att_out_user = 0;
		if (c && c->stream == st)
			c->stream = NULL;
	}
	if (!st->att_ref)
		return;
	c = zcrpc__scall_lookup(st->s, st->att_ref);
	st->att_ref = 0;
	if (!c || c->stream != st)
		return;
	c->stream = NULL;
	if (cancel && c->sc)
		zcrpc__scall_cancel(c->sc, c);
	else if (c->state == SS_AWAIT_BUF)
		/* no grant went: nobody can write into it */
		zcrpc__scall_free(st->s, c);
	/* Granted: freed when the write lands or its time limit ends it. */
}

/* ---- the writer (server) ------------------------------------------------ */
/* A server's large message goes as a reply part does (server_reply.c,
 * server_bulk.c): a call record holds the registered copy (its buffer from
 * the server's cache, or registered off-thread while the bytes wait on the
 * heap), the MESSAGE [BULK] names the record in its bulk token, the
 * client's BULK_GRANT for that record starts the WRITE, and the record is
 * freed when the write completed; a client that grants nothing within the
 * write time limit ends the stream. */

int zcrpc__sstream_attaches(const zcrpc_stream *st, size_t len)
{
	return !st->client && st->sc && len > st->s->o.bulk_threshold &&
	       zcrpc__conn_has_server_stream_bulk(st->sc->conn);
}

zcrpc_status zcrpc__sstream_write_attached(zcrpc_stream *st, size_t len,
					   zcrpc_fill_fn fill, void *ctx,
					   const void *data,
					   const zcrpc_bulk *src)
{
	zcrpc_server *s = st->s;
	struct sconn *sc = st->sc;
	zcrpc_server_call *c;
	struct zcrpc__out out;
	struct zcrpc_frame f;
	zcrpc_status rc;
	uint32_t ref;
	void *dst;

	c = zcrpc__call_table_take(&s->calls);
	if (!c)
		return ZCRPC_RESOURCE_EXHAUSTED;
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->qlink);
	c->s = s;
	c->sc = sc;
	c->m = NULL;
	c->client_ref = st->ref;
	c->stream_part = ZCRPC__PART_OUT;
	c->stream = NULL; /* set once it is the stream's */
	c->n_md = 0;
	c->state = SS_RUNNING;
	ref = zcrpc__scall_ref(s, c);
	if (src) { /* in place: written from the caller's registration */
		c->reply_src = *src;
		rc = ZCRPC_OK;
		dst = NULL;
	} else if ((rc = zcrpc__bulk_get_async(&s->bulk, len, ref,
					       &c->reply_buf)) ==
		   ZCRPC_UNAVAILABLE) {
		c->reply_heap = malloc(len);
		dst = c->reply_heap;
		rc = dst ? ZCRPC_OK : ZCRPC_RESOURCE_EXHAUSTED;
	} else {
		dst = rc == ZCRPC_OK ? c->reply_buf->ptr : NULL;
	}
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_MESSAGE;
	f.flags = ZCRPC_FRAME_F_BULK;
	f.call_id = st->ref;
	f.bulk_len = len;
	f.bulk_token = ref;
	if (rc == ZCRPC_OK)
		rc = zcrpc__out_build(s->w, &f, NULL, 0, 0, NULL, NULL, NULL,
				      &out);
	if (rc != ZCRPC_OK) {
		zcrpc__scall_free(s, c); /* the buffer goes back */
		return rc;
	}
	if (dst) {
		if (fill)
			fill(dst, len, ctx);
		else
			memcpy(dst, data, len);
		s->st.copied_bytes += len;
	}
	c->reply_src.len = len;
	c->stream = st;
	zcrpc__list_push_front(&sc->calls, &c->link);
	st->att_out_ref = ref;
	st->att_out_user = src != NULL;
	st->send_window--;
	st->sent_any = 1;
	zcrpc__stream_ic_message(st, 1, len);
	if (c->reply_heap) {
		/* zcrpc__server_on_buffer sends it (nothing of the stream
		 * goes before: it is busy until the write completed) */
		c->reply_out = out;
		c->state = SS_REPLY_BUF;
		s->st.bulk_waits++;
		zcrpc__timer_start(s->w, &s->timer,
				   zcrpc__now_ns() + ZCRPC_RETRY_NS);
		return ZCRPC_OK;
	}
	zcrpc__sstream_send(st, &out);
	c->state = SS_REPLY_GRANT;
	c->bulk_deadline_ns = zcrpc__now_ns() + s->write_timeout_ns;
	zcrpc__server_watch_bulk_deadline(s, c->bulk_deadline_ns);
	return ZCRPC_OK;
}

void zcrpc__sstream_part_written(zcrpc_server *s, zcrpc_server_call *c,
				 zcrpc_status st)
{
	zcrpc_stream *str = c->stream;

	c->stream = NULL;
	if (!str)
		return;
	str->att_out_ref = 0;
	str->att_out_user = 0;
	if (str->ended) {
		/* its on_finish may have waited for the device to let go of
		 * the handler's memory */
		zcrpc__timer_start(str->w, &str->timer, zcrpc__now_ns());
		return;
	}
	if (st != ZCRPC_OK) {
		if (c->sc && c->state == SS_REPLY_GRANT)
			zcrpc__sstream_refuse(
				str, ZCRPC_RESOURCE_EXHAUSTED,
				"the client granted no memory for a stream "
				"message within the server's time limit");
		else
			zcrpc__stream_end(str, ZCRPC_UNAVAILABLE,
					  "writing a stream message failed");
		return;
	}
	s->st.stream_bulk_msgs_sent++;
	zcrpc__stream_pump(str); /* the final status that waited */
	zcrpc__stream_writable_again(str);
}

/* ---- the reader (client) ------------------------------------------------ */
/* The server's large message is taken as a reply part is (client_bulk.c):
 * a call record of the channel (no caller, no callback, not counted as a
 * call) takes a buffer from the channel's cache, grants it to the server's
 * record named by the message, and, once the write landed and the window is
 * revoked, hands the message to the stream in place. */

void zcrpc__cstream_start_part(zcrpc_stream *s, uint64_t len, uint32_t token)
{
	zcrpc_channel *ch = s->ch;
	struct ccall *c;

	if (s->ended || !s->conn)
		return;
	if (len > s->max_message) {
		zcrpc__cstream_refuse(s, ZCRPC_RESOURCE_EXHAUSTED,
				      "a stream message above the reader's limit");
		return;
	}
	c = zcrpc__call_table_take(&ch->calls);
	if (!c) {
		zcrpc__cstream_refuse(s, ZCRPC_RESOURCE_EXHAUSTED,
				      "too many calls at the client to take "
				      "a stream message by RDMA WRITE");
		return;
	}
	memset(c, 0, sizeof(*c));
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->qlink);
	c->ch = ch;
	c->conn = s->conn;
	c->stream_part = 1;
	c->stream = s;
	c->reply.type = ZCRPC_FRAME_MESSAGE;
	c->reply.flags = ZCRPC_FRAME_F_BULK;
	c->reply.call_id = s->ref;
	c->reply.bulk_len = len;
	c->reply.bulk_token = token; /* the server's record */
	if (zcrpc__bulk_get(&ch->bulk, (size_t)len, &c->dst_buf) != ZCRPC_OK) {
		c->state = CS_DONE;
		zcrpc__ccall_free(ch, c);
		zcrpc__cstream_refuse(s, ZCRPC_RESOURCE_EXHAUSTED,
				      "no memory for a stream message");
		return;
	}
	zcrpc__bulk_scrub_for(s->conn, c->dst_buf->ptr, (size_t)len);
	c->state = CS_SENT;
	zcrpc__list_push_front(&ch->active, &c->link);
	s->att_ref = zcrpc__ccall_ref(ch, c);
	zcrpc__ccall_bind_and_grant(ch, s->conn, c); /* may fail it */
}

void zcrpc__cstream_part_landed(zcrpc_channel *ch, struct ccall *c,
				const void *data, size_t len)
{
	zcrpc_stream *s = c->stream;

	c->stream = NULL;
	zcrpc__list_remove(&c->link);
	c->state = CS_DONE;
	if (s) {
		s->att_ref = 0; /* (the next may be granted from in here) */
		ch->st.stream_bulk_msgs_recv++;
		zcrpc__stream_take_landed(s, data, len);
	}
	zcrpc__ccall_free(ch, c); /* the buffer goes back to the cache */
}

void zcrpc__cstream_part_failed(zcrpc_channel *ch, struct ccall *c,
				zcrpc_status st, const char *msg)
{
	zcrpc_stream *s = c->stream;

	(void)ch;
	c->stream = NULL;
	if (!s)
		return;
	s->att_ref = 0;
	if (s->ended) /* its on_finish waited for this message */
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns());
	else
		zcrpc__cstream_refuse(s, st, msg);
}

void zcrpc__cstream_part_release(zcrpc_stream *s)
{
	zcrpc_channel *ch = s->ch;
	struct ccall *c;

	if (!s->att_ref)
		return;
	c = zcrpc__ccall_lookup(ch, s->att_ref);
	s->att_ref = 0;
	if (!c || c->stream != s)
		return;
	c->stream = NULL;
	zcrpc__ccall_complete(ch, c, ZCRPC_CANCELLED, "its stream ended");
}
