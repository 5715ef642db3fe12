/* zcrpc — the server's frames out: sent now, queued behind others while
 * the connection has no credits, or kept (as their fields) until a pool
 * slot returns; never dropped, always in order. */
#include "server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sends a frame now or queues it behind others waiting for credits. The
 * frame's slot belongs to the library either way. */
/* Posts @out now, or queues it behind frames waiting for credits. */
static void send_now(struct sconn *sc, struct zcrpc__out *out)
{
	struct zcrpc__qframe *q;

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

void zcrpc__sconn_send_batch(struct zcrpc__batch *b, struct zcrpc__out *out)
{
	struct sconn *sc = zcrpc__container_of(b, struct sconn, batch);

	if (sc->closed) {
		zcrpc_msg_free(sc->s->w, &out->msg);
		return;
	}
	send_now(sc, out);
}

void zcrpc__sconn_send(struct sconn *sc, struct zcrpc__out *out)
{
	if (sc->closed) {
		zcrpc_msg_free(sc->s->w, &out->msg);
		return;
	}
	/* A small stream frame may wait for the others of this turn; any
	 * other frame sends what waits first. */
	if (zcrpc__batch_add(&sc->batch, sc->conn, out))
		return;
	send_now(sc, out);
}

void zcrpc__sconn_flush(struct sconn *sc)
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
void zcrpc__sconn_flush_deferred(struct sconn *sc)
{
	zcrpc_server *s = sc->s;
	struct pframe *p;

	while ((p = sc->p_head) && !sc->closed) {
		if (p->grant_ref) {
			zcrpc_server_call *c =
				zcrpc__scall_lookup(s, p->grant_ref);

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
				zcrpc__sconn_send(sc, &out);
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
void zcrpc__sconn_send_frame(struct sconn *sc, struct zcrpc_frame *f,
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
		zcrpc__sconn_send(sc, &out);
	else if (st == ZCRPC_RESOURCE_EXHAUSTED)
		defer_frame(sc, f, msg, n, grant_ref);
	else
		zcrpc_conn_close(sc->conn); /* cannot happen: fixed sizes */
}

void zcrpc__sconn_send_simple(struct sconn *sc, uint8_t type, uint32_t call_id,
			      zcrpc_status status, const char *msg)
{
	struct zcrpc_frame f;
	size_t n;

	memset(&f, 0, sizeof(f));
	f.type = type;
	f.call_id = call_id;
	f.status = (uint32_t)status;
	n = zcrpc__status_msg_len(msg);
	zcrpc__sconn_send_frame(sc, &f, msg, n, 0);
}

void zcrpc__sconn_send_refused(struct sconn *sc, uint32_t call_id,
			       const char *msg)
{
	struct zcrpc_frame f;

	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REPLY;
	f.call_id = call_id;
	f.status = (uint32_t)ZCRPC_UNAVAILABLE;
	if (zcrpc__conn_has_drain(sc->conn))
		f.flags = ZCRPC_FRAME_F_REFUSED;
	zcrpc__sconn_send_frame(sc, &f, msg, zcrpc__status_msg_len(msg), 0);
}
