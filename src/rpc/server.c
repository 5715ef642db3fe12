/* zcrpc — the server side: registration by method id, accept, dispatch,
 * replies (inline, in place, from another thread), the bulk path, a
 * concurrency limit with deadline checks, GOAWAY and graceful shutdown. */
#include "rpc_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum sstate {
	SS_FREE = 0,
	SS_AWAIT_BULK,	/* granted a target for the request's bulk part */
	SS_REVOKING,	/* its bulk part landed (or it was cancelled): the
			 * window is being revoked before anyone reads it */
	SS_QUEUED,	/* ready, waiting for a handler slot */
	SS_RUNNING,	/* the handler has it; waiting for the reply */
	SS_REPLY_GRANT, /* reply sent with a bulk part; waiting for the grant */
	SS_REPLY_WRITE, /* writing the reply's bulk part */
};

struct sconn;

struct zcrpc_server_call {
	uint32_t gen;
	uint8_t state;
	uint8_t cancelled;
	zcrpc_server *s;
	struct sconn *sc; /* NULL once the connection is gone */
	zcrpc_server_call *next, *prev; /* sc->calls */
	zcrpc_server_call *qnext;	/* run queue */
	uint32_t client_ref;
	int64_t deadline_ns, timeout_us;
	const struct method *m;
	zcrpc_msg req;	       /* the kept request frame */
	struct zcrpc_frame f;  /* points into req */
	zcrpc_md md[ZCRPC_MD_MAX_PAIRS];
	size_t n_md;
	struct zcrpc__bulkbuf *req_bulk;
	zcrpc_grant *req_grant; /* the window over req_bulk, until revoked */
	/* reply bulk part */
	struct zcrpc__bulkbuf *reply_buf;
	zcrpc_bulk reply_src;
	void (*on_done)(void *ctx, zcrpc_status st);
	void *done_ctx;
};

struct sconn {
	zcrpc_server *s;
	zcrpc_conn *conn;
	struct sconn *next, *prev;
	zcrpc_server_call *calls;
	struct zcrpc__qframe *q_head, *q_tail; /* frames waiting for credits */
	int closed;
};

struct method {
	uint32_t id;
	char *name;
	zcrpc_handler fn;
	void *arg;
};

struct zcrpc_server {
	zcrpc_worker *w;
	zcrpc_server_opts o;
	zcrpc_listener *l;
	uint16_t port;
	struct method *methods;
	size_t nmethods, cap_methods;
	struct sconn *conns;
	zcrpc_server_call *calls;
	uint32_t ncalls, *free_idx, nfree;
	zcrpc_server_call *rq_head, *rq_tail; /* waiting for a handler slot */
	struct zcrpc__bulk_cache bulk;
	int shutting_down;
	zcrpc_server_stats st;
	uint8_t psk[ZCRPC_PSK_MAX]; /* o.psk points here */
};

/* ---- small helpers -------------------------------------------------------- */

static uint32_t sref(const zcrpc_server *s, const zcrpc_server_call *c)
{
	return ZCRPC_REF((uint32_t)(c - s->calls), c->gen);
}

static zcrpc_server_call *slookup(zcrpc_server *s, uint32_t ref)
{
	uint32_t idx = ZCRPC_REF_IDX(ref);
	zcrpc_server_call *c;

	if (idx >= s->ncalls)
		return NULL;
	c = &s->calls[idx];
	if (c->state == SS_FREE || c->gen != ZCRPC_REF_GEN(ref))
		return NULL;
	return c;
}

static const struct method *find_method(const zcrpc_server *s, uint32_t id)
{
	size_t i;

	for (i = 0; i < s->nmethods; i++) /* few methods; a scan is fine */
		if (s->methods[i].id == id)
			return &s->methods[i];
	return NULL;
}

/* Sends a frame now or queues it behind others waiting for credits. The
 * frame's slot belongs to the library either way. */
static void sc_send(struct sconn *sc, struct zcrpc__out *out)
{
	struct zcrpc__qframe *q;

	if (sc->closed) {
		zcrpc_msg_free(sc->s->w, &out->msg);
		return;
	}
	if (!sc->q_head) {
		zcrpc_status st = zcrpc_conn_send_msg(sc->conn, &out->msg, out->len);

		if (st == ZCRPC_OK)
			return;
		if (st != ZCRPC_RESOURCE_EXHAUSTED) {
			zcrpc_msg_free(sc->s->w, &out->msg);
			return;
		}
	}
	q = malloc(sizeof(*q));
	if (!q) {
		zcrpc_msg_free(sc->s->w, &out->msg);
		zcrpc_conn_close(sc->conn);
		return;
	}
	q->next = NULL;
	q->out = *out;
	if (sc->q_tail)
		sc->q_tail->next = q;
	else
		sc->q_head = q;
	sc->q_tail = q;
}

