/* zcrpc — a server's streams: streaming methods, a stream opened by a
 * client's REQUEST with the stream flag (its on_open on the worker of the
 * connection), the frames the client sends for it (found by the client's
 * reference among the connection's streams), headers, finish, cancel,
 * the deadline, and the ends a closed connection or the server's
 * destruction brings. A client that breaks a stream's rules (a message
 * past its window or after its half-close, a second half-close) loses
 * that stream, answered with a status; the connection stays. */
#include "server_internal.h"
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Streams open at once on one connection; one more is refused
 * RESOURCE_EXHAUSTED (the connection stays). */
#define MAX_STREAMS_PER_CONN 1024U

zcrpc_status zcrpc_server_register_stream(zcrpc_server *s,
					  const char *full_name,
					  const zcrpc_stream_handlers *h)
{
	zcrpc_stream_handlers *copy;
	zcrpc_status st;

	if (!s || !h)
		return ZCRPC_INVALID_ARGUMENT;
	copy = calloc(1, sizeof(*copy));
	if (!copy)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (ZCRPC__ABI_IN(copy, h, ZCRPC__MIN_STREAM_HANDLERS) != ZCRPC_OK ||
	    !copy->on_open || !copy->on_finish) {
		free(copy);
		return ZCRPC_INVALID_ARGUMENT;
	}
	st = zcrpc__server_add_method(s, full_name, NULL, NULL, copy);
	if (st != ZCRPC_OK)
		free(copy);
	return st;
}

void zcrpc__sstream_send(zcrpc_stream *s, struct zcrpc__out *out)
{
	if (!s->sc) {
		zcrpc_msg_free(s->w, &out->msg);
		return;
	}
	zcrpc__sconn_send(s->sc, out);
}

void zcrpc__sstream_free(zcrpc_stream *s)
{
	zcrpc__sstream_part_release(s, 0);
	zcrpc__timer_stop(s->w, &s->timer);
	zcrpc__stream_free_held(s);
	zcrpc__list_remove(&s->link);
	zcrpc__list_remove(&s->slink);
	if (s->sc)
		s->sc->nstreams--;
	free(s);
}

/* Sends the stream's final status without metadata (the library's own
 * ends: deadline, a broken rule, cancel); it waits for a slot if need
 * be. */
static void send_end(zcrpc_stream *s, zcrpc_status st, const char *msg)
{
	struct zcrpc_frame f;

	if (!s->sc)
		return;
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REPLY;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.call_id = s->ref;
	f.status = (uint32_t)st;
	zcrpc__sconn_send_frame(s->sc, &f, msg, zcrpc__status_msg_len(msg), 0);
}

static void end_and_tell(zcrpc_stream *s, zcrpc_status st, const char *msg)
{
	send_end(s, st, msg);
	zcrpc__stream_end(s, st, msg);
}

void zcrpc__sstream_refuse(zcrpc_stream *s, zcrpc_status st, const char *msg)
{
	if (!s->ended)
		s->s->st.streams_refused++;
	end_and_tell(s, st, msg);
}

void zcrpc__sstream_deadline(zcrpc_stream *s)
{
	end_and_tell(s, ZCRPC_DEADLINE_EXCEEDED, "deadline exceeded");
}

void zcrpc__sstream_cancel(zcrpc_stream *s)
{
	end_and_tell(s, ZCRPC_CANCELLED, "cancelled by the server");
}

/* A client frame broke the stream's rules: the stream ends with @st and
 * the client is told why. */
static void client_broke(zcrpc_stream *s, zcrpc_status st, const char *why)
{
	zcrpc__sstream_refuse(s, st, why);
}

static zcrpc_stream *find(struct sconn *sc, uint32_t ref)
{
	struct zcrpc__list *n;

	zcrpc__list_foreach(n, &sc->streams)
	{
		if (zcrpc__stream_of(n)->ref == ref)
			return zcrpc__stream_of(n);
	}
	return NULL;
}

static void reply_simple(struct sconn *sc, uint32_t ref, zcrpc_status st,
			 const char *msg)
{
	struct zcrpc_frame f;

	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REPLY;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.call_id = ref;
	f.status = (uint32_t)st;
	zcrpc__sconn_send_frame(sc, &f, msg, zcrpc__status_msg_len(msg), 0);
}

void zcrpc__sstream_count_message(zcrpc_stream *s, int outgoing, size_t len)
{
	if (outgoing) {
		s->s->st.stream_msgs_sent++;
		s->s->st.stream_bytes_sent += len;
	} else {
		s->s->st.stream_msgs_recv++;
		s->s->st.stream_bytes_recv += len;
	}
}

