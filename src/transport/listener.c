/* zcrpc — the passive side. The listening id comes from rdma_getaddrinfo
 * (RAI_PASSIVE) + rdma_create_ep, as rdma_create_ep(3) describes; its
 * private channel is made non-blocking and polled by the worker, and
 * rdma_get_request() is called only when it is readable. Each request is
 * checked (handshake, retry policy, the connection limits of
 * conn_limits.c, the handshake cap, the key), given a QP on the worker's PD
 * and its own CQ, migrated to the worker's CM channel and accepted;
 * ESTABLISHED then arrives as an event. A request refused, or one whose
 * connection cannot be set up, gets a REJECT hello with the status and a
 * reason (zcrpc__listener_reject). */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "hello.h"
#include "../core/abi.h"
#include "../core/limits.h"

#define ZCRPC_HANDSHAKE_TIMEOUT_MS 10000
#define ZCRPC_MAX_HANDSHAKES 128
/* Connect requests a listener sets up per progress turn (see
 * zcrpc__listener_on_readable; docs/design.md, Servers on many workers). */
#define ZCRPC_ACCEPTS_PER_TURN 8

void zcrpc_listen_opts_init_sized(zcrpc_listen_opts *caller, size_t size)
{
	zcrpc_listen_opts d, *opts = &d;

	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->backlog = 128;
	opts->max_handshakes = ZCRPC_MAX_HANDSHAKES;
	opts->handshake_timeout_ms = ZCRPC_HANDSHAKE_TIMEOUT_MS;
	opts->max_conns_per_source = ZCRPC_DEFAULT_CONNS_PER_SOURCE;
	zcrpc__abi_init(caller, size, opts, sizeof(*opts));
}

/* Drops a reference to @l; the last frees it (its owner destroyed it). */
static void listener_unref(zcrpc_listener *l)
{
	if (atomic_fetch_sub(&l->refs, 1) != 1)
		return;
	explicit_bzero(l->psk, sizeof(l->psk));
	free(l->workers);
	free(l->wconns);
	free(l);
}

void zcrpc__listener_release(zcrpc_conn *c)
{
	zcrpc_listener *l = c->listener;

	if (!l)
		return;
	c->listener = NULL;
	if (l->nworkers > 1 && l->w != c->w) {
		zcrpc__listener_remote_release(l, c->w, c->src_key, 0, 1);
		return;
	}
	l->handshakes--;
}

/* What a connection on another worker gives back to its listener. */
struct remote_release {
	zcrpc_listener *l;
	zcrpc_worker *from;
	uint8_t key[16];
	int src_counted, handshake;
};

/* On the listener's worker. */
static void on_remote_release(zcrpc_worker *w, void *arg)
{
	struct remote_release *m = arg;
	zcrpc_listener *l = m->l;

	(void)w;
	if (!atomic_load(&l->closed)) {
		if (m->handshake)
			l->handshakes--;
		else
			zcrpc__limits_uncount(l, m->key, m->src_counted,
					      zcrpc__listener_widx(l, m->from));
	}
	listener_unref(l);
	free(m);
}

void zcrpc__listener_remote_release(zcrpc_listener *l, zcrpc_worker *from,
				    const uint8_t key[16], int src_counted,
				    int handshake)
{
	struct remote_release *m;

	if (atomic_load(&l->closed)) {
		listener_unref(l); /* nothing left to count */
		return;
	}
	m = malloc(sizeof(*m));
	if (m) {
		m->l = l;
		m->from = from;
		memcpy(m->key, key, 16);
		m->src_counted = src_counted;
		m->handshake = handshake;
		if (zcrpc_worker_post(l->w, on_remote_release, m) == ZCRPC_OK)
			return;
		free(m);
	}
	/* Out of memory: the listener keeps counting one connection too
	 * many (its limits are the stricter for it), never one too few. */
	zcrpc__log(ZCRPC_LOG_ERROR,
		   "listener on port %u: a connection's release was lost "
		   "(out of memory)",
		   (unsigned)l->port);
	listener_unref(l);
}

