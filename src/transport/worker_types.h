/* zcrpc — the transport's structures for devices, contexts and workers:
 * a context's devices and user registrations, a worker's event sources,
 * setup jobs, timers and posted functions. Private; included through
 * internal.h. */
#ifndef ZCRPC_TRANSPORT_WORKER_TYPES_H
#define ZCRPC_TRANSPORT_WORKER_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "mempool.h"
#include "profile.h"
#include "seam.h"
#include "../core/limits.h"
#include "../core/list.h"
#include "zcrpc/transport.h"

/* ---- context.c: devices shared by workers ------------------------------ */

struct zcrpc__ctx_dev {
	struct ibv_context *verbs; /* owned by librdmacm; NULL once removed */
	struct ibv_pd *pd;	   /* NULL once removed */
	int removed;		   /* DEVICE_REMOVAL seen (under ctx->lock) */
	int sweeps_left;	   /* workers that still hold objects on it */
	struct rdma_cm_id *watch;  /* bound to the device: hears its removal */
	/* Bit p: port p had PORT_ERR and no PORT_ACTIVE since (ports 1..31). */
	atomic_uint ports_down;
	struct ibv_device_attr attr;
	uint32_t max_msg_sz; /* of port 1 */
	struct zcrpc__dev_profile prof; /* profile.c */
	/* The inline size a new QP asks for first: prof.inline_cap, lowered
	 * to what the device granted once it refused more (conn.c). */
	atomic_uint inline_ask;
	/* A worker opened the device (context.c: zcrpc__context_use_device):
	 * the application's memory is registered there from then on. */
	atomic_int used;
	/* Bytes registered on it now (pools, the application's memory, bulk
	 * buffers, spares): what the locked-memory limit is charged. */
	atomic_ullong reg_bytes;
};

struct zcrpc_context {
	atomic_int refs;
	int ndev;
	int nused;    /* devices with `used` set (under lock) */
	int nskipped; /* devices beyond ZCRPC_MAX_DEVICES, not used */
	struct zcrpc__ctx_dev dev[ZCRPC_MAX_DEVICES];
	struct ibv_context **list; /* rdma_get_devices() */
	/* Under lock: registration on the devices, the user MRs, the
	 * workers using the context, device removal (removal.c). */
	pthread_mutex_t lock;
	struct zcrpc__list mrs;	    /* zcrpc_mr.link: user registrations */
	struct zcrpc__list workers; /* zcrpc_worker.ctx_link */
	atomic_uint removed_gen;    /* bumped on each device removal */
	atomic_uint next_vector;    /* workers' completion vectors, in turn */
	struct zcrpc__spare_thread *spares; /* mr_spare.c, NULL until used */
	struct rdma_event_channel *watch_ch; /* the watch ids' (non-blocking) */
};

struct zcrpc_mr {
	zcrpc_context *ctx;
	void *addr;
	size_t len;
	unsigned flags;
	struct ibv_mr *mrs[ZCRPC_MAX_DEVICES]; /* per context device */
	struct zcrpc__list link;	       /* ctx->mrs */
	/* mr_spare.c, devices without type-2 windows, with
	 * ZCRPC_MR_REMOTE_WRITE: the registration with remote write access
	 * the next grant takes (NULL while the context's spare thread makes
	 * one), and whether that thread was asked for one. */
	_Atomic(struct ibv_mr *) spare[ZCRPC_MAX_DEVICES];
	atomic_int refill_asked[ZCRPC_MAX_DEVICES];
	atomic_int refill_err[ZCRPC_MAX_DEVICES]; /* errno of the last try */
};

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

/* srq.c: a worker's shared receive queue on one device, and the credit
 * budget its connections share (docs/design.md "Shared receive path"). */
struct zcrpc__srq {
	struct ibv_srq *srq; /* NULL until a connection needs it */
	uint32_t cap;	     /* positions at most: the budget (max_srq_wr) */
	uint32_t npos;	     /* positions made so far, [0, npos) */
	struct zcrpc__slot *slot; /* per position: its pool slot */
	uint8_t *has;		  /* per position: 1 holds a slot (srq.c) */
	uint32_t posted;	  /* receives in the queue now */
	uint32_t promised;	  /* of them, credits of connections */
	uint32_t missing;	  /* positions waiting for a pool slot */
	uint32_t *empty;	  /* positions left empty (not needed) */
	uint32_t nempty;
	uint32_t conns;		   /* connections on it */
	struct zcrpc__list hungry; /* connections below their share */
};

/* cq.c: a CQ of a worker on one device, shared by its connections
 * (docs/design.md "Shared completion queues"). */
struct zcrpc__cq {
	struct ibv_cq *cq;
	zcrpc_worker *w;
	struct zcrpc__device *dev;
	struct zcrpc__list link; /* dev->cqs */
	uint32_t cqe;		 /* entries, as the device made it */
	uint32_t send_rsv;	 /* its connections' send queues, summed */
	uint32_t recv_rsv;	 /* their receive windows, summed */
	uint32_t conns;
	unsigned armed : 1;
	unsigned private_cq : 1; /* a test's undersized CQ: nobody joins */
	unsigned polling : 1;	 /* zcrpc__cq_poll is running on it */
	unsigned unacked;	 /* CQ events not yet acknowledged */
	/* Completions polled but not yet dispatched (a teardown's or arm's
	 * poll), in order: [held_head, held_n). */
	struct ibv_wc *held;
	uint32_t held_head, held_n, held_cap;
};

