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
					   const void *data)
{
	zcrpc_channel *ch = s->ch;
	struct zcrpc__bulkbuf *b;
	struct zcrpc__out out;
	struct zcrpc_frame f;
	zcrpc_status st;

	if (zcrpc__bulk_get(&ch->bulk, len, &b) != ZCRPC_OK)
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
	if (fill)
		fill(b->ptr, len, ctx);
	else
		memcpy(b->ptr, data, len);
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

	if (!s->att_out || s->att_writing) {
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
	if (zcrpc_conn_write(conn, s->att_out->mr, 0, s->att_len, &r, 0, &imm,
			     (void *)(ZCRPC__STREAM_WRITE_TAG | s->ref)) !=
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

	if (s && s->att_out && s->att_writing) {
		zcrpc__bulk_put(&ch->bulk, s->att_out);
		s->att_out = NULL;
		s->att_writing = 0;
		if (s->cancel_after_write && st == ZCRPC_OK)
			zcrpc__channel_cancel_ref(ch, conn, ref,
						  ZCRPC_FRAME_F_STREAM);
		s->cancel_after_write = 0;
		if (s->ended)
			return;
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

	if (!s->att_out)
		return;
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
	c->stream_part = 1;
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
