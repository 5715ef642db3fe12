/* zcrpc — the transport's structures for connections: the message
 * header, the send ring's entries, RDMA-write operations, memory-window
 * grants, the connection and the listener. Private; included through
 * internal.h. */
#ifndef ZCRPC_TRANSPORT_CONN_TYPES_H
#define ZCRPC_TRANSPORT_CONN_TYPES_H

#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "auth.h"
#include "mempool.h"
#include "seam.h"
#include "worker_types.h"
#include "../core/list.h"
#include "zcrpc/transport.h"

/* Transport message header (docs/protocol.md §2). */
#define ZCRPC_MSG_HDR_LEN 8
enum zcrpc__msg_type {
	ZCRPC_MSG_DATA = 1,
	ZCRPC_MSG_CREDIT = 2,
	ZCRPC_MSG_AUTH = 3,	  /* client's key proof (auth.c) */
	ZCRPC_MSG_AUTH_REPLY = 4, /* server's verdict (auth.c) */
	ZCRPC_MSG_CLOSE = 5,	  /* orderly close follows (ZCRPC_FEAT_CLOSE) */
	ZCRPC_MSG_RELEASE = 6,	  /* credits given back (ZCRPC_FEAT_SHARED) */
	ZCRPC_MSG_WRITTEN = 7,	  /* a WRITE landed: imm, length (write.c) */
};
#define ZCRPC_WRITTEN_MSG_LEN 8 /* WRITTEN payload: imm (u32), length (u32) */
#define ZCRPC_RELEASE_MSG_LEN 4 /* RELEASE payload: credits given back (u32)   \
				 */
#define ZCRPC_CLOSE_MSG_LEN 8 /* CLOSE payload: status (u32), reserved (u32)   \
			       */

#define ZCRPC_POLL_BATCH 16
/* Completions of one connection handled per progress turn, at most (the
 * rest wait for the next turn, so one busy CQ cannot hold up the others
 * or the worker's epoll set). */
#define ZCRPC_POLL_TURN_MAX (4 * ZCRPC_POLL_BATCH)

/* wr_id: receives have the top bit set and their position below; send
 * queue work requests carry their sequence number in the send ring. */
#define ZCRPC_WR_RECV_BIT (1ULL << 63)
/* A held completion its connection's teardown took (cq.c). */
#define ZCRPC_WR_TAKEN UINT64_MAX

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
	ZCRPC_SQ_MSG = 1,	/* a message; slot returns to the pool */
	ZCRPC_SQ_WRITE = 2,	/* a piece of a write; op if it is the last */
	ZCRPC_SQ_KEEPALIVE = 3, /* a keepalive probe (0-byte RDMA WRITE) */
	ZCRPC_SQ_BIND = 4,	/* IBV_WR_BIND_MW of a grant (mw.c) */
	ZCRPC_SQ_INV = 5,	/* IBV_WR_LOCAL_INV revoking a grant (mw.c) */
	ZCRPC_SQ_MSG_LAST = 6, /* a message after which the connection closes */
	ZCRPC_SQ_INLINE = 7,   /* a message sent inline: its slot went back */
	ZCRPC_SQ_FENCE = 8,    /* a signaled 0-byte WRITE ahead of a drain */
};

struct zcrpc__sq_entry {
	uint8_t kind;
	zcrpc__slot_id slot;
	struct zcrpc__write_op *op;    /* last piece of a write, else NULL */
	struct zcrpc_grant *g;	       /* BIND / INV: the window */
	struct zcrpc__deferred_wr *dw; /* not posted yet (send_queue.c) */
	uint8_t force_signal;	       /* post it signaled */
};

/* A work request held back behind a BIND / LOCAL_INV that waits for the
 * send queue to drain (send_queue.c, docs/design.md "Local operations"). */
struct zcrpc__deferred_wr {
	struct ibv_send_wr wr;
	struct ibv_sge sge;
	uint32_t mw_rkey; /* BIND: the window's key when it was posted */
};

/* mw.c: grants as type-2 memory windows. */
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
	/* A device without windows: the registration of the granted memory
	 * with remote write access (mr_spare.c); NULL once deregistered. */
	struct ibv_mr *rmr;
	uint32_t rkey; /* last bound rkey */
	uint8_t is_reg; /* a registration grant (rmr), never a window */
	uint8_t state;
	uint8_t answered; /* on_revoked delivered (or never due) */
	void *user_ctx;
};

