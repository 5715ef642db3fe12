/* zcrpc — the client's channel: its lifetime, its connection (made
 * lazily, remade after a failure with jittered exponential backoff; after
 * a GOAWAY the old one drains while a new one takes the new calls) and
 * the frames that arrive on it. The calls are in client_call.c, their bulk
 * parts in client_bulk.c. */
#include "client_internal.h"
#include "lb_internal.h"
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_state(zcrpc_conn *conn, zcrpc_conn_state s, zcrpc_status st,
		     void *arg);
static void on_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg);
static void on_writable(zcrpc_conn *conn, void *arg);

/* Starts connecting the channel's current connection. */
zcrpc_status zcrpc__channel_connect(zcrpc_channel *ch)
{
	zcrpc_conn_handlers h;
	zcrpc_connect_opts co;
	zcrpc_status st;

	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.on_state = on_state;
	h.on_recv = on_recv;
	h.on_write_done = zcrpc__ccall_on_write_done;
	h.on_write_imm = zcrpc__ccall_on_write_imm;
	h.on_writable = on_writable;
	h.on_revoked = zcrpc__ccall_on_revoked;
	h.arg = ch;
	zcrpc_connect_opts_init(&co);
	co.timeout_ms = ch->o.connect_timeout_ms;
	co.src_addr = ch->src_addr;
	co.recv_depth = ch->o.window;
	co.send_depth = ch->o.send_depth ? ch->o.send_depth : ch->o.window;
	co.psk = ch->o.psk;
	co.psk_len = ch->o.psk_len;
	co.identity = ch->o.psk ? ch->identity : NULL;
	co.tos = (uint32_t)ch->o.tos;
	co.device = ch->o.device ? ch->device : NULL;
	co.port = ch->o.port;
	co.gid_index = ch->o.gid_index;
	st = zcrpc__channel_take_unit(ch);
	if (st != ZCRPC_OK)
		return st;
	st = zcrpc_connect(ch->w, ch->host, ch->port, &co, &h, &ch->conn);
	if (st != ZCRPC_OK) {
		zcrpc__cap_put(&ch->cap);
		snprintf(ch->down_why, sizeof(ch->down_why),
			 "cannot start connecting to %s:%s: %s", ch->host,
			 ch->port, zcrpc_status_str(st));
		return st;
	}
	if (ch->attempts++)
		ch->st.reconnects++;
	ch->conn_up = 0;
	ch->idle_closed = 0;
	return st;
}

/* Fails every call that went out on @conn (and, when @conn is the current
 * connection, those waiting for it), and forgets grants on it. */
static void conn_gone(zcrpc_channel *ch, zcrpc_conn *conn, zcrpc_status st,
		      const char *why)
{
	uint32_t i;
	int current = conn == ch->conn;

	for (i = 0; i < ch->calls.n; i++) {
		struct ccall *c = zcrpc__ccall_at(ch, i);

		if (c->state == CS_FREE || c->conn != conn)
			continue;
		if (c->state == CS_ZOMBIE) {
			zcrpc__ccall_free(ch, c);
			continue;
		}
		if (c->state == CS_WRITING || c->state == CS_REPLY_REVOKING)
			c->state = CS_SENT; /* its write or revoke failed first */
		c->conn = NULL;
		zcrpc__ccall_complete(ch, c, st, why);
	}
	if (current) {
		while (zcrpc__channel_queue_first(ch))
			zcrpc__ccall_complete(
				ch, zcrpc__channel_queue_first(ch), st, why);
		ch->conn = NULL;
		ch->conn_up = 0;
		ch->cap_idle = 0;
		zcrpc__cap_put(&ch->cap);
	} else if (conn == ch->draining) {
		ch->draining = NULL;
		zcrpc__cap_put(&ch->cap);
	}
	zcrpc__cstreams_conn_gone(ch, conn, st, why);
	zcrpc__channel_drop_cancels(ch, conn);
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
			zcrpc__channel_flush_queue(ch);
			zcrpc__cstreams_flush(ch, conn);
			/* calls waiting for a backend may go */
			zcrpc__channel_users_changed(ch, 0);
			zcrpc__channel_idle_check(ch);
		}
		return;
	}
	/* CLOSED: never up (refused, unreachable), closed by the server in
	 * order, or lost. Calls cut either way fail UNAVAILABLE, as gRPC's
	 * do when a server goes away: retrying elsewhere may succeed; the
	 * message tells the two apart. */
	never_up = conn == ch->conn && !ch->conn_up;
	by_server = st == ZCRPC_OK && zcrpc__conn_peer_closed(conn);
	snprintf(why, sizeof(why), "%s %s:%s%s: %s",
		 never_up ? "could not connect to" : "connection to", ch->host,
		 ch->port, never_up ? "" : by_server ? " closed by the server" : " lost",
		 zcrpc_conn_get_error(conn));
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
		/* it left the pick set: look again */
		zcrpc__channel_users_changed(ch, 1);
	}
	conn_gone(ch, conn, st == ZCRPC_UNAUTHENTICATED ? st : ZCRPC_UNAVAILABLE,
		  why);
}

