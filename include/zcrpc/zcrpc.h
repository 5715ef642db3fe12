/* zcrpc — zero-copy RPC over RDMA. Umbrella header. */
#ifndef ZCRPC_ZCRPC_H
#define ZCRPC_ZCRPC_H

#include "zcrpc/balance.h"
#include "zcrpc/intercept.h"
#include "zcrpc/log.h"
#include "zcrpc/rpc.h"
#include "zcrpc/status.h"
#include "zcrpc/stream.h"
#include "zcrpc/transport.h"
#include "zcrpc/version.h"

#endif /* ZCRPC_ZCRPC_H */
