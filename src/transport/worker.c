/* zcrpc — the worker: event loop over the CM channel, completion channels,
 * listeners, a timerfd for deadlines and keepalive checks, an eventfd for
 * setup threads and functions posted from other threads. */
#include "internal.h"
#include "../core/abi.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define ZCRPC_MAX_EVENTS 32
/* CM events handled per turn, at most (the channel stays readable). */
#define ZCRPC_CM_EVENTS_PER_TURN 64
/* A turn that does not sleep reads the epoll set (CM events, accepts,
 * setup-thread results, device events, the timerfd) once this long passed
 * since it was last read by the turn's clock (a coarse one moves at its
 * tick), or after this many turns, whichever comes first: busy or idle,
 * so steady traffic never starves those sources and an idle busy-poll
 * pass costs no system call. A turn about to sleep reads it with its
 * sleeping epoll_wait. */
#define ZCRPC_EPOLL_PERIOD_NS (100LL * 1000)
#define ZCRPC_EPOLL_TURNS     64
/* CLOCK_MONOTONIC_COARSE is used only with a tick at most this long. */
#define ZCRPC_COARSE_MAX_NS (10LL * 1000 * 1000)

int64_t zcrpc__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CLOCK_MONOTONIC_COARSE's tick, or 0 when it has none worth using. */
static int64_t coarse_res_ns(void)
{
	struct timespec ts;
	int64_t r;

	if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts))
		return 0;
	r = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
	return r > 0 && r <= ZCRPC_COARSE_MAX_NS ? r : 0;
}

/* The clock of a progress turn, read once per turn. CLOCK_MONOTONIC_COARSE
 * (the time at the last tick: never a system call, where the precise
 * clock may be one — a guest on HPET) is at most one tick behind
 * CLOCK_MONOTONIC; it serves what needs no better than a tick: the epoll
 * schedule, last_active_ns / last_data_ns and so keepalive (seconds) and
 * the idle credit release. Timers need ms (call deadlines) or run "now"
 * (deferred work): a turn whose earliest timer falls due within a tick
 * reads CLOCK_MONOTONIC, so no timer runs later than with it. */
static int64_t turn_now(const zcrpc_worker *w)
{
	const struct zcrpc__timer *t = w->timers.min;
	struct timespec ts;
	int64_t now;

	if (!w->coarse_res_ns || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts))
		return zcrpc__now_ns();
	now = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
	if (t && t->due_ns <= now + w->coarse_res_ns)
		return zcrpc__now_ns();
	return now;
}

void zcrpc__worker_seterr(zcrpc_worker *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
	zcrpc__log(ZCRPC_LOG_WARN, "worker %p: %s", (void *)w, w->err);
}

const char *zcrpc_worker_get_error(const zcrpc_worker *w)
{
	return w ? w->err : "";
}

/* Why this thread's last zcrpc_worker_create / zcrpc_context_create
 * failed (zcrpc_last_error). */
static _Thread_local char last_err[320];

void zcrpc__set_last_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_err, sizeof(last_err), fmt, ap);
	va_end(ap);
}

const char *zcrpc_last_error(void)
{
	return last_err;
}

int zcrpc__epoll_add(zcrpc_worker *w, int fd, struct zcrpc__src *src)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = src};
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static int64_t keepalive_period_ns(const zcrpc_worker *w)
{
	int64_t p = (int64_t)w->opts.keepalive_ms * 1000000LL / 2;

	return p > 0 ? p : 1;
}

/* The keepalive timer: probes every established connection idle for
 * keepalive_ms that has no probe outstanding and room in its send ring (a
 * full ring has work in flight that finds a dead peer as well), and lets
 * one that sent nothing for as long give its extra credits back (RELEASE,
 * credits.c). Checks again in keepalive_ms / 2 while any connection is
 * established. */
