/* unit.gen_import_*: a .proto whose imports were not in FILES built. With
 * IMPORTS_A the imported b.proto, c.proto and google/protobuf/empty.proto
 * were generated into the target; otherwise common/s.proto came from
 * IMPORT_DIRS or from a dependency target. The messages pack and unpack. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#ifdef IMPORTS_A
#include "a.zcrpc.h"
#else
#include "uses_shared.zcrpc.h"
#endif

#ifdef IMPORTS_A
HANDLER(h_get, Probe__App__A_Service, Probe__B__B, Probe__B__B_Closure)
HANDLER(h_ping, Probe__App__A_Service, Google__Protobuf__Empty, Google__Protobuf__Empty_Closure)
#else
HANDLER(h_get, Probe__Us__U_Service, Probe__Common__S, Probe__Common__S_Closure)
#endif

int main(void)
{
	uint8_t buf[64];
	size_t n;
#ifdef IMPORTS_A
	static Probe__App__A_Service impl = PROBE__APP__A__INIT(h_);
	Probe__B__B b = PROBE__B__B__INIT, *back;
	Probe__C__C c = PROBE__C__C__INIT;

	c.n = 42;
	b.c = &c;
	n = probe__b__b__pack(&b, buf);
	back = probe__b__b__unpack(NULL, n, buf);
	CHECK(back && back->c && back->c->n == 42);
	if (back)
		probe__b__b__free_unpacked(back, NULL);
	CHECK(strcmp(PROBE__APP__A__PING__ZCRPC_NAME, "/probe.app.A/Ping") == 0);
	CHECK(probe__app__a__zcrpc_register(NULL, &impl) == ZCRPC_INVALID_ARGUMENT);
#else
	static Probe__Us__U_Service impl = PROBE__US__U__INIT(h_);
	Probe__Common__S s = PROBE__COMMON__S__INIT, *back;

	s.s = "shared";
	n = probe__common__s__pack(&s, buf);
	back = probe__common__s__unpack(NULL, n, buf);
	CHECK(back && strcmp(back->s, "shared") == 0);
	if (back)
		probe__common__s__free_unpacked(back, NULL);
	CHECK(strcmp(PROBE__US__U__GET__ZCRPC_NAME, "/probe.us.U/Get") == 0);
	CHECK(probe__us__u__zcrpc_register(NULL, &impl) == ZCRPC_INVALID_ARGUMENT);
#endif
	if (failures)
		return 1;
	printf("imports OK\n");
	return 0;
}