static void sc_flush(struct sconn *sc)
{
	struct zcrpc__qframe *q;

	while ((q = sc->q_head) && !sc->closed) {
		zcrpc_status st = zcrpc_conn_send_msg(sc->conn, &q->out.msg, q->out.len);

		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return;
		if (st != ZCRPC_OK)
			zcrpc_msg_free(sc->s->w, &q->out.msg);
		sc->q_head = q->next;
		if (!sc->q_head)
			sc->q_tail = NULL;
		free(q);
	}
}

static void send_simple(struct sconn *sc, uint8_t type, uint32_t call_id,
			zcrpc_status status, const char *msg)
{
	struct zcrpc_frame f;
	struct zcrpc__out out;
	size_t n = msg ? strlen(msg) : 0;

	memset(&f, 0, sizeof(f));
	f.type = type;
	f.call_id = call_id;
	f.status = (uint32_t)status;
	if (n > 512)
		n = 512;
	if (zcrpc__out_build(sc->s->w, &f, NULL, 0, n, NULL, NULL, msg, &out) ==
	    ZCRPC_OK)
		sc_send(sc, &out);
}

/* ---- calls ---------------------------------------------------------------- */

static void call_free(zcrpc_server *s, zcrpc_server_call *c)
{
	if (c->sc) {
		if (c->prev)
			c->prev->next = c->next;
		else
			c->sc->calls = c->next;
		if (c->next)
			c->next->prev = c->prev;
	}
	if (c->req.data)
		zcrpc_msg_free(s->w, &c->req);
	zcrpc__bulk_put(&s->bulk, c->req_bulk);
	zcrpc__bulk_put(&s->bulk, c->reply_buf);
	if (c->on_done) {
		void (*fn)(void *, zcrpc_status) = c->on_done;

		c->on_done = NULL;
		fn(c->done_ctx, c->state == SS_REPLY_WRITE ? ZCRPC_UNAVAILABLE
							   : ZCRPC_UNAVAILABLE);
	}
	memset((char *)c + offsetof(zcrpc_server_call, state), 0,
	       sizeof(*c) - offsetof(zcrpc_server_call, state));
	c->state = SS_FREE;
	c->gen = (c->gen + 1) & 0xfffU;
	if (!c->gen)
		c->gen = 1;
	s->free_idx[s->nfree++] = (uint32_t)(c - s->calls);
}

static void run_handler(zcrpc_server *s, zcrpc_server_call *c)
{
	zcrpc_request r;

	if (c->deadline_ns && zcrpc__now_ns() >= c->deadline_ns) {
		/* Its caller has given up: never run it. */
		s->st.expired_not_run++;
		if (c->sc)
			send_simple(c->sc, ZCRPC_FRAME_REPLY, c->client_ref,
				    ZCRPC_DEADLINE_EXCEEDED,
				    "deadline passed before the handler ran");
		call_free(s, c);
		return;
	}
	memset(&r, 0, sizeof(r));
	r.method_id = c->f.method_id;
	if (c->f.flags & ZCRPC_FRAME_F_PAYLOAD_IN_BULK) {
		r.data = c->req_bulk->ptr;
		r.len = (size_t)c->f.bulk_len;
	} else {
		r.data = c->f.payload;
		r.len = c->f.payload_len;
		if (c->req_bulk) {
			r.attachment = c->req_bulk->ptr;
			r.attachment_len = (size_t)c->f.bulk_len;
			r.attachment_mr.mr = c->req_bulk->mr;
			r.attachment_mr.offset = 0;
			r.attachment_mr.len = (size_t)c->f.bulk_len;
		}
	}
	r.md = c->md;
	r.n_md = c->n_md;
	r.timeout_us = c->f.deadline_us ? (int64_t)c->f.deadline_us : -1;
	c->state = SS_RUNNING;
	s->st.running++;
	c->m->fn(c, &r, c->m->arg);
}

