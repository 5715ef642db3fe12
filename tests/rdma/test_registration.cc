// Registration where it is used (issue 14 item 5) over real verbs: a
// worker's pool and the application's memory are registered on the devices
// a worker of the context uses, and on another device from its first
// connection there; each device's registered bytes (what the locked-memory
// limit is charged) are reported by zcrpc_context_get_device_info.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "rdma_env.h"
#include "zcrpc/transport.h"

namespace
{
class Registration : public RdmaTest
{
};

zcrpc_device_info Dev(zcrpc_context *ctx, int i)
{
	zcrpc_device_info d;
	std::memset(&d, 0, sizeof(d));
	EXPECT_EQ(zcrpc_context_get_device_info(ctx, i, &d, sizeof(d)),
		  ZCRPC_OK);
	return d;
}

int IndexOf(zcrpc_context *ctx, const std::string &name)
{
	for (int i = 0; i < zcrpc_context_device_count(ctx); i++)
		if (name == Dev(ctx, i).name)
			return i;
	return -1;
}

// One end of a connection inside the test's worker. A message 'R' carries
// a zcrpc_remote_region to write into.
struct End {
	zcrpc_conn *conn = nullptr;
	bool up = false, have_region = false;
	zcrpc_remote_region region{};
	int imms = 0, writes_done = 0;
	zcrpc_status write_status = ZCRPC_UNKNOWN;

	static void OnState(zcrpc_conn *, zcrpc_conn_state st, zcrpc_status,
			    void *a)
	{
		if (st == ZCRPC_CONN_ESTABLISHED)
			static_cast<End *>(a)->up = true;
	}
	static void OnRecv(zcrpc_conn *, const void *data, size_t len, void *a)
	{
		auto *e = static_cast<End *>(a);
		auto *p = static_cast<const char *>(data);
		ASSERT_EQ(len, 1u + ZCRPC_REMOTE_REGION_LEN);
		ASSERT_EQ(p[0], 'R');
		EXPECT_EQ(zcrpc_remote_region_decode(
				  p + 1, ZCRPC_REMOTE_REGION_LEN, &e->region),
			  ZCRPC_OK);
		e->have_region = true;
	}
	static void OnWriteDone(zcrpc_conn *, void *, zcrpc_status s, void *a)
	{
		auto *e = static_cast<End *>(a);
		e->writes_done++;
		e->write_status = s;
	}
	static void OnWriteImm(zcrpc_conn *, uint32_t, size_t, void *a)
	{
		static_cast<End *>(a)->imms++;
	}
	zcrpc_conn_handlers Handlers()
	{
		zcrpc_conn_handlers h;
		zcrpc_conn_handlers_init(&h);
		h.on_state = OnState;
		h.on_recv = OnRecv;
		h.on_write_done = OnWriteDone;
		h.on_write_imm = OnWriteImm;
		h.arg = this;
		return h;
	}
};

void OnAccept(zcrpc_listener *, zcrpc_conn *c, void *a)
{
	auto *e = static_cast<End *>(a);
	e->conn = c;
	e->up = true;
}

// A listener and a client connection on worker @w, both on @addr's device.
struct Loop {
	zcrpc_worker *w;
	End cl, sv;
	zcrpc_listener *l = nullptr;
	zcrpc_conn_handlers svh, clh;
	bool ok = false;
	Loop(zcrpc_worker *wk, const std::string &addr) : w(wk)
	{
		svh = sv.Handlers();
		clh = cl.Handlers();
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		lo.on_accept = OnAccept;
		lo.arg = &sv;
		lo.conn_handlers = &svh;
		if (zcrpc_listen(w, addr.c_str(), "0", &lo, &l) != ZCRPC_OK)
			return;
		if (zcrpc_connect(
			    w, addr.c_str(),
			    std::to_string(zcrpc_listener_get_port(l)).c_str(),
			    nullptr, &clh, &cl.conn) != ZCRPC_OK)
			return;
		ok = ProgressUntil(
			w, [&] { return cl.up && sv.up; }, Scaled(10000));
	}
	~Loop()
	{
		if (cl.conn)
			zcrpc_conn_destroy(cl.conn);
		if (sv.conn)
			zcrpc_conn_destroy(sv.conn);
		if (l)
			zcrpc_listener_destroy(l);
		ProgressUntil(
			w, [] { return false; }, Scaled(200));
	}
};

std::string DeviceOf(zcrpc_conn *c)
{
	zcrpc_conn_info info;
	zcrpc_conn_get_info(c, &info, sizeof(info));
	return info.device;
}

} // namespace

