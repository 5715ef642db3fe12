/* zcrpc — the library's log hook. zcrpc never prints: what it would say (a
 * connection lost and why, a peer refused, a protocol error, a device
 * event) goes to the one callback the application sets, with a level. */
#ifndef ZCRPC_LOG_H
#define ZCRPC_LOG_H

#include "zcrpc/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How much a message matters; a hook set for a level gets that level and
 * the ones above it (ERROR is the most important). */
typedef enum zcrpc_log_level {
	ZCRPC_LOG_ERROR = 1, /**< something failed: a connection lost, a device error */
	ZCRPC_LOG_WARN = 2,  /**< a peer misbehaved or was refused; the library goes on */
	ZCRPC_LOG_INFO = 3,  /**< a connection opened or closed in order, a device came back */
	ZCRPC_LOG_DEBUG = 4, /**< details for diagnosis */
} zcrpc_log_level;

/**
 * The hook: @level, @msg (one line, no newline; valid only during the call,
 * copy it to keep it) and the @arg given to zcrpc_log_set(). Called on the
 * thread that found the event (a worker's progress thread, or the caller
 * of a zcrpc function); calls are serialized, never two at once. It must
 * not call back into zcrpc.
 */
typedef void (*zcrpc_log_fn)(zcrpc_log_level level, const char *msg,
			     void *arg);

/**
 * zcrpc_log_set - sets the process-wide log hook: @fn gets every message of
 * @max_level or more important. @fn NULL (the default) turns logging off.
 * Thread-safe. @arg is borrowed: once zcrpc_log_set() returned with
 * another hook, no call of the old one is running or will start, so its
 * @arg may be freed then.
 */
ZCRPC_API void zcrpc_log_set(zcrpc_log_fn fn, void *arg,
			     zcrpc_log_level max_level);

/** A name for @level ("error", "warn", "info", "debug"); static storage. */
ZCRPC_API const char *zcrpc_log_level_name(zcrpc_log_level level);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_LOG_H */
