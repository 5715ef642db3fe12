/* zcrpc — the server: its lifetime and its shards (one per worker, for a
 * server on several workers), method registration, listening and
 * accepting, its timer (deferred frames, buffers registered off-thread,
 * bulk time limits, memory given back), the idle timeout of connections
 * that never made a call, statistics. Graceful shutdown is in
 * server_shutdown.c, zcrpc_server_serve() in server_runtime.c. Calls are in
 * server_dispatch.c, replies in server_reply.c, bulk parts in server_bulk.c,
 * frames out in server_send.c. */
#include "server_internal.h"
#include "stream_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/limits.h"

/* zcrpc_server_opts.idle_timeout_ms's default: a connection with no call
 * 30 s after its accept is closed (a client that connects and never calls
 * holds a connection of its source's limit for at most that long). */
#define ZCRPC_DEFAULT_IDLE_TIMEOUT_MS 30000
/* How often a shard of a server on several workers publishes its
 * counters for zcrpc_server_get_stats() on other threads. */
#define ZCRPC_PUBLISH_NS (50LL * 1000000LL)

const struct method *zcrpc__server_find_method(const zcrpc_server *s,
					       uint32_t id)
{
	size_t i;

	s = s->root; /* the shards share the root's table */
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
	if (s->root->nshards > 1) { /* counters for other threads */
		zcrpc__server_publish(s);
		zcrpc__timer_start(s->w, &s->timer, now + ZCRPC_PUBLISH_NS);
	}
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
	zcrpc__batch_drop(&sc->batch);
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
	zcrpc__sstreams_conn_gone(sc);
	s->st.connections--;
	if (why == ZCRPC_OK)
		s->st.conns_closed++; /* the client (or we) closed in order */
	else
		s->st.conns_lost++; /* crash, loss, error; zcrpc_conn_get_error says */
	if (s->o.on_disconnect)
		s->o.on_disconnect(s->root, conn, why, s->o.arg);
	sconn_free(sc);
	zcrpc_conn_destroy(conn);
	if (s->root->nshards > 1)
		zcrpc__server_publish(s);
}

/* The shard of the worker @conn was handed to. */
static zcrpc_server *shard_of(zcrpc_server *root, zcrpc_conn *conn)
{
	zcrpc_worker *w = zcrpc__conn_worker(conn);
	size_t i;

	for (i = 1; i < root->nshards; i++)
		if (root->shards[i]->w == w)
			return root->shards[i];
	return root;
}

/* On the connection's worker (the listener's, or the one it was handed
 * to): the connection joins that worker's shard. */
