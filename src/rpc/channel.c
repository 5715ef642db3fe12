/* zcrpc — the client side: channels and calls.
 *
 * A channel owns one current connection (made lazily, remade after a
 * failure with jittered exponential backoff), maybe one draining one (after
 * a GOAWAY), a table of calls (index + generation, O(1) lookup, so a late
 * reply to a finished call is recognised and dropped), a bounded queue of
 * calls waiting for a connection or credits, and a bulk-buffer cache. */
#include "rpc_internal.h"
#include "../transport/test_hooks.h"
#include "../core/abi.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum cstate {
	CS_FREE = 0,
	CS_QUEUED,	 /* built, waiting to be sent */
	CS_SENT,	 /* request sent, waiting for the reply (or a grant) */
	CS_WRITING,	 /* our bulk part is being written */
	CS_REPLY_BULK,	 /* reply announced a bulk part; we granted, waiting */
	CS_REPLY_REVOKING, /* its bulk part landed; revoking before the callback */
	CS_DONE,	 /* completed; waiting for its callback (done list) */
	CS_ZOMBIE,	 /* completed, but the server may still write into our grant */
};

/* A completed call whose reply target is granted waits this long for the
 * server's write (which an honest server always posts once it has the
 * grant) before the connection is torn down to end the grant. */
#define ZCRPC_GRANT_GRACE_NS (10000LL * 1000000LL)

struct ccall {
	uint32_t gen;
	uint8_t state;
	uint8_t sync;
	struct ccall *next, *prev; /* active list, or done list */
	struct ccall *qnext;	   /* pending queue */
	zcrpc_channel *ch;
	zcrpc_conn *conn; /* connection it went out on */
	zcrpc_call_cb cb;
	void *arg;
	int64_t deadline_ns;
	struct zcrpc__out out; /* the request frame until sent */
	/* request bulk part */
	const zcrpc_mr *src_mr;
	size_t src_off, bulk_len;
	struct zcrpc__bulkbuf *src_buf;
	unsigned payload_in_bulk : 1;
	unsigned write_pending_status : 1;
	unsigned granted : 1; /* we granted the server a reply target */
	unsigned bulk_bad : 1; /* the reply part's write had the wrong count */
	unsigned revoking : 1; /* ZOMBIE: its window is being revoked */
	unsigned cancel_after_write : 1; /* send CANCEL once our write is done */
	unsigned deliver_late : 1; /* ZOMBIE over the caller's reply_into:
				    * its callback runs when the grant ends */
	zcrpc_grant *reply_grant; /* the window over the reply target */
	int64_t zombie_deadline_ns;
	zcrpc_status pending_status; /* completion waiting for a write */
	char pending_msg[96];
	/* reply bulk target */
	zcrpc_bulk reply_into;
	int has_reply_into;
	struct zcrpc__bulkbuf *dst_buf;
	size_t max_reply;
	/* reply kept while its bulk part arrives */
	zcrpc_msg reply_msg;
	int has_reply_msg;
	struct zcrpc_frame reply;
	/* result, for the done list */
	zcrpc_status status;
	char message[128];
};

struct zcrpc_channel {
	zcrpc_worker *w;
	char *host, *port, *src_addr;
	zcrpc_channel_opts o;
	zcrpc_conn *conn;     /* current */
	int conn_up;	      /* current is ESTABLISHED */
	zcrpc_conn *draining; /* after GOAWAY */
	int64_t next_attempt_ns;
	int backoff_ms, attempts;
	struct ccall *calls;
	uint32_t ncalls, *free_idx, nfree;
	struct ccall *active;		 /* sent or queued, not done */
	struct ccall *done_head, *done_tail; /* waiting for their callback */
	struct ccall *q_head, *q_tail;	 /* pending, in order */
	struct ccall *zombies;		 /* completed, grant outstanding */
	uint32_t q_len;
	struct zcrpc__bulk_cache bulk;
	struct zcrpc__timer timer;
	int destroying;
	uint64_t rng;
	zcrpc_channel_stats st;
	/* admission: the key (o.psk points here) and the last refusal */
	uint8_t psk[ZCRPC_PSK_MAX];
	char identity[ZCRPC_IDENTITY_MAX + 1];
	zcrpc_status down_status; /* why the last connection failed */
	char down_why[256];
};

/* ---- call table ----------------------------------------------------------- */

static uint32_t ref_of(const zcrpc_channel *ch, const struct ccall *c)
{
	return ZCRPC_REF((uint32_t)(c - ch->calls), c->gen);
}

static struct ccall *lookup(zcrpc_channel *ch, uint32_t ref)
{
	uint32_t idx = ZCRPC_REF_IDX(ref);
	struct ccall *c;

	if (idx >= ch->ncalls)
		return NULL;
	c = &ch->calls[idx];
	if (c->state == CS_FREE || c->gen != ZCRPC_REF_GEN(ref))
		return NULL;
	return c;
}

