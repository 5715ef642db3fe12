// Wire features (docs/protocol.md §1): a peer that offers none of the
// optional features talks to one that offers all, both ways (an older
// client to a newer server, a newer client to an older server), through the
// raw transport (send/recv, RDMA WRITE with immediate, close) and the RPC
// layer (unary calls small and above the bulk threshold, a bulk part,
// cancellation, orderly close); each side uses what was negotiated.
//
// What the "older" peer clears (zcrpc__worker_test_clear_features), and why:
//   PIECE (0x4)  cleared. Its hello carries no max_write; the connection
//                uses no PIECE, so each side splits RDMA WRITEs at its own
//                limit (its port's max_msg_sz, §4) instead of the smaller
//                of both announced ones.
//   CLOSE (0x8)  cleared. No CLOSE message is sent, so an orderly close
//                reads at the peer as before the feature: UNAVAILABLE
//                "peer closed the connection (it sends no close message:
//                ...)", and the RPC server counts it in conns_lost.
//   CREDITS (0x1) kept: "always set in version 1". Credit flow control is
//                not optional in this version (there is no path without
//                it): a peer without it does not speak version 1.
//   AUTH (0x2)   not a capability but admission, set by a key: a client
//                with a key and a server without one (or the reverse)
//                refuse each other by design (rdma.Admission, unit.Auth),
//                and the hook leaves it alone (the key sets it). The raw
//                cases run once without keys and once with a key on both
//                sides, so AUTH works with a peer lacking the other bits.
// Connect.OrderlyCloseAndDestroyReadOkAtTheServerAnOlderClientAsBefore
// covers CLOSE alone from an older client; this covers every bit both ways.
//
// To see which piece size is in use, every connection is set up with
// zcrpc__test_write_piece(4096) (both hellos announce 4 KiB) and runs with
// it reset to 0 (each side's own limit is the device's again, 8 MiB on
// rxe): with PIECE on both sides the piece stays 4 KiB, without it falls
// back to the device's. A write of 3 pieces + 100 bytes then reaches the
// receiver as a last WRITE of 100 bytes, or as one of the whole length;
// the RPC layer's bulk parts check that count (bulk_bad_writes), so a
// writer and a receiver disagreeing on the piece would fail the calls.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "rdma_env.h"
#include "transport/hello.h"
#include "transport/test_hooks.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

// The optional bits an older peer lacks (see the top of the file).
constexpr uint32_t kOptional = ZCRPC_FEAT_PIECE | ZCRPC_FEAT_CLOSE;
constexpr uint32_t kPiece = 4096;
constexpr size_t kSplit = 3 * kPiece + 100; // 3 full pieces and 100 bytes

struct Case {
	const char *what;
	bool client_old, server_old;
	bool both_new() const { return !client_old && !server_old; }
};
const Case kCases[] = {
	{"older client -> newer server", true, false},
	{"newer client -> older server", false, true},
	{"newer client -> newer server", false, false},
};

// Progresses every worker of @ws (without blocking) until @done() or
// @timeout; returns done().
bool Pump(std::initializer_list<zcrpc_worker *> ws, const std::function<bool()> &done,
	  milliseconds timeout)
{
	auto until = steady_clock::now() + timeout;
	while (!done()) {
		if (steady_clock::now() > until)
			return false;
		for (zcrpc_worker *w : ws)
			zcrpc_worker_progress(w, 0);
	}
	return true;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
	return v;
}

// ---- the raw transport ------------------------------------------------------

// One end of a raw connection. Messages start with a tag: 'E' is echoed by
// the end whose echo is set, 'R' carries a zcrpc_remote_region to write.
struct End {
	zcrpc_worker *w = nullptr;
	zcrpc_conn *conn = nullptr;
	bool up = false, closed = false, echo = false;
	zcrpc_status close_status = ZCRPC_UNKNOWN;
	std::string close_why;
	std::vector<std::string> echoes; // 'E' messages that came back
	bool have_region = false;
	zcrpc_remote_region region{};
	int imms = 0, writes_done = 0, revoked = 0;
	uint32_t imm = 0;
	size_t imm_len = 0;
	zcrpc_status write_status = ZCRPC_UNKNOWN;

