/* zcrpc — a target channel's life and its backend set: made from a target
 * string (its resolver started, its picker chosen), the resolver's
 * reports applied as a new set (backends kept by address, new ones given
 * a subchannel, those gone retired until their calls end), each
 * backend's state read off its subchannel, the pick, the timer that
 * drives resolution, reconnection and the waiting calls, and the
 * counters summed over the backends. The calls are in lb_call.c. */
#include "lb_internal.h"
#include "stream_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000LL
/* While something waits (a backend down, a call without one) the timer
 * looks again at least this often. */
#define LB_POLL_NS (100 * MS)
/* A backend's failure asks the resolver again, at most this often. */
#define LB_REFRESH_MIN_NS (100 * MS)

static void on_timer(struct zcrpc__timer *t, int64_t now);

void zcrpc__lb_arm(struct zcrpc__lb *lb, int64_t due_ns)
{
	zcrpc__timer_start(lb->ch->w, &lb->timer, due_ns);
}

zcrpc_backend_state zcrpc__lb_backend_state(const struct zcrpc__backend *be)
{
	const zcrpc_channel *sub = be->sub;

	if (sub->conn)
		return sub->conn_up ? ZCRPC_BACKEND_READY
				    : ZCRPC_BACKEND_CONNECTING;
	if (zcrpc__now_ns() < sub->next_attempt_ns)
		return ZCRPC_BACKEND_DOWN;
	return ZCRPC_BACKEND_IDLE;
}

static void fill_view(const struct zcrpc__backend *be, zcrpc_backend_info *v)
{
	const zcrpc_channel *sub = be->sub;

	v->size = sizeof(*v);
	v->host = be->host;
	v->port = be->port;
	v->state = zcrpc__lb_backend_state(be);
	if (be->unhealthy) /* out of the pick set until a check says SERVING */
		v->state = ZCRPC_BACKEND_DOWN;
	v->in_flight = sub->st.in_flight;
	v->credits_used = sub->st.in_flight - sub->st.pending;
	v->picks = be->picks;
	v->calls_ok = be->ok;
	v->calls_failed = be->failed;
}

struct zcrpc__backend *zcrpc__lb_pick(struct zcrpc__lb *lb, const void *key,
				      size_t key_len, const uint64_t *excl,
				      size_t n_excl)
{
	size_t i, j;
	int idx;

	if (!lb->n)
		return NULL;
	for (i = 0; i < lb->n; i++) {
		fill_view(lb->b[i], &lb->view[i]);
		for (j = 0; j < n_excl; j++)
			if (excl[j] == lb->b[i]->id)
				lb->view[i].state = ZCRPC_BACKEND_DOWN;
	}
	idx = lb->picker.pick(lb->pstate, lb->view, lb->n, key, key_len,
			      lb->picker.arg);
	if (idx < 0 || (size_t)idx >= lb->n ||
	    lb->view[idx].state == ZCRPC_BACKEND_DOWN)
		return NULL;
	return lb->b[idx];
}

void zcrpc__lb_refresh_soon(struct zcrpc__lb *lb)
{
	int64_t now = zcrpc__now_ns();

	if (!lb->rops.refresh)
		return;
	if (!lb->next_refresh_ns || lb->next_refresh_ns > now + LB_REFRESH_MIN_NS)
		lb->next_refresh_ns = now + LB_REFRESH_MIN_NS;
	zcrpc__lb_arm(lb, lb->next_refresh_ns);
}

/* Adds what a subchannel's counters @s did since @b (all but the calls',
 * which the target channel keeps itself, and the open streams, counted
 * apart) to @sum. */
static void add_counters(zcrpc_channel_stats *sum, const zcrpc_channel_stats *s,
			 const zcrpc_channel_stats *b)
{
#define ADD(f) sum->f += s->f - b->f
	ADD(late_replies);
	ADD(queue_full);
	ADD(reconnects);
	ADD(copied_bytes);
	ADD(grant_timeouts);
	ADD(bulk_bad_writes);
	ADD(protocol_errors);
	ADD(cancels_lost);
	ADD(streams_started);
	ADD(streams_ok);
	ADD(streams_failed);
	ADD(stream_msgs_sent);
	ADD(stream_msgs_recv);
	ADD(stream_bytes_sent);
	ADD(stream_bytes_recv);
	ADD(stream_bulk_msgs);
	ADD(stream_batches);
	ADD(stream_batched_frames);
	ADD(stream_bulk_msgs_recv);
#undef ADD
}

