/* zcrpc — library version. */
#include "zcrpc/version.h"

#define ZCRPC_STR2(x) #x
#define ZCRPC_STR(x) ZCRPC_STR2(x)

const char *zcrpc_version(void)
{
	return ZCRPC_STR(ZCRPC_VERSION_MAJOR) "." ZCRPC_STR(
		ZCRPC_VERSION_MINOR) "." ZCRPC_STR(ZCRPC_VERSION_PATCH);
}
