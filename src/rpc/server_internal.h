/* zcrpc — what the server's files share (server.c, server_dispatch.c,
 * server_reply.c, server_bulk.c, server_send.c): the server, connection
 * and call structures, the call table's lookups, and the functions one
 * file calls in another. */
#ifndef ZCRPC_RPC_SERVER_INTERNAL_H
#define ZCRPC_RPC_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../core/list.h"
#include "rpc_internal.h"
#include "batch.h"
#include "intercept.h"
#include "zcrpc/stream.h"

/* How soon a frame that found no pool slot is tried again. */
#define ZCRPC_RETRY_NS (1000LL * 1000LL)

/* A request part's write gets bulk_write_timeout_ms plus this per MiB
 * (a floor of 1 MiB/s: rxe in an emulated guest moves 3-35 MiB/s). */
#define ZCRPC_NS_PER_MIB (1000LL * 1000000LL)

/* A buffer whose window was not revoked (its connection closed first) is
 * not deregistered for this long: the teardown deallocates the window
 * (close wait 2 s, flush 100 ms) and a registration with a bound window
 * cannot be deregistered. */
#define ZCRPC_WINDOW_GRACE_NS (5000LL * 1000000LL)

enum sstate {
	SS_FREE = 0,
	SS_AWAIT_BULK,	/* granted a target for the request's bulk part */
	SS_REVOKING,	/* its bulk part landed (or it was cancelled): the
			 * window is being revoked before anyone reads it */
	SS_QUEUED,	/* ready, waiting for a handler slot */
	SS_RUNNING,	/* the handler has it; waiting for the reply */
	SS_REPLY_GRANT, /* reply sent with a bulk part; waiting for the grant */
	SS_REPLY_WRITE, /* writing the reply's bulk part */
	SS_AWAIT_BUF,	/* its request buffer is being registered off-thread
			 * (req_bulk NULL), or is in hand and its window
			 * waits for a bind slot (zcrpc__server_retry_grants) */
	SS_REPLY_BUF,	/* its reply is built; its bulk buffer is being
			 * registered off-thread (the bytes wait on the heap) */
};

struct sconn;

#define ZCRPC__PART_IN	1
#define ZCRPC__PART_OUT 2

struct method {
	uint32_t id;
	char *name;
	zcrpc_handler fn;
	void *arg;
	zcrpc_stream_handlers *sh; /* a streaming method's (owned), else NULL */
};

struct zcrpc_server_call {
	uint8_t state;
	atomic_uchar cancelled; /* any thread reads it (call_cancelled) */
	uint8_t bulk_bad; /* its part's write carried the wrong byte count */
	uint8_t stream_part; /* the record of a stream message by RDMA WRITE
			      * (stream_bulk.c), no handler: the client's
			      * (ZCRPC__PART_IN), delivered to @stream when
			      * it landed, or the server's (ZCRPC__PART_OUT),
			      * a reply part whose write @stream waits for */
	struct zcrpc_stream *stream; /* NULL once the stream went */
	zcrpc_server *s;
	struct sconn *sc; /* NULL once the connection is gone */
	struct zcrpc__list link;  /* sc->calls */
	struct zcrpc__list qlink; /* s->run_queue while QUEUED */
	uint32_t client_ref;
	int64_t deadline_ns, timeout_us;
	const struct method *m;
	zcrpc_msg req;	       /* the kept request frame */
	struct zcrpc_frame f;  /* points into req */
	zcrpc_md md[ZCRPC_MD_MAX_PAIRS];
	size_t n_md;
	struct zcrpc__bulkbuf *req_bulk;
	zcrpc_grant *req_grant; /* the window over req_bulk, until revoked */
	size_t write_len;	/* bulk_bad: the byte count that came */
	zcrpc_request view; /* what the handler sees, valid until the reply */
	size_t budget;		/* bytes charged to sc->bulk_held */
	int64_t bulk_deadline_ns; /* AWAIT_BULK: the write's time limit (it
				   * moves later while the connection's
				   * earlier parts land, see bulk_due);
				   * REPLY_GRANT: the client's grant's */
	int64_t granted_ns;	  /* AWAIT_BULK: when the grant was made */
	/* reply bulk part */
	struct zcrpc__bulkbuf *reply_buf;
	zcrpc_bulk reply_src;
	void *reply_heap;	     /* REPLY_BUF: the bytes, until the buffer */
	struct zcrpc__out reply_out; /* REPLY_BUF: the reply frame, unsent */
	void (*on_done)(void *ctx, zcrpc_status st);
	void *done_ctx;
	struct zcrpc__icall ic;	 /* the server's interceptors for this call */
	zcrpc_status ic_status;	 /* its end for them, once a reply was made */
	uint8_t ic_replied;
};