/* @be leaves its subchannel: this channel's attempts, health check and
 * streams there end CANCELLED (their callbacks run inside, the attempts'
 * from zcrpc__lb_run_calls), its counters are kept, and the subchannel
 * loses a user (the last destroys it, its connection closed in order).
 * A shared connection through which the device may still use a caller's
 * memory for one of them (an attachment being written, a reply_into
 * granted, a stream message written in place) is dropped first, failing
 * the calls its other users have on it: nothing else ends the device's
 * hold before the caller hears CANCELLED. */
static void backend_destroy(struct zcrpc__lb *lb, struct zcrpc__backend *be)
{
	static const char why[] = "channel destroyed";
	zcrpc_channel *sub = be->sub;
	zcrpc_conn *risk[2];
	size_t n_risk = 0, i;

	zcrpc__lb_detach_calls(lb, be, why, risk, &n_risk);
	if (be->check_out) {
		(void)zcrpc__ccall_detach(sub, be->check_call, why);
		be->check_out = 0;
	}
	(void)zcrpc__cstreams_of_owner(sub, lb->ch, risk, &n_risk);
	if (sub->share_refs > 1)
		for (i = 0; i < n_risk; i++)
			zcrpc__channel_drop_conn(
				sub, risk[i],
				"connection dropped: a channel sharing it was "
				"destroyed while the device used its memory");
	zcrpc__cstreams_end_owner(sub, lb->ch, why);
	add_counters(&lb->gone, &sub->st, &be->base);
	zcrpc__list_remove(&be->ulink);
	zcrpc__subchannel_put(sub);
	free(be);
}

static int backend_busy(struct zcrpc__lb *lb, const struct zcrpc__backend *be)
{
	return be->live || be->check_out ||
	       zcrpc__cstreams_of_owner(be->sub, lb->ch, NULL, NULL);
}

void zcrpc__lb_reap_retired(struct zcrpc__lb *lb)
{
	struct zcrpc__list *n, *next;

	zcrpc__list_foreach_safe(n, next, &lb->retired) {
		struct zcrpc__backend *be =
			zcrpc__container_of(n, struct zcrpc__backend, link);

		if (!backend_busy(lb, be)) {
			zcrpc__list_remove(&be->link);
			backend_destroy(lb, be);
		}
	}
}

static struct zcrpc__backend *backend_new(struct zcrpc__lb *lb,
					  const zcrpc_address *a)
{
	struct zcrpc__backend *be = calloc(1, sizeof(*be));

	if (!be)
		return NULL;
	snprintf(be->host, sizeof(be->host), "%s", a->host);
	snprintf(be->port, sizeof(be->port), "%s", a->port);
	zcrpc__list_init(&be->link);
	if (zcrpc__subchannel_get(lb->ch, be->host, be->port, &be->sub) !=
	    ZCRPC_OK) {
		free(be);
		return NULL;
	}
	be->lb = lb;
	be->id = ++lb->last_be_id;
	be->base = be->sub->st;
	zcrpc__list_push_back(&be->sub->users, &be->ulink);
	return be;
}

/* The backend of address @a among the set and the retired, or NULL. */
static struct zcrpc__backend *find_backend(struct zcrpc__lb *lb,
					   const zcrpc_address *a)
{
	struct zcrpc__list *n;
	size_t i;

	for (i = 0; i < lb->n; i++)
		if (!strcmp(lb->b[i]->host, a->host) &&
		    !strcmp(lb->b[i]->port, a->port))
			return lb->b[i];
	zcrpc__list_foreach(n, &lb->retired) {
		struct zcrpc__backend *be =
			zcrpc__container_of(n, struct zcrpc__backend, link);

		if (!strcmp(be->host, a->host) && !strcmp(be->port, a->port))
			return be;
	}
	return NULL;
}

/* Makes @a[0..@n) the set: backends kept by address (from the set or the
 * retired), new ones made, those left out retired (or destroyed when no
 * call is on them). On failure (no memory, the picker refused) nothing
 * changed. */