static void dispatch(zcrpc_server *s, zcrpc_server_call *c)
{
	if (s->o.max_concurrent && s->st.running >= s->o.max_concurrent) {
		c->state = SS_QUEUED;
		c->qnext = NULL;
		if (s->rq_tail)
			s->rq_tail->qnext = c;
		else
			s->rq_head = c;
		s->rq_tail = c;
		s->st.queued++;
		return;
	}
	run_handler(s, c);
}

static void run_queue(zcrpc_server *s)
{
	zcrpc_server_call *c;

	while ((c = s->rq_head) &&
	       (!s->o.max_concurrent || s->st.running < s->o.max_concurrent)) {
		s->rq_head = c->qnext;
		if (!s->rq_head)
			s->rq_tail = NULL;
		c->qnext = NULL;
		s->st.queued--;
		if (c->cancelled || !c->sc) {
			s->st.cancelled++;
			call_free(s, c);
			continue;
		}
		run_handler(s, c);
	}
}

static void rq_remove(zcrpc_server *s, zcrpc_server_call *c)
{
	zcrpc_server_call **pp;

	for (pp = &s->rq_head; *pp; pp = &(*pp)->qnext) {
		if (*pp == c) {
			*pp = c->qnext;
			if (s->rq_tail == c) {
				zcrpc_server_call *t = s->rq_head;

				while (t && t->qnext)
					t = t->qnext;
				s->rq_tail = t;
			}
			s->st.queued--;
			return;
		}
	}
}

/* ---- receiving ------------------------------------------------------------ */

/* The client broke the protocol: close its connection, counted, with the
 * reason as its error text (on_disconnect gets INTERNAL). */
static void protocol_error(struct sconn *sc, const char *why)
{
	if (sc->conn->state != ZCRPC_CONN_CLOSED && !sc->conn->closing)
		sc->s->st.protocol_errors++; /* once per connection */
	zcrpc__conn_close_error(sc->conn, ZCRPC_INTERNAL,
				"protocol error from the client: %s", why);
}

static void on_request(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_server *s = sc->s;
	const struct method *m = find_method(s, f->method_id);
	zcrpc_server_call *c;

	s->st.calls++;
	if (!m) {
		char msg[64];

		s->st.unimplemented++;
		snprintf(msg, sizeof(msg), "unknown method id 0x%08x", (unsigned)f->method_id);
		send_simple(sc, ZCRPC_FRAME_REPLY, f->call_id, ZCRPC_UNIMPLEMENTED, msg);
		return;
	}
	if (s->shutting_down) {
		send_simple(sc, ZCRPC_FRAME_REPLY, f->call_id, ZCRPC_UNAVAILABLE,
			    "server is shutting down");
		return;
	}
	if (!s->nfree) {
		send_simple(sc, ZCRPC_FRAME_REPLY, f->call_id,
			    ZCRPC_RESOURCE_EXHAUSTED, "too many calls at the server");
		return;
	}
	c = &s->calls[s->free_idx[--s->nfree]];
	c->s = s;
	c->sc = sc;
	c->m = m;
	c->client_ref = f->call_id;
	c->timeout_us = f->deadline_us;
	c->deadline_ns = f->deadline_us ? zcrpc__now_ns() + (int64_t)f->deadline_us * 1000 : 0;
	/* Keep the request where it landed; the handler reads it in place. */
	if (zcrpc_conn_recv_keep(sc->conn, &c->req) != ZCRPC_OK) {
		c->state = SS_RUNNING; /* so call_free unlinks nothing odd */
		c->sc = NULL;
		call_free(s, c);
		return;
	}
	c->f = *f;
	c->n_md = zcrpc__md_view(&c->f, c->md);
	c->prev = NULL;
	c->next = sc->calls;
	if (sc->calls)
		sc->calls->prev = c;
	sc->calls = c;
	if (f->flags & ZCRPC_FRAME_F_BULK) {
		struct zcrpc_frame g;
		struct zcrpc__out out;
		zcrpc_remote_region r;

		if (zcrpc__bulk_get(&s->bulk, (size_t)f->bulk_len, &c->req_bulk) != ZCRPC_OK ||
		    zcrpc_mr_grant(c->req_bulk->mr, sc->conn, 0, (size_t)f->bulk_len, &r,
				   &c->req_grant) != ZCRPC_OK) {
			send_simple(sc, ZCRPC_FRAME_REPLY, f->call_id,
				    ZCRPC_RESOURCE_EXHAUSTED,
				    "no memory at the server for the request's bulk part");
			c->state = SS_RUNNING;
			call_free(s, c);
			return;
		}
		memset(&g, 0, sizeof(g));
		g.type = ZCRPC_FRAME_BULK_GRANT;
		g.call_id = f->call_id;
		g.bulk_addr = r.addr;
		g.bulk_len = r.len;
		g.bulk_rkey = r.rkey;
		g.bulk_token = sref(s, c);
		c->state = SS_AWAIT_BULK;
		if (zcrpc__out_build(s->w, &g, NULL, 0, 0, NULL, NULL, NULL, &out) == ZCRPC_OK)
			sc_send(sc, &out);
		return;
	}
	dispatch(s, c);
}

