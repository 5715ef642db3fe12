/* zcrpc — the server's bulk parts: a request's part (budget, a buffer
 * registered off-thread, the grant, retried while the connection has no
 * window-bind slot, the write's time limit, the revoke before the
 * handler reads it) and a reply's part (written into the client's grant).
 * docs/design.md "Bulk". */
#include "server_internal.h"
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bytes @c held of its connection's bulk budget go back. */
void zcrpc__scall_budget_release(zcrpc_server_call *c)
{
	if (c->budget && c->sc)
		c->sc->bulk_held -= c->budget;
	c->budget = 0;
}

/* @c's request part is refused with @st: its call is answered, or, for a
 * stream message's record, its stream ends with @st and the client is
 * told (nothing when the stream went already). */
static void refuse_part(struct sconn *sc, zcrpc_server_call *c,
			zcrpc_status st, const char *why)
{
	if (c->stream_part) {
		if (c->stream)
			zcrpc__sstream_refuse(c->stream, st, why);
		return;
	}
	zcrpc__sconn_send_simple(sc, ZCRPC_FRAME_REPLY, c->client_ref, st, why);
}

void zcrpc__server_watch_bulk_deadline(zcrpc_server *s, int64_t dl)
{
	if (!s->next_bulk_check_ns || dl < s->next_bulk_check_ns) {
		s->next_bulk_check_ns = dl;
		zcrpc__timer_start(s->w, &s->timer, dl);
	}
}

/* Every buffer a request's bulk part is granted passes here, whether it
 * comes from the cache's free list or fresh from its thread: bind the
 * window over it, send the grant, start the write's time limit. */
static void grant_request(zcrpc_server *s, zcrpc_server_call *c,
			  struct zcrpc__bulkbuf *b)
{
	struct sconn *sc = c->sc;
	struct zcrpc_frame g;
	zcrpc_remote_region r;
	zcrpc_status st;

	if (c->req_bulk != b) /* not a retry */
		/* A part longer than one piece may be left partly unwritten
		 * (only the last piece's count is checked): zero what may
		 * hold another peer's bytes (docs/protocol.md §4). */
		zcrpc__bulk_scrub_for(sc->conn, b->ptr,
				      (size_t)c->f.bulk_len);
	c->req_bulk = b;
	st = zcrpc_mr_grant(b->mr, sc->conn, 0, (size_t)c->f.bulk_len, &r,
			    &c->req_grant);
	if (st == ZCRPC_RESOURCE_EXHAUSTED && !c->cancelled) {
		/* Every window-bind slot of the connection is in its send
		 * queue: the server's timer tries again
		 * (zcrpc__server_retry_grants), the buffer in hand
		 * (SS_AWAIT_BUF with req_bulk set). */
		c->req_grant = NULL;
		c->state = SS_AWAIT_BUF;
		s->grant_waits++;
		zcrpc__timer_start(s->w, &s->timer,
				   zcrpc__now_ns() + ZCRPC_RETRY_NS);
		return;
	}
	if (st != ZCRPC_OK) {
		c->req_grant = NULL;
		refuse_part(sc, c, ZCRPC_RESOURCE_EXHAUSTED,
			    "no memory at the server for the request's bulk part");
		c->state = SS_RUNNING;
		zcrpc__scall_free(s, c);
		return;
	}
	memset(&g, 0, sizeof(g));
	g.type = ZCRPC_FRAME_BULK_GRANT;
	g.flags = c->stream_part ? ZCRPC_FRAME_F_STREAM : 0;
	g.call_id = c->client_ref;
	g.bulk_addr = r.addr;
	g.bulk_len = r.len;
	g.bulk_rkey = r.rkey;
	g.bulk_token = zcrpc__scall_ref(s, c);
	c->state = SS_AWAIT_BULK;
	c->granted_ns = zcrpc__now_ns();
	c->bulk_deadline_ns = c->granted_ns + s->write_timeout_ns +
			      (int64_t)(c->f.bulk_len >> 20) * ZCRPC_NS_PER_MIB;
	zcrpc__server_watch_bulk_deadline(s, c->bulk_deadline_ns);
	zcrpc__sconn_send_frame(sc, &g, NULL, 0, g.bulk_token);
}