	static void OnState(zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s, void *a)
	{
		auto *e = static_cast<End *>(a);
		if (st == ZCRPC_CONN_ESTABLISHED)
			e->up = true;
		if (st == ZCRPC_CONN_CLOSED) {
			e->closed = true;
			e->close_status = s;
			e->close_why = zcrpc_conn_get_error(c);
		}
	}
	static void OnRecv(zcrpc_conn *c, const void *data, size_t len, void *a)
	{
		auto *e = static_cast<End *>(a);
		auto *p = static_cast<const char *>(data);
		if (len >= 1 && p[0] == 'E') {
			if (e->echo)
				EXPECT_EQ(zcrpc_conn_send(c, data, len), ZCRPC_OK);
			else
				e->echoes.emplace_back(p, len);
		} else if (len == 1 + ZCRPC_REMOTE_REGION_LEN && p[0] == 'R') {
			EXPECT_EQ(zcrpc_remote_region_decode(p + 1, ZCRPC_REMOTE_REGION_LEN,
							     &e->region),
				  ZCRPC_OK);
			e->have_region = true;
		} else {
			ADD_FAILURE() << "unexpected message of " << len << " bytes";
		}
	}
	static void OnWriteDone(zcrpc_conn *, void *, zcrpc_status s, void *a)
	{
		auto *e = static_cast<End *>(a);
		e->writes_done++;
		e->write_status = s;
	}
	static void OnWriteImm(zcrpc_conn *, uint32_t imm, size_t len, void *a)
	{
		auto *e = static_cast<End *>(a);
		e->imms++;
		e->imm = imm;
		e->imm_len = len;
	}
	static void OnRevoked(zcrpc_conn *, void *, zcrpc_status s, void *a)
	{
		EXPECT_EQ(s, ZCRPC_OK);
		static_cast<End *>(a)->revoked++;
	}
	zcrpc_conn_handlers Handlers()
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = OnState;
		h.on_recv = OnRecv;
		h.arg = this;
		h.on_write_done = OnWriteDone;
		h.on_write_imm = OnWriteImm;
		h.on_revoked = OnRevoked;
		return h;
	}
};

void OnAccept(zcrpc_listener *, zcrpc_conn *c, void *a)
{
	auto *e = static_cast<End *>(a);
	e->conn = c;
	e->up = true;
}

const char kKey[] = "features-test-pre-shared-key-32b";

// @from writes kSplit bytes with immediate data into memory @to granted
// (the region travels as a message, after the bind), as one piece or
// split; @to checks the last WRITE's byte count and the bytes.
void WriteWithImm(End &from, End &to, bool pieces_of_4k)
{
	std::vector<uint8_t> src = Pattern(kSplit, 0x5a), dst(kSplit, 0);
	zcrpc_mr *smr = nullptr, *dmr = nullptr;
	zcrpc_grant *g = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(from.w), src.data(), src.size(), 0,
				    &smr),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(to.w), dst.data(), dst.size(),
				    ZCRPC_MR_REMOTE_WRITE, &dmr),
		  ZCRPC_OK);
	zcrpc_remote_region r{};
	ASSERT_EQ(zcrpc_mr_grant(dmr, to.conn, 0, dst.size(), &r, &g), ZCRPC_OK);
	uint8_t msg[1 + ZCRPC_REMOTE_REGION_LEN] = {'R'};
	zcrpc_remote_region_encode(&r, msg + 1);
	from.have_region = false;
	ASSERT_EQ(zcrpc_conn_send(to.conn, msg, sizeof(msg)), ZCRPC_OK);
	ASSERT_TRUE(Pump({from.w, to.w}, [&] { return from.have_region; }, Scaled(5000)));

	const uint32_t imm = 0xfeed0001u;
	const int imms = to.imms, done = from.writes_done;
	ASSERT_EQ(zcrpc_conn_write(from.conn, smr, 0, src.size(), &from.region, 0, &imm,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Pump({from.w, to.w},
			 [&] { return to.imms > imms && from.writes_done > done; },
			 Scaled(5000)));
	EXPECT_EQ(from.write_status, ZCRPC_OK);
	EXPECT_EQ(to.imm, imm);
	// Only the last WRITE's byte count reaches the receiver (§4).
	EXPECT_EQ(to.imm_len, pieces_of_4k ? kSplit - 3 * kPiece : kSplit);
	const int revoked = to.revoked;
	ASSERT_EQ(zcrpc_grant_revoke(g, nullptr), ZCRPC_OK);
	ASSERT_TRUE(Pump({from.w, to.w}, [&] { return to.revoked > revoked; }, Scaled(5000)));
	EXPECT_EQ(dst, src);
	zcrpc_mr_deregister(smr);
	zcrpc_mr_deregister(dmr);
}