/* The client can no longer write into @c's request window (its write with
 * immediate arrived, or its CANCEL, which it sends only when it will not
 * write): revoke the window; on_revoked then runs the handler (or frees a
 * cancelled call), so nothing the handler reads can change under it. */
static void revoke_request(struct sconn *sc, zcrpc_server_call *c)
{
	zcrpc_grant *g = c->req_grant;

	c->req_grant = NULL;
	c->state = SS_REVOKING;
	if (zcrpc_grant_revoke(g, (void *)(uintptr_t)sref(sc->s, c)) != ZCRPC_OK)
		zcrpc_conn_close(sc->conn); /* closing already: freed on CLOSED */
}

static void on_cancel(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_server_call *c;

	for (c = sc->calls; c; c = c->next)
		if (c->client_ref == f->call_id)
			break;
	if (!c || c->cancelled)
		return;
	c->cancelled = 1;
	sc->s->st.cancelled++;
	if (c->state == SS_QUEUED) {
		rq_remove(sc->s, c);
		call_free(sc->s, c);
	} else if (c->state == SS_AWAIT_BULK) {
		/* A client never writes after its CANCEL (RC ordering: a
		 * write it posted earlier has landed by now): revoke, then
		 * free the call. */
		revoke_request(sc, c);
	}
	/* RUNNING: the handler's reply is not sent. */
}

static void on_grant(struct sconn *sc, const struct zcrpc_frame *f)
{
	zcrpc_server *s = sc->s;
	zcrpc_server_call *c = slookup(s, f->call_id);
	zcrpc_remote_region r;
	const zcrpc_mr *mr;
	size_t off, len;
	uint32_t imm = f->bulk_token;

	if (!c || c->sc != sc || c->state != SS_REPLY_GRANT) {
		protocol_error(sc, "grant for no reply");
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
		protocol_error(sc, "grant smaller than the reply's bulk part");
		return;
	}
	r.addr = f->bulk_addr;
	r.len = f->bulk_len;
	r.rkey = f->bulk_rkey;
	r.reserved = 0;
	if (zcrpc_conn_write(sc->conn, mr, off, len, &r, 0, &imm,
			     (void *)(uintptr_t)sref(s, c)) != ZCRPC_OK) {
		zcrpc_conn_close(sc->conn);
		return;
	}
	c->state = SS_REPLY_WRITE;
}

static void on_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg)
{
	struct sconn *sc = arg;
	struct zcrpc_frame f;
	char why[128];

	(void)conn;
	if (zcrpc__frame_decode(data, len, &f, why, sizeof(why)) != ZCRPC_OK) {
		protocol_error(sc, why);
		return;
	}
	switch (f.type) {
	case ZCRPC_FRAME_REQUEST:
		on_request(sc, &f);
		break;
	case ZCRPC_FRAME_CANCEL:
		on_cancel(sc, &f);
		break;
	case ZCRPC_FRAME_BULK_GRANT:
		on_grant(sc, &f);
		break;
	default:
		protocol_error(sc, "unexpected frame type");
		break;
	}
}

static void on_write_imm(zcrpc_conn *conn, uint32_t imm, size_t len,
			 void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server_call *c = slookup(sc->s, imm);

	(void)conn;
	(void)len;
	if (!c || c->sc != sc || c->state != SS_AWAIT_BULK) {
		protocol_error(sc, "write for no request");
		return;
	}
	revoke_request(sc, c); /* the handler runs once it is revoked */
}

static void on_revoked(zcrpc_conn *conn, void *uctx, zcrpc_status st,
		       void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server_call *c = slookup(sc->s, (uint32_t)(uintptr_t)uctx);

	(void)conn;
	if (!c || c->sc != sc || c->state != SS_REVOKING)
		return;
	if (st != ZCRPC_OK)
		return; /* the connection is going: freed on CLOSED */
	if (c->cancelled) {
		call_free(sc->s, c);
		return;
	}
	dispatch(sc->s, c);
}