/* The REJECT of zcrpc__listener_reject, logged on worker @w (the one whose
 * thread runs this: the listener's, or the one a request was handed to). */
static void reject_on(zcrpc_worker *w, zcrpc_listener *l, struct rdma_cm_id *id,
		      zcrpc_status st, const char *why);

void zcrpc__listener_reject(zcrpc_listener *l, struct rdma_cm_id *id,
			    zcrpc_status st, const char *fmt, ...)
{
	char reason[ZCRPC_HELLO_REASON_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	reject_on(l->w, l, id, st, reason);
}

/* The REJECT hello for @st and @why in @h, logged on worker @w. */
static void reject_hello(zcrpc_worker *w, zcrpc_listener *l,
			 struct rdma_cm_id *id, zcrpc_status st,
			 const char *why, struct zcrpc_hello *h)
{
	char src[ZCRPC_SRC_TEXT_LEN];
	uint8_t key[16];

	memset(h, 0, sizeof(*h));
	h->version = ZCRPC_PROTO_VERSION;
	h->kind = ZCRPC_HELLO_REJECT;
	h->status = (uint32_t)st;
	snprintf(h->reason, sizeof(h->reason), "%s", why);
	zcrpc__limits_source(id, key, src, sizeof(src));
	zcrpc__worker_seterr(
		w, "listener on port %u rejected a connection from %s: %s: %s",
		(unsigned)l->port, src, zcrpc_status_str(st), h->reason);
}

static void reject_on(zcrpc_worker *w, zcrpc_listener *l, struct rdma_cm_id *id,
		      zcrpc_status st, const char *why)
{
	uint8_t buf[ZCRPC_HELLO_MAX_REJECT];
	struct zcrpc_hello h;
	size_t n;

	reject_hello(w, l, id, st, why, &h);
	n = zcrpc__hello_encode(&h, buf, sizeof(buf));
	if (rdma_reject(id, buf, (uint8_t)n) && n > ZCRPC_HELLO_LEN) {
		h.reason[0] =
			'\0'; /* a CM with less room: the status at least */
		n = zcrpc__hello_encode(&h, buf, sizeof(buf));
		rdma_reject(id, buf, (uint8_t)n);
	}
}

/* Rejects a request no connection owns yet and frees its id: both system
 * calls on worker @w's reaper thread (reaper.c), so that a storm of
 * refused connects does not hold up @w's established connections. */
static void reject_free_on(zcrpc_worker *w, zcrpc_listener *l,
			   struct rdma_cm_id *id, zcrpc_status st,
			   const char *why)
{
	struct zcrpc_hello h;

	reject_hello(w, l, id, st, why, &h);
	zcrpc__reaper_reject(w, id, &h);
}

static void reject_request(zcrpc_listener *l, struct rdma_cm_id *id,
			   zcrpc_status st, const char *why)
{
	reject_free_on(l->w, l, id, st, why);
}

/* The connect request's hello and the policy checks, in this order: the
 * hello, the retry count, the connection limits, the handshake cap, the
 * key. Returns OK to go on, or the status to reject the request with (its
 * reason in @why, counted). */
static zcrpc_status admit(zcrpc_listener *l, const struct rdma_cm_event *ev,
			  struct zcrpc_hello *h, const uint8_t key[16],
			  const char *src, char *why, size_t why_len)
{
	zcrpc_worker *w = l->w;
	zcrpc_status st;

	st = zcrpc__hello_decode(ev->param.conn.private_data,
				 ev->param.conn.private_data_len, h, why,
				 why_len);
	if (st == ZCRPC_OK && h->kind != ZCRPC_HELLO_CONNECT) {
		st = ZCRPC_INVALID_ARGUMENT;
		snprintf(why, why_len, "handshake of kind %u is not a connect",
			 (unsigned)h->kind);
	}
	if (st != ZCRPC_OK) {
		w->rejected_hello++;
		return st;
	}
	/* The passive QP takes its retry counts from the client's request. */
	if (ev->param.conn.retry_count > 6) {
		w->rejected_hello++;
		snprintf(why, why_len,
			 "retry_count %u refused (7 = retry forever)",
			 ev->param.conn.retry_count);
		return ZCRPC_FAILED_PRECONDITION;
	}
	st = zcrpc__limits_admit(l, key, src, why, why_len);
	if (st != ZCRPC_OK)
		return st;
	/* Admission: a bounded number of handshakes, and a key if we have
	 * one (docs/protocol.md §1). */
	if (l->handshakes >= l->opts.max_handshakes) {
		w->rejected_busy++;
		snprintf(why, why_len,
			 "%u handshakes in progress (max_handshakes)",
			 l->handshakes);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (l->opts.psk && !(h->features & ZCRPC_FEAT_AUTH)) {
		w->rejected_auth++;
		snprintf(why, why_len, "this server requires a pre-shared key");
		return ZCRPC_UNAUTHENTICATED;
	}
	return ZCRPC_OK;
}

/* A connection that could not be set up before rdma_accept (no pool slot
 * for its receives, memory, the device's limits, its port down, a failed
 * migration): the client gets a REJECT with the status and the reason,
 * never a bare CM reject. The connection is failed (it was never handed
 * over, so it is freed at the next reap, its id with it). Runs on the
 * connection's worker @w. */
static void setup_failed(zcrpc_worker *w, zcrpc_listener *l, zcrpc_conn *c,
			 struct rdma_cm_id *id, zcrpc_status st,
			 const char *what)
{
	if (c->state != ZCRPC_CONN_CLOSED)
		zcrpc__conn_fail(c, st == ZCRPC_OK ? ZCRPC_INTERNAL : st, "%s",
				 what);
	w->rejected_setup++;
	if (!c->migrated)
		reject_on(w, l, id, c->status, c->detail);
	if (!c->id) /* never given to the connection */
		rdma_destroy_ep(id);
}

/* The connection's settings from the listener and the client's hello. */
static void conn_from_hello(zcrpc_conn *c, const zcrpc_listener *l,
			    const struct zcrpc_hello *h)
{
	c->recv_depth = l->opts.recv_depth;
	c->sq_depth = l->opts.send_depth;
	c->peer_recv_depth = h->recv_depth;
	c->peer_max_msg = h->max_msg;
	c->peer_max_write = h->max_write;
	c->credits = h->recv_depth;
	c->features = h->features & zcrpc__worker_features(c->w);
	c->peer_features = h->features; /* the path: once c->dev is known */
}

/* The accept's second half, on the connection's worker: key state, QP
 * (the worker's PD, shared receive queue and CQ), migration to the
 * worker's CM channel (done already for a request handed over: @migrated),
 * rdma_accept, the handshake deadline. */
static void finish_accept(zcrpc_listener *l, zcrpc_conn *c,
			  struct rdma_cm_id *id, int migrated)
{
	zcrpc_worker *w = c->w;
	struct rdma_conn_param param;
	uint8_t pdata[ZCRPC_HELLO_MAX];
	char why[ZCRPC_HELLO_REASON_MAX + 1];
	zcrpc_status st;

	if (l->opts.psk) {
		st = zcrpc__auth_server_init(c, l);
		if (st != ZCRPC_OK) {
			setup_failed(w, l, c, id, st,
				     "accept failed: key state");
			return;
		}
	}
	st = zcrpc__conn_setup(c, id);
	if (st != ZCRPC_OK) {
		setup_failed(w, l, c, id, st, "accept failed");
		return;
	}
	zcrpc__conn_choose_path(c, c->peer_features);
	/* iWARP: nothing is sent before the client's first message, which
	 * makes the connection ESTABLISHED here (completion.c). */
	c->await_first = c->dev->prof->active_first;
	/* Migration acknowledges (frees) the CONNECT_REQUEST event: nothing
	 * of it is used after this point. */
	if (!migrated && rdma_migrate_id(id, w->cm_ch)) {
		snprintf(why, sizeof(why), "rdma_migrate_id: %s",
			 strerror(errno));
		setup_failed(w, l, c, id, ZCRPC_INTERNAL, why);
		return;
	}
	c->migrated = 1;
	zcrpc__conn_fill_param(c, &param, pdata, sizeof(pdata),
			       ZCRPC_HELLO_ACCEPT);
	if (rdma_accept(id, &param)) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "rdma_accept: %s",
				 strerror(errno));
		return;
	}
	c->timeout_ms = l->opts.handshake_timeout_ms;
	zcrpc__conn_set_deadline(
		c, zcrpc__now_ns() +
			   (int64_t)l->opts.handshake_timeout_ms * 1000000LL);
}

