/* zcrpc — grants on devices without type-2 memory windows (docs/design.md
 * "Grants without memory windows"): a write target (ZCRPC_MR_REMOTE_WRITE)
 * keeps, per such device, one spare registration of its whole range with
 * remote write access. A grant takes the spare (no system call on the
 * worker), a revoke deregisters it (after which the device accepts no
 * write through its rkey), and the context's spare thread registers the
 * next spare off every worker's thread. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct spare_job {
	struct spare_job *next;
	zcrpc_mr *mr;
	int idx;
};

struct zcrpc__spare_thread {
	pthread_mutex_t lock;
	pthread_cond_t cv;	/* a job queued, or stop */
	pthread_cond_t idle_cv; /* the job on `busy` finished */
	pthread_t th;
	int stop;
	struct spare_job *head, *tail;
	zcrpc_mr *busy; /* registering for it right now */
	uint64_t made, failed;
};

#define SPARE_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

/* Registers @mr's range on device @idx with remote write access; NULL with
 * errno when the device refused or went away. Under ctx->lock, as every
 * registration (device removal clears the PD under it). */
static struct ibv_mr *reg_spare(zcrpc_mr *mr, int idx)
{
	zcrpc_context *ctx = mr->ctx;
	struct ibv_mr *r;

	pthread_mutex_lock(&ctx->lock);
	r = zcrpc__dev_reg(ctx, idx, mr->addr, mr->len, SPARE_ACCESS);
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

int zcrpc__spare_make_locked(zcrpc_mr *mr, int idx)
{
	struct ibv_mr *r;

	if (atomic_load(&mr->spare[idx]))
		return 0;
	r = zcrpc__dev_reg(mr->ctx, idx, mr->addr, mr->len, SPARE_ACCESS);
	if (!r)
		return errno ? errno : ENOMEM;
	r = atomic_exchange(&mr->spare[idx], r);
	if (r) /* the spare thread made one meanwhile */
		zcrpc__dev_dereg(mr->ctx, r);
	return 0;
}

static void *spare_main(void *arg)
{
	struct zcrpc__spare_thread *t = arg;
	struct spare_job *j;

	pthread_mutex_lock(&t->lock);
	for (;;) {
		while (!t->head && !t->stop)
			pthread_cond_wait(&t->cv, &t->lock);
		if (t->stop)
			break;
		j = t->head;
		t->head = j->next;
		if (!t->head)
			t->tail = NULL;
		t->busy = j->mr;
		pthread_mutex_unlock(&t->lock);

		struct ibv_mr *r = reg_spare(j->mr, j->idx);
		int err = r ? 0 : (errno ? errno : ENOMEM);

		if (r) {
			r = atomic_exchange(&j->mr->spare[j->idx], r);
			if (r) /* one was there after all */
				zcrpc__dev_dereg(j->mr->ctx, r);
		}
		atomic_store(&j->mr->refill_err[j->idx], err);
		atomic_store(&j->mr->refill_asked[j->idx], 0);

		pthread_mutex_lock(&t->lock);
		if (err)
			t->failed++;
		else
			t->made++;
		t->busy = NULL;
		pthread_cond_broadcast(&t->idle_cv);
		free(j);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

/* The context's spare thread, started on first use; NULL when it cannot
 * be (no memory or no thread). */
static struct zcrpc__spare_thread *spare_thread(zcrpc_context *ctx)
{
	struct zcrpc__spare_thread *t;

	pthread_mutex_lock(&ctx->lock);
	t = ctx->spares;
	if (t)
		goto out;
	t = calloc(1, sizeof(*t));
	if (!t)
		goto out;
	if (pthread_mutex_init(&t->lock, NULL))
		goto fail_free;
	if (pthread_cond_init(&t->cv, NULL))
		goto fail_lock;
	if (pthread_cond_init(&t->idle_cv, NULL))
		goto fail_cv;
	if (pthread_create(&t->th, NULL, spare_main, t))
		goto fail_idle;
	ctx->spares = t;
	goto out;

fail_idle:
	pthread_cond_destroy(&t->idle_cv);
fail_cv:
	pthread_cond_destroy(&t->cv);
fail_lock:
	pthread_mutex_destroy(&t->lock);
fail_free:
	free(t);
	t = NULL;
out:
	pthread_mutex_unlock(&ctx->lock);
	return t;
}

int zcrpc__spare_wanted(const zcrpc_context *ctx, int idx, unsigned flags)
{
	return (flags & ZCRPC_MR_REMOTE_WRITE) && !ctx->dev[idx].prof.mw_type2;
}

void zcrpc__spare_refill(zcrpc_mr *mr, int idx)
{
	struct zcrpc__spare_thread *t;
	struct spare_job *j;

	if (atomic_exchange(&mr->refill_asked[idx], 1))
		return; /* one is coming */
	t = spare_thread(mr->ctx);
	j = t ? calloc(1, sizeof(*j)) : NULL;
	if (!j) {
		atomic_store(&mr->refill_err[idx], ENOMEM);
		atomic_store(&mr->refill_asked[idx], 0);
		return;
	}
	j->mr = mr;
	j->idx = idx;
	pthread_mutex_lock(&t->lock);
	if (t->tail)
		t->tail->next = j;
	else
		t->head = j;
	t->tail = j;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->lock);
}

struct ibv_mr *zcrpc__spare_take(zcrpc_mr *mr, int idx)
{
	struct ibv_mr *r = atomic_exchange(&mr->spare[idx], NULL);

	zcrpc__spare_refill(mr, idx); /* for the next grant */
	return r;
}

/* Before @mr goes: no job of the thread may still use it. */
void zcrpc__spare_forget(zcrpc_mr *mr)
{
	struct zcrpc__spare_thread *t;
	struct spare_job **pp, *j;
	int i;

	pthread_mutex_lock(&mr->ctx->lock);
	t = mr->ctx->spares;
	pthread_mutex_unlock(&mr->ctx->lock);
	if (t) {
		pthread_mutex_lock(&t->lock);
		for (pp = &t->head; (j = *pp);) {
			if (j->mr == mr) {
				*pp = j->next;
				free(j);
				continue;
			}
			pp = &j->next;
		}
		t->tail = NULL;
		for (j = t->head; j; j = j->next)
			t->tail = j;
		while (t->busy == mr)
			pthread_cond_wait(&t->idle_cv, &t->lock);
		pthread_mutex_unlock(&t->lock);
	}
	for (i = 0; i < ZCRPC_MAX_DEVICES; i++) {
		struct ibv_mr *r = atomic_exchange(&mr->spare[i], NULL);

		if (r)
			zcrpc__dev_dereg(mr->ctx, r);
	}
}

/* Context teardown (no registration is left). */
void zcrpc__spare_stop(zcrpc_context *ctx)
{
	struct zcrpc__spare_thread *t = ctx->spares;
	struct spare_job *j;

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->th, NULL);
	while ((j = t->head)) {
		t->head = j->next;
		free(j);
	}
	pthread_cond_destroy(&t->idle_cv);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->lock);
	free(t);
	ctx->spares = NULL;
}
