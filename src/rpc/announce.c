/* zcrpc — servers announcing themselves in a registry (zcrpc/balance.h):
 * "etcd:http://HOST:PORT/PREFIX" puts the key PREFIX/ADDR = ADDR under a
 * lease, through etcd's v3 HTTP/JSON gateway (etcd_http.h; the protocol
 * facts are at the top of resolve_etcd.c), and a thread of the
 * announcement's own renews the lease every ttl/3 until it is withdrawn.
 * A server keeps its announcements (zcrpc_server.announced): a graceful
 * shutdown withdraws them before its GOAWAY, so that channels watching
 * the prefix drop the server at once rather than when the lease expires;
 * zcrpc_server_destroy() withdraws those left.
 *
 * The grant and the put happen before zcrpc_server_announce() returns
 * (with short timeouts), so that a registry that is not there is the
 * caller's error, not a log line. Later failures are the thread's: a
 * renewal that fails is tried again sooner; a lease that expired
 * meanwhile (etcd answers without a TTL) is granted anew and the key put
 * again. */
#include "etcd_http.h"
#include "lb_internal.h"
#include "server_internal.h"
#include "../core/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TTL_DEFAULT_S 5
#define TTL_MIN_S 2
#define TTL_MAX_S 3600
/* the grant and the put of zcrpc_server_announce(), the revoke */
#define SYNC_TIMEOUT_MS 2000L
#define REVOKE_TIMEOUT_MS 1000L
#define ADDR_MAX (ZCRPC_HOST_MAX + 3 + ZCRPC_PORT_MAX)
#define KEY_MAX (ZCRPC__ETCD_PREFIX_MAX + 1 + ADDR_MAX)
#define B64_LEN(n) (((n) + 2) / 3 * 4 + 1)

struct zcrpc_announcement {
	zcrpc_server *s;
	struct zcrpc_announcement *next; /* s->announced */
	struct zcrpc__etcd_target t;
	char key[B64_LEN(KEY_MAX)], value[B64_LEN(ADDR_MAX)];
	int ttl_s;
	int64_t lease; /* the thread's while it runs */
	struct zcrpc__etcd_client c;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	int stop;	   /* under mu */
	int started;	   /* the thread runs */
	pthread_t thread;
};

void zcrpc_announce_opts_init_sized(zcrpc_announce_opts *caller, size_t size)
{
	zcrpc_announce_opts d;

	memset(&d, 0, sizeof(d));
	d.size = sizeof(d);
	d.ttl_s = TTL_DEFAULT_S;
	zcrpc__abi_init(caller, size, &d, sizeof(d));
}

/* One call of the gateway: 0 and *@doc (in q's answer: the caller
 * finishes @q), or -1 with @why. */
static int call(struct zcrpc_announcement *a, struct zcrpc__etcd_req *q,
		const char *path, const char *body, long timeout_ms,
		struct zcrpc__json *doc, char *why, size_t cap)
{
	return zcrpc__etcd_call(&a->c, q, a->t.base, path, body, timeout_ms,
				doc, why, cap);
}

/* A new lease into a->lease. */
static int grant(struct zcrpc_announcement *a, long timeout_ms, char *why,
		 size_t cap)
{
	struct zcrpc__etcd_req q;
	struct zcrpc__json doc, v;
	char body[64];
	int64_t id = 0, ttl = 0;
	int rc;

	snprintf(body, sizeof(body), "{\"TTL\":\"%d\"}", a->ttl_s);
	rc = call(a, &q, "/v3/lease/grant", body, timeout_ms, &doc, why, cap);
	if (!rc && (zcrpc__json_get(&doc, "ID", &v) ||
		    zcrpc__json_int(&v, &id) || !id ||
		    zcrpc__json_get(&doc, "TTL", &v) ||
		    zcrpc__json_int(&v, &ttl) || ttl <= 0)) {
		snprintf(why, cap, "the lease grant's answer has no ID or TTL");
		rc = -1;
	}
	zcrpc__etcd_req_fini(&q);
	if (!rc)
		a->lease = id;
	return rc;
}