/* A connect request handed to another worker (its id migrated to that
 * worker's CM channel, its counts and handshake taken here). */
struct handoff {
	zcrpc_listener *l;
	struct rdma_cm_id *id;
	struct zcrpc_hello h;
	uint8_t key[16];
	int src_counted;
};

/* On the target worker: the connection, then the rest of the accept. */
static void on_handoff(zcrpc_worker *w, void *arg)
{
	struct handoff *m = arg;
	zcrpc_listener *l = m->l;
	int closed = atomic_load(&l->closed);
	zcrpc_conn *c =
		closed ? NULL : zcrpc__conn_alloc(w, l->opts.conn_handlers);

	if (!c) {
		w->rejected_setup++;
		reject_free_on(w, l, m->id,
			       closed ? ZCRPC_UNAVAILABLE
				      : ZCRPC_RESOURCE_EXHAUSTED,
			       closed ? "listener closed" : "out of memory");
		zcrpc__listener_remote_release(l, w, m->key, 0, 1);
		zcrpc__listener_remote_release(l, w, m->key, m->src_counted, 0);
		free(m);
		return;
	}
	c->passive = 1;
	c->listener = l;   /* the handshake: zcrpc__listener_release */
	c->counted_by = l; /* the counts: zcrpc__limits_release */
	memcpy(c->src_key, m->key, 16);
	c->src_counted = m->src_counted ? 1 : 0;
	conn_from_hello(c, l, &m->h);
	finish_accept(l, c, m->id, 1);
	free(m);
}

