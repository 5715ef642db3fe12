/* zcrpc — a target channel's calls: each is attempted on a backend the
 * picker names (as a call of that backend's subchannel); a failed attempt
 * is made again elsewhere when the call provably never reached a server
 * (it completed before its request went out: no connection, GOAWAY) or
 * when its method's retry policy allows it; otherwise its result goes to
 * the caller. A call that finds no backend fails UNAVAILABLE, or waits
 * for one (ZCRPC_CALL_WAIT_FOR_READY) until its deadline, which covers
 * every attempt. A method whose policy hedges has a call's attempts sent to
 * several backends at once (one more every hedge delay), the first
 * conclusive answer taken and the others cancelled. A call completes
 * exactly once; it runs at a server more than once only when its method
 * was marked idempotent. */
#include "lb_internal.h"
#include "../core/md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000LL
/* Attempts without a policy: one per backend, and never more than this. */
#define MAX_TRANSPARENT 10

static void kept_fill(void *dst, size_t len, void *ctx)
{
	memcpy(dst, ctx, len);
}

static struct lbcall *lbcall_of(struct zcrpc__list *n)
{
	return zcrpc__container_of(n, struct lbcall, link);
}

static void lbcall_free(struct zcrpc__lb *lb, struct lbcall *c)
{
	if (zcrpc__list_linked(&c->link))
		zcrpc__list_remove(&c->link);
	if (zcrpc__list_linked(&c->hlink))
		zcrpc__list_remove(&c->hlink);
	free(c->req);
	free(c->md);
	free(c->key);
	memset((char *)c, 0, sizeof(*c));
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->hlink);
	zcrpc__call_table_release(&lb->calls, c);
}

/* Hands @r to the caller and frees @c. */
static void deliver(struct zcrpc__lb *lb, struct lbcall *c,
		    const zcrpc_reply *r)
{
	zcrpc_channel *ch = lb->ch;

	if (r->status == ZCRPC_OK)
		ch->st.calls_ok++;
	else
		ch->st.calls_failed++;
	ch->st.in_flight--;
	c->cb(ch, r, c->arg);
	lbcall_free(lb, c);
}

/* Completes @c with the lb's own result: its callback runs from the
 * timer, never inside the call that caused it. */
static void complete(struct zcrpc__lb *lb, struct lbcall *c, zcrpc_status st,
		     const char *msg)
{
	if (c->state == LB_WAITING) {
		zcrpc__list_remove(&c->link);
		lb->ch->st.pending--;
	}
	if (zcrpc__list_linked(&c->hlink))
		zcrpc__list_remove(&c->hlink);
	c->state = LB_DONE;
	c->status = st;
	snprintf(c->message, sizeof(c->message), "%s", msg);
	zcrpc__list_push_back(&lb->done, &c->link);
	zcrpc__lb_arm(lb, zcrpc__now_ns());
}

static void wait(struct zcrpc__lb *lb, struct lbcall *c, int64_t at_ns)
{
	c->state = LB_WAITING;
	c->retry_at_ns = at_ns;
	zcrpc__list_push_back(&lb->waiting, &c->link);
	lb->ch->st.pending++;
	zcrpc__lb_arm(lb, at_ns ? at_ns : zcrpc__now_ns() + 100 * MS);
	if (c->deadline_ns)
		zcrpc__lb_arm(lb, c->deadline_ns);
}

/* Why no backend could be picked, for the call's message. */
static void no_backend_why(struct zcrpc__lb *lb, char *buf, size_t len)
{
	size_t i;

	if (lb->res_status != ZCRPC_OK || !lb->n) {
		snprintf(buf, len, "no backend for %.80s: %.150s", lb->target,
			 !lb->resolved ? "not resolved yet"
			 : lb->res_why[0] ? lb->res_why
					  : "the resolver returned no addresses");
		return;
	}
	for (i = 0; i < lb->n && !lb->b[i]->sub->down_why[0]; i++)
		;
	snprintf(buf, len, "no backend for %.80s: all %zu are down%s%.150s",
		 lb->target, lb->n, i < lb->n ? "; last: " : "",
		 i < lb->n ? lb->b[i]->sub->down_why : "");
}

