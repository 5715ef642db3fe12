/* zcrpc — what both sides of a stream do: per-stream flow control
 * (windows of messages, WINDOW frames as the reader consumes), messages
 * held while the reader paused, the deadline and the deferred on_finish
 * on the stream's one timer, and writing messages. docs/protocol.md §8. */
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reader returns credit once it consumed this many messages. */
#define WINDOW_BATCH (ZCRPC_STREAM_WINDOW / 2)

/* A WINDOW that found no pool slot is tried again this soon. */
#define RETRY_NS (1000LL * 1000LL)

/* A writer's window never grows past this (a peer that adds more breaks
 * no promise of ours, but the count must not wrap). */
#define WINDOW_CAP (1U << 20)

static void on_timer(struct zcrpc__timer *t, int64_t now);

void zcrpc__stream_init(zcrpc_stream *s, zcrpc_worker *w,
			const zcrpc_stream_handlers *h)
{
	s->w = w;
	s->h = *h;
	s->timer.fn = on_timer;
	s->send_window = ZCRPC_STREAM_WINDOW;
	s->recv_left = ZCRPC_STREAM_WINDOW;
	s->max_message = ZCRPC_STREAM_MAX_MESSAGE;
	zcrpc__list_init(&s->link);
}

uint32_t zcrpc__stream_deadline_us(const zcrpc_stream *s, int64_t now)
{
	int64_t left;

	if (!s->deadline_ns)
		return 0;
	left = (s->deadline_ns - now) / 1000;
	if (left < 1)
		return 1; /* already due: the server ends it at once */
	return left > 0xffffffffLL ? 0xffffffffU : (uint32_t)left;
}

zcrpc_status zcrpc__stream_build(zcrpc_stream *s, uint8_t type, uint16_t flags,
				 struct zcrpc__out *out)
{
	struct zcrpc_frame f;

	memset(&f, 0, sizeof(f));
	f.type = type;
	f.flags = flags;
	f.call_id = s->ref;
	return zcrpc__out_build(s->w, &f, NULL, 0, 0, NULL, NULL, NULL, out);
}

void zcrpc__stream_send(zcrpc_stream *s, struct zcrpc__out *out)
{
	if (s->client)
		zcrpc__cstream_send(s, out);
	else
		zcrpc__sstream_send(s, out);
}

void zcrpc__stream_end(zcrpc_stream *s, zcrpc_status st, const char *msg)
{
	if (s->ended)
		return;
	s->ended = 1;
	s->end_status = st;
	snprintf(s->end_msg, sizeof(s->end_msg), "%s", msg ? msg : "");
	zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns());
}

void zcrpc__stream_ic_message(zcrpc_stream *s, int outgoing, size_t len)
{
	if (s->client)
		zcrpc__cstream_count_message(s, outgoing, len);
	else
		zcrpc__sstream_count_message(s, outgoing, len);
	if (s->cics && s->cics->n)
		zcrpc__cchain_message(s->cics, &s->ic, outgoing, len);
	else if (s->sics && s->sics->n)
		zcrpc__schain_message(s->sics, &s->ic, outgoing, len);
}

void zcrpc__stream_ic_end(zcrpc_stream *s)
{
	if (s->cics && s->cics->n)
		zcrpc__cchain_end(s->cics, &s->ic, s->end_status, s->end_msg,
				  s->n_end_md ? s->end_md : NULL, s->n_end_md);
	else if (s->sics && s->sics->n)
		zcrpc__schain_end(s->sics, &s->ic, s->end_status);
}

/* Gives the writer back the messages consumed, once half a window is
 * (or, @all, whatever was consumed: a resumed reader). */
static void give_window(zcrpc_stream *s, int all)
{
	struct zcrpc__out out;
	struct zcrpc_frame f;

	if (s->ended || !s->consumed || (!all && s->consumed < WINDOW_BATCH))
		return;
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_WINDOW;
	f.call_id = s->ref;
	f.count = s->consumed;
	if (zcrpc__out_build(s->w, &f, NULL, 0, 0, NULL, NULL, NULL, &out) !=
	    ZCRPC_OK) {
		/* No pool slot: the writer waits a little longer. */
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns() + RETRY_NS);
		return;
	}
	s->recv_left += s->consumed;
	s->consumed = 0;
	zcrpc__stream_send(s, &out);
}

