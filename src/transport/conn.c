/* zcrpc — a connection: its QP, CQ and registered slots; the send/recv path
 * with credits; state changes from CM events and completions; teardown. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/le.h"
#include "hello.h"

#define ZCRPC_INLINE_WANTED 220
#define ZCRPC_CLOSE_TIMEOUT_NS (2000LL * 1000000LL)

zcrpc_conn *zcrpc__conn_alloc(zcrpc_worker *w, const zcrpc_conn_handlers *h)
{
	zcrpc_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->w = w;
	if (h)
		c->h = *h;
	c->state = ZCRPC_CONN_CONNECTING;
	c->status = ZCRPC_OK;
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	return c;
}

static uint8_t *slot_ptr(zcrpc_conn *c, uint32_t idx)
{
	return c->buf + (size_t)idx * c->slot_size;
}

static int post_recv(zcrpc_conn *c, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)slot_ptr(c, idx),
		.length = c->slot_size,
		.lkey = c->mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = ZCRPC_WR_ID(ZCRPC_WR_RECV, idx),
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad;

	return ibv_post_recv(c->id->qp, &wr, &bad);
}

/* Creates the CQ (on the device's completion channel), the QP on the
 * worker's PD, registers the slots and posts every receive. Called before
 * rdma_connect / rdma_accept. On failure the caller tears down. */
zcrpc_status zcrpc__conn_setup(zcrpc_conn *c, struct rdma_cm_id *id)
{
	zcrpc_worker *w = c->w;
	struct ibv_qp_init_attr attr;
	struct ibv_qp_attr qattr;
	size_t bytes;
	uint32_t i, cqe;
	zcrpc_status st;
	uint8_t tmo = w->opts.ack_timeout;

	c->id = id;
	id->context = c;
	st = zcrpc__device_get(w, id->verbs, &c->dev);
	if (st != ZCRPC_OK)
		return st;

	c->recv_depth = w->opts.recv_depth;
	c->send_depth = w->opts.send_depth;
	c->slot_size = (ZCRPC_MSG_HDR_LEN + w->opts.max_msg + 63) & ~63u;
	cqe = c->recv_depth + c->send_depth;
	if ((int)cqe > c->dev->attr.max_cqe ||
	    (int)c->recv_depth > c->dev->attr.max_qp_wr ||
	    (int)c->send_depth > c->dev->attr.max_qp_wr) {
		zcrpc__conn_fail(c, ZCRPC_INVALID_ARGUMENT,
				 "queue depths exceed the device (max_cqe %d, max_qp_wr %d)",
				 c->dev->attr.max_cqe, c->dev->attr.max_qp_wr);
		return ZCRPC_INVALID_ARGUMENT;
	}
	c->cq = ibv_create_cq(id->verbs, (int)cqe, c, c->dev->comp_ch, 0);
	if (!c->cq)
		goto err_errno;

	memset(&attr, 0, sizeof(attr));
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = c->send_depth;
	attr.cap.max_recv_wr = c->recv_depth;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = ZCRPC_INLINE_WANTED;
	attr.qp_context = c;
	if (rdma_create_qp(id, c->dev->pd, &attr)) {
		attr.cap.max_inline_data = 0; /* provider may refuse inline */
		if (rdma_create_qp(id, c->dev->pd, &attr))
			goto err_errno;
	}
	memset(&qattr, 0, sizeof(qattr));
	if (ibv_query_qp(id->qp, &qattr, IBV_QP_CAP, &attr))
		goto err_errno;
	c->max_inline = attr.cap.max_inline_data;
	c->stats.max_inline = c->max_inline;

	bytes = (size_t)(c->recv_depth + c->send_depth) * c->slot_size;
	if (posix_memalign((void **)&c->buf, 4096, bytes))
		return ZCRPC_RESOURCE_EXHAUSTED;
	c->mr = ibv_reg_mr(c->dev->pd, c->buf, bytes, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr) {
		zcrpc__conn_fail(c, ZCRPC_RESOURCE_EXHAUSTED,
				 "ibv_reg_mr of %zu bytes: %s (check `ulimit -l`)",
				 bytes, strerror(errno));
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	c->free_send = malloc(sizeof(uint32_t) * c->send_depth);
	if (!c->free_send)
		return ZCRPC_RESOURCE_EXHAUSTED;
	for (i = 0; i < c->send_depth; i++)
		c->free_send[i] = c->recv_depth + c->send_depth - 1 - i;
	c->n_free_send = c->send_depth;
	for (i = 0; i < c->recv_depth; i++)
		if (post_recv(c, i))
			goto err_errno;
	if (ibv_req_notify_cq(c->cq, 0))
		goto err_errno;
	c->cq_armed = 1;
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
		.features = ZCRPC_FEAT_ALL,
		.recv_depth = c->recv_depth,
		.max_msg = c->w->opts.max_msg,
	};

	memset(p, 0, sizeof(*p));
	p->private_data = pd_buf;
	p->private_data_len = (uint8_t)zcrpc__hello_encode(&h, pd_buf, pd_cap);
	/* The bulk path (RDMA WRITE) needs no RDMA READ credits yet. */
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = c->w->opts.retry_count;
	p->rnr_retry_count = c->w->opts.rnr_retry_count;
}