static void check_keepalives(struct zcrpc__timer *t, int64_t now)
{
	zcrpc_worker *w = zcrpc__container_of(t, zcrpc_worker, keepalive);
	int64_t idle = (int64_t)w->opts.keepalive_ms * 1000000LL;
	struct zcrpc__list *it;
	zcrpc_conn *c;
	int any = 0;

	zcrpc__foreach_conn(c, it, w) {
		if (c->state != ZCRPC_CONN_ESTABLISHED || c->closing ||
		    c->torn_down || ZCRPC_CONN_FROZEN(c))
			continue;
		any = 1;
		zcrpc__credits_maybe_release(c, now, idle);
		if (c->ka_outstanding || now - c->last_active_ns < idle ||
		    zcrpc__sq_room(c) < 1)
			continue;
		zcrpc__conn_keepalive(c);
	}
	if (any)
		zcrpc__timer_start(w, t, now + keepalive_period_ns(w));
}

/* A connection became established: make sure keepalive checks run. */
void zcrpc__worker_keepalive_start(zcrpc_worker *w)
{
	if (!w->opts.keepalive_ms || w->keepalive.due_ns)
		return;
	zcrpc__timer_start(w, &w->keepalive,
			   zcrpc__now_ns() + keepalive_period_ns(w));
}

void zcrpc_worker_opts_init_sized(zcrpc_worker_opts *caller, size_t size)
{
	zcrpc_worker_opts d, *opts = &d;

	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->recv_depth = 64;
	opts->send_depth = 64;
	opts->max_msg = 4096;
	opts->ack_timeout_exp = 16;
	opts->retry_count = 6;
	opts->rnr_retry_count = 0;
	opts->pool_max_slots = 65536;
	opts->context = NULL;
	opts->keepalive_ms = 1000;
	opts->recv_budget = ZCRPC_RECV_BUDGET_DEFAULT;
	opts->recv_share = ZCRPC_RECV_SHARE_DEFAULT;
	zcrpc__abi_init(caller, size, opts, sizeof(*opts));
}

static zcrpc_status check_opts(const zcrpc_worker_opts *o)
{
	if (o->size < sizeof(*o) || o->recv_depth < ZCRPC_MIN_QUEUE_DEPTH ||
	    o->recv_depth > ZCRPC_MAX_QUEUE_DEPTH || o->send_depth < 1 ||
	    o->send_depth > ZCRPC_MAX_QUEUE_DEPTH || o->max_msg < 1 ||
	    o->max_msg > 8u * 1024 * 1024 || o->retry_count > 6 ||
	    o->rnr_retry_count > 7 || o->ack_timeout_exp > 31 ||
	    o->pool_max_slots < 2 || o->pool_max_slots > 0xffffffU ||
	    o->recv_budget > ZCRPC_MAX_RECV_BUDGET ||
	    o->recv_share < ZCRPC_MIN_QUEUE_DEPTH ||
	    o->recv_share > ZCRPC_MAX_QUEUE_DEPTH ||
	    o->recv_budget < o->recv_share)
		return ZCRPC_INVALID_ARGUMENT;
	return ZCRPC_OK;
}

/* The worker's pool: small slots for small messages, and slots that hold
 * the largest message (every receive uses one of those). */
static zcrpc_status make_pool(zcrpc_worker *w)
{
	struct zcrpc__pool_cfg cfg;
	struct zcrpc__registrar reg = zcrpc__context_registrar(w->ctx);
	uint32_t big = (ZCRPC_MSG_HDR_LEN + w->opts.max_msg + 63) & ~63u;
	uint32_t per = (1u << 20) / big;

	memset(&cfg, 0, sizeof(cfg));
	w->msg_slot_size = big;
	if (big > 256) {
		cfg.cls[cfg.nclasses++] =
			(struct zcrpc__pool_class_cfg){256, 1024, w->opts.pool_max_slots};
	}
	cfg.cls[cfg.nclasses++] = (struct zcrpc__pool_class_cfg){
		big, per < 16 ? 16 : per, w->opts.pool_max_slots};
	return zcrpc__pool_create(&cfg, &reg, &w->pool);
}

/* Long for its goto ladder: options, two locks, epoll, timerfd, eventfd,
 * CM channel, context, pool, epoll registrations, each unwound in order
 * below; the option copying is the ABI pass's to change (issue 12). */
