/* zcrpc — the server: its lifetime, method registration, listening and
 * accepting, its timer (deferred frames, buffers registered off-thread,
 * bulk time limits, memory given back), the idle timeout of connections
 * that never made a call, GOAWAY and graceful shutdown,
 * statistics. Calls are in server_dispatch.c, replies in server_reply.c,
 * bulk parts in server_bulk.c, frames out in server_send.c. */
#include "server_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/limits.h"

/* zcrpc_server_opts.idle_timeout_ms's default: a connection with no call
 * 30 s after its accept is closed (a client that connects and never calls
 * holds a connection of its source's limit for at most that long). */
#define ZCRPC_DEFAULT_IDLE_TIMEOUT_MS 30000

const struct method *zcrpc__server_find_method(const zcrpc_server *s,
					       uint32_t id)
{
	size_t i;

	for (i = 0; i < s->nmethods; i++) /* few methods; a scan is fine */
		if (s->methods[i].id == id)
			return &s->methods[i];
	return NULL;
}

/* The server's timer: frames waiting for a pool slot, buffers registered
 * off-thread, bulk time limits. */
static void on_timer(struct zcrpc__timer *t, int64_t now)
{
	zcrpc_server *s = (zcrpc_server *)((char *)t - offsetof(zcrpc_server, timer));
	struct zcrpc__list *n;

	if (s->bulk.growing)
		zcrpc__bulk_collect(&s->bulk, zcrpc__server_on_buffer, s);
	if (s->next_bulk_check_ns && now >= s->next_bulk_check_ns)
		zcrpc__server_bulk_check(s, now);
	if (s->grant_waits)
		zcrpc__server_retry_grants(s);
	zcrpc__list_foreach(n, &s->conns) if (zcrpc__sconn_of(n)->p_head)
		zcrpc__sconn_flush_deferred(zcrpc__sconn_of(n));
	if (now >= s->next_trim_ns) {
		/* The bulk cache and the worker's pool follow the working
		 * size: what stayed free for idle_ns goes back. */
		zcrpc__bulk_trim(&s->bulk, now, s->idle_ns);
		zcrpc__worker_pool_trim(s->w, now, s->idle_ns);
		s->next_trim_ns = now + s->idle_ns / 2;
	}
	if (s->npframes || s->bulk.growing || s->grant_waits)
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
	zcrpc__timer_stop(s->w, &sc->idle);
	zcrpc__list_remove(&sc->link);
	free(sc);
}

/* idle_timeout_ms passed and the connection never made a call: close it,
 * reporting DEADLINE_EXCEEDED to the client (docs/design.md, Admission). */
static void on_idle(struct zcrpc__timer *t, int64_t now)
{
	struct sconn *sc =
		(struct sconn *)((char *)t - offsetof(struct sconn, idle));
	zcrpc_server *s = sc->s;

	(void)now;
	if (sc->called || sc->closed || zcrpc__conn_closing(sc->conn))
		return;
	s->st.idle_closed++;
	zcrpc__conn_abort(
		sc->conn, ZCRPC_DEADLINE_EXCEEDED,
		"no call within idle_timeout_ms (%d ms) of the accept",
		s->o.idle_timeout_ms);
}

void zcrpc__sconn_called(struct sconn *sc)
{
	if (sc->called)
		return;
	sc->called = 1;
	zcrpc__timer_stop(sc->s->w, &sc->idle);
}