/* The target of a new connection: the worker with the fewest connections
 * counted (handshakes included), the listener's own on a tie. */
static uint32_t pick_worker(const zcrpc_listener *l)
{
	uint32_t i, best = 0;

	for (i = 1; i < l->nworkers; i++)
		if (l->wconns[i] < l->wconns[best])
			best = i;
	return best;
}

/* Hands admitted request @id to worker @wi: counted here, migrated to
 * that worker's CM channel (which acknowledges the request's event; the
 * hello was decoded into @h), the rest posted there. */
static void hand_off(zcrpc_listener *l, struct rdma_cm_id *id,
		     const struct zcrpc_hello *h, const uint8_t key[16],
		     uint32_t wi)
{
	zcrpc_worker *tw = l->workers[wi];
	struct handoff *m = malloc(sizeof(*m));
	char why[ZCRPC_HELLO_REASON_MAX + 1];

	if (!m || zcrpc__limits_count(l, key, wi) != ZCRPC_OK) {
		free(m);
		l->w->rejected_setup++;
		reject_request(l, id, ZCRPC_RESOURCE_EXHAUSTED,
			       "out of memory");
		return;
	}
	m->l = l;
	m->id = id;
	m->h = *h;
	memcpy(m->key, key, 16);
	m->src_counted = l->opts.max_conns_per_source != 0;
	l->handshakes++;
	if (rdma_migrate_id(id, tw->cm_ch)) {
		snprintf(why, sizeof(why), "rdma_migrate_id: %s",
			 strerror(errno));
		goto undo;
	}
	atomic_fetch_add(&l->refs, 2); /* the connection's two releases */
	if (zcrpc_worker_post(tw, on_handoff, m) == ZCRPC_OK)
		return;
	atomic_fetch_sub(&l->refs, 2);
	snprintf(why, sizeof(why), "out of memory");
undo:
	l->handshakes--;
	zcrpc__limits_uncount(l, key, m->src_counted, wi);
	l->w->rejected_setup++;
	reject_request(l, id, ZCRPC_INTERNAL, why);
	free(m);
}