/* A frame that could not be built for want of a pool slot: kept as its
 * fields and built when a slot returns (the server's timer retries), never
 * dropped. */
struct pframe {
	struct pframe *next;
	struct zcrpc_frame f;
	uint32_t grant_ref; /* BULK_GRANT: the call it is for; dropped when
			     * that call no longer waits for its bulk part */
	size_t len;	    /* bytes of msg */
	char msg[];
};

struct sconn {
	zcrpc_server *s;
	zcrpc_conn *conn;
	struct zcrpc__list link;	       /* s->conns */
	struct zcrpc__list calls;	       /* its calls, newest first */
	struct zcrpc__qframe *q_head, *q_tail; /* frames waiting for credits */
	struct pframe *p_head, *p_tail;	       /* frames waiting for a slot */
	size_t bulk_held; /* bulk memory granted (or being registered) for
			   * request parts not yet written */
	int64_t landed_ns, landed_granted_ns; /* the last part that landed:
					       * when, and when granted */
	int closed;
	/* idle_timeout_ms (server.c): armed at accept, stopped by the first
	 * request; when it runs, the connection is closed. */
	struct zcrpc__timer idle;
	int called; /* a request frame arrived */
	int goaway_acked; /* the client answered our GOAWAY (DRAIN) */
	struct zcrpc__list streams; /* its open streams (stream_server.c) */
	uint32_t nstreams;
	struct zcrpc__batch batch; /* stream frames gathered (server_send.c) */
};

struct zcrpc_server {
	zcrpc_worker *w;
	zcrpc_server_opts o;
	zcrpc_listener *l;
	uint16_t port;
	struct method *methods;
	size_t nmethods, cap_methods;
	struct zcrpc__schain ics; /* interceptors (the root's serve every shard) */
	struct zcrpc__list conns;	/* of struct sconn */
	struct zcrpc__call_table calls; /* of zcrpc_server_call */
	struct zcrpc__list run_queue; /* waiting for a handler slot, in order */
	struct zcrpc__list streams;   /* every stream of the shard, until freed */
	struct zcrpc__bulk_cache bulk;
	struct zcrpc__timer timer; /* deferred frames, buffers registered
				    * off-thread, bulk time limits */
	uint32_t npframes;	   /* frames waiting for a slot, all conns */
	uint32_t grant_waits;	   /* request parts waiting for a window-bind
				    * slot (at most: recounted by the retry) */
	size_t conn_max;	   /* bulk budget per connection */
	int64_t write_timeout_ns;
	int64_t next_bulk_check_ns; /* earliest bulk time limit, 0 = none */
	int64_t idle_ns;	    /* memory free this long is given back */
	int64_t next_trim_ns;
	int shutting_down;
	zcrpc_server_stats st;
	uint8_t psk[ZCRPC_PSK_MAX]; /* o.psk points here */
	/* A server on several workers (docs/design.md, Servers on many
	 * workers): the public handle is the root, the shard of the home
	 * worker (the listener's); every other worker has a shard of its own,
	 * this struct with its own connections, calls, run queue, bulk cache,
	 * timer and counters, touched only by its worker's thread. Shards
	 * share the root's method table (read-only once listening) and
	 * options. */
	zcrpc_server *root;    /* itself for the root */
	zcrpc_server **shards; /* root only: shards[0] == root */
	size_t nshards;
	int listening;
	/* Counters as the shard's thread last published them (at accepts,
	 * closes, its timer, the end of a shutdown), for other threads. */
	pthread_mutex_t pub_lock;
	zcrpc_server_stats pub;
	/* server_shutdown.c: a check posted to the shard's worker, and what
	 * it found (any thread reads them). */
	atomic_int chk_pending, chk_busy, chk_conns, chk_unacked;
	atomic_uint chk_seq;
	/* server_runtime.c: workers the server made (threads = N), and the
	 * zcrpc_server_serve() running it (NULL when none). */
	zcrpc_context *own_ctx;
	zcrpc_worker **own;
	size_t nown;
	struct zcrpc__serve *_Atomic serve;
	/* health.c: the root's service statuses (grpc.health.v1), and this
	 * shard's Watch streams */
	struct zcrpc__health *health;
	struct zcrpc__health_watch *hwatch;
	/* announce.c: the root's announcements (zcrpc_server_announce), a
	 * list; the drain withdraws them before its GOAWAY, destroy those
	 * left. */
	struct zcrpc_announcement *announced;
};