class Features : public RdmaTest {};

// One raw connection of @k: messages both ways, a write with immediate each
// way, then an orderly close by the client or by the server.
void RawConnection(const RxeEnv &env, const Case &k, bool server_closes, bool keyed)
{
	End cl, sv;
	sv.echo = true;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &cl.w), ZCRPC_OK);
	ASSERT_EQ(zcrpc_worker_create(nullptr, &sv.w), ZCRPC_OK);
	if (k.client_old)
		zcrpc__worker_test_clear_features(cl.w, kOptional);
	if (k.server_old)
		zcrpc__worker_test_clear_features(sv.w, kOptional);

	zcrpc_listen_opts lo;
	zcrpc_listen_opts_init(&lo);
	lo.on_accept = OnAccept;
	lo.arg = &sv;
	zcrpc_conn_handlers sh = sv.Handlers();
	lo.conn_handlers = &sh;
	zcrpc_connect_opts co;
	zcrpc_connect_opts_init(&co);
	if (keyed) {
		lo.psk = co.psk = kKey;
		lo.psk_len = co.psk_len = sizeof(kKey) - 1;
		co.identity = "features";
	}
	zcrpc_listener *l = nullptr;
	ASSERT_EQ(zcrpc_listen(sv.w, env.addr0.c_str(), "0", &lo, &l), ZCRPC_OK);
	const std::string port = std::to_string(zcrpc_listener_get_port(l));
	zcrpc_conn_handlers ch = cl.Handlers();
	// Both hellos announce 4 KiB pieces; then each side's own limit is
	// the device's again.
	zcrpc__test_write_piece(kPiece);
	zcrpc_status st = zcrpc_connect(cl.w, env.addr0.c_str(), port.c_str(), &co, &ch, &cl.conn);
	bool up = st == ZCRPC_OK &&
		  Pump({cl.w, sv.w}, [&] { return (cl.up && sv.up) || cl.closed; }, Scaled(10000));
	zcrpc__test_write_piece(0);
	ASSERT_EQ(st, ZCRPC_OK);
	ASSERT_TRUE(up) << "connection not up";
	ASSERT_FALSE(cl.closed) << zcrpc_conn_get_error(cl.conn);

	// PIECE: 4 KiB when both use it; else each side's own (the device's).
	const size_t pc = zcrpc_conn_write_piece(cl.conn), ps = zcrpc_conn_write_piece(sv.conn);
	std::printf("[features] %s%s: piece %zu (client) %zu (server)\n", k.what,
		    keyed ? ", with a key" : "", pc, ps);
	EXPECT_EQ(pc, ps);
	if (k.both_new())
		EXPECT_EQ(pc, kPiece);
	else
		EXPECT_GT(pc, kPiece) << "the piece did not fall back to the device's";

	// send/recv: 64 messages to the server and back.
	for (unsigned i = 0; i < 64; i++) {
		std::string m = "E" + std::to_string(i) + std::string(1 + i * 61, 'x');
		ASSERT_TRUE(Pump({cl.w, sv.w}, [&] { return zcrpc_conn_can_send(cl.conn) != 0; },
				 Scaled(5000)));
		ASSERT_EQ(zcrpc_conn_send(cl.conn, m.data(), m.size()), ZCRPC_OK);
	}
	ASSERT_TRUE(Pump({cl.w, sv.w}, [&] { return cl.echoes.size() == 64; }, Scaled(5000)));
	for (unsigned i = 0; i < 64; i++)
		EXPECT_EQ(cl.echoes[i], "E" + std::to_string(i) + std::string(1 + i * 61, 'x'));

	// RDMA WRITE with immediate, both ways.
	WriteWithImm(cl, sv, k.both_new());
	WriteWithImm(sv, cl, k.both_new());

	// CLOSE: the closer reads its own close OK; the peer OK only when
	// both sent and expected the CLOSE message, as before it otherwise.
	End &closer = server_closes ? sv : cl, &peer = server_closes ? cl : sv;
	zcrpc_conn_close(closer.conn);
	ASSERT_TRUE(Pump({cl.w, sv.w}, [&] { return cl.closed && sv.closed; }, Scaled(5000)));
	std::printf("[features] %s, %s closes: the peer saw %s \"%s\"\n", k.what,
		    server_closes ? "the server" : "the client",
		    zcrpc_status_str(peer.close_status), peer.close_why.c_str());
	EXPECT_EQ(closer.close_status, ZCRPC_OK) << closer.close_why;
	EXPECT_EQ(closer.close_why, "closed");
	if (k.both_new()) {
		EXPECT_EQ(peer.close_status, ZCRPC_OK);
		EXPECT_EQ(peer.close_why, "the peer closed the connection (orderly close)");
	} else {
		EXPECT_EQ(peer.close_status, ZCRPC_UNAVAILABLE);
		EXPECT_NE(peer.close_why.find("it sends no close message"), std::string::npos)
			<< peer.close_why;
	}
	zcrpc_conn_destroy(cl.conn);
	zcrpc_conn_destroy(sv.conn);
	zcrpc_listener_destroy(l);
	zcrpc_worker_destroy(cl.w);
	zcrpc_worker_destroy(sv.w);
}

