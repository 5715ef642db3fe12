// The protobuf-c glue over rxe: protoc-c's plain generated stubs through
// zcrpc_pb_client_create(), against a service built with protoc-c's
// FOO__INIT(prefix_) and registered with zcrpc_pb_server_register().
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "echo.zcrpc.h"
#include "pbtest.pb-c.h"
#include "pbtest_presence.pb-c.h"
#include "rdma_env.h"
#include "zcrpc/pb.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

class PbServer;

// The service implementation: protoc-c's struct, then our own state.
struct Impl {
	Zcrpc__Pbtest__Test_Service svc;
	PbServer *owner;
};

PbServer *OwnerOf(Zcrpc__Pbtest__Test_Service *s)
{
	return reinterpret_cast<Impl *>(s)->owner;
}

// A pb service on its own worker and thread.
class PbServer {
public:
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	Impl impl;
	std::atomic<int> later_runs{0}, later_replied_after_return{0};
	// Run on the worker's thread, from the loop, after the handler returned.
	std::vector<std::function<void()>> deferred;
	std::mutex threads_mu;
	std::vector<std::thread> repliers;

	PbServer();
	bool Start(const std::string &addr)
	{
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_server_create(w, nullptr, &s) != ZCRPC_OK ||
		    zcrpc_pb_server_register(s, &impl.svc.base) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load(std::memory_order_relaxed)) {
				zcrpc_worker_progress(w, 0);
				auto todo = std::move(deferred);
				deferred.clear();
				for (auto &f : todo)
					f();
			}
		});
		return true;
	}
	uint16_t port() const { return zcrpc_server_get_port(s); }
	~PbServer()
	{
		{
			std::lock_guard<std::mutex> g(threads_mu);
			for (auto &t : repliers)
				t.join();
		}
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}
	zcrpc_server_stats Stats()
	{
		zcrpc_server_stats st;
		zcrpc_server_get_stats(s, &st, sizeof(st));
		return st;
	}

private:
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

// The handlers, named for ZCRPC__PBTEST__TEST__INIT(srv_).
// Registered on the server's context by a test that wants echo replies to
// carry an attachment (f_int32 == 77).
const zcrpc_mr *g_reply_att = nullptr;
size_t g_reply_att_len = 0;
std::atomic<int> g_att_done{0};

void srv_echo(Zcrpc__Pbtest__Test_Service *, const Zcrpc__Pbtest__All *in,
	      Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	if (in->f_int32 == 77 && g_reply_att) {
		zcrpc_bulk b{g_reply_att, 0, g_reply_att_len};
		EXPECT_EQ(zcrpc_pb_set_reply_attachment(
				  cd, &b, [](void *, zcrpc_status st) {
					  if (st == ZCRPC_OK)
						  g_att_done++;
				  },
				  nullptr),
			  ZCRPC_OK);
	}
	closure(in, cd);
}

void srv_later(Zcrpc__Pbtest__Test_Service *svc, const Zcrpc__Pbtest__All *in,
	       Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	PbServer *o = OwnerOf(svc);
	auto returned = std::make_shared<std::atomic<bool>>(false);
	o->later_runs++;
	if (in->f_int32 == 1) { // from another thread
		std::lock_guard<std::mutex> g(o->threads_mu);
		o->repliers.emplace_back([o, in, closure, cd, returned] {
			while (!returned->load())
				std::this_thread::sleep_for(1ms);
			std::this_thread::sleep_for(20ms);
			if (returned->load())
				o->later_replied_after_return++;
			closure(in, cd); // the request stays valid until here
		});
	} else { // later, on the worker's thread
		o->deferred.push_back([o, in, closure, cd, returned] {
			if (returned->load())
				o->later_replied_after_return++;
			closure(in, cd);
		});
	}
	returned->store(true);
}

void srv_fail(Zcrpc__Pbtest__Test_Service *, const Zcrpc__Pbtest__All *,
	      Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	zcrpc_pb_set_status(cd, ZCRPC_PERMISSION_DENIED, "not for you");
	closure(nullptr, cd);
}

void srv_big(Zcrpc__Pbtest__Test_Service *, const Zcrpc__Pbtest__Size *in,
	     Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	Zcrpc__Pbtest__All r = ZCRPC__PBTEST__ALL__INIT;
	std::vector<uint8_t> b(in->n, 0x5a);
	r.f_bytes.len = b.size();
	r.f_bytes.data = b.data();
	closure(&r, cd);
}

#define srv_missing nullptr // a method left unimplemented

