// The one ABI rule (docs/abi.md) over rxe: callers built against an older
// header (options and handlers without their newest fields, counters one
// field shorter) keep working, and the library never writes past what they
// passed; newer callers' zero fields are accepted. The host half is
// tests/unit/test_abi.cc.
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "core/abi.h"
#include "rdma_env.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;

namespace
{

constexpr unsigned char kGuard = 0xA5;

// An out-struct of @size bytes as a caller passes it, with guard bytes after.
struct Guarded {
	explicit Guarded(size_t size) : size_(size), buf_(size + 64, kGuard)
	{
	}
	template <class T> T *as()
	{
		return reinterpret_cast<T *>(buf_.data());
	}
	bool GuardIntact() const
	{
		for (size_t i = size_; i < buf_.size(); i++)
			if (buf_[i] != kGuard)
				return false;
		return true;
	}
	bool SamePrefix(const void *full) const
	{
		return memcmp(buf_.data(), full, size_) == 0;
	}
	size_t size_;
	std::vector<unsigned char> buf_;
};

struct Peer {
	zcrpc_conn *conn = nullptr;
	int established = 0, closed = 0, recvd = 0;
	static void OnState(zcrpc_conn *, zcrpc_conn_state st, zcrpc_status,
			    void *a)
	{
		auto *p = static_cast<Peer *>(a);
		if (st == ZCRPC_CONN_ESTABLISHED)
			p->established++;
		if (st == ZCRPC_CONN_CLOSED)
			p->closed++;
	}
	static void OnRecv(zcrpc_conn *c, const void *d, size_t n, void *a)
	{
		static_cast<Peer *>(a)->recvd++;
		zcrpc_conn_send(c, d,
				n); // echo (the client's echo is dropped below)
	}
	static void OnRecvQuiet(zcrpc_conn *, const void *, size_t, void *a)
	{
		static_cast<Peer *>(a)->recvd++;
	}
};

const char *kEcho = "/zcrpc.test.Abi/Echo";

void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *)
{
	// The view says how much of it the library filled: all of this build's.
	EXPECT_EQ(r->size, sizeof(zcrpc_request));
	EXPECT_TRUE(ZCRPC_VIEW_HAS(r, zcrpc_request, attachment_mr));
	struct {
		zcrpc_reply_opts o;
		uint64_t newer; // a newer caller's field, left 0
	} ro;
	memset(&ro, 0, sizeof(ro));
	ro.o.size = sizeof(ro);
	EXPECT_EQ(
		zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, &ro.o),
		ZCRPC_OK);
}

} // namespace

class Abi : public RdmaTest
{
};

TEST_F(Abi, OlderOptionsAndHandlersConnectAndShorterStatsKeepTheirGuard)
{
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	Peer srv, cli;
	std::vector<zcrpc_conn *> accepted;

	// A listener set up by an older caller: its options end before
	// recv_depth, its handlers before on_write_done. Both are copied: the
	// caller's handlers go away (and are scribbled over) right after.
	zcrpc_listener *l = nullptr;
	{
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		lo.size = offsetof(zcrpc_listen_opts, recv_depth);
		lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
			static_cast<std::vector<zcrpc_conn *> *>(a)->push_back(
				c);
		};
		lo.arg = &accepted;
		zcrpc_conn_handlers h;
		zcrpc_conn_handlers_init(&h);
		h.size = offsetof(zcrpc_conn_handlers, on_write_done);
		h.on_state = Peer::OnState;
		h.on_recv = Peer::OnRecv;
		h.arg = &srv;
		lo.conn_handlers = &h;
		ASSERT_EQ(zcrpc_listen(w, env_.addr0.c_str(), "0", &lo, &l),
			  ZCRPC_OK);
		memset(&h, 0xff, sizeof(h));
	}
	std::string port = std::to_string(zcrpc_listener_get_port(l));

	// Handlers below the oldest layout are refused.
	zcrpc_conn_handlers h;
	zcrpc_conn_handlers_init(&h);
	h.on_state = Peer::OnState;
	h.on_recv = Peer::OnRecvQuiet;
	h.arg = &cli;
	h.size = ZCRPC__MIN_CONN_HANDLERS - 1;
	EXPECT_EQ(zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), nullptr,
				&h, &cli.conn),
		  ZCRPC_INVALID_ARGUMENT);
	// An older client: connect options ending before recv_depth, handlers
	// before on_write_done.
	zcrpc_connect_opts co;
	zcrpc_connect_opts_init(&co);
	co.size = offsetof(zcrpc_connect_opts, recv_depth);
	h.size = offsetof(zcrpc_conn_handlers, on_write_done);
	ASSERT_EQ(zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h,
				&cli.conn),
		  ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w, [&] { return cli.established == 1 && accepted.size() == 1; },
		Scaled(10000)));
	for (int i = 0; i < 10; i++)
		ASSERT_EQ(zcrpc_conn_send(cli.conn, "abi", 3), ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w, [&] { return cli.recvd == 10; }, Scaled(10000)));
	EXPECT_EQ(srv.recvd, 10);
	EXPECT_EQ(zcrpc_conn_set_handlers(cli.conn, &h),
		  ZCRPC_OK); // the older size
	h.size = 0;
	EXPECT_EQ(zcrpc_conn_set_handlers(cli.conn, &h),
		  ZCRPC_INVALID_ARGUMENT);

	// Counters read by a caller whose structs lack the newest counter.
	zcrpc_conn_stats cs;
	zcrpc_conn_get_stats(cli.conn, &cs, sizeof(cs));
	EXPECT_EQ(cs.msgs_sent, 10u);
	Guarded gc(offsetof(zcrpc_conn_stats, unflushed_wrs));
	zcrpc_conn_get_stats(cli.conn, gc.as<zcrpc_conn_stats>(), gc.size_);
	EXPECT_TRUE(gc.GuardIntact());
	EXPECT_TRUE(gc.SamePrefix(&cs));
	EXPECT_EQ(gc.as<zcrpc_conn_stats>()->msgs_sent, 10u);

	zcrpc_worker_stats ws;
	zcrpc_worker_get_stats(w, &ws, sizeof(ws));
	EXPECT_EQ(ws.conns, 2u);
	Guarded gw(offsetof(zcrpc_worker_stats, unflushed_wrs));
	zcrpc_worker_get_stats(w, gw.as<zcrpc_worker_stats>(), gw.size_);
	EXPECT_TRUE(gw.GuardIntact());
	EXPECT_TRUE(gw.SamePrefix(&ws));

	zcrpc_conn_destroy(cli.conn);
	for (auto *c : accepted)
		zcrpc_conn_destroy(c);
	zcrpc_listener_destroy(l);
	zcrpc_worker_destroy(w);
}

