/* zcrpc — the runtime a gRPC user expects: zcrpc_server_serve() runs a
 * server's workers (the calling thread the home worker, one thread each
 * for the others) until one of the signals the application named (read
 * with a signalfd: no handler, no global state) or zcrpc_server_shutdown()
 * from another thread, then drains every worker within the grace period
 * and joins its threads. Also the workers a server makes for itself
 * (zcrpc_server_opts.threads). */
#include "server_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define ZCRPC_SERVE_MAX_SIGNALS 16
#define ZCRPC_DEFAULT_GRACE_MS	5000

/* One zcrpc_server_serve() call, on its stack. */
struct zcrpc__serve {
	zcrpc_server *s;
	atomic_int stop; /* a signal came, or a shutdown was asked */
	atomic_int quit; /* the worker threads leave their loops */
	atomic_int grace_ms;
	atomic_int failed; /* a worker's progress returned INTERNAL */
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int done, waiters; /* under lock */
	zcrpc_status result;
};

void zcrpc_serve_opts_init_sized(zcrpc_serve_opts *caller, size_t size)
{
	zcrpc_serve_opts d;

	memset(&d, 0, sizeof(d));
	d.size = sizeof(d);
	d.grace_ms = ZCRPC_DEFAULT_GRACE_MS;
	zcrpc__abi_init(caller, size, &d, sizeof(d));
}

