// Bad arguments are refused with INVALID_ARGUMENT before anything touches a
// device, so these run on the host.
#include <gtest/gtest.h>

#include "zcrpc/transport.h"

TEST(ApiMisuse, WorkerOptionsOutOfRange)
{
	zcrpc_worker_opts o;
	zcrpc_worker *w = nullptr;

	zcrpc_worker_opts_init(&o);
	o.retry_count = 7; // forever on rxe: refused
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	zcrpc_worker_opts_init(&o);
	o.recv_depth = 1; // one credit is kept back: at least 2
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	zcrpc_worker_opts_init(&o);
	o.max_msg = 0;
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	zcrpc_worker_opts_init(&o);
	o.size = 4; // an older, smaller struct than this build knows
	EXPECT_EQ(zcrpc_worker_create(&o, &w), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(w, nullptr);
	EXPECT_EQ(zcrpc_worker_create(nullptr, nullptr), ZCRPC_INVALID_ARGUMENT);
}

TEST(ApiMisuse, NullHandlesAreSafe)
{
	zcrpc_conn *c = nullptr;
	zcrpc_listener *l = nullptr;
	zcrpc_conn_handlers h{sizeof(h), nullptr, nullptr, nullptr};

	zcrpc_worker_destroy(nullptr);
	zcrpc_conn_destroy(nullptr);
	zcrpc_conn_close(nullptr);
	zcrpc_listener_destroy(nullptr);
	EXPECT_EQ(zcrpc_worker_get_fd(nullptr), -1);
	EXPECT_EQ(zcrpc_worker_progress(nullptr, 0), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_conn_send(nullptr, "x", 1), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_connect(nullptr, "a", "1", nullptr, &h, &c), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_listen(nullptr, nullptr, "1", nullptr, &l), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_conn_get_state(nullptr), ZCRPC_CONN_CLOSED);
	EXPECT_EQ(zcrpc_conn_can_send(nullptr), 0);
}

TEST(ApiMisuse, NullArgumentsOfTheDataPathAreRefused)
{
	zcrpc_msg m{};
	zcrpc_mr *mr = nullptr;
	zcrpc_remote_region r{};
	char buf[16];
	zcrpc_worker_stats ws;
	zcrpc_conn_stats cs;

	EXPECT_EQ(zcrpc_context_create(nullptr), ZCRPC_INVALID_ARGUMENT);
	zcrpc_context_destroy(nullptr);
	EXPECT_EQ(zcrpc_msg_alloc(nullptr, 10, &m), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_msg_free(nullptr, &m), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_conn_send_msg(nullptr, &m, 1), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_conn_recv_keep(nullptr, &m), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_mr_register(nullptr, buf, sizeof(buf), 0, &mr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(mr, nullptr);
	zcrpc_mr_deregister(nullptr);
	EXPECT_EQ(zcrpc_mr_grant(nullptr, nullptr, 0, 1, &r, nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_grant_revoke(nullptr, nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_conn_write(nullptr, nullptr, 0, 1, &r, 0, nullptr, nullptr),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_conn_set_handlers(nullptr, nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_worker_arm(nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_worker_get_context(nullptr), nullptr);
	zcrpc_conn_get_stats(nullptr, &cs, sizeof(cs)); // no crash
	zcrpc_worker_get_stats(nullptr, &ws, sizeof(ws));
	EXPECT_EQ(ws.conns, 0u);
}