static void on_state(zcrpc_conn *conn, zcrpc_conn_state st, zcrpc_status why,
		     void *arg)
{
	struct sconn *sc = arg;
	zcrpc_server *s = sc->s;
	struct zcrpc__list *n, *tmp;

	if (st != ZCRPC_CONN_CLOSED)
		return;
	sc->closed = 1;
	zcrpc__list_foreach_safe(n, tmp, &sc->calls)
	{
		zcrpc_server_call *c = zcrpc__scall_of(n, link);

		zcrpc__list_remove(&c->link);
		c->sc = NULL;
		c->cancelled = 1;
		/* A running handler still owns its call: it is freed at
		 * the reply, which then reports UNAVAILABLE. */
		if (c->state == SS_RUNNING)
			continue;
		if (c->state == SS_QUEUED)
			zcrpc__server_rq_remove(s, c);
		zcrpc__scall_free(s, c);
	}
	s->st.connections--;
	if (why == ZCRPC_OK)
		s->st.conns_closed++; /* the client (or we) closed in order */
	else
		s->st.conns_lost++; /* crash, loss, error; zcrpc_conn_get_error says */
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
	zcrpc__list_init(&sc->calls);
	zcrpc__list_push_front(&s->conns, &sc->link);
	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.on_state = on_state;
	h.on_recv = zcrpc__sconn_on_recv;
	h.on_write_done = zcrpc__sconn_on_write_done;
	h.on_write_imm = zcrpc__sconn_on_write_imm;
	h.on_writable = zcrpc__sconn_on_writable;
	h.on_revoked = zcrpc__sconn_on_revoked;
	h.arg = sc;
	zcrpc_conn_set_handlers(conn, &h);
	s->st.connections++;
	sc->idle.fn = on_idle;
	if (s->o.idle_timeout_ms > 0)
		zcrpc__timer_start(s->w, &sc->idle,
				   zcrpc__now_ns() +
					   (int64_t)s->o.idle_timeout_ms *
						   1000000LL);
	if (s->o.on_connect)
		s->o.on_connect(s, conn, s->o.arg);
	if (s->shutting_down)
		zcrpc__sconn_send_simple(sc, ZCRPC_FRAME_GOAWAY, 0, ZCRPC_OK,
					 NULL);
}

void zcrpc_server_opts_init_sized(zcrpc_server_opts *caller, size_t size)
{
	zcrpc_server_opts d, *o = &d;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->window = ZCRPC_RPC_DEFAULT_WINDOW;
	o->bulk_threshold = 16384;
	o->max_conns_per_source = ZCRPC_DEFAULT_CONNS_PER_SOURCE;
	o->idle_timeout_ms = ZCRPC_DEFAULT_IDLE_TIMEOUT_MS;
	o->send_depth = ZCRPC_RPC_DEFAULT_SEND_DEPTH;
	zcrpc__abi_init(caller, size, o, sizeof(*o));
}