static void on_attempt(zcrpc_channel *sub, const zcrpc_reply *r, void *arg);

/* Starts one attempt of @c on @be (c->slot has a free one). */
static zcrpc_status send_on(struct zcrpc__lb *lb, struct lbcall *c,
			    struct zcrpc__backend *be, int64_t now)
{
	zcrpc_call_opts so = c->co;
	struct lbatt *a;
	zcrpc_status st;
	size_t k;

	for (k = 0; c->slot[k].be; k++)
		;
	a = &c->slot[k];
	so.timeout_us = 0;
	if (c->deadline_ns) {
		so.timeout_us = (c->deadline_ns - now) / 1000;
		if (so.timeout_us < 1)
			so.timeout_us = 1;
	}
	so.hash_key = NULL;
	so.hash_key_len = 0;
	so.flags = 0;
	a->c = c;
	st = zcrpc__call_start_ics(be->sub, c->method, c->len,
				   c->kept ? kept_fill : c->fill,
				   c->kept ? c->req : c->fill_ctx, &so,
				   on_attempt, a, &a->sub_id, &lb->ch->ics);
	if (st != ZCRPC_OK)
		return st;
	a->be = be;
	be->picks++;
	be->live++;
	c->n_live++;
	c->attempts++;
	c->state = LB_LIVE;
	if (c->hedged) {
		c->tried[c->n_tried++] = be->id;
		if (zcrpc__list_linked(&c->hlink))
			zcrpc__list_remove(&c->hlink);
		if (c->attempts < c->pol->max_attempts) { /* the next hedge */
			c->hedge_at_ns = now + (int64_t)c->pol->hedge_delay_ms * MS;
			zcrpc__list_push_back(&lb->hedging, &c->hlink);
			zcrpc__lb_arm(lb, c->hedge_at_ns);
		}
	}
	return ZCRPC_OK;
}

/* Sends @c to a backend picked now; without one, @c waits or fails. On
 * the first attempt (@first) a refusal of the subchannel is returned (the
 * caller's zcrpc_call_start fails with it, @c is the caller's to free);
 * later it completes @c. */
static zcrpc_status attempt(struct zcrpc__lb *lb, struct lbcall *c, int first)
{
	struct zcrpc__backend *be;
	int64_t now = zcrpc__now_ns();
	char why[300];
	zcrpc_status st;

	if (c->deadline_ns && now >= c->deadline_ns && !first) {
		complete(lb, c, ZCRPC_DEADLINE_EXCEEDED,
			 c->attempts ? "deadline exceeded before the call "
				       "could be attempted again"
				     : "deadline exceeded waiting for a "
				       "backend");
		return ZCRPC_OK;
	}
	be = zcrpc__lb_pick(lb, c->key, c->co.hash_key_len, c->tried,
			    c->n_tried);
	if (!be && c->n_tried && !c->hedged) /* only those it passed over */
		be = zcrpc__lb_pick(lb, c->key, c->co.hash_key_len, NULL, 0);
	if (!be) {
		lb->ch->st.no_backend++;
		if (c->wfr) {
			wait(lb, c, 0);
			return ZCRPC_OK;
		}
		no_backend_why(lb, why, sizeof(why));
		complete(lb, c, ZCRPC_UNAVAILABLE, why);
		return ZCRPC_OK;
	}
	st = send_on(lb, c, be, now);
	if (st != ZCRPC_OK) {
		if (first) {
			lb->ch->start_why = be->sub->start_why;
			return st;
		}
		snprintf(why, sizeof(why),
			 "the call could not be attempted again on %.100s:%s: %.100s",
			 be->host, be->port,
			 be->sub->start_why ? be->sub->start_why
					    : zcrpc_status_str(st));
		complete(lb, c, st, why);
	}
	return ZCRPC_OK;
}

