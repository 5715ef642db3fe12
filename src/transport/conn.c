/* zcrpc — a connection's lifecycle: QP and CQ setup, the handshake
 * parameters, state changes from CM events, deadlines, close, teardown.
 * The data path is in send_queue.c, recv_ring.c, credits.c, msg.c,
 * completion.c and write.c. */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/le.h"
#include "hello.h"
#include "../core/abi.h"

static void on_deadline(struct zcrpc__timer *t, int64_t now);

#define ZCRPC_CLOSE_TIMEOUT_NS (2000LL * 1000000LL)
/* How long a teardown lets a CLOSE still in the send queue go out. */
#define ZCRPC_CLOSE_SEND_WAIT_NS (200LL * 1000000LL)

void zcrpc_conn_handlers_init_sized(zcrpc_conn_handlers *caller, size_t size)
{
	zcrpc_conn_handlers d, *h = &d;

	memset(h, 0, sizeof(*h));
	h->size = sizeof(*h);
	zcrpc__abi_init(caller, size, h, sizeof(*h));
}

zcrpc_status zcrpc__copy_handlers(zcrpc_conn_handlers *dst,
				  const zcrpc_conn_handlers *src)
{
	zcrpc_conn_handlers h;

	zcrpc_conn_handlers_init(&h); /* an older, smaller struct: newer NULL */
	if (ZCRPC__ABI_IN(&h, src, ZCRPC__MIN_CONN_HANDLERS) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	*dst = h;
	return ZCRPC_OK;
}

zcrpc_conn *zcrpc__conn_alloc(zcrpc_worker *w, const zcrpc_conn_handlers *h)
{
	zcrpc_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->base.ops = &zcrpc__rdma_conn_ops;
	c->w = w;
	if (h)
		(void)zcrpc__copy_handlers(&c->h,
					   h); /* checked by the caller */
	c->state = ZCRPC_CONN_CONNECTING;
	c->status = ZCRPC_OK;
	c->deadline.fn = on_deadline;
	zcrpc__list_push_front(&w->conns, &c->link);
	return c;
}

/* The send ring, sized at setup. */
zcrpc_status zcrpc__conn_alloc_queues(zcrpc_conn *c)
{
	c->sq = calloc(c->sq_size, sizeof(*c->sq));
	if (!c->sq) {
		zcrpc__conn_fail(c, ZCRPC_RESOURCE_EXHAUSTED, "out of memory");
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

/* Teardown: the send ring reaped as flushed, writes not posted answered,
 * the connection's credits given back to its shared receive queue. */
void zcrpc__conn_release_queues(zcrpc_conn *c)
{
	zcrpc__sq_flush_all(c);
	zcrpc__write_release_all(c);
	zcrpc__srq_leave(c);
	free(c->sq);
	c->sq = NULL;
}

/* Inline sizes asked for after a refusal, largest first: the known caps
 * (irdma 101, bnxt_re 96) among them, so such devices keep some inline. */
static const uint32_t inline_steps[] = {128, 101, 96, 64, 32, 0};

/* The RC QP on the context's PD, its receives from the device's shared
 * receive queue, both completions on @c's shared CQ, with as much inline
 * data as the provider grants up to the profile's cap: the size that
 * worked last on this device is asked first, and a refusal steps down.
 * Returns 0, or -1 with errno set. */
static int create_qp(zcrpc_conn *c, struct rdma_cm_id *id)
{
	struct zcrpc__ctx_dev *cd = &c->w->ctx->dev[c->dev->idx];
	struct ibv_qp_init_attr attr;
	struct ibv_qp_attr qattr;
	uint32_t ask = atomic_load(&cd->inline_ask);
	size_t i = 0;

	memset(&attr, 0, sizeof(attr));
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = c->sq_size;
	attr.srq = c->dev->srq.srq;
	attr.cap.max_send_sge = 1;
	attr.qp_context = c;
	for (;;) {
		attr.cap.max_inline_data = ask;
		if (rdma_create_qp(id, c->dev->pd, &attr) == 0)
			break;
		if (!ask || errno != EINVAL) /* EINVAL: the size refused */
			return -1;
		while (i < sizeof(inline_steps) / sizeof(inline_steps[0]) &&
		       inline_steps[i] >= ask)
			i++;
		ask = i < sizeof(inline_steps) / sizeof(inline_steps[0])
			      ? inline_steps[i]
			      : 0;
		atomic_store(&cd->inline_ask, ask); /* next QPs start here */
	}
	memset(&qattr, 0, sizeof(qattr));
	if (ibv_query_qp(id->qp, &qattr, IBV_QP_CAP, &attr))
		return -1;
	/* what was granted, never above the profile's cap (a mask's) */
	c->max_inline = attr.cap.max_inline_data < c->dev->prof->inline_cap
				? attr.cap.max_inline_data
				: c->dev->prof->inline_cap;
	c->stats.max_inline = c->max_inline;
	return 0;
}

/* Puts the connection on a CQ of the worker's on its device (cq.c),
 * creates the QP on the context's PD, and promises the first credits from
 * the device's shared receive queue (srq.c). Called before rdma_connect /
 * rdma_accept. On failure the caller fails the connection, which tears it down.
 */
zcrpc_status zcrpc__conn_setup(zcrpc_conn *c, struct rdma_cm_id *id)
{
	zcrpc_worker *w = c->w;
	uint32_t test_cqe = 0;
	zcrpc_status st;
	uint8_t tmo = w->opts.ack_timeout_exp;

	c->id = id;
	id->context = c;
	st = zcrpc__device_get(w, id->verbs, &c->dev);
	if (st != ZCRPC_OK)
		return st;
	if (zcrpc__port_down(w->ctx, c->dev->idx, id->port_num)) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "port %u of %s is down",
				 (unsigned)id->port_num,
				 ibv_get_device_name(id->verbs->device));
		return ZCRPC_UNAVAILABLE;
	}

	if (!c->recv_depth)
		c->recv_depth = w->opts.recv_depth;
	if (!c->sq_depth)
		c->sq_depth = w->opts.send_depth;
	/* As many send-queue slots again for binding and invalidating
	 * memory windows (mw.c): they cost no peer credit. A device without
	 * windows grants by registration, which takes no slot. */
	c->mw.depth = c->dev->prof->mw_type2 ? c->sq_depth : 0;
	/* and one for a fence ahead of a drain (send_queue.c) */
	c->sq_size = c->sq_depth + c->mw.depth + 1;
	c->share_min = c->recv_depth < w->opts.recv_share ? c->recv_depth
							  : w->opts.recv_share;
#ifdef ZCRPC_TESTING
	test_cqe = zcrpc__testing_cq_entries(0); /* an undersized CQ (T19) */
#endif
	if (c->sq_size > c->dev->prof->max_qp_wr) {
		zcrpc__conn_fail(
			c, ZCRPC_INVALID_ARGUMENT,
			"send depth %u needs %u work requests, more than %s "
			"allows (max_qp_wr %u): lower send_depth",
			c->sq_depth, c->sq_size, c->dev->prof->name,
			c->dev->prof->max_qp_wr);
		return ZCRPC_INVALID_ARGUMENT;
	}
	st = zcrpc__conn_alloc_queues(c);
	if (st != ZCRPC_OK)
		return st;
	/* An authenticating server grants only a few until the proof came. */
	st = zcrpc__srq_admit(c,
			      c->recv_initial ? c->recv_initial : c->share_min);
	if (st != ZCRPC_OK)
		return st;
	/* One CQ of the worker's on the device holds both queues in full
	 * (error completions come even for unsignaled work requests). */
	st = zcrpc__cq_attach(c, test_cqe);
	if (st != ZCRPC_OK)
		return st;
	if (create_qp(c, id))
		goto err_errno;
	st = zcrpc__cq_map(c);
	if (st != ZCRPC_OK)
		return st;
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			    &tmo, sizeof(tmo)))
		goto err_errno;
	return ZCRPC_OK;