static void notify(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status status)
{
	if (!c->dead && c->h.on_state)
		c->h.on_state(c, st, status, c->h.arg);
}

void zcrpc__conn_fail(zcrpc_conn *c, zcrpc_status st, const char *fmt, ...)
{
	va_list ap;
	int was_accepting = c->passive && c->listener;

	if (c->state == ZCRPC_CONN_CLOSED)
		return;
	c->status = st;
	va_start(ap, fmt);
	vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
	va_end(ap);
	c->state = ZCRPC_CONN_CLOSED;
	c->deadline_ns = 0;
	c->w->need_reap = 1;
	zcrpc__job_abandon(c);
	if (was_accepting) {
		/* Never handed to the application: nobody will destroy it. */
		c->listener = NULL;
		c->dead = 1;
		return;
	}
	notify(c, ZCRPC_CONN_CLOSED, st);
}

void zcrpc__conn_established(zcrpc_conn *c)
{
	zcrpc_listener *l = c->listener;

	c->state = ZCRPC_CONN_ESTABLISHED;
	c->deadline_ns = 0;
	c->credits = c->peer_recv_depth;
	c->stats.peer_recv_depth = c->peer_recv_depth;
	c->stats.peer_max_msg = c->peer_max_msg;
	if (c->passive) {
		c->listener = NULL;
		if (l && l->opts.on_accept)
			l->opts.on_accept(l, c, l->opts.arg);
	} else {
		notify(c, ZCRPC_CONN_ESTABLISHED, ZCRPC_OK);
	}
}

static void on_rejected(zcrpc_conn *c, int status, const void *pdata,
			size_t plen)
{
	struct zcrpc_hello h;

	if (plen && zcrpc__hello_decode(pdata, plen, &h, NULL, 0) == ZCRPC_OK &&
	    h.kind == ZCRPC_HELLO_REJECT && h.status != ZCRPC_OK &&
	    h.status < ZCRPC_STATUS_COUNT) {
		zcrpc__conn_fail(c, (zcrpc_status)h.status,
				 "server rejected the connection: %s",
				 zcrpc_status_str((zcrpc_status)h.status));
		return;
	}
	zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
			 "connection refused (reject reason %d: %s)", status,
			 status == 8 ? "nobody listens on that port"
				     : "rejected by the peer");
}

