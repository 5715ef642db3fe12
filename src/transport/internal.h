/* zcrpc — transport internals shared by worker.c, device.c, conn.c,
 * connect.c and listener.c. Not installed. */
#ifndef ZCRPC_TRANSPORT_INTERNAL_H
#define ZCRPC_TRANSPORT_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "zcrpc/transport.h"

/* What an epoll registration points at. */
enum zcrpc__src_kind {
	ZCRPC_SRC_CM = 1,   /* the worker's CM event channel */
	ZCRPC_SRC_COMP,	    /* a device's completion channel */
	ZCRPC_SRC_LISTENER, /* a listener's (synchronous) CM channel */
	ZCRPC_SRC_TIMER,    /* the worker's timerfd */
	ZCRPC_SRC_EVENT,    /* the worker's eventfd (setup threads) */
};

struct zcrpc__src {
	enum zcrpc__src_kind kind;
	void *obj;
};

/* A device the worker uses: its PD and completion channel. */
struct zcrpc__device {
	struct zcrpc__device *next;
	struct ibv_context *verbs; /* owned by librdmacm */
	struct ibv_pd *pd;
	struct ibv_comp_channel *comp_ch;
	struct ibv_device_attr attr;
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

/* Transport message header (docs/protocol.md, "Messages"). */
#define ZCRPC_POLL_BATCH 16
#define ZCRPC_MSG_HDR_LEN 8
enum zcrpc__msg_type {
	ZCRPC_MSG_DATA = 1,
	ZCRPC_MSG_CREDIT = 2,
};

/* wr_id encoding: kind in the top bits, slot index below. */
#define ZCRPC_WR_RECV 1ULL
#define ZCRPC_WR_SEND 2ULL
#define ZCRPC_WR_ID(kind, idx) (((kind) << 32) | (uint64_t)(idx))
#define ZCRPC_WR_KIND(wr_id) ((wr_id) >> 32)
#define ZCRPC_WR_IDX(wr_id) ((uint32_t)(wr_id))

struct zcrpc_conn {
	zcrpc_worker *w;
	zcrpc_conn *next, *prev; /* worker->conns */
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

	struct zcrpc__job *job; /* active side, while resolving */
	struct rdma_cm_id *id;
	struct zcrpc__device *dev;
	struct ibv_cq *cq;
	unsigned int cq_unacked;
	struct ibv_wc stash[ZCRPC_POLL_BATCH]; /* completions polled while arming */
	int nstash;
	struct ibv_mr *mr;
	uint8_t *buf; /* recv slots, then send slots */
	uint32_t slot_size, recv_depth, send_depth, max_inline;
	uint32_t *free_send; /* stack of free send slot indices */
	uint32_t n_free_send;

	/* Credits (docs/protocol.md, "Credits"). */
	uint32_t credits; /* messages we may still send to the peer */
	uint32_t owed;	  /* reposted receives not yet reported to the peer */
	uint32_t peer_recv_depth, peer_max_msg;
	uint32_t features;

	int64_t deadline_ns; /* connect or close deadline, 0 = none */
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

struct zcrpc_worker {
	zcrpc_worker_opts opts;
	int epfd, timerfd, evfd;
	struct rdma_event_channel *cm_ch;
	struct zcrpc__src cm_src, timer_src, ev_src;
	struct zcrpc__device *devices;
	zcrpc_conn *conns;
	zcrpc_listener *listeners;
	pthread_mutex_t job_lock;
	struct zcrpc__job *jobs;      /* unjoined */
	struct zcrpc__job *done_jobs; /* finished, not yet handled */
	int64_t next_deadline_ns;     /* earliest conn deadline, 0 = none */
	int in_progress;
	int need_reap;
	char err[192];
};

/* worker.c */
int64_t zcrpc__now_ns(void);
void zcrpc__worker_add_deadline(zcrpc_worker *w, int64_t deadline_ns);
int zcrpc__epoll_add(zcrpc_worker *w, int fd, struct zcrpc__src *src);
void zcrpc__worker_seterr(zcrpc_worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* device.c */
zcrpc_status zcrpc__device_get(zcrpc_worker *w, struct ibv_context *verbs,
			       struct zcrpc__device **out);
void zcrpc__device_close_all(zcrpc_worker *w);
void zcrpc__device_drain(zcrpc_worker *w, struct zcrpc__device *dev);

/* conn.c */
zcrpc_conn *zcrpc__conn_alloc(zcrpc_worker *w, const zcrpc_conn_handlers *h);
zcrpc_status zcrpc__conn_setup(zcrpc_conn *c, struct rdma_cm_id *id);
void zcrpc__conn_fill_param(zcrpc_conn *c, struct rdma_conn_param *p,
			    uint8_t *pd_buf, size_t pd_cap, int kind);
void zcrpc__conn_fail(zcrpc_conn *c, zcrpc_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void zcrpc__conn_established(zcrpc_conn *c);
void zcrpc__conn_on_cm_event(zcrpc_conn *c, enum rdma_cm_event_type type,
			     int status, const void *pdata, size_t pdata_len);
int zcrpc__conn_poll(zcrpc_conn *c);
int zcrpc__conn_arm(zcrpc_conn *c);
void zcrpc__conn_teardown(zcrpc_conn *c);
void zcrpc__conn_free(zcrpc_conn *c);
void zcrpc__conn_check_deadline(zcrpc_conn *c, int64_t now);

/* connect.c */
void zcrpc__jobs_handle_done(zcrpc_worker *w);
void zcrpc__job_abandon(zcrpc_conn *c);
void zcrpc__jobs_join_all(zcrpc_worker *w);

/* listener.c */
void zcrpc__listener_on_readable(zcrpc_listener *l);

#endif /* ZCRPC_TRANSPORT_INTERNAL_H */
