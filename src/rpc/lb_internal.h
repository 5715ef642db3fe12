/* zcrpc — what the files of target channels share (lb_channel.c,
 * lb_call.c, lb_pickers.c, target.c, resolve_file.c): a target channel
 * (zcrpc/balance.h) is a zcrpc_channel whose @lb is set. It owns one
 * ordinary channel per backend (a "subchannel": its connection, backoff,
 * GOAWAY handling and calls are the single-server channel's, unchanged),
 * a resolver that reports the backend set, a picker, and a table of its
 * own calls: each lives while its attempts go to subchannels, so that a
 * call that failed without reaching a server (or by a retry policy) is
 * attempted again on a backend picked anew. docs/balancing.md. */
#ifndef ZCRPC_RPC_LB_INTERNAL_H
#define ZCRPC_RPC_LB_INTERNAL_H

#include "zcrpc/balance.h"
#include "zcrpc/stream.h"

#include "../core/list.h"
#include "call_table.h"
#include "client_internal.h"

#include <pthread.h>

/* One backend of the set: its subchannel (maybe shared with other
 * target channels: subchannel.c) and what it did. Its address strings
 * are its own (the views point at them). */
struct zcrpc__backend {
	char host[ZCRPC_HOST_MAX + 1];
	char port[ZCRPC_PORT_MAX + 1];
	struct zcrpc__lb *lb;
	uint64_t id; /* from 1, never reused in its lb: calls name it so */
	zcrpc_channel *sub;
	struct zcrpc__list ulink; /* sub->users */
	uint32_t live;		  /* this channel's attempts on it */
	uint64_t picks, ok, failed;
	/* the subchannel's counters when this backend began using it: the
	 * channel's stats count what it did since (subchannel.c) */
	zcrpc_channel_stats base;
	/* health checks (zcrpc_channel_opts.health_check_ms) */
	zcrpc_call_id check_call;
	unsigned check_out : 1; /* a Check is in flight */
	unsigned unhealthy : 1; /* the last check did not say SERVING */
	int64_t next_check_ns;
	struct zcrpc__list link; /* lb->retired once out of the set */
};

/* The channel's end of a resolution (zcrpc_resolver): the resolver may
 * report from any thread, so the set is handed over under @mu and the
 * worker is woken by a post naming the handle by @id (a post that outlives
 * the channel finds nothing: lb_channel.c keeps every live handle). */
struct zcrpc_resolver {
	pthread_mutex_t mu;
	uint64_t id;
	struct zcrpc__list link; /* all handles (lb_channel.c) */
	struct zcrpc__lb *lb;
	zcrpc_worker *w;
	/* the latest report not yet applied */
	int has_report, posted;
	zcrpc_address *addrs; /* strings in the same allocation */
	size_t n;
	zcrpc_status st;
	char why[200];
};

enum lbstate {
	LB_FREE = 0,
	LB_LIVE,    /* an attempt is at a subchannel */
	LB_WAITING, /* on lb->waiting: for a backend, or a retry's backoff */
	LB_DONE,    /* on lb->done: its callback (the lb's own result) waits */
};

/* Attempts of one call in flight at once: a hedged call's (its policy's
 * max_attempts is at most 10); others have one. */
#define ZCRPC__LB_MAX_LIVE 10

/* One attempt in flight at a subchannel: its callback's argument. */
struct lbatt {
	struct lbcall *c;
	struct zcrpc__backend *be; /* NULL: the slot is free */
	zcrpc_call_id sub_id;
};