TEST_F(Features, RawTransportOlderAndNewerPeersBothWays)
{
	for (const Case &k : kCases) {
		SCOPED_TRACE(k.what);
		{
			SCOPED_TRACE("the client closes, no keys");
			RawConnection(env_, k, false, false);
		}
		{
			SCOPED_TRACE("the server closes, a key on both sides");
			RawConnection(env_, k, true, true);
		}
	}
}

// ---- the RPC layer ----------------------------------------------------------

const char *kEcho = "/zcrpc.test.Features/Echo";
const char *kHold = "/zcrpc.test.Features/Hold";

// A server on its own worker and thread: Echo returns the payload and the
// attachment (in place); Hold keeps the call until the test replies.
class Server {
public:
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::atomic<zcrpc_server_call *> held{nullptr};

	bool Start(const std::string &addr, bool old)
	{
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK)
			return false;
		if (old)
			zcrpc__worker_test_clear_features(w, kOptional);
		if (zcrpc_server_create(w, nullptr, &s) != ZCRPC_OK ||
		    zcrpc_server_register(s, kEcho, Echo, this) != ZCRPC_OK ||
		    zcrpc_server_register(s, kHold, Hold, this) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load(std::memory_order_relaxed))
				zcrpc_worker_progress(w, 1);
		});
		return true;
	}
	~Server()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}
	std::string port() const { return std::to_string(zcrpc_server_get_port(s)); }
	zcrpc_server_stats Stats() const
	{
		zcrpc_server_stats st;
		zcrpc_server_get_stats(s, &st, sizeof(st));
		return st;
	}

private:
	static void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *)
	{
		zcrpc_reply_opts o{};
		o.size = sizeof(o);
		if (r->attachment_len)
			o.attachment = &r->attachment_mr;
		EXPECT_EQ(zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, &o), ZCRPC_OK);
	}
	static void Hold(zcrpc_server_call *c, const zcrpc_request *, void *a)
	{
		static_cast<Server *>(a)->held = c;
	}
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

struct Done {
	bool done = false;
	zcrpc_status status = ZCRPC_UNKNOWN;
	static void Cb(zcrpc_channel *, const zcrpc_reply *r, void *a)
	{
		auto *d = static_cast<Done *>(a);
		d->done = true;
		d->status = r->status;
	}
};

// One echo call; checks the payload (and attachment) came back.
void EchoCall(zcrpc_channel *ch, const std::vector<uint8_t> &req, const zcrpc_bulk *att,
	      const std::vector<uint8_t> &att_bytes)
{
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.timeout_us = 10 * 1000 * 1000;
	o.attachment = att;
	zcrpc_result r{};
	ASSERT_EQ(zcrpc_call(ch, zcrpc_method_id(kEcho), req.data(), req.size(), &o, &r, sizeof(r)),
		  ZCRPC_OK)
		<< r.message;
	ASSERT_EQ(r.len, req.size());
	EXPECT_EQ(std::memcmp(r.data, req.data(), req.size()), 0);
	ASSERT_EQ(r.attachment_len, att ? att->len : 0);
	if (att)
		EXPECT_EQ(std::memcmp(r.attachment, att_bytes.data(), att->len), 0);
	zcrpc_result_free(&r);
}