static void deliver(zcrpc_stream *s, const void *data, size_t len)
{
	zcrpc__stream_ic_message(s, 0, len);
	if (s->h.on_message)
		s->h.on_message(s, data, len, s->h.arg);
}

/* The reader refuses what its peer sent (a message above its limit): the
 * side's way of ending the stream and telling the peer. */
static void refuse(zcrpc_stream *s, zcrpc_status st, const char *msg)
{
	if (s->client)
		zcrpc__cstream_refuse(s, st, msg);
	else
		zcrpc__sstream_refuse(s, st, msg);
}

/* One MESSAGE's payload consumed: a whole message, or a piece (@more) of
 * a large one, gathered until its last piece. */
static void take(zcrpc_stream *s, const void *data, size_t len, int more)
{
	s->consumed++;
	if (!more && !s->in_len) {
		deliver(s, data, len); /* the usual case: one frame */
		return;
	}
	if (s->in_len + len > s->max_message) {
		free(s->in_big);
		s->in_big = NULL;
		s->in_len = s->in_cap = 0;
		refuse(s, ZCRPC_RESOURCE_EXHAUSTED,
		       "a stream message above the reader's limit");
		return;
	}
	if (s->in_len + len > s->in_cap) {
		size_t cap = s->in_cap ? s->in_cap * 2 : 64 * 1024;
		unsigned char *p;

		while (cap < s->in_len + len)
			cap *= 2;
		p = realloc(s->in_big, cap);
		if (!p) {
			refuse(s, ZCRPC_RESOURCE_EXHAUSTED,
			       "no memory for a large stream message");
			return;
		}
		s->in_big = p;
		s->in_cap = cap;
	}
	memcpy(s->in_big + s->in_len, data, len);
	s->in_len += len;
	if (!more) {
		size_t n = s->in_len;

		s->in_len = 0; /* (the buffer is kept for the next one) */
		deliver(s, s->in_big, n);
	}
}

/* A message announced by RDMA WRITE is @s's next: its side grants it. */
static void start_part(zcrpc_stream *s, uint64_t len, uint32_t token)
{
	if (s->client)
		zcrpc__cstream_start_part(s, len, token);
	else
		zcrpc__sstream_start_part(s, len);
}

int zcrpc__stream_on_message(zcrpc_stream *s, const struct zcrpc_frame *f)
{
	int more = (f->flags & ZCRPC_FRAME_F_MORE) != 0;
	struct smsg *m;

	int bulk = (f->flags & ZCRPC_FRAME_F_BULK) != 0;

	if (!s->recv_left)
		return 1;
	s->recv_left--;
	if (s->ended)
		return 0; /* it is going: nobody reads any more */
	if (!s->paused && !s->held_head && !s->att_ref) {
		if (bulk)
			start_part(s, f->bulk_len, f->bulk_token);
		else
			take(s, f->payload, f->payload_len, more);
		give_window(s, 0);
		return 0;
	}
	/* Paused (or older messages still wait): keep a copy, in order. At
	 * most one window of them, which the check above bounds. */
	m = malloc(sizeof(*m) + f->payload_len);
	if (!m) {
		zcrpc__stream_end(s, ZCRPC_RESOURCE_EXHAUSTED,
				  "no memory to hold a message of a paused stream");
		return 0;
	}
	m->next = NULL;
	m->len = f->payload_len;
	m->more = more;
	m->bulk_len = bulk ? f->bulk_len : 0;
	m->bulk_token = f->bulk_token;
	memcpy(m->data, f->payload, f->payload_len);
	if (s->held_tail)
		s->held_tail->next = m;
	else
		s->held_head = m;
	s->held_tail = m;
	s->nheld++;
	return 0;
}

void zcrpc__stream_on_window(zcrpc_stream *s, const struct zcrpc_frame *f)
{
	int was_closed = !s->send_window || zcrpc__stream_busy(s);

	s->send_window = s->send_window + f->count > WINDOW_CAP
				 ? WINDOW_CAP
				 : s->send_window + f->count;
	zcrpc__stream_pump(s);
	if (was_closed)
		zcrpc__stream_writable_again(s);
}

void zcrpc__stream_writable_again(zcrpc_stream *s)
{
	if (s->wanted_write && !s->ended && !zcrpc__stream_busy(s) &&
	    s->send_window) {
		s->wanted_write = 0;
		if (s->h.on_writable)
			s->h.on_writable(s, s->h.arg);
	}
}