err_errno:
	st = zcrpc_status_from_errno(errno);
	if (st == ZCRPC_OK || st == ZCRPC_UNKNOWN)
		st = ZCRPC_INTERNAL;
	zcrpc__conn_fail(c, st, "setting up the queue pair: %s",
			 strerror(errno));
	return st;
}

void zcrpc__conn_fill_param(zcrpc_conn *c, struct rdma_conn_param *p,
			    uint8_t *pd_buf, size_t pd_cap, int kind)
{
	struct zcrpc_hello h = {
		.version = ZCRPC_PROTO_VERSION,
		.kind = (uint8_t)kind,
		.features = zcrpc__worker_features(c->w),
		/* the credits granted: fewer while authenticating */
		.recv_depth = c->share,
		.max_msg = c->w->opts.max_msg,
		.max_write = zcrpc__conn_own_piece(c),
	};

	if (c->dev && !c->dev->prof->write_imm)
		h.features |= ZCRPC_FEAT_NO_WIMM;
	zcrpc__auth_fill_hello(c, &h);
	memset(p, 0, sizeof(*p));
	p->private_data = pd_buf;
	p->private_data_len = (uint8_t)zcrpc__hello_encode(&h, pd_buf, pd_cap);
	/* RDMA WRITE needs no RDMA READ credits. */
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = c->w->opts.retry_count;
	p->rnr_retry_count = c->w->opts.rnr_retry_count;
}