zcrpc_status zcrpc_worker_create(const zcrpc_worker_opts *opts,
				 zcrpc_worker **out)
{
	zcrpc_worker *w;
	zcrpc_status st = ZCRPC_RESOURCE_EXHAUSTED;

	zcrpc__set_last_error("%s", "");
	if (!out)
		return ZCRPC_INVALID_ARGUMENT;
	w = calloc(1, sizeof(*w));
	if (!w)
		return ZCRPC_RESOURCE_EXHAUSTED;
	zcrpc_worker_opts_init(&w->opts);
	if (opts &&
	    ZCRPC__ABI_IN(&w->opts, opts, ZCRPC__MIN_WORKER_OPTS) != ZCRPC_OK) {
		st = ZCRPC_INVALID_ARGUMENT;
		goto err_free;
	}
	if (!w->opts.recv_budget) /* 0 = the default (docs/abi.md) */
		w->opts.recv_budget = ZCRPC_RECV_BUDGET_DEFAULT;
	if (!w->opts.recv_share)
		w->opts.recv_share = ZCRPC_RECV_SHARE_DEFAULT;
	st = check_opts(&w->opts);
	if (st != ZCRPC_OK)
		goto err_free;
	st = ZCRPC_RESOURCE_EXHAUSTED;
	if (pthread_mutex_init(&w->job_lock, NULL))
		goto err_free;
	if (pthread_mutex_init(&w->post_lock, NULL))
		goto err_job_lock;
	if (pthread_mutex_init(&w->reaper_lock, NULL))
		goto err_post_lock;
	if (pthread_cond_init(&w->reaper_cv, NULL))
		goto err_reaper_lock;
	atomic_init(&w->has_posts, 0);
	zcrpc__list_init(&w->conns);
	zcrpc__list_init(&w->revokes_due);
	zcrpc__list_init(&w->turn_end);
	zcrpc__list_init(&w->listeners);
	zcrpc__list_init(&w->jobs);
	zcrpc__list_init(&w->ctx_link);
	zcrpc__timers_init(w);
	w->keepalive.fn = check_keepalives;
	w->now_ns = zcrpc__now_ns();
	w->coarse_res_ns = coarse_res_ns();
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0)
		goto err_reaper_cv;
	w->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (w->timerfd < 0)
		goto err_epoll;
	w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->evfd < 0)
		goto err_timer;
	w->cm_ch = rdma_create_event_channel();
	if (!w->cm_ch) {
		st = ZCRPC_UNAVAILABLE; /* no /dev/infiniband/rdma_cm */
		zcrpc__set_last_error(
			"no RDMA device found: cannot open the RDMA CM "
			"(/dev/infiniband/rdma_cm: %s); " ZCRPC_NO_DEVICE_HINT,
			strerror(errno));
		goto err_evfd;
	}
	if (w->opts.context) {
		w->ctx = w->opts.context;
		zcrpc__context_ref(w->ctx);
	} else {
		st = zcrpc_context_create(&w->ctx);
		if (st != ZCRPC_OK)
			goto err_cm;
	}
	st = make_pool(w);
	if (st != ZCRPC_OK)
		goto err_ctx;
	st = ZCRPC_RESOURCE_EXHAUSTED;
	w->cm_src = (struct zcrpc__src){ZCRPC_SRC_CM, w, 0};
	w->timer_src = (struct zcrpc__src){ZCRPC_SRC_TIMER, w, 0};
	w->ev_src = (struct zcrpc__src){ZCRPC_SRC_EVENT, w, 0};
	w->watch_src = (struct zcrpc__src){ZCRPC_SRC_WATCH, w, 0};
	if (zcrpc__epoll_add(w, w->cm_ch->fd, &w->cm_src) ||
	    zcrpc__epoll_add(w, w->timerfd, &w->timer_src) ||
	    zcrpc__epoll_add(w, w->evfd, &w->ev_src) ||
	    (w->ctx->watch_ch &&
	     zcrpc__epoll_add(w, w->ctx->watch_ch->fd, &w->watch_src)) ||
	    zcrpc__worker_async_watch(w) != ZCRPC_OK)
		goto err_pool;
	zcrpc__context_add_worker(w->ctx, w);
	w->comp_vector = atomic_fetch_add(&w->ctx->next_vector, 1);
	*out = w;
	return ZCRPC_OK;

err_pool:
	zcrpc__pool_destroy(w->pool);