void RpcCase(const RxeEnv &env, const Case &k)
{
	Server srv;
	ASSERT_TRUE(srv.Start(env.addr0, k.server_old));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	if (k.client_old)
		zcrpc__worker_test_clear_features(w, kOptional);
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(w, env.addr0.c_str(), srv.port().c_str(), &co, &ch),
		  ZCRPC_OK);

	// The first call connects, with 4 KiB pieces announced (see the top).
	zcrpc__test_write_piece(kPiece);
	EchoCall(ch, Pattern(10, 1), nullptr, {});
	zcrpc__test_write_piece(0);

	// Unary, small: inline payloads.
	for (size_t n = 1; n <= 4000; n += 333)
		EchoCall(ch, Pattern(n, static_cast<uint8_t>(n)), nullptr, {});
	// Above the bulk threshold (16 KiB): the payload goes by RDMA WRITE
	// both ways, split into 4 KiB pieces or not, as negotiated.
	EchoCall(ch, Pattern(co.bulk_threshold + 1, 3), nullptr, {});
	EchoCall(ch, Pattern(40000, 4), nullptr, {});
	EchoCall(ch, Pattern(kSplit, 5), nullptr, {});
	// A bulk part from registered memory, echoed back in place.
	std::vector<uint8_t> att = Pattern(50000, 6);
	zcrpc_mr *mr = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(w), att.data(), att.size(), 0, &mr),
		  ZCRPC_OK);
	zcrpc_bulk b = {mr, 0, att.size()};
	EchoCall(ch, Pattern(100, 7), &b, att);
	b.len = kSplit; // one bulk part per message: the payload stays inline
	EchoCall(ch, Pattern(1000, 8), &b, att);

	// Cancellation: the server sees it, the callback runs CANCELLED.
	Done d;
	zcrpc_call_id id = 0;
	ASSERT_EQ(zcrpc_call_async(ch, zcrpc_method_id(kHold), "h", 1, nullptr, Done::Cb, &d, &id),
		  ZCRPC_OK);
	ASSERT_TRUE(Pump({w}, [&] { return srv.held.load() != nullptr; }, Scaled(5000)));
	ASSERT_EQ(zcrpc_call_cancel(ch, id), ZCRPC_OK);
	ASSERT_TRUE(Pump({w},
			 [&] { return d.done && zcrpc_server_call_cancelled(srv.held.load()); },
			 Scaled(5000)));
	EXPECT_EQ(d.status, ZCRPC_CANCELLED);
	ASSERT_EQ(zcrpc_server_call_reply_any_thread(srv.held.load(), ZCRPC_OK, nullptr, nullptr, 0),
		  ZCRPC_OK);
	EchoCall(ch, Pattern(30, 9), nullptr, {}); // the connection is fine after it

	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
	zcrpc_server_stats ss = srv.Stats();
	EXPECT_EQ(cs.bulk_bad_writes, 0u);
	EXPECT_EQ(cs.protocol_errors, 0u);
	EXPECT_EQ(cs.reconnects, 0u);
	EXPECT_EQ(ss.bulk_bad_writes, 0u);
	EXPECT_EQ(ss.protocol_errors, 0u);
	EXPECT_GE(ss.cancelled, 1u);

	// Orderly close: counted as closed only when both use CLOSE.
	zcrpc_channel_destroy(ch);
	auto until = steady_clock::now() + Scaled(5000);
	while (srv.Stats().conns_closed + srv.Stats().conns_lost < 1 &&
	       steady_clock::now() < until)
		std::this_thread::sleep_for(1ms);
	ss = srv.Stats();
	std::printf("[features] %s: rpc close counted closed %llu, lost %llu\n", k.what,
		    static_cast<unsigned long long>(ss.conns_closed),
		    static_cast<unsigned long long>(ss.conns_lost));
	EXPECT_EQ(ss.conns_closed, k.both_new() ? 1u : 0u);
	EXPECT_EQ(ss.conns_lost, k.both_new() ? 0u : 1u);
	zcrpc_mr_deregister(mr);
	zcrpc_worker_destroy(w);
}

TEST_F(Features, RpcOlderAndNewerPeersBothWays)
{
	for (const Case &k : kCases) {
		SCOPED_TRACE(k.what);
		RpcCase(env_, k);
	}
}

} // namespace
