/* Host check of the worker's timer heap (src/transport/timer.c) without a
 * device: a zeroed worker with only its timerfd, many timers started,
 * moved earlier, stopped and run; each must fire once, in due order, at
 * the time it was last set to; and one batch of due timers whose
 * callbacks stop, re-arm or free the others (as a connection's deadline
 * does). Called from test_timer.cc. */
#define _GNU_SOURCE
#include "transport/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "timer_heap.h"

#define N 500

struct probe {
	struct zcrpc__timer t;
	int64_t want; /* 0: must not fire */
	int fired;
	int64_t fired_at;
};

static int64_t last_fired;
static int order_ok;

static void fire(struct zcrpc__timer *t, int64_t now)
{
	struct probe *p = zcrpc__container_of(t, struct probe, t);

	p->fired++;
	p->fired_at = now;
	if (p->want < last_fired)
		order_ok = 0;
	last_fired = p->want;
}

int zcrpc_test_timer_heap(char *err, size_t errlen)
{
	zcrpc_worker *w = calloc(1, sizeof(*w));
	struct probe *p = calloc(N, sizeof(*p));
	int64_t now;
	int i, rc = -1;

	if (!w || !p)
		goto out;
	w->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	zcrpc__timers_init(w);
	srand(12);
	order_ok = 1;
	for (i = 0; i < N; i++) {
		p[i].t.fn = fire;
		p[i].want = 1000 + rand() % 100000;
		zcrpc__timer_start(w, &p[i].t, p[i].want);
	}
	for (i = 0; i < N; i += 3) { /* later: kept at the earlier time */
		zcrpc__timer_start(w, &p[i].t, p[i].want + 5);
	}
	for (i = 1; i < N; i += 3) { /* earlier: moves */
		p[i].want -= 500;
		zcrpc__timer_start(w, &p[i].t, p[i].want);
	}
	for (i = 2; i < N; i += 7) {
		zcrpc__timer_stop(w, &p[i].t);
		p[i].want = 0;
	}
	if (w->timerfd_ns != w->timers.min->due_ns) {
		snprintf(err, errlen, "timerfd at %lld, earliest %lld",
			 (long long)w->timerfd_ns,
			 (long long)w->timers.min->due_ns);
		goto out;
	}
	for (now = 0; now <= 110000; now += 97)
		zcrpc__timers_run(w, now);
	for (i = 0; i < N; i++) {
		int want = p[i].want ? 1 : 0;

		if (p[i].fired != want ||
		    (want && (p[i].fired_at < p[i].want ||
			      p[i].fired_at >= p[i].want + 97))) {
			snprintf(err, errlen,
				 "timer %d due %lld fired %d times at %lld", i,
				 (long long)p[i].want, p[i].fired,
				 (long long)p[i].fired_at);
			goto out;
		}
	}
	if (!order_ok || w->timers.n != 0 || w->timers.min) {
		snprintf(err, errlen, "order %d, %u timers left", order_ok,
			 w->timers.n);
		goto out;
	}
	rc = 0;
out:
	if (w && w->timerfd > 0)
		close(w->timerfd);
	free(w);
	free(p);
	return rc;
}

/* One batch: timers 0..B-1 all due at 100, run in start order. The
 * callback of an even timer running before 500 stops timer i+1 (its owner
 * freed mid-batch: must not run) and re-arms timer i+2 with stop + start
 * for 500 (as zcrpc__conn_set_deadline does: runs once, at 500, not in this
 * batch). */
#define B 64

static struct probe batch[B];
static zcrpc_worker *batch_w;

static void batch_fire(struct zcrpc__timer *t, int64_t now)
{
	struct probe *p = zcrpc__container_of(t, struct probe, t);
	int i = (int)(p - batch);

	p->fired++;
	p->fired_at = now;
	if (i % 2 == 0 && now < 500) {
		if (i + 1 < B)
			zcrpc__timer_stop(batch_w, &batch[i + 1].t);
		if (i + 2 < B) {
			zcrpc__timer_stop(batch_w, &batch[i + 2].t);
			zcrpc__timer_start(batch_w, &batch[i + 2].t, 500);
		}
	}
}

int zcrpc_test_timer_batch(char *err, size_t errlen)
{
	zcrpc_worker *w = calloc(1, sizeof(*w));
	int64_t now;
	int i, rc = -1;

	if (!w)
		goto out;
	w->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	zcrpc__timers_init(w);
	batch_w = w;
	memset(batch, 0, sizeof(batch));
	for (i = 0; i < B; i++) {
		batch[i].t.fn = batch_fire;
		zcrpc__timer_start(w, &batch[i].t, 100);
	}
	for (now = 100; now <= 1000; now += 100)
		zcrpc__timers_run(w, now);
	/* Timer 0 runs at 100, stops 1 and re-arms 2 for 500; 3 was not
	 * touched and runs at 100; 4 runs at 100, stops 5, re-arms 6; ... */
	for (i = 0; i < B; i++) {
		int want = i % 4 != 1;
		int64_t at = i % 4 == 2 ? 500 : 100;

		if (batch[i].fired != want ||
		    (want && batch[i].fired_at != at)) {
			snprintf(err, errlen, "timer %d fired %d times at %lld",
				 i, batch[i].fired,
				 (long long)batch[i].fired_at);
			goto out;
		}
	}
	if (w->timers.n != 0 || w->timers.min ||
	    zcrpc__list_first(&w->timers.due)) {
		snprintf(err, errlen, "%u timers left", w->timers.n);
		goto out;
	}
	rc = 0;
out:
	if (w && w->timerfd > 0)
		close(w->timerfd);
	free(w);
	return rc;
}