static void on_write_done(zcrpc_conn *conn, void *uctx, zcrpc_status st,
			  void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server_call *c = slookup(sc->s, (uint32_t)(uintptr_t)uctx);

	(void)conn;
	if (!c || c->state != SS_REPLY_WRITE)
		return;
	if (c->on_done) {
		void (*fn)(void *, zcrpc_status) = c->on_done;

		c->on_done = NULL;
		fn(c->done_ctx, st);
	}
	if (st == ZCRPC_OK)
		sc->s->st.replies++;
	call_free(sc->s, c);
}

static void on_writable(zcrpc_conn *conn, void *arg)
{
	(void)conn;
	sc_flush(arg);
}

static void sconn_free(struct sconn *sc)
{
	zcrpc_server *s = sc->s;
	struct zcrpc__qframe *q;

	while ((q = sc->q_head)) {
		sc->q_head = q->next;
		zcrpc_msg_free(s->w, &q->out.msg);
		free(q);
	}
	if (sc->prev)
		sc->prev->next = sc->next;
	else
		s->conns = sc->next;
	if (sc->next)
		sc->next->prev = sc->prev;
	free(sc);
}

static void on_state(zcrpc_conn *conn, zcrpc_conn_state st, zcrpc_status why,
		     void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server *s = sc->s;
	zcrpc_server_call *c, *next;

	if (st != ZCRPC_CONN_CLOSED)
		return;
	sc->closed = 1;
	for (c = sc->calls; c; c = next) {
		next = c->next;
		c->prev = c->next = NULL;
		c->sc = NULL;
		c->cancelled = 1;
		/* A running handler still owns its call: it is freed at
		 * the reply, which then reports UNAVAILABLE. */
		if (c->state == SS_RUNNING)
			continue;
		if (c->state == SS_QUEUED)
			rq_remove(s, c);
		call_free(s, c);
	}
	sc->calls = NULL;
	s->st.connections--;
	if (s->o.on_disconnect)
		s->o.on_disconnect(s, conn, why, s->o.arg);
	sconn_free(sc);
	zcrpc_conn_destroy(conn);
}

static void on_accept(zcrpc_listener *l, zcrpc_conn *conn, void *arg)
{
	zcrpc_server *s = arg;
	struct sconn *sc = calloc(1, sizeof(*sc));
	zcrpc_conn_handlers h;

	(void)l;
	if (!sc) {
		zcrpc_conn_destroy(conn);
		return;
	}
	sc->s = s;
	sc->conn = conn;
	sc->next = s->conns;
	if (s->conns)
		s->conns->prev = sc;
	s->conns = sc;
	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.on_state = on_state;
	h.on_recv = on_recv;
	h.on_write_done = on_write_done;
	h.on_write_imm = on_write_imm;
	h.on_writable = on_writable;
	h.on_revoked = on_revoked;
	h.arg = sc;
	zcrpc_conn_set_handlers(conn, &h);
	s->st.connections++;
	if (s->o.on_connect)
		s->o.on_connect(s, conn, s->o.arg);
	if (s->shutting_down)
		send_simple(sc, ZCRPC_FRAME_GOAWAY, 0, ZCRPC_OK, NULL);
}

/* ---- replies -------------------------------------------------------------- */

static zcrpc_status reply(zcrpc_server_call *c, zcrpc_status status,
			  const char *message, const void *data, size_t len,
			  zcrpc_fill_fn fill, void *fill_ctx,
			  const zcrpc_reply_opts *o);

zcrpc_status zcrpc_call_reply(zcrpc_server_call *c, zcrpc_status status,
			      const char *message, const void *data, size_t len,
			      const zcrpc_reply_opts *o)
{
	if (len && !data)
		return ZCRPC_INVALID_ARGUMENT;
	return reply(c, status, message, data, len, NULL, NULL, o);
}

zcrpc_status zcrpc_call_reply_fill(zcrpc_server_call *c, size_t len,
				   zcrpc_fill_fn fill, void *fill_ctx,
				   const zcrpc_reply_opts *o)
{
	if (len && !fill)
		return ZCRPC_INVALID_ARGUMENT;
	return reply(c, ZCRPC_OK, NULL, NULL, len, fill, fill_ctx, o);
}