static zcrpc_status set_backends(struct zcrpc__lb *lb, const zcrpc_address *a,
				 size_t n)
{
	struct zcrpc__backend **nb = calloc(n ? n : 1, sizeof(*nb));
	zcrpc_backend_info *nv = calloc(n ? n : 1, sizeof(*nv));
	unsigned char *fresh = calloc(n ? n : 1, 1);
	void *pstate = lb->pstate;
	size_t i, j, k = 0;

	if (!nb || !nv || !fresh)
		goto fail;
	for (i = 0; i < n; i++) {
		for (j = 0; j < k; j++) /* duplicates count once */
			if (!strcmp(nb[j]->host, a[i].host) &&
			    !strcmp(nb[j]->port, a[i].port))
				break;
		if (j < k)
			continue;
		nb[k] = find_backend(lb, &a[i]);
		if (!nb[k]) {
			nb[k] = backend_new(lb, &a[i]);
			if (!nb[k])
				goto fail;
			fresh[k] = 1;
		}
		k++;
	}
	for (i = 0; i < k; i++)
		fill_view(nb[i], &nv[i]);
	if (lb->picker.update &&
	    lb->picker.update(&pstate, nv, k, lb->picker.arg) != ZCRPC_OK)
		goto fail;
	lb->pstate = pstate;
	/* commit: the kept leave the retired; the old left out retire */
	for (i = 0; i < k; i++)
		if (zcrpc__list_linked(&nb[i]->link))
			zcrpc__list_remove(&nb[i]->link);
	for (i = 0; i < lb->n; i++) {
		struct zcrpc__backend *be = lb->b[i];

		for (j = 0; j < k && nb[j] != be; j++)
			;
		if (j < k)
			continue;
		if (backend_busy(lb, be))
			zcrpc__list_push_back(&lb->retired, &be->link);
		else
			backend_destroy(lb, be);
	}
	free(lb->b);
	free(lb->view);
	free(fresh);
	lb->b = nb;
	lb->view = nv;
	lb->n = k;
	return ZCRPC_OK;

fail:
	for (i = 0; nb && fresh && i < k; i++)
		if (fresh[i])
			backend_destroy(lb, nb[i]);
	free(nb);
	free(nv);
	free(fresh);
	return ZCRPC_RESOURCE_EXHAUSTED;
}

/* Starts connecting the backends that are IDLE (policies that spread
 * calls over all of them want them all ready); one whose connection was
 * closed idle (the cap, the idle timeout) only once this channel makes a
 * call again. */
static void kick_idle(struct zcrpc__lb *lb)
{
	zcrpc_status st;
	size_t i;

	if (!strcmp(lb->picker.name, "pick_first"))
		return;
	for (i = 0; i < lb->n; i++) {
		zcrpc_channel *sub = lb->b[i]->sub;

		if (zcrpc__lb_backend_state(lb->b[i]) != ZCRPC_BACKEND_IDLE ||
		    (sub->idle_closed && lb->last_call_ns <= sub->idle_closed_ns))
			continue;
		st = zcrpc__channel_connect(sub);
		if (st != ZCRPC_OK && st != ZCRPC_RESOURCE_EXHAUSTED)
			/* try again later; refused at the cap, it stays IDLE
			 * (channel_cap.c): a call finds the refusal itself */
			sub->next_attempt_ns = zcrpc__now_ns() +
					       (int64_t)sub->o.backoff_initial_ms * MS;
	}
}

void zcrpc__lb_apply_report(struct zcrpc__lb *lb)
{
	struct zcrpc_resolver *r = lb->res;
	zcrpc_address *a;
	size_t n;
	zcrpc_status st;
	char why[sizeof(r->why)];

	pthread_mutex_lock(&r->mu);
	if (!r->has_report) {
		pthread_mutex_unlock(&r->mu);
		return;
	}
	a = r->addrs;
	n = r->n;
	st = r->st;
	snprintf(why, sizeof(why), "%s", r->why);
	r->addrs = NULL;
	r->n = 0;
	r->has_report = 0;
	pthread_mutex_unlock(&r->mu);

	lb->resolved = 1;
	if (st != ZCRPC_OK) { /* a failed resolution keeps the set */
		lb->res_status = st;
		snprintf(lb->res_why, sizeof(lb->res_why), "%s", why);
	} else if (set_backends(lb, a, n) != ZCRPC_OK) {
		lb->res_status = ZCRPC_RESOURCE_EXHAUSTED;
		snprintf(lb->res_why, sizeof(lb->res_why),
			 "out of memory applying the resolver's %zu addresses",
			 n);
	} else {
		lb->res_status = ZCRPC_OK;
		snprintf(lb->res_why, sizeof(lb->res_why), "%s",
			 n ? "" : "the resolver returned no addresses");
	}
	free(a);
	kick_idle(lb);
	zcrpc__lb_arm(lb, zcrpc__now_ns()); /* waiting calls may go now */
}