PbServer::PbServer() : impl{ZCRPC__PBTEST__TEST__INIT(srv_), this} {}

// What a client closure saw.
struct Got {
	ProtobufCService *svc = nullptr;
	int calls = 0;
	bool null_msg = true;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
	std::vector<uint8_t> packed; // the reply, packed again
};

void OnAll(const Zcrpc__Pbtest__All *m, void *arg)
{
	auto *g = static_cast<Got *>(arg);
	const char *msg = nullptr;
	g->calls++;
	g->status = zcrpc_pb_get_last_status(g->svc, &msg);
	g->message = msg ? msg : "(null)";
	g->null_msg = m == nullptr;
	if (m) {
		g->packed.resize(zcrpc__pbtest__all__get_packed_size(m));
		zcrpc__pbtest__all__pack(m, g->packed.data());
	}
}

struct Client {
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	ProtobufCService *svc = nullptr;
	Client(const std::string &addr, uint16_t port,
	       const ProtobufCServiceDescriptor *d = &zcrpc__pbtest__test__descriptor)
	{
		EXPECT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
		EXPECT_EQ(zcrpc_channel_create(w, addr.c_str(), std::to_string(port).c_str(),
					       nullptr, &ch),
			  ZCRPC_OK);
		EXPECT_EQ(zcrpc_pb_client_create(ch, d, &svc), ZCRPC_OK);
	}
	~Client()
	{
		if (svc)
			protobuf_c_service_destroy(svc);
		zcrpc_channel_destroy(ch);
		zcrpc_worker_destroy(w);
	}
	bool Wait(const std::function<bool()> &f, int ms = 20000)
	{
		return ProgressUntil(w, f, Scaled(ms));
	}
	Got Echo(const Zcrpc__Pbtest__All &m)
	{
		Got g;
		g.svc = svc;
		zcrpc__pbtest__test__echo(svc, &m, OnAll, &g);
		EXPECT_TRUE(Wait([&] { return g.calls > 0; }, 60000));
		EXPECT_EQ(g.calls, 1);
		return g;
	}
};

std::vector<uint8_t> Pack(const Zcrpc__Pbtest__All &m)
{
	std::vector<uint8_t> v(zcrpc__pbtest__all__get_packed_size(&m));
	zcrpc__pbtest__all__pack(&m, v.data());
	return v;
}

char *S(const char *s)
{
	return const_cast<char *>(s);
}

// A message with every field type set to values that stress its encoding.
struct Everything {
	Zcrpc__Pbtest__All m = ZCRPC__PBTEST__ALL__INIT;
	Zcrpc__Pbtest__Inner inner = ZCRPC__PBTEST__INNER__INIT, kid = ZCRPC__PBTEST__INNER__INIT,
			     r0 = ZCRPC__PBTEST__INNER__INIT, r1 = ZCRPC__PBTEST__INNER__INIT,
			     mv = ZCRPC__PBTEST__INNER__INIT;
	Zcrpc__Pbtest__Inner *kids[1] = {&kid};
	Zcrpc__Pbtest__Inner *r_inner[2] = {&r0, &r1};
	Zcrpc__Pbtest__Presence pres = ZCRPC__PBTEST__PRESENCE__INIT;
	Zcrpc__Pbtest__All__MStrI64Entry e0 = ZCRPC__PBTEST__ALL__MSTR_I64_ENTRY__INIT,
					  e1 = ZCRPC__PBTEST__ALL__MSTR_I64_ENTRY__INIT;
	Zcrpc__Pbtest__All__MStrI64Entry *m_str[2] = {&e0, &e1};
	Zcrpc__Pbtest__All__MI32InnerEntry f0 = ZCRPC__PBTEST__ALL__MI32_INNER_ENTRY__INIT;
	Zcrpc__Pbtest__All__MI32InnerEntry *m_i32[1] = {&f0};
	char *r_string[3] = {S("one"), S(""), S("three \xc3\xa9")};
	uint8_t raw[300];
	std::vector<uint8_t> big;
	ProtobufCBinaryData r_bytes[2];
	int32_t u_int32[3] = {-1, 0, 2147483647};
	int32_t p_int32[4] = {1, -2, 300, -2147483647 - 1};
	double p_double[3] = {0.5, -1e300, 4.9e-324};
	int64_t p_sint64[3] = {-1, INT64_MIN, INT64_MAX};
	uint32_t p_fixed32[2] = {0, 0xffffffffu};
	protobuf_c_boolean p_bool[3] = {1, 0, 1};
	Zcrpc__Pbtest__Color p_enum[3] = {ZCRPC__PBTEST__COLOR__BLUE, ZCRPC__PBTEST__COLOR__RED,
					  ZCRPC__PBTEST__COLOR__COLOR_UNSPECIFIED};