void zcrpc__server_retry_grants(zcrpc_server *s)
{
	struct zcrpc__list *ni, *nj, *tmp;
	uint32_t waiting = 0;

	zcrpc__list_foreach(ni, &s->conns)
	{
		zcrpc__list_foreach_safe(nj, tmp, &zcrpc__sconn_of(ni)->calls)
		{
			zcrpc_server_call *c = zcrpc__scall_of(nj, link);

			if (c->state != SS_AWAIT_BUF || !c->req_bulk)
				continue;
			grant_request(s, c, c->req_bulk);
			/* Granted, failed (freed: the record stays in the
			 * table, SS_FREE) or waiting again. */
			if (c->state == SS_AWAIT_BUF && c->req_bulk)
				waiting++;
		}
	}
	/* Recounted: calls freed while they waited (cancel, close) and the
	 * retries above left it high. */
	s->grant_waits = waiting;
}

/* A request announced a bulk part: charge the connection's budget and take
 * a buffer without registering on this thread; answer RESOURCE_EXHAUSTED
 * when the budget or the cache's cap does not allow it. */
void zcrpc__scall_request_bulk(zcrpc_server *s, struct sconn *sc,
			       zcrpc_server_call *c)
{
	size_t len = (size_t)c->f.bulk_len, cap = zcrpc__bulk_cap_of(len);
	struct zcrpc__bulkbuf *b = NULL;
	zcrpc_status st = ZCRPC_RESOURCE_EXHAUSTED;
	const char *why = "no memory at the server for the request's bulk part";

	if (cap > s->conn_max || sc->bulk_held > s->conn_max - cap)
		why = "the connection's bulk budget is used up "
		      "(parts granted and not yet written)";
	else
		st = zcrpc__bulk_get_async(&s->bulk, len,
					   zcrpc__scall_ref(s, c), &b);
	if (st == ZCRPC_OK || st == ZCRPC_UNAVAILABLE) {
		c->budget = cap;
		sc->bulk_held += cap;
	}
	if (st == ZCRPC_OK) {
		grant_request(s, c, b);
		return;
	}
	if (st == ZCRPC_UNAVAILABLE) { /* zcrpc__server_on_buffer continues */
		c->state = SS_AWAIT_BUF;
		s->st.bulk_waits++;
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns() + ZCRPC_RETRY_NS);
		return;
	}
	s->st.bulk_refused++;
	refuse_part(sc, c, ZCRPC_RESOURCE_EXHAUSTED, why);
	c->state = SS_RUNNING;
	zcrpc__scall_free(s, c);
}

/* The reply waiting for its bulk buffer (REPLY_BUF) gets it: its bytes
 * move over and the reply frame goes out. */
static void reply_buffer_ready(zcrpc_server *s, zcrpc_server_call *c,
			       struct zcrpc__bulkbuf *b)
{
	if (!b) {
		zcrpc__sconn_send_simple(
			c->sc, ZCRPC_FRAME_REPLY, c->client_ref,
			ZCRPC_RESOURCE_EXHAUSTED,
			"registering memory for the reply's bulk part failed");
		zcrpc__scall_free(s, c);
		return;
	}
	c->reply_buf = b;
	memcpy(b->ptr, c->reply_heap, c->reply_src.len);
	s->st.copied_bytes += c->reply_src.len;
	free(c->reply_heap);
	c->reply_heap = NULL;
	zcrpc__sconn_send(c->sc, &c->reply_out);
	memset(&c->reply_out, 0, sizeof(c->reply_out));
	c->state = SS_REPLY_GRANT;
	c->bulk_deadline_ns = zcrpc__now_ns() + s->write_timeout_ns;
	zcrpc__server_watch_bulk_deadline(s, c->bulk_deadline_ns);
}

/* A buffer registered on the cache's thread for the call @ref. */
void zcrpc__server_on_buffer(void *arg, uint32_t ref, struct zcrpc__bulkbuf *b)
{
	zcrpc_server *s = arg;
	zcrpc_server_call *c = zcrpc__scall_lookup(s, ref);

	if (c && c->state == SS_REPLY_BUF && c->stream_part &&
	    (!c->stream || !c->sc)) {
		/* a stream message whose stream went meanwhile: not sent */
		if (b)
			zcrpc__bulk_put(&s->bulk, b);
		zcrpc__scall_free(s, c);
		return;
	}
	if (c && c->state == SS_REPLY_BUF && c->sc) {
		reply_buffer_ready(s, c, b);
		return;
	}
	if (!c || c->state != SS_AWAIT_BUF || !c->sc) {
		zcrpc__bulk_put(&s->bulk, b); /* it ended meanwhile: cached */
		return;
	}
	if (!b) {
		s->st.bulk_refused++;
		refuse_part(c->sc, c, ZCRPC_RESOURCE_EXHAUSTED,
			    "registering memory for the request's bulk part "
			    "failed");
		c->state = SS_RUNNING;
		zcrpc__scall_free(s, c);
		return;
	}
	grant_request(s, c, b);
}