/* One more attempt of the hedged call @c, LIVE, on a backend it was not
 * sent to yet: 1 when one went. */
static int hedge(struct zcrpc__lb *lb, struct lbcall *c)
{
	struct zcrpc__backend *be;
	int64_t now = zcrpc__now_ns();

	if (zcrpc__list_linked(&c->hlink))
		zcrpc__list_remove(&c->hlink);
	if (c->attempts >= c->pol->max_attempts || c->cancelled ||
	    (c->deadline_ns && now >= c->deadline_ns))
		return 0;
	be = zcrpc__lb_pick(lb, c->key, c->co.hash_key_len, c->tried,
			    c->n_tried);
	if (!be || send_on(lb, c, be, now) != ZCRPC_OK) {
		/* none now: look again a delay later, while one is out */
		if (c->n_live) {
			c->hedge_at_ns = now + (int64_t)c->pol->hedge_delay_ms * MS;
			zcrpc__list_push_back(&lb->hedging, &c->hlink);
			zcrpc__lb_arm(lb, c->hedge_at_ns);
		}
		return 0;
	}
	lb->ch->st.hedges++;
	return 1;
}

static int jitter(struct zcrpc__lb *lb, int ms)
{
	lb->rng ^= lb->rng << 13;
	lb->rng ^= lb->rng >> 7;
	lb->rng ^= lb->rng << 17;
	return ms * 8 / 10 + (int)(lb->rng % (uint64_t)(ms * 4 / 10 + 1));
}

/* @c failed at @be before its request went out: its next picks pass
 * @be over while a backend it has not tried is usable. */
static void pass_over(struct lbcall *c, const struct zcrpc__backend *be)
{
	size_t k;

	for (k = 0; k < c->n_tried; k++)
		if (c->tried[k] == be->id)
			return;
	if (c->n_tried < ZCRPC__LB_MAX_LIVE)
		c->tried[c->n_tried++] = be->id;
}

/* Whether @c, whose attempt on @be ended with @st (@unsent: before its
 * request went out), is attempted again; if so it waits for that. */
static int again(struct zcrpc__lb *lb, struct lbcall *c,
		 const struct zcrpc__backend *be, zcrpc_status st, int unsent)
{
	zcrpc_channel *ch = lb->ch;
	int64_t now = zcrpc__now_ns();
	size_t most = lb->n < MAX_TRANSPARENT ? lb->n : MAX_TRANSPARENT;

	if (st == ZCRPC_OK || c->cancelled || ch->destroying || !c->kept)
		return 0;
	if (c->deadline_ns && now >= c->deadline_ns)
		return 0;
	if (unsent && st == ZCRPC_UNAVAILABLE && c->transparent < most) {
		c->transparent++;
		ch->st.retries_transparent++;
		pass_over(c, be);
		wait(lb, c, now);
		return 1;
	}
	if (c->pol && (c->pol->retryable & (1u << st)) &&
	    c->attempts < c->pol->max_attempts) {
		int ms = c->backoff_ms ? c->backoff_ms * 2
				       : c->pol->initial_backoff_ms;

		c->backoff_ms = ms > c->pol->max_backoff_ms
					? c->pol->max_backoff_ms
					: ms;
		ch->st.retries_policy++;
		wait(lb, c, now + (int64_t)jitter(lb, c->backoff_ms) * MS);
		return 1;
	}
	return 0;
}

/* Takes @c's attempts still in flight back, silently (each cancelled at
 * its server, no callback), counting them with @counter when set. */
