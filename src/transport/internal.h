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

#include "auth.h"
#include "hello.h"
#include "mempool.h"
#include "test_hooks.h"
#include "../core/limits.h"
#include "../core/log.h"
#include "zcrpc/transport.h"

/* ---- context.c: devices shared by workers ---------------------------- */

struct zcrpc__ctx_dev {
	struct ibv_context *verbs; /* owned by librdmacm; NULL once removed */
	struct ibv_pd *pd;	   /* NULL once removed */
	int removed;		   /* DEVICE_REMOVAL seen (under ctx->lock) */
	int sweeps_left;	   /* workers that still hold objects on it */
	struct rdma_cm_id *watch;  /* bound to the device: hears its removal */
	atomic_int port_down;	   /* PORT_ERR seen, no PORT_ACTIVE since */
	struct ibv_device_attr attr;
	uint32_t max_msg_sz; /* of port 1 */
};

struct zcrpc_context {
	atomic_int refs;
	int ndev;
	struct zcrpc__ctx_dev dev[ZCRPC_MAX_DEVICES];
	struct ibv_context **list; /* rdma_get_devices() */
	/* Under lock: registration on the devices, the user MRs, the
	 * workers using the context, device removal (removal.c). */
	pthread_mutex_t lock;
	zcrpc_mr *mrs;		/* user registrations */
	zcrpc_worker *workers;	/* registered workers */
	atomic_uint removed_gen; /* bumped on each device removal */
	struct rdma_event_channel *watch_ch; /* the watch ids' (non-blocking) */
};

struct zcrpc_mr {
	zcrpc_context *ctx;
	void *addr;
	size_t len;
	unsigned flags;
	struct ibv_mr *mrs[ZCRPC_MAX_DEVICES]; /* per context device */
	zcrpc_mr *next, *prev;		       /* ctx->mrs */
};

void zcrpc__context_ref(zcrpc_context *ctx);
void zcrpc__context_unref(zcrpc_context *ctx);
int zcrpc__context_dev_index(const zcrpc_context *ctx,
			     const struct ibv_context *verbs);
int zcrpc__context_reg(zcrpc_context *ctx, void *addr, size_t len, int access,
		       struct ibv_mr **mrs);
struct zcrpc__registrar zcrpc__context_registrar(zcrpc_context *ctx);

/* removal.c: RDMA_CM_EVENT_DEVICE_REMOVAL. The worker that sees it marks
 * the device removed in the context and wakes every worker of the context;
 * each releases what it holds on the device (connections, listeners, its
 * completion channel, its pool's registrations); the last one releases the
 * context's own objects (user MRs, PD) and refreshes librdmacm's device
 * list, which lets the kernel finish the removal (`rdma link delete`). */
void zcrpc__device_removed(zcrpc_worker *w, struct ibv_context *verbs);
void zcrpc__worker_sweep_removed(zcrpc_worker *w);
void zcrpc__context_add_worker(zcrpc_context *ctx, zcrpc_worker *w);
void zcrpc__context_remove_worker(zcrpc_context *ctx, zcrpc_worker *w);
/* One id bound to an address of each device on a channel every worker
 * polls, so a removal is heard even by a context with no connection on
 * the device (its PD and pools would otherwise keep it). */
void zcrpc__context_watch_devices(zcrpc_context *ctx);
void zcrpc__context_unwatch(zcrpc_context *ctx);
void zcrpc__worker_on_watch(zcrpc_worker *w);

/* async.c: device async events (port up/down, QP/CQ errors). */
void zcrpc__context_async_init(zcrpc_context *ctx);
zcrpc_status zcrpc__worker_async_watch(zcrpc_worker *w);
void zcrpc__worker_on_async(zcrpc_worker *w, int idx);

/* ---- worker.c ----------------------------------------------------------- */

/* What an epoll registration points at. */
enum zcrpc__src_kind {
	ZCRPC_SRC_CM = 1,   /* the worker's CM event channel */
	ZCRPC_SRC_COMP,	    /* a device's completion channel */
	ZCRPC_SRC_LISTENER, /* a listener's (synchronous) CM channel */
	ZCRPC_SRC_TIMER,    /* the worker's timerfd */
	ZCRPC_SRC_EVENT,    /* the worker's eventfd (setup threads, posts) */
	ZCRPC_SRC_WATCH,    /* the context's device-watch CM channel */
	ZCRPC_SRC_ASYNC,    /* a context device's async event fd */
};