struct lbcall {
	uint8_t state;
	struct zcrpc__lb *lb;
	unsigned kept : 1;	/* req holds a copy of the payload */
	unsigned cancelled : 1; /* by the caller: no further attempt */
	unsigned wfr : 1;	/* ZCRPC_CALL_WAIT_FOR_READY */
	unsigned hedged : 1;	/* its policy hedges and it may be */
	struct zcrpc__list link; /* lb->waiting or lb->done */
	struct zcrpc__list hlink; /* lb->hedging while its next hedge is due */
	int64_t hedge_at_ns;
	uint32_t method;
	zcrpc_call_cb cb;
	void *arg;
	/* the request, for every attempt */
	void *req;
	size_t len;
	zcrpc_fill_fn fill; /* the first attempt's, when not kept */
	void *fill_ctx;
	zcrpc_call_opts co; /* md, attachment, reply_into point below */
	zcrpc_md *md;	    /* copies (with their bytes) */
	zcrpc_bulk att, rinto;
	void *key; /* copy of co.hash_key */
	int64_t deadline_ns, retry_at_ns;
	uint32_t attempts, transparent;
	int backoff_ms;
	const zcrpc_retry_policy *pol; /* NULL: not idempotent */
	/* LIVE: the attempts in flight (slot[0] for one that does not hedge) */
	struct lbatt slot[ZCRPC__LB_MAX_LIVE];
	uint8_t n_live;
	/* backends (ids) not to pick again: a hedged call's so far, each
	 * tried once; another call's that failed it before its request went
	 * out, passed over while one it has not tried is usable */
	uint64_t tried[ZCRPC__LB_MAX_LIVE];
	uint8_t n_tried;
	/* LB_DONE: the result to deliver */
	zcrpc_status status;
	char message[256];
};

struct lbpolicy {
	uint32_t method;
	zcrpc_retry_policy p;
};

#define ZCRPC__LB_MAX_POLICIES 64

struct zcrpc__lb {
	zcrpc_channel *ch; /* the target channel */
	char *target;
	/* the set, in the resolver's order; pointers stay while in it */
	struct zcrpc__backend **b;
	zcrpc_backend_info *view; /* n entries, for the picker */
	size_t n;
	struct zcrpc__list retired; /* out of the set, calls still on them */
	uint64_t last_be_id;	    /* the newest backend's id */
	/* the picker */
	zcrpc_picker_ops picker;
	void *pstate;
	/* the resolver */
	zcrpc_resolver_ops rops;
	void *rstate;
	struct zcrpc_resolver *res;
	int64_t next_refresh_ns;
	zcrpc_status res_status; /* why the set is empty, or OK */
	char res_why[200];
	int resolved;		 /* a report came */
	/* calls */
	struct zcrpc__call_table calls; /* of struct lbcall */
	struct zcrpc__list waiting;	/* LB_WAITING, in order */
	struct zcrpc__list hedging;	/* LIVE hedged calls, a hedge due */
	struct zcrpc__list done;	/* LB_DONE, in order */
	struct lbpolicy pol[ZCRPC__LB_MAX_POLICIES];
	size_t n_pol;
	size_t retry_buffer;
	int64_t last_call_ns; /* the latest call's start */
	struct zcrpc__timer timer;
	uint64_t rng;
	/* health checks: the interval and the encoded HealthCheckRequest */
	int64_t check_ns;
	uint8_t check_req[256];
	size_t check_len;
	uint32_t check_id;
	/* counters of subchannels gone, so the sums stay monotonic */
	zcrpc_channel_stats gone;
};

/* ---- lb_channel.c ---- */
/* Applies @r's pending report (on the worker's thread). */
void zcrpc__lb_apply_report(struct zcrpc__lb *lb);
/* The state of @be's connection now (a failed health check aside). */
zcrpc_backend_state zcrpc__lb_backend_state(const struct zcrpc__backend *be);
/* Refreshes lb->view's state and load; returns the picker's choice, or
 * NULL when none is usable. The backends whose ids are @excl[0..@n_excl)
 * are shown DOWN (those a call tried already). */
struct zcrpc__backend *zcrpc__lb_pick(struct zcrpc__lb *lb, const void *key,
				      size_t key_len, const uint64_t *excl,
				      size_t n_excl);
/* Arms the channel's timer at @due_ns (or keeps an earlier one). */
void zcrpc__lb_arm(struct zcrpc__lb *lb, int64_t due_ns);
/* Asks the resolver again (a backend failed): at most every 100 ms. */
void zcrpc__lb_refresh_soon(struct zcrpc__lb *lb);
/* Destroys retired backends whose calls all ended. */
void zcrpc__lb_reap_retired(struct zcrpc__lb *lb);

