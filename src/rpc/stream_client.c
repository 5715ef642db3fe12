/* zcrpc — a channel's streams: opening one (its REQUEST with the stream
 * flag, bound to the channel's connection of the moment), its frames
 * queued in order until that connection takes them, the frames the
 * server sends for it, half-close, cancel, the deadline, and the ends a
 * lost connection or the channel's destruction brings. The stream's
 * slot in the channel's stream table names it on the wire, so a frame
 * for a stream that ended is recognised and dropped. */
#include "client_internal.h"
#include "lb_internal.h"
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* zcrpc_stream_opts_init's values. */
static const zcrpc_stream_opts stream_opts_default = {
	.size = sizeof(zcrpc_stream_opts)};

void zcrpc_stream_opts_init_sized(zcrpc_stream_opts *caller, size_t size)
{
	zcrpc__abi_init(caller, size, &stream_opts_default,
			sizeof(stream_opts_default));
}

static void drop_queue(zcrpc_stream *s)
{
	struct zcrpc__qframe *q;

	zcrpc__batch_drop(&s->batch);
	while ((q = s->q_head)) {
		s->q_head = q->next;
		zcrpc_msg_free(s->w, &q->out.msg);
		free(q);
	}
	s->q_tail = NULL;
}

void zcrpc__cstream_free(zcrpc_stream *s)
{
	zcrpc_channel *ch = s->ch;

	zcrpc__timer_stop(s->w, &s->timer);
	drop_queue(s);
	zcrpc__cstream_drop_attachment(s);
	zcrpc__cstream_part_release(s);
	zcrpc__stream_free_held(s);
	if (s->has_end_frame)
		zcrpc_msg_free(s->w, &s->end_frame);
	s->has_end_frame = 0;
	zcrpc__list_remove(&s->link);
	zcrpc__call_table_release(&ch->streams, s);
	if (zcrpc__list_empty(&ch->live_streams))
		zcrpc__channel_idle_check(ch);
}

/* Sends @s's queued frames while its connection takes them: 0 when none
 * is left, 1 when the transport refused one (on_writable follows). */
static int flush_one(zcrpc_stream *s)
{
	struct zcrpc__qframe *q;

	if (!s->conn || zcrpc_conn_get_state(s->conn) != ZCRPC_CONN_ESTABLISHED)
		return 0; /* its connection's ESTABLISHED (or end) brings it back */
	if (!s->sent_open && !zcrpc__conn_has_streams(s->conn)) {
		drop_queue(s);
		zcrpc__stream_end(s, ZCRPC_UNIMPLEMENTED,
				  "the server does not speak streams");
		return 0;
	}
	while ((q = s->q_head)) {
		zcrpc_status st = zcrpc_conn_send_msg(s->conn, &q->out.msg,
						      q->out.len);

		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return 1;
		s->q_head = q->next;
		if (!s->q_head)
			s->q_tail = NULL;
		free(q);
		if (st != ZCRPC_OK) {
			zcrpc_msg_free(s->w, &q->out.msg);
			drop_queue(s);
			zcrpc__stream_end(s, ZCRPC_UNAVAILABLE,
					  "sending on the stream failed: "
					  "connection closing");
			return 0;
		}
		s->sent_open = 1; /* the first frame is the REQUEST */
	}
	return 0;
}

int zcrpc__cstreams_flush(zcrpc_channel *ch, zcrpc_conn *conn)
{
	struct zcrpc__list *n, *tmp;
	int waiting = 0;

	if (!ch->has_streams)
		return 0;
	zcrpc__list_foreach_safe(n, tmp, &ch->live_streams)
	{
		zcrpc_stream *s = zcrpc__stream_of(n);

		if (s->conn == conn && s->q_head && !s->ended)
			waiting |= flush_one(s);
	}
	return waiting;
}

