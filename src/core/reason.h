/* zcrpc — the reason a decoder gives when it refuses its input: written
 * into the caller's buffer (if any) and the status returned, so every
 * check is one line: `return zcrpc__reason(st, why, why_len, "...", ...)`.
 * Header-only, for the codecs the fuzz targets compile alone. */
#ifndef ZCRPC_CORE_REASON_H
#define ZCRPC_CORE_REASON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "zcrpc/status.h"

static inline zcrpc_status zcrpc__reason(zcrpc_status st, char *why,
					 size_t why_len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static inline zcrpc_status zcrpc__reason(zcrpc_status st, char *why,
					 size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return st;
}

#endif /* ZCRPC_CORE_REASON_H */