static void list_del(struct ccall **head, struct ccall *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else if (*head == c)
		*head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

static void list_add(struct ccall **head, struct ccall *c)
{
	c->prev = NULL;
	c->next = *head;
	if (*head)
		(*head)->prev = c;
	*head = c;
}

static void release_buffers(zcrpc_channel *ch, struct ccall *c)
{
	if (c->out.msg.data)
		zcrpc_msg_free(ch->w, &c->out.msg);
	if (c->has_reply_msg) {
		zcrpc_msg_free(ch->w, &c->reply_msg);
		c->has_reply_msg = 0;
	}
	zcrpc__bulk_put(&ch->bulk, c->src_buf);
	c->src_buf = NULL;
	zcrpc__bulk_put(&ch->bulk, c->dst_buf);
	c->dst_buf = NULL;
}

static void deliver(zcrpc_channel *ch, struct ccall *c, const zcrpc_reply *r);

static void free_call(zcrpc_channel *ch, struct ccall *c)
{
	if (c->state == CS_ZOMBIE) {
		list_del(&ch->zombies, c);
		if (c->deliver_late) {
			/* The caller's reply_into is no longer granted. */
			zcrpc_reply r;

			c->deliver_late = 0;
			zcrpc__abi_sized_init(&r, sizeof(r), sizeof(r));
			r.status = c->status;
			r.message = c->message;
			deliver(ch, c, &r);
		}
	}
	c->granted = 0;
	c->revoking = 0;
	c->bulk_bad = 0;
	c->reply_grant = NULL;
	release_buffers(ch, c);
	c->state = CS_FREE;
	c->gen = (c->gen + 1) & 0xfffU;
	if (!c->gen)
		c->gen = 1;
	ch->free_idx[ch->nfree++] = (uint32_t)(c - ch->calls);
	ch->st.in_flight--;
}

static void queue_remove(zcrpc_channel *ch, struct ccall *c)
{
	struct ccall **pp;

	for (pp = &ch->q_head; *pp; pp = &(*pp)->qnext) {
		if (*pp == c) {
			*pp = c->qnext;
			if (ch->q_tail == c) {
				struct ccall *t = ch->q_head;

				while (t && t->qnext)
					t = t->qnext;
				ch->q_tail = t;
			}
			c->qnext = NULL;
			ch->q_len--;
			ch->st.pending--;
			return;
		}
	}
}

/* ---- completion ----------------------------------------------------------- */

static void arm_now(zcrpc_channel *ch)
{
	zcrpc__timer_start(ch->w, &ch->timer, zcrpc__now_ns());
}

/* Marks @c completed with @st; its callback runs from the channel's timer
 * (that is, from progress), never from inside the call that caused it. If
 * a bulk write from the caller's memory is still in flight, the callback
 * waits for it. */
static void complete(zcrpc_channel *ch, struct ccall *c, zcrpc_status st,
		     const char *msg)
{
	if (c->state == CS_DONE || c->state == CS_ZOMBIE || c->state == CS_FREE)
		return;
	if (c->state == CS_WRITING || c->state == CS_REPLY_REVOKING) {
		/* Completes when the write or the revoke is done. */
		c->write_pending_status = 1;
		c->pending_status = st;
		snprintf(c->pending_msg, sizeof(c->pending_msg), "%s", msg ? msg : "");
		return;
	}
	if (c->state == CS_QUEUED)
		queue_remove(ch, c);
	list_del(&ch->active, c);
	c->status = st;
	snprintf(c->message, sizeof(c->message), "%s", msg ? msg : "");
	c->state = CS_DONE;
	c->next = NULL;
	c->prev = ch->done_tail;
	if (ch->done_tail)
		ch->done_tail->next = c;
	else
		ch->done_head = c;
	ch->done_tail = c;
	arm_now(ch);
}

static void deliver(zcrpc_channel *ch, struct ccall *c, const zcrpc_reply *r)
{
	if (r->status == ZCRPC_OK)
		ch->st.calls_ok++;
	else
		ch->st.calls_failed++;
	if (c->cb)
		c->cb(ch, r, c->arg);
}

/* Completes @c with the server's reply (kept in c->reply / reply_msg) and
 * its bulk part at @bulk, now, from inside progress (a receive or write
 * completion). */
static void complete_with_reply(zcrpc_channel *ch, struct ccall *c,
				const struct zcrpc_frame *f, const void *bulk,
				size_t bulk_len)
{
	zcrpc_md md[ZCRPC_MD_MAX_PAIRS];
	zcrpc_reply r;
	char msgbuf[1025];

	zcrpc__abi_sized_init(&r, sizeof(r), sizeof(r));
	r.status = (zcrpc_status)f->status;
	r.n_md = zcrpc__md_view(f, md);
	r.md = md;
	r.message = "";
	if (r.status != ZCRPC_OK) {
		size_t n = f->payload_len < 1024 ? f->payload_len : 1024;

		memcpy(msgbuf, f->payload, n);
		msgbuf[n] = 0;
		r.message = msgbuf;
	} else if (f->flags & ZCRPC_FRAME_F_PAYLOAD_IN_BULK) {
		r.data = bulk;
		r.len = bulk_len;
	} else {
		r.data = f->payload;
		r.len = f->payload_len;
		r.attachment = bulk;
		r.attachment_len = bulk_len;
	}
	list_del(&ch->active, c);
	c->state = CS_DONE;
	deliver(ch, c, &r);
	free_call(ch, c);
}

static void run_done(zcrpc_channel *ch)
{
	struct ccall *c;

	while ((c = ch->done_head)) {
		zcrpc_reply r;

		ch->done_head = c->next;
		if (!ch->done_head)
			ch->done_tail = NULL;
		c->next = c->prev = NULL;
		zcrpc__abi_sized_init(&r, sizeof(r), sizeof(r));
		r.status = c->status;
		r.message = c->message;
		/* The caller's own reply_into memory is handed back only once
		 * the server can no longer write into it. */
		c->deliver_late = c->granted && c->conn && c->has_reply_into;
		if (!c->deliver_late)
			deliver(ch, c, &r);
		/* A call whose reply target is granted stays (generation
		 * checked) until the server's write lands and its window is
		 * revoked, or the connection goes, so the target is never
		 * reused under that write. */
		if (c->granted && c->conn) {
			c->state = CS_ZOMBIE;
			c->zombie_deadline_ns = zcrpc__now_ns() + ZCRPC_GRANT_GRACE_NS;
			list_add(&ch->zombies, c);
			zcrpc__timer_start(ch->w, &ch->timer, c->zombie_deadline_ns);
			continue;
		}
		free_call(ch, c);
	}
}

/* ---- sending -------------------------------------------------------------- */

static void send_cancel(zcrpc_channel *ch, struct ccall *c)
{
	struct zcrpc_frame f;
	struct zcrpc__out out;

	if (!c->conn || zcrpc_conn_state_get(c->conn) != ZCRPC_CONN_ESTABLISHED)
		return;
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_CANCEL;
	f.call_id = ref_of(ch, c);
	if (zcrpc__out_build(ch->w, &f, NULL, 0, 0, NULL, NULL, NULL, &out))
		return;
	if (zcrpc_conn_send_msg(c->conn, &out.msg, out.len) != ZCRPC_OK)
		zcrpc_msg_free(ch->w, &out.msg); /* best effort */
}

static void flush_queue(zcrpc_channel *ch)
{
	struct ccall *c;

	if (!ch->conn || !ch->conn_up)
		return;
	while ((c = ch->q_head)) {
		zcrpc_status st = zcrpc_conn_send_msg(ch->conn, &c->out.msg,
						      c->out.len);

		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return; /* resumes on_writable */
		ch->q_head = c->qnext;
		if (!ch->q_head)
			ch->q_tail = NULL;
		c->qnext = NULL;
		ch->q_len--;
		ch->st.pending--;
		if (st != ZCRPC_OK) {
			/* FAILED_PRECONDITION: the connection is closing (it
			 * failed or was told to go away): that is UNAVAILABLE
			 * to the caller, like the calls it had in flight. */
			complete(ch, c,
				 st == ZCRPC_FAILED_PRECONDITION ? ZCRPC_UNAVAILABLE : st,
				 "sending the request failed: connection closing");
			continue;
		}
		c->conn = ch->conn;
		c->state = CS_SENT;
	}
}

/* ---- connection ----------------------------------------------------------- */

static void on_state(zcrpc_conn *conn, zcrpc_conn_state s, zcrpc_status st,
		     void *arg);
static void on_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg);
static void on_write_done(zcrpc_conn *conn, void *uctx, zcrpc_status st,
			  void *arg);
