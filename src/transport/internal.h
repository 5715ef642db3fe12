/* zcrpc — transport internals shared by the files of src/transport.
 * Not installed. */
#ifndef ZCRPC_TRANSPORT_INTERNAL_H
#define ZCRPC_TRANSPORT_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "mempool.h"
#include "zcrpc/transport.h"

/* ---- context.c: devices shared by workers ---------------------------- */

struct zcrpc__ctx_dev {
	struct ibv_context *verbs; /* owned by librdmacm */
	struct ibv_pd *pd;
	struct ibv_device_attr attr;
	uint32_t max_msg_sz; /* of port 1 */
};

struct zcrpc_context {
	atomic_int refs;
	int ndev;
	struct zcrpc__ctx_dev dev[ZCRPC_MAX_DEVICES];
	struct ibv_context **list; /* rdma_get_devices() */
};

struct zcrpc_mr {
	zcrpc_context *ctx;
	void *addr;
	size_t len;
	unsigned flags;
	struct ibv_mr *mrs[ZCRPC_MAX_DEVICES]; /* per context device */
};

void zcrpc__context_ref(zcrpc_context *ctx);
void zcrpc__context_unref(zcrpc_context *ctx);
int zcrpc__context_dev_index(const zcrpc_context *ctx,
			     const struct ibv_context *verbs);
int zcrpc__context_reg(zcrpc_context *ctx, void *addr, size_t len, int access,
		       struct ibv_mr **mrs);
struct zcrpc__registrar zcrpc__context_registrar(zcrpc_context *ctx);

/* ---- worker.c ----------------------------------------------------------- */

/* What an epoll registration points at. */
enum zcrpc__src_kind {
	ZCRPC_SRC_CM = 1,   /* the worker's CM event channel */
	ZCRPC_SRC_COMP,	    /* a device's completion channel */
	ZCRPC_SRC_LISTENER, /* a listener's (synchronous) CM channel */
	ZCRPC_SRC_TIMER,    /* the worker's timerfd */
	ZCRPC_SRC_EVENT,    /* the worker's eventfd (setup threads, posts) */
};

struct zcrpc__src {
	enum zcrpc__src_kind kind;
	void *obj;
};

/* A context device as one worker uses it: its completion channel. */
struct zcrpc__device {
	int idx; /* in the context */
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	const struct ibv_device_attr *attr;
	uint32_t max_msg_sz;
	struct ibv_comp_channel *comp_ch;
	struct zcrpc__src src;
};

/* Active-side address and route resolution, run on a setup thread. */
struct zcrpc__job {
	struct zcrpc__job *next;      /* worker->jobs (all unjoined jobs) */
	struct zcrpc__job *done_next; /* worker->done_jobs */
	pthread_t thread;
	zcrpc_worker *w;
	zcrpc_conn *conn; /* NULL once the worker abandoned it (under lock) */
	char *host, *port, *src_addr;
	struct rdma_cm_id *id; /* result, owned by the job until taken */
	int err;	       /* errno or EAI_* of the failure, 0 on success */
	char detail[160];
};

/* A function handed to the worker by zcrpc_worker_post(). */
struct zcrpc__post {
	struct zcrpc__post *next;
	void (*fn)(zcrpc_worker *w, void *arg);
	void *arg;
};

struct zcrpc_worker {
	zcrpc_worker_opts opts;
	zcrpc_context *ctx; /* one reference held */
	struct zcrpc__pool *pool;
	uint32_t msg_slot_size; /* header + max_msg, rounded to 64 */
	int epfd, timerfd, evfd;
	struct rdma_event_channel *cm_ch;
	struct zcrpc__src cm_src, timer_src, ev_src;
	struct zcrpc__device dev[ZCRPC_MAX_DEVICES]; /* by context index */
	zcrpc_conn *conns;
	zcrpc_listener *listeners;
	pthread_mutex_t job_lock;
	struct zcrpc__job *jobs;      /* unjoined */
	struct zcrpc__job *done_jobs; /* finished, not yet handled */
	int64_t next_deadline_ns;     /* earliest conn deadline, 0 = none */
	struct zcrpc__timer *timers;  /* timer.c */
	int64_t next_timer_ns;	      /* earliest armed timer, 0 = none */
	int64_t next_keepalive_ns;    /* next keepalive check, 0 = none */
	int64_t now_ns;		      /* taken once per progress call */
	pthread_mutex_t post_lock;
	struct zcrpc__post *posts, *posts_tail; /* FIFO, under post_lock */
	atomic_int has_posts;			 /* posts != NULL, as a hint */
	int in_progress;
	int need_reap;
	uint32_t reposts_pending; /* conns waiting for pool slots */
	zcrpc_conn_stats gone;	  /* totals of freed connections */
	char err[192];
};