/* Posts @out now when nothing waits before it, else queues it. */
static void send_now(zcrpc_stream *s, struct zcrpc__out *out)
{
	struct zcrpc__qframe *q;

	/* The usual case: nothing waits before it, so it goes now. */
	if (!s->q_head && s->sent_open && s->conn &&
	    zcrpc_conn_get_state(s->conn) == ZCRPC_CONN_ESTABLISHED) {
		zcrpc_status st = zcrpc_conn_send_msg(s->conn, &out->msg,
						      out->len);

		if (st == ZCRPC_OK)
			return;
		if (st != ZCRPC_RESOURCE_EXHAUSTED) {
			zcrpc_msg_free(s->w, &out->msg);
			zcrpc__stream_end(s, ZCRPC_UNAVAILABLE,
					  "sending on the stream failed: "
					  "connection closing");
			return;
		}
	}
	q = malloc(sizeof(*q));
	if (!q) {
		zcrpc_msg_free(s->w, &out->msg);
		zcrpc__stream_end(s, ZCRPC_RESOURCE_EXHAUSTED,
				  "no memory to queue a stream's frame");
		return;
	}
	q->next = NULL;
	q->out = *out;
	if (s->q_tail)
		s->q_tail->next = q;
	else
		s->q_head = q;
	s->q_tail = q;
	if (q == s->q_head)
		flush_one(s);
}

static void send_batch(struct zcrpc__batch *b, struct zcrpc__out *out)
{
	send_now(zcrpc__container_of(b, zcrpc_stream, batch), out);
}

void zcrpc__cstream_send(zcrpc_stream *s, struct zcrpc__out *out)
{
	/* A small frame of an open stream may wait for the others of this
	 * turn (batch.h); any other frame sends what waits first. */
	if (s->sent_open && s->conn && zcrpc__batch_add(&s->batch, s->conn, out))
		return;
	send_now(s, out);
}

/* Ends @s for a reason of ours (@st, @msg): what it had queued is
 * dropped, and a server that has it is told with a CANCEL. */
static void end_local(zcrpc_stream *s, zcrpc_status st, const char *msg)
{
	drop_queue(s);
	if (s->sent_open && s->att_writing)
		/* its attachment's WRITE is posted: the CANCEL goes once it
		 * completed (docs/protocol.md §7: a client never lets a
		 * CANCEL overtake its write) */
		s->cancel_after_write = 1;
	else if (s->sent_open)
		zcrpc__channel_cancel_ref(s->ch, s->conn, s->ref,
					  ZCRPC_FRAME_F_STREAM);
	zcrpc__stream_end(s, st, msg);
}

void zcrpc__cstream_refuse(zcrpc_stream *s, zcrpc_status st, const char *msg)
{
	end_local(s, st, msg);
}

void zcrpc__cstream_deadline(zcrpc_stream *s)
{
	end_local(s, ZCRPC_DEADLINE_EXCEEDED, "deadline exceeded");
}

