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

/* The smallest usable queue depth: one slot in use, one being reposted. */
#define ZCRPC_MIN_QUEUE_DEPTH 2U

/* The RPC window's default: receive slots (and so credits) per connection
 * each way, the calls that can be in flight on one connection. The first
 * version chose 1024 + 16: a full window of 1024 calls still leaves 16
 * receives for the messages such a window provokes (credit updates,
 * cancels, GOAWAY). Nothing enforces the split; it is slack, not a
 * reservation. Cost: 1040 slots of max_msg + 8 bytes (4160 B at the
 * default 4 KiB), 4.1 MiB of receive memory per connection, which is why
 * a worker's 65,536-slot pool holds about 63 connections (issue 13). */
#define ZCRPC_RPC_DEFAULT_WINDOW (1024U + 16U)

/* The RPC layer's default send-queue depth per connection (channel and
 * server options): no longer the window (issue 13), since a send WR
 * completes within a round trip while a receive slot stays taken for a
 * call's whole life. 64 is the transport's own default and what perftest
 * and UCX use; calls beyond it wait in the RPC layer's queues. */
#define ZCRPC_RPC_DEFAULT_SEND_DEPTH 64U

#endif /* ZCRPC_CORE_LIMITS_H */
