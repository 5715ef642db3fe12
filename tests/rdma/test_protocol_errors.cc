// A peer that breaks the RPC protocol (issue 11, item 11): the connection
// closes, the error is counted in the channel's or server's stats, and the
// decode reason reaches the connection's error text and, on the client, the
// message of the calls that fail with it.
#include <cstdio>
#include <string>
#include <vector>

#include "rdma_env.h"
#include "zcrpc/rpc.h"

#include "rpc/frame.h"

using namespace std::chrono;

namespace {

class ProtocolErrors : public RdmaTest {};

const char *kEcho = "/zcrpc.test.Proto/Echo";

// A frame with a bad magic: "bad frame magic 0x...." when decoded.
std::vector<uint8_t> BadMagicFrame(uint8_t type)
{
	struct zcrpc_frame f{};
	f.type = type;
	f.method_id = zcrpc_method_id(kEcho);
	f.call_id = 1;
	std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN);
	zcrpc__frame_encode(&f, b.data());
	b[0] ^= 0xff;
	return b;
}

struct Closed {
	int n = 0;
	zcrpc_status why = ZCRPC_OK;
	std::string text;
};

} // namespace

TEST_F(ProtocolErrors, TheServerCountsAMalformedFrameAndNamesItsReason)
{
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	Closed gone;
	so.arg = &gone;
	so.on_disconnect = [](zcrpc_server *, zcrpc_conn *c, zcrpc_status why, void *a) {
		auto *g = static_cast<Closed *>(a);
		g->n++;
		g->why = why;
		g->text = zcrpc_conn_get_error(c);
	};
	zcrpc_server *s = nullptr;
	ASSERT_EQ(zcrpc_server_create(w, &so, &s), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_register(
			  s, kEcho,
			  [](zcrpc_server_call *c, const zcrpc_request *r, void *) {
				  zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, nullptr);
			  },
			  nullptr),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_listen(s, env_.addr0.c_str(), "0"), ZCRPC_OK);

	// A raw transport client sends one frame with a bad magic.
	int up = 0;
	zcrpc_conn_handlers h{};
	h.size = sizeof(h);
	h.arg = &up;
	h.on_state = [](zcrpc_conn *, zcrpc_conn_state st, zcrpc_status, void *a) {
		if (st == ZCRPC_CONN_ESTABLISHED)
			*static_cast<int *>(a) = 1;
	};
	zcrpc_conn *raw = nullptr;
	ASSERT_EQ(zcrpc_connect(w, env_.addr0.c_str(), std::to_string(zcrpc_server_get_port(s)).c_str(),
				nullptr, &h, &raw),
		  ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(w, [&] { return up == 1; }, Scaled(10000)));
	auto bad = BadMagicFrame(ZCRPC_FRAME_REQUEST);
	ASSERT_EQ(zcrpc_conn_send(raw, bad.data(), bad.size()), ZCRPC_OK);
	EXPECT_TRUE(ProgressUntil(w, [&] { return gone.n > 0; }, Scaled(10000)));
	zcrpc_server_stats ss;
	zcrpc_server_get_stats(s, &ss, sizeof(ss));
	std::printf("server: protocol_errors %llu, on_disconnect %s \"%s\"\n",
		    static_cast<unsigned long long>(ss.protocol_errors), zcrpc_status_str(gone.why),
		    gone.text.c_str());
	EXPECT_EQ(ss.protocol_errors, 1u);
	EXPECT_EQ(gone.why, ZCRPC_INTERNAL);
	EXPECT_NE(gone.text.find("protocol error from the client: bad frame magic"),
		  std::string::npos)
		<< gone.text;
	zcrpc_conn_destroy(raw);
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(w);
}

TEST_F(ProtocolErrors, TheClientCountsAMalformedReplyAndItsCallsCarryTheReason)
{
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	// A raw transport server that answers every message with a bad frame.
	zcrpc_listen_opts lo;
	zcrpc_listen_opts_init(&lo);
	zcrpc_conn_handlers lh;
	zcrpc_conn_handlers_init(&lh);
	std::vector<zcrpc_conn *> accepted;
	lo.arg = &accepted;
	lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
		static_cast<std::vector<zcrpc_conn *> *>(a)->push_back(c);
	};
	lh.on_recv = [](zcrpc_conn *c, const void *, size_t, void *) {
		auto bad = BadMagicFrame(ZCRPC_FRAME_REPLY);
		zcrpc_conn_send(c, bad.data(), bad.size());
	};
	zcrpc_listener *l = nullptr;
	lo.conn_handlers = &lh;
	ASSERT_EQ(zcrpc_listen(w, env_.addr0.c_str(), "0", &lo, &l), ZCRPC_OK);

	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(),
				       std::to_string(zcrpc_listener_get_port(l)).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	struct Res {
		int n = 0;
		zcrpc_status st = ZCRPC_OK;
		std::string msg;
	} res;
	ASSERT_EQ(zcrpc_call_async(
			  ch, zcrpc_method_id(kEcho), "x", 1, nullptr,
			  [](zcrpc_channel *, const zcrpc_reply *r, void *a) {
				  auto *x = static_cast<Res *>(a);
				  x->n++;
				  x->st = r->status;
				  x->msg = r->message ? r->message : "";
			  },
			  &res, nullptr),
		  ZCRPC_OK);
	EXPECT_TRUE(ProgressUntil(w, [&] { return res.n > 0; }, Scaled(10000)));
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
	std::printf("client: protocol_errors %llu, call %s \"%s\"\n",
		    static_cast<unsigned long long>(cs.protocol_errors), zcrpc_status_str(res.st),
		    res.msg.c_str());
	EXPECT_EQ(res.n, 1);
	EXPECT_EQ(res.st, ZCRPC_UNAVAILABLE);
	EXPECT_NE(res.msg.find("protocol error from the server: bad frame magic"),
		  std::string::npos)
		<< res.msg;
	EXPECT_EQ(cs.protocol_errors, 1u);
	zcrpc_channel_destroy(ch);
	for (auto *c : accepted)
		zcrpc_conn_destroy(c);
	zcrpc_listener_destroy(l);
	zcrpc_worker_destroy(w);
}