static inline uint32_t zcrpc__scall_ref(const zcrpc_server *s,
					const zcrpc_server_call *c)
{
	return zcrpc__call_table_ref(&s->calls, c);
}

#define zcrpc__scall_of(node, member)                                          \
	zcrpc__container_of(node, zcrpc_server_call, member)
#define zcrpc__sconn_of(node) zcrpc__container_of(node, struct sconn, link)

static inline zcrpc_server_call *zcrpc__scall_lookup(zcrpc_server *s,
						     uint32_t ref)
{
	return zcrpc__call_table_lookup(&s->calls, ref);
}

/* ---- server.c ---- */
/* A shard's counters now (its own thread), and their publication. */
void zcrpc__server_stats_now(const zcrpc_server *s, zcrpc_server_stats *out);
void zcrpc__server_publish(zcrpc_server *s);
/* server_shutdown.c: calls alive or replies queued on shard @s (its
 * thread), and the GOAWAY to every connection. */
int zcrpc__server_busy(const zcrpc_server *s);
void zcrpc__server_goaway_all(zcrpc_server *s);
/* The shutdown itself (every shard), on the home worker's thread. */
zcrpc_status zcrpc__server_drain(zcrpc_server *s, int grace_ms);
/* health.c: the health service registered on a new server, freed with
 * it; every service NOT_SERVING when the drain starts. */
zcrpc_status zcrpc__health_init(zcrpc_server *s);
void zcrpc__health_fini(zcrpc_server *s);
void zcrpc__health_drain(zcrpc_server *s);
/* On the shard's worker: its GOAWAY tells its watchers NOT_SERVING and
 * ends their streams; its end frees what it kept. */
void zcrpc__health_goaway(zcrpc_server *shard);
void zcrpc__health_shard_fini(zcrpc_server *shard);
/* announce.c: withdraws (and frees) every announcement of @s. */
void zcrpc__server_withdraw_all(zcrpc_server *s);
/* server_runtime.c: the workers of threads = N (home in *@home), their
 * release; a shutdown asked of a running zcrpc_server_serve(). */
zcrpc_status zcrpc__server_make_workers(zcrpc_server *s, zcrpc_worker **home);
void zcrpc__server_free_workers(zcrpc_server *s);
zcrpc_status zcrpc__serve_stop(zcrpc_server *s, int grace_ms);
const struct method *zcrpc__server_find_method(const zcrpc_server *s,
					       uint32_t id);
/* Adds a method: unary (@fn, @arg) or streaming (@sh, which the server
 * then owns). */
zcrpc_status zcrpc__server_add_method(zcrpc_server *s, const char *full_name,
				      zcrpc_handler fn, void *arg,
				      zcrpc_stream_handlers *sh);
/* The connection made a call: it no longer closes for idling. */
void zcrpc__sconn_called(struct sconn *sc);

