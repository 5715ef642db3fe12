/* zcrpc — one-shot timers for the layers above the transport (call
 * deadlines, deferred callbacks), run from the worker's progress and woken
 * through its timerfd. A timer is embedded in its owner; few timers exist
 * (one per channel or server), so a list is enough. */
#include "internal.h"

void zcrpc__timer_start(zcrpc_worker *w, struct zcrpc__timer *t,
			int64_t due_ns)
{
	if (!t->linked) {
		t->prev = NULL;
		t->next = w->timers;
		if (w->timers)
			w->timers->prev = t;
		w->timers = t;
		t->linked = 1;
	}
	if (t->due_ns && t->due_ns <= due_ns)
		return; /* already due earlier */
	t->due_ns = due_ns;
	if (!w->next_timer_ns || due_ns < w->next_timer_ns) {
		w->next_timer_ns = due_ns;
		zcrpc__worker_rearm(w);
	}
}

void zcrpc__timer_stop(zcrpc_worker *w, struct zcrpc__timer *t)
{
	if (!t->linked)
		return;
	if (t->prev)
		t->prev->next = t->next;
	else
		w->timers = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->next = t->prev = NULL;
	t->linked = 0;
	t->due_ns = 0;
}

/* Runs every timer that is due; each is one-shot and may start itself
 * again from its callback. */
void zcrpc__timers_run(zcrpc_worker *w, int64_t now)
{
	struct zcrpc__timer *t, *next;
	int64_t soonest = 0;

	if (!w->next_timer_ns || now < w->next_timer_ns)
		return;
	w->next_timer_ns = 0;
	for (t = w->timers; t; t = next) {
		next = t->next;
		if (t->due_ns && now >= t->due_ns) {
			t->due_ns = 0;
			t->fn(t, now);
		}
	}
	for (t = w->timers; t; t = t->next)
		if (t->due_ns && (!soonest || t->due_ns < soonest))
			soonest = t->due_ns;
	if (soonest && (!w->next_timer_ns || soonest < w->next_timer_ns))
		w->next_timer_ns = soonest;
	zcrpc__worker_rearm(w);
}