void zcrpc__conn_on_cm_event(zcrpc_conn *c, enum rdma_cm_event_type type,
			     int status, const void *pdata, size_t plen)
{
	struct zcrpc_hello h;
	char why[128];

	switch (type) {
	case RDMA_CM_EVENT_ESTABLISHED:
		if (c->state != ZCRPC_CONN_CONNECTING)
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
			c->features = h.features & ZCRPC_FEAT_ALL;
		}
		zcrpc__conn_established(c);
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
		if (!c->disconnected) {
			/* librdmacm does not move the QP to error on
			 * DISCONNECTED: do it, so posted work flushes. */
			rdma_disconnect(c->id);
			c->disconnected = 1;
		}
		if (c->closing)
			zcrpc__conn_fail(c, ZCRPC_OK, "closed");
		else
			zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE,
					 "peer closed the connection");
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "RDMA device removed");
		break;
	default: /* TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do */
		break;
	}
}

void zcrpc__conn_check_deadline(zcrpc_conn *c, int64_t now)
{
	if (!c->deadline_ns || now < c->deadline_ns)
		return;
	c->deadline_ns = 0;
	if (c->closing) {
		c->disconnected = 1; /* rdma_disconnect was called */
		zcrpc__conn_fail(c, ZCRPC_OK, "closed (peer did not confirm)");
	} else if (c->state == ZCRPC_CONN_CONNECTING) {
		zcrpc__conn_fail(c, ZCRPC_DEADLINE_EXCEEDED,
				 "connect deadline of %d ms exceeded",
				 c->timeout_ms);
	}
}

/* Posts one message (header + @len payload bytes from @payload) using a
 * send slot and one credit. The caller checked both are available. */
static int post_msg(zcrpc_conn *c, uint8_t type, const void *payload,
		    size_t len)
{
	uint32_t idx = c->free_send[--c->n_free_send];
	uint8_t *p = slot_ptr(c, idx);
	uint32_t give = c->owed > 0xffff ? 0xffff : c->owed;
	struct ibv_sge sge = {
		.addr = (uintptr_t)p,
		.length = (uint32_t)(ZCRPC_MSG_HDR_LEN + len),
		.lkey = c->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = ZCRPC_WR_ID(ZCRPC_WR_SEND, idx),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;
	int rc;

	p[0] = type;
	p[1] = 0;
	zcrpc__put_le16(p + 2, (uint16_t)give);
	zcrpc__put_le32(p + 4, (uint32_t)len);
	if (len)
		memcpy(p + ZCRPC_MSG_HDR_LEN, payload, len);
	if (sge.length <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	rc = ibv_post_send(c->id->qp, &wr, &bad);
	if (rc) {
		c->free_send[c->n_free_send++] = idx;
		return rc;
	}
	c->credits--;
	c->owed -= give;
	return 0;
}

/* Sends an explicit credit update when enough receives were reposted and no
 * data message carried them back. Uses the credit kept in reserve. */
static void maybe_send_credits(zcrpc_conn *c)
{
	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return;
	if (c->owed < c->recv_depth / 2 || c->credits < 1 || !c->n_free_send)
		return;
	if (post_msg(c, ZCRPC_MSG_CREDIT, NULL, 0) == 0)
		c->stats.credit_updates_sent++;
}

int zcrpc_conn_can_send(const zcrpc_conn *c)
{
	return c && c->state == ZCRPC_CONN_ESTABLISHED && !c->closing &&
	       c->credits >= 2 && c->n_free_send > 0;
}

zcrpc_status zcrpc_conn_send(zcrpc_conn *c, const void *data, size_t len)
{
	int rc;

	if (!c || (!data && len))
		return ZCRPC_INVALID_ARGUMENT;
	if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing)
		return ZCRPC_FAILED_PRECONDITION;
	if (len > c->peer_max_msg)
		return ZCRPC_INVALID_ARGUMENT;
	if (c->credits < 2) { /* one credit is kept for credit updates */
		c->stats.credit_stalls++;
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (!c->n_free_send)
		return ZCRPC_RESOURCE_EXHAUSTED;
	rc = post_msg(c, ZCRPC_MSG_DATA, data, len);
	if (rc) {
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "ibv_post_send: %s",
				 strerror(rc));
		return ZCRPC_UNAVAILABLE;
	}
	c->stats.msgs_sent++;
	c->stats.bytes_sent += len;
	return ZCRPC_OK;
}

static void on_recv(zcrpc_conn *c, uint32_t idx, uint32_t byte_len)
{
	const uint8_t *p = slot_ptr(c, idx);
	uint32_t len;

	if (byte_len < ZCRPC_MSG_HDR_LEN) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: %u-byte message", byte_len);
		return;
	}
	len = zcrpc__get_le32(p + 4);
	if (len != byte_len - ZCRPC_MSG_HDR_LEN ||
	    len > c->w->opts.max_msg || p[1] != 0 ||
	    (p[0] != ZCRPC_MSG_DATA && p[0] != ZCRPC_MSG_CREDIT) ||
	    (p[0] == ZCRPC_MSG_CREDIT && len != 0)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: type %u flags %u length %u in a %u-byte message",
				 p[0], p[1], len, byte_len);
		return;
	}
	c->credits += zcrpc__get_le16(p + 2);
	if (c->credits > c->peer_recv_depth) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL,
				 "protocol violation: peer returned more credits than it granted");
		return;
	}
	if (p[0] == ZCRPC_MSG_DATA) {
		c->stats.msgs_recv++;
		c->stats.bytes_recv += len;
		if (c->h.on_recv && !c->dead)
			c->h.on_recv(c, p + ZCRPC_MSG_HDR_LEN, len, c->h.arg);
	}
	if (c->state == ZCRPC_CONN_CLOSED || c->closing)
		return;
	if (post_recv(c, idx)) {
		zcrpc__conn_fail(c, ZCRPC_INTERNAL, "ibv_post_recv failed");
		return;
	}
	c->owed++;
}

