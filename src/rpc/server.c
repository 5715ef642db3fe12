/* zcrpc — the server side: registration by method id, accept, dispatch,
 * replies (inline, in place, from another thread), the bulk path, a
 * concurrency limit with deadline checks, GOAWAY and graceful shutdown. */
#include "rpc_internal.h"
#include "../core/abi.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How soon a frame that found no pool slot is tried again. */
#define ZCRPC_RETRY_NS (1000LL * 1000LL)
/* A request part's write gets bulk_write_timeout_ms plus this per MiB
 * (a floor of 1 MiB/s: rxe in an emulated guest moves 3-35 MiB/s). */
#define ZCRPC_NS_PER_MIB (1000LL * 1000000LL)
/* A buffer whose window was not revoked (its connection closed first) is
 * not deregistered for this long: the teardown deallocates the window
 * (close wait 2 s, flush 100 ms) and a registration with a bound window
 * cannot be deregistered. */
#define ZCRPC_WINDOW_GRACE_NS (5000LL * 1000000LL)

enum sstate {
	SS_FREE = 0,
	SS_AWAIT_BULK,	/* granted a target for the request's bulk part */
	SS_REVOKING,	/* its bulk part landed (or it was cancelled): the
			 * window is being revoked before anyone reads it */
	SS_QUEUED,	/* ready, waiting for a handler slot */
	SS_RUNNING,	/* the handler has it; waiting for the reply */
	SS_REPLY_GRANT, /* reply sent with a bulk part; waiting for the grant */
	SS_REPLY_WRITE, /* writing the reply's bulk part */
	SS_AWAIT_BUF,	/* its request buffer is being registered off-thread */
	SS_REPLY_BUF,	/* its reply is built; its bulk buffer is being
			 * registered off-thread (the bytes wait on the heap) */
};

struct sconn;

struct zcrpc_server_call {
	uint32_t gen;
	uint8_t state;
	atomic_uchar cancelled; /* any thread reads it (call_cancelled) */
	uint8_t bulk_bad; /* its part's write carried the wrong byte count */
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
	size_t write_len;	/* bulk_bad: the byte count that came */
	zcrpc_request view; /* what the handler sees, valid until the reply */
	size_t budget;		/* bytes charged to sc->bulk_held */
	int64_t bulk_deadline_ns; /* AWAIT_BULK: the write's time limit (it
				   * moves later while the connection's
				   * earlier parts land, see bulk_due);
				   * REPLY_GRANT: the client's grant's */
	int64_t granted_ns;	  /* AWAIT_BULK: when the grant was made */
	/* reply bulk part */
	struct zcrpc__bulkbuf *reply_buf;
	zcrpc_bulk reply_src;
	void *reply_heap;	     /* REPLY_BUF: the bytes, until the buffer */
	struct zcrpc__out reply_out; /* REPLY_BUF: the reply frame, unsent */
	void (*on_done)(void *ctx, zcrpc_status st);
	void *done_ctx;
};

/* A frame that could not be built for want of a pool slot: kept as its
 * fields and built when a slot returns (the server's timer retries), never
 * dropped. */
struct pframe {
	struct pframe *next;
	struct zcrpc_frame f;
	uint32_t grant_ref; /* BULK_GRANT: the call it is for; dropped when
			     * that call no longer waits for its bulk part */
	size_t len;	    /* bytes of msg */
	char msg[];
};