/* The connect request's checks, then the connection here or on the
 * worker pick_worker chose. */
static void accept_request(zcrpc_listener *l, struct rdma_cm_id *id)
{
	zcrpc_worker *w = l->w;
	char why[ZCRPC_HELLO_REASON_MAX + 1], src[ZCRPC_SRC_TEXT_LEN];
	struct zcrpc_hello h;
	uint8_t key[16];
	zcrpc_conn *c;
	zcrpc_status st;
	uint32_t wi;

	zcrpc__limits_source(id, key, src, sizeof(src));
	st = admit(l, id->event, &h, key, src, why, sizeof(why));
	if (st != ZCRPC_OK) {
		reject_request(l, id, st, why);
		return;
	}
	wi = l->nworkers > 1 ? pick_worker(l) : 0;
	if (wi) {
		hand_off(l, id, &h, key, wi);
		return;
	}
	c = zcrpc__conn_alloc(w, l->opts.conn_handlers);
	if (!c) {
		w->rejected_setup++;
		reject_request(l, id, ZCRPC_RESOURCE_EXHAUSTED,
			       "out of memory");
		return;
	}
	c->passive = 1;
	c->listener = l;
	l->handshakes++;
	if (zcrpc__limits_take(l, c, key) != ZCRPC_OK) {
		setup_failed(w, l, c, id, ZCRPC_RESOURCE_EXHAUSTED,
			     "out of memory");
		return;
	}
	conn_from_hello(c, l, &h);
	finish_accept(l, c, id, 0);
}

void zcrpc__listener_drop_device(zcrpc_listener *l)
{
	if (l->failed || !l->id)
		return;
	epoll_ctl(l->w->epfd, EPOLL_CTL_DEL, l->id->channel->fd, NULL);
	rdma_destroy_ep(l->id);
	l->id = NULL;
	l->failed = 1;
	zcrpc__worker_seterr(l->w,
			     "listener on port %u closed: RDMA device removed",
			     (unsigned)l->port);
}

