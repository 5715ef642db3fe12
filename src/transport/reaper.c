/* zcrpc — kernel calls that need not hold up the worker: the REJECT and the
 * destruction of a connect request that no connection took (listener.c).
 * In an accept storm each of them is a system call that rxe was seen to
 * keep for a long time (rdma.Storm.*: up to a second per setup call), on
 * the thread that also serves the established connections. One thread per
 * worker, started at its first such request, makes them in order.
 *
 * Nothing of the worker is touched there: a request taken with
 * rdma_get_request from an rdma_create_ep(3) listener has an event channel
 * of its own (librdmacm migrates it to one), and the REJECT's hello is
 * encoded from a copy. */
#include "internal.h"

#include <stdlib.h>

#include "hello.h"

struct zcrpc__reject_job {
	struct zcrpc__reject_job *next;
	struct rdma_cm_id *id;
	struct zcrpc_hello h;
};

/* Sends the REJECT (the status alone when the CM has less room for private
 * data than the reason needs) and frees the request's id. */
static void reject_now(struct rdma_cm_id *id, struct zcrpc_hello *h)
{
	uint8_t buf[ZCRPC_HELLO_MAX_REJECT];
	size_t n = zcrpc__hello_encode(h, buf, sizeof(buf));

	if (rdma_reject(id, buf, (uint8_t)n) && n > ZCRPC_HELLO_LEN) {
		h->reason[0] = '\0';
		n = zcrpc__hello_encode(h, buf, sizeof(buf));
		rdma_reject(id, buf, (uint8_t)n);
	}
	rdma_destroy_ep(id);
}

static void *reaper_main(void *arg)
{
	zcrpc_worker *w = arg;
	struct zcrpc__reject_job *j;

	pthread_mutex_lock(&w->reaper_lock);
	for (;;) {
		while (!w->reaper_head && !w->reaper_stop)
			pthread_cond_wait(&w->reaper_cv, &w->reaper_lock);
		j = w->reaper_head;
		if (!j)
			break; /* stopping, and nothing left */
		w->reaper_head = j->next;
		if (!w->reaper_head)
			w->reaper_tail = NULL;
		pthread_mutex_unlock(&w->reaper_lock);
		reject_now(j->id, &j->h);
		free(j);
		pthread_mutex_lock(&w->reaper_lock);
	}
	pthread_mutex_unlock(&w->reaper_lock);
	return NULL;
}

void zcrpc__reaper_reject(zcrpc_worker *w, struct rdma_cm_id *id,
			  const struct zcrpc_hello *h)
{
	struct zcrpc__reject_job *j = malloc(sizeof(*j));
	struct zcrpc_hello copy = *h;

	pthread_mutex_lock(&w->reaper_lock);
	if (j && !w->reaper_started && !w->reaper_failed) {
		if (pthread_create(&w->reaper, NULL, reaper_main, w))
			w->reaper_failed = 1;
		else
			w->reaper_started = 1;
	}
	if (!j || !w->reaper_started) {
		pthread_mutex_unlock(&w->reaper_lock);
		free(j);
		reject_now(id, &copy); /* here, then: nothing is lost */
		return;
	}
	j->next = NULL;
	j->id = id;
	j->h = copy;
	if (w->reaper_tail)
		w->reaper_tail->next = j;
	else
		w->reaper_head = j;
	w->reaper_tail = j;
	w->rejects_deferred++;
	pthread_cond_signal(&w->reaper_cv);
	pthread_mutex_unlock(&w->reaper_lock);
}

void zcrpc__reaper_stop(zcrpc_worker *w)
{
	pthread_mutex_lock(&w->reaper_lock);
	w->reaper_stop = 1;
	pthread_cond_signal(&w->reaper_cv);
	pthread_mutex_unlock(&w->reaper_lock);
	if (w->reaper_started)
		pthread_join(w->reaper, NULL); /* it ends with the queue empty */
	w->reaper_started = 0;
}