static void take_back(struct lbcall *c, const char *why, uint64_t *counter)
{
	size_t k;

	for (k = 0; c->n_live && k < ZCRPC__LB_MAX_LIVE; k++) {
		struct lbatt *a = &c->slot[k];

		if (!a->be)
			continue;
		(void)zcrpc__ccall_detach(a->be->sub, a->sub_id, why);
		a->be->live--;
		a->be = NULL;
		c->n_live--;
		if (counter)
			(*counter)++;
	}
}

/* A hedged call's attempt ended with @r: the call's result, unless the
 * status is one to go on after and an attempt is (or may still be) out. */
static void hedge_ended(struct zcrpc__lb *lb, struct lbcall *c,
			struct zcrpc__backend *be, const zcrpc_reply *r,
			int unsent)
{
	zcrpc_reply cancelled;
	size_t most = lb->n < MAX_TRANSPARENT ? lb->n : MAX_TRANSPARENT, k;
	int go_on;

	unsent = unsent && r->status == ZCRPC_UNAVAILABLE &&
		 c->transparent < most;
	go_on = r->status != ZCRPC_OK && !c->cancelled &&
		!lb->ch->destroying &&
		(unsent || (c->pol->retryable & (1u << r->status)));
	if (go_on) {
		if (unsent) { /* it never reached a server: not an attempt */
			c->attempts--;
			for (k = 0; k < c->n_tried && c->tried[k] != be->id; k++)
				;
			if (k < c->n_tried)
				c->tried[k] = c->tried[--c->n_tried];
			c->transparent++;
			lb->ch->st.retries_transparent++;
		}
		if (hedge(lb, c) || c->n_live)
			return; /* the others (or the new one) answer */
	}
	if (c->n_live && c->cancelled && r->status == ZCRPC_CANCELLED)
		return; /* the others' CANCELLED come too: the last delivers */
	take_back(c, "another attempt of the call answered first",
		  c->cancelled ? NULL : &lb->ch->st.hedges_cancelled);
	if (zcrpc__list_linked(&c->hlink))
		zcrpc__list_remove(&c->hlink);
	if (c->cancelled && r->status != ZCRPC_CANCELLED) {
		cancelled = (zcrpc_reply){.size = sizeof(cancelled)};
		cancelled.status = ZCRPC_CANCELLED;
		cancelled.message = "cancelled by the caller";
		r = &cancelled;
	}
	deliver(lb, c, r);
}

static void on_attempt(zcrpc_channel *sub, const zcrpc_reply *r, void *arg)
{
	struct lbatt *a = arg;
	struct lbcall *c = a->c;
	struct zcrpc__backend *be = a->be;
	struct zcrpc__lb *lb = c->lb;
	zcrpc_reply cancelled;

	if (r->status == ZCRPC_OK)
		be->ok++;
	else
		be->failed++;
	be->live--;
	a->be = NULL;
	a->sub_id = 0;
	c->n_live--;
	if (c->hedged) {
		hedge_ended(lb, c, be, r, sub->cb_unsent);
		return;
	}
	if (again(lb, c, be, r->status, sub->cb_unsent))
		return;
	if (c->cancelled && r->status != ZCRPC_CANCELLED) {
		/* zcrpc_call_cancel said it would end CANCELLED */
		cancelled = (zcrpc_reply){.size = sizeof(cancelled)};
		cancelled.status = ZCRPC_CANCELLED;
		cancelled.message = "cancelled by the caller";
		r = &cancelled;
	}
	deliver(lb, c, r);
}

static const zcrpc_call_opts call_opts_default = {
	.size = sizeof(zcrpc_call_opts)};

static const zcrpc_retry_policy *policy_of(struct zcrpc__lb *lb,
					   uint32_t method)
{
	size_t i;

	for (i = 0; i < lb->n_pol; i++)
		if (lb->pol[i].method == method)
			return &lb->pol[i].p;
	return NULL;
}

/* Copies what @c's attempts need from @co (the caller's may go when
 * zcrpc_call_start returns). */
