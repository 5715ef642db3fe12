/* zcrpc — the named limits and defaults shared by the layers. Public
 * defaults are documented in the public headers; this is where their
 * numbers live, with the reason for each. */
#ifndef ZCRPC_CORE_LIMITS_H
#define ZCRPC_CORE_LIMITS_H

/* The deepest receive or send queue a connection asks for, and the largest
 * RPC window: 2^15 work requests. A whole window's credits then fit the
 * 16-bit "credits returned" field of the transport header (protocol §2)
 * with room to spare, and rxe (the provider CI runs) accepts the depth. */
#define ZCRPC_MAX_QUEUE_DEPTH 32768U
/* Workers of one server (zcrpc_server_opts.workers, threads). */
#define ZCRPC_MAX_WORKERS 64U

/* The smallest usable queue depth: one slot in use, one being reposted. */
#define ZCRPC_MIN_QUEUE_DEPTH 2U

/* The RPC window's default: the most calls in flight on one connection
 * each way, and so the most credits one connection's peer may hold. The
 * first version chose 1024 + 16: a full window of 1024 calls still leaves
 * 16 receives for the messages such a window provokes (credit updates,
 * cancels, GOAWAY). Nothing enforces the split; it is slack, not a
 * reservation. Since issue 13 it costs no memory by itself: receives come
 * from the worker's shared receive queue, and a connection holds its
 * guaranteed share (ZCRPC_RECV_SHARE_DEFAULT) plus what a busy window
 * earns while the budget has it (docs/design.md "Shared receive path"). */
#define ZCRPC_RPC_DEFAULT_WINDOW (1024U + 16U)

/* A worker's shared receive queue per device, at most: 32,768 receives of
 * 4160 B at the default max_msg (130 MiB), posted only as connections
 * need them: 2,048 connections at their guaranteed 16 credits each, 66 KiB
 * of receive memory per connection. Peers size theirs alike per interface
 * or thread (UCX 4,096, eRPC 4,096), for fewer connections each. */
#define ZCRPC_RECV_BUDGET_DEFAULT 32768U
#define ZCRPC_MAX_RECV_BUDGET	  (1U << 20)

/* Credits guaranteed to each connection: 16, so a burst of calls, their
 * cancels, the credit updates and a CLOSE need not wait for the budget,
 * and a peer without shared receives (ZCRPC_FEAT_SHARED) still keeps 14
 * messages in flight; a busy connection's share doubles from there. */
#define ZCRPC_RECV_SHARE_DEFAULT 16U

/* Connections one source address may hold open at one listener (counted
 * from the connect request until torn down, handshakes included), the
 * default of zcrpc_listen_opts / zcrpc_server_opts.max_conns_per_source:
 * one client cannot take every connection of a server (issue 13: 63 silent
 * connections locked every other client out). 64 leaves a client process
 * room for a channel per thread of a large host; a test or a proxy that
 * funnels many clients raises it. */
#define ZCRPC_DEFAULT_CONNS_PER_SOURCE 64U

/* The RPC layer's default send-queue depth per connection (channel and
 * server options): no longer the window (issue 13), since a send WR
 * completes within a round trip while a receive slot stays taken for a
 * call's whole life. 64 is the transport's own default and what perftest
 * and UCX use; calls beyond it wait in the RPC layer's queues. */
#define ZCRPC_RPC_DEFAULT_SEND_DEPTH 64U

#endif /* ZCRPC_CORE_LIMITS_H */
