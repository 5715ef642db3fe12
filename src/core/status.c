/* zcrpc — status names and errno mapping. */
#include "zcrpc/status.h"

#include <errno.h>

static const char *const status_names[ZCRPC_STATUS_COUNT] = {
	[ZCRPC_OK] = "OK",
	[ZCRPC_CANCELLED] = "CANCELLED",
	[ZCRPC_UNKNOWN] = "UNKNOWN",
	[ZCRPC_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
	[ZCRPC_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
	[ZCRPC_NOT_FOUND] = "NOT_FOUND",
	[ZCRPC_ALREADY_EXISTS] = "ALREADY_EXISTS",
	[ZCRPC_PERMISSION_DENIED] = "PERMISSION_DENIED",
	[ZCRPC_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
	[ZCRPC_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
	[ZCRPC_ABORTED] = "ABORTED",
	[ZCRPC_OUT_OF_RANGE] = "OUT_OF_RANGE",
	[ZCRPC_UNIMPLEMENTED] = "UNIMPLEMENTED",
	[ZCRPC_INTERNAL] = "INTERNAL",
	[ZCRPC_UNAVAILABLE] = "UNAVAILABLE",
	[ZCRPC_DATA_LOSS] = "DATA_LOSS",
	[ZCRPC_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

const char *zcrpc_status_str(zcrpc_status status)
{
	unsigned int i = (unsigned int)status;

	if (i >= ZCRPC_STATUS_COUNT)
		return "INVALID_STATUS";
	return status_names[i];
}

zcrpc_status zcrpc_status_from_errno(int err)
{
	switch (err) {
	case 0:
		return ZCRPC_OK;
	case EINVAL:
		return ZCRPC_INVALID_ARGUMENT;
	case ECONNREFUSED:
	case ECONNRESET:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EADDRNOTAVAIL:
	case ENODEV:
	case ENOTCONN:
		return ZCRPC_UNAVAILABLE;
	case ETIMEDOUT:
		return ZCRPC_DEADLINE_EXCEEDED;
	case EAGAIN:
	case ENOMEM:
	case ENOBUFS:
		return ZCRPC_RESOURCE_EXHAUSTED;
	case ECANCELED:
		return ZCRPC_CANCELLED;
	case EADDRINUSE:
		return ZCRPC_ALREADY_EXISTS;
	case EPERM:
	case EACCES:
		return ZCRPC_PERMISSION_DENIED;
	default:
		return ZCRPC_UNKNOWN;
	}
}
