/* unit.gen_streaming_stubs_build: the stubs of stream/stream_kinds.proto
 * (every method kind in one service, c_package "kk", a nested reply type)
 * compile as C with -Werror beside the unary ones; names, ids and the
 * refusals that need no channel or server. */
#include <string.h>

#include "check.h"
#include "stream_kinds.zcrpc.h"

HANDLER(h_unary, Kk__Kinds_Service, Kk__Req, Kk__Req__Part_Closure)
HANDLER(h_server_stream, Kk__Kinds_Service, Kk__Req, Kk__Req__Part_Closure)
HANDLER(h_client_stream, Kk__Kinds_Service, Kk__Req, Kk__Req__Part_Closure)
HANDLER(h_bidi, Kk__Kinds_Service, Kk__Req, Kk__Req__Part_Closure)

static void on_part(zcrpc_stream *s, const Kk__Req__Part *p, void *arg)
{
	(void)s;
	(void)p;
	(void)arg;
}

static void on_req(zcrpc_stream *s, const Kk__Req *r, void *arg)
{
	(void)s;
	(void)r;
	(void)arg;
}

static void on_finish(zcrpc_stream *s, const zcrpc_stream_end *e, void *arg)
{
	(void)s;
	(void)e;
	(void)arg;
}

int main(void)
{
	static Kk__Kinds_Service impl = KK__KINDS__INIT(h_);
	static Kk__Kinds__Bidi_ZcrpcServer bidi = {.on_message = on_req,
						    .on_finish = on_finish};
	static Kk__OnlyStreams__Watch_ZcrpcServer watch = {.on_message = on_req};
	Kk__Kinds__ServerStream_ZcrpcClient ss = {.on_message = on_part,
						  .on_finish = on_finish};
	Kk__Kinds__ClientStream_ZcrpcClient cs = {.on_message = on_part,
						  .on_finish = on_finish};
	Kk__Kinds__Bidi_ZcrpcClient bc = {.on_message = on_part, .on_finish = on_finish};
	Kk__Req req = KK__REQ__INIT;
	Kk__Req__Part part = KK__REQ__PART__INIT;
	zcrpc_stream *s = NULL;

	CHECK(strcmp(KK__KINDS__BIDI__ZCRPC_NAME, "/probe.kinds.Kinds/Bidi") == 0);
	CHECK(KK__KINDS__SERVER_STREAM__ZCRPC_ID ==
	      zcrpc_method_id("/probe.kinds.Kinds/ServerStream"));
	CHECK(KK__KINDS__CLIENT_STREAM__ZCRPC_ID == zcrpc_method_id(KK__KINDS__CLIENT_STREAM__ZCRPC_NAME));
	CHECK(KK__ONLY_STREAMS__WATCH__ZCRPC_ID == zcrpc_method_id("/probe.kinds.OnlyStreams/Watch"));
	/* No channel, stream or server: refused. */
	CHECK(kk__kinds__server_stream__start(NULL, NULL, &ss, &s) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__client_stream__start(NULL, NULL, &cs, &s) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__bidi__start(NULL, NULL, &bc, &s) == ZCRPC_INVALID_ARGUMENT);
	CHECK(s == NULL);
	CHECK(kk__kinds__bidi__write(NULL, &req) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__client_stream__write(NULL, &req) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__server_stream__reply(NULL, &part) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__bidi__close_send(NULL) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__bidi__cancel(NULL) == ZCRPC_NOT_FOUND);
	CHECK(kk__kinds__bidi__finish(NULL, ZCRPC_OK, NULL, NULL, 0) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__bidi__zcrpc_register(NULL, &bidi) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__only_streams__watch__zcrpc_register(NULL, &watch) == ZCRPC_INVALID_ARGUMENT);
	CHECK(kk__kinds__zcrpc_register(NULL, &impl) == ZCRPC_INVALID_ARGUMENT);
	/* The unary method's stubs are there as for any unary method. */
	CHECK(kk__kinds__unary__async(NULL, &req, NULL, NULL, NULL, NULL) == ZCRPC_INVALID_ARGUMENT);
	if (failures)
		return 1;
	printf("streaming stubs OK\n");
	return 0;
}