static zcrpc_status stream_table(zcrpc_channel *ch)
{
	if (ch->has_streams)
		return ZCRPC_OK;
	if (zcrpc__call_table_init(&ch->streams, ch->o.max_calls,
				   sizeof(struct zcrpc_stream), NULL,
				   NULL) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	zcrpc__list_init(&ch->live_streams);
	ch->has_streams = 1;
	return ZCRPC_OK;
}

/* Binds @s to the channel's connection, connecting when there is none;
 * a channel waiting to reconnect ends it at once (as a call fails). */
static void bind_conn(zcrpc_channel *ch, zcrpc_stream *s)
{
	if (!ch->conn) {
		if (zcrpc__now_ns() < ch->next_attempt_ns) {
			zcrpc__stream_end(s, ch->down_status, ch->down_why[0]
						  ? ch->down_why
						  : "not connected (waiting to reconnect)");
			return;
		}
		zcrpc_status st = zcrpc__channel_connect(ch);

		if (st != ZCRPC_OK) {
			zcrpc__stream_end(s,
					  st == ZCRPC_RESOURCE_EXHAUSTED
						  ? st
						  : ZCRPC_UNAVAILABLE,
					  ch->down_why);
			return;
		}
	}
	s->conn = ch->conn;
}

void zcrpc__cstream_count_message(zcrpc_stream *s, int outgoing, size_t len)
{
	if (outgoing) {
		s->ch->st.stream_msgs_sent++;
		s->ch->st.stream_bytes_sent += len;
	} else {
		s->ch->st.stream_msgs_recv++;
		s->ch->st.stream_bytes_recv += len;
	}
}

void zcrpc__cstream_count_end(zcrpc_stream *s)
{
	s->ch->st.streams_open--;
	if (s->end_status == ZCRPC_OK)
		s->ch->st.streams_ok++;
	else
		s->ch->st.streams_failed++;
}

zcrpc_status zcrpc_stream_start(zcrpc_channel *ch, uint32_t method,
				const zcrpc_stream_opts *o,
				const zcrpc_stream_handlers *h,
				zcrpc_stream **out)
{
	if (!ch || !h || !out)
		return ZCRPC_INVALID_ARGUMENT;
	if (ch->destroying)
		return ZCRPC_FAILED_PRECONDITION;
	if (ch->lb) /* a target channel: on a backend picked now */
		return zcrpc__lb_stream_start(ch, method, o, h, out);
	return zcrpc__stream_start_ics(ch, method, o, h, &ch->ics, NULL, out);
}

zcrpc_status zcrpc__stream_start_ics(zcrpc_channel *ch, uint32_t method,
				     const zcrpc_stream_opts *o,
				     const zcrpc_stream_handlers *h,
				     const struct zcrpc__cchain *ics,
				     zcrpc_channel *owner, zcrpc_stream **out)
{
	zcrpc_stream_opts so = stream_opts_default;
	zcrpc_md all_md[ZCRPC_MD_MAX_PAIRS];
	struct zcrpc__icall ic = {{0}, 0, 0};
	zcrpc_stream_handlers hh;
	struct zcrpc__out req;
	struct zcrpc_frame f;
	zcrpc_stream *s;
	int64_t timeout_us, now;
	size_t mdl;

	memset(&hh, 0, sizeof(hh));
	if (ZCRPC__ABI_IN(&hh, h, ZCRPC__MIN_STREAM_HANDLERS) != ZCRPC_OK ||
	    !hh.on_finish)
		return ZCRPC_INVALID_ARGUMENT;
	if (o && ZCRPC__ABI_IN(&so, o, ZCRPC__MIN_STREAM_OPTS) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	mdl = zcrpc__md_bytes(so.md, so.n_md);
	if (mdl == (size_t)-1 || so.timeout_us < 0 ||
	    ZCRPC_FRAME_HDR_LEN + mdl > zcrpc__worker_max_msg(ch->w))
		return ZCRPC_INVALID_ARGUMENT;
	if (stream_table(ch) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	s = zcrpc__call_table_peek(&ch->streams);
	if (!s)
		return ZCRPC_RESOURCE_EXHAUSTED;
	timeout_us = so.timeout_us ? so.timeout_us : ch->o.default_timeout_us;
	if (ics->n) {
		zcrpc_status st = zcrpc__cchain_start_md(
			ics, method, 1, timeout_us, &so.md, &so.n_md,
			all_md, &ic);

		if (st != ZCRPC_OK)
			return st;
	}
	memset(s, 0, sizeof(*s));
	s->ic = ic;
	zcrpc__stream_init(s, ch->w, &hh);
	s->client = 1;
	s->ch = ch;
	zcrpc__batch_init(&s->batch, ch->w, send_batch, &ch->st.stream_batches,
			  &ch->st.stream_batched_frames);
	if (so.max_message)
		s->max_message = so.max_message;
	s->cics = ics;
	s->owner = owner;
	s->ref = zcrpc__call_table_ref(&ch->streams, s);
	now = zcrpc__now_ns();
	s->deadline_ns = timeout_us ? now + timeout_us * 1000 : 0;
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REQUEST;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.method_id = method;
	f.call_id = s->ref;
	f.deadline_us = zcrpc__stream_deadline_us(s, now);
	if (zcrpc__out_build(ch->w, &f, so.md, so.n_md, 0, NULL, NULL, NULL,
			     &req) != ZCRPC_OK) {
		/* no slot, or the interceptors' metadata made it too big */
		zcrpc__cchain_end(ics, &s->ic, ZCRPC_RESOURCE_EXHAUSTED,
				  "the stream could not be started", NULL, 0);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	zcrpc__call_table_take(&ch->streams);
	zcrpc__list_push_back(&ch->live_streams, &s->link);
	ch->st.streams_started++;
	ch->st.streams_open++;
	if (s->deadline_ns)
		zcrpc__timer_start(ch->w, &s->timer, s->deadline_ns);
	*out = s;
	zcrpc__channel_wake(ch);
	bind_conn(ch, s);
	if (s->ended)
		zcrpc_msg_free(ch->w, &req.msg);
	else
		zcrpc__cstream_send(s, &req);
	return ZCRPC_OK;
}

zcrpc_status zcrpc_stream_close_send(zcrpc_stream *s)
{
	struct zcrpc__out out;

	if (!s)
		return ZCRPC_INVALID_ARGUMENT;
	if (!s->client)
		return ZCRPC_INVALID_ARGUMENT;
	if (s->ended || s->half_local)
		return ZCRPC_FAILED_PRECONDITION;
	if (zcrpc__stream_busy(s)) {
		/* after the message being written (pieces, attachment) */
		s->half_after_big = 1;
		s->half_local = 1;
		return ZCRPC_OK;
	}
	if (zcrpc__stream_build(s, ZCRPC_FRAME_HALF_CLOSE, 0, &out) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	s->half_local = 1;
	zcrpc__cstream_send(s, &out);
	return ZCRPC_OK;
}

zcrpc_status zcrpc_stream_cancel(zcrpc_stream *s)
{
	if (!s || s->ended)
		return ZCRPC_NOT_FOUND;
	if (s->client)
		end_local(s, ZCRPC_CANCELLED, "cancelled by the caller");
	else
		zcrpc__sstream_cancel(s);
	return ZCRPC_OK;
}

/* The server's final status: its message, trailing metadata (kept in
 * the frame, which stays until the stream is freed). */
static void on_end(zcrpc_stream *s, const struct zcrpc_frame *f)
{
	size_t n = f->payload_len < ZCRPC_STATUS_MSG_MAX ? f->payload_len
							  : ZCRPC_STATUS_MSG_MAX;
	char msg[ZCRPC_STATUS_MSG_MAX + 1];

	memcpy(msg, f->payload, n);
	msg[n] = 0;
	drop_queue(s); /* the server has ended it: nothing more goes */
	if (f->md_len && zcrpc_conn_recv_keep(s->conn, &s->end_frame) == ZCRPC_OK) {
		s->has_end_frame = 1;
		s->n_end_md = zcrpc__md_view(f, s->end_md);
	}
	s->graceful = 1;
	zcrpc__stream_end(s, (zcrpc_status)f->status, msg);
}

/* The server broke the stream's rules: that stream ends INTERNAL, the
 * server is told; the connection and its other calls stay. */
static void server_broke(zcrpc_stream *s, const char *why)
{
	end_local(s, ZCRPC_INTERNAL, why);
}

void zcrpc__cstreams_on_frame(zcrpc_channel *ch, zcrpc_conn *conn,
			      const struct zcrpc_frame *f)
{
	zcrpc_stream *s = ch->has_streams
				  ? zcrpc__call_table_lookup(&ch->streams, f->call_id)
				  : NULL;

	if (f->type == ZCRPC_FRAME_REQUEST || f->type == ZCRPC_FRAME_HALF_CLOSE ||
	    f->type == ZCRPC_FRAME_CANCEL) {
		zcrpc__channel_protocol_error(ch, conn,
					      "a client's frame from the server");
		return;
	}
	if (!s || s->conn != conn || s->ended || !s->sent_open)
		return; /* it ended here first (cancel, deadline): late */
	switch (f->type) {
	case ZCRPC_FRAME_REPLY:
		on_end(s, f);
		break;
	case ZCRPC_FRAME_HEADERS:
		if (s->got_headers || s->got_message) {
			server_broke(s, "the server sent its headers twice "
					"or after a message");
			break;
		}
		s->got_headers = 1;
		if (s->h.on_headers) {
			zcrpc_md md[ZCRPC_MD_MAX_PAIRS];
			size_t n = zcrpc__md_view(f, md);

			s->h.on_headers(s, n ? md : NULL, n, s->h.arg);
		}
		break;
	case ZCRPC_FRAME_BULK_GRANT:
		zcrpc__cstream_on_grant(s, conn, f);
		break;
	case ZCRPC_FRAME_MESSAGE:
		if ((f->flags & ZCRPC_FRAME_F_BULK) &&
		    !zcrpc__conn_has_server_stream_bulk(conn)) {
			zcrpc__channel_protocol_error(
				ch, conn, "a stream message by RDMA WRITE from "
					  "the server on a connection without "
					  "them");
			return;
		}
		s->got_message = 1;
		if (zcrpc__stream_on_message(s, f))
			server_broke(s, "the server wrote past the stream's "
					"window");
		break;
	case ZCRPC_FRAME_WINDOW:
		zcrpc__stream_on_window(s, f);
		break;
	default:
		break;
	}
}

void zcrpc__cstreams_conn_gone(zcrpc_channel *ch, zcrpc_conn *conn,
			       zcrpc_status st, const char *why)
{
	struct zcrpc__list *n;

	if (!ch->has_streams)
		return;
	zcrpc__list_foreach(n, &ch->live_streams)
	{
		zcrpc_stream *s = zcrpc__stream_of(n);

		if (s->conn != conn)
			continue;
		drop_queue(s);
		if (s->att_user && !s->att_out) {
			/* in place: its connection goes now, and with it the
			 * device's hold of the caller's memory */
			s->att_user = 0;
			s->att_writing = 0;
		}
		zcrpc__stream_end(s, st, why);
		if (s->has_end_frame) {
			/* its metadata lies in the connection's memory */
			zcrpc_msg_free(s->w, &s->end_frame);
			s->has_end_frame = 0;
			s->n_end_md = 0;
		}
		s->conn = NULL;
	}
}

void zcrpc__cstreams_destroy(zcrpc_channel *ch)
{
	struct zcrpc__list *n;

	if (!ch->has_streams)
		return;
	while ((n = zcrpc__list_first(&ch->live_streams))) {
		zcrpc_stream *s = zcrpc__stream_of(n);

		s->graceful = 0;
		s->paused = 0;
		s->forced = 1;
		zcrpc__stream_end(s, ZCRPC_CANCELLED, "channel destroyed");
		zcrpc__stream_run_finish(s); /* frees it */
	}
	zcrpc__cstreams_free_orphans(ch);
	zcrpc__call_table_fini(&ch->streams);
	ch->has_streams = 0;
}

size_t zcrpc__cstreams_of_owner(zcrpc_channel *ch, const zcrpc_channel *owner,
				zcrpc_conn **risk, size_t *n_risk)
{
	struct zcrpc__list *n;
	size_t count = 0, i;

	if (!ch->has_streams)
		return 0;
	zcrpc__list_foreach(n, &ch->live_streams) {
		zcrpc_stream *s = zcrpc__stream_of(n);

		if (s->owner != owner)
			continue;
		count++;
		if (!risk || !s->conn || !zcrpc__stream_reads_user(s))
			continue;
		for (i = 0; i < *n_risk && risk[i] != s->conn; i++)
			;
		if (i == *n_risk && *n_risk < 2)
			risk[(*n_risk)++] = s->conn;
	}
	return count;
}

void zcrpc__cstreams_end_owner(zcrpc_channel *ch, const zcrpc_channel *owner,
			       const char *why)
{
	struct zcrpc__list *n, *next;

	if (!ch->has_streams)
		return;
	zcrpc__list_foreach_safe(n, next, &ch->live_streams) {
		zcrpc_stream *s = zcrpc__stream_of(n);

		if (s->owner != owner)
			continue;
		if (!s->ended)
			end_local(s, ZCRPC_CANCELLED, why);
		/* as a destroy's: CANCELLED, now, whatever ended it before */
		s->end_status = ZCRPC_CANCELLED;
		snprintf(s->end_msg, sizeof(s->end_msg), "%s", why);
		s->graceful = 0;
		s->paused = 0;
		s->forced = 1;
		s->owner = NULL;
		zcrpc__stream_run_finish(s); /* frees it */
	}
}