/* qp_num -> connection, for the completions of a worker's CQs on a device. */
struct zcrpc__qpent {
	uint32_t qpn;
	zcrpc_conn *c; /* NULL: empty */
};
struct zcrpc__qpmap {
	struct zcrpc__qpent *e;
	uint32_t cap, n; /* cap a power of two, n <= cap / 2 */
};

/* A context device as one worker uses it: its completion channel, its
 * CQs and its shared receive queue. */
struct zcrpc__device {
	int idx; /* in the context */
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	const struct ibv_device_attr *attr;
	const struct zcrpc__dev_profile *prof;
	uint32_t max_msg_sz;
	struct ibv_comp_channel *comp_ch;
	struct zcrpc__src src;
	struct zcrpc__list cqs; /* zcrpc__cq.link */
	int ncq;
	/* ibv_resize_cq is not supported (siw): new CQs are made at their
	 * full size (cq.c) instead of growing. */
	unsigned cq_fixed : 1;
	struct zcrpc__qpmap qpmap;
	struct zcrpc__srq srq;
};

/* Active-side address and route resolution, run on a setup thread. */
/* A connection pinned to a device and port (pin.c). */
struct zcrpc__pin {
	int dev_idx;
	uint32_t port;
	char device[64];
	char src[64]; /* the GID's address: the connection's source */
};

struct zcrpc__job {
	struct zcrpc__list link;      /* worker->jobs (all unjoined jobs) */
	struct zcrpc__job *done_next; /* worker->done_jobs */
	pthread_t thread;
	zcrpc_worker *w;
	zcrpc_conn *conn; /* NULL once the worker abandoned it (under lock) */
	char *host, *port, *src_addr;
	uint8_t tos;	       /* 0: the kernel's default */
	int pinned;	       /* pin holds the device, port and source */
	struct zcrpc__pin pin;
	struct rdma_cm_id *id; /* result, owned by the job until taken */
	int err;	       /* errno or EAI_* of the failure, 0 on success */
	char detail[160];
};

/* struct zcrpc__timer (embedded by its owner) is in seam.h. */
/* The worker's armed timers: a min-heap by due time (timer.c). */
struct zcrpc__timer_heap {
	struct zcrpc__timer *min;
	unsigned n;
	uint64_t seq;
	struct zcrpc__list due; /* due timers of the batch being run */
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
	struct zcrpc__list conns;		     /* zcrpc_conn.link */
	struct zcrpc__list revokes_due; /* zcrpc_conn.due_link (mw.c) */
	struct zcrpc__list turn_end; /* zcrpc__turn_hook.link: due at the
				      * end of this progress turn */
	struct zcrpc__list listeners;		     /* zcrpc_listener.link */
	pthread_mutex_t job_lock;
	struct zcrpc__list jobs;	 /* zcrpc__job.link: unjoined */
	struct zcrpc__job *done_jobs;	 /* finished, not yet handled */
	/* The rejects made off this thread (reaper.c), under reaper_lock. */
	pthread_mutex_t reaper_lock;
	pthread_cond_t reaper_cv;
	pthread_t reaper;
	struct zcrpc__reject_job *reaper_head, *reaper_tail;
	unsigned reaper_started : 1, reaper_failed : 1, reaper_stop : 1;
	uint64_t rejects_deferred;	 /* handed to the reaper thread */
	struct zcrpc__timer_heap timers; /* timer.c */
	int64_t timerfd_ns;	       /* what the timerfd is set to, 0 = off */
	struct zcrpc__timer keepalive; /* the keepalive check (worker.c) */
	int64_t now_ns;		       /* taken once per progress call */
	int64_t epoll_due_ns;	       /* busy turns read epoll from then */
	pthread_mutex_t post_lock;
	struct zcrpc__post *posts, *posts_tail; /* FIFO, under post_lock */
	atomic_int has_posts;			/* posts != NULL, as a hint */
	int in_progress;
	int posts_ran; /* this progress call ran posted functions */
	int need_reap;
	uint32_t reposts_pending;    /* SRQ positions waiting for pool slots */
	unsigned comp_vector;	     /* its CQs' (modulo the device's count) */
	uint64_t cqs_created, cqs_resized;
	zcrpc_conn_stats gone;	     /* totals of freed connections */
	struct zcrpc__list ctx_link; /* ctx->workers (under ctx->lock) */
	unsigned removed_seen;	     /* device indexes swept (removal.c) */
	unsigned removed_gen;	     /* ctx->removed_gen when last swept */
	uint64_t rejected_auth, rejected_busy,
		handshake_timeouts; /* admission */
	uint64_t rejected_budget; /* connections refused: receive budget spent */
	uint64_t rejected_hello, rejected_conn_limit, rejected_source_limit,
		rejected_setup; /* connect requests refused, by reason */
#ifdef ZCRPC_TESTING
	uint32_t test_no_features; /* tests: bits its hellos leave out */
	int test_auth_stranger; /* tests: its servers act as a stranger
				 * without the key (auth.c) */
#endif
	char err[192];
	/* zcrpc_worker_progress's clock and epoll schedule (worker.c). */
	int64_t coarse_res_ns;	/* CLOCK_MONOTONIC_COARSE's tick, 0: unused */
	uint32_t epoll_skipped; /* turns since the epoll set was last read */
	uint64_t epoll_reads;	/* epoll_wait calls, ever (tests) */
};

#endif /* ZCRPC_TRANSPORT_WORKER_TYPES_H */