void zcrpc__listener_on_readable(zcrpc_listener *l)
{
	struct rdma_cm_id *id;
	int n = 0;

	for (;;) {
		if (l->failed || !l->id)
			break; /* released (device removal) in this round */
		/* At most ZCRPC_ACCEPTS_PER_TURN set-ups per progress turn:
		 * the channel stays readable (level-triggered), so the rest
		 * wait for the next read of the epoll set, and an accept
		 * storm cannot stall the worker's established traffic. */
		if (n == ZCRPC_ACCEPTS_PER_TURN)
			break;
		if (rdma_get_request(l->id, &id) == 0) {
			accept_request(l, id);
			n++;
			continue;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		/* An event other than a connect request (DEVICE_REMOVAL,
		 * ADDR_CHANGE) or a failed request: record, acknowledge. */
		if (l->id->event) {
			enum rdma_cm_event_type t = l->id->event->event;

			zcrpc__worker_seterr(l->w, "listener event %s (status %d)",
					     rdma_event_str(t),
					     l->id->event->status);
			rdma_ack_cm_event(l->id->event);
			l->id->event = NULL;
			if (t == RDMA_CM_EVENT_DEVICE_REMOVAL) {
				zcrpc__device_removed(l->w, l->id->verbs);
				zcrpc__listener_drop_device(l); /* if still held */
				break;
			}
		} else {
			zcrpc__worker_seterr(l->w, "rdma_get_request: %s",
					     strerror(errno));
			break;
		}
	}
}

/* Long for its goto ladder: options, key copy, resolution, id, bind,
 * listen, epoll, each unwound in order below (issue 12: the
 * option copying is the ABI pass's to change, so it stays in one piece). */
zcrpc_status zcrpc_listen(zcrpc_worker *w, const char *host,
			  const char *port, const zcrpc_listen_opts *opts,
			  zcrpc_listener **out)
{
	struct rdma_addrinfo hints, *res = NULL;
	zcrpc_listener *l;
	zcrpc_status st;
	int rc;

	if (!w || !port || !opts || !out)
		return ZCRPC_INVALID_ARGUMENT;
	l = calloc(1, sizeof(*l));
	if (!l)
		return ZCRPC_RESOURCE_EXHAUSTED;
	l->w = w;
	atomic_init(&l->refs, 1);	  /* the owner's */
	zcrpc_listen_opts_init(&l->opts); /* an older, smaller struct: defaults */
	zcrpc_conn_handlers_init(&l->conn_handlers);
	if (ZCRPC__ABI_IN(&l->opts, opts, ZCRPC__MIN_LISTEN_OPTS) != ZCRPC_OK ||
	    !l->opts.on_accept ||
	    (l->opts.conn_handlers &&
	     zcrpc__copy_handlers(&l->conn_handlers, l->opts.conn_handlers) !=
		     ZCRPC_OK)) {
		free(l);
		return ZCRPC_INVALID_ARGUMENT;
	}
	l->opts.conn_handlers = &l->conn_handlers;
	if (!l->opts.max_handshakes)
		l->opts.max_handshakes = ZCRPC_MAX_HANDSHAKES;
	if (!l->opts.handshake_timeout_ms)
		l->opts.handshake_timeout_ms = ZCRPC_HANDSHAKE_TIMEOUT_MS;
	if ((l->opts.recv_depth &&
	     (l->opts.recv_depth < ZCRPC_MIN_QUEUE_DEPTH ||
	      l->opts.recv_depth > ZCRPC_MAX_QUEUE_DEPTH)) ||
	    l->opts.send_depth > ZCRPC_MAX_QUEUE_DEPTH ||
	    l->opts.handshake_timeout_ms < 0 ||
	    (!l->opts.psk && l->opts.psk_len) ||
	    (l->opts.psk &&
	     (l->opts.psk_len < ZCRPC_PSK_MIN ||
	      l->opts.psk_len > ZCRPC_PSK_MAX ||
	      w->opts.max_msg < ZCRPC_AUTH_HDR_LEN + ZCRPC_IDENTITY_MAX))) {
		free(l);
		return ZCRPC_INVALID_ARGUMENT;
	}
	if (l->opts.psk) { /* our own copy */
		memcpy(l->psk, l->opts.psk, l->opts.psk_len);
		l->opts.psk = l->psk;
	}

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	rc = rdma_getaddrinfo(host, port, &hints, &res);
	if (rc) {
		zcrpc__worker_seterr(w, "rdma_getaddrinfo(%s, %s): %s",
				     host ? host : "*", port,
				     rc == -1 ? strerror(errno) : gai_strerror(rc));
		st = ZCRPC_INVALID_ARGUMENT;
		goto err_free;
	}
	/* NULL PD and QP attributes: QPs are made per connection on accept. */
	if (rdma_create_ep(&l->id, res, NULL, NULL)) {
		st = zcrpc_status_from_errno(errno);
		if (errno == EADDRNOTAVAIL || errno == ENODEV)
			st = ZCRPC_UNAVAILABLE;
		zcrpc__worker_seterr(w, "binding %s port %s: %s",
				     host ? host : "*", port, strerror(errno));
		goto err_res;
	}
	if (rdma_listen(l->id, opts->backlog > 0 ? opts->backlog : 128)) {
		st = zcrpc_status_from_errno(errno);
		zcrpc__worker_seterr(w, "rdma_listen: %s", strerror(errno));
		goto err_ep;
	}
	l->port = ntohs(rdma_get_src_port(l->id));
	l->src = (struct zcrpc__src){ZCRPC_SRC_LISTENER, l, 0};
	if (zcrpc__epoll_add(w, l->id->channel->fd, &l->src)) {
		st = ZCRPC_RESOURCE_EXHAUSTED;
		goto err_ep;
	}
	rdma_freeaddrinfo(res);
	zcrpc__list_push_front(&w->listeners, &l->link);
	*out = l;
	return ZCRPC_OK;

err_ep:
	rdma_destroy_ep(l->id);
err_res:
	rdma_freeaddrinfo(res);
err_free:
	explicit_bzero(l->psk, sizeof(l->psk));
	free(l);
	return st == ZCRPC_OK ? ZCRPC_INTERNAL : st;
}

uint16_t zcrpc_listener_get_port(const zcrpc_listener *l)
{
	return l ? l->port : 0;
}

/* Posted to each other worker by zcrpc_listener_destroy: the connections
 * it was handed that are still in their handshake die with the listener. */
static void fail_handshakes(zcrpc_worker *w, void *arg)
{
	zcrpc_listener *l = arg;
	struct zcrpc__list *it;
	zcrpc_conn *c;

	zcrpc__foreach_conn(c, it, w)
		if (c->listener == l)
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "listener closed");
	listener_unref(l);
}