/* timer.c: one-shot timers for the RPC layer, run from progress. */
struct zcrpc__timer {
	struct zcrpc__timer *next, *prev;
	int64_t due_ns; /* 0 = not armed */
	void (*fn)(struct zcrpc__timer *t, int64_t now);
	unsigned linked : 1;
};

void zcrpc__timer_start(zcrpc_worker *w, struct zcrpc__timer *t,
			int64_t due_ns);
void zcrpc__timer_stop(zcrpc_worker *w, struct zcrpc__timer *t);
void zcrpc__timers_run(zcrpc_worker *w, int64_t now);
void zcrpc__worker_rearm(zcrpc_worker *w);

int64_t zcrpc__now_ns(void);
void zcrpc__worker_account_gone(zcrpc_worker *w, const zcrpc_conn *c);
void zcrpc__worker_add_deadline(zcrpc_worker *w, int64_t deadline_ns);
void zcrpc__worker_keepalive_start(zcrpc_worker *w);
int zcrpc__epoll_add(zcrpc_worker *w, int fd, struct zcrpc__src *src);
void zcrpc__worker_seterr(zcrpc_worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* device.c */
zcrpc_status zcrpc__device_get(zcrpc_worker *w, struct ibv_context *verbs,
			       struct zcrpc__device **out);
void zcrpc__device_close_all(zcrpc_worker *w);
void zcrpc__device_drain(zcrpc_worker *w, struct zcrpc__device *dev);

/* ---- connections -------------------------------------------------------- */

/* Transport message header (docs/protocol.md §2). */
#define ZCRPC_MSG_HDR_LEN 8
enum zcrpc__msg_type {
	ZCRPC_MSG_DATA = 1,
	ZCRPC_MSG_CREDIT = 2,
};

#define ZCRPC_POLL_BATCH 16

/* wr_id: receives have the top bit set and their position below; send
 * queue work requests carry their sequence number in the send ring. */
#define ZCRPC_WR_RECV_BIT (1ULL << 63)

/* One RDMA write the application asked for, possibly several WRs. */
struct zcrpc__write_op {
	struct zcrpc__write_op *next; /* conn->wq (not fully posted yet) */
	void *user_ctx;
	uint64_t src, dst; /* next piece */
	uint32_t lkey, rkey;
	uint64_t len, left;
	uint32_t imm;
	unsigned with_imm : 1;
	unsigned done : 1;    /* on_write_done delivered */
	unsigned in_ring : 1; /* last piece posted: the ring frees it */
};

enum zcrpc__sq_kind {
	ZCRPC_SQ_MSG = 1,   /* a message; slot returns to the pool */
	ZCRPC_SQ_WRITE = 2, /* a piece of a write; op if it is the last */
	ZCRPC_SQ_KEEPALIVE = 3, /* a keepalive probe (0-byte RDMA WRITE) */
};

struct zcrpc__sq_entry {
	uint8_t kind;
	zcrpc__slot_id slot;
	struct zcrpc__write_op *op; /* last piece of a write, else NULL */
};

struct zcrpc_conn {
	zcrpc_worker *w;
	zcrpc_conn *next, *prev;  /* worker->conns */
	zcrpc_listener *listener; /* passive side, until accepted */
	zcrpc_conn_handlers h;
	zcrpc_conn_state state;
	zcrpc_status status;
	char detail[192];
	unsigned passive : 1;
	unsigned dead : 1;	   /* destroyed by the user; freed by reap */
	unsigned closing : 1;	   /* local close sent, waiting DISCONNECTED */
	unsigned disconnected : 1; /* rdma_disconnect done (or not needed) */
	unsigned torn_down : 1;	   /* verbs resources released */
	unsigned cq_armed : 1;
	unsigned migrated : 1; /* id moved to the worker's CM channel */
	unsigned in_recv : 1;  /* inside on_recv */
	unsigned kept : 1;     /* on_recv kept the slot */
	unsigned want_writable : 1; /* a send was refused: tell on_writable */
	unsigned ka_outstanding : 1; /* a keepalive probe is in the ring */
	unsigned test_broken : 1;    /* zcrpc__conn_test_break_qp(): frozen */

	struct zcrpc__job *job; /* active side, while resolving */
	struct rdma_cm_id *id;
	struct zcrpc__device *dev;
	struct ibv_cq *cq;
	unsigned int cq_unacked;
	struct ibv_wc stash[ZCRPC_POLL_BATCH]; /* polled while arming */
	int nstash;
	uint32_t max_inline;

	/* Receives: one pool slot per position, posted while it has one. */
	uint32_t recv_depth;
	struct zcrpc__slot *recv;
	uint8_t *recv_has;
	uint32_t recv_missing; /* positions waiting for a pool slot */
	uint32_t cur_recv;     /* position being delivered */
	uint32_t cur_len;

	/* Send queue ring: entries for every posted, unreaped WR. */
	uint32_t sq_depth;
	struct zcrpc__sq_entry *sq;
	uint64_t sq_head, sq_tail; /* sequence numbers */
	uint32_t unsignaled;
	struct zcrpc__write_op *wq, *wq_tail; /* writes not fully posted */

	/* Credits (docs/protocol.md §3). */
	uint32_t credits; /* messages we may still send to the peer */
	uint32_t owed;	  /* reposted receives not yet reported to the peer */
	uint32_t peer_recv_depth, peer_max_msg;
	uint32_t features;

	int64_t deadline_ns; /* connect or close deadline, 0 = none */
	int64_t last_active_ns; /* last post or completion (worker's now_ns) */
	int timeout_ms;
	zcrpc_conn_stats stats;
};

struct zcrpc_listener {
	zcrpc_worker *w;
	zcrpc_listener *next, *prev;
	struct rdma_cm_id *id;
	zcrpc_listen_opts opts;
	struct zcrpc__src src;
	uint16_t port;
};

/* conn.c: lifecycle */
zcrpc_conn *zcrpc__conn_alloc(zcrpc_worker *w, const zcrpc_conn_handlers *h);
void zcrpc__copy_handlers(zcrpc_conn_handlers *dst,
			  const zcrpc_conn_handlers *src);
zcrpc_status zcrpc__conn_setup(zcrpc_conn *c, struct rdma_cm_id *id);
void zcrpc__conn_fill_param(zcrpc_conn *c, struct rdma_conn_param *p,
			    uint8_t *pd_buf, size_t pd_cap, int kind);
void zcrpc__conn_fail(zcrpc_conn *c, zcrpc_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void zcrpc__conn_established(zcrpc_conn *c);
void zcrpc__conn_on_cm_event(zcrpc_conn *c, enum rdma_cm_event_type type,
			     int status, const void *pdata, size_t pdata_len);
void zcrpc__conn_teardown(zcrpc_conn *c);
void zcrpc__conn_free(zcrpc_conn *c);
void zcrpc__conn_check_deadline(zcrpc_conn *c, int64_t now);

/*
 * Tests only: moves the connection's QP to IBV_QPS_ERR with ibv_modify_qp,
 * without rdma_disconnect, and freezes the connection: from then on it
 * ignores its completions and CM events and never sends a DREQ, and its
 * teardown releases nothing (the id, QP and CQ stay until the process
 * exits, when the kernel sends the DREQ). The peer's next transmission
 * then goes unanswered (rxe drops packets to a QP in error) and fails with
 * retry-exceeded: a dead host, as the peer sees it. Returns OK,
 * INVALID_ARGUMENT (no QP) or INTERNAL (ibv_modify_qp failed).
 */
zcrpc_status zcrpc__conn_test_break_qp(zcrpc_conn *c);

/*
 * Tests only (rdma.Faults, T10): turns credit-based flow control off for
 * an ESTABLISHED connection by granting it 2^20 extra credits (the peer's
 * window grows alike, so credit updates still check out). Sends then go
 * out whether or not the peer has a receive posted: with rnr_retry_count 0
 * the first one that finds none fails the connection (RNR retry exceeded).
 * Off by default; nothing else reaches it. Returns OK or
 * FAILED_PRECONDITION (not established).
 */
zcrpc_status zcrpc__conn_test_no_flow_control(zcrpc_conn *c);

/* sendrecv.c: the send/recv path, credits, completions */
zcrpc_status zcrpc__conn_alloc_queues(zcrpc_conn *c);
zcrpc_status zcrpc__conn_post_all_recvs(zcrpc_conn *c);
void zcrpc__conn_release_queues(zcrpc_conn *c);
int zcrpc__conn_poll(zcrpc_conn *c);
int zcrpc__conn_arm(zcrpc_conn *c);
void zcrpc__conn_retry_reposts(zcrpc_conn *c);
int zcrpc__sq_room(const zcrpc_conn *c);
int zcrpc__sq_post(zcrpc_conn *c, struct ibv_send_wr *wr,
		   const struct zcrpc__sq_entry *e, int force_signal);
void zcrpc__conn_keepalive(zcrpc_conn *c);

/* write.c: the RDMA-write path */
void zcrpc__conn_pump_writes(zcrpc_conn *c);
void zcrpc__write_finish(zcrpc_conn *c, struct zcrpc__write_op *op,
			 zcrpc_status st);
void zcrpc__conn_fail_writes(zcrpc_conn *c, zcrpc_status st);

/* connect.c */
void zcrpc__jobs_handle_done(zcrpc_worker *w);
void zcrpc__job_abandon(zcrpc_conn *c);
void zcrpc__jobs_join_all(zcrpc_worker *w);

/* listener.c */
void zcrpc__listener_on_readable(zcrpc_listener *l);

#endif /* ZCRPC_TRANSPORT_INTERNAL_H */