/* The key, under a->lease. */
static int put(struct zcrpc_announcement *a, long timeout_ms, char *why,
	       size_t cap)
{
	struct zcrpc__etcd_req q;
	struct zcrpc__json doc;
	char body[sizeof(a->key) + sizeof(a->value) + 80];
	int rc;

	snprintf(body, sizeof(body),
		 "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}", a->key,
		 a->value, (long long)a->lease);
	rc = call(a, &q, "/v3/kv/put", body, timeout_ms, &doc, why, cap);
	zcrpc__etcd_req_fini(&q);
	return rc;
}

static void revoke(struct zcrpc_announcement *a)
{
	struct zcrpc__etcd_req q;
	struct zcrpc__json doc;
	char body[64], why[160];

	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)a->lease);
	if (call(a, &q, "/v3/lease/revoke", body, REVOKE_TIMEOUT_MS, &doc, why,
		 sizeof(why)))
		/* gone already (404), or etcd is not there: the key goes
		 * when the lease expires */
		zcrpc__log(ZCRPC_LOG_DEBUG, "etcd: %s: revoking lease %lld: %s",
			   a->t.base, (long long)a->lease, why);
	zcrpc__etcd_req_fini(&q);
}

/* 0 renewed, 1 the lease is gone (expired), -1 failed (@why). */
static int keepalive(struct zcrpc_announcement *a, long timeout_ms,
		     char *why, size_t cap)
{
	struct zcrpc__etcd_req q;
	struct zcrpc__json doc, res, v;
	char body[64];
	int64_t ttl = 0;
	int rc;

	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)a->lease);
	rc = call(a, &q, "/v3/lease/keepalive", body, timeout_ms, &doc, why,
		  cap);
	if (!rc && zcrpc__json_get(&doc, "result", &res)) {
		snprintf(why, cap, "the keepalive's answer has no result");
		rc = -1;
	} else if (!rc && (zcrpc__json_get(&res, "TTL", &v) ||
			   zcrpc__json_int(&v, &ttl) || ttl <= 0)) {
		rc = 1; /* etcd leaves TTL out when it is 0 */
	}
	zcrpc__etcd_req_fini(&q);
	return rc;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits on a->cv until @at_ms or stop; returns stop. Called with mu. */
static int sleep_until(struct zcrpc_announcement *a, int64_t at_ms)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(at_ms / 1000);
	ts.tv_nsec = (long)(at_ms % 1000) * 1000000L;
	while (!a->stop && now_ms() < at_ms)
		pthread_cond_timedwait(&a->cv, &a->mu, &ts);
	return a->stop;
}