static void on_write_imm(zcrpc_conn *conn, uint32_t imm, size_t len,
			 void *arg);
static void on_writable(zcrpc_conn *conn, void *arg);
static void on_revoked(zcrpc_conn *conn, void *uctx, zcrpc_status st,
		       void *arg);

static zcrpc_status start_connect(zcrpc_channel *ch)
{
	zcrpc_conn_handlers h;
	zcrpc_connect_opts co;
	zcrpc_status st;

	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.on_state = on_state;
	h.on_recv = on_recv;
	h.on_write_done = on_write_done;
	h.on_write_imm = on_write_imm;
	h.on_writable = on_writable;
	h.on_revoked = on_revoked;
	h.arg = ch;
	zcrpc_connect_opts_init(&co);
	co.timeout_ms = ch->o.connect_timeout_ms;
	co.src_addr = ch->src_addr;
	co.recv_depth = ch->o.window;
	co.send_depth = ch->o.window;
	co.psk = ch->o.psk;
	co.psk_len = ch->o.psk_len;
	co.identity = ch->o.psk ? ch->identity : NULL;
	st = zcrpc_connect(ch->w, ch->host, ch->port, &co, &h, &ch->conn);
	if (st == ZCRPC_OK) {
		if (ch->attempts++)
			ch->st.reconnects++;
		ch->conn_up = 0;
	}
	return st;
}

/* Fails every call that went out on @conn (and, when @conn is the current
 * connection, those waiting for it), and forgets grants on it. */
static void conn_gone(zcrpc_channel *ch, zcrpc_conn *conn, zcrpc_status st,
		      const char *why)
{
	uint32_t i;
	int current = conn == ch->conn;

	for (i = 0; i < ch->ncalls; i++) {
		struct ccall *c = &ch->calls[i];

		if (c->state == CS_FREE || c->conn != conn)
			continue;
		if (c->state == CS_ZOMBIE) {
			free_call(ch, c);
			continue;
		}
		if (c->state == CS_WRITING || c->state == CS_REPLY_REVOKING)
			c->state = CS_SENT; /* its write or revoke failed first */
		c->conn = NULL;
		complete(ch, c, st, why);
	}
	if (current) {
		while (ch->q_head)
			complete(ch, ch->q_head, st, why);
		ch->conn = NULL;
		ch->conn_up = 0;
	} else if (conn == ch->draining) {
		ch->draining = NULL;
	}
	zcrpc_conn_destroy(conn);
}

static int jitter(zcrpc_channel *ch, int ms)
{
	/* xorshift; +-20 % */
	ch->rng ^= ch->rng << 13;
	ch->rng ^= ch->rng >> 7;
	ch->rng ^= ch->rng << 17;
	return ms * 8 / 10 + (int)(ch->rng % (uint64_t)(ms * 4 / 10 + 1));
}

static void on_state(zcrpc_conn *conn, zcrpc_conn_state s, zcrpc_status st,
		     void *arg)
{
	zcrpc_channel *ch = arg;
	char why[256];
	int never_up, by_server;

	if (s == ZCRPC_CONN_ESTABLISHED) {
		if (conn == ch->conn) {
			ch->conn_up = 1;
			ch->backoff_ms = 0;
			ch->down_status = ZCRPC_UNAVAILABLE;
			flush_queue(ch);
		}
		return;
	}
	/* CLOSED: never up (refused, unreachable), closed by the server in
	 * order, or lost. Calls cut either way fail UNAVAILABLE, as gRPC's
	 * do when a server goes away: retrying elsewhere may succeed; the
	 * message tells the two apart. */
	never_up = conn == ch->conn && !ch->conn_up;
	by_server = st == ZCRPC_OK && conn->peer_closed;
	snprintf(why, sizeof(why), "%s %s:%s%s: %s",
		 never_up ? "could not connect to" : "connection to", ch->host,
		 ch->port, never_up ? "" : by_server ? " closed by the server" : " lost",
		 zcrpc_conn_error(conn));
	if (conn == ch->conn) {
		/* Next attempt after a jittered, growing delay. */
		ch->backoff_ms = ch->backoff_ms ? ch->backoff_ms * 2
						: ch->o.backoff_initial_ms;
		if (ch->backoff_ms > ch->o.backoff_max_ms)
			ch->backoff_ms = ch->o.backoff_max_ms;
		ch->next_attempt_ns = zcrpc__now_ns() +
				      (int64_t)jitter(ch, ch->backoff_ms) * 1000000LL;
		/* An admission failure stays one for the calls that follow. */
		ch->down_status = st == ZCRPC_UNAUTHENTICATED ? st
							      : ZCRPC_UNAVAILABLE;
		snprintf(ch->down_why, sizeof(ch->down_why), "%s", why);
	}
	conn_gone(ch, conn, st == ZCRPC_UNAUTHENTICATED ? st : ZCRPC_UNAVAILABLE,
		  why);
}