void zcrpc__channel_drop_conn(zcrpc_channel *ch, zcrpc_conn *conn,
			      const char *why)
{
	if (!conn || (conn != ch->conn && conn != ch->draining))
		return;
	if (conn == ch->conn)
		ch->next_attempt_ns = 0; /* not the server's failure */
	conn_gone(ch, conn, ZCRPC_UNAVAILABLE, why);
	zcrpc__channel_users_changed(ch, 0);
}

static void on_writable(zcrpc_conn *conn, void *arg)
{
	zcrpc_channel *ch = arg;

	if (conn == ch->conn)
		zcrpc__channel_flush_queue(ch);
	else if (!zcrpc__channel_send_cancels(ch, conn))
		zcrpc__channel_send_grants(ch, conn); /* draining */
	zcrpc__cstreams_flush(ch, conn);
}

/* The server broke the protocol: close the connection, counted, with the
 * reason as its error text; its calls fail with that text in their
 * message (on_state). */
void zcrpc__channel_protocol_error(zcrpc_channel *ch, zcrpc_conn *conn,
				   const char *why)
{
	if (zcrpc_conn_get_state(conn) != ZCRPC_CONN_CLOSED &&
	    !zcrpc__conn_closing(conn))
		ch->st.protocol_errors++; /* once per connection */
	zcrpc__conn_abort(conn, ZCRPC_INTERNAL,
			  "protocol error from the server: %s", why);
}

/* What on_frame needs besides the frame. */
struct recv_ctx {
	zcrpc_channel *ch;
	zcrpc_conn *conn;
};

static void on_frame(void *arg, const struct zcrpc_frame *fp)
{
	struct recv_ctx *rc = arg;
	zcrpc_channel *ch = rc->ch;
	zcrpc_conn *conn = rc->conn;
	struct zcrpc_frame f = *fp;

	if ((f.flags & ZCRPC_FRAME_F_STREAM) || f.type >= ZCRPC_FRAME_MESSAGE) {
		zcrpc__cstreams_on_frame(ch, conn, &f);
		return;
	}
	switch (f.type) {
	case ZCRPC_FRAME_REPLY:
		zcrpc__ccall_on_reply(ch, conn, &f);
		break;
	case ZCRPC_FRAME_BULK_GRANT:
		zcrpc__ccall_on_grant(ch, conn, &f);
		break;
	case ZCRPC_FRAME_GOAWAY:
		/* (an idle connection evicted meanwhile is closed here) */
		if (conn == ch->conn && !zcrpc__channel_wake(ch)) {
			/* New calls go to a new connection; this one drains. */
			if (ch->draining) {
				zcrpc_conn_close(ch->draining);
				zcrpc__cap_put(&ch->cap);
			}
			ch->draining = conn;
			ch->conn = NULL;
			ch->conn_up = 0;
			/* A DRAIN server waits for our answer: nothing we
			 * send follows it (the calls below are not sent). */
			if (zcrpc__conn_has_drain(conn))
				zcrpc__channel_send_control(
					ch, conn, ZCRPC_FRAME_GOAWAY, 0, 0);
			/* Calls not sent yet would go nowhere: fail them. */
			while (zcrpc__channel_queue_first(ch))
				zcrpc__ccall_complete(
					ch, zcrpc__channel_queue_first(ch),
					ZCRPC_UNAVAILABLE,
					"server is shutting down (GOAWAY)");
			/* A backend of a target channel leaves its pick set
			 * for a backoff; a lone channel reconnects at once. */
			ch->next_attempt_ns =
				ch->is_sub ? zcrpc__now_ns() +
						     (int64_t)ch->o.backoff_initial_ms *
							     1000000LL
					   : 0;
			zcrpc__channel_users_changed(ch, 0);
		}
		break;
	default:
		zcrpc__channel_protocol_error(ch, conn,
					      "unexpected frame type");
		break;
	}
}