void zcrpc__sstream_count_end(zcrpc_stream *s)
{
	s->s->st.streams_open--;
	if (s->end_status == ZCRPC_OK)
		s->s->st.streams_ok++;
	else
		s->s->st.streams_failed++;
}

static void on_open(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_server *s = sc->s;
	const struct method *m = zcrpc__server_find_method(s, f->method_id);
	zcrpc_md md[ZCRPC_MD_MAX_PAIRS];
	struct zcrpc__icall ic = {{0}, 0, 0};
	zcrpc_stream_open op;
	zcrpc_stream *st;
	char msg[96];

	s->st.calls++;
	if (!m || !m->sh) {
		s->st.unimplemented++;
		if (m)
			snprintf(msg, sizeof(msg),
				 "method %.60s is not a streaming method",
				 m->name);
		else
			snprintf(msg, sizeof(msg), "unknown method id 0x%08x",
				 (unsigned)f->method_id);
		reply_simple(sc, f->call_id, ZCRPC_UNIMPLEMENTED, msg);
		return;
	}
	if (s->shutting_down) {
		reply_simple(sc, f->call_id, ZCRPC_UNAVAILABLE,
			     "server is shutting down");
		return;
	}
	if (find(sc, f->call_id)) {
		zcrpc__sconn_protocol_error(sc, "a stream opened twice");
		return;
	}
	if (s->root->ics.n) {
		const char *why;
		zcrpc_status ist = zcrpc__server_intercept(s, f, &ic, &why);

		if (ist != ZCRPC_OK) {
			reply_simple(sc, f->call_id, ist, why);
			return;
		}
	}
	if (sc->nstreams >= MAX_STREAMS_PER_CONN ||
	    !(st = calloc(1, sizeof(*st)))) {
		zcrpc__schain_end(&s->root->ics, &ic, ZCRPC_RESOURCE_EXHAUSTED);
		reply_simple(sc, f->call_id, ZCRPC_RESOURCE_EXHAUSTED,
			     "too many streams on the connection");
		return;
	}
	zcrpc__stream_init(st, s->w, m->sh);
	st->ic = ic;
	st->sics = &s->root->ics;
	st->s = s;
	st->sc = sc;
	st->ref = f->call_id;
	st->method_id = f->method_id;
	zcrpc__list_init(&st->slink);
	zcrpc__list_push_back(&sc->streams, &st->link);
	zcrpc__list_push_back(&s->streams, &st->slink);
	sc->nstreams++;
	s->st.streams_started++;
	s->st.streams_open++;
	if (f->deadline_us) {
		st->deadline_ns = zcrpc__now_ns() + (int64_t)f->deadline_us * 1000;
		zcrpc__timer_start(s->w, &st->timer, st->deadline_ns);
	}
	memset(&op, 0, sizeof(op));
	op.size = sizeof(op);
	op.method_id = f->method_id;
	op.n_md = zcrpc__md_view(f, md);
	op.md = op.n_md ? md : NULL;
	op.timeout_us = f->deadline_us ? (int64_t)f->deadline_us : -1;
	st->h.on_open(st, &op, st->h.arg);
}

void zcrpc__sstreams_on_frame(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_stream *s;

	if (f->type == ZCRPC_FRAME_REQUEST) {
		zcrpc__sconn_called(sc);
		on_open(sc, f);
		return;
	}
	if (f->type == ZCRPC_FRAME_HEADERS || f->type == ZCRPC_FRAME_REPLY ||
	    f->type == ZCRPC_FRAME_BULK_GRANT) {
		zcrpc__sconn_protocol_error(sc, "a server's frame from the client");
		return;
	}
	s = find(sc, f->call_id);
	if (!s || s->ended)
		return; /* it ended here first (finish, deadline): late */
	switch (f->type) {
	case ZCRPC_FRAME_MESSAGE:
		if ((f->flags & ZCRPC_FRAME_F_BULK) &&
		    !zcrpc__conn_has_stream_bulk(sc->conn)) {
			zcrpc__sconn_protocol_error(
				sc, "a stream message by RDMA WRITE on a "
				    "connection without them");
			return;
		}
		if (s->half_peer) {
			client_broke(s, ZCRPC_INTERNAL,
				     "a message after the client's half-close");
			break;
		}
		if (zcrpc__stream_on_message(s, f))
			client_broke(s, ZCRPC_RESOURCE_EXHAUSTED,
				     "the client wrote past the stream's window");
		break;
	case ZCRPC_FRAME_WINDOW:
		zcrpc__stream_on_window(s, f);
		break;
	case ZCRPC_FRAME_HALF_CLOSE:
		if (s->half_peer) {
			client_broke(s, ZCRPC_INTERNAL,
				     "a second half-close from the client");
			break;
		}
		s->half_peer = 1;
		if (s->held_head || s->paused || s->att_ref)
			s->half_pending = 1; /* after the held messages */
		else if (s->h.on_half_close)
			s->h.on_half_close(s, s->h.arg);
		break;
	case ZCRPC_FRAME_CANCEL:
		s->s->st.cancelled++;
		zcrpc__sstream_part_release(s, 1);
		zcrpc__stream_end(s, ZCRPC_CANCELLED, "cancelled by the client");
		break;
	default:
		break;
	}
}