static void on_wc(zcrpc_conn *c, const struct ibv_wc *wc)
{
	uint64_t kind = ZCRPC_WR_KIND(wc->wr_id);
	uint32_t idx = ZCRPC_WR_IDX(wc->wr_id);

	if (kind == ZCRPC_WR_SEND && idx >= c->recv_depth &&
	    idx < c->recv_depth + c->send_depth)
		c->free_send[c->n_free_send++] = idx;
	if (wc->status != IBV_WC_SUCCESS) {
		if (c->state == ZCRPC_CONN_CLOSED || c->closing)
			return; /* flushes after a close are expected */
		zcrpc__conn_fail(c, ZCRPC_UNAVAILABLE, "%s completion: %s",
				 kind == ZCRPC_WR_SEND ? "send" : "receive",
				 ibv_wc_status_str(wc->status));
		return;
	}
	if (kind == ZCRPC_WR_RECV && c->state == ZCRPC_CONN_CONNECTING &&
	    c->passive) {
		/* Data may arrive before ESTABLISHED on the passive side
		 * (rxe raises no COMM_EST): the client only sends once it
		 * is established, so we are too. */
		zcrpc__conn_established(c);
	}
	if (kind == ZCRPC_WR_RECV && idx < c->recv_depth &&
	    c->state == ZCRPC_CONN_ESTABLISHED)
		on_recv(c, idx, wc->byte_len);
}

int zcrpc__conn_poll(zcrpc_conn *c)
{
	struct ibv_wc wc[ZCRPC_POLL_BATCH];
	int n, i, total = 0;

	if (c->nstash) { /* completions taken by zcrpc__conn_arm() */
		n = c->nstash;
		memcpy(wc, c->stash, sizeof(wc[0]) * (size_t)n);
		c->nstash = 0;
		for (i = 0; i < n && !c->torn_down; i++)
			on_wc(c, &wc[i]);
		total += n;
	}
	do {
		n = ibv_poll_cq(c->cq, ZCRPC_POLL_BATCH, wc);
		for (i = 0; i < n && !c->torn_down; i++)
			on_wc(c, &wc[i]);
		if (n > 0)
			total += n;
	} while (n == ZCRPC_POLL_BATCH && !c->torn_down);
	if (total)
		maybe_send_credits(c);
	return total;
}