/* The client can no longer write into @c's request window (its write with
 * immediate arrived, or its CANCEL, which it sends only when it will not
 * write): revoke the window; zcrpc__sconn_on_revoked then runs the handler (or
 * frees a cancelled call), so nothing the handler reads can change under it. */
void zcrpc__scall_revoke_request(struct sconn *sc, zcrpc_server_call *c)
{
	zcrpc_grant *g = c->req_grant;

	zcrpc__scall_budget_release(c); /* written, or never will be */
	if (!c->cancelled) { /* it landed: the parts granted after it may
			      * have waited behind it at the client */
		sc->landed_ns = zcrpc__now_ns();
		sc->landed_granted_ns = c->granted_ns;
	}
	c->req_grant = NULL;
	c->state = SS_REVOKING;
	if (zcrpc_grant_revoke(g, (void *)(uintptr_t)zcrpc__scall_ref(
					  sc->s, c)) != ZCRPC_OK)
		zcrpc_conn_close(sc->conn); /* closing already: freed on CLOSED */
}

void zcrpc__sconn_on_grant(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_server *s = sc->s;
	zcrpc_server_call *c = zcrpc__scall_lookup(s, f->call_id);
	zcrpc_remote_region r;
	const zcrpc_mr *mr;
	size_t off, len;
	uint32_t imm = f->bulk_token;

	if (!c || c->sc != sc || c->state != SS_REPLY_GRANT) {
		zcrpc__sconn_protocol_error(sc, "grant for no reply");
		return;
	}
	if (c->reply_buf) {
		mr = c->reply_buf->mr;
		off = 0;
		len = c->reply_src.len;
	} else {
		mr = c->reply_src.mr;
		off = c->reply_src.offset;
		len = c->reply_src.len;
	}
	if (f->bulk_len < len) {
		zcrpc__sconn_protocol_error(
			sc, "grant smaller than the reply's bulk part");
		return;
	}
	r.addr = f->bulk_addr;
	r.len = f->bulk_len;
	r.rkey = f->bulk_rkey;
	r.reserved = 0;
	if (zcrpc_conn_write(sc->conn, mr, off, len, &r, 0, &imm,
			     (void *)(uintptr_t)zcrpc__scall_ref(s, c)) !=
	    ZCRPC_OK) {
		zcrpc_conn_close(sc->conn);
		return;
	}
	c->state = SS_REPLY_WRITE;
}

void zcrpc__sconn_on_write_imm(zcrpc_conn *conn, uint32_t imm, size_t len,
			       void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server_call *c = zcrpc__scall_lookup(sc->s, imm);

	if (!c || c->sc != sc || c->state != SS_AWAIT_BULK) {
		zcrpc__sconn_protocol_error(sc, "write for no request");
		return;
	}
	/* A count other than the part's (or its last piece's) means bytes
	 * of the target were never written: the handler must not see them. */
	if (len != zcrpc__bulk_last_piece((size_t)c->f.bulk_len,
					  zcrpc_conn_write_piece(conn))) {
		c->bulk_bad = 1;
		sc->s->st.bulk_bad_writes++;
		c->write_len = len;
	}
	zcrpc__scall_revoke_request(
		sc, c); /* the handler runs once it is revoked */
}