zcrpc_status zcrpc_stream_send_headers(zcrpc_stream *s, const zcrpc_md *md,
				       size_t n_md)
{
	struct zcrpc__out out;
	struct zcrpc_frame f;
	zcrpc_status st;

	if (!s || s->client)
		return ZCRPC_INVALID_ARGUMENT;
	if (s->ended || s->sent_any)
		return ZCRPC_FAILED_PRECONDITION;
	if (zcrpc__md_bytes(md, n_md) == (size_t)-1)
		return ZCRPC_INVALID_ARGUMENT;
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_HEADERS;
	f.call_id = s->ref;
	st = zcrpc__out_build(s->w, &f, md, n_md, 0, NULL, NULL, NULL, &out);
	if (st != ZCRPC_OK)
		return st;
	s->sent_any = 1;
	zcrpc__sstream_send(s, &out);
	return ZCRPC_OK;
}

zcrpc_status zcrpc_stream_finish(zcrpc_stream *s, zcrpc_status status,
				 const char *message, const zcrpc_md *md,
				 size_t n_md)
{
	struct zcrpc__out out;
	struct zcrpc_frame f;
	zcrpc_status st;
	size_t n;

	if (!s || s->client)
		return ZCRPC_INVALID_ARGUMENT;
	if (s->ended || s->has_end_out)
		return ZCRPC_FAILED_PRECONDITION;
	if (zcrpc__md_bytes(md, n_md) == (size_t)-1)
		return ZCRPC_INVALID_ARGUMENT;
	if ((unsigned)status >= ZCRPC_STATUS_COUNT) {
		s->s->st.invalid_status++;
		status = ZCRPC_UNKNOWN;
	}
	n = status == ZCRPC_OK ? 0 : zcrpc__status_msg_len(message);
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REPLY;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.call_id = s->ref;
	f.status = (uint32_t)status;
	if (s->sc) {
		st = zcrpc__out_build(s->w, &f, md, n_md, n, NULL, NULL, message,
				      &out);
		if (st != ZCRPC_OK)
			return st; /* RESOURCE_EXHAUSTED: no slot; INVALID_ARGUMENT: too big */
		if (zcrpc__stream_busy(s)) {
			/* after the pieces of the message being written, or
			 * its RDMA WRITE */
			s->s->st.replies++;
			zcrpc__stream_end_after_pieces(
				s, &out, status, status == ZCRPC_OK ? "" : message);
			return ZCRPC_OK;
		}
		zcrpc__sconn_send(s->sc, &out);
	}
	s->s->st.replies++;
	zcrpc__stream_end(s, status, status == ZCRPC_OK ? "" : message);
	return ZCRPC_OK;
}

void zcrpc__sstreams_conn_gone(struct sconn *sc)
{
	struct zcrpc__list *n;

	while ((n = zcrpc__list_first(&sc->streams))) {
		zcrpc_stream *s = zcrpc__stream_of(n);

		zcrpc__list_remove(&s->link);
		zcrpc__list_init(&s->link);
		s->sc = NULL;
		zcrpc__stream_end(s, ZCRPC_UNAVAILABLE,
				  "the client's connection is gone");
	}
	sc->nstreams = 0;
}

void zcrpc__sstreams_destroy(zcrpc_server *s)
{
	struct zcrpc__list *n;

	while ((n = zcrpc__list_first(&s->streams))) {
		zcrpc_stream *st =
			zcrpc__container_of(n, struct zcrpc_stream, slink);

		st->paused = 0;
		st->forced = 1;
		zcrpc__stream_end(st, ZCRPC_CANCELLED, "server destroyed");
		zcrpc__stream_run_finish(st); /* frees it */
	}
}