struct zcrpc__mw_set {
	struct zcrpc_grant *all;
	struct zcrpc_grant *free_head, *free_tail;
	uint32_t nfree;
	struct zcrpc_grant *inv_head, *inv_tail; /* revokes waiting for room */
	struct zcrpc_grant *reg_free; /* registration grants to reuse */
	uint32_t depth; /* send-queue slots kept for BIND / INV */
	uint32_t used;	/* of them in the ring */
};

struct zcrpc_conn {
	struct zcrpc__conn_base base; /* first: its verbs (seam.h) */
	zcrpc_worker *w;
	struct zcrpc__list link;  /* worker->conns */
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
	unsigned qp_mapped : 1;	   /* in dev->qpmap (cq.c) */
	unsigned touched : 1;	   /* in the CQ poll's list of this turn */
	unsigned migrated : 1;	     /* id moved to the worker's CM channel */
	unsigned in_recv : 1;	     /* inside on_recv */
	unsigned kept : 1;	     /* on_recv kept the slot */
	unsigned want_writable : 1;  /* a send was refused: tell on_writable */
	unsigned ka_outstanding : 1; /* a keepalive probe is in the ring */
	unsigned drain_close : 1; /* closing: disconnect once the SQ drained */
	unsigned dev_gone : 1;	  /* its device was removed: nothing flushes */
	unsigned close_sent : 1;  /* our CLOSE is in the ring (close_seq) */
	unsigned peer_closed : 1; /* the peer's CLOSE arrived */
	/* Bulk path (zcrpc__conn_choose_path, from both hellos): writes end
	 * with a WRITTEN message instead of an immediate; or neither works
	 * (a side lacks write with immediate, the other WRITTEN). */
	uint32_t peer_features; /* the peer's hello, as sent */
	unsigned use_written : 1;
	unsigned no_write_end : 1;
	/* iWARP, passive side: ESTABLISHED waits for the peer's first
	 * message (rdma_connect(3)); the active side sends one at once. */
	unsigned await_first : 1;

	struct zcrpc__job *job; /* active side, while resolving */
	struct rdma_cm_id *id;
	struct zcrpc__device *dev;
	struct zcrpc__cq *cqg; /* the shared CQ it is on (cq.c) */
	struct ibv_cq *cq;     /* cqg's, NULL when on none */
	uint32_t qp_num;
	uint32_t cq_share; /* receive entries reserved on cqg: its share */
	uint32_t max_inline;

	/* Receives come from the device's shared receive queue (srq.c): the
	 * credits this connection's peer holds and those owed back to it are
	 * promised receives of that queue, at most `share` of them. */
	uint32_t recv_depth; /* the window: the most the share can grow to */
	uint32_t share;	     /* credits it may hold now (srq.c) */
	uint32_t share_min;  /* its guaranteed part */
	uint32_t out;	     /* credits the peer holds, as we count them */
	struct zcrpc__list hungry; /* dev->srq.hungry while below its share */
	unsigned hungry_linked : 1;
	/* worker->revokes_due while a registration grant's revoke waits for
	 * its on_revoked (mw.c) */
	struct zcrpc__list due_link;
	unsigned due_linked : 1;
	unsigned srq_admitted : 1; /* its credits are counted in dev->srq */
	unsigned recv_pending : 1; /* cur_recv not recycled yet */
	uint32_t cur_recv;	   /* SRQ position being delivered */
	uint32_t cur_len;

	/* Send queue ring: entries for every posted, unreaped WR. sq_depth
	 * slots for messages and writes, mw.depth more for BIND / INV. */
	uint32_t sq_depth;
	uint32_t sq_size; /* ring entries: sq_depth + mw.depth */
	struct zcrpc__mw_set mw;
	struct zcrpc__sq_entry *sq;
	uint64_t sq_head, sq_tail; /* sequence numbers */
	uint64_t sq_posted; /* [sq_head, sq_posted) posted; the rest deferred */
	/* Every WR before it is followed by a signaled one (send_queue.c):
	 * [sq_sig_next, sq_posted) are posted unsignaled with none after. */
	uint64_t sq_sig_next;
	uint32_t sq_fences; /* ZCRPC_SQ_FENCE entries in the ring (0 or 1) */
	/* A local operation waited for a drain here (the rxe quirk): from then
	 * on every WR is signaled, so later ones need no fence. */
	unsigned sq_signal_all : 1;
	struct zcrpc__write_op *wq, *wq_tail; /* writes not fully posted */