#define PEER_CLOSED "the peer closed the connection (orderly close)"
#define PEER_ERROR  "the peer closed the connection reporting an error (%s)"

uint32_t zcrpc__worker_features(const zcrpc_worker *w)
{
	return ZCRPC_FEAT_ALL & ~ZCRPC_TEST_NO_FEATURES(w);
}

void zcrpc__conn_choose_path(zcrpc_conn *c, uint32_t peer_features)
{
	int no_wimm = (peer_features & ZCRPC_FEAT_NO_WIMM) ||
		      (c->dev && !c->dev->prof->write_imm);

	c->features = peer_features & zcrpc__worker_features(c->w);
	c->use_written = no_wimm && (c->features & ZCRPC_FEAT_WRITTEN);
	c->no_write_end = no_wimm && !c->use_written;
}

static void notify(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status status)
{
	if (!c->dead && c->h.on_state)
		c->h.on_state(c, st, status, c->h.arg);
}

static void peer_closed_detail(zcrpc_conn *c)
{
	if (c->peer_close_status == ZCRPC_OK)
		snprintf(c->detail, sizeof(c->detail), "%s", PEER_CLOSED);
	else
		snprintf(c->detail, sizeof(c->detail), PEER_ERROR,
			 zcrpc_status_str(c->peer_close_status));
}

void zcrpc__conn_fail(zcrpc_conn *c, zcrpc_status st, const char *fmt, ...)
{
	va_list ap;
	int was_accepting = c->passive && c->listener;

	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	va_start(ap, fmt);
	vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
	va_end(ap);
	if (c->peer_closed && !c->closing && st == ZCRPC_UNAVAILABLE) {
		/* After the peer's CLOSE, a failed send or receive is its
		 * disconnect racing the DISCONNECTED event. */
		st = c->peer_close_status;
		peer_closed_detail(c);
	}
	if (st == ZCRPC_OK && c->close_status != ZCRPC_OK) {
		/* An orderly close the application made for a reason. */
		st = c->close_status;
		memcpy(c->detail, c->close_detail, sizeof(c->detail));
	}
	c->status = st;
	c->state = ZCRPC_CONN_CLOSED;
	zcrpc__conn_clear_deadline(c);
	c->w->need_reap = 1;
	zcrpc__log(st == ZCRPC_OK ? ZCRPC_LOG_INFO : ZCRPC_LOG_ERROR,
		   "connection %p closed: %s (%s)", (void *)c,
		   zcrpc_status_str(st), c->detail);
	zcrpc__job_abandon(c);
	if (was_accepting) {
		/* Never handed to the application: nobody will destroy it. */
		zcrpc__listener_release(c);
		c->dead = 1;
		return;
	}
	/* Every write and revoke gets its answer before the connection's
	 * last word. */
	zcrpc__conn_fail_writes(c, st == ZCRPC_OK ? ZCRPC_CANCELLED
						  : ZCRPC_UNAVAILABLE);
	zcrpc__mw_fail_all(c);
	notify(c, ZCRPC_CONN_CLOSED, st);
}

void zcrpc__conn_established(zcrpc_conn *c)
{
	zcrpc_listener *l = c->listener;

	/* With a key, the server waits for the proof first (auth.c). Credits
	 * were set from the peer's hello (and its authentication reply). */
	if (c->passive && zcrpc__auth_server_hold(c))
		return;
	c->state = ZCRPC_CONN_ESTABLISHED;
	zcrpc__conn_clear_deadline(c);
	c->last_active_ns = zcrpc__now_ns();
	zcrpc__worker_keepalive_start(c->w);
	c->stats.peer_recv_depth = c->peer_recv_depth;
	c->stats.peer_max_msg = c->peer_max_msg;
	if (c->passive) {
		zcrpc__listener_release(c);
		if (l && l->opts.on_accept)
			l->opts.on_accept(l, c, l->opts.arg);
	} else {
		notify(c, ZCRPC_CONN_ESTABLISHED, ZCRPC_OK);
	}
}

