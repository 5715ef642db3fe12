/* The soak and fault tests' server methods and random client (soak_peer.h). */
#define _POSIX_C_SOURCE 200809L
#include "soak_peer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

uint8_t soak_pat(uint64_t seed, uint64_t k)
{
	/* Cheap (one add per byte under TCG) and different for every seed,
	 * length and offset that matter: a shifted or short reply differs. */
	return (uint8_t)((seed >> 8) + k * ((seed & 0xfe) | 1) + (k >> 8));
}

void soak_fill(void *dst, size_t len, void *ctx)
{
	uint64_t seed = *(const uint64_t *)ctx;
	uint8_t *d = dst;
	size_t k;

	for (k = 0; k < len; k++)
		d[k] = soak_pat(seed, k);
}

/* ---- server ------------------------------------------------------------- */

struct held {
	zcrpc_server_call *call;
	zcrpc_request req; /* a copy: the handler's struct lives on the stack;
			      what it points to stays until the reply */
	int64_t due_ns;	   /* 0 = until released */
};

struct soak_server {
	struct held *held;
	size_t nheld, cap;
	uint64_t calls;
};

static zcrpc_status echo_reply(zcrpc_server_call *call, const zcrpc_request *r)
{
	zcrpc_reply_opts o;

	memset(&o, 0, sizeof(o));
	o.size = sizeof(o);
	if (r->attachment_len)
		o.attachment = &r->attachment_mr;
	return zcrpc_server_call_reply(call, ZCRPC_OK, NULL, r->data, r->len, &o);
}

static void on_echo(zcrpc_server_call *call, const zcrpc_request *r, void *arg)
{
	struct soak_server *ss = arg;

	ss->calls++;
	echo_reply(call, r);
}

static void hold(struct soak_server *ss, zcrpc_server_call *call,
		 const zcrpc_request *r, int64_t due)
{
	ss->calls++;
	if (ss->nheld == ss->cap) {
		size_t cap = ss->cap ? 2 * ss->cap : 256;
		struct held *n = realloc(ss->held, cap * sizeof(*n));

		if (!n) {
			zcrpc_server_call_reply(call, ZCRPC_RESOURCE_EXHAUSTED, "no memory",
					 NULL, 0, NULL);
			return;
		}
		ss->held = n;
		ss->cap = cap;
	}
	ss->held[ss->nheld++] = (struct held){call, *r, due};
}

static void on_slow(zcrpc_server_call *call, const zcrpc_request *r, void *arg)
{
	hold(arg, call, r, now_ns() + (int64_t)(r->len % 8) * 1000000LL);
}

static void on_hold(zcrpc_server_call *call, const zcrpc_request *r, void *arg)
{
	hold(arg, call, r, 0);
}

struct soak_server *soak_server_new(zcrpc_server *s)
{
	struct soak_server *ss = calloc(1, sizeof(*ss));

	if (!ss)
		return NULL;
	if (zcrpc_server_register(s, SOAK_ECHO, on_echo, ss) != ZCRPC_OK ||
	    zcrpc_server_register(s, SOAK_SLOW, on_slow, ss) != ZCRPC_OK ||
	    zcrpc_server_register(s, SOAK_HOLD, on_hold, ss) != ZCRPC_OK) {
		free(ss);
		return NULL;
	}
	return ss;
}

void soak_server_tick(struct soak_server *ss)
{
	int64_t now;
	size_t i;

	if (!ss->nheld)
		return;
	now = now_ns();
	for (i = 0; i < ss->nheld;) {
		struct held *h = &ss->held[i];

		/* A call whose client cancelled or left is answered at once
		 * (the reply is not sent; the handle is released). */
		if ((h->due_ns && h->due_ns <= now) ||
		    zcrpc_server_call_cancelled(h->call)) {
			echo_reply(h->call, &h->req);
			ss->held[i] = ss->held[--ss->nheld];
		} else {
			i++;
		}
	}
}