void zcrpc__sconn_on_revoked(zcrpc_conn *conn, void *uctx, zcrpc_status st,
			     void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server_call *c =
		zcrpc__scall_lookup(sc->s, (uint32_t)(uintptr_t)uctx);

	(void)conn;
	if (!c || c->sc != sc || c->state != SS_REVOKING)
		return;
	if (st != ZCRPC_OK)
		return; /* the connection is going: freed on CLOSED */
	if (c->cancelled) {
		zcrpc__scall_free(sc->s, c);
		return;
	}
	if (c->bulk_bad) {
		char msg[128];

		snprintf(msg, sizeof(msg),
			 "request bulk part: the write with immediate carried %zu bytes, %zu expected of a %llu-byte part",
			 c->write_len,
			 zcrpc__bulk_last_piece((size_t)c->f.bulk_len,
						zcrpc_conn_write_piece(conn)),
			 (unsigned long long)c->f.bulk_len);
		refuse_part(sc, c, ZCRPC_INVALID_ARGUMENT, msg);
		zcrpc__scall_free(sc->s, c);
		return;
	}
	zcrpc__scall_dispatch(sc->s, c);
}

void zcrpc__sconn_on_write_done(zcrpc_conn *conn, void *uctx, zcrpc_status st,
				void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server_call *c =
		zcrpc__scall_lookup(sc->s, (uint32_t)(uintptr_t)uctx);

	(void)conn;
	if (!c || c->state != SS_REPLY_WRITE)
		return;
	if (c->stream_part == ZCRPC__PART_OUT) {
		zcrpc__sstream_part_written(sc->s, c, st);
		zcrpc__scall_free(sc->s, c);
		return;
	}
	if (c->on_done) {
		void (*fn)(void *, zcrpc_status) = c->on_done;

		c->on_done = NULL;
		fn(c->done_ctx, st);
	}
	if (st == ZCRPC_OK)
		sc->s->st.replies++;
	zcrpc__scall_free(sc->s, c);
}

/* A request part not written in time: the grant is revoked (a write
 * after that fails the client's connection) and the call answered. A reply
 * part the client never granted: the call is freed (nobody can write into
 * the server's memory). */
static void bulk_expire(zcrpc_server *s, zcrpc_server_call *c)
{
	s->st.bulk_timeouts++;
	if (c->state == SS_REPLY_GRANT) {
		zcrpc__scall_free(s, c);
		return;
	}
	refuse_part(c->sc, c, ZCRPC_RESOURCE_EXHAUSTED,
		    "bulk part not written within the server's time limit");
	c->cancelled = 1; /* freed when the revoke completed */
	zcrpc__scall_revoke_request(c->sc, c);
}

/* When @c's time runs out: the limit counts from its grant, or from the
 * last landing of a part granted before it (a client writes its parts in
 * the order it got the grants, so those queued behind others get their
 * time once the earlier ones landed; a part granted later that lands
 * extends nothing). */
static int64_t bulk_due(const zcrpc_server_call *c)
{
	const struct sconn *sc = c->sc;
	int64_t start = c->granted_ns;

	if (c->state != SS_AWAIT_BULK)
		return c->bulk_deadline_ns;
	if (sc->landed_granted_ns <= c->granted_ns && sc->landed_ns > start)
		start = sc->landed_ns;
	return c->bulk_deadline_ns + (start - c->granted_ns);
}

static int bulk_waiting(const zcrpc_server_call *c)
{
	return (c->state == SS_AWAIT_BULK && !c->cancelled) ||
	       c->state == SS_REPLY_GRANT;
}

/* Expires the bulk parts past their time limit. Expiring may close a
 * connection (and free its calls), so the calls are picked first and
 * looked up again by reference. */
void zcrpc__server_bulk_check(zcrpc_server *s, int64_t now)
{
	uint32_t due[64];
	unsigned n = 0, i;
	struct zcrpc__list *ni, *nj;
	int64_t next = 0;

	zcrpc__list_foreach(ni, &s->conns)
	{
		zcrpc__list_foreach(nj, &zcrpc__sconn_of(ni)->calls)
		{
			zcrpc_server_call *c = zcrpc__scall_of(nj, link);
			int64_t dl;

			if (!bulk_waiting(c))
				continue;
			dl = bulk_due(c);
			if (now >= dl && n < 64)
				due[n++] = zcrpc__scall_ref(s, c);
			else if (!next || dl < next)
				next = dl;
		}
	}
	if (n == 64)
		next = now; /* more to do on the next run */
	s->next_bulk_check_ns = 0;
	if (next)
		zcrpc__server_watch_bulk_deadline(s, next);
	for (i = 0; i < n; i++) {
		zcrpc_server_call *c = zcrpc__scall_lookup(s, due[i]);

		if (c && c->sc && bulk_waiting(c))
			bulk_expire(s, c);
	}
}