zcrpc_status zcrpc_server_create(zcrpc_worker *w, const zcrpc_server_opts *o,
				 zcrpc_server **out)
{
	zcrpc_server *s;

	if (!w || !out)
		return ZCRPC_INVALID_ARGUMENT;
	s = calloc(1, sizeof(*s));
	if (!s)
		return ZCRPC_RESOURCE_EXHAUSTED;
	zcrpc_server_opts_init(&s->o);
	if (o) {
		const zcrpc_server_opts *n = &s->o; /* the caller's, by the rule */

		if (ZCRPC__ABI_IN(&s->o, o, ZCRPC__MIN_SERVER_OPTS) != ZCRPC_OK ||
		    n->window < ZCRPC_MIN_QUEUE_DEPTH ||
		    n->window > ZCRPC_MAX_QUEUE_DEPTH ||
		    (n->send_depth &&
		     (n->send_depth < ZCRPC_MIN_QUEUE_DEPTH ||
		      n->send_depth > ZCRPC_MAX_QUEUE_DEPTH)) ||
		    (!n->psk && n->psk_len) ||
		    (n->psk && (n->psk_len < ZCRPC_PSK_MIN ||
				n->psk_len > ZCRPC_PSK_MAX)) ||
		    n->handshake_timeout_ms < 0 ||
		    n->bulk_write_timeout_ms < 0 || n->idle_release_ms < 0 ||
		    n->idle_timeout_ms < 0) {
			free(s);
			return ZCRPC_INVALID_ARGUMENT;
		}
		if (n->psk) { /* our own copy */
			memcpy(s->psk, n->psk, n->psk_len);
			s->o.psk = s->psk;
		}
	}
	s->w = w;
	if (zcrpc__call_table_init(&s->calls, 65536, sizeof(zcrpc_server_call),
				   NULL, NULL) != ZCRPC_OK) {
		free(s);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	zcrpc__list_init(&s->conns);
	zcrpc__list_init(&s->run_queue);
	if (!s->o.bulk_cache_max)
		s->o.bulk_cache_max = (size_t)2 << 30;
	s->conn_max = s->o.bulk_conn_max ? s->o.bulk_conn_max
					 : s->o.bulk_cache_max / 4;
	s->write_timeout_ns = (int64_t)(s->o.bulk_write_timeout_ms
						? s->o.bulk_write_timeout_ms
						: 10000) * 1000000LL;
	s->idle_ns = (int64_t)(s->o.idle_release_ms ? s->o.idle_release_ms
						    : 10000) * 1000000LL;
	zcrpc__bulk_init(&s->bulk, zcrpc_worker_get_context(w), s->o.bulk_cache_max);
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
	if ((m = zcrpc__server_find_method(s, id)))
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
	lo.send_depth = s->o.send_depth ? s->o.send_depth : s->o.window;
	lo.psk = s->o.psk;
	lo.psk_len = s->o.psk_len;
	lo.max_handshakes = s->o.max_handshakes;
	lo.handshake_timeout_ms = s->o.handshake_timeout_ms;
	lo.max_connections = s->o.max_connections;
	lo.max_conns_per_source = s->o.max_conns_per_source;
	st = zcrpc_listen(s->w, host, port, &lo, &s->l);
	if (st == ZCRPC_OK)
		s->port = zcrpc_listener_get_port(s->l);
	return st;
}

uint16_t zcrpc_server_get_port(const zcrpc_server *s)
{
	return s ? s->port : 0;
}

static uint32_t calls_alive(const zcrpc_server *s)
{
	return zcrpc__call_table_used(&s->calls);
}

/* Replies (or other frames) still queued behind credits or pool slots: a
 * call that was answered is not done until its reply left. */
static int frames_queued(const zcrpc_server *s)
{
	const struct zcrpc__list *n;

	zcrpc__list_foreach(n, &s->conns) {
		const struct sconn *sc = zcrpc__sconn_of(n);

		if (!sc->closed && (sc->q_head || sc->p_head))
			return 1;
	}
	return 0;
}

zcrpc_status zcrpc_server_shutdown(zcrpc_server *s, int grace_ms)
{
	struct zcrpc__list *n;
	int64_t end;

	if (!s)
		return ZCRPC_INVALID_ARGUMENT;
	if (zcrpc__worker_in_progress(s->w))
		return ZCRPC_FAILED_PRECONDITION;
	s->shutting_down = 1;
	zcrpc_listener_destroy(s->l);
	s->l = NULL;
	zcrpc__list_foreach(n, &s->conns) zcrpc__sconn_send_simple(
		zcrpc__sconn_of(n), ZCRPC_FRAME_GOAWAY, 0, ZCRPC_OK, NULL);
	end = zcrpc__now_ns() + (int64_t)(grace_ms > 0 ? grace_ms : 0) * 1000000LL;
	while ((calls_alive(s) || frames_queued(s)) && zcrpc__now_ns() < end)
		zcrpc_worker_progress(s->w, 10);
	if (calls_alive(s) || frames_queued(s)) {
		zcrpc__list_foreach(n, &s->conns)
			zcrpc_conn_close(zcrpc__sconn_of(n)->conn);
		end = zcrpc__now_ns() + 3000LL * 1000000LL;
		while (!zcrpc__list_empty(&s->conns) && zcrpc__now_ns() < end)
			zcrpc_worker_progress(s->w, 10);
		return ZCRPC_DEADLINE_EXCEEDED;
	}
	zcrpc__list_foreach(n, &s->conns)
		zcrpc_conn_close(zcrpc__sconn_of(n)->conn);
	end = zcrpc__now_ns() + 3000LL * 1000000LL;
	while (!zcrpc__list_empty(&s->conns) && zcrpc__now_ns() < end)
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
	while (!zcrpc__list_empty(&s->conns)) {
		struct sconn *sc =
			zcrpc__sconn_of(zcrpc__list_first(&s->conns));
		zcrpc_conn *conn = sc->conn;
		struct zcrpc__list *n, *tmp;

		zcrpc__list_foreach_safe(n, tmp, &sc->calls)
		{
			zcrpc_server_call *c = zcrpc__scall_of(n, link);

			zcrpc__list_remove(&c->link);
			c->sc = NULL;
			c->on_done = NULL;
			zcrpc__scall_free(s, c);
		}
		sconn_free(sc);
		zcrpc_conn_destroy(conn);
	}
	for (i = 0; i < s->calls.n; i++) {
		zcrpc_server_call *c = zcrpc__call_table_at(&s->calls, i);

		if (c->state != SS_FREE) {
			c->on_done = NULL;
			zcrpc__scall_free(s, c);
		}
	}
	zcrpc__bulk_fini(&s->bulk);
	for (i = 0; i < s->nmethods; i++)
		free(s->methods[i].name);
	free(s->methods);
	zcrpc__call_table_fini(&s->calls);
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
		out->pool_pinned = zcrpc__worker_pool_pinned(s->w);
	}
	ZCRPC__ABI_OUT(dst, dst_size, out);
}