struct sconn {
	zcrpc_server *s;
	zcrpc_conn *conn;
	struct sconn *next, *prev;
	zcrpc_server_call *calls;
	struct zcrpc__qframe *q_head, *q_tail; /* frames waiting for credits */
	struct pframe *p_head, *p_tail;	       /* frames waiting for a slot */
	size_t bulk_held; /* bulk memory granted (or being registered) for
			   * request parts not yet written */
	int64_t landed_ns, landed_granted_ns; /* the last part that landed:
					       * when, and when granted */
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
	struct zcrpc__timer timer; /* deferred frames, buffers registered
				    * off-thread, bulk time limits */
	uint32_t npframes;	   /* frames waiting for a slot, all conns */
	size_t conn_max;	   /* bulk budget per connection */
	int64_t write_timeout_ns;
	int64_t next_bulk_check_ns; /* earliest bulk time limit, 0 = none */
	int64_t idle_ns;	    /* memory free this long is given back */
	int64_t next_trim_ns;
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

/* Builds the deferred frames in order while slots are there. A grant
 * whose call stopped waiting for its bulk part (cancelled, closed) is
 * dropped: nobody needs it any more. */
static void pframes_flush(struct sconn *sc)
{
	zcrpc_server *s = sc->s;
	struct pframe *p;

	while ((p = sc->p_head) && !sc->closed) {
		if (p->grant_ref) {
			zcrpc_server_call *c = slookup(s, p->grant_ref);

			if (!c || c->sc != sc || c->state != SS_AWAIT_BULK ||
			    c->cancelled)
				goto drop;
		}
		{
			struct zcrpc__out out;
			zcrpc_status st = zcrpc__out_build(s->w, &p->f, NULL, 0,
							   p->len, NULL, NULL,
							   p->msg, &out);

			if (st == ZCRPC_RESOURCE_EXHAUSTED)
				return; /* still none: the timer tries again */
			if (st == ZCRPC_OK)
				sc_send(sc, &out);
		}
drop:
		sc->p_head = p->next;
		if (!sc->p_head)
			sc->p_tail = NULL;
		s->npframes--;
		free(p);
	}
}

/* Keeps @f (and @n bytes of @msg) until a pool slot returns. */
static void defer_frame(struct sconn *sc, const struct zcrpc_frame *f,
			const char *msg, size_t n, uint32_t grant_ref)
{
	zcrpc_server *s = sc->s;
	struct pframe *p = malloc(sizeof(*p) + n);

	if (!p) {
		/* Nothing left to keep the promise with: the client learns
		 * it from the connection instead of waiting. */
		zcrpc_conn_close(sc->conn);
		return;
	}
	p->next = NULL;
	p->f = *f;
	p->grant_ref = grant_ref;
	p->len = n;
	if (n)
		memcpy(p->msg, msg, n);
	if (sc->p_tail)
		sc->p_tail->next = p;
	else
		sc->p_head = p;
	sc->p_tail = p;
	s->npframes++;
	s->st.frames_deferred++;
	zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns() + ZCRPC_RETRY_NS);
}

/* Builds and sends a frame without a body other than @n bytes of @msg (an
 * error reply, a GOAWAY, a grant); without a pool slot it waits for one.
 * Frames keep their order. */
static void send_frame(struct sconn *sc, struct zcrpc_frame *f,
		       const char *msg, size_t n, uint32_t grant_ref)
{
	struct zcrpc__out out;
	zcrpc_status st;

	if (sc->closed)
		return;
	if (sc->p_head) {
		defer_frame(sc, f, msg, n, grant_ref);
		return;
	}
	st = zcrpc__out_build(sc->s->w, f, NULL, 0, n, NULL, NULL, msg, &out);
	if (st == ZCRPC_OK)
		sc_send(sc, &out);
	else if (st == ZCRPC_RESOURCE_EXHAUSTED)
		defer_frame(sc, f, msg, n, grant_ref);
	else
		zcrpc_conn_close(sc->conn); /* cannot happen: fixed sizes */
}

static void send_simple(struct sconn *sc, uint8_t type, uint32_t call_id,
			zcrpc_status status, const char *msg)
{
	struct zcrpc_frame f;
	size_t n;

	memset(&f, 0, sizeof(f));
	f.type = type;
	f.call_id = call_id;
	f.status = (uint32_t)status;
	n = zcrpc__status_msg_len(msg);
	send_frame(sc, &f, msg, n, 0);
}

/* ---- calls ---------------------------------------------------------------- */

/* The bytes @c held of its connection's bulk budget go back. */
static void budget_release(zcrpc_server_call *c)
{
	if (c->budget && c->sc)
		c->sc->bulk_held -= c->budget;
	c->budget = 0;
}

static void watch_bulk_deadline(zcrpc_server *s, int64_t dl)
{
	if (!s->next_bulk_check_ns || dl < s->next_bulk_check_ns) {
		s->next_bulk_check_ns = dl;
		zcrpc__timer_start(s->w, &s->timer, dl);
	}
}

