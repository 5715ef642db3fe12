/* zcrpc — the server's calls from request to handler: the frames that
 * arrive, the method lookup, the concurrency limit and its run queue,
 * deadlines checked before a handler runs, cancellation, freeing a call. */
#include "server_internal.h"
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPAN(from, to)                                                         \
	(offsetof(zcrpc_server_call, to) - offsetof(zcrpc_server_call, from))
_Static_assert(offsetof(zcrpc_server_call, md) ==
		       offsetof(zcrpc_server_call, f) +
			       sizeof(struct zcrpc_frame),
	       "scall_reset skips f and md as one span");

/* Zeroes @c (SS_FREE) but for its request frame, metadata and handler
 * view, which a new call writes whole before reading (on_request,
 * run_handler): 680 of the record's 936 bytes that zeroing only cost. */
static void scall_reset(zcrpc_server_call *c)
{
	memset(c, 0, SPAN(state, f));
	memset(&c->n_md, 0, SPAN(n_md, view));
	memset((char *)&c->view + sizeof(c->view), 0,
	       sizeof(*c) - offsetof(zcrpc_server_call, view) -
		       sizeof(c->view));
}

void zcrpc__scall_free(zcrpc_server *s, zcrpc_server_call *c)
{
	if (c->stream && c->stream->att_ref == zcrpc__scall_ref(s, c))
		c->stream->att_ref = 0; /* its stream waits for it no more */
	if (c->stream && c->stream_part == ZCRPC__PART_OUT)
		/* no write came (no grant in time, the connection gone) */
		zcrpc__sstream_part_written(s, c, ZCRPC_UNAVAILABLE);
	zcrpc__scall_budget_release(c);
	zcrpc__list_remove(&c->link); /* a no-op once its connection went */
	zcrpc__list_remove(&c->qlink); /* the callers took it off the run
					* queue (counted) already, but for
					* zcrpc_server_destroy */
	if (c->req.data)
		zcrpc_msg_free(s->w, &c->req);
	if (c->reply_out.msg.data)
		zcrpc_msg_free(s->w, &c->reply_out.msg);
	free(c->reply_heap);
	if (c->req_grant && c->req_bulk) /* freed with its connection */
		c->req_bulk->keep_until_ns = zcrpc__now_ns() + ZCRPC_WINDOW_GRACE_NS;
	if (c->req_bulk)
		zcrpc__bulk_put(&s->bulk, c->req_bulk);
	if (c->reply_buf)
		zcrpc__bulk_put(&s->bulk, c->reply_buf);
	if (c->on_done) {
		void (*fn)(void *, zcrpc_status) = c->on_done;

		c->on_done = NULL;
		fn(c->done_ctx, c->state == SS_REPLY_WRITE ? ZCRPC_UNAVAILABLE
							   : ZCRPC_UNAVAILABLE);
	}
	if (s->root->ics.n)
		zcrpc__schain_end(&s->root->ics, &c->ic,
				  c->ic_replied ? c->ic_status
				  : !c->sc      ? ZCRPC_UNAVAILABLE
				  : c->cancelled ? ZCRPC_CANCELLED
						 : ZCRPC_DEADLINE_EXCEEDED);
	scall_reset(c);
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->qlink);
	zcrpc__call_table_release(&s->calls, c);
}

static void run_handler(zcrpc_server *s, zcrpc_server_call *c)
{
	zcrpc_request *r = &c->view; /* lives with the call, not this frame */

	if (c->deadline_ns && zcrpc__now_ns() >= c->deadline_ns) {
		/* Its caller has given up: never run it. */
		s->st.expired_not_run++;
		if (c->sc)
			zcrpc__sconn_send_simple(
				c->sc, ZCRPC_FRAME_REPLY, c->client_ref,
				ZCRPC_DEADLINE_EXCEEDED,
				"deadline passed before the handler ran");
		zcrpc__scall_free(s, c);
		return;
	}
	*r = (zcrpc_request){.size = sizeof(*r)}; /* as zcrpc__abi_sized_init */
	r->method_id = c->f.method_id;
	if (c->f.flags & ZCRPC_FRAME_F_PAYLOAD_IN_BULK) {
		r->data = c->req_bulk->ptr;
		r->len = (size_t)c->f.bulk_len;
	} else {
		r->data = c->f.payload;
		r->len = c->f.payload_len;
		if (c->req_bulk) {
			r->attachment = c->req_bulk->ptr;
			r->attachment_len = (size_t)c->f.bulk_len;
			r->attachment_mr.mr = c->req_bulk->mr;
			r->attachment_mr.offset = 0;
			r->attachment_mr.len = (size_t)c->f.bulk_len;
		}
	}
	r->md = c->md;
	r->n_md = c->n_md;
	r->timeout_us = c->f.deadline_us ? (int64_t)c->f.deadline_us : -1;
	c->state = SS_RUNNING;
	s->st.running++;
	c->m->fn(c, r, c->m->arg);
}