	explicit Everything(size_t bytes_len)
	{
		for (size_t k = 0; k < sizeof(raw); k++)
			raw[k] = static_cast<uint8_t>(k * 7 + 3);
		big.resize(bytes_len);
		for (size_t k = 0; k < bytes_len; k++)
			big[k] = static_cast<uint8_t>((k * 131) ^ (k >> 8));
		m.f_double = -3.141592653589793;
		m.f_float = 1.5e-30f;
		m.f_int32 = -123456;
		m.f_int64 = INT64_MIN;
		m.f_uint32 = 0xfffffffeu;
		m.f_uint64 = UINT64_MAX;
		m.f_sint32 = -2147483647 - 1;
		m.f_sint64 = -77;
		m.f_fixed32 = 0xdeadbeefu;
		m.f_fixed64 = 0x0123456789abcdefull;
		m.f_sfixed32 = -5;
		m.f_sfixed64 = INT64_MIN + 1;
		m.f_bool = 1;
		m.f_string = S("h\xc3\xa9llo, world");
		m.f_bytes.len = big.size();
		m.f_bytes.data = big.data();
		m.f_enum = ZCRPC__PBTEST__COLOR__BLUE;
		kid.a = 9;
		kid.s = S("kid");
		inner.a = -1;
		inner.s = S("inner");
		inner.n_kids = 1;
		inner.kids = kids;
		m.f_inner = &inner;
		m.n_r_string = 3;
		m.r_string = r_string;
		r_bytes[0] = ProtobufCBinaryData{sizeof(raw), raw};
		r_bytes[1] = ProtobufCBinaryData{0, nullptr};
		m.n_r_bytes = 2;
		m.r_bytes = r_bytes;
		r0.a = 1;
		r1.s = S("r1");
		m.n_r_inner = 2;
		m.r_inner = r_inner;
		m.n_u_int32 = 3;
		m.u_int32 = u_int32;
		m.n_p_int32 = 4;
		m.p_int32 = p_int32;
		m.n_p_double = 3;
		m.p_double = p_double;
		m.n_p_sint64 = 3;
		m.p_sint64 = p_sint64;
		m.n_p_fixed32 = 2;
		m.p_fixed32 = p_fixed32;
		m.n_p_bool = 3;
		m.p_bool = p_bool;
		m.n_p_enum = 3;
		m.p_enum = p_enum;
		m.choice_case = ZCRPC__PBTEST__ALL__CHOICE_O_INNER;
		m.o_inner = &r0;
		e0.key = S("a");
		e0.value = -1;
		e1.key = S("zz");
		e1.value = INT64_MAX;
		m.n_m_str_i64 = 2;
		m.m_str_i64 = m_str;
		mv.a = 42;
		f0.key = -7;
		f0.value = &mv;
		m.n_m_i32_inner = 1;
		m.m_i32_inner = m_i32;
		pres.has_i = 1;
		pres.i = 0; // present although zero
		pres.s = S("");
		pres.has_d = 1;
		pres.d = 2.5;
		m.f_presence = &pres;
	}
};

class Pb : public RdmaTest {};

} // namespace