/* ---- server_send.c: frames out ---- */
/* Sends @out: a small stream frame joins the connection's batch (sent at
 * the turn's end), anything else goes after it, now or queued. */
void zcrpc__sconn_send(struct sconn *sc, struct zcrpc__out *out);
/* The connection's batch goes (its zcrpc__batch send function). */
void zcrpc__sconn_send_batch(struct zcrpc__batch *b, struct zcrpc__out *out);
void zcrpc__sconn_flush(struct sconn *sc);
void zcrpc__sconn_flush_deferred(struct sconn *sc);
void zcrpc__sconn_send_frame(struct sconn *sc, struct zcrpc_frame *f,
			     const char *msg, size_t n, uint32_t grant_ref);
/* An UNAVAILABLE reply to a call refused before any handler saw it
 * (shutting down): marked REFUSED for a DRAIN client, which may send it
 * elsewhere. */
void zcrpc__sconn_send_refused(struct sconn *sc, uint32_t call_id,
			       const char *msg);
void zcrpc__sconn_send_simple(struct sconn *sc, uint8_t type, uint32_t call_id,
			      zcrpc_status status, const char *msg);

/* ---- server_dispatch.c: requests to handlers ---- */
/* The server's interceptors see request (or stream) @f: OK, or the status
 * and reason (*@why) of the refusal. */
zcrpc_status zcrpc__server_intercept(zcrpc_server *s, const struct zcrpc_frame *f,
				     struct zcrpc__icall *ic, const char **why);
void zcrpc__scall_free(zcrpc_server *s, zcrpc_server_call *c);
void zcrpc__scall_dispatch(zcrpc_server *s, zcrpc_server_call *c);
/* The client will not write @c's part or wants no reply (its CANCEL):
 * dropped if not running yet, its grant revoked first. */
void zcrpc__scall_cancel(struct sconn *sc, zcrpc_server_call *c);
/* A stream message's record (stream_part) landed: its stream takes the
 * message from the buffer, then the record is freed. */
void zcrpc__sstream_part_landed(zcrpc_server *s, zcrpc_server_call *c);
void zcrpc__server_run_queue(zcrpc_server *s);
void zcrpc__server_rq_remove(zcrpc_server *s, zcrpc_server_call *c);
void zcrpc__sconn_protocol_error(struct sconn *sc, const char *why);
void zcrpc__sconn_on_recv(zcrpc_conn *conn, const void *data, size_t len,
			  void *arg);
void zcrpc__sconn_on_writable(zcrpc_conn *conn, void *arg);

/* ---- server_bulk.c: bulk parts ---- */
void zcrpc__scall_budget_release(zcrpc_server_call *c);
void zcrpc__server_watch_bulk_deadline(zcrpc_server *s, int64_t dl);
void zcrpc__scall_request_bulk(zcrpc_server *s, struct sconn *sc,
			       zcrpc_server_call *c);
void zcrpc__server_on_buffer(void *arg, uint32_t ref, struct zcrpc__bulkbuf *b);
void zcrpc__scall_revoke_request(struct sconn *sc, zcrpc_server_call *c);
void zcrpc__sconn_on_grant(struct sconn *sc, const struct zcrpc_frame *f);
void zcrpc__sconn_on_write_imm(zcrpc_conn *conn, uint32_t imm, size_t len,
			       void *arg);
void zcrpc__sconn_on_revoked(zcrpc_conn *conn, void *uctx, zcrpc_status st,
			     void *arg);
void zcrpc__sconn_on_write_done(zcrpc_conn *conn, void *uctx, zcrpc_status st,
				void *arg);
void zcrpc__server_bulk_check(zcrpc_server *s, int64_t now);
/* Binds the windows of the request parts that found no window-bind slot
 * on their connection (its send queue's share for binds was full), from
 * the server's timer. */
void zcrpc__server_retry_grants(zcrpc_server *s);

#endif /* ZCRPC_RPC_SERVER_INTERNAL_H */
