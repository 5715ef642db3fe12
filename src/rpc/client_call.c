/* zcrpc — a client call from start to completion: building and sending
 * the request, the pending queue, completion (callbacks run from the
 * channel's timer, never inside the call that caused them), replies,
 * deadlines, cancellation. */
#include "client_internal.h"
#include "lb_internal.h"
#include "stream_internal.h"
#include "../core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void release_buffers(zcrpc_channel *ch, struct ccall *c)
{
	if (c->out.msg.data)
		zcrpc_msg_free(ch->w, &c->out.msg);
	if (c->has_reply_msg) {
		zcrpc_msg_free(ch->w, &c->reply_msg);
		c->has_reply_msg = 0;
	}
	if (c->src_buf) {
		zcrpc__bulk_put(&ch->bulk, c->src_buf);
		c->src_buf = NULL;
	}
	if (c->dst_buf) {
		zcrpc__bulk_put(&ch->bulk, c->dst_buf);
		c->dst_buf = NULL;
	}
}

static void deliver(zcrpc_channel *ch, struct ccall *c, const zcrpc_reply *r);

void zcrpc__ccall_free(zcrpc_channel *ch, struct ccall *c)
{
	int part = c->stream_part; /* a stream's record is no call */

	if (c->state == CS_ZOMBIE) {
		zcrpc__list_remove(&c->link);
		if (c->deliver_late) {
			/* The caller's reply_into is no longer granted. */
			zcrpc_reply r;

			c->deliver_late = 0;
			/* as zcrpc__abi_sized_init */
			r = (zcrpc_reply){.size = sizeof(r)};
			r.status = c->status;
			r.message = c->message;
			deliver(ch, c, &r);
		}
	}
	c->granted = 0;
	c->revoking = 0;
	c->bulk_bad = 0;
	c->reply_grant = NULL;
	c->stream_part = 0;
	c->stream = NULL;
	release_buffers(ch, c);
	c->state = CS_FREE;
	zcrpc__call_table_release(&ch->calls, c);
	if (!part && !--ch->st.in_flight)
		zcrpc__channel_idle_check(ch);
}

static void queue_remove(zcrpc_channel *ch, struct ccall *c)
{
	if (!zcrpc__list_linked(&c->qlink))
		return;
	zcrpc__list_remove(&c->qlink);
	ch->q_len--;
	ch->st.pending--;
}

static void arm_now(zcrpc_channel *ch)
{
	zcrpc__timer_start(ch->w, &ch->timer, zcrpc__now_ns());
}

/* Marks @c completed with @st; its callback runs from the channel's timer
 * (that is, from progress), never from inside the call that caused it. If
 * a bulk write from the caller's memory is still in flight, the callback
 * waits for it. */
void zcrpc__ccall_complete(zcrpc_channel *ch, struct ccall *c, zcrpc_status st,
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
	c->unsent = c->state == CS_QUEUED;
	if (c->state == CS_QUEUED)
		queue_remove(ch, c);
	if (c->grant_parked)
		zcrpc__ccall_drop_grant(ch, c);
	zcrpc__list_remove(&c->link);
	c->status = st;
	snprintf(c->message, sizeof(c->message), "%s", msg ? msg : "");
	c->state = CS_DONE;
	zcrpc__list_push_back(&ch->done, &c->link);
	arm_now(ch);
}

static void deliver(zcrpc_channel *ch, struct ccall *c, const zcrpc_reply *r)
{
	if (c->stream_part) { /* no caller: its stream hears how it ended */
		if (c->stream)
			zcrpc__cstream_part_failed(ch, c, r->status, r->message);
		return;
	}
	if (c->ics && c->ics->n) {
		if (r->status == ZCRPC_OK)
			zcrpc__cchain_message(c->ics, &c->ic, 0,
					      r->len + r->attachment_len);
		zcrpc__cchain_end(c->ics, &c->ic, r->status, r->message,
				  r->md, r->n_md);
	}
	if (r->status == ZCRPC_OK)
		ch->st.calls_ok++;
	else
		ch->st.calls_failed++;
	if (c->cb) {
		ch->cb_unsent = c->unsent;
		c->cb(ch, r, c->arg);
		ch->cb_unsent = 0;
	}
}

/* Completes @c with the server's reply (kept in c->reply / reply_msg) and
 * its bulk part at @bulk, now, from inside progress (a receive or write
 * completion). */
