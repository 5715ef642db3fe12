/* unit.gen_base_field_name_builds: the stubs of
 * options/base_field_name.proto compile although the messages' first member
 * is not called base (hdr, header), and pass the request as its message. */
#include <string.h>

#include "base_field_name.zcrpc.h"
#include "check.h"

HANDLER(h_get, Probe__Bf__Svc_Service, Probe__Bf__Req, Probe__Bf__Rep_Closure)

static void on_rep(zcrpc_status st, const char *msg, const Probe__Bf__Rep *r, void *arg)
{
	(void)st;
	(void)msg;
	(void)r;
	(void)arg;
}

int main(void)
{
	static Probe__Bf__Svc_Service impl = PROBE__BF__SVC__INIT(h_);
	Probe__Bf__Req req = PROBE__BF__REQ__INIT;
	Probe__Bf__Rep *rep = NULL, r = PROBE__BF__REP__INIT;
	char *m = NULL;

	CHECK(req.hdr.descriptor == &probe__bf__req__descriptor);
	CHECK(r.header.descriptor == &probe__bf__rep__descriptor);
	CHECK(strcmp(PROBE__BF__SVC__GET__ZCRPC_NAME, "/probe.bf.Svc/Get") == 0);
	CHECK(probe__bf__svc__get__call(NULL, &req, NULL, &rep, &m) == ZCRPC_INVALID_ARGUMENT);
	CHECK(rep == NULL && m == NULL);
	CHECK(probe__bf__svc__get__async(NULL, &req, NULL, on_rep, NULL, NULL) ==
	      ZCRPC_INVALID_ARGUMENT);
	CHECK(probe__bf__svc__zcrpc_register(NULL, &impl) == ZCRPC_INVALID_ARGUMENT);
	if (failures)
		return 1;
	printf("base_field_name stubs OK\n");
	return 0;
}