/* iWARP (rdma_connect(3)): the active side sends the first message; when
 * the application has nothing to send yet, a CREDIT update is it. */
static void send_first(zcrpc_conn *c)
{
	if (c->stats.msgs_sent || c->sq_tail)
		return; /* on_state sent something already */
	if (zcrpc__conn_send_ctrl(c, ZCRPC_MSG_CREDIT, NULL, 0, 0) != ZCRPC_OK)
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
				 "cannot send the first message (iWARP)");
}

/* REJECTED: a REJECT hello's status, and its reason when the server sent
 * one (docs/protocol.md §1); a reject without a hello is a refusal. */
static void on_rejected(zcrpc_conn *c, int status, const void *pdata,
			size_t plen)
{
	struct zcrpc_hello h;

	if (plen && zcrpc__hello_decode(pdata, plen, &h, NULL, 0) == ZCRPC_OK &&
	    h.kind == ZCRPC_HELLO_REJECT && h.status != ZCRPC_OK &&
	    h.status < ZCRPC_STATUS_COUNT) {
		zcrpc__conn_fail(c, (zcrpc_status)h.status,
				 "server rejected the connection: %s%s%s",
				 zcrpc_status_str((zcrpc_status)h.status),
				 h.reason[0] ? ": " : "", h.reason);
		return;
	}
	zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
			 "connection refused (reject reason %d: %s)", status,
			 status == 8 ? "nobody listens on that port"
				     : "rejected by the peer");
}

/* DISCONNECTED: who closed, and how (docs/protocol.md §5). */
static void on_disconnected(zcrpc_conn *c)
{
	if (c->closing)
		zcrpc__conn_fail(c, ZCRPC_OK, "closed");
	else if (c->peer_closed && c->peer_close_status == ZCRPC_OK)
		zcrpc__conn_fail(c, ZCRPC_OK, "%s", PEER_CLOSED);
	else if (c->peer_closed) /* the status the peer closed for, named */
		zcrpc__conn_fail(c, c->peer_close_status, PEER_ERROR,
				 zcrpc_status_str(c->peer_close_status));
	else if (c->features & ZCRPC_FEAT_CLOSE)
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
				 "peer disconnected without closing (its process died or it lost the connection)");
	else
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
				 "peer closed the connection (it sends no close message: a crash looks the same)");
}

void zcrpc__conn_on_close_msg(zcrpc_conn *c, const uint8_t *payload)
{
	c->peer_closed = 1;
	c->peer_close_status = (zcrpc_status)zcrpc__get_le32(payload);
}

/* Sends CLOSE (docs/protocol.md §5) when both sides announced
 * ZCRPC_FEAT_CLOSE and a credit and ring room are there; without it the
 * peer reads the disconnect as a loss, as from a peer without the feature. */
static void send_close(zcrpc_conn *c)
{
	uint8_t msg[ZCRPC_CLOSE_MSG_LEN] = {0}; /* reserved word 0 */
	uint64_t seq = c->sq_tail;

	/* OK for an application's close; the reason's status when this side
	 * closed for one (a protocol error: zcrpc__conn_close_for). */
	zcrpc__put_le32(msg, (uint32_t)c->close_status);

	if (!(c->features & ZCRPC_FEAT_CLOSE) || c->close_sent ||
	    c->state != ZCRPC_CONN_ESTABLISHED || ZCRPC_CONN_FROZEN(c))
		return;
	if (zcrpc__conn_send_ctrl(c, ZCRPC_MSG_CLOSE, msg, sizeof(msg), 0) !=
	    ZCRPC_OK)
		return;
	c->close_sent = 1;
	c->close_seq = seq;
}

/* The peer disconnected. What it sent before its DREQ is in the CQ by now
 * (its close waited for its sends to complete, docs/protocol.md §5), but a
 * busy worker takes completions in bounded shares and reads CM events
 * between them: deliver the rest before the connection fails. */
static void drain_before_disconnect(zcrpc_conn *c)
{
	int i;

	for (i = 0; i < 1024 && c->cq && !c->torn_down &&
		    c->state != ZCRPC_CONN_CLOSED;
	     i++)
		if (zcrpc__conn_poll(c) == 0)
			break;
}