/* ---- the resolver's handle ---- */

/* Every live handle, by id: a posted report names its handle by id, so a
 * post that outlives its channel (or is dropped with its worker) holds
 * nothing. Handles are freed only on their worker's thread, where the
 * posts run too. */
static pthread_mutex_t res_mu = PTHREAD_MUTEX_INITIALIZER;
static struct zcrpc__list res_all = {&res_all, &res_all};
static uint64_t res_next_id = 1;

static void res_add(struct zcrpc_resolver *r)
{
	pthread_mutex_lock(&res_mu);
	r->id = res_next_id++;
	zcrpc__list_push_back(&res_all, &r->link);
	pthread_mutex_unlock(&res_mu);
}

/* Unlinks and frees @r (on its worker's thread, its resolver stopped). */
static void res_free(struct zcrpc_resolver *r)
{
	pthread_mutex_lock(&res_mu);
	zcrpc__list_remove(&r->link);
	pthread_mutex_unlock(&res_mu);
	free(r->addrs);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

static void report_posted(zcrpc_worker *w, void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	struct zcrpc_resolver *r = NULL;
	struct zcrpc__list *n;
	struct zcrpc__lb *lb = NULL;

	pthread_mutex_lock(&res_mu);
	zcrpc__list_foreach(n, &res_all) {
		struct zcrpc_resolver *c =
			zcrpc__container_of(n, struct zcrpc_resolver, link);

		if (c->id == id && c->w == w) {
			r = c;
			break;
		}
	}
	if (r) {
		pthread_mutex_lock(&r->mu);
		r->posted = 0;
		lb = r->lb;
		pthread_mutex_unlock(&r->mu);
	}
	pthread_mutex_unlock(&res_mu);
	if (lb) /* on the worker's thread: the channel cannot go meanwhile */
		zcrpc__lb_apply_report(lb);
}

zcrpc_status zcrpc_resolver_set(zcrpc_resolver *r, const zcrpc_address *addrs,
				size_t n, zcrpc_status st, const char *why)
{
	zcrpc_address *a;
	size_t i, bytes = 0, hl, pl;
	char *p;
	int post;

	if (!r || (n && !addrs) || n > ZCRPC_MAX_BACKENDS)
		return ZCRPC_INVALID_ARGUMENT;
	for (i = 0; i < n; i++) {
		if (!addrs[i].host || !addrs[i].port)
			return ZCRPC_INVALID_ARGUMENT;
		hl = strlen(addrs[i].host);
		pl = strlen(addrs[i].port);
		if (!hl || hl > ZCRPC_HOST_MAX || !pl || pl > ZCRPC_PORT_MAX)
			return ZCRPC_INVALID_ARGUMENT;
		bytes += hl + pl + 2;
	}
	a = malloc(n * sizeof(*a) + bytes + 1);
	if (!a)
		return ZCRPC_RESOURCE_EXHAUSTED;
	p = (char *)(a + n);
	for (i = 0; i < n; i++) {
		hl = strlen(addrs[i].host) + 1;
		pl = strlen(addrs[i].port) + 1;
		a[i].host = memcpy(p, addrs[i].host, hl);
		p += hl;
		a[i].port = memcpy(p, addrs[i].port, pl);
		p += pl;
	}
	pthread_mutex_lock(&r->mu);
	free(r->addrs);
	r->addrs = a;
	r->n = n;
	r->st = st;
	snprintf(r->why, sizeof(r->why), "%s",
		 why ? why : st == ZCRPC_OK ? "" : zcrpc_status_str(st));
	r->has_report = 1;
	post = r->lb && !r->posted;
	if (post)
		r->posted = 1;
	pthread_mutex_unlock(&r->mu);
	if (post && zcrpc_worker_post(r->w, report_posted,
				      (void *)(uintptr_t)r->id) != ZCRPC_OK) {
		pthread_mutex_lock(&r->mu);
		r->posted = 0;
		pthread_mutex_unlock(&r->mu);
		/* the timer's next look applies it */
	}
	return ZCRPC_OK;
}

/* ---- health checks ---- */

static void check_done(zcrpc_channel *sub, const zcrpc_reply *r, void *arg)
{
	struct zcrpc__backend *be = arg;
	const uint8_t *p = r->data;
	int serving;

	(void)sub;
	be->check_out = 0;
	/* HealthCheckResponse: status = field 1, a varint; our own encoder
	 * writes it as two bytes, others may too (values < 128) */
	serving = r->status == ZCRPC_UNIMPLEMENTED ||
		  (r->status == ZCRPC_OK && r->len == 2 && p[0] == 0x08 &&
		   p[1] == ZCRPC_SERVING_SERVING);
	if (be->unhealthy != !serving)
		zcrpc__lb_arm(be->lb, zcrpc__now_ns());
	be->unhealthy = !serving;
}

static void copy_fill(void *dst, size_t len, void *ctx)
{
	memcpy(dst, ctx, len);
}

/* Sends the checks that are due; returns when the next one is. */
static int64_t run_checks(struct zcrpc__lb *lb, int64_t now)
{
	zcrpc_call_opts co;
	int64_t due = 0;
	size_t i;

	if (!lb->check_ns)
		return 0;
	zcrpc_call_opts_init(&co);
	co.timeout_us = lb->check_ns / 1000 > 1000000 ? 1000000
						      : lb->check_ns / 1000;
	for (i = 0; i < lb->n; i++) {
		struct zcrpc__backend *be = lb->b[i];

		if (zcrpc__lb_backend_state(be) != ZCRPC_BACKEND_READY) {
			/* checked as soon as it is connected again; until a
			 * check says SERVING an unhealthy one stays out */
			be->next_check_ns = 0;
			continue;
		}
		/* no interceptors: a check is not the channel's call */
		if (!be->check_out && now >= be->next_check_ns &&
		    zcrpc__call_start_ics(be->sub, lb->check_id, lb->check_len,
					  copy_fill, lb->check_req, &co,
					  check_done, be, &be->check_call,
					  NULL) == ZCRPC_OK) {
			be->check_out = 1;
			be->next_check_ns = now + lb->check_ns;
		}
		if (!due || be->next_check_ns < due)
			due = be->next_check_ns;
	}
	return due;
}

/* ---- the channel ---- */

static void on_timer(struct zcrpc__timer *t, int64_t now)
{
	struct zcrpc__lb *lb = zcrpc__container_of(t, struct zcrpc__lb, timer);
	int64_t due = 0, d;
	size_t i;
	int waiting = 0;

	zcrpc__lb_apply_report(lb);
	if (lb->rops.refresh && lb->next_refresh_ns &&
	    now >= lb->next_refresh_ns) {
		lb->next_refresh_ns = lb->rops.interval_ms
					      ? now + lb->rops.interval_ms * MS
					      : 0;
		lb->rops.refresh(lb->rstate, lb->rops.arg);
	}
	kick_idle(lb);
	zcrpc__lb_reap_retired(lb);
	d = zcrpc__lb_run_calls(lb, now);
	if (d)
		due = d;
	d = run_checks(lb, now);
	if (d && (!due || d < due))
		due = d;
	for (i = 0; i < lb->n; i++) /* a backend's backoff ends */
		if (zcrpc__lb_backend_state(lb->b[i]) == ZCRPC_BACKEND_DOWN &&
		    (!due || lb->b[i]->sub->next_attempt_ns < due))
			due = lb->b[i]->sub->next_attempt_ns;
	waiting = !zcrpc__list_empty(&lb->waiting) ||
		  !zcrpc__list_empty(&lb->retired);
	for (i = 0; i < lb->n && !waiting; i++) /* one not connected yet */
		waiting = strcmp(lb->picker.name, "pick_first") &&
			  zcrpc__lb_backend_state(lb->b[i]) == ZCRPC_BACKEND_IDLE;
	if (waiting && (!due || due > now + LB_POLL_NS))
		due = now + LB_POLL_NS;
	if (lb->next_refresh_ns && (!due || lb->next_refresh_ns < due))
		due = lb->next_refresh_ns;
	if (due)
		zcrpc__lb_arm(lb, due > now ? due : now + 1);
}

zcrpc_status zcrpc_channel_create_target(zcrpc_worker *w, const char *target,
					 const zcrpc_channel_opts *o,
					 zcrpc_channel **out)
{
	struct zcrpc__lb *lb = NULL;
	struct zcrpc_resolver *r = NULL;
	const zcrpc_picker_ops *pk;
	const char *name;
	zcrpc_channel *ch;
	zcrpc_status st;

	if (!w || !target || !out)
		return ZCRPC_INVALID_ARGUMENT;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return ZCRPC_RESOURCE_EXHAUSTED;
	st = zcrpc__channel_load_opts(ch, o);
	if (st != ZCRPC_OK)
		goto err;
	st = ZCRPC_INVALID_ARGUMENT;
	if (ch->o.picker) {
		pk = ch->o.picker;
		if (pk->size < offsetof(zcrpc_picker_ops, arg) + sizeof(void *) ||
		    !pk->name || !pk->pick)
			goto err;
	} else {
		pk = zcrpc__lb_builtin_picker(ch->o.lb_policy ? ch->o.lb_policy
							      : "pick_first");
		if (!pk)
			goto err;
	}
	st = ZCRPC_RESOURCE_EXHAUSTED;
	lb = calloc(1, sizeof(*lb));
	r = calloc(1, sizeof(*r));
	if (!lb || !r || !(lb->target = strdup(target)))
		goto err;
	lb->ch = ch;
	ch->lb = lb;
	ch->w = w;
	ch->down_status = ZCRPC_UNAVAILABLE;
	lb->picker = *pk;
	ch->o.picker = NULL;
	ch->o.lb_policy = NULL; /* the caller's strings are not kept */
	lb->retry_buffer = ch->o.retry_buffer ? ch->o.retry_buffer : 65536;
	if (ch->o.health_check_ms < 0 ||
	    (ch->o.health_service && strlen(ch->o.health_service) > 200)) {
		st = ZCRPC_INVALID_ARGUMENT;
		goto err;
	}
	lb->check_ns = ch->o.health_check_ms * MS;
	lb->check_id = zcrpc_method_id(ZCRPC_HEALTH_CHECK);
	if (ch->o.health_service && *ch->o.health_service) {
		/* HealthCheckRequest: field 1 (string), its length, the name */
		size_t n = strlen(ch->o.health_service);

		lb->check_req[0] = 0x0a;
		if (n < 128) { /* the length, a varint */
			lb->check_req[1] = (uint8_t)n;
			memcpy(lb->check_req + 2, ch->o.health_service, n);
			lb->check_len = n + 2;
		} else {
			lb->check_req[1] = (uint8_t)(0x80 | (n & 0x7f));
			lb->check_req[2] = (uint8_t)(n >> 7);
			memcpy(lb->check_req + 3, ch->o.health_service, n);
			lb->check_len = n + 3;
		}
	}
	ch->o.health_service = NULL; /* encoded above; not kept */
	lb->rng = (uint64_t)zcrpc__now_ns() | 1;
	zcrpc__list_init(&lb->retired);
	zcrpc__list_init(&lb->waiting);
	zcrpc__list_init(&lb->hedging);
	zcrpc__list_init(&lb->done);
	lb->timer.fn = on_timer;
	if (zcrpc__call_table_init(&lb->calls, ch->o.max_calls,
				   sizeof(struct lbcall), NULL, NULL) != ZCRPC_OK)
		goto err_table;
	if (lb->picker.update &&
	    lb->picker.update(&lb->pstate, NULL, 0, lb->picker.arg) != ZCRPC_OK)
		goto err_picker;
	pthread_mutex_init(&r->mu, NULL);
	r->w = w;
	r->lb = lb;
	lb->res = r;
	res_add(r);
	st = zcrpc__target_resolver(lb->target, &lb->rops, &name);
	if (st == ZCRPC_OK)
		st = lb->rops.start(r, name, &lb->rstate, lb->rops.arg);
	if (st != ZCRPC_OK) {
		res_free(r);
		r = NULL;
		goto err_picker;
	}
	if (lb->rops.refresh && lb->rops.interval_ms)
		lb->next_refresh_ns = zcrpc__now_ns() + lb->rops.interval_ms * MS;
	zcrpc__lb_apply_report(lb); /* a static list is there already */
	zcrpc__lb_arm(lb, zcrpc__now_ns());
	*out = ch;
	return ZCRPC_OK;

err_picker:
	if (lb->picker.destroy)
		lb->picker.destroy(lb->pstate, lb->picker.arg);
	while (lb->n)
		backend_destroy(lb, lb->b[--lb->n]);
	free(lb->b);
	free(lb->view);
	zcrpc__call_table_fini(&lb->calls);
err_table:
	st = st == ZCRPC_OK ? ZCRPC_RESOURCE_EXHAUSTED : st;
err:
	if (lb)
		free(lb->target);
	free(lb);
	free(r);
	free(ch->src_addr);
	explicit_bzero(ch->psk, sizeof(ch->psk));
	free(ch);
	return st;
}

void zcrpc__lb_destroy(zcrpc_channel *ch)
{
	struct zcrpc__lb *lb = ch->lb;
	struct zcrpc_resolver *r = lb->res;
	struct zcrpc__list *n;

	ch->destroying = 1;
	lb->rops.stop(lb->rstate, lb->rops.arg);
	res_free(r); /* a report still posted finds nothing */
	zcrpc__lb_cancel_all(lb);
	while (lb->n) /* their calls' callbacks run inside */
		backend_destroy(lb, lb->b[--lb->n]);
	while ((n = zcrpc__list_first(&lb->retired))) {
		zcrpc__list_remove(n);
		backend_destroy(lb, zcrpc__container_of(n, struct zcrpc__backend,
							 link));
	}
	zcrpc__lb_run_calls(lb, zcrpc__now_ns()); /* results that came */
	zcrpc__timer_stop(ch->w, &lb->timer);
	if (lb->picker.destroy)
		lb->picker.destroy(lb->pstate, lb->picker.arg);
	zcrpc__lb_calls_fini(lb);
	free(lb->b);
	free(lb->view);
	free(lb->target);
	free(lb);
	free(ch->src_addr);
	explicit_bzero(ch->psk, sizeof(ch->psk));
	free(ch);
}

void zcrpc__lb_get_stats(const zcrpc_channel *ch, zcrpc_channel_stats *sum)
{
	const struct zcrpc__lb *lb = ch->lb;
	struct zcrpc__list *n;
	size_t i;

	static const zcrpc_channel_stats zero;
	const struct zcrpc__backend *be;

	*sum = ch->st;
	add_counters(sum, &lb->gone, &zero);
	for (i = 0; i < lb->n; i++) {
		be = lb->b[i];
		add_counters(sum, &be->sub->st, &be->base);
		sum->streams_open += zcrpc__cstreams_of_owner(
			be->sub, ch, NULL, NULL);
	}
	zcrpc__list_foreach(n, &lb->retired) {
		be = zcrpc__container_of(n, struct zcrpc__backend, link);
		add_counters(sum, &be->sub->st, &be->base);
		sum->streams_open += zcrpc__cstreams_of_owner(
			be->sub, ch, NULL, NULL);
	}
}

size_t zcrpc_channel_get_backends(const zcrpc_channel *ch,
				  zcrpc_backend_info *out, size_t max,
				  size_t info_size)
{
	struct zcrpc__backend one;
	zcrpc_backend_info v;
	size_t i, n;

	if (!ch)
		return 0;
	if (!ch->lb) { /* the one server */
		memset(&one, 0, sizeof(one));
		snprintf(one.host, sizeof(one.host), "%s", ch->host);
		snprintf(one.port, sizeof(one.port), "%s", ch->port);
		one.sub = (zcrpc_channel *)(uintptr_t)ch;
		one.ok = ch->st.calls_ok;
		one.failed = ch->st.calls_failed;
		one.picks = ch->st.calls_started;
		if (max && out) {
			fill_view(&one, &v);
			v.host = ch->host; /* one's strings go with it */
			v.port = ch->port;
			ZCRPC__ABI_OUT(out, info_size, &v);
		}
		return 1;
	}
	n = ch->lb->n;
	for (i = 0; out && i < n && i < max; i++) {
		fill_view(ch->lb->b[i], &v);
		ZCRPC__ABI_OUT((char *)out + i * info_size, info_size, &v);
	}
	return n;
}

zcrpc_status zcrpc__lb_stream_start(zcrpc_channel *ch, uint32_t method,
				    const zcrpc_stream_opts *o,
				    const zcrpc_stream_handlers *h,
				    zcrpc_stream **out)
{
	struct zcrpc__backend *be;
	zcrpc_status st;

	zcrpc__lb_apply_report(ch->lb);
	be = zcrpc__lb_pick(ch->lb, NULL, 0, NULL, 0);
	if (!be) {
		ch->st.no_backend++;
		return ZCRPC_UNAVAILABLE;
	}
	st = zcrpc__stream_start_ics(be->sub, method, o, h, &ch->ics, ch, out);
	if (st == ZCRPC_OK) {
		be->picks++;
		ch->made_streams = 1;
	}
	return st;
}