void zcrpc__lb_destroy(zcrpc_channel *ch);
void zcrpc__lb_get_stats(const zcrpc_channel *ch, zcrpc_channel_stats *sum);
zcrpc_status zcrpc__lb_stream_start(zcrpc_channel *ch, uint32_t method,
				    const zcrpc_stream_opts *o,
				    const zcrpc_stream_handlers *h,
				    zcrpc_stream **out);
zcrpc_status zcrpc__channel_load_opts(zcrpc_channel *ch,
				      const zcrpc_channel_opts *o);

/* ---- subchannel.c ---- */
/* A subchannel to @host:@port for a backend of @lbch: a pooled one of the
 * worker whose options match (unless lbch->o.no_sharing), or a new one. */
zcrpc_status zcrpc__subchannel_get(zcrpc_channel *lbch, const char *host,
				   const char *port, zcrpc_channel **out);
/* A user leaves @sub: the last destroys it. */
void zcrpc__subchannel_put(zcrpc_channel *sub);
/* Whether @a and @b's connections would be the same (the sharing key
 * beside the worker and the address). */
int zcrpc__conn_opts_same(const zcrpc_channel *a, const zcrpc_channel *b);

/* ---- lb_call.c ---- */
/* Takes @be's attempts off its subchannel, silently (the channel or the
 * backend goes): each is cancelled there and completed CANCELLED "why"
 * here (delivered by zcrpc__lb_run_calls). The connections whose device
 * may still use a caller's memory for one of them are added to
 * @risk[0..2) (*@n_risk). */
void zcrpc__lb_detach_calls(struct zcrpc__lb *lb, struct zcrpc__backend *be,
			    const char *why, zcrpc_conn **risk,
			    size_t *n_risk);
zcrpc_status zcrpc__lb_call_start(zcrpc_channel *ch, uint32_t method,
				  size_t len, zcrpc_fill_fn fill,
				  void *fill_ctx, const zcrpc_call_opts *o,
				  zcrpc_call_cb cb, void *arg,
				  zcrpc_call_id *id);
zcrpc_status zcrpc__lb_call_cancel(zcrpc_channel *ch, zcrpc_call_id id);
/* Attempts the waiting calls whose time came or that may find a backend
 * now; delivers the lb's own results; returns the next due time (0 none). */
int64_t zcrpc__lb_run_calls(struct zcrpc__lb *lb, int64_t now);
/* Completes every call CANCELLED (the channel goes). */
void zcrpc__lb_cancel_all(struct zcrpc__lb *lb);
void zcrpc__lb_calls_fini(struct zcrpc__lb *lb);

/* ---- lb_pickers.c ---- */
/* The built-in policy named @name, or NULL. */
const zcrpc_picker_ops *zcrpc__lb_builtin_picker(const char *name);

/* ---- target.c ---- */
/* Parses @target into its resolver's ops (a copy) and the name after the
 * scheme (*@name points into @target). INVALID_ARGUMENT when it does not
 * parse or names no resolver. */
zcrpc_status zcrpc__target_resolver(const char *target,
				    zcrpc_resolver_ops *ops,
				    const char **name);
/* Parses one "HOST:PORT" / "[V6]:PORT" (@len bytes at @s) into @host and
 * @port; nonzero when it does not parse. @v6: 1 brackets required, 0 a
 * bare IPv4/name, -1 either. */
int zcrpc__target_parse_hostport(const char *s, size_t len, int v6,
				 char *host, char *port);

/* ---- resolve_file.c, resolve_dns.c, resolve_etcd.c ---- */
extern const zcrpc_resolver_ops zcrpc__resolve_file;
extern const zcrpc_resolver_ops zcrpc__resolve_dns;
extern const zcrpc_resolver_ops zcrpc__resolve_etcd;

#endif /* ZCRPC_RPC_LB_INTERNAL_H */