err_ctx:
	zcrpc__context_unref(w->ctx);
err_cm:
	rdma_destroy_event_channel(w->cm_ch);
err_evfd:
	close(w->evfd);
err_timer:
	close(w->timerfd);
err_epoll:
	close(w->epfd);
err_reaper_cv:
	pthread_cond_destroy(&w->reaper_cv);
err_reaper_lock:
	pthread_mutex_destroy(&w->reaper_lock);
err_post_lock:
	pthread_mutex_destroy(&w->post_lock);
err_job_lock:
	pthread_mutex_destroy(&w->job_lock);
err_free:
	free(w);
	return st;
}

void zcrpc_worker_destroy(zcrpc_worker *w)
{
	struct zcrpc__list *it;

	if (!w)
		return;
	while ((it = zcrpc__list_first(&w->listeners)))
		zcrpc_listener_destroy(zcrpc__listener_of(it));
	while ((it = zcrpc__list_first(&w->conns))) {
		zcrpc_conn *c = zcrpc__conn_of(it);

		c->dead = 1; /* no callback from here on */
		zcrpc__job_abandon(c);
		zcrpc__conn_teardown(c);
		zcrpc__conn_free(c);
	}
	zcrpc__jobs_join_all(w);
	zcrpc__reaper_stop(w); /* the queued rejects go out first */
	while (w->posts) { /* dropped, not run (see zcrpc_worker_post) */
		struct zcrpc__post *p = w->posts;

		w->posts = p->next;
		free(p);
	}
	zcrpc__device_close_all(w); /* the shared receive queues' slots first */
	zcrpc__pool_destroy(w->pool);
	zcrpc__context_remove_worker(w->ctx, w);
	zcrpc__context_unref(w->ctx);
	rdma_destroy_event_channel(w->cm_ch);
	close(w->evfd);
	close(w->timerfd);
	close(w->epfd);
	pthread_cond_destroy(&w->reaper_cv);
	pthread_mutex_destroy(&w->reaper_lock);
	pthread_mutex_destroy(&w->post_lock);
	pthread_mutex_destroy(&w->job_lock);
	free(w);
}

zcrpc_context *zcrpc_worker_get_context(const zcrpc_worker *w)
{
	return w ? w->ctx : NULL;
}

static void add_stats(zcrpc_conn_stats *t, const zcrpc_conn_stats *s)
{
	t->msgs_sent += s->msgs_sent;
	t->msgs_recv += s->msgs_recv;
	t->bytes_sent += s->bytes_sent;
	t->bytes_recv += s->bytes_recv;
	t->copied_bytes += s->copied_bytes;
	t->writes += s->writes;
	t->write_bytes += s->write_bytes;
	t->write_imms_recv += s->write_imms_recv;
	t->credit_updates_sent += s->credit_updates_sent;
	t->credit_stalls += s->credit_stalls;
	t->rnr_events += s->rnr_events;
	t->keepalives_sent += s->keepalives_sent;
	t->grants += s->grants;
	t->revokes += s->revokes;
	t->wr_deferred += s->wr_deferred;
	t->flushed_wcs += s->flushed_wcs;
	t->unflushed_wrs += s->unflushed_wrs;
}

void zcrpc__worker_account_gone(zcrpc_worker *w, const zcrpc_conn *c)
{
	add_stats(&w->gone, &c->stats);
}