static void on_writable(zcrpc_conn *conn, void *arg)
{
	zcrpc_channel *ch = arg;

	if (conn == ch->conn)
		flush_queue(ch);
}

/* ---- receiving ------------------------------------------------------------ */

/* The server broke the protocol: close the connection, counted, with the
 * reason as its error text; its calls fail with that text in their
 * message (on_state). */
static void protocol_error(zcrpc_channel *ch, zcrpc_conn *conn,
			   const char *why)
{
	if (conn->state != ZCRPC_CONN_CLOSED && !conn->closing)
		ch->st.protocol_errors++; /* once per connection */
	zcrpc__conn_close_error(conn, ZCRPC_INTERNAL,
				"protocol error from the server: %s", why);
}

static void on_reply(zcrpc_channel *ch, zcrpc_conn *conn,
		     const struct zcrpc_frame *f)
{
	struct ccall *c = lookup(ch, f->call_id);
	size_t total;

	if (!c || c->conn != conn ||
	    (c->state != CS_SENT && c->state != CS_WRITING)) {
		ch->st.late_replies++;
		return;
	}
	total = (size_t)f->payload_len + ((f->flags & ZCRPC_FRAME_F_BULK) ? f->bulk_len : 0);
	if (c->max_reply && total > c->max_reply && f->status == ZCRPC_OK) {
		char m[96];

		snprintf(m, sizeof(m), "reply of %zu bytes exceeds max_reply %zu",
			 total, c->max_reply);
		send_cancel(ch, c);
		complete(ch, c, ZCRPC_RESOURCE_EXHAUSTED, m);
		return;
	}
	if (!(f->flags & ZCRPC_FRAME_F_BULK)) {
		complete_with_reply(ch, c, f, NULL, 0);
		return;
	}
	/* The reply's bulk part: grant a target, keep the frame. */
	{
		zcrpc_remote_region r;
		struct zcrpc_frame g;
		struct zcrpc__out out;
		const zcrpc_mr *mr;
		size_t off;
		zcrpc_status st;

		if (c->has_reply_into) {
			if (f->bulk_len > c->reply_into.len) {
				send_cancel(ch, c);
				complete(ch, c, ZCRPC_RESOURCE_EXHAUSTED,
					 "reply attachment larger than reply_into");
				return;
			}
			mr = c->reply_into.mr;
			off = c->reply_into.offset;
		} else {
			st = zcrpc__bulk_get(&ch->bulk, f->bulk_len, &c->dst_buf);
			if (st != ZCRPC_OK) {
				send_cancel(ch, c);
				complete(ch, c, ZCRPC_RESOURCE_EXHAUSTED,
					 "no memory for the reply attachment");
				return;
			}
			mr = c->dst_buf->mr;
			off = 0;
		}
		/* Bytes a split write may skip must not show what the
		 * memory held before (docs/protocol.md §4). */
		zcrpc__bulk_scrub((uint8_t *)mr->addr + off, (size_t)f->bulk_len,
				  zcrpc_conn_write_piece(conn));
		if (zcrpc_mr_grant(mr, conn, off, f->bulk_len, &r,
				   &c->reply_grant) != ZCRPC_OK) {
			complete(ch, c, ZCRPC_INTERNAL, "cannot grant the reply target");
			return;
		}
		if (zcrpc_conn_recv_keep(conn, &c->reply_msg) != ZCRPC_OK) {
			zcrpc_grant_revoke(c->reply_grant, NULL); /* never sent */
			c->reply_grant = NULL;
			complete(ch, c, ZCRPC_INTERNAL, "cannot grant the reply target");
			return;
		}
		c->has_reply_msg = 1;
		c->reply = *f;
		memset(&g, 0, sizeof(g));
		g.type = ZCRPC_FRAME_BULK_GRANT;
		g.call_id = f->bulk_token; /* the server's reference */
		g.bulk_addr = r.addr;
		g.bulk_len = r.len;
		g.bulk_rkey = r.rkey;
		g.bulk_token = ref_of(ch, c);
		st = zcrpc__out_build(ch->w, &g, NULL, 0, 0, NULL, NULL, NULL, &out);
		if (st == ZCRPC_OK) {
			st = zcrpc_conn_send_msg(conn, &out.msg, out.len);
			if (st != ZCRPC_OK)
				zcrpc_msg_free(ch->w, &out.msg);
		}
		if (st != ZCRPC_OK) {
			/* The server never learnt the key; the window goes. */
			zcrpc_grant_revoke(c->reply_grant, NULL);
			c->reply_grant = NULL;
			complete(ch, c, ZCRPC_UNAVAILABLE, "cannot send the grant");
			return;
		}
		c->state = CS_REPLY_BULK;
		c->granted = 1;
	}
}

static void on_grant(zcrpc_channel *ch, zcrpc_conn *conn,
		     const struct zcrpc_frame *f)
{
	struct ccall *c = lookup(ch, f->call_id);
	zcrpc_remote_region r;
	const zcrpc_mr *mr;
	size_t off;
	uint32_t imm = f->bulk_token;
	zcrpc_status st;

	if (!c || c->conn != conn || c->state != CS_SENT || !c->bulk_len) {
		ch->st.late_replies++;
		return;
	}
	if (f->bulk_len < c->bulk_len) {
		protocol_error(ch, conn, "grant smaller than the bulk part");
		return;
	}
	r.addr = f->bulk_addr;
	r.len = f->bulk_len;
	r.rkey = f->bulk_rkey;
	r.reserved = 0;
	if (c->src_buf) {
		mr = c->src_buf->mr;
		off = 0;
	} else {
		mr = c->src_mr;
		off = c->src_off;
	}
	st = zcrpc_conn_write(conn, mr, off, c->bulk_len, &r, 0, &imm,
			      (void *)(uintptr_t)ref_of(ch, c));
	if (st != ZCRPC_OK) {
		complete(ch, c, st, "writing the request attachment failed");
		return;
	}
	c->state = CS_WRITING;
}