static void on_recv(zcrpc_conn *conn, const void *data, size_t len, void *arg)
{
	struct recv_ctx rc = {arg, conn};
	char why[128];

	if (zcrpc__frames_each(conn, data, len, on_frame, &rc, why,
			       sizeof(why)) != ZCRPC_OK)
		zcrpc__channel_protocol_error(rc.ch, conn, why);
}

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
	o->send_depth = ZCRPC_RPC_DEFAULT_SEND_DEPTH;
	zcrpc__abi_init(caller, size, o, sizeof(*o));
}

/* A send depth is 0 (the window) or a queue depth the transport takes. */
static int send_depth_ok(uint32_t d)
{
	return !d || (d >= ZCRPC_MIN_QUEUE_DEPTH && d <= ZCRPC_MAX_QUEUE_DEPTH);
}

/* Each call of the table, once, when its chunk is added (zeroed). */
static void init_call(void *call, void *arg)
{
	struct ccall *c = call;

	c->ch = arg;
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->qlink);
}

/* Checks @o (NULL: the defaults) and copies it into @ch->o, with the
 * strings and the key it names copied into @ch (src_addr on the heap);
 * zcrpc_channel_create_target() uses it too. INVALID_ARGUMENT, or
 * RESOURCE_EXHAUSTED (no memory for src_addr); nothing is kept then. */
