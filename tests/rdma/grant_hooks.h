/* Test hooks into the transport's grants (tests/rdma/grant_hooks.c). */
#pragma once

#include "zcrpc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rkey of @mr's own registration on @conn's device. */
uint32_t grant_hook_mr_own_rkey(const zcrpc_mr *mr, const zcrpc_conn *conn);
/* A grant whose window allows remote READ only. */
zcrpc_status grant_hook_read_only(const zcrpc_mr *mr, zcrpc_conn *conn,
				  size_t offset, size_t len,
				  zcrpc_remote_region *out, zcrpc_grant **g);

#ifdef __cplusplus
}
#endif