static void on_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg)
{
	zcrpc_channel *ch = arg;
	struct zcrpc_frame f;
	char why[128];

	if (zcrpc__frame_decode(data, len, &f, why, sizeof(why)) != ZCRPC_OK) {
		protocol_error(ch, conn, why);
		return;
	}
	switch (f.type) {
	case ZCRPC_FRAME_REPLY:
		on_reply(ch, conn, &f);
		break;
	case ZCRPC_FRAME_BULK_GRANT:
		on_grant(ch, conn, &f);
		break;
	case ZCRPC_FRAME_GOAWAY:
		if (conn == ch->conn) {
			/* New calls go to a new connection; this one drains. */
			if (ch->draining)
				zcrpc_conn_close(ch->draining);
			ch->draining = conn;
			ch->conn = NULL;
			ch->conn_up = 0;
			/* Calls not sent yet would go nowhere: fail them. */
			while (ch->q_head)
				complete(ch, ch->q_head, ZCRPC_UNAVAILABLE,
					 "server is shutting down (GOAWAY)");
			ch->next_attempt_ns = 0;
		}
		break;
	default:
		protocol_error(ch, conn, "unexpected frame type");
		break;
	}
}

static void on_write_done(zcrpc_conn *conn, void *uctx, zcrpc_status st,
			  void *arg)
{
	zcrpc_channel *ch = arg;
	struct ccall *c = lookup(ch, (uint32_t)(uintptr_t)uctx);

	(void)conn;
	if (!c || c->state != CS_WRITING)
		return;
	c->state = CS_SENT;
	zcrpc__bulk_put(&ch->bulk, c->src_buf);
	c->src_buf = NULL;
	if (c->cancel_after_write) {
		/* Now that our write is out, CANCEL cannot overtake it. */
		c->cancel_after_write = 0;
		send_cancel(ch, c);
	}
	if (c->write_pending_status) {
		c->write_pending_status = 0;
		complete(ch, c, c->pending_status, c->pending_msg);
		return;
	}
	if (st != ZCRPC_OK)
		complete(ch, c, ZCRPC_UNAVAILABLE, "writing the request attachment failed");
}

static void on_write_imm(zcrpc_conn *conn, uint32_t imm, size_t len,
			 void *arg)
{
	zcrpc_channel *ch = arg;
	struct ccall *c = lookup(ch, imm);

	if (!c || c->conn != conn) {
		ch->st.late_replies++;
		return;
	}
	if ((c->state == CS_ZOMBIE || (c->state == CS_DONE && c->granted)) &&
	    !c->revoking) {
		/* Completed (its callback may still be queued) while the
		 * server wrote: the write landed, so it can write no more. */
		c->revoking = 1;
		if (zcrpc_grant_revoke(c->reply_grant, (void *)(uintptr_t)imm) !=
		    ZCRPC_OK)
			zcrpc_conn_close(conn); /* closing: freed with it */
		c->reply_grant = NULL;
		return;
	}
	if (c->state != CS_REPLY_BULK) {
		protocol_error(ch, conn, "unexpected write");
		return;
	}
	if (len != zcrpc__bulk_last_piece((size_t)c->reply.bulk_len,
					  zcrpc_conn_write_piece(conn))) {
		c->bulk_bad = 1; /* fails once revoked: nothing may change */
		ch->st.bulk_bad_writes++;
	}
	/* The reply is read only once the server cannot change it. */
	c->state = CS_REPLY_REVOKING;
	if (zcrpc_grant_revoke(c->reply_grant, (void *)(uintptr_t)imm) != ZCRPC_OK)
		zcrpc_conn_close(conn); /* closing: the call fails with it */
	c->reply_grant = NULL;
	c->granted = 0;
}

static void on_revoked(zcrpc_conn *conn, void *uctx, zcrpc_status st,
		       void *arg)
{
	zcrpc_channel *ch = arg;
	struct ccall *c = uctx ? lookup(ch, (uint32_t)(uintptr_t)uctx) : NULL;
	const void *bulk;

	if (!c || c->conn != conn)
		return;
	if (c->revoking) {
		/* The grant is over (a failed revoke means a dead QP: safe
		 * too). A call still on the done list is freed by run_done. */
		c->revoking = 0;
		c->granted = 0;
		if (c->state == CS_ZOMBIE)
			free_call(ch, c);
		return;
	}
	if (c->state != CS_REPLY_REVOKING || st != ZCRPC_OK)
		return; /* the connection is going: the call fails with it */
	if (c->write_pending_status) { /* cancelled or expired meanwhile */
		c->write_pending_status = 0;
		c->state = CS_SENT;
		complete(ch, c, c->pending_status, c->pending_msg);
		return;
	}
	if (c->bulk_bad) {
		c->state = CS_SENT;
		complete(ch, c, ZCRPC_INTERNAL,
			 "reply attachment: the server's write with immediate carried another byte count than the reply announced");
		return;
	}
	bulk = c->dst_buf ? c->dst_buf->ptr
			  : (const uint8_t *)c->reply_into.mr->addr + c->reply_into.offset;
	/* c->reply points into the kept receive slot, valid until
	 * free_call releases it. */
	complete_with_reply(ch, c, &c->reply, bulk, (size_t)c->reply.bulk_len);
}

/* ---- timer: deadlines, deferred callbacks --------------------------------- */

