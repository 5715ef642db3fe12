/* zcrpc — the library's side of the log hook (include/zcrpc/log.h). */
#ifndef ZCRPC_CORE_LOG_H
#define ZCRPC_CORE_LOG_H

#include "zcrpc/log.h"

/* Nonzero when a hook wants messages of @level (cheap: one atomic load). */
int zcrpc__log_on(zcrpc_log_level level);

/* Formats and delivers one message to the hook, if it wants @level. */
void zcrpc__log(zcrpc_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* ZCRPC_CORE_LOG_H */