void zcrpc__conn_on_cm_event(zcrpc_conn *c, enum rdma_cm_event_type type,
			     int status, const void *pdata, size_t plen)
{
	struct zcrpc_hello h;
	char why[128];

	if (ZCRPC_CONN_FROZEN(c))
		return; /* frozen: not even a DREP */
	switch (type) {
	case RDMA_CM_EVENT_ESTABLISHED:
		if (c->state != ZCRPC_CONN_CONNECTING || c->auth_phase)
			break;
		if (!c->passive) {
			zcrpc_status st = zcrpc__hello_decode(pdata, plen, &h, why,
							      sizeof(why));
			if (st == ZCRPC_OK && h.kind != ZCRPC_HELLO_ACCEPT) {
				st = ZCRPC_INTERNAL;
				snprintf(why, sizeof(why), "reply is not an accept");
			}
			if (st != ZCRPC_OK) {
				zcrpc__conn_fail(c, ZCRPC_INTERNAL,
						 "bad handshake from server: %s", why);
				break;
			}
			c->peer_recv_depth = h.recv_depth;
			c->peer_max_msg = h.max_msg;
			c->peer_max_write = h.max_write;
			c->credits = h.recv_depth;
			zcrpc__conn_choose_path(c, h.features);
			if (zcrpc__auth_client_start(c, &h))
				break; /* proving the key (or refused) */
		} else if (c->await_first) {
			break; /* ESTABLISHED with the client's first message */
		}
		zcrpc__conn_established(c);
		if (!c->passive && c->dev->prof->active_first &&
		    c->state == ZCRPC_CONN_ESTABLISHED && !c->closing)
			send_first(c);
		break;
	case RDMA_CM_EVENT_REJECTED:
		c->disconnected = 1;
		on_rejected(c, status, pdata, plen);
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		c->disconnected = 1;
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "%s (status %d)",
				 rdma_event_str(type), status);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (c->state == ZCRPC_CONN_CONNECTING &&
		    c->auth_phase == ZCRPC_AUTH_CLIENT_WAIT)
			zcrpc__auth_peer_closed(c); /* the verdict first */
		else
			drain_before_disconnect(c);
		if (!c->disconnected) {
			/* librdmacm does not move the QP to error on
			 * DISCONNECTED: do it, so posted work flushes. */
			rdma_disconnect(c->id);
			c->disconnected = 1;
		}
		on_disconnected(c);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		/* Everything on the device goes, this connection first. */
		zcrpc__device_removed(c->w, c->id ? c->id->verbs : NULL);
		break;
	default: /* TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do */
		break;
	}
}

/* The connection's deadline timer: connecting, the handshake or the close
 * took too long. */
static void on_deadline(struct zcrpc__timer *t, int64_t now)
{
	zcrpc_conn *c = zcrpc__container_of(t, zcrpc_conn, deadline);

	(void)now;
	if (c->closing && c->drain_close) {
		c->drain_close = 0; /* the teardown disconnects */
		zcrpc__conn_fail(c, ZCRPC_OK, "closed (send queue did not drain)");
	} else if (c->closing) {
		c->disconnected = 1; /* rdma_disconnect was called */
		zcrpc__conn_fail(c, ZCRPC_OK, "closed (peer did not confirm)");
	} else if (c->state == ZCRPC_CONN_CONNECTING && c->passive) {
		c->w->handshake_timeouts++;
		zcrpc__conn_fail(c, ZCRPC_DEADLINE_EXCEEDED,
				 "handshake deadline of %d ms exceeded%s",
				 c->timeout_ms,
				 c->auth_phase ? " (no key proof)" : "");
	} else if (c->state == ZCRPC_CONN_CONNECTING && c->migrated &&
		   !c->auth_phase && c->connect_sent_ns) {
		/* The request went out and nothing came back: say when, and
		 * how much of the deadline the resolution took, so that a
		 * slow setup thread and a silent peer read differently. */
		int64_t now_ns = zcrpc__now_ns();

		zcrpc__conn_fail(
			c, ZCRPC_DEADLINE_EXCEEDED,
			"connect deadline of %d ms exceeded (no answer to the "
			"connect request sent %lld ms before; address and route "
			"resolved in %lld ms)",
			c->timeout_ms,
			(long long)((now_ns - c->connect_sent_ns) / 1000000),
			(long long)((c->connect_sent_ns - c->connect_start_ns) /
				    1000000));
	} else if (c->state == ZCRPC_CONN_CONNECTING) {
		/* Say which step was still pending: resolution (the setup
		 * thread), the connection's setup, or the key proof. */
		zcrpc__conn_fail(c, ZCRPC_DEADLINE_EXCEEDED,
				 "connect deadline of %d ms exceeded (%s)",
				 c->timeout_ms,
				 c->job ? "resolving the address and route"
				 : c->auth_phase ? "proving the key"
						 : "setting up the connection");
	}
}