static zcrpc_status reply(zcrpc_server_call *c, zcrpc_status status,
			  const char *message, const void *data, size_t len,
			  zcrpc_fill_fn fill, void *fill_ctx,
			  const zcrpc_reply_opts *o)
{
	zcrpc_server *s;
	struct sconn *sc;
	zcrpc_reply_opts ro;
	struct zcrpc_frame f;
	struct zcrpc__out out;
	size_t mdl, inline_cap;
	zcrpc_status st;

	if (!c || c->state != SS_RUNNING ||
	    (unsigned)status >= ZCRPC_STATUS_COUNT)
		return ZCRPC_INVALID_ARGUMENT;
	s = c->s;
	sc = c->sc;
	memset(&ro, 0, sizeof(ro));
	ro.size = sizeof(ro);
	if (o) {
		if (o->size < sizeof(*o))
			return ZCRPC_INVALID_ARGUMENT;
		ro = *o;
	}
	s->st.running--;
	c->on_done = ro.on_done;
	c->done_ctx = ro.ctx;
	if (!sc) {
		call_free(s, c);
		run_queue(s);
		return ZCRPC_UNAVAILABLE;
	}
	if (c->cancelled) {
		call_free(s, c);
		run_queue(s);
		return ZCRPC_CANCELLED;
	}
	if (c->deadline_ns && zcrpc__now_ns() >= c->deadline_ns) {
		call_free(s, c);
		run_queue(s);
		return ZCRPC_DEADLINE_EXCEEDED;
	}
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REPLY;
	f.call_id = c->client_ref;
	f.status = (uint32_t)status;
	if (status != ZCRPC_OK) {
		/* Errors carry their message as the payload. */
		data = message ? message : "";
		len = strlen(data);
		fill = NULL;
		if (len > 512)
			len = 512;
		ro.attachment = NULL; /* metadata is still allowed */
	}
	mdl = zcrpc__md_bytes(ro.md, ro.n_md);
	if (mdl == (size_t)-1) {
		st = ZCRPC_INVALID_ARGUMENT;
		goto err_reply;
	}
	inline_cap = s->w->opts.max_msg - ZCRPC_FRAME_HDR_LEN - mdl;
	if (status == ZCRPC_OK && (len > s->o.bulk_threshold || len > inline_cap)) {
		if (ro.attachment) {
			st = ZCRPC_INVALID_ARGUMENT;
			goto err_reply;
		}
		st = zcrpc__bulk_get(&s->bulk, len, &c->reply_buf);
		if (st != ZCRPC_OK)
			goto err_reply;
		if (fill) {
			fill(c->reply_buf->ptr, len, fill_ctx);
		} else {
			memcpy(c->reply_buf->ptr, data, len);
			s->st.copied_bytes += len;
		}
		c->reply_src.len = len;
		f.flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
		f.bulk_len = len;
		len = 0;
	} else if (ro.attachment) {
		if (!ro.attachment->mr || !ro.attachment->len ||
		    ro.attachment->offset > ro.attachment->mr->len ||
		    ro.attachment->len > ro.attachment->mr->len - ro.attachment->offset) {
			st = ZCRPC_INVALID_ARGUMENT;
			goto err_reply;
		}
		c->reply_src = *ro.attachment;
		f.flags = ZCRPC_FRAME_F_BULK;
		f.bulk_len = ro.attachment->len;
	}
	if (f.flags & ZCRPC_FRAME_F_BULK)
		f.bulk_token = sref(s, c);
	st = zcrpc__out_build(s->w, &f, ro.md, ro.n_md, len, fill, fill_ctx,
			      data, &out);
	if (st != ZCRPC_OK)
		goto err_reply;
	if (status == ZCRPC_OK && !fill && len)
		s->st.copied_bytes += len;
	sc_send(sc, &out);
	if (f.flags & ZCRPC_FRAME_F_BULK) {
		/* Freed when its write completes; the request's memory stays
		 * until then, since the reply may be sent from it in place. */
		c->state = SS_REPLY_GRANT;
	} else {
		s->st.replies++;
		if (c->on_done) {
			void (*fn)(void *, zcrpc_status) = c->on_done;

			c->on_done = NULL;
			fn(c->done_ctx, ZCRPC_OK);
		}
		call_free(s, c);
	}
	run_queue(s);
	return ZCRPC_OK;

err_reply:
	/* The client still gets an answer. */
	send_simple(sc, ZCRPC_FRAME_REPLY, c->client_ref, ZCRPC_INTERNAL,
		    "the server could not build its reply");
	call_free(s, c);
	run_queue(s);
	return st;
}