void zcrpc_worker_get_stats(const zcrpc_worker *w, zcrpc_worker_stats *dst,
			    size_t dst_size)
{
	zcrpc_worker_stats all, *out = &all;
	zcrpc_conn_stats t;
	struct zcrpc__pool_stats ps;
	const struct zcrpc__list *it;
	unsigned i;

	memset(out, 0, sizeof(*out));
	if (!w)
		goto copy;
	t = w->gone;
	zcrpc__list_foreach(it, &w->conns) {
		add_stats(&t, &zcrpc__conn_of(it)->stats);
		out->conns++;
	}
	out->msgs_sent = t.msgs_sent;
	out->msgs_recv = t.msgs_recv;
	out->bytes_sent = t.bytes_sent;
	out->bytes_recv = t.bytes_recv;
	out->copied_bytes = t.copied_bytes;
	out->writes = t.writes;
	out->write_bytes = t.write_bytes;
	out->write_imms_recv = t.write_imms_recv;
	out->credit_stalls = t.credit_stalls;
	out->rnr_events = t.rnr_events;
	out->keepalives_sent = t.keepalives_sent;
	out->async_events = w->async_events;
	out->grants = t.grants;
	out->revokes = t.revokes;
	out->wr_deferred = t.wr_deferred;
	out->flushed_wcs = t.flushed_wcs;
	out->unflushed_wrs = t.unflushed_wrs;
	out->rejected_auth = w->rejected_auth;
	out->rejected_busy = w->rejected_busy;
	out->handshake_timeouts = w->handshake_timeouts;
	out->rejected_budget = w->rejected_budget;
	for (i = 0; i < ZCRPC_MAX_DEVICES; i++) {
		const struct zcrpc__srq *q = &w->dev[i].srq;

		if (!q->srq)
			continue;
		out->recv_budget += q->cap;
		out->recv_posted += q->posted;
		out->recv_promised += q->promised;
	}
	for (i = 0; i < ZCRPC_MAX_DEVICES; i++) {
		if (!w->dev[i].ncq)
			continue;
		zcrpc__list_foreach(it, &w->dev[i].cqs) {
			out->cqs++;
			out->cq_entries +=
				zcrpc__container_of(it, struct zcrpc__cq, link)
					->cqe;
		}
	}
	out->cqs_created = w->cqs_created;
	out->cqs_resized = w->cqs_resized;
	out->rejected_hello = w->rejected_hello;
	out->rejected_conn_limit = w->rejected_conn_limit;
	out->rejected_source_limit = w->rejected_source_limit;
	out->rejected_setup = w->rejected_setup;
	zcrpc__list_foreach(it, &w->listeners) out->handshakes +=
		zcrpc__listener_of(it)->handshakes;
	zcrpc__pool_get_stats(w->pool, &ps);
	for (i = 0; i < ps.nclasses; i++) {
		out->pool_in_use += ps.cls[i].in_use;
		out->pool_capacity += ps.cls[i].capacity;
		out->pool_exhausted += ps.cls[i].exhausted;
	}
	out->pool_bad_frees = ps.bad_puts;
copy:
	ZCRPC__ABI_OUT(dst, dst_size, out);
}

int zcrpc_worker_get_fd(const zcrpc_worker *w)
{
	return w ? w->epfd : -1;
}

/* Takes up to ZCRPC_CM_EVENTS_PER_TURN events from the worker's CM channel
 * (the rest keep its fd readable for the next turn). Each event is copied
 * and acknowledged before it is handled, so handlers may destroy the id. */
static int handle_cm_events(zcrpc_worker *w)
{
	struct rdma_cm_event *ev;
	uint8_t pdata[256];
	int n = 0;

	while (n < ZCRPC_CM_EVENTS_PER_TURN &&
	       rdma_get_cm_event(w->cm_ch, &ev) == 0) {
		zcrpc_conn *c = ev->id ? ev->id->context : NULL;
		enum rdma_cm_event_type type = ev->event;
		int status = ev->status;
		size_t plen = ev->param.conn.private_data_len;

		if (plen > sizeof(pdata))
			plen = sizeof(pdata);
		if (plen && ev->param.conn.private_data)
			memcpy(pdata, ev->param.conn.private_data, plen);
		else
			plen = 0;
		rdma_ack_cm_event(ev);
		n++;
		if (c && !c->torn_down)
			zcrpc__conn_on_cm_event(c, type, status, pdata, plen);
	}
	return n;
}

/* ---- functions posted from other threads -------------------------------- */