zcrpc_status zcrpc__channel_load_opts(zcrpc_channel *ch,
				      const zcrpc_channel_opts *o)
{
	zcrpc_channel_opts_init(&ch->o);
	if (o &&
	    ZCRPC__ABI_IN(&ch->o, o, ZCRPC__MIN_CHANNEL_OPTS) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	if (ch->o.connect_timeout_ms <= 0 ||
	    ch->o.window < ZCRPC_MIN_QUEUE_DEPTH ||
	    ch->o.window > ZCRPC_MAX_QUEUE_DEPTH ||
	    !send_depth_ok(ch->o.send_depth) || !ch->o.max_calls ||
	    ch->o.max_calls > ZCRPC_MAX_CALL_TABLE - 1 ||
	    ch->o.backoff_initial_ms <= 0 ||
	    ch->o.backoff_max_ms < ch->o.backoff_initial_ms ||
	    ch->o.default_timeout_us < 0 || (!ch->o.psk && ch->o.psk_len) ||
	    (ch->o.psk && (ch->o.psk_len < ZCRPC_PSK_MIN ||
			   ch->o.psk_len > ZCRPC_PSK_MAX)) ||
	    (ch->o.identity && strlen(ch->o.identity) > ZCRPC_IDENTITY_MAX) ||
	    ch->o.tos > 255 ||
	    (ch->o.device && strlen(ch->o.device) >= sizeof(ch->device)))
		return ZCRPC_INVALID_ARGUMENT;
	if (ch->o.device) /* our own copy; o.device says it is set */
		strcpy(ch->device, ch->o.device);
	if (ch->o.psk) { /* our own copies */
		memcpy(ch->psk, ch->o.psk, ch->o.psk_len);
		ch->o.psk = ch->psk;
		if (ch->o.identity)
			strcpy(ch->identity, ch->o.identity);
	}
	ch->o.identity = NULL;
	ch->src_addr = ch->o.src_addr ? strdup(ch->o.src_addr) : NULL;
	ch->o.src_addr = NULL;
	if (o && o->src_addr && !ch->src_addr) {
		explicit_bzero(ch->psk, sizeof(ch->psk));
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc_channel_create(zcrpc_worker *w, const char *host,
				  const char *port, const zcrpc_channel_opts *o,
				  zcrpc_channel **out)
{
	zcrpc_channel *ch;
	zcrpc_status st;

	if (!w || !host || !port || !out)
		return ZCRPC_INVALID_ARGUMENT;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return ZCRPC_RESOURCE_EXHAUSTED;
	st = zcrpc__channel_load_opts(ch, o);
	if (st != ZCRPC_OK) {
		free(ch);
		return st;
	}
	ch->down_status = ZCRPC_UNAVAILABLE;
	ch->w = w;
	ch->host = strdup(host);
	ch->port = strdup(port);
	if (zcrpc__call_table_init(&ch->calls, ch->o.max_calls,
				   sizeof(struct ccall), init_call,
				   ch) != ZCRPC_OK ||
	    !ch->host || !ch->port) {
		zcrpc__call_table_fini(&ch->calls);
		free(ch->host);
		free(ch->port);
		free(ch->src_addr);
		free(ch);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	zcrpc__list_init(&ch->active);
	zcrpc__list_init(&ch->done);
	zcrpc__list_init(&ch->queue);
	zcrpc__list_init(&ch->zombies);
	zcrpc__list_init(&ch->grants);
	zcrpc__list_init(&ch->users);
	zcrpc__list_init(&ch->share_link);
	zcrpc__channel_cap_init(ch);
	ch->rng = (uint64_t)zcrpc__now_ns() | 1;
	zcrpc__bulk_init(&ch->bulk, zcrpc_worker_get_context(w), (size_t)2 << 30);
	ch->timer.fn = zcrpc__channel_on_timer;
	*out = ch;
	return ZCRPC_OK;
}

void zcrpc_channel_destroy(zcrpc_channel *ch)
{
	uint32_t i;

	if (!ch)
		return;
	if (ch->lb) {
		zcrpc__lb_destroy(ch);
		return;
	}
	ch->destroying = 1;
	zcrpc__cstreams_destroy(ch);
	for (i = 0; i < ch->calls.n; i++) {
		struct ccall *c = zcrpc__ccall_at(ch, i);

		if (c->state == CS_WRITING || c->state == CS_REPLY_REVOKING)
			c->state = CS_SENT; /* its connection goes below */
		if (c->state != CS_FREE && c->state != CS_DONE &&
		    c->state != CS_ZOMBIE)
			zcrpc__ccall_complete(ch, c, ZCRPC_CANCELLED,
					      "channel destroyed");
	}
	zcrpc__channel_run_done(ch);
	for (i = 0; i < ch->calls.n; i++)
		if (zcrpc__ccall_at(ch, i)->state != CS_FREE)
			zcrpc__ccall_free(ch, zcrpc__ccall_at(ch, i));
	zcrpc__timer_stop(ch->w, &ch->timer);
	zcrpc__channel_drop_cancels(ch, NULL);
	zcrpc_conn_destroy(ch->conn);
	zcrpc_conn_destroy(ch->draining);
	zcrpc__cap_leave(&ch->cap);
	zcrpc__bulk_fini(&ch->bulk);
	zcrpc__call_table_fini(&ch->calls);
	free(ch->host);
	free(ch->port);
	free(ch->src_addr);
	explicit_bzero(ch->psk, sizeof(ch->psk));
	free(ch);
}

void zcrpc_channel_get_stats(const zcrpc_channel *ch, zcrpc_channel_stats *out,
			     size_t out_size)
{
	zcrpc_channel_stats none;

	memset(&none, 0, sizeof(none));
	if (ch && ch->lb)
		zcrpc__lb_get_stats(ch, &none);
	ZCRPC__ABI_OUT(out, out_size, ch && !ch->lb ? &ch->st : &none);
}