void zcrpc__scall_dispatch(zcrpc_server *s, zcrpc_server_call *c)
{
	if (c->stream_part) { /* no handler: its stream takes the message */
		zcrpc__sstream_part_landed(s, c);
		return;
	}
	if (s->o.max_concurrent && s->st.running >= s->o.max_concurrent) {
		c->state = SS_QUEUED;
		zcrpc__list_push_back(&s->run_queue, &c->qlink);
		s->st.queued++;
		return;
	}
	run_handler(s, c);
}

void zcrpc__server_run_queue(zcrpc_server *s)
{
	struct zcrpc__list *n;

	while ((n = zcrpc__list_first(&s->run_queue)) &&
	       (!s->o.max_concurrent || s->st.running < s->o.max_concurrent)) {
		zcrpc_server_call *c = zcrpc__scall_of(n, qlink);

		zcrpc__list_remove(&c->qlink);
		s->st.queued--;
		if (c->cancelled || !c->sc) {
			s->st.cancelled++;
			zcrpc__scall_free(s, c);
			continue;
		}
		run_handler(s, c);
	}
}

void zcrpc__server_rq_remove(zcrpc_server *s, zcrpc_server_call *c)
{
	if (!zcrpc__list_linked(&c->qlink))
		return;
	zcrpc__list_remove(&c->qlink);
	s->st.queued--;
}

/* The client broke the protocol: close its connection, counted, with the
 * reason as its error text (on_disconnect gets INTERNAL). */
void zcrpc__sconn_protocol_error(struct sconn *sc, const char *why)
{
	if (zcrpc_conn_get_state(sc->conn) != ZCRPC_CONN_CLOSED &&
	    !zcrpc__conn_closing(sc->conn))
		sc->s->st.protocol_errors++; /* once per connection */
	zcrpc__conn_abort(sc->conn, ZCRPC_INTERNAL,
			  "protocol error from the client: %s", why);
}

zcrpc_status zcrpc__server_intercept(zcrpc_server *s, const struct zcrpc_frame *f,
				     struct zcrpc__icall *ic, const char **why)
{
	zcrpc_md md[ZCRPC_MD_MAX_PAIRS];
	zcrpc_call_info info;

	memset(&info, 0, sizeof(info));
	info.size = sizeof(info);
	info.method_id = f->method_id;
	info.streaming = (f->flags & ZCRPC_FRAME_F_STREAM) != 0;
	info.n_md = zcrpc__md_view(f, md);
	info.md = info.n_md ? md : NULL;
	info.timeout_us = f->deadline_us ? (int64_t)f->deadline_us : -1;
	return zcrpc__schain_call(&s->root->ics, &info, why, ic);
}

static void on_request(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_server *s = sc->s;
	const struct method *m = zcrpc__server_find_method(s, f->method_id);
	struct zcrpc__icall ic = {{0}, 0, 0};
	zcrpc_server_call *c;

	s->st.calls++;
	if (!m) {
		char msg[64];

		s->st.unimplemented++;
		snprintf(msg, sizeof(msg), "unknown method id 0x%08x", (unsigned)f->method_id);
		zcrpc__sconn_send_simple(sc, ZCRPC_FRAME_REPLY, f->call_id,
					 ZCRPC_UNIMPLEMENTED, msg);
		return;
	}
	if (m->sh) {
		char msg[96];

		s->st.unimplemented++;
		snprintf(msg, sizeof(msg), "method %.60s is a streaming method",
			 m->name);
		zcrpc__sconn_send_simple(sc, ZCRPC_FRAME_REPLY, f->call_id,
					 ZCRPC_UNIMPLEMENTED, msg);
		return;
	}
	if (s->shutting_down) { /* never ran: the client may go elsewhere */
		zcrpc__sconn_send_refused(sc, f->call_id,
					  "server is shutting down");
		return;
	}
	if (s->root->ics.n) {
		const char *why;
		zcrpc_status ist = zcrpc__server_intercept(s, f, &ic, &why);

		if (ist != ZCRPC_OK) {
			zcrpc__sconn_send_simple(sc, ZCRPC_FRAME_REPLY, f->call_id,
						 ist, why);
			return;
		}
		zcrpc__schain_message(&s->root->ics, &ic, 0,
				      f->payload_len + f->bulk_len);
	}
	c = zcrpc__call_table_take(&s->calls);
	if (!c) {
		zcrpc__schain_end(&s->root->ics, &ic, ZCRPC_RESOURCE_EXHAUSTED);
		zcrpc__sconn_send_simple(
			sc, ZCRPC_FRAME_REPLY, f->call_id,
			ZCRPC_RESOURCE_EXHAUSTED,
			zcrpc__call_table_full(&s->calls)
				? "too many calls at the server"
				: "out of memory growing the server's call "
				  "table");
		return;
	}
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->qlink);
	c->ic = ic;
	c->s = s;
	c->sc = sc;
	c->m = m;
	c->client_ref = f->call_id;
	c->timeout_us = f->deadline_us;
	c->deadline_ns = f->deadline_us ? zcrpc__now_ns() + (int64_t)f->deadline_us * 1000 : 0;
	/* Keep the request where it landed; the handler reads it in place. */
	if (zcrpc_conn_recv_keep(sc->conn, &c->req) != ZCRPC_OK) {
		c->state = SS_RUNNING; /* so zcrpc__scall_free unlinks nothing
					  odd */
		c->sc = NULL;
		zcrpc__scall_free(s, c);
		return;
	}
	c->f = *f;
	c->n_md = zcrpc__md_view(&c->f, c->md);
	zcrpc__list_push_front(&sc->calls, &c->link);
	if (f->flags & ZCRPC_FRAME_F_BULK) {
		zcrpc__scall_request_bulk(s, sc, c);
		return;
	}
	zcrpc__scall_dispatch(s, c);
}