struct zcrpc__src {
	enum zcrpc__src_kind kind;
	void *obj;
	int idx; /* ZCRPC_SRC_ASYNC: the context's device index */
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
	struct zcrpc__src cm_src, timer_src, ev_src, watch_src;
	struct zcrpc__src async_src[ZCRPC_MAX_DEVICES];
	uint64_t async_events; /* async events that changed something */
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
	int64_t epoll_due_ns;	      /* busy turns read epoll from then */
	pthread_mutex_t post_lock;
	struct zcrpc__post *posts, *posts_tail; /* FIFO, under post_lock */
	atomic_int has_posts;			 /* posts != NULL, as a hint */
	int in_progress;
	int posts_ran; /* this progress call ran posted functions */
	int need_reap;
	uint32_t reposts_pending; /* conns waiting for pool slots */
	zcrpc_conn_stats gone;	  /* totals of freed connections */
	zcrpc_worker *ctx_next, *ctx_prev; /* ctx->workers (under ctx->lock) */
	unsigned removed_seen;	  /* device indexes swept (removal.c) */
	unsigned removed_gen;	  /* ctx->removed_gen when last swept */
	uint64_t rejected_auth, rejected_busy, handshake_timeouts; /* admission */
	uint32_t test_no_features; /* tests: bits its hellos leave out */
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
/* Sets what zcrpc_last_error() returns on this thread. */
void zcrpc__set_last_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/* How to get a device, for the "no RDMA device" messages. */
#define ZCRPC_NO_DEVICE_HINT                                                   \
	"load rdma_ucm and add a device; without RDMA hardware, Soft-RoCE "    \
	"emulates one over Ethernet: modprobe rdma_rxe && "                    \
	"rdma link add rxe0 type rxe netdev eth0 (your interface)"

/* device.c */
zcrpc_status zcrpc__device_get(zcrpc_worker *w, struct ibv_context *verbs,
			       struct zcrpc__device **out);
void zcrpc__device_close_all(zcrpc_worker *w);
void zcrpc__device_drain(zcrpc_worker *w, struct zcrpc__device *dev);
void zcrpc__device_close(zcrpc_worker *w, int idx);

/* ---- connections -------------------------------------------------------- */

/* Transport message header (docs/protocol.md §2). */
#define ZCRPC_MSG_HDR_LEN 8
enum zcrpc__msg_type {
	ZCRPC_MSG_DATA = 1,
	ZCRPC_MSG_CREDIT = 2,
	ZCRPC_MSG_AUTH = 3,	  /* client's key proof (auth.c) */
	ZCRPC_MSG_AUTH_REPLY = 4, /* server's verdict (auth.c) */
	ZCRPC_MSG_CLOSE = 5,	  /* orderly close follows (ZCRPC_FEAT_CLOSE) */
};
#define ZCRPC_CLOSE_MSG_LEN 8 /* CLOSE payload: status (u32), reserved (u32) */

#define ZCRPC_POLL_BATCH 16
/* Completions of one connection handled per progress turn, at most (the
 * rest wait for the next turn, so one busy CQ cannot hold up the others
 * or the worker's epoll set). */
#define ZCRPC_POLL_TURN_MAX (4 * ZCRPC_POLL_BATCH)

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
	ZCRPC_SQ_BIND = 4,	/* IBV_WR_BIND_MW of a grant (mw.c) */
	ZCRPC_SQ_INV = 5,	/* IBV_WR_LOCAL_INV revoking a grant (mw.c) */
	ZCRPC_SQ_MSG_LAST = 6,	/* a message after which the connection closes */
};

struct zcrpc__sq_entry {
	uint8_t kind;
	zcrpc__slot_id slot;
	struct zcrpc__write_op *op; /* last piece of a write, else NULL */
	struct zcrpc_grant *g;	    /* BIND / INV: the window */
	struct zcrpc__deferred_wr *dw; /* not posted yet (sendrecv.c) */
};

/* A work request held back behind a BIND / LOCAL_INV that waits for the
 * send queue to drain (sendrecv.c, docs/design.md "Local operations"). */
struct zcrpc__deferred_wr {
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	uint32_t mw_rkey; /* BIND: the window's key when it was posted */
};

/* ---- mw.c: grants as type-2 memory windows ------------------------------ */

/* Revoked windows wait in a FIFO until this many newer ones are there
 * before they are bound again: rxe rotates only the 8 low rkey bits. */
#define ZCRPC_MW_QUARANTINE 64