/* The held messages go to on_message while the reader does not pause
 * again; then what it consumed goes back to the writer. */
static void deliver_held(zcrpc_stream *s)
{
	struct smsg *m;

	while (!s->paused && !s->ended && !s->att_ref && (m = s->held_head)) {
		s->held_head = m->next;
		if (!s->held_head)
			s->held_tail = NULL;
		s->nheld--;
		if (m->bulk_len) /* its grant goes now; the rest waits */
			start_part(s, m->bulk_len, m->bulk_token);
		else
			take(s, m->data, m->len, m->more);
		free(m);
	}
	if (!s->held_head && s->half_pending && !s->ended && !s->paused &&
	    !s->att_ref) {
		s->half_pending = 0;
		if (s->h.on_half_close)
			s->h.on_half_close(s, s->h.arg);
	}
	give_window(s, 1);
}

void zcrpc__stream_take_landed(zcrpc_stream *s, const void *data, size_t len)
{
	struct smsg *m;

	if (s->ended && !s->graceful)
		return;
	if (!s->paused && !s->ended) {
		take(s, data, len, 0);
		deliver_held(s); /* what came behind it; then the window */
		return;
	}
	/* Paused meanwhile, or the peer's final status came behind it (its
	 * on_finish waited for this): held first, before what arrived
	 * behind it. */
	m = malloc(sizeof(*m) + len);
	if (!m) {
		zcrpc__stream_end(s, ZCRPC_RESOURCE_EXHAUSTED,
				  "no memory to hold a message of a paused stream");
		return;
	}
	m->len = len;
	m->more = 0;
	m->bulk_len = 0;
	m->bulk_token = 0;
	memcpy(m->data, data, len);
	m->next = s->held_head;
	s->held_head = m;
	if (!s->held_tail)
		s->held_tail = m;
	s->nheld++;
	if (s->ended) /* zcrpc__stream_run_finish hands it over */
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns());
}

void zcrpc__stream_free_held(zcrpc_stream *s)
{
	struct smsg *m;

	while ((m = s->held_head)) {
		s->held_head = m->next;
		free(m);
	}
	s->held_tail = NULL;
	s->nheld = 0;
	free(s->in_big);
	s->in_big = NULL;
	s->in_len = s->in_cap = 0;
	free(s->out_big);
	s->out_big = NULL;
	if (s->has_end_out)
		zcrpc_msg_free(s->w, &s->end_out.msg);
	s->has_end_out = 0;
	free(s->end_msg_after_big);
	s->end_msg_after_big = NULL;
}

/* on_finish, then the side frees the stream. A stream its peer ended in
 * order (its final status) first hands over the messages that came
 * before that status, once its reader resumes. */
void zcrpc__stream_run_finish(zcrpc_stream *s)
{
	zcrpc_stream_end e;

	struct smsg *m;

	if (s->graceful && s->att_ref && !s->forced)
		return; /* a message before the final status still lands: its
			 * record brings us back (stream_bulk.c) */
	if (zcrpc__stream_reads_user(s) && !s->forced)
		return; /* the device still reads the application's memory: the
			 * write's end brings us back (stream_bulk.c) */
	while (s->graceful && (m = s->held_head)) {
		if (s->paused)
			return; /* zcrpc_stream_resume() comes back here */
		s->held_head = m->next;
		if (!s->held_head)
			s->held_tail = NULL;
		s->nheld--;
		if (m->bulk_len) {
			/* announced by RDMA WRITE, never granted: a server
			 * whose status went before its write ended the stream
			 * early, so it goes unread (its writer's record ends
			 * with its time for a grant) */
			free(m);
			continue;
		}
		s->ended = 0; /* take() delivers to a live stream only */
		take(s, m->data, m->len, m->more);
		s->ended = 1;
		free(m);
	}
	s->finish_run = 1;
	if (s->client)
		zcrpc__cstream_count_end(s);
	else
		zcrpc__sstream_count_end(s);
	zcrpc__stream_ic_end(s);
	zcrpc__timer_stop(s->w, &s->timer);
	memset(&e, 0, sizeof(e));
	e.size = sizeof(e);
	e.status = s->end_status;
	e.message = s->end_msg;
	e.md = s->n_end_md ? s->end_md : NULL;
	e.n_md = s->n_end_md;
	if (s->h.on_finish)
		s->h.on_finish(s, &e, s->h.arg);
	if (s->client)
		zcrpc__cstream_free(s);
	else
		zcrpc__sstream_free(s);
}