TEST_F(Pb, EveryFieldTypeRoundTripsExactlyThroughPlainStubs)
{
	PbServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());

	// 100 B of bytes: packed into the request slot; 1 MiB: by RDMA WRITE.
	for (size_t n : {size_t{100}, size_t{1} << 20}) {
		Everything e(n);
		std::vector<uint8_t> want = Pack(e.m);
		Got g = cl.Echo(e.m);
		ASSERT_EQ(g.status, ZCRPC_OK) << g.message;
		ASSERT_FALSE(g.null_msg);
		ASSERT_EQ(g.packed.size(), want.size());
		EXPECT_TRUE(g.packed == want) << "reply differs from the request (" << n << ")";

		// Read some fields back through the generated code.
		Zcrpc__Pbtest__All *r =
			zcrpc__pbtest__all__unpack(nullptr, g.packed.size(), g.packed.data());
		ASSERT_NE(r, nullptr);
		EXPECT_EQ(r->f_double, e.m.f_double);
		EXPECT_EQ(r->f_float, e.m.f_float);
		EXPECT_EQ(r->f_int64, INT64_MIN);
		EXPECT_EQ(r->f_uint64, UINT64_MAX);
		EXPECT_EQ(r->f_sint32, -2147483647 - 1);
		EXPECT_EQ(r->f_sfixed64, INT64_MIN + 1);
		EXPECT_STREQ(r->f_string, e.m.f_string);
		ASSERT_EQ(r->f_bytes.len, n);
		EXPECT_EQ(std::memcmp(r->f_bytes.data, e.big.data(), n), 0);
		EXPECT_EQ(r->f_enum, ZCRPC__PBTEST__COLOR__BLUE);
		ASSERT_NE(r->f_inner, nullptr);
		ASSERT_EQ(r->f_inner->n_kids, 1u);
		EXPECT_STREQ(r->f_inner->kids[0]->s, "kid");
		ASSERT_EQ(r->n_r_string, 3u);
		EXPECT_STREQ(r->r_string[2], "three \xc3\xa9");
		ASSERT_EQ(r->n_r_bytes, 2u);
		EXPECT_EQ(r->r_bytes[0].len, sizeof(e.raw));
		EXPECT_EQ(r->r_bytes[1].len, 0u);
		ASSERT_EQ(r->n_p_sint64, 3u);
		EXPECT_EQ(r->p_sint64[1], INT64_MIN);
		ASSERT_EQ(r->n_p_double, 3u);
		EXPECT_EQ(r->p_double[2], 4.9e-324);
		EXPECT_EQ(r->n_u_int32, 3u);
		ASSERT_EQ(r->choice_case, ZCRPC__PBTEST__ALL__CHOICE_O_INNER);
		EXPECT_EQ(r->o_inner->a, 1);
		ASSERT_EQ(r->n_m_str_i64, 2u);
		EXPECT_STREQ(r->m_str_i64[1]->key, "zz");
		EXPECT_EQ(r->m_str_i64[1]->value, INT64_MAX);
		ASSERT_EQ(r->n_m_i32_inner, 1u);
		EXPECT_EQ(r->m_i32_inner[0]->key, -7);
		EXPECT_EQ(r->m_i32_inner[0]->value->a, 42);
		ASSERT_NE(r->f_presence, nullptr);
		EXPECT_TRUE(r->f_presence->has_i);
		EXPECT_EQ(r->f_presence->i, 0);
		EXPECT_FALSE(r->f_presence->has_u);
		EXPECT_NE(r->f_presence->s, nullptr);
		zcrpc__pbtest__all__free_unpacked(r, nullptr);
	}

	// The empty message and another oneof member.
	Zcrpc__Pbtest__All empty = ZCRPC__PBTEST__ALL__INIT;
	Got g = cl.Echo(empty);
	ASSERT_EQ(g.status, ZCRPC_OK) << g.message;
	EXPECT_TRUE(g.packed.empty());
	Zcrpc__Pbtest__All one = ZCRPC__PBTEST__ALL__INIT;
	one.choice_case = ZCRPC__PBTEST__ALL__CHOICE_O_U64;
	one.o_u64 = 0;
	g = cl.Echo(one);
	ASSERT_EQ(g.status, ZCRPC_OK) << g.message;
	EXPECT_TRUE(g.packed == Pack(one)) << "a oneof member set to zero is kept";
	zcrpc_channel_stats st;
	zcrpc_channel_get_stats(cl.ch, &st, sizeof(st));
	EXPECT_EQ(st.copied_bytes, 0u) << "requests were packed straight into registered memory";
}

TEST_F(Pb, UnknownMethodsAndUnimplementedHandlersAreUnimplemented)
{
	PbServer server;
	ASSERT_TRUE(server.Start(env_.addr0));

	// A service the server never registered.
	Client other(env_.addr0, server.port(), &zcrpc__pbtest__other__descriptor);
	Zcrpc__Pbtest__All m = ZCRPC__PBTEST__ALL__INIT;
	Got g;
	g.svc = other.svc;
	zcrpc__pbtest__other__nope(other.svc, &m, OnAll, &g);
	ASSERT_TRUE(other.Wait([&] { return g.calls > 0; }));
	EXPECT_EQ(g.calls, 1);
	EXPECT_TRUE(g.null_msg);
	EXPECT_EQ(g.status, ZCRPC_UNIMPLEMENTED) << g.message;

	// A method of a registered service whose handler slot is NULL.
	Client cl(env_.addr0, server.port());
	Got g2;
	g2.svc = cl.svc;
	zcrpc__pbtest__test__missing(cl.svc, &m, OnAll, &g2);
	ASSERT_TRUE(cl.Wait([&] { return g2.calls > 0; }));
	EXPECT_TRUE(g2.null_msg);
	EXPECT_EQ(g2.status, ZCRPC_UNIMPLEMENTED) << g2.message;
	EXPECT_NE(g2.message.find("Missing"), std::string::npos) << g2.message;

	// closure(NULL) answers with the status the handler set.
	Got g3;
	g3.svc = cl.svc;
	zcrpc__pbtest__test__fail(cl.svc, &m, OnAll, &g3);
	ASSERT_TRUE(cl.Wait([&] { return g3.calls > 0; }));
	EXPECT_TRUE(g3.null_msg);
	EXPECT_EQ(g3.status, ZCRPC_PERMISSION_DENIED);
	EXPECT_EQ(g3.message, "not for you");

	// Registering the same service again collides.
	EXPECT_EQ(zcrpc_pb_server_register(server.s, &server.impl.svc.base), ZCRPC_ALREADY_EXISTS);
}

