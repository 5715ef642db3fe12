/* zcrpc — transport hooks for tests only (fault injection); reachable from
 * C and C++ tests through the internal static library. Not installed. */
#ifndef ZCRPC_TRANSPORT_TEST_HOOKS_H
#define ZCRPC_TRANSPORT_TEST_HOOKS_H

#include <infiniband/verbs.h>
#include <stdio.h>

#include "zcrpc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles @type (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, CQ_ERR) for @c's QP or
 * CQ as if @w had read it from the device (rxe 6.1 raises no QP events).
 * Returns INVALID_ARGUMENT when @c has no QP. */
zcrpc_status zcrpc__worker_test_async_event(zcrpc_worker *w, zcrpc_conn *c,
					    enum ibv_event_type type);

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

/* Prints @w's connections' internal state to @out (diagnosis of hangs). */
void zcrpc__worker_test_dump(zcrpc_worker *w, FILE *out);

/* Prints @ch's calls that are not free, by state (diagnosis of hangs). */
struct zcrpc_channel;
void zcrpc__channel_test_dump(struct zcrpc_channel *ch, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_TRANSPORT_TEST_HOOKS_H */
