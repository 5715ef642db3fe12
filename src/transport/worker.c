/* zcrpc — the worker: event loop over the CM channel, completion channels,
 * listeners, a timerfd for deadlines and an eventfd for setup threads. */
#include "internal.h"

#include <errno.h>
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

int64_t zcrpc__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void zcrpc__worker_seterr(zcrpc_worker *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
}

int zcrpc__epoll_add(zcrpc_worker *w, int fd, struct zcrpc__src *src)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = src};
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void arm_timer(zcrpc_worker *w)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	if (w->next_deadline_ns) {
		its.it_value.tv_sec = w->next_deadline_ns / 1000000000LL;
		its.it_value.tv_nsec = w->next_deadline_ns % 1000000000LL;
	}
	timerfd_settime(w->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

void zcrpc__worker_add_deadline(zcrpc_worker *w, int64_t deadline_ns)
{
	if (!w->next_deadline_ns || deadline_ns < w->next_deadline_ns) {
		w->next_deadline_ns = deadline_ns;
		arm_timer(w);
	}
}

void zcrpc_worker_opts_init(zcrpc_worker_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->recv_depth = 64;
	opts->send_depth = 64;
	opts->max_msg = 4096;
	opts->ack_timeout = 16;
	opts->retry_count = 6;
	opts->rnr_retry_count = 0;
}

static zcrpc_status check_opts(const zcrpc_worker_opts *o)
{
	if (o->size < sizeof(*o) || o->recv_depth < 2 ||
	    o->recv_depth > 32768 || o->send_depth < 1 ||
	    o->send_depth > 32768 || o->max_msg < 1 ||
	    o->max_msg > 8u * 1024 * 1024 || o->retry_count > 6 ||
	    o->rnr_retry_count > 7 || o->ack_timeout > 31)
		return ZCRPC_INVALID_ARGUMENT;
	return ZCRPC_OK;
}

zcrpc_status zcrpc_worker_create(const zcrpc_worker_opts *opts,
				 zcrpc_worker **out)
{
	zcrpc_worker *w;
	zcrpc_status st = ZCRPC_RESOURCE_EXHAUSTED;

	if (!out)
		return ZCRPC_INVALID_ARGUMENT;
	w = calloc(1, sizeof(*w));
	if (!w)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (opts)
		w->opts = *opts;
	else
		zcrpc_worker_opts_init(&w->opts);
	st = check_opts(&w->opts);
	if (st != ZCRPC_OK)
		goto err_free;
	st = ZCRPC_RESOURCE_EXHAUSTED;
	if (pthread_mutex_init(&w->job_lock, NULL))
		goto err_free;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0)
		goto err_mutex;
	w->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (w->timerfd < 0)
		goto err_epoll;
	w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->evfd < 0)
		goto err_timer;
	w->cm_ch = rdma_create_event_channel();
	if (!w->cm_ch) {
		st = ZCRPC_UNAVAILABLE; /* no /dev/infiniband/rdma_cm */
		goto err_evfd;
	}
	w->cm_src = (struct zcrpc__src){ZCRPC_SRC_CM, w};
	w->timer_src = (struct zcrpc__src){ZCRPC_SRC_TIMER, w};
	w->ev_src = (struct zcrpc__src){ZCRPC_SRC_EVENT, w};
	if (zcrpc__epoll_add(w, w->cm_ch->fd, &w->cm_src) ||
	    zcrpc__epoll_add(w, w->timerfd, &w->timer_src) ||
	    zcrpc__epoll_add(w, w->evfd, &w->ev_src))
		goto err_cm;
	*out = w;
	return ZCRPC_OK;

err_cm:
	rdma_destroy_event_channel(w->cm_ch);
err_evfd:
	close(w->evfd);
err_timer:
	close(w->timerfd);
err_epoll:
	close(w->epfd);
err_mutex:
	pthread_mutex_destroy(&w->job_lock);
err_free:
	free(w);
	return st;
}