TEST_F(Pb, PayloadThatDoesNotUnpackIsInternalAndTheConnectionStays)
{
	PbServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	Zcrpc__Pbtest__All m = ZCRPC__PBTEST__ALL__INIT;
	m.f_string = S("before");
	ASSERT_EQ(cl.Echo(m).status, ZCRPC_OK);

	// Field 15 (bytes) claims 5 bytes and carries 1; then a bad wire type.
	const uint8_t garbage[][3] = {{0x7a, 0x05, 0x01}, {0x0f, 0x01, 0x02}};
	for (const auto &bad : garbage) {
		struct R {
			int calls = 0;
			zcrpc_status st = ZCRPC_UNKNOWN;
			std::string msg;
		} res;
		auto cb = [](zcrpc_channel *, const zcrpc_reply *r, void *a) {
			auto *x = static_cast<R *>(a);
			x->calls++;
			x->st = r->status;
			x->msg = r->message ? r->message : "";
		};
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id("/zcrpc.pbtest.Test/Echo"), bad,
					   sizeof(bad), nullptr, cb, &res, nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return res.calls > 0; }));
		EXPECT_EQ(res.st, ZCRPC_INTERNAL) << res.msg;
		EXPECT_NE(res.msg.find("zcrpc.pbtest.All"), std::string::npos) << res.msg;
	}

	// 3 MB of empty repeated sub-messages would unpack into more than the
	// 64 MiB budget: refused, not allocated.
	{
		std::vector<uint8_t> bomb;
		for (int i = 0; i < 1000000; i++)
			bomb.insert(bomb.end(), {0xb2, 0x01, 0x00}); // r_inner: {}
		struct R {
			int calls = 0;
			zcrpc_status st = ZCRPC_UNKNOWN;
			std::string msg;
		} res;
		auto cb = [](zcrpc_channel *, const zcrpc_reply *r, void *a) {
			auto *x = static_cast<R *>(a);
			x->calls++;
			x->st = r->status;
			x->msg = r->message ? r->message : "";
		};
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id("/zcrpc.pbtest.Test/Echo"),
					   bomb.data(), bomb.size(), nullptr, cb, &res, nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return res.calls > 0; }, 60000));
		EXPECT_EQ(res.st, ZCRPC_RESOURCE_EXHAUSTED) << res.msg;
		EXPECT_NE(res.msg.find("budget"), std::string::npos) << res.msg;
	}

	Got g = cl.Echo(m);
	ASSERT_EQ(g.status, ZCRPC_OK) << g.message;
	EXPECT_TRUE(g.packed == Pack(m));
	zcrpc_channel_stats st;
	zcrpc_channel_get_stats(cl.ch, &st, sizeof(st));
	EXPECT_EQ(st.reconnects, 0u) << "the connection stayed up";
	EXPECT_EQ(server.Stats().protocol_errors, 0u);
	EXPECT_EQ(server.Stats().connections, 1u);
}

TEST_F(Pb, HandlersReplyLaterOnTheWorkerOrFromAnotherThread)
{
	PbServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	std::vector<Got> got(8);
	std::vector<Everything *> msgs;
	for (size_t i = 0; i < got.size(); i++) {
		msgs.push_back(new Everything(10 + i));
		msgs[i]->m.f_int32 = static_cast<int32_t>(i % 2); // 1: from another thread
		got[i].svc = cl.svc;
		zcrpc__pbtest__test__later(cl.svc, &msgs[i]->m, OnAll, &got[i]);
	}
	ASSERT_TRUE(cl.Wait([&] {
		for (auto &g : got)
			if (!g.calls)
				return false;
		return true;
	}));
	for (size_t i = 0; i < got.size(); i++) {
		EXPECT_EQ(got[i].calls, 1);
		EXPECT_EQ(got[i].status, ZCRPC_OK) << got[i].message;
		EXPECT_TRUE(got[i].packed == Pack(msgs[i]->m)) << i;
		delete msgs[i];
	}
	EXPECT_EQ(server.later_runs.load(), 8);
	EXPECT_EQ(server.later_replied_after_return.load(), 8);
}

