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

/* Connections one source address may hold open at one listener (counted
 * from the connect request until torn down, handshakes included), the
 * default of zcrpc_listen_opts / zcrpc_server_opts.max_conns_per_source:
 * one client cannot take every connection of a server (issue 13: 63 silent
 * connections locked every other client out). 64 leaves a client process
 * room for a channel per thread of a large host; a test or a proxy that
 * funnels many clients raises it. */
#define ZCRPC_DEFAULT_CONNS_PER_SOURCE 64U

#endif /* ZCRPC_CORE_LIMITS_H */