static void call_free(zcrpc_server *s, zcrpc_server_call *c)
{
	budget_release(c);
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
	if (c->reply_out.msg.data)
		zcrpc_msg_free(s->w, &c->reply_out.msg);
	free(c->reply_heap);
	if (c->req_grant && c->req_bulk) /* freed with its connection */
		c->req_bulk->keep_until_ns = zcrpc__now_ns() + ZCRPC_WINDOW_GRACE_NS;
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
	zcrpc_request *r = &c->view; /* lives with the call, not this frame */

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
	zcrpc__abi_sized_init(r, sizeof(*r), sizeof(*r));
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

/* Every buffer a request's bulk part is granted passes here, whether it
 * comes from the cache's free list or fresh from its thread: bind the
 * window over it, send the grant, start the write's time limit. */
static void grant_request(zcrpc_server *s, zcrpc_server_call *c,
			  struct zcrpc__bulkbuf *b)
{
	struct sconn *sc = c->sc;
	struct zcrpc_frame g;
	zcrpc_remote_region r;

	c->req_bulk = b;
	/* A part longer than one piece may be left partly unwritten (only
	 * the last piece's count is checked): zero what may hold another
	 * peer's bytes (docs/protocol.md §4). */
	zcrpc__bulk_scrub(b->ptr, (size_t)c->f.bulk_len,
			  zcrpc_conn_write_piece(sc->conn));
	if (zcrpc_mr_grant(b->mr, sc->conn, 0, (size_t)c->f.bulk_len, &r,
			   &c->req_grant) != ZCRPC_OK) {
		send_simple(sc, ZCRPC_FRAME_REPLY, c->client_ref,
			    ZCRPC_RESOURCE_EXHAUSTED,
			    "no memory at the server for the request's bulk part");
		c->state = SS_RUNNING;
		call_free(s, c);
		return;
	}
	memset(&g, 0, sizeof(g));
	g.type = ZCRPC_FRAME_BULK_GRANT;
	g.call_id = c->client_ref;
	g.bulk_addr = r.addr;
	g.bulk_len = r.len;
	g.bulk_rkey = r.rkey;
	g.bulk_token = sref(s, c);
	c->state = SS_AWAIT_BULK;
	c->granted_ns = zcrpc__now_ns();
	c->bulk_deadline_ns = c->granted_ns + s->write_timeout_ns +
			      (int64_t)(c->f.bulk_len >> 20) * ZCRPC_NS_PER_MIB;
	watch_bulk_deadline(s, c->bulk_deadline_ns);
	send_frame(sc, &g, NULL, 0, g.bulk_token);
}

/* A request announced a bulk part: charge the connection's budget and take
 * a buffer without registering on this thread; answer RESOURCE_EXHAUSTED
 * when the budget or the cache's cap does not allow it. */
static void request_bulk(zcrpc_server *s, struct sconn *sc,
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
		st = zcrpc__bulk_get_async(&s->bulk, len, sref(s, c), &b);
	if (st == ZCRPC_OK || st == ZCRPC_UNAVAILABLE) {
		c->budget = cap;
		sc->bulk_held += cap;
	}
	if (st == ZCRPC_OK) {
		grant_request(s, c, b);
		return;
	}
	if (st == ZCRPC_UNAVAILABLE) { /* on_buffer continues */
		c->state = SS_AWAIT_BUF;
		s->st.bulk_waits++;
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns() + ZCRPC_RETRY_NS);
		return;
	}
	s->st.bulk_refused++;
	send_simple(sc, ZCRPC_FRAME_REPLY, c->client_ref,
		    ZCRPC_RESOURCE_EXHAUSTED, why);
	c->state = SS_RUNNING;
	call_free(s, c);
}

/* The reply waiting for its bulk buffer (REPLY_BUF) gets it: its bytes
 * move over and the reply frame goes out. */
static void reply_buffer_ready(zcrpc_server *s, zcrpc_server_call *c,
			       struct zcrpc__bulkbuf *b)
{
	if (!b) {
		send_simple(c->sc, ZCRPC_FRAME_REPLY, c->client_ref,
			    ZCRPC_RESOURCE_EXHAUSTED,
			    "registering memory for the reply's bulk part failed");
		call_free(s, c);
		return;
	}
	c->reply_buf = b;
	memcpy(b->ptr, c->reply_heap, c->reply_src.len);
	s->st.copied_bytes += c->reply_src.len;
	free(c->reply_heap);
	c->reply_heap = NULL;
	sc_send(c->sc, &c->reply_out);
	memset(&c->reply_out, 0, sizeof(c->reply_out));
	c->state = SS_REPLY_GRANT;
	c->bulk_deadline_ns = zcrpc__now_ns() + s->write_timeout_ns;
	watch_bulk_deadline(s, c->bulk_deadline_ns);
}