enum zcrpc__mw_state {
	ZCRPC_MW_FREE = 0, /* invalidated (or never bound), in the FIFO */
	ZCRPC_MW_BOUND,	   /* bound; the grant is the application's */
	ZCRPC_MW_REVOKING, /* LOCAL_INV queued or posted */
	ZCRPC_MW_ORPHAN,   /* the application gave it up on a dead conn */
};

struct zcrpc_grant {
	struct zcrpc_grant *anext; /* conn->mw.all */
	struct zcrpc_grant *qnext; /* FIFO of free windows, or the inv queue */
	zcrpc_conn *conn;
	struct ibv_mw *mw;
	uint32_t rkey; /* last bound rkey */
	uint8_t state;
	uint8_t answered; /* on_revoked delivered (or never due) */
	void *user_ctx;
};

struct zcrpc__mw_set {
	struct zcrpc_grant *all;
	struct zcrpc_grant *free_head, *free_tail;
	uint32_t nfree;
	struct zcrpc_grant *inv_head, *inv_tail; /* revokes waiting for room */
	uint32_t depth; /* send-queue slots kept for BIND / INV */
	uint32_t used;	/* of them in the ring */
};

zcrpc_status zcrpc__mr_grant_access(const zcrpc_mr *mr, zcrpc_conn *c,
				    size_t offset, size_t len, int access,
				    zcrpc_remote_region *out,
				    zcrpc_grant **grant);
void zcrpc__mw_reaped(zcrpc_conn *c, const struct zcrpc__sq_entry *e,
		      enum ibv_wc_status st);
void zcrpc__mw_pump(zcrpc_conn *c);
void zcrpc__mw_fail_all(zcrpc_conn *c);
void zcrpc__mw_dealloc(zcrpc_conn *c);
void zcrpc__mw_free(zcrpc_conn *c);

struct zcrpc_conn {
	zcrpc_worker *w;
	zcrpc_conn *next, *prev;  /* worker->conns */
	zcrpc_listener *listener; /* passive side, until accepted */
	zcrpc_conn_handlers h;
	zcrpc_conn_state state;
	zcrpc_status status;
	char detail[192];
	/* Why the application closed it (zcrpc__conn_close_error), reported
	 * instead of OK "closed" when the close completes. */
	zcrpc_status close_status;
	char close_detail[192];
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
	unsigned drain_close : 1;    /* closing: disconnect once the SQ drained */
	unsigned dev_gone : 1;	     /* its device was removed: nothing flushes */
	unsigned close_sent : 1;     /* our CLOSE is in the ring (close_seq) */
	unsigned peer_closed : 1;    /* the peer's CLOSE arrived */

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

	/* Send queue ring: entries for every posted, unreaped WR. sq_depth
	 * slots for messages and writes, mw.depth more for BIND / INV. */
	uint32_t sq_depth;
	uint32_t sq_size; /* ring entries: sq_depth + mw.depth */
	struct zcrpc__mw_set mw;
	struct zcrpc__sq_entry *sq;
	uint64_t sq_head, sq_tail; /* sequence numbers */
	uint64_t sq_posted; /* [sq_head, sq_posted) posted; the rest deferred */
	struct zcrpc__write_op *wq, *wq_tail; /* writes not fully posted */

	/* Credits (docs/protocol.md §3). */
	uint32_t credits; /* messages we may still send to the peer */
	uint32_t owed;	  /* reposted receives not yet reported to the peer */
	uint32_t peer_recv_depth, peer_max_msg;
	uint32_t peer_max_write; /* the peer's hello (FEAT_PIECE); 0 = none */
	uint32_t features;
	uint64_t close_seq;	    /* ring sequence number of our CLOSE */
	zcrpc_status peer_close_status; /* what the peer's CLOSE said */

	/* Admission (auth.c): the key and nonce while authenticating. */
	struct zcrpc__auth *auth; /* NULL: no key on this connection */
	uint8_t auth_phase;	  /* enum zcrpc__auth_phase; 0 = not authenticating */
	uint32_t recv_initial;	  /* receives posted at setup; 0 = recv_depth */

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
	int failed; /* its device went away: id released, accepts nothing */
	uint8_t psk[ZCRPC_PSK_MAX]; /* opts.psk points here (psk_len bytes) */
	uint32_t handshakes;	    /* accepted connections not yet handed over */
	zcrpc_conn_handlers conn_handlers; /* opts.conn_handlers points here */
};

