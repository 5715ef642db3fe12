/* Test hooks for tests/rdma/test_grants.cc that need transport internals
 * (C11: internal.h uses <stdatomic.h>). */
#include "grant_hooks.h"

#include "transport/internal.h"

uint32_t grant_hook_mr_own_rkey(const zcrpc_mr *mr, const zcrpc_conn *conn)
{
	return mr->mrs[conn->dev->idx]->rkey;
}

zcrpc_status grant_hook_read_only(const zcrpc_mr *mr, zcrpc_conn *conn,
				  size_t offset, size_t len,
				  zcrpc_remote_region *out, zcrpc_grant **g)
{
	return zcrpc__mr_grant_access(mr, conn, offset, len,
				      IBV_ACCESS_REMOTE_READ, out, g);
}