void zcrpc__ccall_complete_with_reply(zcrpc_channel *ch, struct ccall *c,
				      const struct zcrpc_frame *f,
				      const void *bulk, size_t bulk_len)
{
	zcrpc_md md[ZCRPC_MD_MAX_PAIRS];
	zcrpc_reply r;
	char msgbuf[1025];

	if (c->stream_part) {
		zcrpc__cstream_part_landed(ch, c, bulk, bulk_len);
		return;
	}
	/* A DRAIN server's refusal: no handler saw the call. */
	c->unsent = (f->flags & ZCRPC_FRAME_F_REFUSED) && c->conn &&
		    zcrpc__conn_has_drain(c->conn);
	r = (zcrpc_reply){.size = sizeof(r)}; /* as zcrpc__abi_sized_init */
	r.status = (zcrpc_status)f->status;
	r.n_md = zcrpc__md_view(f, md);
	/* The first f->count pairs are the server's initial metadata (the
	 * decoder checked there are that many), the rest trailing. */
	r.initial_md = f->count ? md : NULL;
	r.n_initial_md = f->count;
	r.n_md -= f->count;
	r.md = r.n_md ? md + f->count : NULL;
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
	zcrpc__list_remove(&c->link);
	c->state = CS_DONE;
	deliver(ch, c, &r);
	zcrpc__ccall_free(ch, c);
}

void zcrpc__channel_run_done(zcrpc_channel *ch)
{
	struct zcrpc__list *n;

	while ((n = zcrpc__list_first(&ch->done))) {
		struct ccall *c = zcrpc__ccall_of(n, link);
		zcrpc_reply r;

		zcrpc__list_remove(&c->link);
		/* as zcrpc__abi_sized_init */
		r = (zcrpc_reply){.size = sizeof(r)};
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
			zcrpc__list_push_front(&ch->zombies, &c->link);
			zcrpc__timer_start(ch->w, &ch->timer, c->zombie_deadline_ns);
			continue;
		}
		zcrpc__ccall_free(ch, c);
	}
}

static void queue_cancel(zcrpc_channel *ch, zcrpc_conn *conn,
			 const struct zcrpc__out *out);

void zcrpc__ccall_send_cancel(zcrpc_channel *ch, struct ccall *c)
{
	zcrpc__channel_cancel_ref(ch, c->conn, zcrpc__ccall_ref(ch, c), 0);
}

void zcrpc__channel_cancel_ref(zcrpc_channel *ch, zcrpc_conn *conn,
			       uint32_t ref, uint16_t flags)
{
	zcrpc__channel_send_control(ch, conn, ZCRPC_FRAME_CANCEL, ref, flags);
}

void zcrpc__channel_send_control(zcrpc_channel *ch, zcrpc_conn *conn,
				 uint8_t type, uint32_t ref, uint16_t flags)
{
	struct zcrpc_frame f;
	struct zcrpc__out out;

	if (!conn || zcrpc_conn_get_state(conn) != ZCRPC_CONN_ESTABLISHED)
		return;
	memset(&f, 0, sizeof(f));
	f.type = type;
	f.flags = flags;
	f.call_id = ref;
	if (zcrpc__out_build(ch->w, &f, NULL, 0, 0, NULL, NULL, NULL, &out)) {
		/* no pool slot: the server's call runs on until its deadline */
		ch->st.cancels_lost++;
		return;
	}
	queue_cancel(ch, conn, &out);
	zcrpc__channel_send_cancels(ch, conn);
}

/* CANCELs go behind the ones already waiting (in order), with the credit
 * kept for control frames (the seam's send_urgent): one that finds even
 * that gone waits for on_writable instead of being dropped, so the
 * server's call does not hold its window until the connection closes. */
static void queue_cancel(zcrpc_channel *ch, zcrpc_conn *conn,
			 const struct zcrpc__out *out)
{
	struct pcancel *p = malloc(sizeof(*p)), **tail = &ch->cancels;

	if (!p) {
		zcrpc_msg_free(ch->w, (zcrpc_msg *)&out->msg);
		ch->st.cancels_lost++;
		return;
	}
	p->next = NULL;
	p->conn = conn;
	p->out = *out;
	while (*tail)
		tail = &(*tail)->next;
	*tail = p;
}

