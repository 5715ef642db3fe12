/* zcrpc — the transport's private header, the one every file of
 * src/transport includes (as libuv's src/unix/internal.h): the structures
 * come from worker_types.h (contexts, devices, workers, timers) and
 * conn_types.h (connections, the send ring, writes, grants, listeners);
 * below are the prototypes, one section per file, in the order of the
 * file table in docs/design.md. Not installed. */
#ifndef ZCRPC_TRANSPORT_INTERNAL_H
#define ZCRPC_TRANSPORT_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include "auth.h"
#include "conn_types.h"
#include "hello.h"
#include "mempool.h"
#include "seam.h"
#include "worker_types.h"
#include "../core/log.h"
#include "zcrpc/transport.h"

/* ---- test points ---------------------------------------------------------
 * zcrpc_internal, the library the tests link, is built with ZCRPC_TESTING:
 * its hooks (test_hooks.h, bodies in test_hooks.c) set state the library
 * reads at the points below. The shipped libzcrpc is built without it:
 * each point is its normal value there and no hook is compiled in. */
#ifdef ZCRPC_TESTING
#include "test_hooks.h"
/* zcrpc__conn_test_break_qp(): the connection is frozen. */
#define ZCRPC_CONN_FROZEN(c) ((c)->test_broken)
/* zcrpc__conn_test_no_flow_control(): credits without a limit. */
#define ZCRPC_TEST_NO_FLOW(c) ((c)->test_no_flow)
/* zcrpc__worker_test_clear_features(): feature bits its hellos leave out. */
#define ZCRPC_TEST_NO_FEATURES(w) ((w)->test_no_features)
/* zcrpc__test_allow_zero_writes(): zcrpc_conn_write() takes a length 0. */
#define ZCRPC_TEST_ZERO_WRITES_OK zcrpc__testing_zero_writes()
uint32_t zcrpc__testing_cq_entries(uint32_t cqe);
uint32_t zcrpc__testing_write_piece(uint32_t own);
int zcrpc__testing_zero_writes(void);
const uint8_t *zcrpc__auth_sent_proof(const zcrpc_conn *c);
#else
#define ZCRPC_CONN_FROZEN(c)	  ((void)(c), 0)
#define ZCRPC_TEST_NO_FLOW(c)	  ((void)(c), 0)
#define ZCRPC_TEST_NO_FEATURES(w) ((void)(w), 0u)
#define ZCRPC_TEST_ZERO_WRITES_OK 0
#endif

/* How to get a device, for the "no RDMA device" messages. */
#define ZCRPC_NO_DEVICE_HINT                                                   \
	"load rdma_ucm and add a device; without RDMA hardware, Soft-RoCE "    \
	"emulates one over Ethernet: modprobe rdma_rxe && "                    \
	"rdma link add rxe0 type rxe netdev eth0 (your interface)"