static void on_timer(struct zcrpc__timer *t, int64_t now)
{
	zcrpc_channel *ch = (zcrpc_channel *)((char *)t - offsetof(zcrpc_channel, timer));
	struct ccall *c, *next;
	int64_t next_due = 0;

	for (c = ch->active; c; c = next) {
		next = c->next;
		if (!c->deadline_ns)
			continue;
		if (now >= c->deadline_ns) {
			if (c->state == CS_SENT || c->state == CS_REPLY_BULK)
				send_cancel(ch, c);
			else if (c->state == CS_WRITING)
				c->cancel_after_write = 1;
			complete(ch, c, ZCRPC_DEADLINE_EXCEEDED, "deadline exceeded");
			continue;
		}
		if (!next_due || c->deadline_ns < next_due)
			next_due = c->deadline_ns;
	}
	run_done(ch);
	for (c = ch->zombies; c; c = next) {
		next = c->next;
		if (c->revoking)
			continue;
		if (now >= c->zombie_deadline_ns) {
			/* The server holds a grant it does not use: only
			 * tearing the connection down ends it safely. Closing
			 * answers revokes, which may free other zombies: scan
			 * again on the next run. */
			c->zombie_deadline_ns = now + ZCRPC_GRANT_GRACE_NS;
			if (!c->conn->closing &&
			    c->conn->state == ZCRPC_CONN_ESTABLISHED) {
				ch->st.grant_timeouts++;
				zcrpc_conn_close(c->conn);
				next_due = now;
				break;
			}
			continue;
		}
		if (!next_due || c->zombie_deadline_ns < next_due)
			next_due = c->zombie_deadline_ns;
	}
	if (ch->done_head)
		next_due = now;
	if (next_due)
		zcrpc__timer_start(ch->w, &ch->timer, next_due);
}

/* ---- public --------------------------------------------------------------- */

void zcrpc_channel_opts_init_sized(zcrpc_channel_opts *caller, size_t size)
{
	zcrpc_channel_opts d, *o = &d;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->connect_timeout_ms = 10000;
	o->window = ZCRPC_RPC_DEFAULT_WINDOW;
	o->max_pending = 4096;
	o->max_calls = 65536;
	o->backoff_initial_ms = 100;
	o->backoff_max_ms = 5000;
	o->bulk_threshold = 16384;
	zcrpc__abi_init(caller, size, o, sizeof(*o));
}

void zcrpc_call_opts_init_sized(zcrpc_call_opts *caller, size_t size)
{
	zcrpc_call_opts d, *o = &d;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	zcrpc__abi_init(caller, size, o, sizeof(*o));
}