/* A buffer registered on the cache's thread for the call @ref. */
static void on_buffer(void *arg, uint32_t ref, struct zcrpc__bulkbuf *b)
{
	zcrpc_server *s = arg;
	zcrpc_server_call *c = slookup(s, ref);

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
		send_simple(c->sc, ZCRPC_FRAME_REPLY, c->client_ref,
			    ZCRPC_RESOURCE_EXHAUSTED,
			    "registering memory for the request's bulk part failed");
		c->state = SS_RUNNING;
		call_free(s, c);
		return;
	}
	grant_request(s, c, b);
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
		request_bulk(s, sc, c);
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

	budget_release(c); /* written, or never will be */
	if (!c->cancelled) { /* it landed: the parts granted after it may
			      * have waited behind it at the client */
		sc->landed_ns = zcrpc__now_ns();
		sc->landed_granted_ns = c->granted_ns;
	}
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
	} else if (c->state == SS_AWAIT_BUF) {
		call_free(sc->s, c); /* no window yet; its buffer is cached */
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

	if (!c || c->sc != sc || c->state != SS_AWAIT_BULK) {
		protocol_error(sc, "write for no request");
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
	if (c->bulk_bad) {
		char msg[128];

		snprintf(msg, sizeof(msg),
			 "request bulk part: the write with immediate carried %zu bytes, %zu expected of a %llu-byte part",
			 c->write_len,
			 zcrpc__bulk_last_piece((size_t)c->f.bulk_len,
						zcrpc_conn_write_piece(conn)),
			 (unsigned long long)c->f.bulk_len);
		send_simple(sc, ZCRPC_FRAME_REPLY, c->client_ref,
			    ZCRPC_INVALID_ARGUMENT, msg);
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
	struct sconn *sc = arg;

	(void)conn;
	sc_flush(sc);
	if (sc->p_head)
		pframes_flush(sc);
}

/* A request part not written in time: the grant is revoked (a write
 * after that fails the client's connection) and the call answered. A reply
 * part the client never granted: the call is freed (nobody can write into
 * the server's memory). */
static void bulk_expire(zcrpc_server *s, zcrpc_server_call *c)
{
	s->st.bulk_timeouts++;
	if (c->state == SS_REPLY_GRANT) {
		call_free(s, c);
		return;
	}
	send_simple(c->sc, ZCRPC_FRAME_REPLY, c->client_ref,
		    ZCRPC_RESOURCE_EXHAUSTED,
		    "bulk part not written within the server's time limit");
	c->cancelled = 1; /* freed when the revoke completed */
	revoke_request(c->sc, c);
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
static void bulk_check(zcrpc_server *s, int64_t now)
{
	uint32_t due[64];
	unsigned n = 0, i;
	struct sconn *sc;
	int64_t next = 0;

	for (sc = s->conns; sc; sc = sc->next) {
		zcrpc_server_call *c;

		for (c = sc->calls; c; c = c->next) {
			int64_t dl;

			if (!bulk_waiting(c))
				continue;
			dl = bulk_due(c);
			if (now >= dl && n < 64)
				due[n++] = sref(s, c);
			else if (!next || dl < next)
				next = dl;
		}
	}
	if (n == 64)
		next = now; /* more to do on the next run */
	s->next_bulk_check_ns = 0;
	if (next)
		watch_bulk_deadline(s, next);
	for (i = 0; i < n; i++) {
		zcrpc_server_call *c = slookup(s, due[i]);

		if (c && c->sc && bulk_waiting(c))
			bulk_expire(s, c);
	}
}

/* The server's timer: frames waiting for a pool slot, buffers registered
 * off-thread, bulk time limits. */
static void on_timer(struct zcrpc__timer *t, int64_t now)
{
	zcrpc_server *s = (zcrpc_server *)((char *)t - offsetof(zcrpc_server, timer));
	struct sconn *sc;

	if (s->bulk.growing)
		zcrpc__bulk_collect(&s->bulk, on_buffer, s);
	if (s->next_bulk_check_ns && now >= s->next_bulk_check_ns)
		bulk_check(s, now);
	for (sc = s->conns; sc; sc = sc->next)
		if (sc->p_head)
			pframes_flush(sc);
	if (now >= s->next_trim_ns) {
		/* The bulk cache and the worker's pool follow the working
		 * size: what stayed free for idle_ns goes back. */
		zcrpc__bulk_trim(&s->bulk, now, s->idle_ns);
		zcrpc__pool_trim(s->w->pool, now, s->idle_ns);
		s->next_trim_ns = now + s->idle_ns / 2;
	}
	if (s->npframes || s->bulk.growing)
		zcrpc__timer_start(s->w, &s->timer, now + ZCRPC_RETRY_NS);
	if (s->next_bulk_check_ns)
		zcrpc__timer_start(s->w, &s->timer, s->next_bulk_check_ns);
	zcrpc__timer_start(s->w, &s->timer, s->next_trim_ns);
}

static void sconn_free(struct sconn *sc)
{
	zcrpc_server *s = sc->s;
	struct zcrpc__qframe *q;
	struct pframe *p;

	while ((q = sc->q_head)) {
		sc->q_head = q->next;
		zcrpc_msg_free(s->w, &q->out.msg);
		free(q);
	}
	while ((p = sc->p_head)) {
		sc->p_head = p->next;
		s->npframes--;
		free(p);
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
	if (why == ZCRPC_OK)
		s->st.conns_closed++; /* the client (or we) closed in order */
	else
		s->st.conns_lost++; /* crash, loss, error; zcrpc_conn_error says */
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

/* The reply's bulk part, written by @fill or copied from @data: into a
 * buffer from the cache, or, while one is registered off-thread (the
 * worker never registers), onto the heap until on_buffer. */
static zcrpc_status reply_take_buffer(zcrpc_server *s, zcrpc_server_call *c,
				      const void *data, size_t len,
				      zcrpc_fill_fn fill, void *fill_ctx)
{
	zcrpc_status st = zcrpc__bulk_get_async(&s->bulk, len, sref(s, c),
						&c->reply_buf);
	void *dst;

	if (st == ZCRPC_UNAVAILABLE) {
		c->reply_heap = malloc(len);
		if (!c->reply_heap)
			return ZCRPC_RESOURCE_EXHAUSTED; /* the buffer is cached */
		dst = c->reply_heap;
	} else if (st != ZCRPC_OK) {
		return st;
	} else {
		dst = c->reply_buf->ptr;
	}
	if (fill) {
		fill(dst, len, fill_ctx);
	} else {
		memcpy(dst, data, len);
		s->st.copied_bytes += len;
	}
	return ZCRPC_OK;
}

static zcrpc_status reply(zcrpc_server_call *c, zcrpc_status status,
			  const char *message, const void *data, size_t len,
			  zcrpc_fill_fn fill, void *fill_ctx,
			  const zcrpc_reply_opts *o);

/* A reply asked with bad arguments still ends the call (rpc.h: the handle
 * is released whatever the result): the client gets INTERNAL. */
static zcrpc_status reply_invalid(zcrpc_server_call *c)
{
	reply(c, ZCRPC_INTERNAL, "the server could not build its reply", NULL,
	      0, NULL, NULL, NULL);
	return ZCRPC_INVALID_ARGUMENT;
}

zcrpc_status zcrpc_call_reply(zcrpc_server_call *c, zcrpc_status status,
			      const char *message, const void *data, size_t len,
			      const zcrpc_reply_opts *o)
{
	if (len && !data)
		return reply_invalid(c);
	return reply(c, status, message, data, len, NULL, NULL, o);
}

zcrpc_status zcrpc_call_reply_fill(zcrpc_server_call *c, size_t len,
				   zcrpc_fill_fn fill, void *fill_ctx,
				   const zcrpc_reply_opts *o)
{
	if (len && !fill)
		return reply_invalid(c);
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

	if (!c || c->state != SS_RUNNING)
		return ZCRPC_INVALID_ARGUMENT;
	memset(&ro, 0, sizeof(ro));
	ro.size = sizeof(ro);
	if (o && ZCRPC__ABI_IN(&ro, o, ZCRPC__MIN_REPLY_OPTS) != ZCRPC_OK)
		return reply_invalid(c);
	s = c->s;
	sc = c->sc;
	if ((unsigned)status >= ZCRPC_STATUS_COUNT) {
		/* Not a gRPC code: sent as UNKNOWN, as gRPC does. */
		s->st.invalid_status++;
		status = ZCRPC_UNKNOWN;
		if (!message || !*message)
			message = "invalid status code from the handler";
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
		len = zcrpc__status_msg_len(data);
		fill = NULL;
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
		st = reply_take_buffer(s, c, data, len, fill, fill_ctx);
		if (st != ZCRPC_OK)
			goto err_reply;
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
	if (c->reply_heap) { /* on_buffer sends it */
		c->reply_out = out;
		c->state = SS_REPLY_BUF;
		s->st.bulk_waits++;
		zcrpc__timer_start(s->w, &s->timer, zcrpc__now_ns() + ZCRPC_RETRY_NS);
		run_queue(s);
		return ZCRPC_OK;
	}
	sc_send(sc, &out);
	if (f.flags & ZCRPC_FRAME_F_BULK) {
		/* Freed when its write completes; the request's memory stays
		 * until then, since the reply may be sent from it in place. */
		c->state = SS_REPLY_GRANT;
		c->bulk_deadline_ns = zcrpc__now_ns() + s->write_timeout_ns;
		watch_bulk_deadline(s, c->bulk_deadline_ns);
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
	/* The client still gets an answer (once a pool slot is there). */
	if (st == ZCRPC_RESOURCE_EXHAUSTED)
		send_simple(sc, ZCRPC_FRAME_REPLY, c->client_ref,
			    ZCRPC_RESOURCE_EXHAUSTED,
			    "no memory at the server for the reply");
	else
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
	/* Any thread: the worker sets the flag on CANCEL and when the
	 * connection closes (where it also clears c->sc). */
	return c ? atomic_load((atomic_uchar *)&c->cancelled) : 1;
}

/* ---- server lifecycle ----------------------------------------------------- */

void zcrpc_server_opts_init_sized(zcrpc_server_opts *caller, size_t size)
{
	zcrpc_server_opts d, *o = &d;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->window = ZCRPC_RPC_DEFAULT_WINDOW;
	o->bulk_threshold = 16384;
	zcrpc__abi_init(caller, size, o, sizeof(*o));
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
		const zcrpc_server_opts *n =
			&s->o; /* the caller's, under the rule */

		if (ZCRPC__ABI_IN(&s->o, o, ZCRPC__MIN_SERVER_OPTS) !=
			    ZCRPC_OK ||
		    n->window < ZCRPC_MIN_QUEUE_DEPTH ||
		    n->window > ZCRPC_MAX_QUEUE_DEPTH ||
		    (!n->psk && n->psk_len) ||
		    (n->psk && (n->psk_len < ZCRPC_PSK_MIN ||
				n->psk_len > ZCRPC_PSK_MAX)) ||
		    n->handshake_timeout_ms < 0 ||
		    n->bulk_write_timeout_ms < 0 || n->idle_release_ms < 0) {
			free(s);
			return ZCRPC_INVALID_ARGUMENT;
		}
		if (n->psk) { /* our own copy */
			memcpy(s->psk, n->psk, n->psk_len);
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
	if (!s->o.bulk_cache_max)
		s->o.bulk_cache_max = (size_t)2 << 30;
	s->conn_max = s->o.bulk_conn_max ? s->o.bulk_conn_max
					 : s->o.bulk_cache_max / 4;
	s->write_timeout_ns = (int64_t)(s->o.bulk_write_timeout_ms
						? s->o.bulk_write_timeout_ms
						: 10000) * 1000000LL;
	s->idle_ns = (int64_t)(s->o.idle_release_ms ? s->o.idle_release_ms
						    : 10000) * 1000000LL;
	zcrpc__bulk_init(&s->bulk, zcrpc_worker_context(w), s->o.bulk_cache_max);
	s->timer.fn = on_timer;
	s->next_trim_ns = zcrpc__now_ns() + s->idle_ns / 2;
	zcrpc__timer_start(w, &s->timer, s->next_trim_ns);
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
	zcrpc__timer_stop(s->w, &s->timer);
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

void zcrpc_server_get_stats(const zcrpc_server *s, zcrpc_server_stats *dst,
			    size_t dst_size)
{
	zcrpc_server_stats all, *out = &all;

	memset(out, 0, sizeof(*out));
	if (s) {
		struct zcrpc__bulk_stats b;

		*out = s->st;
		zcrpc__bulk_get_stats(&s->bulk, &b);
		out->bulk_pinned = b.pinned;
		out->bulk_in_use = b.in_use;
		out->bulk_released = b.released;
		out->pool_pinned = zcrpc__pool_pinned(s->w->pool);
	}
	ZCRPC__ABI_OUT(dst, dst_size, out);
}