int zcrpc__channel_send_cancels(zcrpc_channel *ch, zcrpc_conn *conn)
{
	struct pcancel **pp = &ch->cancels, *p;

	while ((p = *pp)) {
		zcrpc_status st;

		if (p->conn != conn) {
			pp = &p->next;
			continue;
		}
		st = zcrpc__conn_send_urgent(conn, &p->out.msg, p->out.len);
		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return 1; /* on_writable brings us back */
		if (st != ZCRPC_OK)
			zcrpc_msg_free(ch->w, &p->out.msg);
		*pp = p->next;
		free(p);
	}
	return 0;
}

void zcrpc__channel_drop_cancels(zcrpc_channel *ch, zcrpc_conn *conn)
{
	struct pcancel **pp = &ch->cancels, *p;

	while ((p = *pp)) {
		if (conn && p->conn != conn) {
			pp = &p->next;
			continue;
		}
		zcrpc_msg_free(ch->w, &p->out.msg);
		*pp = p->next;
		free(p);
	}
}

void zcrpc__channel_flush_queue(zcrpc_channel *ch)
{
	struct ccall *c;

	if (!ch->conn || !ch->conn_up)
		return;
	/* (the lists are looked at here: both are empty on the hot path) */
	if (ch->cancels && zcrpc__channel_send_cancels(ch, ch->conn))
		return; /* cancels first: they free the server's window */
	if (!zcrpc__list_empty(&ch->grants) &&
	    zcrpc__channel_send_grants(ch, ch->conn))
		return; /* grants first: their replies wait at the server */
	while ((c = zcrpc__channel_queue_first(ch))) {
		zcrpc_status st = zcrpc_conn_send_msg(ch->conn, &c->out.msg,
						      c->out.len);

		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return; /* resumes on_writable */
		zcrpc__list_remove(&c->qlink);
		ch->q_len--;
		ch->st.pending--;
		if (st != ZCRPC_OK) {
			/* FAILED_PRECONDITION: the connection is closing (it
			 * failed or was told to go away): that is UNAVAILABLE
			 * to the caller, like the calls it had in flight. */
			zcrpc__ccall_complete(ch, c,
					      st == ZCRPC_FAILED_PRECONDITION
						      ? ZCRPC_UNAVAILABLE
						      : st,
					      "sending the request failed: "
					      "connection closing");
			continue;
		}
		c->conn = ch->conn;
		c->state = CS_SENT;
	}
}

void zcrpc__ccall_on_reply(zcrpc_channel *ch, zcrpc_conn *conn,
			   const struct zcrpc_frame *f)
{
	struct ccall *c = zcrpc__ccall_lookup(ch, f->call_id);
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
		zcrpc__ccall_send_cancel(ch, c);
		zcrpc__ccall_complete(ch, c, ZCRPC_RESOURCE_EXHAUSTED, m);
		return;
	}
	if (!(f->flags & ZCRPC_FRAME_F_BULK)) {
		zcrpc__ccall_complete_with_reply(ch, c, f, NULL, 0);
		return;
	}
	/* The reply's bulk part: grant a target, keep the frame. */
	zcrpc__ccall_grant_reply_target(ch, conn, c, f);
}

void zcrpc__channel_on_timer(struct zcrpc__timer *t, int64_t now)
{
	zcrpc_channel *ch = zcrpc__container_of(t, zcrpc_channel, timer);
	struct zcrpc__list *n, *tmp;
	struct ccall *c;
	int64_t next_due = 0;

	zcrpc__list_foreach_safe(n, tmp, &ch->active)
	{
		c = zcrpc__ccall_of(n, link);
		if (!c->deadline_ns)
			continue;
		if (now >= c->deadline_ns) {
			if (c->state == CS_SENT || c->state == CS_REPLY_BULK)
				zcrpc__ccall_send_cancel(ch, c);
			else if (c->state == CS_WRITING)
				c->cancel_after_write = 1;
			zcrpc__ccall_complete(ch, c, ZCRPC_DEADLINE_EXCEEDED,
					      "deadline exceeded");
			continue;
		}
		if (!next_due || c->deadline_ns < next_due)
			next_due = c->deadline_ns;
	}
	zcrpc__channel_run_done(ch);
	zcrpc__channel_check_zombies(ch, now, &next_due);
	zcrpc__channel_cap_timer(ch, now, &next_due);
	if (!zcrpc__list_empty(&ch->grants)) {
		/* Grants waiting for a window-bind slot: no callback tells. */
		if (ch->conn)
			zcrpc__channel_flush_queue(ch);
		if (ch->draining)
			zcrpc__channel_send_grants(ch, ch->draining);
		if (!zcrpc__list_empty(&ch->grants) &&
		    (!next_due || now + ZCRPC_GRANT_RETRY_NS < next_due))
			next_due = now + ZCRPC_GRANT_RETRY_NS;
	}
	if (!zcrpc__list_empty(&ch->done))
		next_due = now;
	if (next_due)
		zcrpc__timer_start(ch->w, &ch->timer, next_due);
}