zcrpc_status zcrpc__server_make_workers(zcrpc_server *s, zcrpc_worker **home)
{
	size_t n = s->o.threads ? s->o.threads : 1, i;
	zcrpc_worker_opts wo;
	zcrpc_status st;

	zcrpc_worker_opts_init(&wo);
	if (s->o.worker_opts) {
		size_t len = s->o.worker_opts->size;

		if (len < sizeof(size_t))
			return ZCRPC_INVALID_ARGUMENT;
		memcpy(&wo, s->o.worker_opts,
		       len < sizeof(wo) ? len : sizeof(wo));
		wo.size = sizeof(wo);
	}
	s->o.worker_opts = NULL; /* not kept */
	st = zcrpc_context_create(&s->own_ctx);
	if (st != ZCRPC_OK)
		return st;
	wo.context = s->own_ctx;
	s->own = calloc(n, sizeof(*s->own));
	if (!s->own) {
		zcrpc__server_free_workers(s);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	for (i = 0; i < n; i++) {
		st = zcrpc_worker_create(&wo, &s->own[i]);
		if (st != ZCRPC_OK) {
			zcrpc__server_free_workers(s);
			return st;
		}
		s->nown++;
	}
	*home = s->own[0];
	return ZCRPC_OK;
}

void zcrpc__server_free_workers(zcrpc_server *s)
{
	size_t i;

	for (i = 0; i < s->nown; i++)
		zcrpc_worker_destroy(s->own[i]);
	free(s->own);
	s->own = NULL;
	s->nown = 0;
	zcrpc_context_destroy(s->own_ctx);
	s->own_ctx = NULL;
}

static void wake(zcrpc_worker *w, void *arg)
{
	(void)w;
	(void)arg;
}

/* Each worker but the home one: progress until told to quit. */
struct runner {
	struct zcrpc__serve *sv;
	zcrpc_worker *w;
	pthread_t t;
};

static void *run_worker(void *arg)
{
	struct runner *r = arg;

	while (!atomic_load(&r->sv->quit))
		if (zcrpc_worker_progress(r->w, 10) == ZCRPC_INTERNAL) {
			atomic_store(&r->sv->failed, 1);
			atomic_store(&r->sv->stop, 1);
			zcrpc_worker_post(r->sv->s->w, wake, NULL);
			break;
		}
	return NULL;
}

zcrpc_status zcrpc__serve_stop(zcrpc_server *s, int grace_ms)
{
	struct zcrpc__serve *sv;
	zcrpc_status st;

	pthread_mutex_lock(&s->pub_lock);
	sv = atomic_load(&s->serve);
	if (sv) {
		pthread_mutex_lock(&sv->lock);
		sv->waiters++;
		pthread_mutex_unlock(&sv->lock);
	}
	pthread_mutex_unlock(&s->pub_lock);
	if (!sv)
		return ZCRPC_FAILED_PRECONDITION; /* serve already returned */
	atomic_store(&sv->grace_ms, grace_ms);
	atomic_store(&sv->stop, 1);
	zcrpc_worker_post(s->w, wake, NULL); /* wakes a sleeping progress */
	pthread_mutex_lock(&sv->lock);
	while (!sv->done)
		pthread_cond_wait(&sv->cv, &sv->lock);
	st = sv->result;
	sv->waiters--;
	pthread_cond_broadcast(&sv->cv);
	pthread_mutex_unlock(&sv->lock);
	return st;
}

/* The signalfd of @o's signals (blocked in this thread, the old mask in
 * @old), -1 when there are none. Returns OK or the error. */
static zcrpc_status open_signals(const zcrpc_serve_opts *o, sigset_t *old,
				 int *fd)
{
	sigset_t set;
	size_t i;

	*fd = -1;
	if (!o->nsignals)
		return ZCRPC_OK;
	if (!o->signals || o->nsignals > ZCRPC_SERVE_MAX_SIGNALS)
		return ZCRPC_INVALID_ARGUMENT;
	sigemptyset(&set);
	for (i = 0; i < o->nsignals; i++)
		if (sigaddset(&set, o->signals[i]))
			return ZCRPC_INVALID_ARGUMENT;
	if (pthread_sigmask(SIG_BLOCK, &set, old))
		return ZCRPC_INTERNAL;
	*fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (*fd < 0) {
		pthread_sigmask(SIG_SETMASK, old, NULL);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

static int signal_came(int fd)
{
	struct signalfd_siginfo si;

	return fd >= 0 && read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si);
}

/* The home worker's loop, the drain, the threads joined. */
static zcrpc_status serve_loop(struct zcrpc__serve *sv, struct runner *r,
			       size_t nr, int sfd, int grace_ms)
{
	zcrpc_server *s = sv->s;
	zcrpc_status st;
	size_t i;

	while (!atomic_load(&sv->stop)) {
		if (zcrpc_worker_progress(s->w, 10) == ZCRPC_INTERNAL) {
			atomic_store(&sv->failed, 1);
			break;
		}
		if (signal_came(sfd)) {
			atomic_store(&sv->grace_ms, grace_ms);
			break;
		}
	}
	st = zcrpc__server_drain(s, atomic_load(&sv->grace_ms));
	if (atomic_load(&sv->failed))
		st = ZCRPC_INTERNAL;
	atomic_store(&sv->quit, 1);
	for (i = 0; i < nr; i++)
		pthread_join(r[i].t, NULL);
	return st;
}

/* Long for its set-up and undoing in order: options, signals, threads,
 * the loop, the waiters of zcrpc_server_shutdown(). */
zcrpc_status zcrpc_server_serve(zcrpc_server *s, const zcrpc_serve_opts *o)
{
	zcrpc_serve_opts opt;
	struct zcrpc__serve sv;
	struct runner r[ZCRPC_MAX_WORKERS];
	sigset_t old;
	size_t nr = 0, i;
	zcrpc_status st;
	int sfd;

	if (!s)
		return ZCRPC_INVALID_ARGUMENT;
	zcrpc_serve_opts_init(&opt);
	if (o && ZCRPC__ABI_IN(&opt, o, sizeof(size_t)) != ZCRPC_OK)
		return ZCRPC_INVALID_ARGUMENT;
	if (!s->listening || !s->l || atomic_load(&s->serve) ||
	    zcrpc__worker_in_progress(s->w))
		return ZCRPC_FAILED_PRECONDITION;
	st = open_signals(&opt, &old, &sfd);
	if (st != ZCRPC_OK)
		return st;
	memset(&sv, 0, sizeof(sv));
	sv.s = s;
	atomic_init(&sv.grace_ms, opt.grace_ms);
	if (pthread_mutex_init(&sv.lock, NULL) ||
	    pthread_cond_init(&sv.cv, NULL)) {
		st = ZCRPC_RESOURCE_EXHAUSTED;
		goto out_sig;
	}
	for (i = 1; i < s->nshards; i++) {
		r[nr].sv = &sv;
		r[nr].w = s->shards[i]->w;
		if (pthread_create(&r[nr].t, NULL, run_worker, &r[nr]))
			break;
		nr++;
	}
	if (nr + 1 < s->nshards) { /* no thread for every worker */
		atomic_store(&sv.quit, 1);
		for (i = 0; i < nr; i++)
			pthread_join(r[i].t, NULL);
		st = ZCRPC_RESOURCE_EXHAUSTED;
		goto out_cv;
	}
	atomic_store(&s->serve, &sv);
	st = serve_loop(&sv, r, nr, sfd, opt.grace_ms);
	pthread_mutex_lock(&s->pub_lock);
	atomic_store(&s->serve, NULL); /* no new waiter from here on */
	pthread_mutex_unlock(&s->pub_lock);
	pthread_mutex_lock(&sv.lock);
	sv.result = st;
	sv.done = 1;
	pthread_cond_broadcast(&sv.cv);
	while (sv.waiters) /* they read sv.result before it goes */
		pthread_cond_wait(&sv.cv, &sv.lock);
	pthread_mutex_unlock(&sv.lock);
out_cv:
	pthread_cond_destroy(&sv.cv);
	pthread_mutex_destroy(&sv.lock);
out_sig:
	if (sfd >= 0) {
		close(sfd);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	return st;
}