size_t soak_server_release(struct soak_server *ss)
{
	size_t ok = 0;

	while (ss->nheld) {
		struct held *h = &ss->held[--ss->nheld];

		ok += echo_reply(h->call, &h->req) == ZCRPC_OK;
	}
	return ok;
}

size_t soak_server_held(const struct soak_server *ss)
{
	return ss->nheld;
}

uint64_t soak_server_calls(const struct soak_server *ss)
{
	return ss->calls;
}

void soak_server_free(struct soak_server *ss)
{
	if (!ss)
		return;
	soak_server_release(ss);
	free(ss->held);
	free(ss);
}

/* ---- client ------------------------------------------------------------- */

enum {
	F_DEADLINE = 1,
	F_CANCEL = 2, /* zcrpc_call_cancel() returned OK */
	F_SLOW = 4,
	F_BULK = 8,
	F_WANT_CANCEL = 16,
};

struct run;

struct rec {
	uint64_t seed;
	struct run *run;
	zcrpc_call_id id;
	uint32_t len;
	uint8_t flags;
	uint8_t fired;
};

struct pending_cancel {
	uint64_t idx;
	uint64_t due_iter;
};

struct run {
	const struct soak_cfg *cfg;
	struct soak_counts *c;
	uint64_t in_flight;
};

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static void fail(struct soak_counts *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void fail(struct soak_counts *c, const char *fmt, ...)
{
	va_list ap;

	if (c->first_error[0])
		return;
	va_start(ap, fmt);
	vsnprintf(c->first_error, sizeof(c->first_error), fmt, ap);
	va_end(ap);
}

static void on_done(zcrpc_channel *ch, const zcrpc_reply *r, void *arg)
{
	struct rec *x = arg;
	struct run *run = x->run;
	struct soak_counts *c = run->c;
	const uint8_t *d = r->data;
	size_t k;

	(void)ch;
	if (x->fired++) {
		c->duplicates++;
		fail(c, "call seed %llu completed twice",
		     (unsigned long long)x->seed);
		return;
	}
	c->completed++;
	run->in_flight--;
	switch (r->status) {
	case ZCRPC_OK:
		c->ok++;
		if (r->len != x->len) {
			c->bad_data++;
			fail(c, "reply of %zu bytes to a %u-byte request", r->len,
			     x->len);
			break;
		}
		for (k = 0; k < r->len; k++) {
			if (d[k] != soak_pat(x->seed, k)) {
				c->bad_data++;
				fail(c, "reply byte %zu of %u differs", k, x->len);
				break;
			}
		}
		if (x->flags & F_BULK)
			c->bulk_ok++;
		break;
	case ZCRPC_CANCELLED:
		c->cancelled++;
		if (!(x->flags & F_CANCEL)) {
			c->unexpected++;
			fail(c, "CANCELLED without a cancel: %s", r->message);
		}
		break;
	case ZCRPC_DEADLINE_EXCEEDED:
		c->deadline++;
		if (!(x->flags & F_DEADLINE)) {
			c->unexpected++;
			fail(c, "DEADLINE_EXCEEDED without a deadline: %s",
			     r->message);
		}
		break;
	case ZCRPC_UNAVAILABLE:
		if (!c->unavailable++)
			snprintf(c->first_unavailable, sizeof(c->first_unavailable),
				 "%s", r->message ? r->message : "");
		if (!run->cfg->unavailable_ok) {
			c->unexpected++;
			fail(c, "UNAVAILABLE: %s", r->message);
		}
		break;
	default:
		c->unexpected++;
		fail(c, "unexpected status %s: %s", zcrpc_status_str(r->status),
		     r->message);
		break;
	}
}

static int start_one(zcrpc_channel *ch, struct run *run, struct rec *x,
		     uint64_t *rs, uint32_t echo, uint32_t slow)
{
	const struct soak_cfg *cfg = run->cfg;
	zcrpc_call_opts o;
	zcrpc_status st;

	zcrpc_call_opts_init(&o);
	x->run = run;
	x->seed = rnd(rs);
	x->flags = 0;
	if (cfg->bulk_pct && rnd(rs) % 100 < cfg->bulk_pct &&
	    cfg->max_bulk > 4097) {
		x->len = (uint32_t)(4097 + rnd(rs) % (cfg->max_bulk - 4096));
		x->flags |= F_BULK;
	} else {
		x->len = (uint32_t)(rnd(rs) % 4001);
	}
	if (rnd(rs) % 100 < cfg->slow_pct)
		x->flags |= F_SLOW;
	if (rnd(rs) % 100 < cfg->deadline_pct) {
		x->flags |= F_DEADLINE;
		o.timeout_us = (int64_t)(500 + rnd(rs) % 19500);
	}
	if (rnd(rs) % 100 < cfg->cancel_pct)
		x->flags |= F_WANT_CANCEL;
	st = zcrpc_call_start(ch, (x->flags & F_SLOW) ? slow : echo, x->len,
			      soak_fill, &x->seed, &o, on_done, x, &x->id);
	if (st != ZCRPC_OK) {
		run->c->refused++;
		if (st != ZCRPC_RESOURCE_EXHAUSTED)
			fail(run->c, "zcrpc_call_start: %s", zcrpc_status_str(st));
		return -1;
	}
	run->c->issued++;
	run->in_flight++;
	return 0;
}

static void cancel_one(zcrpc_channel *ch, struct rec *x, struct soak_counts *c)
{
	zcrpc_status st = zcrpc_call_cancel(ch, x->id);

	if (st == ZCRPC_OK) {
		if (x->fired) {
			c->unexpected++;
			fail(c, "cancel of a completed call returned OK");
		}
		x->flags |= F_CANCEL;
		c->cancel_ok++;
	} else if (st == ZCRPC_NOT_FOUND) {
		/* Completed, or its result is about to be delivered. */
		c->cancel_not_found++;
	} else {
		c->unexpected++;
		fail(c, "zcrpc_call_cancel: %s", zcrpc_status_str(st));
	}
}

int soak_client_run(const struct soak_cfg *cfg, struct soak_counts *c)
{
	struct run run = {cfg, c, 0};
	struct rec *recs = NULL;
	struct pending_cancel *pc = NULL;
	size_t npc = 0, pc_cap, i;
	zcrpc_worker *w = NULL;
	zcrpc_channel *ch = NULL;
	zcrpc_channel_stats cs;
	zcrpc_channel_opts co;
	zcrpc_worker_stats ws;
	uint64_t rs = cfg->seed, iter = 0, last_done = 0;
	uint32_t echo = zcrpc_method_id(SOAK_ECHO), slow = zcrpc_method_id(SOAK_SLOW);
	int64_t t0 = now_ns(), last_change = t0, next_report;
	zcrpc_status st;

	memset(c, 0, sizeof(*c));
	next_report = t0 + (int64_t)cfg->report_every_s * 1000000000LL;
	recs = calloc(cfg->calls ? cfg->calls : 1, sizeof(*recs));
	pc_cap = 4 * (size_t)cfg->in_flight + 1;
	pc = calloc(pc_cap, sizeof(*pc));
	if (!recs || !pc) {
		fail(c, "out of memory");
		goto out;
	}
	zcrpc_channel_opts_init(&co);
	co.src_addr = cfg->src_addr;
	if ((st = zcrpc_worker_create(NULL, &w)) != ZCRPC_OK ||
	    (st = zcrpc_channel_create(w, cfg->addr, cfg->port, &co, &ch)) !=
		    ZCRPC_OK) {
		fail(c, "setup: %s", zcrpc_status_str(st));
		goto out;
	}
	while (c->completed < cfg->calls || run.in_flight) {
		while (c->issued < cfg->calls && run.in_flight < cfg->in_flight) {
			struct rec *x = &recs[c->issued];

			if (start_one(ch, &run, x, &rs, echo, slow))
				break;
			if (x->flags & F_WANT_CANCEL) {
				uint64_t d = rnd(&rs) % 40;

				if (d == 0 || npc == pc_cap)
					cancel_one(ch, x, c); /* before it left */
				else
					pc[npc++] = (struct pending_cancel){
						c->issued - 1, iter + d};
			}
		}
		zcrpc_worker_progress(w, 1);
		iter++;
		for (i = 0; i < npc;) {
			if (pc[i].due_iter <= iter) {
				cancel_one(ch, &recs[pc[i].idx], c);
				pc[i] = pc[--npc];
			} else {
				i++;
			}
		}
		if (c->completed != last_done) {
			last_done = c->completed;
			last_change = now_ns();
		} else if (now_ns() - last_change > 60LL * 1000000000LL) {
			fail(c, "stalled: %llu of %llu calls completed, %llu in flight",
			     (unsigned long long)c->completed,
			     (unsigned long long)cfg->calls,
			     (unsigned long long)run.in_flight);
			break;
		}
		if (cfg->report_every_s && now_ns() >= next_report) {
			next_report += (int64_t)cfg->report_every_s * 1000000000LL;
			c->seconds = (double)(now_ns() - t0) / 1e9;
			zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
			c->late_replies = cs.late_replies;
			c->reconnects = cs.reconnects;
			soak_counts_print(c, "progress");
		}
	}
	zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
	c->late_replies = cs.late_replies;
	c->reconnects = cs.reconnects;
out:
	c->seconds = (double)(now_ns() - t0) / 1e9;
	zcrpc_channel_destroy(ch); /* completes any stalled call (CANCELLED) */
	if (w) {
		int64_t end = now_ns() + 10LL * 1000000000LL;

		do {
			zcrpc_worker_progress(w, 1);
			zcrpc_worker_get_stats(w, &ws, sizeof(ws));
		} while ((ws.conns || ws.pool_in_use) && now_ns() < end);
		c->pool_in_use = ws.pool_in_use;
		c->pool_bad_frees = ws.pool_bad_frees;
		zcrpc_worker_destroy(w);
	}
	if (c->issued != cfg->calls)
		fail(c, "issued %llu of %llu calls", (unsigned long long)c->issued,
		     (unsigned long long)cfg->calls);
	if (c->completed != c->issued)
		fail(c, "%llu calls issued, %llu completed",
		     (unsigned long long)c->issued,
		     (unsigned long long)c->completed);
	if (c->pool_in_use || c->pool_bad_frees)
		fail(c, "client pool: %llu slots in use, %llu bad frees",
		     (unsigned long long)c->pool_in_use,
		     (unsigned long long)c->pool_bad_frees);
	free(recs);
	free(pc);
	return c->first_error[0] ? 1 : 0;
}

void soak_counts_print(const struct soak_counts *c, const char *who)
{
	fprintf(stderr,
		"%s: issued %llu completed %llu duplicates %llu ok %llu cancelled %llu "
		"deadline %llu unavailable %llu unexpected %llu bad_data %llu bulk_ok %llu "
		"refused %llu late_replies %llu reconnects %llu pool_in_use %llu "
		"seconds %.1f%s%s%s%s\n",
		who, (unsigned long long)c->issued,
		(unsigned long long)c->completed,
		(unsigned long long)c->duplicates, (unsigned long long)c->ok,
		(unsigned long long)c->cancelled, (unsigned long long)c->deadline,
		(unsigned long long)c->unavailable,
		(unsigned long long)c->unexpected,
		(unsigned long long)c->bad_data, (unsigned long long)c->bulk_ok,
		(unsigned long long)c->refused,
		(unsigned long long)c->late_replies,
		(unsigned long long)c->reconnects,
		(unsigned long long)c->pool_in_use, c->seconds,
		c->first_error[0] ? " error: " : "", c->first_error,
		c->first_unavailable[0] ? " first UNAVAILABLE: " : "",
		c->first_unavailable);
}