/* zcrpc_call_opts_init's values, copied per call without the ABI pass. */
static const zcrpc_call_opts call_opts_default = {
	.size = sizeof(zcrpc_call_opts)};

void zcrpc_call_opts_init_sized(zcrpc_call_opts *caller, size_t size)
{
	zcrpc_call_opts d, *o = &d;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	zcrpc__abi_init(caller, size, o, sizeof(*o));
}

static void copy_fill(void *dst, size_t len, void *ctx)
{
	memcpy(dst, ctx, len);
}

/* The checks of a call's options against the channel; *@inline_cap: the
 * payload bytes a request frame can carry with its metadata. */
static zcrpc_status check_opts(zcrpc_channel *ch, const zcrpc_call_opts *co,
			       size_t len, size_t *inline_cap)
{
	size_t mdl = zcrpc__md_bytes(co->md, co->n_md), max_msg;

	if (mdl == (size_t)-1 || co->timeout_us < 0)
		return ZCRPC_INVALID_ARGUMENT;
	if (co->attachment &&
	    (!co->attachment->len ||
	     !zcrpc__mr_covers(co->attachment->mr, zcrpc_worker_get_context(ch->w),
			       co->attachment->offset, co->attachment->len, 0)))
		return ZCRPC_INVALID_ARGUMENT;
	if (co->reply_into &&
	    !zcrpc__mr_covers(co->reply_into->mr, zcrpc_worker_get_context(ch->w),
			      co->reply_into->offset, co->reply_into->len,
			      ZCRPC_MR_REMOTE_WRITE))
		return ZCRPC_INVALID_ARGUMENT;
	max_msg = zcrpc__worker_max_msg(ch->w);
	*inline_cap = max_msg - ZCRPC_FRAME_HDR_LEN - mdl;
	if (max_msg < ZCRPC_FRAME_HDR_LEN + mdl)
		return ZCRPC_INVALID_ARGUMENT;
	if ((len > ch->o.bulk_threshold || len > *inline_cap) && co->attachment)
		return ZCRPC_INVALID_ARGUMENT; /* one bulk part per message */
	return ZCRPC_OK;
}

/* Builds @c's request frame @f into a pool slot: @len payload bytes from
 * @fill inline, or, above the bulk threshold or what fits, written into a
 * cached buffer as the frame's bulk part; the caller's attachment rides
 * as the bulk part otherwise. Nothing is kept on failure. */
static zcrpc_status build_request(zcrpc_channel *ch, struct ccall *c,
				  struct zcrpc_frame *f,
				  const zcrpc_call_opts *co, size_t len,
				  size_t inline_cap, zcrpc_fill_fn fill,
				  void *fill_ctx)
{
	zcrpc_status st;

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
		f->flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
		f->bulk_len = len;
		st = zcrpc__out_build(ch->w, f, co->md, co->n_md, 0, NULL, NULL,
				      NULL, &c->out);
	} else {
		if (co->attachment) {
			c->src_mr = co->attachment->mr;
			c->src_off = co->attachment->offset;
			c->bulk_len = co->attachment->len;
			f->flags = ZCRPC_FRAME_F_BULK;
			f->bulk_len = c->bulk_len;
		}
		st = zcrpc__out_build(ch->w, f, co->md, co->n_md, len, fill,
				      fill_ctx, NULL, &c->out);
		if (st == ZCRPC_OK && fill == copy_fill)
			ch->st.copied_bytes += len;
	}
	if (st != ZCRPC_OK) {
		zcrpc__bulk_put(&ch->bulk, c->src_buf);
		c->src_buf = NULL;
	}
	return st;
}

/* @c, taken from the table with its request built, becomes a queued call:
 * on the active list and the pending queue, its deadline armed. */
