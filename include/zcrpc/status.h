/* zcrpc — status codes.
 *
 * One enum for the whole library: gRPC's status codes, with gRPC's numeric
 * values and meanings. Every zcrpc function that can fail returns a
 * zcrpc_status; ZCRPC_OK (0) is success. Transport errors map onto it too:
 *   bad arguments                         -> ZCRPC_INVALID_ARGUMENT
 *   pool empty / queue full / no credits  -> ZCRPC_RESOURCE_EXHAUSTED
 *   refused / unreachable / peer lost     -> ZCRPC_UNAVAILABLE
 *   past its deadline                     -> ZCRPC_DEADLINE_EXCEEDED
 *   misuse (wrong state, closed object)   -> ZCRPC_FAILED_PRECONDITION
 *   admission failure                     -> ZCRPC_UNAUTHENTICATED
 */
#ifndef ZCRPC_STATUS_H
#define ZCRPC_STATUS_H

#include "zcrpc/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** gRPC status codes (values are part of the wire protocol; never renumber). */
typedef enum zcrpc_status {
	ZCRPC_OK = 0,
	ZCRPC_CANCELLED = 1,
	ZCRPC_UNKNOWN = 2,
	ZCRPC_INVALID_ARGUMENT = 3,
	ZCRPC_DEADLINE_EXCEEDED = 4,
	ZCRPC_NOT_FOUND = 5,
	ZCRPC_ALREADY_EXISTS = 6,
	ZCRPC_PERMISSION_DENIED = 7,
	ZCRPC_RESOURCE_EXHAUSTED = 8,
	ZCRPC_FAILED_PRECONDITION = 9,
	ZCRPC_ABORTED = 10,
	ZCRPC_OUT_OF_RANGE = 11,
	ZCRPC_UNIMPLEMENTED = 12,
	ZCRPC_INTERNAL = 13,
	ZCRPC_UNAVAILABLE = 14,
	ZCRPC_DATA_LOSS = 15,
	ZCRPC_UNAUTHENTICATED = 16
} zcrpc_status;

/** Number of defined status codes (highest code + 1). */
#define ZCRPC_STATUS_COUNT 17

/**
 * zcrpc_status_str - the canonical upper-case name of a status code, as gRPC
 * spells it ("OK", "DEADLINE_EXCEEDED", ...).
 *
 * Returns a pointer to a static string owned by the library (never NULL, never
 * to be freed). A value outside the enum returns "INVALID_STATUS".
 */
ZCRPC_API const char *zcrpc_status_str(zcrpc_status status);

/**
 * zcrpc_status_from_errno - map an errno value from librdmacm/libibverbs or
 * the C library to the status zcrpc reports for it (ECONNREFUSED and
 * ECONNRESET -> UNAVAILABLE, ETIMEDOUT -> DEADLINE_EXCEEDED, EAGAIN and ENOMEM
 * -> RESOURCE_EXHAUSTED, ECANCELED -> CANCELLED, EINVAL -> INVALID_ARGUMENT,
 * anything else -> UNKNOWN, 0 -> OK).
 */
ZCRPC_API zcrpc_status zcrpc_status_from_errno(int err);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_STATUS_H */
