/* unit.gen_c_package_builds: the stubs of options/c_package.proto use the C
 * names protoc-c wrote under (pb_c_file).c_package (Other__*, and Ty__* for
 * the imported file's types) and compiled with -Werror; the wire names
 * stay the proto names. */
#include <string.h>

#include "c_package.zcrpc.h"
#include "check.h"

HANDLER(h_get, Other__Store_Service, Other__Key, Ty__Item_Closure)
HANDLER(h_put, Other__Store_Service, Ty__Item, Other__Key_Closure)
HANDLER(h_split, Other__Store_Service, Other__Key, Other__Key__Part_Closure)

static void on_part(zcrpc_status st, const char *msg, const Other__Key__Part *r,
		    void *arg)
{
	(void)st;
	(void)msg;
	(void)r;
	(void)arg;
}

int main(void)
{
	static Other__Store_Service impl = OTHER__STORE__INIT(h_);
	Other__Key key = OTHER__KEY__INIT;
	Ty__Item item = TY__ITEM__INIT, *rep = NULL;
	Other__Key *krep = NULL;
	char *m = NULL;

	CHECK(strcmp(OTHER__STORE__GET__ZCRPC_NAME, "/probe.cpkg.Store/Get") == 0);
	CHECK(strcmp(OTHER__STORE__PUT__ZCRPC_NAME, "/probe.cpkg.Store/Put") == 0);
	CHECK(OTHER__STORE__GET__ZCRPC_ID == zcrpc_method_id(OTHER__STORE__GET__ZCRPC_NAME));
	CHECK(OTHER__STORE__SPLIT__ZCRPC_ID == zcrpc_method_id("/probe.cpkg.Store/Split"));
	CHECK(strcmp(other__store__descriptor.name, "probe.cpkg.Store") == 0);
	/* No channel: refused after the request was taken as a message. */
	CHECK(other__store__get__call(NULL, &key, NULL, &rep, &m) == ZCRPC_INVALID_ARGUMENT);
	CHECK(rep == NULL && m == NULL);
	CHECK(other__store__put__call(NULL, &item, NULL, &krep, &m) == ZCRPC_INVALID_ARGUMENT);
	CHECK(other__store__split__async(NULL, &key, NULL, on_part, NULL, NULL) ==
	      ZCRPC_INVALID_ARGUMENT);
	CHECK(other__store__zcrpc_register(NULL, &impl) == ZCRPC_INVALID_ARGUMENT);
	if (failures)
		return 1;
	printf("c_package stubs OK\n");
	return 0;
}