zcrpc_status zcrpc_worker_post(zcrpc_worker *w,
			       void (*fn)(zcrpc_worker *worker, void *fn_arg),
			       void *arg)
{
	struct zcrpc__post *p;
	uint64_t one = 1;

	if (!w || !fn)
		return ZCRPC_INVALID_ARGUMENT;
	p = malloc(sizeof(*p));
	if (!p)
		return ZCRPC_RESOURCE_EXHAUSTED;
	p->next = NULL;
	p->fn = fn;
	p->arg = arg;
	pthread_mutex_lock(&w->post_lock);
	if (w->posts_tail)
		w->posts_tail->next = p;
	else
		w->posts = p;
	w->posts_tail = p;
	atomic_store_explicit(&w->has_posts, 1, memory_order_relaxed);
	pthread_mutex_unlock(&w->post_lock);
	/* Wakes a worker asleep on its fd; the counter only overflows after
	 * 2^64 - 2 unread posts. */
	if (write(w->evfd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the eventfd is readable anyway */
	}
	return ZCRPC_OK;
}

/* Runs what was posted so far, in order. Functions posted meanwhile (also
 * by these) wait for the next call. Returns how many ran. */
static int run_posts(zcrpc_worker *w)
{
	struct zcrpc__post *p;
	int n = 0;

	if (!atomic_load_explicit(&w->has_posts, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&w->post_lock);
	p = w->posts;
	w->posts = w->posts_tail = NULL;
	atomic_store_explicit(&w->has_posts, 0, memory_order_relaxed);
	pthread_mutex_unlock(&w->post_lock);
	w->posts_ran = p != NULL;
	while (p) {
		struct zcrpc__post *next = p->next;

		p->fn(w, p->arg);
		free(p);
		p = next;
		n++;
	}
	return n;
}

/* Releases the verbs resources of closed connections and frees destroyed
 * ones. Runs at the end of progress, outside any callback. */
static void reap(zcrpc_worker *w)
{
	struct zcrpc__list *it, *next;

	if (!w->need_reap)
		return;
	w->need_reap = 0;
	zcrpc__list_foreach_safe(it, next, &w->conns) {
		zcrpc_conn *c = zcrpc__conn_of(it);

		if (c->state == ZCRPC_CONN_CLOSED && !c->torn_down)
			zcrpc__conn_teardown(c);
		if (c->dead)
			zcrpc__conn_free(c);
	}
}

static int poll_conns(zcrpc_worker *w)
{
	int n = zcrpc__cq_poll_all(
		w); /* one share per CQ, not per connection */

	if (w->reposts_pending)
		zcrpc__srq_retry(w);
	return n;
}

static int handle_ready(zcrpc_worker *w, struct epoll_event *evs, int nev)
{
	int i, n = 0;
	uint64_t u;

	for (i = 0; i < nev; i++) {
		struct zcrpc__src *src = evs[i].data.ptr;

		switch (src->kind) {
		case ZCRPC_SRC_CM:
			n += handle_cm_events(w);
			break;
		case ZCRPC_SRC_COMP:
			zcrpc__device_drain(w, src->obj);
			n++;
			break;
		case ZCRPC_SRC_LISTENER:
			zcrpc__listener_on_readable(src->obj);
			n++;
			break;
		case ZCRPC_SRC_WATCH:
			zcrpc__worker_on_watch(w);
			n++;
			break;
		case ZCRPC_SRC_ASYNC:
			zcrpc__worker_on_async(w, src->idx);
			n++;
			break;
		case ZCRPC_SRC_TIMER:
			zcrpc__timers_on_fd(w);
			break;
		case ZCRPC_SRC_EVENT:
			while (read(w->evfd, &u, sizeof(u)) > 0)
				;
			zcrpc__worker_sweep_removed(w);
			zcrpc__jobs_handle_done(w);
			/* At most one batch of posts per progress call. */
			if (!w->posts_ran)
				run_posts(w);
			n++;
			break;
		}
	}
	return n;
}

zcrpc_status zcrpc_worker_arm(zcrpc_worker *w)
{
	int busy;

	if (!w)
		return ZCRPC_INVALID_ARGUMENT;
	busy = zcrpc__cq_arm_all(w);
	if (w->need_reap ||
	    atomic_load_explicit(&w->has_posts, memory_order_relaxed))
		busy++;
	return busy ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_OK;
}

/* A timer is due at the turn's clock (zcrpc__timers_run's own first
 * check, here so that a turn with none due makes no call). */
static inline int timer_due(const zcrpc_worker *w)
{
	return w->timers.min && w->timers.min->due_ns <= w->now_ns;
}

/* Reads the epoll set without waiting and handles what is ready. */
static int poll_epoll(zcrpc_worker *w)
{
	struct epoll_event evs[ZCRPC_MAX_EVENTS];
	int nev;

	w->epoll_due_ns = w->now_ns + ZCRPC_EPOLL_PERIOD_NS;
	w->epoll_skipped = 0;
	w->epoll_reads++;
	nev = epoll_wait(w->epfd, evs, ZCRPC_MAX_EVENTS, 0);
	return nev > 0 ? handle_ready(w, evs, nev) : 0;
}

void zcrpc__worker_at_turn_end(zcrpc_worker *w, struct zcrpc__turn_hook *h)
{
	if (!zcrpc__list_linked(&h->link))
		zcrpc__list_push_back(&w->turn_end, &h->link);
}

void zcrpc__turn_hook_cancel(struct zcrpc__turn_hook *h)
{
	zcrpc__list_remove(&h->link);
}

/* Runs the hooks due at the end of this turn (what they queue again runs
 * in the next turn's end). Returns how many ran. */
static int run_turn_end(zcrpc_worker *w)
{
	struct zcrpc__list due;
	struct zcrpc__list *n;
	int ran = 0;

	if (zcrpc__list_empty(&w->turn_end))
		return 0;
	/* Take the list whole: a hook queued again by its fn waits. */
	due.next = w->turn_end.next;
	due.prev = w->turn_end.prev;
	due.next->prev = &due;
	due.prev->next = &due;
	zcrpc__list_init(&w->turn_end);
	while ((n = zcrpc__list_first(&due))) {
		struct zcrpc__turn_hook *h =
			zcrpc__container_of(n, struct zcrpc__turn_hook, link);

		zcrpc__list_remove(&h->link);
		h->fn(h);
		ran++;
	}
	return ran;
}

zcrpc_status zcrpc_worker_progress(zcrpc_worker *w, int timeout_ms)
{
	struct epoll_event evs[ZCRPC_MAX_EVENTS];
	int nev, n;

	if (!w)
		return ZCRPC_INVALID_ARGUMENT;
	if (w->in_progress)
		return ZCRPC_FAILED_PRECONDITION;
	w->in_progress = 1;
	w->posts_ran = 0;
	w->now_ns = turn_now(w);

	/* Every source makes bounded progress in every turn: the posts
	 * queued so far, a bounded share of each CQ, and the epoll set on
	 * its schedule (ZCRPC_EPOLL_PERIOD_NS / _TURNS) — or, in a turn that
	 * found nothing and may sleep, from the sleeping epoll_wait below. */
	n = atomic_load_explicit(&w->has_posts, memory_order_relaxed)
		    ? run_posts(w)
		    : 0;
	n += poll_conns(w);
	if (!zcrpc__list_empty(&w->revokes_due))
		n += zcrpc__mw_answer_due(w);
	if (w->now_ns >= w->epoll_due_ns ||
	    ++w->epoll_skipped >= ZCRPC_EPOLL_TURNS)
		n += poll_epoll(w);
	if (timer_due(w)) /* deadlines, keepalive, the RPC layer's callbacks */
		n += zcrpc__timers_run(w, w->now_ns);
	reap(w);
	n += run_turn_end(w); /* before any sleep: what this turn (or the
			       * application since the last) wrote goes */
	if (n == 0 && timeout_ms != 0 && zcrpc_worker_arm(w) == ZCRPC_OK) {
		w->epoll_reads++;
		nev = epoll_wait(w->epfd, evs, ZCRPC_MAX_EVENTS, timeout_ms);
		if (nev < 0 && errno != EINTR) {
			zcrpc__worker_seterr(w, "epoll_wait: %s", strerror(errno));
			w->in_progress = 0;
			return ZCRPC_INTERNAL;
		}
		w->now_ns = turn_now(w); /* a new turn's clock */
		w->epoll_due_ns = w->now_ns + ZCRPC_EPOLL_PERIOD_NS;
		w->epoll_skipped = 0;
		if (nev > 0)
			handle_ready(w, evs, nev);
		poll_conns(w);
		zcrpc__timers_run(w, w->now_ns);
		reap(w);
		run_turn_end(w);
	}
	w->in_progress = 0;
	return ZCRPC_OK;
}