void zcrpc__conn_set_deadline(zcrpc_conn *c, int64_t due_ns)
{
	zcrpc__timer_stop(c->w, &c->deadline);
	zcrpc__timer_start(c->w, &c->deadline, due_ns);
}

void zcrpc__conn_clear_deadline(zcrpc_conn *c)
{
	zcrpc__timer_stop(c->w, &c->deadline);
}

void zcrpc_conn_close(zcrpc_conn *c)
{
	if (!c || c->state == ZCRPC_CONN_CLOSED || c->closing ||
	    ZCRPC_CONN_FROZEN(c))
		return;
	if (c->state == ZCRPC_CONN_CONNECTING) {
		zcrpc__conn_fail(c, ZCRPC_CANCELLED,
				 "closed by the application while connecting");
		return;
	}
	c->closing = 1;
	zcrpc__conn_fail_writes(c, ZCRPC_CANCELLED);
	zcrpc__mw_fail_all(c);
	zcrpc__conn_set_deadline(c, zcrpc__now_ns() + ZCRPC_CLOSE_TIMEOUT_NS);
	send_close(c); /* the last message; it drains with the rest */
	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	if (c->sq_head != c->sq_tail) {
		/* What was posted goes out first (rdma_disconnect would flush
		 * it): a signaled WR (the CLOSE, or a probe) completes only
		 * after everything before it did. */
		c->drain_close = 1;
		if (!c->ka_outstanding && !c->close_sent)
			zcrpc__conn_keepalive(c);
		return;
	}
	zcrpc__conn_close_drained(c);
}

void zcrpc__conn_close_error(zcrpc_conn *c, zcrpc_status st, const char *fmt,
			     ...)
{
	va_list ap;

	if (!c || c->state == ZCRPC_CONN_CLOSED)
		return;
	if (c->close_status == ZCRPC_OK) { /* the first reason counts */
		c->close_status = st;
		va_start(ap, fmt);
		vsnprintf(c->close_detail, sizeof(c->close_detail), fmt, ap);
		va_end(ap);
		zcrpc__log(ZCRPC_LOG_WARN, "connection %p closing: %s (%s)",
			   (void *)c, zcrpc_status_str(st), c->close_detail);
	}
	zcrpc_conn_close(c);
}

/* The orderly close, once the send queue is empty: rdma_disconnect moves
 * the QP to error (receives flush) and sends the DREQ; DISCONNECTED (or
 * the close deadline) finishes it. */
void zcrpc__conn_close_drained(zcrpc_conn *c)
{
	c->drain_close = 0;
	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	if (rdma_disconnect(c->id)) {
		c->disconnected = 1;
		zcrpc__conn_fail(c, ZCRPC_OK, "closed");
		return;
	}
	c->disconnected = 1;
}

void zcrpc_conn_destroy(zcrpc_conn *c)
{
	if (!c || c->dead)
		return;
	c->dead = 1; /* no callback for it from now on */
	if (c->state == ZCRPC_CONN_ESTABLISHED && !c->closing)
		send_close(c); /* the teardown lets it go out */
	if (c->state != ZCRPC_CONN_CLOSED) {
		c->status = ZCRPC_CANCELLED;
		c->state = ZCRPC_CONN_CLOSED;
		zcrpc__job_abandon(c);
	}
	c->w->need_reap = 1;
	if (!c->w->in_progress) { /* outside callbacks: release now */
		zcrpc__conn_teardown(c);
		zcrpc__conn_free(c);
	}
}

/* Releases the verbs resources and gives every slot back to the pool,
 * exactly once: what the send ring and the receive positions still hold.
 * The id goes last: rdma_destroy_id waits for events already read, which
 * are always acknowledged at once. */
