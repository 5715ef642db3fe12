/* unit.awkward_protos_generate_and_compile: a/b/base.proto and
 * c_d/e/user.proto went through protoc-c and zcrpc-gen and compiled with
 * -Wall -Wextra -Wshadow -Werror (building this program is most of the
 * proof). It takes the address of every generated call and registration
 * function, runs each with arguments they must refuse, and checks the
 * method names and ids: the id is zcrpc_method_id(name) and no two
 * methods of the two services share one. No RDMA device is needed. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "a/b/base.zcrpc.h"
#include "c_d/e/user.zcrpc.h"

static int failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, \
				__LINE__, #cond);                            \
			failures++;                                          \
		}                                                            \
	} while (0)

/* Handlers for protoc-c's X__INIT(prefix): never called here. */
#define HANDLER(name, Svc, In, Closure)                                      \
	static void name(Svc *s, const In *in, Closure c, void *cd)          \
	{                                                                    \
		(void)s;                                                     \
		(void)in;                                                    \
		(void)c;                                                     \
		(void)cd;                                                    \
	}
HANDLER(ab_delete, A__B__BaseSvc_Service, A__B__CamelCase, A__B__SnakeCaseMsg_Closure)
HANDLER(ab_union_, A__B__BaseSvc_Service, A__B__SnakeCaseMsg,
	A__B__CamelCase__InnerThing_Closure)
HANDLER(ab_get__httpthing, A__B__BaseSvc_Service, A__B__CamelCase__InnerThing,
	A__B__DoubleUnder_Closure)
HANDLER(ab_do__it, A__B__BaseSvc_Service, A__B__DoubleUnder, A__B__CamelCase_Closure)
HANDLER(cd_delete, CD__E__Union_Service, A__B__CamelCase, CD__E__OuterMsg_Closure)
HANDLER(cd_struct_, CD__E__Union_Service, CD__E__OuterMsg__Nested,
	CD__E__OuterMsg__Nested__Deeper_Closure)
HANDLER(cd_default_, CD__E__Union_Service, CD__E__OuterMsg__Nested__Deeper,
	A__B__DoubleUnder_Closure)
HANDLER(cd_int32, CD__E__Union_Service, A__B__SnakeCaseMsg, A__B__SnakeCaseMsg_Closure)

/* Every typed call refuses a NULL request (and clears *reply). */
#define REFUSES_NULL(call, async, Out)                                       \
	do {                                                                 \
		Out *rep = (Out *)&rep;                                      \
		char *m = (char *)&m;                                        \
		CHECK(call(NULL, NULL, NULL, &rep, &m) == ZCRPC_INVALID_ARGUMENT); \
		CHECK(rep == NULL && m == NULL);                             \
		CHECK(async(NULL, NULL, NULL, NULL, NULL, NULL) ==           \
		      ZCRPC_INVALID_ARGUMENT);                               \
		CHECK((void *)&call != NULL && (void *)&async != NULL);      \
	} while (0)

struct method {
	const char *name;
	uint32_t id;
	const char *want;
};

