/* zcrpc — library version. */
#ifndef ZCRPC_VERSION_H
#define ZCRPC_VERSION_H

#include "zcrpc/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZCRPC_VERSION_MAJOR 0
#define ZCRPC_VERSION_MINOR 1
#define ZCRPC_VERSION_PATCH 0

/**
 * zcrpc_version - the version of the library actually loaded, as
 * "MAJOR.MINOR.PATCH". Static string owned by the library; never NULL.
 */
ZCRPC_API const char *zcrpc_version(void);

#ifdef __cplusplus
}
#endif

#endif /* ZCRPC_VERSION_H */