/* The QP is in error: collects the flush completions of every send work
 * request still posted, for at most ZCRPC_FLUSH_WAIT_NS, and counts them
 * (stats flushed_wcs; unflushed_wrs for any that did not come). Receives
 * do not flush: they belong to the shared receive queue, and a receive
 * this connection consumed but nobody polled yet is recycled here. The
 * ring is released right after, as before. */
#define ZCRPC_FLUSH_WAIT_NS (100LL * 1000000LL)

/* A receive of the shared queue consumed for @c, never to be delivered. */
static void recycle_wc(zcrpc_conn *c, const struct ibv_wc *wc)
{
	c->dev->srq.posted--;
	zcrpc__srq_recycle(c->w, c->dev, NULL,
			   (uint32_t)(wc->wr_id & ~ZCRPC_WR_RECV_BIT), 0);
}

/* Before and after the QP is destroyed: what of it is in the shared CQ is
 * taken (others' completions held for the next turn, cq.c), so no receive
 * of the shared queue is lost with it and none of its completions is left
 * for a later QP that gets the same number. */
static void drain_own(zcrpc_conn *c)
{
	struct ibv_wc wc[ZCRPC_POLL_BATCH];
	int i, n;

	while ((n = zcrpc__cq_take(c, wc, ZCRPC_POLL_BATCH)) > 0)
		for (i = 0; i < n; i++)
			if (wc[i].wr_id & ZCRPC_WR_RECV_BIT)
				recycle_wc(c, &wc[i]);
}

static void collect_flushes(zcrpc_conn *c)
{
	uint64_t posted = c->sq_posted - c->sq_head;
	/* The last signaled WR posted: its completion (success or flush)
	 * says every WR before it is done, RC completing in order. */
	uint64_t seen = 0, last = c->sq_sig_next - 1;
	int64_t until = zcrpc__now_ns() + ZCRPC_FLUSH_WAIT_NS;
	struct ibv_qp_attr attr;
	struct ibv_wc wc[ZCRPC_POLL_BATCH];
	int i, n, done = posted == 0 || c->sq_sig_next <= c->sq_head;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE))
		return; /* nothing will flush: counted as unflushed below */
	/* An unsignaled WR that completed before the error makes no
	 * completion (rxe, CI: a dead peer's 8 unsignaled sends), so the wait
	 * is for the last signaled one. Unsignaled WRs after it either
	 * completed or flush behind it; the drain after rdma_destroy_qp takes
	 * those flushes, and nothing touches their memory after the QP is
	 * gone. */
	while (!done && zcrpc__now_ns() < until) {
		n = zcrpc__cq_take(c, wc, ZCRPC_POLL_BATCH);
		if (n < 0)
			break;
		for (i = 0; i < n; i++) {
			if (wc[i].wr_id & ZCRPC_WR_RECV_BIT) {
				recycle_wc(c, &wc[i]);
				continue;
			}
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
				c->stats.flushed_wcs++;
			seen++;
			done |= wc[i].wr_id == last;
		}
		if (!n)
			sched_yield();
	}
	if (!done && seen < posted)
		c->stats.unflushed_wrs += posted - seen;
}

/* Our CLOSE is still in the send queue and rdma_disconnect would flush
 * it: lets it reach the peer first, for a bounded time. The connection is
 * CLOSED, so polling runs no callback and reposts nothing. */
static void wait_close_sent(zcrpc_conn *c)
{
	int64_t until = zcrpc__now_ns() + ZCRPC_CLOSE_SEND_WAIT_NS;
	struct ibv_wc wc[ZCRPC_POLL_BATCH];
	int i, n;

	while (c->sq_head <= c->close_seq && c->cq && !c->torn_down &&
	       zcrpc__now_ns() < until) {
		n = zcrpc__cq_take(c, wc, ZCRPC_POLL_BATCH);
		for (i = 0; i < n; i++)
			zcrpc__conn_on_wc(c, &wc[i]);
		if (n <= 0)
			sched_yield();
	}
}