static void on_timer(struct zcrpc__timer *t, int64_t now)
{
	zcrpc_stream *s = zcrpc__container_of(t, zcrpc_stream, timer);

	if (s->ended) {
		zcrpc__stream_run_finish(s);
		return;
	}
	if (s->deadline_ns && now >= s->deadline_ns) {
		if (s->client)
			zcrpc__cstream_deadline(s);
		else
			zcrpc__sstream_deadline(s);
		return;
	}
	if (!s->paused && (s->held_head || s->half_pending))
		deliver_held(s);
	else
		give_window(s, 0);
	zcrpc__stream_pump(s); /* a piece that found no slot */
	if (!s->ended)
		zcrpc__stream_writable_again(s); /* a write that found none */
	if (!s->ended && s->deadline_ns)
		zcrpc__timer_start(s->w, &s->timer, s->deadline_ns);
}

/* ---- the public verbs both sides share ----------------------------------- */

size_t zcrpc_stream_max_message(const zcrpc_stream *s)
{
	return s ? ZCRPC_STREAM_MAX_MESSAGE : 0;
}

/* The payload one MESSAGE carries. */
static size_t piece_max(const zcrpc_stream *s)
{
	return zcrpc__worker_max_msg(s->w) - ZCRPC_FRAME_HDR_LEN;
}

void zcrpc__stream_pump(zcrpc_stream *s)
{
	struct zcrpc__out out;
	struct zcrpc_frame f;

	while (s->out_big && s->send_window && !s->ended) {
		size_t rest = s->out_len - s->out_off;
		size_t n = rest < piece_max(s) ? rest : piece_max(s);

		memset(&f, 0, sizeof(f));
		f.type = ZCRPC_FRAME_MESSAGE;
		f.flags = n < rest ? ZCRPC_FRAME_F_MORE : 0;
		f.call_id = s->ref;
		if (zcrpc__out_build(s->w, &f, NULL, 0, n, NULL, NULL,
				     s->out_big + s->out_off, &out) != ZCRPC_OK) {
			/* No pool slot: the next piece goes a little later. */
			zcrpc__timer_start(s->w, &s->timer,
					   zcrpc__now_ns() + RETRY_NS);
			return;
		}
		s->send_window--;
		s->out_off += n;
		zcrpc__stream_send(s, &out);
		if (s->out_off == s->out_len) {
			free(s->out_big);
			s->out_big = NULL;
		}
	}
	if (zcrpc__stream_busy(s) || s->ended)
		return;
	/* What waited for the last piece (or the attachment's write). */
	if (s->half_after_big) {
		s->half_after_big = 0;
		if (zcrpc__stream_build(s, ZCRPC_FRAME_HALF_CLOSE, 0, &out) ==
		    ZCRPC_OK)
			zcrpc__stream_send(s, &out);
		else
			zcrpc__stream_end(s, ZCRPC_RESOURCE_EXHAUSTED,
					  "no pool slot for the half-close");
	}
	if (s->has_end_out) {
		s->has_end_out = 0;
		zcrpc__stream_send(s, &s->end_out);
		zcrpc__stream_end(s, s->end_after_big, s->end_msg_after_big);
		free(s->end_msg_after_big);
		s->end_msg_after_big = NULL;
	}
}

void zcrpc__stream_end_after_pieces(zcrpc_stream *s, struct zcrpc__out *out,
				    zcrpc_status st, const char *msg)
{
	s->end_out = *out;
	s->has_end_out = 1;
	s->end_after_big = st;
	s->end_msg_after_big = strdup(msg ? msg : "");
	s->half_local = 1; /* nothing more is written */
}

/* A write refused for want of a pool slot, a bulk buffer or memory: the
 * stream's timer calls on_writable in RETRY_NS, so that the writer tries
 * again without polling. */
static zcrpc_status retry_later(zcrpc_stream *s, zcrpc_status st)
{
	if (st == ZCRPC_RESOURCE_EXHAUSTED) {
		s->wanted_write = 1;
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns() + RETRY_NS);
	}
	return st;
}