TEST_F(Pb, ReplyLargerThanMaxReplyIsResourceExhausted)
{
	PbServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	auto big = [&](uint64_t n) {
		Zcrpc__Pbtest__Size s = ZCRPC__PBTEST__SIZE__INIT;
		s.n = n;
		Got g;
		g.svc = cl.svc;
		zcrpc__pbtest__test__big(cl.svc, &s, OnAll, &g);
		EXPECT_TRUE(cl.Wait([&] { return g.calls > 0; }, 60000));
		return g;
	};
	// No limit: 2 MiB comes back (by RDMA WRITE).
	Got g = big(2u << 20);
	ASSERT_EQ(g.status, ZCRPC_OK) << g.message;
	EXPECT_EQ(g.packed.size(), (2u << 20) + 5);

	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.max_reply = 1024;
	ASSERT_EQ(zcrpc_pb_client_set_opts(cl.svc, &o), ZCRPC_OK);
	g = big(1000); // 1004 bytes packed
	ASSERT_EQ(g.status, ZCRPC_OK) << g.message;
	g = big(5000);
	EXPECT_TRUE(g.null_msg);
	EXPECT_EQ(g.status, ZCRPC_RESOURCE_EXHAUSTED) << g.message;
	g = big(1u << 20);
	EXPECT_TRUE(g.null_msg);
	EXPECT_EQ(g.status, ZCRPC_RESOURCE_EXHAUSTED) << g.message;

	ASSERT_EQ(zcrpc_pb_client_set_opts(cl.svc, nullptr), ZCRPC_OK);
	g = big(5000);
	EXPECT_EQ(g.status, ZCRPC_OK) << g.message;
}