zcrpc_status zcrpc_channel_create(zcrpc_worker *w, const char *host,
				  const char *port, const zcrpc_channel_opts *o,
				  zcrpc_channel **out)
{
	zcrpc_channel *ch;
	uint32_t i;

	if (!w || !host || !port || !out)
		return ZCRPC_INVALID_ARGUMENT;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return ZCRPC_RESOURCE_EXHAUSTED;
	zcrpc_channel_opts_init(&ch->o);
	if (o &&
	    ZCRPC__ABI_IN(&ch->o, o, ZCRPC__MIN_CHANNEL_OPTS) != ZCRPC_OK) {
		free(ch);
		return ZCRPC_INVALID_ARGUMENT;
	}
	if (ch->o.connect_timeout_ms <= 0 ||
	    ch->o.window < ZCRPC_MIN_QUEUE_DEPTH ||
	    ch->o.window > ZCRPC_MAX_QUEUE_DEPTH || !ch->o.max_calls ||
	    ch->o.max_calls > ZCRPC_MAX_CALL_TABLE - 1 ||
	    ch->o.backoff_initial_ms <= 0 ||
	    ch->o.backoff_max_ms < ch->o.backoff_initial_ms ||
	    ch->o.default_timeout_us < 0 || (!ch->o.psk && ch->o.psk_len) ||
	    (ch->o.psk && (ch->o.psk_len < ZCRPC_PSK_MIN ||
			   ch->o.psk_len > ZCRPC_PSK_MAX)) ||
	    (ch->o.identity && strlen(ch->o.identity) > ZCRPC_IDENTITY_MAX)) {
		free(ch);
		return ZCRPC_INVALID_ARGUMENT;
	}
	if (ch->o.psk) { /* our own copies */
		memcpy(ch->psk, ch->o.psk, ch->o.psk_len);
		ch->o.psk = ch->psk;
		if (ch->o.identity)
			strcpy(ch->identity, ch->o.identity);
	}
	ch->o.identity = NULL;
	ch->down_status = ZCRPC_UNAVAILABLE;
	ch->w = w;
	ch->host = strdup(host);
	ch->port = strdup(port);
	ch->src_addr = ch->o.src_addr ? strdup(ch->o.src_addr) : NULL;
	ch->o.src_addr = NULL;
	ch->ncalls = ch->o.max_calls;
	ch->calls = calloc(ch->ncalls, sizeof(*ch->calls));
	ch->free_idx = malloc(sizeof(uint32_t) * ch->ncalls);
	if (!ch->host || !ch->port || (o && o->src_addr && !ch->src_addr) ||
	    !ch->calls || !ch->free_idx) {
		free(ch->host);
		free(ch->port);
		free(ch->src_addr);
		free(ch->calls);
		free(ch->free_idx);
		free(ch);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	for (i = 0; i < ch->ncalls; i++) {
		ch->calls[i].gen = 1;
		ch->calls[i].ch = ch;
		ch->free_idx[ch->ncalls - 1 - i] = i;
	}
	ch->nfree = ch->ncalls;
	ch->rng = (uint64_t)zcrpc__now_ns() | 1;
	zcrpc__bulk_init(&ch->bulk, zcrpc_worker_context(w), (size_t)2 << 30);
	ch->timer.fn = on_timer;
	*out = ch;
	return ZCRPC_OK;
}

void zcrpc_channel_destroy(zcrpc_channel *ch)
{
	uint32_t i;

	if (!ch)
		return;
	ch->destroying = 1;
	for (i = 0; i < ch->ncalls; i++) {
		struct ccall *c = &ch->calls[i];

		if (c->state == CS_WRITING || c->state == CS_REPLY_REVOKING)
			c->state = CS_SENT; /* its connection goes below */
		if (c->state != CS_FREE && c->state != CS_DONE &&
		    c->state != CS_ZOMBIE)
			complete(ch, c, ZCRPC_CANCELLED, "channel destroyed");
	}
	run_done(ch);
	for (i = 0; i < ch->ncalls; i++)
		if (ch->calls[i].state != CS_FREE)
			free_call(ch, &ch->calls[i]);
	zcrpc__timer_stop(ch->w, &ch->timer);
	zcrpc_conn_destroy(ch->conn);
	zcrpc_conn_destroy(ch->draining);
	zcrpc__bulk_fini(&ch->bulk);
	free(ch->calls);
	free(ch->free_idx);
	free(ch->host);
	free(ch->port);
	free(ch->src_addr);
	explicit_bzero(ch->psk, sizeof(ch->psk));
	free(ch);
}

static void copy_fill(void *dst, size_t len, void *ctx)
{
	memcpy(dst, ctx, len);
}

zcrpc_status zcrpc_call_start(zcrpc_channel *ch, uint32_t method, size_t len,
			      zcrpc_fill_fn fill, void *fill_ctx,
			      const zcrpc_call_opts *o, zcrpc_call_cb cb,
			      void *arg, zcrpc_call_id *id)
{
	zcrpc_call_opts co;
	struct zcrpc_frame f;
	struct ccall *c;
	size_t mdl, inline_cap;
	int64_t timeout_us;
	zcrpc_status st;

	if (!ch || !cb || (len && !fill))
		return ZCRPC_INVALID_ARGUMENT;
	if (ch->destroying)
		return ZCRPC_FAILED_PRECONDITION;
	zcrpc_call_opts_init(&co);
	if (o && ZCRPC__ABI_IN(&co, o, ZCRPC__MIN_CALL_OPTS) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	mdl = zcrpc__md_bytes(co.md, co.n_md);
	if (mdl == (size_t)-1 || co.timeout_us < 0)
		return ZCRPC_INVALID_ARGUMENT;
	if (co.attachment &&
	    (!co.attachment->mr || !co.attachment->len ||
	     co.attachment->offset > co.attachment->mr->len ||
	     co.attachment->len > co.attachment->mr->len - co.attachment->offset ||
	     co.attachment->mr->ctx != zcrpc_worker_context(ch->w)))
		return ZCRPC_INVALID_ARGUMENT;
	if (co.reply_into &&
	    (!co.reply_into->mr || !(co.reply_into->mr->flags & ZCRPC_MR_REMOTE_WRITE) ||
	     co.reply_into->offset > co.reply_into->mr->len ||
	     co.reply_into->len > co.reply_into->mr->len - co.reply_into->offset ||
	     co.reply_into->mr->ctx != zcrpc_worker_context(ch->w)))
		return ZCRPC_INVALID_ARGUMENT;
	inline_cap = ch->w->opts.max_msg - ZCRPC_FRAME_HDR_LEN - mdl;
	if (ch->w->opts.max_msg < ZCRPC_FRAME_HDR_LEN + mdl)
		return ZCRPC_INVALID_ARGUMENT;
	if ((len > ch->o.bulk_threshold || len > inline_cap) && co.attachment)
		return ZCRPC_INVALID_ARGUMENT; /* one bulk part per message */
	if (ch->q_len >= ch->o.max_pending) {
		ch->st.queue_full++;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (!ch->nfree)
		return ZCRPC_RESOURCE_EXHAUSTED;

	c = &ch->calls[ch->free_idx[ch->nfree - 1]];
	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REQUEST;
	f.method_id = method;
	f.call_id = ZCRPC_REF((uint32_t)(c - ch->calls), c->gen);
	timeout_us = co.timeout_us ? co.timeout_us : ch->o.default_timeout_us;
	f.deadline_us = timeout_us > 0xffffffffLL ? 0xffffffffU : (uint32_t)timeout_us;
	c->payload_in_bulk = 0;
	c->src_mr = NULL;
	c->src_buf = NULL;
	c->bulk_len = 0;
	if (len > ch->o.bulk_threshold || len > inline_cap) {
		st = zcrpc__bulk_get(&ch->bulk, len, &c->src_buf);
		if (st != ZCRPC_OK)
			return st;
		fill(c->src_buf->ptr, len, fill_ctx);
		if (fill == copy_fill)
			ch->st.copied_bytes += len;
		c->bulk_len = len;
		c->payload_in_bulk = 1;
		f.flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
		f.bulk_len = len;
		st = zcrpc__out_build(ch->w, &f, co.md, co.n_md, 0, NULL, NULL,
				      NULL, &c->out);
	} else {
		if (co.attachment) {
			c->src_mr = co.attachment->mr;
			c->src_off = co.attachment->offset;
			c->bulk_len = co.attachment->len;
			f.flags = ZCRPC_FRAME_F_BULK;
			f.bulk_len = c->bulk_len;
		}
		st = zcrpc__out_build(ch->w, &f, co.md, co.n_md, len, fill,
				      fill_ctx, NULL, &c->out);
		if (st == ZCRPC_OK && fill == copy_fill)
			ch->st.copied_bytes += len;
	}
	if (st != ZCRPC_OK) {
		zcrpc__bulk_put(&ch->bulk, c->src_buf);
		c->src_buf = NULL;
		return st;
	}
	ch->nfree--;
	c->cb = cb;
	c->arg = arg;
	c->sync = 0;
	c->conn = NULL;
	c->write_pending_status = 0;
	c->has_reply_into = co.reply_into != NULL;
	if (co.reply_into)
		c->reply_into = *co.reply_into;
	c->dst_buf = NULL;
	c->has_reply_msg = 0;
	c->granted = 0;
	c->revoking = 0;
	c->cancel_after_write = 0;
	c->deliver_late = 0;
	c->reply_grant = NULL;
	memset(&c->reply, 0, sizeof(c->reply));
	c->max_reply = co.max_reply;
	c->deadline_ns = timeout_us ? zcrpc__now_ns() + timeout_us * 1000 : 0;
	c->state = CS_QUEUED;
	list_add(&ch->active, c);
	c->qnext = NULL;
	if (ch->q_tail)
		ch->q_tail->qnext = c;
	else
		ch->q_head = c;
	ch->q_tail = c;
	ch->q_len++;
	ch->st.pending++;
	ch->st.in_flight++;
	ch->st.calls_started++;
	if (id)
		*id = f.call_id;
	if (c->deadline_ns)
		zcrpc__timer_start(ch->w, &ch->timer, c->deadline_ns);

	if (!ch->conn) {
		if (zcrpc__now_ns() < ch->next_attempt_ns &&
		    ch->down_status == ZCRPC_UNAUTHENTICATED) {
			complete(ch, c, ZCRPC_UNAUTHENTICATED, ch->down_why);
		} else if (zcrpc__now_ns() < ch->next_attempt_ns) {
			complete(ch, c, ZCRPC_UNAVAILABLE,
				 "not connected (waiting to reconnect)");
		} else if ((st = start_connect(ch)) != ZCRPC_OK) {
			complete(ch, c, ZCRPC_UNAVAILABLE, "cannot start connecting");
		}
	} else {
		flush_queue(ch);
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc_call_async(zcrpc_channel *ch, uint32_t method,
			      const void *req, size_t len,
			      const zcrpc_call_opts *o, zcrpc_call_cb cb,
			      void *arg, zcrpc_call_id *id)
{
	if (len && !req)
		return ZCRPC_INVALID_ARGUMENT;
	return zcrpc_call_start(ch, method, len, copy_fill, (void *)req, o, cb,
				arg, id);
}

zcrpc_status zcrpc_call_cancel(zcrpc_channel *ch, zcrpc_call_id id)
{
	struct ccall *c;

	if (!ch || id > 0xffffffffULL)
		return ZCRPC_NOT_FOUND;
	c = lookup(ch, (uint32_t)id);
	if (!c || c->state == CS_DONE || c->state == CS_ZOMBIE)
		return ZCRPC_NOT_FOUND;
	if (c->state == CS_SENT || c->state == CS_REPLY_BULK)
		send_cancel(ch, c);
	else if (c->state == CS_WRITING)
		c->cancel_after_write = 1; /* CANCEL must not overtake it */
	complete(ch, c, ZCRPC_CANCELLED, "cancelled by the caller");
	return ZCRPC_OK;
}

struct sync_ctx {
	int done;
	zcrpc_result *out;
};

static void *dup_bytes(const void *p, size_t n)
{
	void *d = malloc(n ? n : 1);

	if (d && n)
		memcpy(d, p, n);
	return d;
}

static void sync_cb(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct sync_ctx *s = arg;

	s->out->status = r->status;
	s->out->message = strdup(r->message ? r->message : "");
	s->out->data = dup_bytes(r->data, r->len);
	s->out->len = r->len;
	if (r->attachment_len) {
		s->out->attachment = dup_bytes(r->attachment, r->attachment_len);
		s->out->attachment_len = r->attachment_len;
		ch->st.copied_bytes += r->attachment_len;
	}
	ch->st.copied_bytes += r->len;
	s->done = 1;
}

zcrpc_status zcrpc_call(zcrpc_channel *ch, uint32_t method, const void *req,
			size_t len, const zcrpc_call_opts *o, zcrpc_result *out,
			size_t out_size)
{
	struct sync_ctx s = {0, out};
	zcrpc_status st;

	/* Every field written below is within ZCRPC__MIN_RESULT. */
	if (!ch || !out || out_size < ZCRPC__MIN_RESULT)
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc__abi_sized_init(out, out_size, sizeof(*out));
	if (ch->w->in_progress) {
		out->status = ZCRPC_FAILED_PRECONDITION;
		out->message = strdup("synchronous call from inside a callback of the same worker");
		return ZCRPC_FAILED_PRECONDITION;
	}
	st = zcrpc_call_async(ch, method, req, len, o, sync_cb, &s, NULL);
	if (st != ZCRPC_OK) {
		out->status = st;
		out->message = strdup("the call could not be started");
		return st;
	}
	while (!s.done)
		zcrpc_worker_progress(ch->w, 100);
	return out->status;
}

void zcrpc_result_free(zcrpc_result *r)
{
	if (!r)
		return;
	free(r->message);
	free(r->data);
	free(r->attachment);
	zcrpc__abi_sized_init(r, r->size, sizeof(*r)); /* the fields it has */
}

void zcrpc_channel_get_stats(const zcrpc_channel *ch, zcrpc_channel_stats *out,
			     size_t out_size)
{
	zcrpc_channel_stats none;

	memset(&none, 0, sizeof(none));
	ZCRPC__ABI_OUT(out, out_size, ch ? &ch->st : &none);
}

void zcrpc__channel_test_dump(zcrpc_channel *ch, FILE *out)
{
	static const char *const names[] = {"free", "queued", "sent", "writing",
					    "reply_bulk", "reply_revoking", "done",
					    "zombie"};
	uint32_t i;

	fprintf(out, "channel: conn %p up %d draining %p q_len %u\n",
		(void *)ch->conn, ch->conn_up, (void *)ch->draining, ch->q_len);
	for (i = 0; i < ch->ncalls; i++) {
		struct ccall *c = &ch->calls[i];

		if (c->state == CS_FREE)
			continue;
		fprintf(out,
			"call %u: %s conn %p bulk %zu granted %u revoking %u "
			"wps %u grant %p deadline in %lld ms\n",
			i, names[c->state], (void *)c->conn, c->bulk_len, c->granted,
			c->revoking, c->write_pending_status, (void *)c->reply_grant,
			(long long)((c->deadline_ns - zcrpc__now_ns()) / 1000000));
	}
}