int zcrpc__conn_arm(zcrpc_conn *c)
{
	if (c->cq_armed)
		return c->nstash > 0;
	if (ibv_req_notify_cq(c->cq, 0))
		return 0;
	c->cq_armed = 1;
	/* A completion may have arrived between the last poll and arming; it
	 * raises no event. Keep it for the next poll: arm runs no callback. */
	if (c->nstash < ZCRPC_POLL_BATCH) {
		int n = ibv_poll_cq(c->cq, ZCRPC_POLL_BATCH - c->nstash,
				    c->stash + c->nstash);
		if (n > 0)
			c->nstash += n;
	}
	return c->nstash > 0;
}

void zcrpc_conn_close(zcrpc_conn *c)
{
	if (!c || c->state == ZCRPC_CONN_CLOSED || c->closing)
		return;
	if (c->state == ZCRPC_CONN_CONNECTING) {
		zcrpc__conn_fail(c, ZCRPC_CANCELLED,
				 "closed by the application while connecting");
		return;
	}
	c->closing = 1;
	if (rdma_disconnect(c->id)) {
		c->disconnected = 1;
		zcrpc__conn_fail(c, ZCRPC_OK, "closed");
		return;
	}
	c->disconnected = 1;
	c->deadline_ns = zcrpc__now_ns() + ZCRPC_CLOSE_TIMEOUT_NS;
	zcrpc__worker_add_deadline(c->w, c->deadline_ns);
}

void zcrpc_conn_destroy(zcrpc_conn *c)
{
	if (!c || c->dead)
		return;
	c->dead = 1;
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

/* Releases the verbs resources. The id goes last: rdma_destroy_id waits
 * for events already read, which we always acknowledge at once. */
void zcrpc__conn_teardown(zcrpc_conn *c)
{
	if (c->torn_down)
		return;
	c->torn_down = 1;
	if (c->id && c->id->qp && !c->disconnected && c->migrated)
		rdma_disconnect(c->id); /* QP to error, DREQ to the peer */
	c->disconnected = 1;
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->cq) {
		ibv_ack_cq_events(c->cq, c->cq_unacked);
		c->cq_unacked = 0;
		ibv_destroy_cq(c->cq);
		c->cq = NULL;
	}
	if (c->mr) {
		ibv_dereg_mr(c->mr);
		c->mr = NULL;
	}
	free(c->buf);
	c->buf = NULL;
	free(c->free_send);
	c->free_send = NULL;
	if (c->id) {
		rdma_destroy_ep(c->id);
		c->id = NULL;
	}
}

void zcrpc__conn_free(zcrpc_conn *c)
{
	zcrpc_worker *w = c->w;

	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c);
}

zcrpc_status zcrpc_conn_set_handlers(zcrpc_conn *c,
				     const zcrpc_conn_handlers *h)
{
	if (!c || !h || h->size < sizeof(*h))
		return ZCRPC_INVALID_ARGUMENT;
	c->h = *h;
	return ZCRPC_OK;
}

zcrpc_conn_state zcrpc_conn_state_get(const zcrpc_conn *c)
{
	return c ? c->state : ZCRPC_CONN_CLOSED;
}

zcrpc_status zcrpc_conn_status(const zcrpc_conn *c)
{
	return c ? c->status : ZCRPC_INVALID_ARGUMENT;
}

const char *zcrpc_conn_error(const zcrpc_conn *c)
{
	return c ? c->detail : "";
}

void zcrpc_conn_get_stats(const zcrpc_conn *c, zcrpc_conn_stats *out)
{
	if (c && out)
		*out = c->stats;
}
