/* zcrpc — transport hooks for tests only (fault injection, diagnosis);
 * reachable from C and C++ tests through zcrpc_internal, the static
 * library built with ZCRPC_TESTING (bodies in test_hooks.c). Not
 * installed; the shipped libzcrpc has none of them. */
#ifndef ZCRPC_TESTING
#error "test_hooks.h is for the test build only (ZCRPC_TESTING, zcrpc_internal)"
#endif
#ifndef ZCRPC_TRANSPORT_TEST_HOOKS_H
#define ZCRPC_TRANSPORT_TEST_HOOKS_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>

#include "zcrpc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How many times @w called epoll_wait (its progress turns' reads of the
 * epoll set, sleeping or not). */
uint64_t zcrpc__worker_test_epoll_reads(const zcrpc_worker *w);

/* Handles @type (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, CQ_ERR) for @c's QP or
 * CQ as if @w had read it from the device (rxe 6.1 raises no QP events).
 * Returns INVALID_ARGUMENT when @c has no QP. */
zcrpc_status zcrpc__worker_test_async_event(zcrpc_worker *w, zcrpc_conn *c,
					    enum ibv_event_type type);

/* Handles PORT_ERR or PORT_ACTIVE for port @port of @c's device as if @w
 * had read it (rxe has one port: a second port's events are injected). */
zcrpc_status zcrpc__worker_test_port_event(zcrpc_worker *w, zcrpc_conn *c,
					   int port, enum ibv_event_type type);

/* The next connection set up anywhere in the process gets a completion
 * queue of @entries entries instead of one holding both its queues in full
 * (T19: a real CQ overrun, which rxe reports as IBV_EVENT_CQ_ERR). One-shot;
 * 0 cancels. */
void zcrpc__test_next_cq_entries(int entries);

/* Every connection set up afterwards in the process announces (in its
 * hello) and uses RDMA WRITE pieces of at most @bytes (>= 4096; 0 goes back
 * to the device's max_msg_sz), so tests can split small bulk parts. */
void zcrpc__test_write_piece(uint32_t bytes);

/* @on != 0: zcrpc_conn_write() accepts a length of 0 (a hostile peer's
 * empty WRITE WITH IMMEDIATE). Process-wide. */
void zcrpc__test_allow_zero_writes(int on);

/* The hellos @w sends from now on leave out the feature bits @bits (e.g.
 * ZCRPC_FEAT_CLOSE: @w behaves as a peer built before that feature), and
 * its connections use none of them. 0 restores every bit. */
void zcrpc__worker_test_clear_features(zcrpc_worker *w, uint32_t bits);

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

/*
 * Tests only, on a client connection with a key, before it is established:
 * how it authenticates. NORMAL proves the key; SILENT never sends AUTH;
 * DATA_FIRST sends a DATA message instead; PROOF sends @proof (32 bytes)
 * verbatim, as a replay would. zcrpc__conn_test_auth_sent() copies the
 * proof the last AUTH carried (INVALID_ARGUMENT when none was sent).
 */
enum zcrpc__auth_test_mode {
	ZCRPC_AUTH_TEST_NORMAL = 0,
	ZCRPC_AUTH_TEST_SILENT = 1,
	ZCRPC_AUTH_TEST_DATA_FIRST = 2,
	ZCRPC_AUTH_TEST_PROOF = 3,
};
zcrpc_status zcrpc__conn_test_auth(zcrpc_conn *c, int mode,
				   const uint8_t *proof);
/* Tests only: the connections @w accepts (with a key) take any client
 * proof and prove a key they do not have (another one): a stranger
 * posing as the server, which a mutual client must refuse. */
void zcrpc__worker_test_auth_stranger(zcrpc_worker *w, int on);
zcrpc_status zcrpc__conn_test_auth_sent(const zcrpc_conn *c, uint8_t *proof);

/* Prints @w's connections' internal state to @out (diagnosis of hangs). */
void zcrpc__worker_test_dump(zcrpc_worker *w, FILE *out);

/* Prints @ch's calls that are not free, by state (diagnosis of hangs). */
struct zcrpc_channel;
void zcrpc__channel_test_dump(struct zcrpc_channel *ch, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_TRANSPORT_TEST_HOOKS_H */