/* ---- worker.c ----------------------------------------------------------- */
void zcrpc__worker_account_gone(zcrpc_worker *w, const zcrpc_conn *c);
void zcrpc__worker_keepalive_start(zcrpc_worker *w);
int zcrpc__epoll_add(zcrpc_worker *w, int fd, struct zcrpc__src *src);
void zcrpc__worker_seterr(zcrpc_worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Sets what zcrpc_last_error() returns on this thread. */
void zcrpc__set_last_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* ---- timer.c: the one timer mechanism (connection deadlines, the keepalive
 * check, the RPC layer's timers). Start (or keep an earlier due time),
 * stop and run are O(log n) per timer. */
/* zcrpc__timer_start / zcrpc__timer_stop: seam.h */
void zcrpc__timers_init(zcrpc_worker *w);
/* Runs the timers due at @now (cheap when nothing is); returns how many
 * ran (their callbacks may have run the application's: a turn that ran
 * any does not sleep). */
int zcrpc__timers_run(zcrpc_worker *w, int64_t now);
/* The timerfd went off (it is disarmed now): drain it, set the next. */
void zcrpc__timers_on_fd(zcrpc_worker *w);

/* ---- context.c ---------------------------------------------------------- */
void zcrpc__context_ref(zcrpc_context *ctx);
void zcrpc__context_unref(zcrpc_context *ctx);
int zcrpc__context_dev_index(const zcrpc_context *ctx,
			     const struct ibv_context *verbs);
struct zcrpc__registrar zcrpc__context_registrar(zcrpc_context *ctx);
/* Every registration goes through these two: ibv_reg_mr on device @idx
 * (NULL with errno; ENODEV once the device went) and ibv_dereg_mr, counted
 * in the device's registered bytes. Callers hold ctx->lock for reg. */
struct ibv_mr *zcrpc__dev_reg(zcrpc_context *ctx, int idx, void *addr,
			      size_t len, int access);
void zcrpc__dev_dereg(zcrpc_context *ctx, struct ibv_mr *r);
/* A worker of @ctx starts using device @idx (its first connection there):
 * the application's registrations made while other devices were in use
 * are registered there too, with their spares. 0, or an errno value and
 * @why (the device and what failed). Worker thread; setup, not a call. */
int zcrpc__context_use_device(zcrpc_context *ctx, int idx, char *why,
			      size_t why_len);
/* @verbs is a device the context does not have: one that came back after
 * its removal (`rdma link add`, a reset after DEVICE_FATAL), or a new one.
 * Takes it into its old slot (same name) or a free one and returns the
 * index, or -1 (no slot, or it could not be opened). Any worker thread. */
int zcrpc__context_adopt(zcrpc_context *ctx, struct ibv_context *verbs);

/* ---- mr_spare.c: grants on devices without type-2 windows -------------- */
/* Whether a registration with @flags keeps spares on device @idx. */
int zcrpc__spare_wanted(const zcrpc_context *ctx, int idx, unsigned flags);
/* @mr's spare on device @idx now, unless it has one; under ctx->lock. */
int zcrpc__spare_make_locked(zcrpc_mr *mr, int idx);
/* Takes device @idx's spare (NULL when none is ready) and asks the spare
 * thread for the next one. Any thread. */
struct ibv_mr *zcrpc__spare_take(zcrpc_mr *mr, int idx);
void zcrpc__spare_refill(zcrpc_mr *mr, int idx);
/* Cancels @mr's refills, waits for one running, deregisters its spares. */
void zcrpc__spare_forget(zcrpc_mr *mr);
void zcrpc__spare_stop(zcrpc_context *ctx);

/* ---- mw.c --------------------------------------------------------------- */
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
/* Answers the registration grants' revokes of the connections on
 * w->revokes_due; returns how many. */
int zcrpc__mw_answer_due(zcrpc_worker *w);

/* ---- device.c */
zcrpc_status zcrpc__device_get(zcrpc_worker *w, struct ibv_context *verbs,
			       struct zcrpc__device **out);
void zcrpc__device_close_all(zcrpc_worker *w);
void zcrpc__device_drain(zcrpc_worker *w, struct zcrpc__device *dev);
void zcrpc__device_close(zcrpc_worker *w, int idx);

/* ---- connect.c */
void zcrpc__jobs_handle_done(zcrpc_worker *w);
void zcrpc__job_abandon(zcrpc_conn *c);
void zcrpc__jobs_join_all(zcrpc_worker *w);

/* ---- reaper.c: rejects off the worker thread */
/* Sends the REJECT hello @h for connect request @id (owned by no
 * connection) and frees the id, on the worker's reaper thread (started at
 * the first call; here, when it cannot be). Takes @id. */
void zcrpc__reaper_reject(zcrpc_worker *w, struct rdma_cm_id *id,
			  const struct zcrpc_hello *h);
/* Finishes the queued rejects and joins the thread (worker destroy). */
void zcrpc__reaper_stop(zcrpc_worker *w);

/* ---- listener.c */
void zcrpc__listener_on_readable(zcrpc_listener *l);
/* Its device was removed: release the id; the listener accepts nothing. */
void zcrpc__listener_drop_device(zcrpc_listener *l);
/* @c (accepted by its listener) leaves the handshake: handed over or failed. */
void zcrpc__listener_release(zcrpc_conn *c);
/* Rejects connect request @id of @l with a REJECT hello carrying @st and
 * the formatted reason (cut to what the CM's reject carries, 116 bytes),
 * which the client reports ("server rejected the connection: ST: reason"),
 * and logs it (zcrpc__worker_seterr). Counts nothing (the caller counts its
 * reason in the worker's stats) and leaves @id to the caller: a request no
 * connection owns yet is the caller's to rdma_destroy_ep, one given to a
 * connection goes with its teardown. */
void zcrpc__listener_reject(zcrpc_listener *l, struct rdma_cm_id *id,
			    zcrpc_status st, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- conn_limits.c: max_connections, max_conns_per_source */
#define ZCRPC_SRC_TEXT_LEN 64
/* The source address of connect request @id: its key, and as text. */
void zcrpc__limits_source(struct rdma_cm_id *id, uint8_t key[16], char *text,
			  size_t text_len);
/* OK when @l may take one more connection from @key; RESOURCE_EXHAUSTED,
 * counted (rejected_conn_limit, rejected_source_limit), with the reason for
 * the client in @why otherwise. */
zcrpc_status zcrpc__limits_admit(zcrpc_listener *l, const uint8_t key[16],
				 const char *src_text, char *why,
				 size_t why_len);
/* Counts @c, accepted by @l from @key, until zcrpc__limits_release().
 * RESOURCE_EXHAUSTED when the source table cannot grow (out of memory). */
zcrpc_status zcrpc__limits_take(zcrpc_listener *l, zcrpc_conn *c,
				const uint8_t key[16]);
/* @c no longer counts (its teardown; idempotent). On a worker other than
 * its listener's, the release is posted to the listener's worker. */
void zcrpc__limits_release(zcrpc_conn *c);
/* The counting without a connection, on @l's worker: one connection of
 * @key handed to @l's worker number @wi (0 = its own), and its return. */
zcrpc_status zcrpc__limits_count(zcrpc_listener *l, const uint8_t key[16],
				 uint32_t wi);
void zcrpc__limits_uncount(zcrpc_listener *l, const uint8_t key[16],
			   int src_counted, uint32_t wi);
uint32_t zcrpc__listener_widx(const zcrpc_listener *l, const zcrpc_worker *w);
/* listener.c: a connection on worker @from (not @l's) gives back its
 * handshake (@handshake) or its count (key, src_counted): posted to @l's
 * worker, or only @l's reference dropped once @l is closed. Any thread. */
void zcrpc__listener_remote_release(zcrpc_listener *l, zcrpc_worker *from,
				    const uint8_t key[16], int src_counted,
				    int handshake);
/* @l goes: the connections it counted no longer count anywhere. */
void zcrpc__limits_fini(zcrpc_listener *l);

/* ---- seam.c: the verbs of every RDMA connection (conn.c sets base.ops) */
extern const struct zcrpc__conn_ops zcrpc__rdma_conn_ops;

/* ---- conn.c: lifecycle */
zcrpc_conn *zcrpc__conn_alloc(zcrpc_worker *w, const zcrpc_conn_handlers *h);
zcrpc_status zcrpc__conn_alloc_queues(zcrpc_conn *c);
void zcrpc__conn_release_queues(zcrpc_conn *c);
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
/* Arms the connect, handshake or close deadline (replacing any). */
void zcrpc__conn_set_deadline(zcrpc_conn *c, int64_t due_ns);
void zcrpc__conn_clear_deadline(zcrpc_conn *c);
void zcrpc__conn_close_drained(zcrpc_conn *c);
/* The feature bits @w announces: ZCRPC_FEAT_ALL less what a test hook
 * took away (zcrpc__worker_test_clear_features). */
uint32_t zcrpc__worker_features(const zcrpc_worker *w);
/* The connection's features and bulk path from the peer's hello bits and
 * its device's profile (c->dev set): write with immediate, WRITTEN
 * messages, or neither (docs/protocol.md §4). */
void zcrpc__conn_choose_path(zcrpc_conn *c, uint32_t peer_features);
/* A CLOSE message arrived (msg.c): the peer closes in order. */
void zcrpc__conn_on_close_msg(zcrpc_conn *c, const uint8_t *payload);

/* ---- send_queue.c: the send ring, deferral behind local operations */
int zcrpc__sq_room(const zcrpc_conn *c);
int zcrpc__sq_post(zcrpc_conn *c, struct ibv_send_wr *wr,
		   const struct zcrpc__sq_entry *e, int force_signal);
void zcrpc__sq_post_deferred(zcrpc_conn *c);
void zcrpc__sq_complete(zcrpc_conn *c, uint64_t seq, enum ibv_wc_status st);
void zcrpc__sq_flush_all(zcrpc_conn *c);
void zcrpc__conn_keepalive(zcrpc_conn *c);

/* ---- context.c: the profile of the context's device @idx (tests) */
const struct zcrpc__dev_profile *
zcrpc__context_profile(const zcrpc_context *ctx, int idx);

/* ---- srq.c: the shared receive queue and its credit budget */
zcrpc_status zcrpc__srq_open(zcrpc_worker *w, struct zcrpc__device *d);
/* Destroys the queue and gives its slots back (no QP may use it). */
void zcrpc__srq_close(zcrpc_worker *w, struct zcrpc__device *d);
/* @c joins its device's queue with @n credits promised (its first grant,
 * the hello's recv_depth). RESOURCE_EXHAUSTED (connection failed) when
 * the budget cannot promise them. */
zcrpc_status zcrpc__srq_admit(zcrpc_conn *c, uint32_t n);
/* Raises @c's share to @share (as far as free receives allow), the new
 * credits owed to the peer. Returns how many it added. */
uint32_t zcrpc__srq_raise(zcrpc_conn *c, uint32_t share);
/* One of @c's credits was consumed. -1: the peer had none (failed). */
int zcrpc__srq_consume(zcrpc_conn *c);
/* The delivery of position @pos ended: repost it (a fresh slot if
 * @kept) and give the credit to @c (NULL: none), or a hungry peer. */
void zcrpc__srq_recycle(zcrpc_worker *w, struct zcrpc__device *d, zcrpc_conn *c,
			uint32_t pos, int kept);
/* The receive being delivered to @c (c->cur_recv) is done with. */
void zcrpc__conn_recv_done(zcrpc_conn *c, int kept);
/* Positions waiting for pool slots get them, as far as there are some. */
void zcrpc__srq_retry(zcrpc_worker *w);
/* The peer gave @n of its credits back (checked by the caller). */
void zcrpc__srq_released(zcrpc_conn *c, uint32_t n);
/* @c leaves the queue (teardown): its credits are free again. */
void zcrpc__srq_leave(zcrpc_conn *c);

/* ---- credits.c: flow control */
/* Credits an ordinary message (or a write with immediate) needs (msg.c). */
uint32_t zcrpc__credits_for_data(const zcrpc_conn *c);
/* The seam's send_urgent (msg.c). */
zcrpc_status zcrpc__conn_send_msg_urgent(zcrpc_conn *c, zcrpc_msg *m,
					 size_t len);
/* Sends the message in @s (payload of @len bytes in place) with one
 * credit, returning what is owed. The caller checked credits and room. */
int zcrpc__credits_post_msg(zcrpc_conn *c, const struct zcrpc__slot *s,
			    uint8_t type, size_t len, uint8_t kind);
void zcrpc__credits_maybe_send(zcrpc_conn *c);
int zcrpc__credits_returned(zcrpc_conn *c, uint32_t got);
/* The peer's RELEASE gave back @n more credits. -1: more than it held. */
int zcrpc__credits_on_release(zcrpc_conn *c, uint32_t n);
/* A connection idle for @idle_ns gives the peer's extra credits back
 * (RELEASE), when it holds at least ZCRPC_RELEASE_MIN of them. */
#define ZCRPC_RELEASE_MIN 4
void zcrpc__credits_maybe_release(zcrpc_conn *c, int64_t now, int64_t idle_ns);

/* ---- msg.c: messages in and out */
/* Sends a transport message of @type with @len payload bytes from @data,
 * outside the application's state checks (one credit, ring room needed).
 * @last: the connection closes once it is sent (zcrpc__auth_last_sent). */
zcrpc_status zcrpc__conn_send_ctrl(zcrpc_conn *c, uint8_t type,
				   const void *data, size_t len, int last);
void zcrpc__msg_on_recv(zcrpc_conn *c, uint32_t pos, uint32_t byte_len);

/* ---- completion.c: completion dispatch */
int zcrpc__conn_poll(zcrpc_conn *c);
void zcrpc__conn_on_wc(zcrpc_conn *c, const struct ibv_wc *wc);

/* cq.c: the worker's CQs per device, shared by its connections */
zcrpc_status zcrpc__cq_attach(zcrpc_conn *c, uint32_t test_cqe);
zcrpc_status zcrpc__cq_map(zcrpc_conn *c);
void zcrpc__cq_unmap(zcrpc_conn *c);
void zcrpc__cq_detach(zcrpc_conn *c);
uint32_t zcrpc__cq_share_room(zcrpc_conn *c, uint32_t want);
void zcrpc__cq_share_sync(zcrpc_conn *c);
void zcrpc__cq_close_all(struct zcrpc__device *d);
int zcrpc__cq_take(zcrpc_conn *c, struct ibv_wc *wc, int max);
int zcrpc__cq_poll(struct zcrpc__cq *g);
int zcrpc__cq_poll_all(zcrpc_worker *w);
int zcrpc__cq_arm_all(zcrpc_worker *w);

/* ---- write.c: the RDMA-write path */
/* The largest RDMA WRITE this side posts or accepts in one work request: its
 * port's max_msg_sz (lowered by zcrpc__test_write_piece). */
uint32_t zcrpc__conn_own_piece(const zcrpc_conn *c);
void zcrpc__conn_pump_writes(zcrpc_conn *c);
void zcrpc__write_finish(zcrpc_conn *c, struct zcrpc__write_op *op,
			 zcrpc_status st);
void zcrpc__conn_fail_writes(zcrpc_conn *c, zcrpc_status st);
void zcrpc__write_on_imm(zcrpc_conn *c, uint32_t pos, uint32_t imm,
			 uint32_t byte_len);
void zcrpc__write_release_all(zcrpc_conn *c);

/* ---- removal.c: RDMA_CM_EVENT_DEVICE_REMOVAL. The worker that sees it marks
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
/* The removal watch of device @i alone (under ctx->lock, or at creation). */
void zcrpc__context_watch_dev(zcrpc_context *ctx, int i);
void zcrpc__context_unwatch(zcrpc_context *ctx);
void zcrpc__worker_on_watch(zcrpc_worker *w);

/* ---- pin.c: a connection pinned to a device, port and GID ------------ */
/* struct zcrpc__pin is in worker_types.h (a connect job holds one). */
/* Chooses the source address for a pin (gid_index 0: the port's first GID
 * with an IP address). INVALID_ARGUMENT with @why when the device, port or
 * GID does not exist or has no address. Worker thread. */
zcrpc_status zcrpc__pin_source(zcrpc_context *ctx, const char *device,
			       uint32_t port, uint32_t gid_index,
			       struct zcrpc__pin *out, char *why, size_t why_len);
/* 0 when the resolved @id runs over the pinned device and port; else -1
 * and @why names both. */
int zcrpc__pin_check(const zcrpc_context *ctx, const struct zcrpc__pin *p,
		     const struct rdma_cm_id *id, char *why, size_t why_len);

/* ---- async.c: device async events (port up/down, QP/CQ errors). */
void zcrpc__context_async_init(zcrpc_context *ctx);
void zcrpc__context_async_init_dev(zcrpc_context *ctx, int i);
/* Adds device @i's async fd to @w's epoll set; 0 or -1. Any thread. */
int zcrpc__worker_async_watch_dev(zcrpc_worker *w, int i);
/* Handles device @idx's event @type for the QP @qp_num, the CQ @cq or the
 * port @port (read from the event before it was acknowledged). */
void zcrpc__worker_async_event(zcrpc_worker *w, int idx,
			       enum ibv_event_type type, uint32_t qp_num,
			       const void *cq, int port);
/* Whether port @port of context device @idx is down (PORT_ERR seen). */
int zcrpc__port_down(const zcrpc_context *ctx, int idx, int port);
zcrpc_status zcrpc__worker_async_watch(zcrpc_worker *w);
void zcrpc__worker_on_async(zcrpc_worker *w, int idx);

/* ---- auth.c: admission with a pre-shared key (see auth.h for the rest) */
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

#endif /* ZCRPC_TRANSPORT_INTERNAL_H */