void zcrpc_worker_destroy(zcrpc_worker *w)
{
	if (!w)
		return;
	while (w->listeners)
		zcrpc_listener_destroy(w->listeners);
	while (w->conns) {
		zcrpc_conn *c = w->conns;

		zcrpc__job_abandon(c);
		zcrpc__conn_teardown(c);
		zcrpc__conn_free(c);
	}
	zcrpc__jobs_join_all(w);
	zcrpc__device_close_all(w);
	rdma_destroy_event_channel(w->cm_ch);
	close(w->evfd);
	close(w->timerfd);
	close(w->epfd);
	pthread_mutex_destroy(&w->job_lock);
	free(w);
}

int zcrpc_worker_fd(const zcrpc_worker *w)
{
	return w ? w->epfd : -1;
}

/* Drains the worker's CM channel. Each event is copied and acknowledged
 * before it is handled, so handlers may destroy the id. */
static int handle_cm_events(zcrpc_worker *w)
{
	struct rdma_cm_event *ev;
	uint8_t pdata[256];
	int n = 0;

	while (rdma_get_cm_event(w->cm_ch, &ev) == 0) {
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

static void check_deadlines(zcrpc_worker *w)
{
	int64_t now = zcrpc__now_ns();
	zcrpc_conn *c;

	if (!w->next_deadline_ns || now < w->next_deadline_ns)
		return;
	w->next_deadline_ns = 0;
	for (c = w->conns; c; c = c->next) {
		zcrpc__conn_check_deadline(c, now);
		if (c->deadline_ns &&
		    (!w->next_deadline_ns || c->deadline_ns < w->next_deadline_ns))
			w->next_deadline_ns = c->deadline_ns;
	}
	arm_timer(w);
}

/* Releases the verbs resources of closed connections and frees destroyed
 * ones. Runs at the end of progress, outside any callback. */
static void reap(zcrpc_worker *w)
{
	zcrpc_conn *c, *next;

	if (!w->need_reap)
		return;
	w->need_reap = 0;
	for (c = w->conns; c; c = next) {
		next = c->next;
		if (c->state == ZCRPC_CONN_CLOSED && !c->torn_down)
			zcrpc__conn_teardown(c);
		if (c->dead)
			zcrpc__conn_free(c);
	}
}

static int poll_conns(zcrpc_worker *w)
{
	zcrpc_conn *c;
	int n = 0;

	for (c = w->conns; c; c = c->next)
		if (c->cq && !c->torn_down)
			n += zcrpc__conn_poll(c);
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
		case ZCRPC_SRC_TIMER:
			while (read(w->timerfd, &u, sizeof(u)) > 0)
				;
			break;
		case ZCRPC_SRC_EVENT:
			while (read(w->evfd, &u, sizeof(u)) > 0)
				;
			zcrpc__jobs_handle_done(w);
			n++;
			break;
		}
	}
	return n;
}

zcrpc_status zcrpc_worker_arm(zcrpc_worker *w)
{
	zcrpc_conn *c;
	int busy = 0;

	if (!w)
		return ZCRPC_INVALID_ARGUMENT;
	for (c = w->conns; c; c = c->next)
		if (c->cq && !c->torn_down)
			busy += zcrpc__conn_arm(c);
	if (w->need_reap)
		busy++;
	return busy ? ZCRPC_RESOURCE_EXHAUSTED : ZCRPC_OK;
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

	n = poll_conns(w);
	if (n == 0) {
		nev = epoll_wait(w->epfd, evs, ZCRPC_MAX_EVENTS, 0);
		if (nev > 0)
			n += handle_ready(w, evs, nev);
	}
	check_deadlines(w);
	reap(w);
	if (n == 0 && timeout_ms != 0 && zcrpc_worker_arm(w) == ZCRPC_OK) {
		nev = epoll_wait(w->epfd, evs, ZCRPC_MAX_EVENTS, timeout_ms);
		if (nev < 0 && errno != EINTR) {
			zcrpc__worker_seterr(w, "epoll_wait: %s", strerror(errno));
			w->in_progress = 0;
			return ZCRPC_INTERNAL;
		}
		if (nev > 0)
			handle_ready(w, evs, nev);
		poll_conns(w);
		check_deadlines(w);
		reap(w);
	}
	w->in_progress = 0;
	return ZCRPC_OK;
}