/* One message: copied from @data, or written by @fill into the slot; or,
 * @src, sent from the application's registered memory in place when it
 * goes by RDMA WRITE (else copied from there, @data). */
static zcrpc_status write_msg(zcrpc_stream *s, size_t len, zcrpc_fill_fn fill,
			      void *ctx, const void *data,
			      const zcrpc_bulk *src)
{
	struct zcrpc__out out;
	struct zcrpc_frame f;
	zcrpc_status st;

	if (s->ended || s->half_local || s->half_after_big)
		return ZCRPC_FAILED_PRECONDITION;
	if (len > ZCRPC_STREAM_MAX_MESSAGE)
		return ZCRPC_INVALID_ARGUMENT;
	if (!s->send_window || zcrpc__stream_busy(s)) {
		s->wanted_write = 1;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (s->client ? zcrpc__cstream_attaches(s, len)
		      : zcrpc__sstream_attaches(s, len))
		return retry_later(
			s, s->client
				   ? zcrpc__cstream_write_attached(s, len, fill, ctx,
								   data, src)
				   : zcrpc__sstream_write_attached(s, len, fill, ctx,
								   data, src));
	if (len > piece_max(s)) {
		/* In pieces, as the window lets them go; the next write waits
		 * until the last went. */
		s->out_big = malloc(len);
		if (!s->out_big)
			return retry_later(s, ZCRPC_RESOURCE_EXHAUSTED);
		if (fill)
			fill(s->out_big, len, ctx);
		else
			memcpy(s->out_big, data, len);
		s->out_off = 0;
		s->out_len = len;
		s->sent_any = 1;
		zcrpc__stream_ic_message(s, 1, len);
		zcrpc__stream_pump(s);
		return ZCRPC_OK;
	}
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_MESSAGE;
	f.call_id = s->ref;
	st = zcrpc__out_build(s->w, &f, NULL, 0, len, fill, ctx, data, &out);
	if (st != ZCRPC_OK)
		return retry_later(s, st);
	s->send_window--;
	s->sent_any = 1;
	zcrpc__stream_ic_message(s, 1, len);
	zcrpc__stream_send(s, &out);
	return ZCRPC_OK;
}

zcrpc_status zcrpc_stream_write(zcrpc_stream *s, const void *data, size_t len)
{
	if (!s || (len && !data))
		return ZCRPC_INVALID_ARGUMENT;
	return write_msg(s, len, NULL, NULL, data, NULL);
}

zcrpc_status zcrpc_stream_write_bulk(zcrpc_stream *s, const zcrpc_bulk *src)
{
	zcrpc_status st;

	if (!s || !src || !src->len ||
	    !zcrpc__mr_covers(src->mr, zcrpc_worker_get_context(s->w),
			      src->offset, src->len, 0))
		return ZCRPC_INVALID_ARGUMENT;
	st = write_msg(s, src->len, NULL, NULL,
		       (const uint8_t *)zcrpc__mr_addr(src->mr) + src->offset,
		       src);
	if (st == ZCRPC_OK)
		/* The caller learns when its memory is free again from
		 * on_writable (or on_finish): a copy is free at once, an
		 * in-place write once it completed. */
		s->wanted_write = 1;
	if (st == ZCRPC_OK && !zcrpc__stream_busy(s))
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns());
	return st;
}

zcrpc_status zcrpc_stream_write_fill(zcrpc_stream *s, size_t len,
				     zcrpc_fill_fn fill, void *ctx)
{
	if (!s || (len && !fill))
		return ZCRPC_INVALID_ARGUMENT;
	return write_msg(s, len, fill, ctx, NULL, NULL);
}

int zcrpc_stream_can_write(const zcrpc_stream *s)
{
	return s && !s->ended && !s->half_local && !s->half_after_big &&
	       !zcrpc__stream_busy(s) && s->send_window > 0;
}

void zcrpc_stream_pause(zcrpc_stream *s)
{
	if (s)
		s->paused = 1;
}

void zcrpc_stream_resume(zcrpc_stream *s)
{
	if (!s || !s->paused)
		return;
	s->paused = 0;
	/* Never inside the call: from the next progress. */
	zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns());
}

void zcrpc_stream_set_user(zcrpc_stream *s, void *user)
{
	if (s)
		s->user = user;
}

void *zcrpc_stream_get_user(const zcrpc_stream *s)
{
	return s ? s->user : NULL;
}
