/* zcrpc — the log hook: one process-wide callback and level. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#define ZCRPC_LOG_LINE_MAX 512

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static zcrpc_log_fn log_fn;
static void *log_arg;
static atomic_int log_level; /* 0: off */

void zcrpc_log_set(zcrpc_log_fn fn, void *arg, zcrpc_log_level max_level)
{
	pthread_mutex_lock(&log_lock);
	log_fn = fn;
	log_arg = arg;
	atomic_store(&log_level, fn ? (int)max_level : 0);
	pthread_mutex_unlock(&log_lock);
}

const char *zcrpc_log_level_name(zcrpc_log_level level)
{
	switch (level) {
	case ZCRPC_LOG_ERROR:
		return "error";
	case ZCRPC_LOG_WARN:
		return "warn";
	case ZCRPC_LOG_INFO:
		return "info";
	case ZCRPC_LOG_DEBUG:
		return "debug";
	}
	return "unknown";
}

int zcrpc__log_on(zcrpc_log_level level)
{
	return (int)level <= atomic_load_explicit(&log_level,
						  memory_order_relaxed);
}

void zcrpc__log(zcrpc_log_level level, const char *fmt, ...)
{
	char line[ZCRPC_LOG_LINE_MAX];
	zcrpc_log_fn fn;
	void *arg;
	va_list ap;

	if (!zcrpc__log_on(level))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* The hook runs under the lock, so zcrpc_log_set() returns only once
	 * no call to the old hook is running (its @arg may then go). */
	pthread_mutex_lock(&log_lock);
	fn = log_fn;
	arg = log_arg;
	if (fn && (int)level <= atomic_load(&log_level))
		fn(level, line, arg);
	pthread_mutex_unlock(&log_lock);
}