/* conn.c: lifecycle */
zcrpc_conn *zcrpc__conn_alloc(zcrpc_worker *w, const zcrpc_conn_handlers *h);
/* Copies the caller's handlers under the ABI rule (core/abi.h); on
 * INVALID_ARGUMENT (a size no release had) @dst is untouched. */
zcrpc_status zcrpc__copy_handlers(zcrpc_conn_handlers *dst,
				  const zcrpc_conn_handlers *src);
zcrpc_status zcrpc__conn_setup(zcrpc_conn *c, struct rdma_cm_id *id);
void zcrpc__conn_fill_param(zcrpc_conn *c, struct rdma_conn_param *p,
			    uint8_t *pd_buf, size_t pd_cap, int kind);
void zcrpc__conn_fail(zcrpc_conn *c, zcrpc_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void zcrpc__conn_established(zcrpc_conn *c);
/* zcrpc_conn_close() for a reason (e.g. the RPC layer's protocol errors):
 * the orderly close, reported as @st and the message when it completes. */
void zcrpc__conn_close_error(zcrpc_conn *c, zcrpc_status st, const char *fmt,
			     ...) __attribute__((format(printf, 3, 4)));
void zcrpc__conn_on_cm_event(zcrpc_conn *c, enum rdma_cm_event_type type,
			     int status, const void *pdata, size_t pdata_len);
void zcrpc__conn_teardown(zcrpc_conn *c);
void zcrpc__conn_free(zcrpc_conn *c);
void zcrpc__conn_check_deadline(zcrpc_conn *c, int64_t now);
void zcrpc__conn_close_drained(zcrpc_conn *c);
/* The feature bits @w announces: ZCRPC_FEAT_ALL less what a test hook
 * took away (zcrpc__worker_test_clear_features). */
uint32_t zcrpc__worker_features(const zcrpc_worker *w);
/* A CLOSE message arrived (sendrecv.c): the peer closes in order. */
void zcrpc__conn_on_close_msg(zcrpc_conn *c, const uint8_t *payload);

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
void zcrpc__sq_post_deferred(zcrpc_conn *c);
void zcrpc__conn_keepalive(zcrpc_conn *c);

/* Receives at positions [@from, @to) from the pool (docs/design.md). */
zcrpc_status zcrpc__conn_post_recvs(zcrpc_conn *c, uint32_t from, uint32_t to);
/* The receive at @pos was consumed outside on_recv: repost it and owe the
 * peer its credit. */
void zcrpc__conn_recv_consumed(zcrpc_conn *c, uint32_t pos);
/* Sends a transport message of @type with @len payload bytes from @data,
 * outside the application's state checks (one credit, ring room needed).
 * @last: the connection closes once it is sent (zcrpc__auth_last_sent). */
zcrpc_status zcrpc__conn_send_ctrl(zcrpc_conn *c, uint8_t type,
				   const void *data, size_t len, int last);

/* auth.c: admission with a pre-shared key (see auth.h for the rest) */
zcrpc_status zcrpc__auth_client_init(zcrpc_conn *c, const void *psk,
				     size_t psk_len, const char *identity);
zcrpc_status zcrpc__auth_server_init(zcrpc_conn *c, const zcrpc_listener *l);
void zcrpc__auth_free(zcrpc_conn *c);
void zcrpc__auth_fill_hello(const zcrpc_conn *c, struct zcrpc_hello *h);
int zcrpc__auth_client_start(zcrpc_conn *c, const struct zcrpc_hello *h);
int zcrpc__auth_server_hold(zcrpc_conn *c);
void zcrpc__auth_on_msg(zcrpc_conn *c, uint32_t pos, const uint8_t *msg,
			uint32_t len);
void zcrpc__auth_on_imm(zcrpc_conn *c, uint32_t pos);
void zcrpc__auth_last_sent(zcrpc_conn *c);
void zcrpc__auth_peer_closed(zcrpc_conn *c);

/* write.c: the RDMA-write path */
/* The largest RDMA WRITE this side posts or accepts in one work request: its
 * port's max_msg_sz (lowered by zcrpc__test_write_piece). */
uint32_t zcrpc__conn_own_piece(const zcrpc_conn *c);
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
/* Its device was removed: release the id; the listener accepts nothing. */
void zcrpc__listener_drop_device(zcrpc_listener *l);
/* @c (accepted by its listener) leaves the handshake: handed over or failed. */
void zcrpc__listener_release(zcrpc_conn *c);

#endif /* ZCRPC_TRANSPORT_INTERNAL_H */