struct xreply {
	zcrpc_server_call *call;
	uint32_t ref;
	zcrpc_status status;
	char *message;
	void *data;
	size_t len;
};

static void xreply_run(zcrpc_worker *w, void *arg)
{
	struct xreply *x = arg;
	zcrpc_server_call *c = x->call;

	(void)w;
	if (c->state == SS_RUNNING && sref(c->s, c) == x->ref)
		zcrpc_call_reply(c, x->status, x->message, x->data, x->len, NULL);
	free(x->message);
	free(x->data);
	free(x);
}

zcrpc_status zcrpc_call_reply_any_thread(zcrpc_server_call *c,
					 zcrpc_status status,
					 const char *message, const void *data,
					 size_t len)
{
	struct xreply *x;
	zcrpc_status st;

	if (!c || (len && !data))
		return ZCRPC_INVALID_ARGUMENT;
	x = calloc(1, sizeof(*x));
	if (!x)
		return ZCRPC_RESOURCE_EXHAUSTED;
	x->call = c;
	x->ref = sref(c->s, c); /* read-only fields, set before the handler ran */
	x->status = status;
	x->message = message ? strdup(message) : NULL;
	x->data = len ? malloc(len) : NULL;
	if ((message && !x->message) || (len && !x->data)) {
		free(x->message);
		free(x->data);
		free(x);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (len)
		memcpy(x->data, data, len);
	x->len = len;
	st = zcrpc_worker_post(c->s->w, xreply_run, x);
	if (st != ZCRPC_OK) {
		free(x->message);
		free(x->data);
		free(x);
	}
	return st;
}

int zcrpc_server_call_cancelled(const zcrpc_server_call *c)
{
	return c ? c->cancelled || !c->sc : 1;
}

/* ---- server lifecycle ----------------------------------------------------- */

void zcrpc_server_opts_init(zcrpc_server_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->window = 1040;
	o->bulk_threshold = 16384;
}

zcrpc_status zcrpc_server_create(zcrpc_worker *w, const zcrpc_server_opts *o,
				 zcrpc_server **out)
{
	zcrpc_server *s;
	uint32_t i;

	if (!w || !out)
		return ZCRPC_INVALID_ARGUMENT;
	s = calloc(1, sizeof(*s));
	if (!s)
		return ZCRPC_RESOURCE_EXHAUSTED;
	zcrpc_server_opts_init(&s->o);
	if (o) {
		if (o->size < sizeof(*o) || o->window < 2 || o->window > 32768 ||
		    (!o->psk && o->psk_len) ||
		    (o->psk && (o->psk_len < ZCRPC_PSK_MIN ||
				o->psk_len > ZCRPC_PSK_MAX)) ||
		    o->handshake_timeout_ms < 0) {
			free(s);
			return ZCRPC_INVALID_ARGUMENT;
		}
		s->o = *o;
		if (o->psk) { /* our own copy */
			memcpy(s->psk, o->psk, o->psk_len);
			s->o.psk = s->psk;
		}
	}
	s->w = w;
	s->ncalls = 65536;
	s->calls = calloc(s->ncalls, sizeof(*s->calls));
	s->free_idx = malloc(sizeof(uint32_t) * s->ncalls);
	if (!s->calls || !s->free_idx) {
		free(s->calls);
		free(s->free_idx);
		free(s);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	for (i = 0; i < s->ncalls; i++) {
		s->calls[i].gen = 1;
		s->free_idx[s->ncalls - 1 - i] = i;
	}
	s->nfree = s->ncalls;
	zcrpc__bulk_init(&s->bulk, zcrpc_worker_context(w), (size_t)2 << 30);
	*out = s;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_server_register(zcrpc_server *s, const char *full_name,
				   zcrpc_handler fn, void *arg)
{
	uint32_t id;
	const struct method *m;

	if (!s || !full_name || !*full_name || !fn)
		return ZCRPC_INVALID_ARGUMENT;
	id = zcrpc_method_id(full_name);
	if ((m = find_method(s, id)))
		return ZCRPC_ALREADY_EXISTS; /* same name, or a hash collision */
	if (s->nmethods == s->cap_methods) {
		size_t cap = s->cap_methods ? s->cap_methods * 2 : 16;
		struct method *nm = realloc(s->methods, cap * sizeof(*nm));

		if (!nm)
			return ZCRPC_RESOURCE_EXHAUSTED;
		s->methods = nm;
		s->cap_methods = cap;
	}
	s->methods[s->nmethods].name = strdup(full_name);
	if (!s->methods[s->nmethods].name)
		return ZCRPC_RESOURCE_EXHAUSTED;
	s->methods[s->nmethods].id = id;
	s->methods[s->nmethods].fn = fn;
	s->methods[s->nmethods].arg = arg;
	s->nmethods++;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_server_listen(zcrpc_server *s, const char *host,
				 const char *port)
{
	zcrpc_listen_opts lo;
	zcrpc_status st;

	if (!s || !port)
		return ZCRPC_INVALID_ARGUMENT;
	if (s->l)
		return ZCRPC_FAILED_PRECONDITION;
	zcrpc_listen_opts_init(&lo);
	lo.on_accept = on_accept;
	lo.arg = s;
	lo.recv_depth = s->o.window;
	lo.send_depth = s->o.window;
	lo.psk = s->o.psk;
	lo.psk_len = s->o.psk_len;
	lo.max_handshakes = s->o.max_handshakes;
	lo.handshake_timeout_ms = s->o.handshake_timeout_ms;
	st = zcrpc_listen(s->w, host, port, &lo, &s->l);
	if (st == ZCRPC_OK)
		s->port = zcrpc_listener_port(s->l);
	return st;
}

uint16_t zcrpc_server_port(const zcrpc_server *s)
{
	return s ? s->port : 0;
}

static uint32_t calls_alive(const zcrpc_server *s)
{
	return s->ncalls - s->nfree;
}

zcrpc_status zcrpc_server_shutdown(zcrpc_server *s, int grace_ms)
{
	struct sconn *sc;
	int64_t end;

	if (!s)
		return ZCRPC_INVALID_ARGUMENT;
	if (s->w->in_progress)
		return ZCRPC_FAILED_PRECONDITION;
	s->shutting_down = 1;
	zcrpc_listener_destroy(s->l);
	s->l = NULL;
	for (sc = s->conns; sc; sc = sc->next)
		send_simple(sc, ZCRPC_FRAME_GOAWAY, 0, ZCRPC_OK, NULL);
	end = zcrpc__now_ns() + (int64_t)(grace_ms > 0 ? grace_ms : 0) * 1000000LL;
	while (calls_alive(s) && zcrpc__now_ns() < end)
		zcrpc_worker_progress(s->w, 10);
	if (calls_alive(s)) {
		for (sc = s->conns; sc; sc = sc->next)
			zcrpc_conn_close(sc->conn);
		end = zcrpc__now_ns() + 3000LL * 1000000LL;
		while (s->conns && zcrpc__now_ns() < end)
			zcrpc_worker_progress(s->w, 10);
		return ZCRPC_DEADLINE_EXCEEDED;
	}
	for (sc = s->conns; sc; sc = sc->next)
		zcrpc_conn_close(sc->conn);
	end = zcrpc__now_ns() + 3000LL * 1000000LL;
	while (s->conns && zcrpc__now_ns() < end)
		zcrpc_worker_progress(s->w, 10);
	return ZCRPC_OK;
}

void zcrpc_server_destroy(zcrpc_server *s)
{
	size_t i;

	if (!s)
		return;
	zcrpc_listener_destroy(s->l);
	while (s->conns) {
		struct sconn *sc = s->conns;
		zcrpc_conn *conn = sc->conn;
		zcrpc_server_call *c, *next;

		for (c = sc->calls; c; c = next) {
			next = c->next;
			c->prev = c->next = NULL;
			c->sc = NULL;
			c->on_done = NULL;
			call_free(s, c);
		}
		sc->calls = NULL;
		sconn_free(sc);
		zcrpc_conn_destroy(conn);
	}
	for (i = 0; i < s->ncalls; i++)
		if (s->calls[i].state != SS_FREE) {
			s->calls[i].on_done = NULL;
			call_free(s, &s->calls[i]);
		}
	zcrpc__bulk_fini(&s->bulk);
	for (i = 0; i < s->nmethods; i++)
		free(s->methods[i].name);
	free(s->methods);
	free(s->calls);
	free(s->free_idx);
	explicit_bzero(s->psk, sizeof(s->psk));
	free(s);
}

void zcrpc_server_get_stats(const zcrpc_server *s, zcrpc_server_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (s)
		*out = s->st;
}
