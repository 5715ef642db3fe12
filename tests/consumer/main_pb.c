/* A consumer of the protobuf-c glue (zcrpc::pb, pkg-config zcrpc-pb): calls
 * into libzcrpc_pb, libzcrpc and libprotobuf-c without an RDMA device. */
#include <stdio.h>
#include <string.h>

#include <zcrpc/pb.h>
#include <zcrpc/zcrpc.h>

int main(void)
{
	ProtobufCService *svc = NULL;
	zcrpc_status st = zcrpc_pb_client_create(NULL, NULL, &svc);

	printf("zcrpc %s with protobuf-c %s: pb_client_create(NULL) = %s\n",
	       zcrpc_version(), protobuf_c_version(), zcrpc_status_str(st));
	return st != ZCRPC_INVALID_ARGUMENT || svc != NULL ||
	       zcrpc_pb_get_last_status(NULL, NULL) != ZCRPC_UNKNOWN;
}