static void on_cancel(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_server_call *c = NULL;
	struct zcrpc__list *n;

	zcrpc__list_foreach(n, &sc->calls)
	{
		/* (a stream message's record carries the stream's reference,
		 * from another table of the client's) */
		if (zcrpc__scall_of(n, link)->client_ref == f->call_id &&
		    !zcrpc__scall_of(n, link)->stream_part) {
			c = zcrpc__scall_of(n, link);
			break;
		}
	}
	if (!c || c->cancelled)
		return;
	sc->s->st.cancelled++;
	zcrpc__scall_cancel(sc, c);
}

void zcrpc__scall_cancel(struct sconn *sc, zcrpc_server_call *c)
{
	c->cancelled = 1;
	if (c->state == SS_QUEUED) {
		zcrpc__server_rq_remove(sc->s, c);
		zcrpc__scall_free(sc->s, c);
	} else if (c->state == SS_AWAIT_BUF) {
		zcrpc__scall_free(sc->s,
				  c); /* no window yet; its buffer is cached */
	} else if (c->state == SS_AWAIT_BULK) {
		/* A client never writes after its CANCEL (RC ordering: a
		 * write it posted earlier has landed by now): revoke, then
		 * free the call. */
		zcrpc__scall_revoke_request(sc, c);
	}
	/* RUNNING: the handler's reply is not sent. */
}

static void on_frame(void *arg, const struct zcrpc_frame *fp)
{
	struct sconn *sc = arg;
	struct zcrpc_frame f = *fp;

	if ((f.flags & ZCRPC_FRAME_F_STREAM) || f.type >= ZCRPC_FRAME_MESSAGE) {
		zcrpc__sstreams_on_frame(sc, &f);
		return;
	}
	switch (f.type) {
	case ZCRPC_FRAME_REQUEST:
		zcrpc__sconn_called(sc);
		on_request(sc, &f);
		break;
	case ZCRPC_FRAME_CANCEL:
		on_cancel(sc, &f);
		break;
	case ZCRPC_FRAME_BULK_GRANT:
		zcrpc__sconn_on_grant(sc, &f);
		break;
	case ZCRPC_FRAME_GOAWAY: /* a DRAIN client's answer to ours */
		if (!sc->s->shutting_down || !zcrpc__conn_has_drain(sc->conn) ||
		    sc->goaway_acked)
			zcrpc__sconn_protocol_error(sc, "unexpected GOAWAY");
		else
			sc->goaway_acked = 1;
		break;
	default:
		zcrpc__sconn_protocol_error(sc, "unexpected frame type");
		break;
	}
}

void zcrpc__sconn_on_recv(zcrpc_conn *conn, const void *data, size_t len,
			  void *arg)
{
	struct sconn *sc = arg;
	char why[128];

	if (zcrpc__frames_each(conn, data, len, on_frame, sc, why,
			       sizeof(why)) != ZCRPC_OK)
		zcrpc__sconn_protocol_error(sc, why);
}

void zcrpc__sconn_on_writable(zcrpc_conn *conn, void *arg)
{
	struct sconn *sc = arg;

	(void)conn;
	zcrpc__sconn_flush(sc);
	if (sc->p_head)
		zcrpc__sconn_flush_deferred(sc);
}
