/* A consumer of the raw API only (zcrpc::zcrpc, pkg-config zcrpc): needs
 * no protobuf-c to build, link or run. */
#include <stdio.h>
#include <string.h>

#include <zcrpc/zcrpc.h>

int main(void)
{
	printf("zcrpc %s, %s\n", zcrpc_version(),
	       zcrpc_status_str(ZCRPC_DEADLINE_EXCEEDED));
	return strcmp(zcrpc_status_str(ZCRPC_DEADLINE_EXCEEDED),
		      "DEADLINE_EXCEEDED") != 0;
}
