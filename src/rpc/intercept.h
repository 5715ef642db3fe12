/* zcrpc — interceptor chains (include/zcrpc/intercept.h): a channel's or a
 * server's list, and the per-call record of which interceptors started and
 * their state pointers, so each sees its end exactly once. */
#ifndef ZCRPC_RPC_INTERCEPT_H
#define ZCRPC_RPC_INTERCEPT_H

#include <stdint.h>

#include "zcrpc/intercept.h"
#include "frame.h"

struct zcrpc__cchain {
	zcrpc_client_interceptor ic[ZCRPC_MAX_INTERCEPTORS];
	uint8_t n;
};

struct zcrpc__schain {
	zcrpc_server_interceptor ic[ZCRPC_MAX_INTERCEPTORS];
	uint8_t n;
};

/* One call's: the state each started interceptor gave, how many started. */
struct zcrpc__icall {
	void *state[ZCRPC_MAX_INTERCEPTORS];
	uint8_t started;
	uint8_t ended;
};

/* Runs the chain's on_start in order; what they add goes to @add (room
 * ZCRPC_INTERCEPT_MD_ROOM), its count in *@n_add. On a refusal the ones
 * started see on_end with it, and it is returned. */
zcrpc_status zcrpc__cchain_start(const struct zcrpc__cchain *ch,
				 const zcrpc_call_info *info, zcrpc_md *add,
				 size_t *n_add, struct zcrpc__icall *ic);
/* zcrpc__cchain_start for a call or stream of @method whose request
 * metadata is *@md (*@n_md pairs): what the interceptors add joins it in
 * @all (ZCRPC_MD_MAX_PAIRS), *@md then points there. INVALID_ARGUMENT when
 * the pairs do not fit (the started interceptors hear it). */
zcrpc_status zcrpc__cchain_start_md(const struct zcrpc__cchain *ch,
				    uint32_t method, int streaming,
				    int64_t timeout_us, const zcrpc_md **md,
				    size_t *n_md, zcrpc_md *all,
				    struct zcrpc__icall *ic);
void zcrpc__cchain_message(const struct zcrpc__cchain *ch,
			   struct zcrpc__icall *ic, int outgoing, size_t len);
/* on_end of each started interceptor, in reverse order, once. */
void zcrpc__cchain_end(const struct zcrpc__cchain *ch, struct zcrpc__icall *ic,
		       zcrpc_status st, const char *msg, const zcrpc_md *md,
		       size_t n_md);

/* The server's: on_call in order; a refusal's status (and *@msg) is
 * returned after the ones started saw on_end with it. */
zcrpc_status zcrpc__schain_call(const struct zcrpc__schain *ch,
				const zcrpc_call_info *info, const char **msg,
				struct zcrpc__icall *ic);
void zcrpc__schain_message(const struct zcrpc__schain *ch,
			   struct zcrpc__icall *ic, int outgoing, size_t len);
void zcrpc__schain_end(const struct zcrpc__schain *ch, struct zcrpc__icall *ic,
		       zcrpc_status st);

#endif /* ZCRPC_RPC_INTERCEPT_H */