TEST_F(Pb, ServiceDestroyedWithCallsInFlightStillCompletesThem)
{
	PbServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	Everything e(64);
	Got g;
	g.svc = cl.svc;
	zcrpc__pbtest__test__echo(cl.svc, &e.m, OnAll, &g);
	protobuf_c_service_destroy(cl.svc); // the call keeps it alive
	cl.svc = nullptr;
	ASSERT_TRUE(cl.Wait([&] { return g.calls > 0; }));
	EXPECT_EQ(g.status, ZCRPC_OK) << g.message;
	EXPECT_TRUE(g.packed == Pack(e.m));

	// The accessors refuse what is not theirs.
	Zcrpc__Pbtest__Test_Service plain = ZCRPC__PBTEST__TEST__INIT(srv_);
	EXPECT_EQ(zcrpc_pb_get_last_status(&plain.base, nullptr), ZCRPC_UNKNOWN);
	EXPECT_EQ(zcrpc_pb_client_set_opts(&plain.base, nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_pb_server_get_request(nullptr), nullptr);
}

// ---- typed stubs generated by zcrpc-gen from idl/echo.proto ----------------

namespace {

void gen_ping(Zcrpc__Echo__Echo_Service *, const Zcrpc__Echo__EchoRequest *in,
	      Zcrpc__Echo__EchoReply_Closure closure, void *cd)
{
	if (in->seq == 999) {
		zcrpc_pb_set_status(cd, ZCRPC_NOT_FOUND, "no 999");
		closure(nullptr, cd);
		return;
	}
	Zcrpc__Echo__EchoReply r = ZCRPC__ECHO__ECHO_REPLY__INIT;
	r.payload = in->payload;
	// The call options arrived: seq + number of metadata pairs.
	r.seq = in->seq + zcrpc_pb_server_get_request(cd)->n_md;
	closure(&r, cd);
}

void gen_reverse(Zcrpc__Echo__Echo_Service *, const Zcrpc__Echo__EchoRequest *in,
		 Zcrpc__Echo__EchoReply_Closure closure, void *cd)
{
	std::vector<uint8_t> b(in->payload.data, in->payload.data + in->payload.len);
	std::reverse(b.begin(), b.end());
	Zcrpc__Echo__EchoReply r = ZCRPC__ECHO__ECHO_REPLY__INIT;
	r.payload.data = b.data();
	r.payload.len = b.size();
	r.seq = in->seq;
	closure(&r, cd);
}

struct GenServer {
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::atomic<bool> stop{false};
	std::thread t;
	~GenServer()
	{
		stop = true;
		if (t.joinable())
			t.join();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}
};

} // namespace

TEST_F(Pb, GeneratedTypedStubsCallSyncAndAsyncAndRegister)
{
	static Zcrpc__Echo__Echo_Service impl = ZCRPC__ECHO__ECHO__INIT(gen_);
	EXPECT_EQ(ZCRPC__ECHO__ECHO__PING__ZCRPC_ID,
		  zcrpc_method_id(ZCRPC__ECHO__ECHO__PING__ZCRPC_NAME));
	EXPECT_STREQ(ZCRPC__ECHO__ECHO__REVERSE__ZCRPC_NAME, "/zcrpc.echo.Echo/Reverse");

	GenServer srv;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &srv.w), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_create(srv.w, nullptr, &srv.s), ZCRPC_OK);
	ASSERT_EQ(zcrpc__echo__echo__zcrpc_register(srv.s, &impl), ZCRPC_OK);
	EXPECT_EQ(zcrpc__echo__echo__zcrpc_register(srv.s, &impl), ZCRPC_ALREADY_EXISTS);
	ASSERT_EQ(zcrpc_server_listen(srv.s, env_.addr0.c_str(), "0"), ZCRPC_OK);
	srv.t = std::thread([&srv] {
		while (!srv.stop.load())
			zcrpc_worker_progress(srv.w, 0);
	});

	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_get_port(srv.s)).c_str(), nullptr, &ch),
		  ZCRPC_OK);

	// Synchronous, with call options (deadline and metadata).
	uint8_t data[5] = {1, 2, 3, 4, 5};
	Zcrpc__Echo__EchoRequest req = ZCRPC__ECHO__ECHO_REQUEST__INIT;
	req.payload.data = data;
	req.payload.len = sizeof(data);
	req.seq = 40;
	zcrpc_md md[2] = {{"k1", 2, "v", 1}, {"k2", 2, "w", 1}};
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.timeout_us = 10 * 1000 * 1000;
	o.md = md;
	o.n_md = 2;
	Zcrpc__Echo__EchoReply *rep = nullptr;
	char *msg = nullptr;
	ASSERT_EQ(zcrpc__echo__echo__ping__call(ch, &req, &o, &rep, &msg), ZCRPC_OK) << msg;
	ASSERT_NE(rep, nullptr);
	EXPECT_EQ(msg, nullptr);
	EXPECT_EQ(rep->seq, 42u);
	ASSERT_EQ(rep->payload.len, sizeof(data));
	EXPECT_EQ(std::memcmp(rep->payload.data, data, sizeof(data)), 0);
	zcrpc__echo__echo_reply__free_unpacked(rep, nullptr);

	// An error: no reply, a message the caller frees.
	req.seq = 999;
	EXPECT_EQ(zcrpc__echo__echo__ping__call(ch, &req, nullptr, &rep, &msg), ZCRPC_NOT_FOUND);
	EXPECT_EQ(rep, nullptr);
	ASSERT_NE(msg, nullptr);
	EXPECT_STREQ(msg, "no 999");
	free(msg);

	// Asynchronous.
	struct Done {
		int calls = 0;
		zcrpc_status st = ZCRPC_UNKNOWN;
		std::vector<uint8_t> payload;
		uint64_t seq = 0;
	} done;
	req.seq = 7;
	ASSERT_EQ(zcrpc__echo__echo__reverse__async(
			  ch, &req, nullptr,
			  [](zcrpc_status st, const char *, const Zcrpc__Echo__EchoReply *r, void *a) {
				  auto *d = static_cast<Done *>(a);
				  d->calls++;
				  d->st = st;
				  if (r) {
					  d->payload.assign(r->payload.data,
							    r->payload.data + r->payload.len);
					  d->seq = r->seq;
				  }
			  },
			  &done, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return done.calls > 0; }, Scaled(20000)));
	EXPECT_EQ(done.calls, 1);
	EXPECT_EQ(done.st, ZCRPC_OK);
	EXPECT_EQ(done.seq, 7u);
	EXPECT_TRUE((done.payload == std::vector<uint8_t>{5, 4, 3, 2, 1}));
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}