TEST_F(Abi, RpcResultsViewsAndShorterStatsStayWithinTheCallersSize)
{
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);

	// Options of a newer caller whose newer fields are zero: accepted; one
	// it set that this library does not know: refused.
	struct {
		zcrpc_server_opts o;
		uint64_t newer;
	} so;
	memset(&so, 0, sizeof(so));
	zcrpc_server_opts_init(&so.o);
	so.o.size = sizeof(so);
	so.newer = 1;
	zcrpc_server *s = nullptr;
	EXPECT_EQ(zcrpc_server_create(w, &so.o, &s), ZCRPC_INVALID_ARGUMENT);
	so.newer = 0;
	ASSERT_EQ(zcrpc_server_create(w, &so.o, &s), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_register(s, kEcho, Echo, nullptr), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_listen(s, env_.addr0.c_str(), "0"), ZCRPC_OK);
	std::string port = std::to_string(zcrpc_server_get_port(s));

	struct {
		zcrpc_channel_opts o;
		uint64_t newer;
	} cho;
	memset(&cho, 0, sizeof(cho));
	zcrpc_channel_opts_init(&cho.o);
	cho.o.size = sizeof(cho);
	cho.newer = 1;
	zcrpc_channel *ch = nullptr;
	EXPECT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), port.c_str(),
				       &cho.o, &ch),
		  ZCRPC_INVALID_ARGUMENT);
	cho.newer = 0;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(), port.c_str(),
				       &cho.o, &ch),
		  ZCRPC_OK);

	// A result struct larger than this build's (a newer caller's): the
	// library fills its own sizeof and says so in size.
	uint32_t m = zcrpc_method_id(kEcho);
	Guarded big(sizeof(zcrpc_result));
	std::fill(big.buf_.begin(), big.buf_.end(), kGuard);
	auto *r = big.as<zcrpc_result>();
	ASSERT_EQ(zcrpc_call(ch, m, "hello", 5, nullptr, r,
			     sizeof(zcrpc_result) + 16),
		  ZCRPC_OK);
	EXPECT_EQ(r->size, sizeof(zcrpc_result));
	EXPECT_TRUE(big.GuardIntact());
	ASSERT_EQ(r->len, 5u);
	EXPECT_EQ(memcmp(r->data, "hello", 5), 0);
	zcrpc_result_free(r);
	EXPECT_TRUE(big.GuardIntact());
	// The first release's layout exactly.
	Guarded min(ZCRPC__MIN_RESULT);
	auto *rm = min.as<zcrpc_result>();
	ASSERT_EQ(zcrpc_call(ch, m, "again", 5, nullptr, rm, ZCRPC__MIN_RESULT),
		  ZCRPC_OK);
	EXPECT_EQ(rm->size, ZCRPC__MIN_RESULT);
	EXPECT_EQ(rm->len, 5u);
	zcrpc_result_free(rm);
	EXPECT_TRUE(min.GuardIntact());

	// The reply view carries the size the library filled.
	struct Seen {
		int calls = 0;
		size_t size = 0;
		bool has_md = false;
	} seen;
	auto cb = [](zcrpc_channel *, const zcrpc_reply *rp, void *a) {
		auto *sn = static_cast<Seen *>(a);
		sn->calls++;
		sn->size = rp->size;
		sn->has_md = ZCRPC_VIEW_HAS(rp, zcrpc_reply, n_md);
	};
	ASSERT_EQ(
		zcrpc_call_async(ch, m, "view", 4, nullptr, cb, &seen, nullptr),
		ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w, [&] { return seen.calls == 1; }, Scaled(10000)));
	EXPECT_EQ(seen.size, sizeof(zcrpc_reply));
	EXPECT_TRUE(seen.has_md);

	// Counters one field shorter: the guard after them stays.
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
	EXPECT_EQ(cs.calls_ok, 3u);
	Guarded gc(offsetof(zcrpc_channel_stats, protocol_errors));
	zcrpc_channel_get_stats(ch, gc.as<zcrpc_channel_stats>(), gc.size_);
	EXPECT_TRUE(gc.GuardIntact());
	EXPECT_TRUE(gc.SamePrefix(&cs));

	zcrpc_server_stats ss;
	zcrpc_server_get_stats(s, &ss, sizeof(ss));
	EXPECT_EQ(ss.replies, 3u);
	Guarded gs(offsetof(zcrpc_server_stats, pool_pinned));
	zcrpc_server_get_stats(s, gs.as<zcrpc_server_stats>(), gs.size_);
	EXPECT_TRUE(gs.GuardIntact());
	EXPECT_TRUE(gs.SamePrefix(&ss));

	zcrpc_channel_destroy(ch);
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
}