int main(void)
{
	static A__B__BaseSvc_Service ab = A__B__BASE__SVC__INIT(ab_);
	static CD__E__Union_Service cd = C_D__E__UNION__INIT(cd_);
	const struct method ms[] = {
		{A__B__BASE__SVC__DELETE__ZCRPC_NAME, A__B__BASE__SVC__DELETE__ZCRPC_ID,
		 "/a.b.Base_Svc/Delete"},
		{A__B__BASE__SVC__UNION___ZCRPC_NAME, A__B__BASE__SVC__UNION___ZCRPC_ID,
		 "/a.b.Base_Svc/Union_"},
		{A__B__BASE__SVC__GET__HTTPTHING__ZCRPC_NAME,
		 A__B__BASE__SVC__GET__HTTPTHING__ZCRPC_ID, "/a.b.Base_Svc/get_HTTPThing"},
		{A__B__BASE__SVC__DO__IT__ZCRPC_NAME, A__B__BASE__SVC__DO__IT__ZCRPC_ID,
		 "/a.b.Base_Svc/do__it"},
		{C_D__E__UNION__DELETE__ZCRPC_NAME, C_D__E__UNION__DELETE__ZCRPC_ID,
		 "/c_d.e.Union/Delete"},
		{C_D__E__UNION__STRUCT___ZCRPC_NAME, C_D__E__UNION__STRUCT___ZCRPC_ID,
		 "/c_d.e.Union/Struct_"},
		{C_D__E__UNION__DEFAULT___ZCRPC_NAME, C_D__E__UNION__DEFAULT___ZCRPC_ID,
		 "/c_d.e.Union/default_"},
		{C_D__E__UNION__INT32__ZCRPC_NAME, C_D__E__UNION__INT32__ZCRPC_ID,
		 "/c_d.e.Union/Int32"},
	};
	const size_t n = sizeof(ms) / sizeof(ms[0]);

	for (size_t i = 0; i < n; i++) {
		CHECK(strcmp(ms[i].name, ms[i].want) == 0);
		CHECK(ms[i].id == zcrpc_method_id(ms[i].want));
		for (size_t j = 0; j < i; j++)
			CHECK(ms[i].id != ms[j].id);
	}
	/* Both services have a method "Delete": the ids still differ. */
	CHECK(A__B__BASE__SVC__DELETE__ZCRPC_ID != C_D__E__UNION__DELETE__ZCRPC_ID);

	REFUSES_NULL(a__b__base__svc__delete__call, a__b__base__svc__delete__async,
		     A__B__SnakeCaseMsg);
	REFUSES_NULL(a__b__base__svc__union___call, a__b__base__svc__union___async,
		     A__B__CamelCase__InnerThing);
	REFUSES_NULL(a__b__base__svc__get__httpthing__call,
		     a__b__base__svc__get__httpthing__async, A__B__DoubleUnder);
	REFUSES_NULL(a__b__base__svc__do__it__call, a__b__base__svc__do__it__async,
		     A__B__CamelCase);
	REFUSES_NULL(c_d__e__union__delete__call, c_d__e__union__delete__async,
		     CD__E__OuterMsg);
	REFUSES_NULL(c_d__e__union__struct___call, c_d__e__union__struct___async,
		     CD__E__OuterMsg__Nested__Deeper);
	REFUSES_NULL(c_d__e__union__default___call, c_d__e__union__default___async,
		     A__B__DoubleUnder);
	REFUSES_NULL(c_d__e__union__int32__call, c_d__e__union__int32__async,
		     A__B__SnakeCaseMsg);

	/* Registration: no server, or an impl of the other service, is refused. */
	CHECK(a__b__base__svc__zcrpc_register(NULL, &ab) == ZCRPC_INVALID_ARGUMENT);
	CHECK(c_d__e__union__zcrpc_register(NULL, &cd) == ZCRPC_INVALID_ARGUMENT);
	CHECK(c_d__e__union__zcrpc_register((zcrpc_server *)&cd,
					    (CD__E__Union_Service *)&ab) ==
	      ZCRPC_INVALID_ARGUMENT);
	CHECK(ab.delete == ab_delete && cd.int32 == cd_int32);

	/* The messages themselves: nested types across the import. */
	CD__E__OuterMsg__Nested__Deeper deeper = C_D__E__OUTER___MSG__NESTED__DEEPER__INIT;
	deeper.d = A__B__CAMEL_CASE__DEFAULT__DEFAULT_ONE;
	uint8_t buf[16];
	size_t len = protobuf_c_message_pack(&deeper.base, buf);
	CD__E__OuterMsg__Nested__Deeper *back = (CD__E__OuterMsg__Nested__Deeper *)
		protobuf_c_message_unpack(&c_d__e__outer___msg__nested__deeper__descriptor,
					  NULL, len, buf);
	CHECK(back && back->d == A__B__CAMEL_CASE__DEFAULT__DEFAULT_ONE);
	protobuf_c_message_free_unpacked(&back->base, NULL);

	if (failures)
		return 1;
	printf("awkward protos: %zu methods in 2 services generated, compiled, checked\n", n);
	return 0;
}