static void on_accept(zcrpc_listener *l, zcrpc_conn *conn, void *arg)
{
	zcrpc_server *s = shard_of(arg, conn);
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
	zcrpc__list_init(&sc->streams);
	zcrpc__batch_init(&sc->batch, s->w, zcrpc__sconn_send_batch,
			  &s->st.stream_batches, &s->st.stream_batched_frames);
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
		s->o.on_connect(s->root, conn, s->o.arg);
	if (s->shutting_down)
		zcrpc__sconn_send_simple(sc, ZCRPC_FRAME_GOAWAY, 0, ZCRPC_OK,
					 NULL);
	if (s->root->nshards > 1)
		zcrpc__server_publish(s);
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

/* The options' checks (the caller's struct read by the ABI rule into
 * @s->o, which holds the defaults). */
static zcrpc_status read_opts(zcrpc_server *s, const zcrpc_server_opts *o)
{
	const zcrpc_server_opts *n = &s->o;

	if (ZCRPC__ABI_IN(&s->o, o, ZCRPC__MIN_SERVER_OPTS) != ZCRPC_OK ||
	    n->window < ZCRPC_MIN_QUEUE_DEPTH ||
	    n->window > ZCRPC_MAX_QUEUE_DEPTH ||
	    (n->send_depth && (n->send_depth < ZCRPC_MIN_QUEUE_DEPTH ||
			       n->send_depth > ZCRPC_MAX_QUEUE_DEPTH)) ||
	    (!n->psk && n->psk_len) ||
	    (n->psk &&
	     (n->psk_len < ZCRPC_PSK_MIN || n->psk_len > ZCRPC_PSK_MAX)) ||
	    n->handshake_timeout_ms < 0 || n->bulk_write_timeout_ms < 0 ||
	    n->idle_release_ms < 0 || n->idle_timeout_ms < 0 ||
	    (n->nworkers && !n->workers) || n->nworkers > ZCRPC_MAX_WORKERS ||
	    n->threads > ZCRPC_MAX_WORKERS)
		return ZCRPC_INVALID_ARGUMENT;
	if (n->psk) { /* our own copy */
		memcpy(s->psk, n->psk, n->psk_len);
		s->o.psk = s->psk;
	}
	return ZCRPC_OK;
}

/* A shard on worker @w: its own connections, calls and timer, @root's
 * options. @root NULL: the root itself, whose options @s->o hold. */
static zcrpc_status shard_init(zcrpc_server *s, zcrpc_worker *w,
			       zcrpc_server *root)
{
	if (root) {
		s->o = root->o;
		if (s->o.psk) {
			memcpy(s->psk, root->psk, s->o.psk_len);
			s->o.psk = s->psk;
		}
	}
	s->root = root ? root : s;
	s->w = w;
	if (zcrpc__call_table_init(&s->calls, 65536, sizeof(zcrpc_server_call),
				   NULL, NULL) != ZCRPC_OK)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (pthread_mutex_init(&s->pub_lock, NULL)) {
		zcrpc__call_table_fini(&s->calls);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	zcrpc__list_init(&s->conns);
	zcrpc__list_init(&s->run_queue);
	zcrpc__list_init(&s->streams);
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
	/* On another worker too: its thread does not run yet (the rule of
	 * zcrpc_server_opts.workers). */
	zcrpc__timer_start(w, &s->timer, s->next_trim_ns);
	return ZCRPC_OK;
}

/* Frees shard @s: its connections closed at once, its calls released. */
static void shard_fini(zcrpc_server *s);

/* The shards of the other workers in o.workers. */
static zcrpc_status add_shards(zcrpc_server *root, zcrpc_worker *const *ws,
			       size_t n)
{
	size_t i, j;

	root->shards = calloc(n + 1, sizeof(*root->shards));
	if (!root->shards)
		return ZCRPC_RESOURCE_EXHAUSTED;
	root->shards[0] = root;
	root->nshards = 1;
	for (i = 0; i < n; i++) {
		zcrpc_server *sh;

		if (!ws[i])
			return ZCRPC_INVALID_ARGUMENT;
		for (j = 0; j < root->nshards; j++)
			if (root->shards[j]->w == ws[i])
				break;
		if (j < root->nshards)
			continue; /* the home worker, or listed twice */
		sh = calloc(1, sizeof(*sh));
		if (!sh)
			return ZCRPC_RESOURCE_EXHAUSTED;
		if (shard_init(sh, ws[i], root) != ZCRPC_OK) {
			free(sh);
			return ZCRPC_RESOURCE_EXHAUSTED;
		}
		root->shards[root->nshards++] = sh;
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc_server_create(zcrpc_worker *w, const zcrpc_server_opts *o,
				 zcrpc_server **out)
{
	zcrpc_server *s;
	zcrpc_status st;

	if (!out)
		return ZCRPC_INVALID_ARGUMENT;
	s = calloc(1, sizeof(*s));
	if (!s)
		return ZCRPC_RESOURCE_EXHAUSTED;
	zcrpc_server_opts_init(&s->o);
	if (o && (st = read_opts(s, o)) != ZCRPC_OK) {
		free(s);
		return st;
	}
	if (!w) { /* the server makes its workers: o.threads of them */
		st = zcrpc__server_make_workers(s, &w);
		if (st != ZCRPC_OK) {
			free(s);
			return st;
		}
	}
	st = shard_init(s, w, NULL);
	if (st != ZCRPC_OK) {
		zcrpc__server_free_workers(s);
		free(s);
		return st;
	}
	s->shards = &s->root; /* one shard: itself */
	s->nshards = 1;
	if (s->nown > 1)
		st = add_shards(s, s->own + 1, s->nown - 1);
	else if (s->o.nworkers && !s->nown) /* with w NULL: threads only */
		st = add_shards(s, s->o.workers, s->o.nworkers);
	/* Nothing of the caller's array is kept. */
	s->o.workers = NULL;
	s->o.nworkers = 0;
	if (st == ZCRPC_OK) /* grpc.health.v1 on every server */
		st = zcrpc__health_init(s);
	if (st != ZCRPC_OK) {
		zcrpc_server_destroy(s);
		return st;
	}
	*out = s;
	return ZCRPC_OK;
}

zcrpc_worker *zcrpc_server_get_worker(const zcrpc_server *s, size_t i)
{
	return s && i < s->nshards ? s->shards[i]->w : NULL;
}

size_t zcrpc_server_get_nworkers(const zcrpc_server *s)
{
	return s ? s->nshards : 0;
}

zcrpc_status zcrpc__server_add_method(zcrpc_server *s, const char *full_name,
				      zcrpc_handler fn, void *arg,
				      zcrpc_stream_handlers *sh)
{
	uint32_t id;
	struct method *m;

	if (!s || !full_name || !*full_name || (!fn && !sh))
		return ZCRPC_INVALID_ARGUMENT;
	if (s->nshards > 1 && s->listening)
		return ZCRPC_FAILED_PRECONDITION; /* other threads read it */
	id = zcrpc_method_id(full_name);
	if (zcrpc__server_find_method(s, id))
		return ZCRPC_ALREADY_EXISTS; /* same name, or a hash collision */
	if (s->nmethods == s->cap_methods) {
		size_t cap = s->cap_methods ? s->cap_methods * 2 : 16;
		struct method *nm = realloc(s->methods, cap * sizeof(*nm));

		if (!nm)
			return ZCRPC_RESOURCE_EXHAUSTED;
		s->methods = nm;
		s->cap_methods = cap;
	}
	m = &s->methods[s->nmethods];
	m->name = strdup(full_name);
	if (!m->name)
		return ZCRPC_RESOURCE_EXHAUSTED;
	m->id = id;
	m->fn = fn;
	m->arg = arg;
	m->sh = sh;
	s->nmethods++;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_server_register(zcrpc_server *s, const char *full_name,
				   zcrpc_handler fn, void *arg)
{
	if (!fn)
		return ZCRPC_INVALID_ARGUMENT;
	return zcrpc__server_add_method(s, full_name, fn, arg, NULL);
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
	if (st == ZCRPC_OK && s->nshards > 1) {
		zcrpc_worker *ws[ZCRPC_MAX_WORKERS];
		size_t i;

		for (i = 0; i < s->nshards; i++)
			ws[i] = s->shards[i]->w;
		st = zcrpc__listener_spread(s->l, ws, s->nshards);
		if (st != ZCRPC_OK) {
			zcrpc_listener_destroy(s->l);
			s->l = NULL;
		}
	}
	if (st == ZCRPC_OK) {
		s->port = zcrpc_listener_get_port(s->l);
		s->listening = 1;
	}
	return st;
}

uint16_t zcrpc_server_get_port(const zcrpc_server *s)
{
	return s ? s->port : 0;
}

static void shard_fini(zcrpc_server *s)
{
	size_t i;

	zcrpc__timer_stop(s->w, &s->timer);
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
		zcrpc__sstreams_conn_gone(sc);
		sconn_free(sc);
		zcrpc_conn_destroy(conn);
	}
	zcrpc__sstreams_destroy(s);
	zcrpc__health_shard_fini(s);
	for (i = 0; i < s->calls.n; i++) {
		zcrpc_server_call *c = zcrpc__call_table_at(&s->calls, i);

		if (c->state != SS_FREE) {
			c->on_done = NULL;
			zcrpc__scall_free(s, c);
		}
	}
	zcrpc__bulk_fini(&s->bulk);
	zcrpc__call_table_fini(&s->calls);
	pthread_mutex_destroy(&s->pub_lock);
	explicit_bzero(s->psk, sizeof(s->psk));
}

/* Several workers: the caller is the home worker's thread and no other
 * thread runs any of the server's workers (zcrpc_server_opts.workers). */
void zcrpc_server_destroy(zcrpc_server *s)
{
	size_t i;

	if (!s)
		return;
	zcrpc__server_withdraw_all(s);
	zcrpc_listener_destroy(s->l);
	s->l = NULL;
	for (i = 1; i < s->nshards; i++) {
		if (!s->shards[i])
			continue;
		shard_fini(s->shards[i]);
		free(s->shards[i]);
	}
	if (s->shards != &s->root)
		free(s->shards);
	shard_fini(s);
	for (i = 0; i < s->nmethods; i++) {
		free(s->methods[i].name);
		free(s->methods[i].sh);
	}
	free(s->methods);
	zcrpc__health_fini(s);
	zcrpc__server_free_workers(s);
	free(s);
}

void zcrpc__server_stats_now(const zcrpc_server *s, zcrpc_server_stats *out)
{
	struct zcrpc__bulk_stats b;

	*out = s->st;
	zcrpc__bulk_get_stats(&s->bulk, &b);
	out->bulk_pinned = b.pinned;
	out->bulk_in_use = b.in_use;
	out->bulk_released = b.released;
	out->pool_pinned = zcrpc__worker_pool_pinned(s->w);
}

void zcrpc__server_publish(zcrpc_server *s)
{
	zcrpc_server_stats now;

	zcrpc__server_stats_now(s, &now);
	pthread_mutex_lock(&s->pub_lock);
	s->pub = now;
	pthread_mutex_unlock(&s->pub_lock);
}

static void add_stats(zcrpc_server_stats *t, const zcrpc_server_stats *a)
{
#define ADD(f) t->f += a->f
	ADD(calls);
	ADD(replies);
	ADD(unimplemented);
	ADD(expired_not_run);
	ADD(cancelled);
	ADD(protocol_errors);
	ADD(copied_bytes);
	ADD(connections);
	ADD(running);
	ADD(queued);
	ADD(bulk_bad_writes);
	ADD(conns_closed);
	ADD(conns_lost);
	ADD(invalid_status);
	ADD(frames_deferred);
	ADD(bulk_refused);
	ADD(bulk_waits);
	ADD(bulk_timeouts);
	ADD(bulk_pinned);
	ADD(bulk_in_use);
	ADD(bulk_released);
	ADD(idle_closed);
	ADD(streams_started);
	ADD(streams_open);
	ADD(stream_msgs_recv);
	ADD(stream_msgs_sent);
	ADD(stream_bytes_recv);
	ADD(stream_bytes_sent);
	ADD(stream_bulk_msgs);
	ADD(stream_batches);
	ADD(stream_batched_frames);
	ADD(streams_ok);
	ADD(streams_failed);
	ADD(streams_refused);
	ADD(stream_bulk_msgs_sent);
#undef ADD
	/* The pool is per worker: each shard's is its own worker's. */
	t->pool_pinned += a->pool_pinned;
}

void zcrpc_server_get_stats(const zcrpc_server *s, zcrpc_server_stats *dst,
			    size_t dst_size)
{
	zcrpc_server_stats all, *out = &all, one;
	size_t i;

	memset(out, 0, sizeof(*out));
	if (s && s->nshards == 1) {
		zcrpc__server_stats_now(s, out);
	} else if (s) {
		for (i = 0; i < s->nshards; i++) {
			zcrpc_server *sh = s->shards[i];

			pthread_mutex_lock(&sh->pub_lock);
			one = sh->pub;
			pthread_mutex_unlock(&sh->pub_lock);
			add_stats(out, &one);
		}
	}
	ZCRPC__ABI_OUT(dst, dst_size, out);
}

zcrpc_status zcrpc_server_get_worker_stats(const zcrpc_server *s, size_t i,
					   zcrpc_server_stats *dst,
					   size_t dst_size)
{
	zcrpc_server_stats one;

	if (!s || i >= s->nshards || !dst)
		return ZCRPC_INVALID_ARGUMENT;
	if (s->nshards == 1) {
		zcrpc__server_stats_now(s, &one);
	} else {
		zcrpc_server *sh = s->shards[i];

		pthread_mutex_lock(&sh->pub_lock);
		one = sh->pub;
		pthread_mutex_unlock(&sh->pub_lock);
	}
	ZCRPC__ABI_OUT(dst, dst_size, &one);
	return ZCRPC_OK;
}