// Memory registered before any device is used goes on every device (so the
// call that registers reports a bad range or the limit); memory registered
// once a device is in use goes there only; a device that comes into use
// later gets the application's memory then, and a write from memory
// registered before into memory registered before lands there.
TEST_F(Registration,
       MemoryGoesOnTheDevicesInUseAndOnAnotherWhenItsFirstConnectionComes)
{
	zcrpc_context *ctx = nullptr;
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK) << zcrpc_last_error();
	ASSERT_EQ(zcrpc_context_device_count(ctx), 2);
	EXPECT_EQ(zcrpc_context_skipped_devices(ctx), 0);
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ(Dev(ctx, i).in_use, 0u);
		EXPECT_EQ(Dev(ctx, i).registered_bytes, 0u) << Dev(ctx, i).name;
	}
	const size_t kA = 1 << 20, kB = 2 << 20;
	std::vector<uint8_t> a(kA), b(kB, 0);
	for (size_t k = 0; k < kA; k++)
		a[k] = static_cast<uint8_t>(k * 7 + 3);
	zcrpc_mr *ma = nullptr, *mb = nullptr;
	ASSERT_EQ(zcrpc_mr_register(ctx, a.data(), kA, 0, &ma), ZCRPC_OK);
	for (int i = 0; i < 2; i++)
		EXPECT_EQ(Dev(ctx, i).registered_bytes, kA)
			<< "no device in use yet: on every device ("
			<< Dev(ctx, i).name << ")";

	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.context = ctx;
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(&wo, &w), ZCRPC_OK);
	EXPECT_EQ(Dev(ctx, 0).registered_bytes, kA)
		<< "an idle worker registers nothing";

	{
		Loop one(w, env_.addr0);
		ASSERT_TRUE(one.ok) << zcrpc_last_error();
		const int u = IndexOf(ctx, DeviceOf(one.cl.conn)), o = 1 - u;
		ASSERT_GE(u, 0);
		EXPECT_EQ(Dev(ctx, u).in_use, 1u);
		EXPECT_EQ(Dev(ctx, o).in_use, 0u);
		EXPECT_GT(Dev(ctx, u).registered_bytes, kA)
			<< "the worker's pool is there";
		EXPECT_EQ(Dev(ctx, o).registered_bytes, kA)
			<< "the pool is not registered on a device nobody uses";

		// A write target registered now: on the device in use only
		// (with its grant spare where the device has no windows).
		const uint64_t before_u = Dev(ctx, u).registered_bytes;
		ASSERT_EQ(zcrpc_mr_register(ctx, b.data(), kB,
					    ZCRPC_MR_REMOTE_WRITE, &mb),
			  ZCRPC_OK);
		const uint64_t per_u =
			Dev(ctx, u).grant_path == ZCRPC_GRANT_REGISTRATION ? 2
									   : 1;
		EXPECT_EQ(Dev(ctx, u).registered_bytes, before_u + per_u * kB);
		EXPECT_EQ(Dev(ctx, o).registered_bytes, kA)
			<< "not on the unused device";
		std::printf(
			"in use %s: %llu bytes registered; unused %s: %llu\n",
			Dev(ctx, u).name,
			(unsigned long long)Dev(ctx, u).registered_bytes,
			Dev(ctx, o).name,
			(unsigned long long)Dev(ctx, o).registered_bytes);
	}

	// The guest's second address: rxe puts that connection on the second
	// device; wherever it lands, the device it uses has both memories and
	// a write from one into the other lands.
	int d = -1;
	{
		Loop two(w, env_.addr1);
		ASSERT_TRUE(two.ok) << zcrpc_last_error();
		d = IndexOf(ctx, DeviceOf(two.cl.conn));
		ASSERT_GE(d, 0);
		EXPECT_EQ(Dev(ctx, d).in_use, 1u);
		const uint64_t per_d =
			Dev(ctx, d).grant_path == ZCRPC_GRANT_REGISTRATION ? 2
									   : 1;
		EXPECT_GE(Dev(ctx, d).registered_bytes, kA + per_d * kB);
		std::printf("second connection on %s: %llu bytes registered "
			    "there\n",
			    Dev(ctx, d).name,
			    (unsigned long long)Dev(ctx, d).registered_bytes);
		if (env_.provider == "rxe")
			EXPECT_EQ(std::string(Dev(ctx, d).name), env_.dev1)
				<< "rxe puts the second address on the second "
				   "device";

		zcrpc_grant *g = nullptr;
		zcrpc_remote_region r{};
		ASSERT_EQ(zcrpc_mr_grant(mb, two.sv.conn, 0, kA, &r, &g),
			  ZCRPC_OK)
			<< zcrpc_conn_get_error(two.sv.conn);
		uint8_t msg[1 + ZCRPC_REMOTE_REGION_LEN] = {'R'};
		zcrpc_remote_region_encode(&r, msg + 1);
		ASSERT_EQ(zcrpc_conn_send(two.sv.conn, msg, sizeof(msg)),
			  ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(
			w, [&] { return two.cl.have_region; }, Scaled(5000)));
		const uint32_t imm = 0x5eed;
		ASSERT_EQ(zcrpc_conn_write(two.cl.conn, ma, 0, kA,
					   &two.cl.region, 0, &imm, nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(
			w,
			[&] {
				return two.sv.imms > 0 &&
				       two.cl.writes_done > 0;
			},
			Scaled(10000)));
		EXPECT_EQ(two.cl.write_status, ZCRPC_OK);
		EXPECT_TRUE(std::memcmp(a.data(), b.data(), kA) == 0)
			<< "the written bytes differ";
		ASSERT_EQ(zcrpc_grant_revoke(g, nullptr), ZCRPC_OK);
		ProgressUntil(
			w, [] { return false; }, Scaled(200));
	}

	const uint64_t with_b = Dev(ctx, d).registered_bytes;
	zcrpc_mr_deregister(mb);
	EXPECT_LE(Dev(ctx, d).registered_bytes + kB, with_b)
		<< "deregistration is counted";
	zcrpc_mr_deregister(ma);
	zcrpc_worker_destroy(w);
	for (int i = 0; i < 2; i++)
		EXPECT_EQ(Dev(ctx, i).registered_bytes, 0u)
			<< "everything given back on " << Dev(ctx, i).name;
	zcrpc_context_destroy(ctx);
}