static void enqueue(zcrpc_channel *ch, struct ccall *c,
		    const zcrpc_call_opts *co, zcrpc_call_cb cb, void *arg,
		    int64_t timeout_us)
{
	c->cb = cb;
	c->arg = arg;
	c->sync = 0;
	c->conn = NULL;
	c->write_pending_status = 0;
	c->has_reply_into = co->reply_into != NULL;
	if (co->reply_into)
		c->reply_into = *co->reply_into;
	c->dst_buf = NULL;
	c->has_reply_msg = 0;
	c->granted = 0;
	c->revoking = 0;
	c->cancel_after_write = 0;
	c->deliver_late = 0;
	c->grant_parked = 0;
	c->reply_grant = NULL;
	/* c->reply: written whole before it is read (a reply's bulk part). */
	c->max_reply = co->max_reply;
	c->deadline_ns = timeout_us ? zcrpc__now_ns() + timeout_us * 1000 : 0;
	c->state = CS_QUEUED;
	zcrpc__list_push_front(&ch->active, &c->link);
	zcrpc__list_push_back(&ch->queue, &c->qlink);
	ch->q_len++;
	ch->st.pending++;
	ch->st.in_flight++;
	ch->st.calls_started++;
	if (c->deadline_ns)
		zcrpc__timer_start(ch->w, &ch->timer, c->deadline_ns);
}

/* The queued call @c goes out: sent with the queue when connected,
 * otherwise the channel connects, unless it waits to reconnect (then @c
 * fails at once, with the last refusal's status when it was admission). */
static void send_or_connect(zcrpc_channel *ch, struct ccall *c)
{
	if (ch->conn) {
		zcrpc__channel_flush_queue(ch);
		return;
	}
	if (zcrpc__now_ns() < ch->next_attempt_ns &&
	    ch->down_status == ZCRPC_UNAUTHENTICATED) {
		zcrpc__ccall_complete(ch, c, ZCRPC_UNAUTHENTICATED,
				      ch->down_why);
	} else if (zcrpc__now_ns() < ch->next_attempt_ns) {
		zcrpc__ccall_complete(ch, c, ZCRPC_UNAVAILABLE,
				      "not connected (waiting to reconnect)");
	} else {
		zcrpc_status st = zcrpc__channel_connect(ch);

		if (st != ZCRPC_OK) /* the cap's refusal is its own status */
			zcrpc__ccall_complete(ch, c,
					      st == ZCRPC_RESOURCE_EXHAUSTED
						      ? st
						      : ZCRPC_UNAVAILABLE,
					      ch->down_why);
	}
}

/* The call table had no free call for a new one: at max_calls, or it
 * could not grow (no memory, said in the log too). */