static void *keeper(void *arg)
{
	struct zcrpc_announcement *a = arg;
	long period = a->ttl_s * 1000L / 3;
	int64_t next = now_ms() + period;
	char why[160];
	int rc, again = 0; /* a new lease and the put are due */

	pthread_mutex_lock(&a->mu);
	while (!sleep_until(a, next)) {
		pthread_mutex_unlock(&a->mu);
		rc = again ? 1 : keepalive(a, period, why, sizeof(why));
		if (rc == 1) { /* expired (etcd was away, or we were slow) */
			if (!again)
				zcrpc__log(ZCRPC_LOG_WARN,
					   "etcd: %s: lease %lld expired; "
					   "announcing again",
					   a->t.base, (long long)a->lease);
			/* a lease granted whose put failed expires alone */
			rc = grant(a, period, why, sizeof(why)) ||
			     put(a, period, why, sizeof(why));
			again = rc != 0;
		}
		if (rc && !atomic_load(&a->c.stop))
			zcrpc__log(ZCRPC_LOG_WARN,
				   "etcd: %s: renewing lease %lld: %s",
				   a->t.base, (long long)a->lease, why);
		/* a failure is tried again sooner: the lease lasts 3 periods */
		next = now_ms() + (rc ? period / 3 : period);
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

static void ann_free(struct zcrpc_announcement *a)
{
	zcrpc__etcd_client_fini(&a->c);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

static zcrpc_status ann_init(struct zcrpc_announcement *a)
{
	pthread_condattr_t ca;
	int bad;

	if (pthread_condattr_init(&ca))
		return ZCRPC_RESOURCE_EXHAUSTED;
	bad = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
	      pthread_cond_init(&a->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (bad)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (pthread_mutex_init(&a->mu, NULL)) {
		pthread_cond_destroy(&a->cv);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	if (zcrpc__etcd_client_init(&a->c)) {
		zcrpc__etcd_client_fini(&a->c);
		pthread_mutex_destroy(&a->mu);
		pthread_cond_destroy(&a->cv);
		return ZCRPC_RESOURCE_EXHAUSTED;
	}
	return ZCRPC_OK;
}

zcrpc_status zcrpc_server_announce(zcrpc_server *s, const char *registry,
				   const char *addr,
				   const zcrpc_announce_opts *o,
				   zcrpc_announcement **out)
{
	struct zcrpc_announcement *a;
	zcrpc_announce_opts opts;
	char host[ZCRPC_HOST_MAX + 1], port[ZCRPC_PORT_MAX + 1];
	char k[KEY_MAX + 1], why[160];
	size_t al;
	zcrpc_status st;

	zcrpc__set_last_error("%s", "");
	zcrpc_announce_opts_init(&opts);
	if (!s || !registry || !addr ||
	    (o && ZCRPC__ABI_IN(&opts, o,
				offsetof(zcrpc_announce_opts, ttl_s) +
					sizeof(int)) != ZCRPC_OK)) {
		zcrpc__set_last_error("%s", "announce: bad arguments");
		return ZCRPC_INVALID_ARGUMENT;
	}
	if (opts.ttl_s < TTL_MIN_S || opts.ttl_s > TTL_MAX_S) {
		zcrpc__set_last_error("announce: ttl_s %d is not %d..%d",
				      opts.ttl_s, TTL_MIN_S, TTL_MAX_S);
		return ZCRPC_INVALID_ARGUMENT;
	}
	al = strlen(addr);
	if (al > ADDR_MAX ||
	    zcrpc__target_parse_hostport(addr, al, -1, host, port)) {
		zcrpc__set_last_error("announce: address %.80s is not "
				      "HOST:PORT or [V6]:PORT", addr);
		return ZCRPC_INVALID_ARGUMENT;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return ZCRPC_RESOURCE_EXHAUSTED;
	if (strncmp(registry, "etcd:", 5) ||
	    zcrpc__etcd_parse_target(registry + 5, &a->t) != ZCRPC_OK) {
		free(a);
		zcrpc__set_last_error("announce: registry %.80s is not "
				      "etcd:http://HOST:PORT/PREFIX", registry);
		return ZCRPC_INVALID_ARGUMENT;
	}
	if ((st = ann_init(a)) != ZCRPC_OK) {
		free(a);
		return st;
	}
	a->s = s;
	a->ttl_s = opts.ttl_s;
	snprintf(k, sizeof(k), "%s/%s", a->t.prefix, addr);
	zcrpc__b64_encode(k, strlen(k), a->key);
	zcrpc__b64_encode(addr, al, a->value);
	if (grant(a, SYNC_TIMEOUT_MS, why, sizeof(why))) {
		zcrpc__set_last_error("etcd: %s: cannot grant a lease: %s",
				      a->t.base, why);
		st = ZCRPC_UNAVAILABLE;
		goto fail;
	}
	if (put(a, SYNC_TIMEOUT_MS, why, sizeof(why))) {
		zcrpc__set_last_error("etcd: %s: cannot put %.80s: %s",
				      a->t.base, k, why);
		revoke(a);
		st = ZCRPC_UNAVAILABLE;
		goto fail;
	}
	if (pthread_create(&a->thread, NULL, keeper, a)) {
		revoke(a);
		st = ZCRPC_RESOURCE_EXHAUSTED;
		goto fail;
	}
	a->started = 1;
	a->next = s->announced;
	s->announced = a;
	if (out)
		*out = a;
	return ZCRPC_OK;

fail:
	ann_free(a);
	return st;
}

void zcrpc_announcement_withdraw(zcrpc_announcement *a)
{
	struct zcrpc_announcement **pp;

	if (!a)
		return;
	for (pp = &a->s->announced; *pp && *pp != a; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = a->next;
	if (a->started) {
		pthread_mutex_lock(&a->mu);
		a->stop = 1;
		pthread_cond_signal(&a->cv);
		pthread_mutex_unlock(&a->mu);
		zcrpc__etcd_client_stop(&a->c); /* its request in flight */
		pthread_join(a->thread, NULL);
		atomic_store(&a->c.stop, 0);
	}
	revoke(a); /* the key goes with it, at once */
	ann_free(a);
}

void zcrpc__server_withdraw_all(zcrpc_server *s)
{
	while (s->announced)
		zcrpc_announcement_withdraw(s->announced);
}