zcrpc_status zcrpc__listener_spread(zcrpc_listener *l,
				    zcrpc_worker *const *workers, size_t n)
{
	size_t i, k = 1;

	if (!l || !workers || !n || n > 1024 || l->workers)
		return ZCRPC_INVALID_ARGUMENT;
	l->workers = calloc(n + 1, sizeof(*l->workers));
	l->wconns = calloc(n + 1, sizeof(*l->wconns));
	if (!l->workers || !l->wconns) {
		free(l->workers);
		free(l->wconns);
		l->workers = NULL;
		l->wconns = NULL;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	l->workers[0] = l->w; /* its own first: ties go to it */
	for (i = 0; i < n; i++)
		if (workers[i] && workers[i] != l->w)
			l->workers[k++] = workers[i];
	l->nworkers = (uint32_t)k;
	return ZCRPC_OK;
}

void zcrpc_listener_destroy(zcrpc_listener *l)
{
	zcrpc_worker *w;
	struct zcrpc__list *it;
	zcrpc_conn *c;
	uint32_t i;

	if (!l)
		return;
	w = l->w;
	atomic_store(&l->closed, 1);
	/* Connections accepted but not yet ESTABLISHED die with it, those
	 * handed to other workers on their own threads. */
	zcrpc__foreach_conn(c, it, w) if (c->listener == l)
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "listener closed");
	for (i = 1; i < l->nworkers; i++) {
		atomic_fetch_add(&l->refs, 1);
		if (zcrpc_worker_post(l->workers[i], fail_handshakes, l) !=
		    ZCRPC_OK)
			atomic_fetch_sub(&l->refs, 1);
	}
	if (l->id) { /* NULL when its device was removed */
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, l->id->channel->fd, NULL);
		rdma_destroy_ep(l->id);
	}
	zcrpc__limits_fini(l); /* the connections it accepted stay */
	zcrpc__list_remove(&l->link);
	/* The key copy; a listener on several workers keeps it until its
	 * last reference (a request handed over may still read it). */
	if (l->nworkers <= 1)
		explicit_bzero(l->psk, sizeof(l->psk));
	listener_unref(l);
}