	/* Credits (docs/protocol.md §3). */
	uint32_t credits; /* messages we may still send to the peer */
	uint32_t owed;	  /* credits promised to the peer, not yet sent */
	int64_t last_data_ns; /* last DATA sent (an idle peer's release) */
	uint32_t peer_recv_depth, peer_max_msg;
	uint32_t peer_max_write; /* the peer's hello (FEAT_PIECE); 0 = none */
	uint32_t features;
	uint64_t close_seq;		/* ring sequence number of our CLOSE */
	zcrpc_status peer_close_status; /* what the peer's CLOSE said */

	/* Admission (auth.c): the key and nonce while authenticating. */
	struct zcrpc__auth *auth; /* NULL: no key on this connection */
	uint8_t auth_phase; /* enum zcrpc__auth_phase; 0 = not authenticating */
	uint32_t recv_initial; /* credits granted at setup; 0 = share_min */

	/* Passive: the listener whose connection limits count it, from the
	 * connect request until torn down (conn_limits.c), and its source. */
	zcrpc_listener *counted_by;
	uint8_t src_key[16];
	unsigned src_counted : 1;

	/* The connect, handshake or close deadline (conn.c). */
	struct zcrpc__timer deadline;
	int64_t last_active_ns; /* last post or completion (worker's now_ns) */
	int timeout_ms;
	/* Active side: when zcrpc_connect began and when rdma_connect sent
	 * the request (0 before), for the deadline's message. */
	int64_t connect_start_ns, connect_sent_ns;
	zcrpc_conn_stats stats;
#ifdef ZCRPC_TESTING
	unsigned test_broken : 1; /* zcrpc__conn_test_break_qp(): frozen */
	unsigned test_no_flow : 1; /* zcrpc__conn_test_no_flow_control() */
	uint8_t test_auth_mode;	  /* zcrpc__conn_test_auth() */
	uint8_t test_auth_proof[ZCRPC_AUTH_PROOF_LEN];
#endif
};

/* conn_limits.c: connections of one source address at one listener. */
struct zcrpc__src_count {
	uint8_t key[16]; /* IPv6, or IPv4 mapped (::ffff:a.b.c.d) */
	uint32_t n;	 /* 0: the entry is free */
};

struct zcrpc_listener {
	zcrpc_worker *w;
	struct zcrpc__list link; /* worker->listeners */
	struct rdma_cm_id *id;
	zcrpc_listen_opts opts;
	struct zcrpc__src src;
	uint16_t port;
	int failed; /* its device went away: id released, accepts nothing */
	uint8_t psk[ZCRPC_PSK_MAX]; /* opts.psk points here (psk_len bytes) */
	uint32_t handshakes; /* accepted connections not yet handed over */
	/* conn_limits.c: connections counted (connect request to teardown),
	 * and per source: an open-addressing table, sources_cap a power of
	 * two (0 = none yet), counted only with max_conns_per_source. */
	uint32_t conns;
	struct zcrpc__src_count *sources;
	uint32_t sources_cap, sources_used;
	zcrpc_conn_handlers conn_handlers; /* opts.conn_handlers points here */
	/* listener.c, a listener spread over several workers
	 * (zcrpc__listener_spread): the workers it hands connections to
	 * (workers[0] == w), the connections counted per worker (the
	 * least-connections rule, conn_limits.c), and the references the
	 * owner (1) and the connections on other workers (2 each: handshake
	 * and count) hold; `closed` once destroyed, read by any worker. */
	zcrpc_worker **workers;
	uint32_t nworkers;
	uint32_t *wconns;
	atomic_uint refs;
	atomic_int closed;
};

#define zcrpc__conn_of(l)     zcrpc__container_of(l, zcrpc_conn, link)
#define zcrpc__listener_of(l) zcrpc__container_of(l, zcrpc_listener, link)
/* Walks the connections of worker @w: @c a zcrpc_conn *, @it a struct
 * zcrpc__list *. The body must not free @c (zcrpc__conn_free). */
#define zcrpc__foreach_conn(c, it, w)                                          \
	for ((it) = (w)->conns.next;                                           \
	     (it) != &(w)->conns && (((c) = zcrpc__conn_of(it)), 1);           \
	     (it) = (it)->next)

#endif /* ZCRPC_TRANSPORT_CONN_TYPES_H */