void zcrpc__conn_teardown(zcrpc_conn *c)
{
	if (c->torn_down)
		return;
	if (c->close_sent && !c->disconnected && !ZCRPC_CONN_FROZEN(c) &&
	    !c->dev_gone && c->id && c->id->qp)
		wait_close_sent(c);
	c->torn_down = 1;
	zcrpc__limits_release(c); /* its listener may take another */
	if (ZCRPC_CONN_FROZEN(c))
		return; /* leaked on purpose: destroying the id sends a DREQ */
	if (c->id && c->id->qp && !c->disconnected && c->migrated)
		rdma_disconnect(c->id); /* QP to error, DREQ to the peer */
	c->disconnected = 1;
	if (c->id && c->id->qp && c->cq && !c->dev_gone)
		collect_flushes(c);
	zcrpc__mw_dealloc(c); /* windows go before their QP */
	if (c->cq && !c->dev_gone)
		drain_own(c);
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->cq && !c->dev_gone)
		drain_own(c);
	zcrpc__cq_detach(c);
	zcrpc__conn_release_queues(c);
	zcrpc__mw_free(c);
	if (c->id) {
		rdma_destroy_ep(c->id);
		c->id = NULL;
	}
}

void zcrpc__conn_free(zcrpc_conn *c)
{
	zcrpc_worker *w = c->w;

	zcrpc__worker_account_gone(w, c);
	zcrpc__limits_release(c); /* freed without a teardown */
	zcrpc__cq_detach(c);	  /* a frozen one (its QP leaked) */
	zcrpc__timer_stop(w, &c->deadline);
	zcrpc__auth_free(c);
	zcrpc__list_remove(&c->link);
	free(c);
}

zcrpc_status zcrpc_conn_set_handlers(zcrpc_conn *c,
				     const zcrpc_conn_handlers *h)
{
	if (!c || !h)
		return ZCRPC_INVALID_ARGUMENT;
	return zcrpc__copy_handlers(&c->h, h);
}

zcrpc_conn_state zcrpc_conn_get_state(const zcrpc_conn *c)
{
	return c ? c->state : ZCRPC_CONN_CLOSED;
}

zcrpc_status zcrpc_conn_get_status(const zcrpc_conn *c)
{
	return c ? c->status : ZCRPC_INVALID_ARGUMENT;
}

const char *zcrpc_conn_get_error(const zcrpc_conn *c)
{
	return c ? c->detail : "";
}

void zcrpc_conn_get_stats(const zcrpc_conn *c, zcrpc_conn_stats *out,
			  size_t out_size)
{
	zcrpc_conn_stats s;

	if (!c)
		return;
	s = c->stats;
	s.recv_posted = c->out + c->owed; /* its receives of the shared queue */
	s.recv_share = c->share;
	s.credits = c->credits;
	ZCRPC__ABI_OUT(out, out_size, &s);
}

void zcrpc_conn_get_info(const zcrpc_conn *c, zcrpc_conn_info *out,
			 size_t out_size)
{
	zcrpc_conn_info i;
	const struct zcrpc__dev_profile *p;

	if (!c || !out)
		return;
	memset(&i, 0, sizeof(i));
	if (c->dev && (p = c->dev->prof) != NULL) {
		snprintf(i.device, sizeof(i.device), "%s", p->name);
		snprintf(i.provider, sizeof(i.provider), "%s",
			 zcrpc__provider_name(p->provider));
		i.port = c->id ? c->id->port_num : 1;
		i.transport = p->transport == IBV_TRANSPORT_IWARP
				      ? ZCRPC_TRANSPORT_IWARP
			      : p->link_layer == IBV_LINK_LAYER_ETHERNET
				      ? ZCRPC_TRANSPORT_ROCE
				      : ZCRPC_TRANSPORT_IB;
		i.grant_path = p->mw_type2 ? ZCRPC_GRANT_WINDOW
					   : ZCRPC_GRANT_REGISTRATION;
		i.write_end = c->no_write_end ? ZCRPC_WRITE_END_NONE
			      : c->use_written ? ZCRPC_WRITE_END_MSG
					       : ZCRPC_WRITE_END_IMM;
		i.max_inline = c->max_inline;
		i.active_first = p->active_first;
		if (c->id && c->id->qp && !c->dev_gone &&
		    p->transport != IBV_TRANSPORT_IWARP) {
			struct ibv_qp_attr a;
			struct ibv_qp_init_attr ia;

			if (ibv_query_qp(c->id->qp, &a, IBV_QP_AV, &ia) == 0) {
				i.traffic_class = a.ah_attr.grh.traffic_class;
				i.service_level = a.ah_attr.sl;
				i.gid_index = a.ah_attr.grh.sgid_index;
			}
		}
	}
	ZCRPC__ABI_OUT(out, out_size, &i);
}