static zcrpc_status no_call(zcrpc_channel *ch)
{
	if (zcrpc__call_table_full(&ch->calls)) {
		ch->start_why =
			"too many calls alive on the channel (max_calls)";
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	ch->start_why = "out of memory growing the channel's call table";
	zcrpc__log(ZCRPC_LOG_WARN,
		   "channel %p: out of memory growing its call table past %u "
		   "calls (max_calls %u): call refused (RESOURCE_EXHAUSTED)",
		   (void *)ch, ch->calls.n, ch->o.max_calls);
	return ZCRPC_RESOURCE_EXHAUSTED;
}

zcrpc_status zcrpc_call_start(zcrpc_channel *ch, uint32_t method, size_t len,
			      zcrpc_fill_fn fill, void *fill_ctx,
			      const zcrpc_call_opts *o, zcrpc_call_cb cb,
			      void *arg, zcrpc_call_id *id)
{
	if (!ch || !cb || (len && !fill))
		return ZCRPC_INVALID_ARGUMENT;
	if (ch->destroying)
		return ZCRPC_FAILED_PRECONDITION;
	if (ch->lb) /* a target channel: lb_call.c picks a backend */
		return zcrpc__lb_call_start(ch, method, len, fill, fill_ctx, o,
					    cb, arg, id);
	return zcrpc__call_start_ics(ch, method, len, fill, fill_ctx, o, cb,
				     arg, id, &ch->ics);
}

zcrpc_status zcrpc__call_start_ics(zcrpc_channel *ch, uint32_t method,
				   size_t len, zcrpc_fill_fn fill,
				   void *fill_ctx, const zcrpc_call_opts *o,
				   zcrpc_call_cb cb, void *arg,
				   zcrpc_call_id *id,
				   const struct zcrpc__cchain *ics)
{
	static const struct zcrpc__cchain none;
	zcrpc_md all_md[ZCRPC_MD_MAX_PAIRS];
	struct zcrpc__icall ic = {{0}, 0, 0};
	zcrpc_call_opts co;
	struct zcrpc_frame f;
	struct ccall *c;
	size_t inline_cap;
	int64_t timeout_us;
	zcrpc_status st;

	if (!ics)
		ics = &none;
	co = call_opts_default; /* what zcrpc_call_opts_init gives */
	if (o && ZCRPC__ABI_IN(&co, o, ZCRPC__MIN_CALL_OPTS) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	st = check_opts(ch, &co, len, &inline_cap);
	if (st != ZCRPC_OK)
		return st;
	if (ch->q_len >= ch->o.max_pending) {
		ch->st.queue_full++;
		ch->start_why =
			"too many calls waiting to be sent (max_pending)";
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	c = zcrpc__call_table_peek(&ch->calls);
	if (!c)
		return no_call(ch);
	timeout_us = co.timeout_us ? co.timeout_us : ch->o.default_timeout_us;
	if (ics->n) {
		st = zcrpc__cchain_start_md(ics, method, 0, timeout_us, &co.md,
					    &co.n_md, all_md, &ic);
		if (st == ZCRPC_OK)
			st = check_opts(ch, &co, len, &inline_cap);
		if (st != ZCRPC_OK)
			goto err_intercepted;
		zcrpc__cchain_message(ics, &ic, 1, len);
	}

	memset(&f, 0, sizeof(f));
	f.type = ZCRPC_FRAME_REQUEST;
	f.method_id = method;
	f.call_id = zcrpc__ccall_ref(ch, c);
	f.deadline_us = timeout_us > 0xffffffffLL ? 0xffffffffU : (uint32_t)timeout_us;
	st = build_request(ch, c, &f, &co, len, inline_cap, fill, fill_ctx);
	if (st != ZCRPC_OK)
		goto err_intercepted;
	zcrpc__call_table_take(&ch->calls);
	c->ic = ic;
	c->ics = ics->n ? ics : NULL;
	zcrpc__channel_wake(ch); /* before the call counts as work */
	enqueue(ch, c, &co, cb, arg, timeout_us);
	if (id)
		*id = f.call_id;
	send_or_connect(ch, c);
	return ZCRPC_OK;

err_intercepted:
	/* The interceptors that started hear how it ended (once). */
	zcrpc__cchain_end(ics, &ic, st, "the call could not be started",
			  NULL, 0);
	return st;
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
	if (ch->lb)
		return zcrpc__lb_call_cancel(ch, id);
	c = zcrpc__ccall_lookup(ch, (uint32_t)id);
	if (!c || c->state == CS_DONE || c->state == CS_ZOMBIE)
		return ZCRPC_NOT_FOUND;
	if (c->state == CS_SENT || c->state == CS_REPLY_BULK)
		zcrpc__ccall_send_cancel(ch, c);
	else if (c->state == CS_WRITING)
		c->cancel_after_write = 1; /* CANCEL must not overtake it */
	zcrpc__ccall_complete(ch, c, ZCRPC_CANCELLED,
			      "cancelled by the caller");
	return ZCRPC_OK;
}

zcrpc_conn *zcrpc__ccall_detach(zcrpc_channel *ch, zcrpc_call_id id,
				const char *why)
{
	struct ccall *c = zcrpc__ccall_lookup(ch, (uint32_t)id);
	zcrpc_conn *risk = NULL;

	if (!c || c->state == CS_FREE || c->stream_part)
		return NULL;
	if ((c->state == CS_WRITING && c->src_mr) ||
	    (c->granted && c->has_reply_into))
		risk = c->conn;
	if (c->state == CS_SENT || c->state == CS_REPLY_BULK)
		zcrpc__ccall_send_cancel(ch, c);
	else if (c->state == CS_WRITING)
		c->cancel_after_write = 1; /* CANCEL must not overtake it */
	zcrpc__ccall_complete(ch, c, ZCRPC_CANCELLED, why);
	if (c->ics) /* they hear the end the caller will hear */
		zcrpc__cchain_end(c->ics, &c->ic, ZCRPC_CANCELLED, why, NULL,
				  0);
	c->ics = NULL;
	c->cb = NULL;
	return risk;
}