// Item 9 of issue 11: as gRPC does for a method the service leaves out, the
// generated registration takes a NULL handler and its method answers
// UNIMPLEMENTED, while the other methods are served.
TEST_F(Pb, GeneratedRegisterWithANullHandlerServesTheRestAndAnswersUnimplemented)
{
	Zcrpc__Echo__Echo_Service half = ZCRPC__ECHO__ECHO__INIT(gen_);
	half.reverse = nullptr;

	GenServer srv;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &srv.w), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_create(srv.w, nullptr, &srv.s), ZCRPC_OK);
	zcrpc_status reg = zcrpc__echo__echo__zcrpc_register(srv.s, &half);
	std::printf("register with Reverse NULL: %s\n", zcrpc_status_str(reg));
	ASSERT_EQ(reg, ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_listen(srv.s, env_.addr0.c_str(), "0"), ZCRPC_OK);
	srv.t = std::thread([&srv] {
		while (!srv.stop.load())
			zcrpc_worker_progress(srv.w, 0);
	});

	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_get_port(srv.s)).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.timeout_us = static_cast<int64_t>(20 * 1000 * 1000 * TimeScale());
	uint8_t data[3] = {1, 2, 3};
	Zcrpc__Echo__EchoRequest req = ZCRPC__ECHO__ECHO_REQUEST__INIT;
	req.payload.data = data;
	req.payload.len = sizeof(data);
	req.seq = 5;

	// The method left out: UNIMPLEMENTED, naming it; no reply.
	Zcrpc__Echo__EchoReply *rep = nullptr;
	char *msg = nullptr;
	zcrpc_status st = zcrpc__echo__echo__reverse__call(ch, &req, &o, &rep, &msg);
	std::printf("Reverse: %s \"%s\"\n", zcrpc_status_str(st), msg ? msg : "");
	EXPECT_EQ(st, ZCRPC_UNIMPLEMENTED);
	EXPECT_EQ(rep, nullptr);
	ASSERT_NE(msg, nullptr);
	EXPECT_NE(std::string(msg).find("Reverse"), std::string::npos) << msg;
	free(msg);

	// The method that is there still works, on the same connection.
	msg = nullptr;
	ASSERT_EQ(zcrpc__echo__echo__ping__call(ch, &req, &o, &rep, &msg), ZCRPC_OK) << msg;
	ASSERT_NE(rep, nullptr);
	EXPECT_EQ(rep->seq, 5u);
	ASSERT_EQ(rep->payload.len, sizeof(data));
	EXPECT_EQ(std::memcmp(rep->payload.data, data, sizeof(data)), 0);
	zcrpc__echo__echo_reply__free_unpacked(rep, nullptr);
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}

TEST_F(Pb, HandlerRepliesWithAnAttachmentInPlace)
{
	auto server = std::make_unique<PbServer>();
	ASSERT_TRUE(server->Start(env_.addr0));
	const size_t n = 3u << 20;
	std::vector<uint8_t> src(n), dst(n, 0);
	for (size_t k = 0; k < n; k++)
		src[k] = static_cast<uint8_t>(k * 7 + (k >> 12));
	zcrpc_mr *smr = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(server->w), src.data(), n, 0, &smr),
		  ZCRPC_OK);
	g_reply_att = smr;
	g_reply_att_len = n;
	Client cl(env_.addr0, server->port());
	zcrpc_mr *dmr = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(cl.w), dst.data(), n,
				    ZCRPC_MR_REMOTE_WRITE, &dmr),
		  ZCRPC_OK);
	zcrpc_bulk into{dmr, 0, n};
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.reply_into = &into;
	ASSERT_EQ(zcrpc_pb_client_set_opts(cl.svc, &o), ZCRPC_OK);
	Zcrpc__Pbtest__All req = ZCRPC__PBTEST__ALL__INIT;
	req.f_int32 = 77;
	Got g;
	g.svc = cl.svc;
	zcrpc__pbtest__test__echo(cl.svc, &req, OnAll, &g);
	ASSERT_TRUE(cl.Wait([&] { return g.calls > 0; }, 60000));
	EXPECT_EQ(g.status, ZCRPC_OK) << g.message;
	EXPECT_TRUE(dst == src) << "the attachment did not land in reply_into intact";
	// The reply message was packed straight into registered memory and
	// the attachment sent in place: the server copied nothing.
	EXPECT_EQ(server->Stats().copied_bytes, 0u);
	ASSERT_TRUE(cl.Wait([&] { return g_att_done.load() > 0; }, 10000))
		<< "the handler was never told its attachment left";
	ASSERT_EQ(zcrpc_pb_client_set_opts(cl.svc, nullptr), ZCRPC_OK);
	g_reply_att = nullptr;
	zcrpc_mr_deregister(dmr);
	server.reset(); // it used smr: stop it before deregistering
	zcrpc_mr_deregister(smr);
}
