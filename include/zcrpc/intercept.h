/* zcrpc — interceptors: a chain of hooks that sees every call and stream
 * of a channel or a server — its start with the method and metadata, each
 * message, and its end with the status — so logging, metrics and
 * authentication are added without touching handlers (gRPC's model).
 *
 * A channel's interceptors run in the order they were added at a call's
 * start (each may add request metadata or refuse the call) and in reverse
 * order at its end; a server's the same way around each request before its
 * handler (each may refuse it with a status). Every interceptor whose
 * start ran sees the end exactly once.
 *
 * Threading: the hooks run on the worker thread that owns the call (a
 * server's: the worker of the connection), from the same places the call's
 * own callbacks run; they must not block. A hook must not start, cancel or
 * reply to calls.
 *
 * Ownership: the structs are copied when added; @arg stays the caller's.
 * What a hook is given is valid only during the hook.
 */
#ifndef ZCRPC_INTERCEPT_H
#define ZCRPC_INTERCEPT_H

#include <stddef.h>
#include <stdint.h>

#include "zcrpc/export.h"
#include "zcrpc/rpc.h"
#include "zcrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Interceptors a channel or server may have. */
#define ZCRPC_MAX_INTERCEPTORS 4

/** Pairs of request metadata all of a channel's interceptors may add to
 * one call, together (within the 16 pairs and 2 KiB of every message). */
#define ZCRPC_INTERCEPT_MD_ROOM 4

/** A call as an interceptor sees it at its start. */
typedef struct zcrpc_call_info {
	size_t size;	     /**< bytes the library filled (ZCRPC_VIEW_HAS) */
	uint32_t method_id;  /**< zcrpc_method_id() of its full name */
	int streaming;	     /**< 1 for a stream (zcrpc/stream.h), 0 for a unary call */
	const zcrpc_md *md;  /**< the request's (initial) metadata */
	size_t n_md;
	int64_t timeout_us;  /**< time left; -1 = no deadline */
	/* New fields go here. */
} zcrpc_call_info;

/** A channel's interceptor. Zero it, set @size, then the hooks wanted. */
typedef struct zcrpc_client_interceptor {
	size_t size; /**< sizeof(zcrpc_client_interceptor) */
	/** A call or stream starts. May add request metadata: up to @room
	 * pairs into @add (their strings are copied into the request before
	 * the call returns), their count in *@n_add. *@state is this
	 * interceptor's pointer for the call, given to the other hooks. A
	 * status other than OK refuses the call: zcrpc_call_start() /
	 * zcrpc_stream_start() return it and nothing is sent (the
	 * interceptors started before see their on_end with it). */
	zcrpc_status (*on_start)(const zcrpc_call_info *call, zcrpc_md *add,
				 size_t room, size_t *n_add, void **state,
				 void *arg);
	/** A message of @len bytes goes out (@outgoing 1) or arrived (0): the
	 * request and the reply of a unary call, each message of a stream. */
	void (*on_message)(void *state, int outgoing, size_t len, void *arg);
	/** The call ended with @status and @message; @md is the server's
	 * trailing metadata (none when the call ended at the client). */
	void (*on_end)(void *state, zcrpc_status status, const char *message,
		       const zcrpc_md *md, size_t n_md, void *arg);
	void *arg;
	/* New fields go here (NULL must mean the old behaviour). */
} zcrpc_client_interceptor;

/**
 * zcrpc_channel_add_interceptor - append @ic (copied) to @ch's chain.
 * Before the channel's first call or stream. INVALID_ARGUMENT (NULL, a
 * short @size), RESOURCE_EXHAUSTED (ZCRPC_MAX_INTERCEPTORS reached),
 * FAILED_PRECONDITION (a call was started already).
 */
ZCRPC_API zcrpc_status
zcrpc_channel_add_interceptor(zcrpc_channel *ch,
			      const zcrpc_client_interceptor *ic);

/** A server's interceptor. Zero it, set @size, then the hooks wanted. */
typedef struct zcrpc_server_interceptor {
	size_t size; /**< sizeof(zcrpc_server_interceptor) */
	/** A request (or stream) arrived for a registered method, before its
	 * handler. A status other than OK refuses it: the client gets that
	 * status and *@message (a static or long-lived string; may stay
	 * NULL), the handler never runs, and the interceptors that accepted
	 * it before see their on_end with that status. *@state as above. */
	zcrpc_status (*on_call)(const zcrpc_call_info *call,
				const char **message, void **state, void *arg);
	/** As the client's: the request and reply, each stream message. */
	void (*on_message)(void *state, int outgoing, size_t len, void *arg);
	/** The call ended: its reply left with @status, or it ended without
	 * one (CANCELLED by the client, DEADLINE_EXCEEDED before it ran,
	 * UNAVAILABLE when the connection went). */
	void (*on_end)(void *state, zcrpc_status status, void *arg);
	void *arg;
	/* New fields go here (NULL must mean the old behaviour). */
} zcrpc_server_interceptor;

/**
 * zcrpc_server_add_interceptor - append @ic (copied) to @s's chain. Before
 * listening. INVALID_ARGUMENT, RESOURCE_EXHAUSTED (ZCRPC_MAX_INTERCEPTORS
 * reached), FAILED_PRECONDITION (listening already).
 */
ZCRPC_API zcrpc_status
zcrpc_server_add_interceptor(zcrpc_server *s,
			     const zcrpc_server_interceptor *ic);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_INTERCEPT_H */