static zcrpc_status keep_opts(struct lbcall *c, const zcrpc_call_opts *co)
{
	c->co = *co;
	if (co->n_md) {
		c->md = zcrpc__md_dup(co->md, co->n_md);
		if (!c->md)
			return ZCRPC_RESOURCE_EXHAUSTED;
		c->co.md = c->md;
	}
	if (co->attachment) {
		c->att = *co->attachment;
		c->co.attachment = &c->att;
	}
	if (co->reply_into) {
		c->rinto = *co->reply_into;
		c->co.reply_into = &c->rinto;
	}
	if (co->hash_key) {
		c->key = malloc(co->hash_key_len ? co->hash_key_len : 1);
		if (!c->key)
			return ZCRPC_RESOURCE_EXHAUSTED;
		memcpy(c->key, co->hash_key, co->hash_key_len);
		c->co.hash_key = c->key;
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc__lb_call_start(zcrpc_channel *ch, uint32_t method,
				  size_t len, zcrpc_fill_fn fill,
				  void *fill_ctx, const zcrpc_call_opts *o,
				  zcrpc_call_cb cb, void *arg,
				  zcrpc_call_id *id)
{
	struct zcrpc__lb *lb = ch->lb;
	zcrpc_call_opts co = call_opts_default;
	int64_t timeout_us;
	struct lbcall *c;
	zcrpc_status st;

	if (o && ZCRPC__ABI_IN(&co, o, ZCRPC__MIN_CALL_OPTS) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	if ((co.hash_key_len && !co.hash_key) ||
	    (co.flags & ~(uint64_t)ZCRPC_CALL_WAIT_FOR_READY) ||
	    co.timeout_us < 0 || (co.n_md && !co.md) ||
	    zcrpc__md_bytes(co.md, co.n_md) == (size_t)-1)
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc__lb_apply_report(lb); /* a report waiting goes first */
	c = zcrpc__call_table_take(&lb->calls);
	if (!c) {
		ch->start_why = "too many calls alive on the channel (max_calls)";
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	zcrpc__list_init(&c->link);
	zcrpc__list_init(&c->hlink);
	c->lb = lb;
	st = keep_opts(c, &co);
	if (st != ZCRPC_OK)
		goto err;
	c->method = method;
	c->cb = cb;
	c->arg = arg;
	c->len = len;
	c->wfr = !!(co.flags & ZCRPC_CALL_WAIT_FOR_READY);
	if (len <= lb->retry_buffer) { /* kept for the attempts after */
		c->req = malloc(len ? len : 1);
		if (!c->req) {
			st = ZCRPC_RESOURCE_EXHAUSTED;
			goto err;
		}
		if (len)
			fill(c->req, len, fill_ctx);
		c->kept = 1;
	} else {
		c->fill = fill;
		c->fill_ctx = fill_ctx;
	}
	timeout_us = co.timeout_us ? co.timeout_us : ch->o.default_timeout_us;
	c->deadline_ns = timeout_us ? zcrpc__now_ns() + timeout_us * 1000 : 0;
	c->pol = policy_of(lb, method);
	/* hedged: the request kept, no memory of the caller's in it */
	c->hedged = c->pol && c->pol->hedge_delay_ms > 0 && c->kept &&
		    !co.attachment && !co.reply_into;
	lb->last_call_ns = zcrpc__now_ns();
	ch->st.calls_started++;
	ch->st.in_flight++;
	st = attempt(lb, c, 1);
	if (st != ZCRPC_OK) {
		ch->st.calls_started--;
		ch->st.in_flight--;
		goto err;
	}
	if (id)
		*id = zcrpc__call_table_ref(&lb->calls, c);
	return ZCRPC_OK;

err:
	lbcall_free(lb, c);
	return st;
}

zcrpc_status zcrpc__lb_call_cancel(zcrpc_channel *ch, zcrpc_call_id id)
{
	struct zcrpc__lb *lb = ch->lb;
	struct lbcall *c = zcrpc__call_table_lookup(&lb->calls, (uint32_t)id);
	size_t k;

	if (!c || c->state == LB_DONE || c->cancelled)
		return ZCRPC_NOT_FOUND;
	c->cancelled = 1;
	if (c->state == LB_WAITING) {
		complete(lb, c, ZCRPC_CANCELLED, "cancelled by the caller");
		return ZCRPC_OK;
	}
	/* LIVE: the attempts end CANCELLED; if one ended already, its
	 * callback (on_attempt) turns its result into CANCELLED. */
	for (k = 0; k < ZCRPC__LB_MAX_LIVE; k++)
		if (c->slot[k].be)
			(void)zcrpc_call_cancel(c->slot[k].be->sub,
						c->slot[k].sub_id);
	return ZCRPC_OK;
}

int64_t zcrpc__lb_run_calls(struct zcrpc__lb *lb, int64_t now)
{
	struct zcrpc__list *n, *tmp, todo;
	int64_t due = 0;

	/* hedges due (hedge() takes each off the list, maybe back on) */
	zcrpc__list_init(&todo);
	zcrpc__list_foreach_safe(n, tmp, &lb->hedging) {
		struct lbcall *c = zcrpc__container_of(n, struct lbcall, hlink);

		if (c->hedge_at_ns <= now) {
			zcrpc__list_remove(&c->hlink);
			zcrpc__list_push_back(&todo, &c->hlink);
		} else if (!due || c->hedge_at_ns < due) {
			due = c->hedge_at_ns;
		}
	}
	while ((n = zcrpc__list_first(&todo))) {
		struct lbcall *c = zcrpc__container_of(n, struct lbcall, hlink);

		zcrpc__list_remove(&c->hlink);
		zcrpc__list_init(&c->hlink);
		(void)hedge(lb, c);
		if (zcrpc__list_linked(&c->hlink) &&
		    (!due || c->hedge_at_ns < due))
			due = c->hedge_at_ns;
	}

	while ((n = zcrpc__list_first(&lb->done))) {
		struct lbcall *c = lbcall_of(n);
		zcrpc_reply r = {.size = sizeof(r)};

		zcrpc__list_remove(&c->link);
		r.status = c->status;
		r.message = c->message;
		deliver(lb, c, &r);
	}
	/* The waiting whose time came go again (in order); the rest tell
	 * when they are due. */
	zcrpc__list_init(&todo);
	zcrpc__list_foreach_safe(n, tmp, &lb->waiting) {
		struct lbcall *c = lbcall_of(n);

		if ((c->deadline_ns && now >= c->deadline_ns) ||
		    c->retry_at_ns <= now) {
			zcrpc__list_remove(&c->link);
			zcrpc__list_push_back(&todo, &c->link);
			lb->ch->st.pending--;
			continue;
		}
		if (!due || c->retry_at_ns < due)
			due = c->retry_at_ns;
		if (c->deadline_ns && c->deadline_ns < due)
			due = c->deadline_ns;
	}
	while ((n = zcrpc__list_first(&todo))) {
		struct lbcall *c = lbcall_of(n);

		zcrpc__list_remove(&c->link);
		c->state = LB_LIVE; /* attempt() waits or completes it */
		(void)attempt(lb, c, 0);
	}
	/* attempt() may have completed some: deliver them now */
	while ((n = zcrpc__list_first(&lb->done))) {
		struct lbcall *c = lbcall_of(n);
		zcrpc_reply r = {.size = sizeof(r)};

		zcrpc__list_remove(&c->link);
		r.status = c->status;
		r.message = c->message;
		deliver(lb, c, &r);
	}
	return due;
}

void zcrpc__lb_detach_calls(struct zcrpc__lb *lb, struct zcrpc__backend *be,
			    const char *why, zcrpc_conn **risk, size_t *n_risk)
{
	uint32_t i;
	size_t k, r;

	for (i = 0; i < lb->calls.n; i++) {
		struct lbcall *c = zcrpc__call_table_at(&lb->calls, i);
		int here = 0;

		if (c->state != LB_LIVE)
			continue;
		for (k = 0; k < ZCRPC__LB_MAX_LIVE; k++) {
			struct lbatt *a = &c->slot[k];
			zcrpc_conn *conn;

			if (a->be != be)
				continue;
			here = 1;
			conn = zcrpc__ccall_detach(be->sub, a->sub_id, why);
			for (r = 0; conn && r < *n_risk && risk[r] != conn; r++)
				;
			if (conn && r == *n_risk && *n_risk < 2)
				risk[(*n_risk)++] = conn;
			be->live--;
			a->be = NULL;
			a->sub_id = 0;
			c->n_live--;
		}
		if (!here)
			continue;
		c->cancelled = 1;
		if (!c->n_live) /* its last attempt: the call ends */
			complete(lb, c, ZCRPC_CANCELLED, why);
	}
}

void zcrpc__lb_cancel_all(struct zcrpc__lb *lb)
{
	struct zcrpc__list *n, *tmp;
	uint32_t i;

	for (i = 0; i < lb->calls.n; i++) {
		struct lbcall *c = zcrpc__call_table_at(&lb->calls, i);

		if (c->state != LB_FREE)
			c->cancelled = 1;
	}
	zcrpc__list_foreach_safe(n, tmp, &lb->waiting)
		complete(lb, lbcall_of(n), ZCRPC_CANCELLED, "channel destroyed");
	zcrpc__lb_run_calls(lb, zcrpc__now_ns());
}

void zcrpc__lb_calls_fini(struct zcrpc__lb *lb)
{
	zcrpc__call_table_fini(&lb->calls);
}

void zcrpc_retry_policy_init_sized(zcrpc_retry_policy *caller, size_t size)
{
	zcrpc_retry_policy d;

	memset(&d, 0, sizeof(d));
	d.size = sizeof(d);
	d.max_attempts = 3;
	d.initial_backoff_ms = 10;
	d.max_backoff_ms = 1000;
	d.retryable = 1u << ZCRPC_UNAVAILABLE;
	zcrpc__abi_init(caller, size, &d, sizeof(d));
}

zcrpc_status zcrpc_channel_set_retry(zcrpc_channel *ch, uint32_t method,
				     const zcrpc_retry_policy *p)
{
	zcrpc_retry_policy d;
	struct zcrpc__lb *lb;
	size_t i;

	if (!ch)
		return ZCRPC_INVALID_ARGUMENT;
	lb = ch->lb;
	if (!lb || ch->st.calls_started)
		return ZCRPC_FAILED_PRECONDITION;
	for (i = 0; i < lb->n_pol && lb->pol[i].method != method; i++)
		;
	if (!p) {
		if (i < lb->n_pol)
			lb->pol[i] = lb->pol[--lb->n_pol];
		return ZCRPC_OK;
	}
	zcrpc_retry_policy_init(&d);
	if (ZCRPC__ABI_IN(&d, p, offsetof(zcrpc_retry_policy, retryable) +
					 sizeof(uint32_t)) != ZCRPC_OK ||
	    d.max_attempts < 2 || d.max_attempts > 10 ||
	    d.initial_backoff_ms <= 0 ||
	    d.max_backoff_ms < d.initial_backoff_ms || d.hedge_delay_ms < 0 ||
	    (d.retryable & (1u << ZCRPC_OK)))
		return ZCRPC_INVALID_ARGUMENT;
	if (i == lb->n_pol) {
		if (lb->n_pol == ZCRPC__LB_MAX_POLICIES)
			return ZCRPC_RESOURCE_EXHAUSTED;
		lb->n_pol++;
	}
	lb->pol[i].method = method;
	lb->pol[i].p = d;
	return ZCRPC_OK;
}
