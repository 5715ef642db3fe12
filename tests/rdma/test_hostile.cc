// A hostile client over rxe (scenarios T18, T29 of the test plan): it speaks
// the raw transport API (zcrpc_conn_*) to a real zcrpc_server and, for a
// fixed time, sends random bytes, mutated valid frames (bit flips, wrong
// lengths, bad metadata, unknown types and flags, huge declared sizes),
// bulk requests whose RDMA WRITE comes with a wrong token, a forged region
// or key, too short or never, grants and replies for nothing, and
// oversized messages (which its own transport must refuse) — reconnecting
// whenever the server closes it. Meanwhile a well-behaved channel client on
// another connection keeps calling Echo with verified payloads, inline and
// bulk. The good client must see no error at all and make progress; the
// server (this process) must survive, count the protocol errors and, once
// the hostile connections are gone, hold exactly what it held before: its
// pool back to the level of one idle connection, no call running or queued.
// Under the ASan build any sanitizer report or leak fails the test process.
//
// ZCRPC_HOSTILE_SECONDS (default 12) sets how long the hostile client runs.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rdma_env.h"
#include "rpc/frame.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

const char *kEcho = "/zcrpc.hostile.Svc/Echo";

// Like ProgressUntil, but sleeping up to 1 ms on the worker's fd when idle:
// six busy-polling threads would starve each other on the guest's two vCPUs.
bool Drive(zcrpc_worker *w, const std::function<bool()> &done, milliseconds timeout)
{
	auto end = steady_clock::now() + timeout;
	while (!done() && steady_clock::now() < end)
		zcrpc_worker_progress(w, 1);
	return done();
}

uint8_t Pat(uint64_t seed, uint64_t k)
{
	return static_cast<uint8_t>((seed * 0x9E3779B1u + k * 131u + (k >> 9)) >> 5);
}

// The server: Echo on its own worker and thread.
class Server {
public:
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::atomic<uint64_t> echo_runs{0};

	bool Start(const std::string &addr)
	{
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_server_create(w, nullptr, &s) != ZCRPC_OK ||
		    zcrpc_server_register(s, kEcho, Echo, this) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load(std::memory_order_relaxed))
				zcrpc_worker_progress(w, 1);
		});
		return true;
	}
	uint16_t port() const { return zcrpc_server_get_port(s); }
	// Stops the thread: from then on the caller owns the worker.
	void Stop()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
	}
	~Server()
	{
		Stop();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}
	zcrpc_server_stats Stats() const
	{
		zcrpc_server_stats st;
		zcrpc_server_get_stats(s, &st, sizeof(st));
		return st;
	}
	// The worker's counters, read on the worker's own thread.
	zcrpc_worker_stats WorkerStats()
	{
		struct P {
			zcrpc_worker_stats st;
			std::atomic<bool> done{false};
		} p;
		if (!thread_.joinable()) {
			zcrpc_worker_get_stats(w, &p.st, sizeof(p.st));
			return p.st;
		}
		EXPECT_EQ(zcrpc_worker_post(w,
					    [](zcrpc_worker *wk, void *a) {
						    auto *pp = static_cast<P *>(a);
						    zcrpc_worker_get_stats(
							    wk, &pp->st,
							    sizeof(pp->st));
						    pp->done = true;
					    },
					    &p),
			  ZCRPC_OK);
		while (!p.done.load())
			std::this_thread::sleep_for(1ms);
		return p.st;
	}

private:
	static void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		static_cast<Server *>(a)->echo_runs++;
		zcrpc_reply_opts o{};
		o.size = sizeof(o);
		if (r->attachment_len)
			o.attachment = &r->attachment_mr;
		zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, &o);
	}
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

// The well-behaved client: Echo calls of every size class, one at a time,
// each verified byte for byte, on its own worker and thread.
class GoodClient {
public:
	std::atomic<uint64_t> ok{0}, errors{0}, bytes{0};
	std::string first_error;

	GoodClient(const std::string &addr, uint16_t port) : addr_(addr), port_(port) {}
	void Start(std::atomic<bool> &go)
	{
		thread_ = std::thread([this, &go] { Run(go); });
	}
	void Stop()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
	}
	~GoodClient() { Stop(); }
	zcrpc_channel_stats stats{};
	std::atomic<bool> warm{false};

private:
	struct Res {
		int calls = 0;
		zcrpc_status st = ZCRPC_UNKNOWN;
		std::string msg;
		std::vector<uint8_t> data;
	};
	static void Done(zcrpc_channel *, const zcrpc_reply *r, void *a)
	{
		auto *res = static_cast<Res *>(a);
		res->calls++;
		res->st = r->status;
		res->msg = r->message ? r->message : "";
		auto *d = static_cast<const uint8_t *>(r->data);
		res->data.assign(d, d + r->len);
	}
	bool Call(zcrpc_worker *w, zcrpc_channel *ch, size_t n, uint64_t seq)
	{
		std::vector<uint8_t> req(n);
		for (size_t k = 0; k < n; k++)
			req[k] = Pat(seq, k);
		Res res;
		zcrpc_status st = zcrpc_call_async(ch, zcrpc_method_id(kEcho), req.data(), n,
						   nullptr, Done, &res, nullptr);
		std::string why;
		if (st != ZCRPC_OK)
			why = std::string("call_async: ") + zcrpc_status_str(st);
		else if (!Drive(w, [&] { return res.calls > 0; }, Scaled(30000)))
			why = "no reply within the deadline";
		else if (res.st != ZCRPC_OK)
			why = std::string(zcrpc_status_str(res.st)) + ": " + res.msg;
		else if (res.data != req)
			why = "reply payload differs";
		if (why.empty()) {
			ok++;
			bytes += n;
			return true;
		}
		if (!errors++)
			first_error = "Echo of " + std::to_string(n) + " bytes: " + why;
		return false;
	}
	void Run(std::atomic<bool> &go)
	{
		zcrpc_worker *w = nullptr;
		zcrpc_channel *ch = nullptr;
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_channel_create(w, addr_.c_str(), std::to_string(port_).c_str(), nullptr,
					 &ch) != ZCRPC_OK) {
			errors++;
			first_error = "could not create the channel";
			warm = true;
			zcrpc_worker_destroy(w);
			return;
		}
		// Inline (up to a slot), just above the bulk threshold, and
		// large: the bulk path both ways.
		const size_t sizes[] = {0,	1,     64,    4032,	 16384,
					16385, 65536, 200000, size_t{1} << 20};
		uint64_t seq = 1;
		Call(w, ch, 8, seq++); // connects
		warm = true;
		while (!go.load() && !stop_.load())
			zcrpc_worker_progress(w, 1);
		while (!stop_.load())
			for (size_t n : sizes)
				if (!stop_.load())
					Call(w, ch, n, seq++);
		zcrpc_channel_get_stats(ch, &stats, sizeof(stats));
		zcrpc_channel_destroy(ch);
		zcrpc_worker_destroy(w);
	}
	std::string addr_;
	uint16_t port_;
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

// The hostile client's view of one connection.
struct Conn {
	zcrpc_conn *c = nullptr;
	bool up = false, closed = false;
	zcrpc_status why = ZCRPC_OK;
	uint64_t frames = 0; // frames from the server
	bool have_grant = false;
	zcrpc_frame grant{};
	uint32_t grant_call = 0;
	uint64_t writes_done = 0, writes_failed = 0;
};

class Hostile : public RdmaTest {};

std::vector<uint8_t> Encode(const zcrpc_frame &f, const std::vector<uint8_t> &body = {})
{
	std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN);
	zcrpc__frame_encode(&f, b.data());
	b.insert(b.end(), body.begin(), body.end());
	return b;
}

} // namespace

TEST_F(Hostile, GarbageFromOneClientNeverReachesAWellBehavedOne)
{
	const char *secs_env = std::getenv("ZCRPC_HOSTILE_SECONDS");
	const int secs = secs_env ? std::atoi(secs_env) : 12;
	Server server;
	ASSERT_TRUE(server.Start(env_.addr0));
	GoodClient good(env_.addr0, server.port());
	std::atomic<bool> go{false};
	good.Start(go);
	while (!good.warm.load())
		std::this_thread::sleep_for(1ms);
	ASSERT_EQ(good.errors.load(), 0u) << good.first_error;
	// What the server holds with one idle, well-behaved connection.
	ASSERT_TRUE([&] {
		auto end = steady_clock::now() + Scaled(10000);
		while (server.Stats().connections != 1 && steady_clock::now() < end)
			std::this_thread::sleep_for(1ms);
		return server.Stats().connections == 1;
	}());
	const zcrpc_worker_stats base = server.WorkerStats();
	const zcrpc_server_stats sbase = server.Stats();
	ASSERT_GT(base.pool_in_use, 0u) << "the good connection's receives are pool slots";
	go = true;

	// ---- the hostile clients: kThreads of them, each on its own worker -----
	// (a connection takes the slow guest most of a second: several in
	// parallel keep the server busy with garbage all the time)
	const unsigned kThreads = 3;
	struct Tally {
		std::atomic<uint64_t> attacks{0}, connects{0}, closes{0}, oversized{0}, grants{0},
			writes{0}, refused{0}, by_kind[12]{};
		std::atomic<int64_t> connect_ms{0};
	} tally;
	auto hostile = [&](unsigned id) {
		zcrpc_worker *hw = nullptr;
		ASSERT_EQ(zcrpc_worker_create(nullptr, &hw), ZCRPC_OK);
		const size_t src_len = size_t{1} << 20;
		std::unique_ptr<uint8_t[]> src(new uint8_t[src_len]);
		for (size_t k = 0; k < src_len; k++)
			src[k] = Pat(99, k);
		zcrpc_mr *src_mr = nullptr;
		ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(hw), src.get(), src_len, 0, &src_mr),
			  ZCRPC_OK);

		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = [](zcrpc_conn *, zcrpc_conn_state s, zcrpc_status st, void *a) {
			auto *c = static_cast<Conn *>(a);
			if (s == ZCRPC_CONN_ESTABLISHED) {
				c->up = true;
			} else if (s == ZCRPC_CONN_CLOSED) {
				c->closed = true;
				c->why = st;
			}
		};
		h.on_recv = [](zcrpc_conn *, const void *d, size_t n, void *a) {
			auto *c = static_cast<Conn *>(a);
			zcrpc_frame f;
			c->frames++;
			// A server only ever sends well-formed frames, even to us.
			EXPECT_EQ(zcrpc__frame_decode(d, n, &f, nullptr, 0), ZCRPC_OK);
			if (f.type == ZCRPC_FRAME_BULK_GRANT && f.call_id == c->grant_call) {
				c->have_grant = true;
				c->grant = f;
			}
		};
		h.on_write_done = [](zcrpc_conn *, void *, zcrpc_status st, void *a) {
			auto *c = static_cast<Conn *>(a);
			(st == ZCRPC_OK ? c->writes_done : c->writes_failed)++;
		};

		std::mt19937_64 rng(0x486f7374696c65ULL + id); // fixed seeds: the same attacks each run
		auto rnd = [&](uint64_t n) { return n ? rng() % n : 0; };
		const uint32_t echo = zcrpc_method_id(kEcho);
		uint32_t next_call = 1;
		auto request = [&](uint32_t method) {
			zcrpc_frame f{};
			f.type = ZCRPC_FRAME_REQUEST;
			f.call_id = next_call++ | 0x00100000u;
			f.method_id = method;
			return f;
		};

		std::unique_ptr<Conn> cur;
		uint64_t connects = 0, closes_seen = 0, attacks = 0, sends_refused = 0;
		uint64_t oversized_refused = 0, grants_seen = 0, hostile_writes = 0;
		uint64_t by_kind[16] = {};
		int64_t connect_ms = 0;
		auto drop = [&] {
			if (cur) {
				zcrpc_conn_destroy(cur->c);
				cur.reset();
			}
		};
		auto connect = [&]() -> bool {
			drop();
			cur.reset(new Conn);
			h.arg = cur.get();
			zcrpc_connect_opts co;
			zcrpc_connect_opts_init(&co);
			if (zcrpc_connect(hw, env_.addr0.c_str(), std::to_string(server.port()).c_str(), &co,
					  &h, &cur->c) != ZCRPC_OK)
				return false;
			connects++;
			Conn *c = cur.get();
			auto t0 = steady_clock::now();
			Drive(hw, [&] { return c->up || c->closed; }, Scaled(10000));
			connect_ms += duration_cast<milliseconds>(steady_clock::now() - t0).count();
			return c->up && !c->closed;
		};
		// Sends @b, progressing while credits are short; false when closed.
		auto send = [&](const std::vector<uint8_t> &b) {
			auto end = steady_clock::now() + Scaled(2000);
			for (;;) {
				zcrpc_status st = zcrpc_conn_send(cur->c, b.data(), b.size());
				if (st == ZCRPC_OK)
					return true;
				if (st != ZCRPC_RESOURCE_EXHAUSTED || cur->closed ||
				    steady_clock::now() > end) {
					sends_refused++;
					return false;
				}
				zcrpc_worker_progress(hw, 1);
			}
		};
		// Lets the server answer (or close): until @n more frames came, the
		// connection closed, or @ms passed.
		auto settle = [&](uint64_t n, int ms) {
			Conn *c = cur.get();
			uint64_t f0 = c->frames;
			Drive(hw, [&] { return c->closed || c->frames >= f0 + n; }, Scaled(ms));
		};

		// The time given, and at least one attack of every kind.
		const auto stop_at = steady_clock::now() + seconds(secs);
		const auto hard_stop = stop_at + Scaled(60000);
		while (steady_clock::now() < stop_at ||
		       (attacks < 12 && steady_clock::now() < hard_stop)) {
			if (!cur || cur->closed) {
				if (cur && cur->closed)
					closes_seen++;
				if (!connect()) {
					std::this_thread::sleep_for(10ms);
					continue;
				}
			}
			zcrpc_conn_stats cs;
			zcrpc_conn_get_stats(cur->c, &cs, sizeof(cs));
			const size_t max_msg = cs.peer_max_msg;
			unsigned kind = static_cast<unsigned>((attacks + 5 * id) % 12); // every kind in turn
			by_kind[kind]++;
			attacks++;
			switch (kind) {
			case 0: { // random bytes, random length
				std::vector<uint8_t> b(rnd(max_msg + 1));
				for (auto &x : b)
					x = static_cast<uint8_t>(rng());
				send(b);
				settle(1, 50);
				break;
			}
			case 1: { // a valid Echo request with 1..4 bits flipped anywhere
				std::vector<uint8_t> p(rnd(200));
				auto f = request(echo);
				f.payload_len = static_cast<uint32_t>(p.size());
				auto b = Encode(f, p);
				for (uint64_t i = 0, n = 1 + rnd(4); i < n; i++)
					b[rnd(b.size())] ^= static_cast<uint8_t>(1u << rnd(8));
				send(b);
				settle(1, 50);
				break;
			}
			case 2: { // lengths that lie, either way, by a little or a lot
				auto f = request(echo);
				std::vector<uint8_t> body(rnd(64));
				const uint32_t lies[] = {1, 2, 63, 0x7fffffffu, 0xffffffffu};
				uint32_t lie = lies[rnd(5)];
				if (rnd(2))
					f.payload_len = static_cast<uint32_t>(body.size()) + lie;
				else
					f.md_len = static_cast<uint16_t>(body.size() + (lie & 0xffff));
				send(Encode(f, body));
				settle(1, 50);
				break;
			}
			case 3: { // bad metadata: zero key, value past the end, 17 pairs
				auto f = request(echo);
				std::vector<uint8_t> md;
				switch (rnd(3)) {
				case 0:
					md = {0, 1, 0, 'v'};
					break;
				case 1:
					md = {1, 0xff, 0x00, 'k', 'v'};
					break;
				default:
					for (int i = 0; i < 17; i++)
						md.insert(md.end(), {1, 0, 0, static_cast<uint8_t>('a' + i)});
				}
				f.md_len = static_cast<uint16_t>(md.size());
				send(Encode(f, md));
				settle(1, 50);
				break;
			}
			case 4: { // unknown types and flags, frames only a server may send
				zcrpc_frame f = request(echo);
				switch (rnd(4)) {
				case 0:
					f.type = static_cast<uint8_t>(rnd(2) ? 0 : 6 + rnd(250));
					break;
				case 1:
					f.flags = static_cast<uint16_t>(4u << rnd(14));
					break;
				case 2:
					f.type = ZCRPC_FRAME_REPLY;
					break;
				default:
					f.type = ZCRPC_FRAME_GOAWAY;
				}
				auto b = Encode(f);
				if (f.type >= 6 || f.type == 0) // encode keeps the byte as given
					b[3] = f.type;
				send(b);
				settle(1, 50);
				break;
			}
			case 5: { // huge declared bulk sizes: above 4 GiB (a protocol error) or
				  // above what the server's bulk cache may hold (refused)
				auto f = request(echo);
				f.flags = ZCRPC_FRAME_F_BULK;
				f.bulk_len = rnd(2) ? ZCRPC_BULK_MAX + 1 + rnd(1u << 30)
						    : (uint64_t{1} << 31) + 1 + rnd((uint64_t{1} << 31) - 1);
				send(Encode(f));
				settle(1, 100);
				break;
			}
			case 6: { // grants and cancels for calls that do not exist
				zcrpc_frame f{};
				f.type = rnd(2) ? ZCRPC_FRAME_BULK_GRANT : ZCRPC_FRAME_CANCEL;
				f.call_id = static_cast<uint32_t>(rng());
				if (f.type == ZCRPC_FRAME_BULK_GRANT) {
					f.bulk_addr = rng() & 0xffffffffffffULL;
					f.bulk_len = 1 + rnd(1 << 20);
					f.bulk_rkey = static_cast<uint32_t>(rng());
					f.bulk_token = static_cast<uint32_t>(rng());
				}
				send(Encode(f));
				settle(1, 50);
				break;
			}
			case 7: { // oversized: the transport refuses it, nothing leaves
				std::vector<uint8_t> b(max_msg + 1 + rnd(4096));
				zcrpc_status st = zcrpc_conn_send(cur->c, b.data(), b.size());
				EXPECT_EQ(st, ZCRPC_INVALID_ARGUMENT) << "oversized message of " << b.size()
								      << " bytes, peer accepts " << max_msg;
				oversized_refused += st == ZCRPC_INVALID_ARGUMENT;
				break;
			}
			case 8: { // valid calls in between: Echo and an unknown method
				auto f = request(rnd(2) ? echo : static_cast<uint32_t>(rng()));
				std::vector<uint8_t> p(rnd(100));
				f.payload_len = static_cast<uint32_t>(p.size());
				send(Encode(f, p));
				settle(1, 200);
				break;
			}
			default: { // 9-11: a bulk request, then abuse its grant
				auto f = request(echo);
				const uint64_t len = uint64_t{4096} << rnd(5); // 4..64 KiB
				f.flags = ZCRPC_FRAME_F_BULK;
				if (rnd(2))
					f.flags |= ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
				f.bulk_len = len;
				cur->have_grant = false;
				cur->grant_call = f.call_id;
				if (!send(Encode(f)))
					break;
				Conn *c = cur.get();
				Drive(hw, [&] { return c->closed || c->have_grant; }, Scaled(2000));
				if (!c->have_grant)
					break;
				grants_seen++;
				EXPECT_GE(c->grant.bulk_len, len);
				zcrpc_remote_region r{c->grant.bulk_addr, c->grant.bulk_len,
						      c->grant.bulk_rkey, 0};
				uint32_t imm = c->grant.bulk_token;
				size_t wlen = static_cast<size_t>(len);
				switch (rnd(6)) {
				case 0: // the right write: the call runs, its reply waits
					break; // for a grant we never send
				case 1: // a wrong token
					imm ^= 1u + static_cast<uint32_t>(rnd(0xffff));
					break;
				case 2: // past the granted region and the server's whole
					// buffer (64 KiB at most here): a forged 1 MiB grant
					r.len = src_len;
					wlen = src_len;
					break;
				case 3: // a wrong key
					r.rkey ^= 0x5a5a5a5au;
					break;
				case 4: // too short
					wlen = static_cast<size_t>(len / 2);
					break;
				default: // never written; cancelled (or not) instead
					if (rnd(2)) {
						zcrpc_frame x{};
						x.type = ZCRPC_FRAME_CANCEL;
						x.call_id = c->grant_call;
						send(Encode(x));
					}
					settle(1, 20);
					wlen = 0;
				}
				if (wlen) {
					hostile_writes++;
					zcrpc_status st = zcrpc_conn_write(c->c, src_mr, 0, wlen, &r, 0, &imm,
									   nullptr);
					if (st == ZCRPC_OK)
						settle(1, 100);
				}
				break;
			}
			}
		}
		if (cur && cur->closed)
			closes_seen++;
		drop();
		zcrpc_mr_deregister(src_mr);
		zcrpc_worker_destroy(hw);
		tally.attacks += attacks;
		tally.connects += connects;
		tally.closes += closes_seen;
		tally.oversized += oversized_refused;
		tally.grants += grants_seen;
		tally.writes += hostile_writes;
		tally.refused += sends_refused;
		tally.connect_ms += connect_ms;
		for (unsigned k = 0; k < 12; k++)
			tally.by_kind[k] += by_kind[k];

	};
	std::vector<std::thread> hostiles;
	for (unsigned i = 0; i < kThreads; i++)
		hostiles.emplace_back(hostile, i);
	for (auto &t : hostiles)
		t.join();

	// ---- the verdict --------------------------------------------------------
	good.Stop();
	std::printf("hostile: %llu attacks over %llu connections (%llu closed by the server), "
		    "%llu oversized refused, %llu grants, %llu forged writes, %llu sends refused; "
		    "%lld ms connecting; good client: %llu calls ok, %llu bytes, %llu errors\n",
		    (unsigned long long)tally.attacks.load(), (unsigned long long)tally.connects.load(),
		    (unsigned long long)tally.closes.load(), (unsigned long long)tally.oversized.load(),
		    (unsigned long long)tally.grants.load(), (unsigned long long)tally.writes.load(),
		    (unsigned long long)tally.refused.load(), (long long)tally.connect_ms.load(),
		    (unsigned long long)good.ok.load(), (unsigned long long)good.bytes.load(),
		    (unsigned long long)good.errors.load());
	EXPECT_EQ(good.errors.load(), 0u) << good.first_error;
	EXPECT_EQ(good.stats.calls_failed, 0u);
	EXPECT_EQ(good.stats.reconnects, 0u) << "the good client lost its connection";
	// Inline and bulk calls kept flowing: at least one every two seconds of
	// attack (the ASan build in a guest on a loaded host made 1.6/s, the
	// plain one 3-4/s; a quiet guest many more).
	EXPECT_GE(good.ok.load(), static_cast<uint64_t>(secs / 2));
	for (unsigned k = 0; k < 12; k++)
		EXPECT_GT(tally.by_kind[k].load(), 0u) << "attack kind " << k << " never ran";
	EXPECT_GE(tally.attacks.load(), 12u * kThreads);
	// Each thread's cycle has at least three attacks that always break the
	// protocol (lying lengths, bad metadata, unknown or server-only types):
	// every thread was closed by the server and reconnected.
	EXPECT_GE(tally.connects.load(), 2u * kThreads);
	EXPECT_GE(tally.closes.load(), kThreads);
	EXPECT_GT(tally.oversized.load(), 0u);
	EXPECT_GT(tally.grants.load(), 0u);
	// The fault landed: the server counted the protocol errors.
	zcrpc_server_stats s1 = server.Stats();
	EXPECT_GE(s1.protocol_errors - sbase.protocol_errors, 3u * kThreads);
	EXPECT_GT(s1.unimplemented, sbase.unimplemented);

	// Once every hostile connection is gone the server holds what it held
	// with the one idle connection of the good client... which is gone
	// too now: wait for the count to drop to zero connections.
	ASSERT_TRUE([&] {
		auto end = steady_clock::now() + Scaled(20000);
		while (server.Stats().connections != 0 && steady_clock::now() < end)
			std::this_thread::sleep_for(1ms);
		return server.Stats().connections == 0;
	}()) << server.Stats().connections << " connections left at the server";
	server.Stop(); // this thread owns the server's worker from here on
	Drive(server.w, [&] {
		zcrpc_worker_stats ws;
		zcrpc_worker_get_stats(server.w, &ws, sizeof(ws));
		return ws.conns == 0;
	}, Scaled(10000));
	zcrpc_worker_stats end;
	zcrpc_worker_get_stats(server.w, &end, sizeof(end));
	s1 = server.Stats();
	EXPECT_EQ(s1.running, 0u);
	EXPECT_EQ(s1.queued, 0u);
	EXPECT_EQ(end.conns, 0u);
	// The pool: every slot the connections took came back (the one idle
	// connection of the baseline held base.pool_in_use of them).
	EXPECT_EQ(end.pool_in_use, 0u) << "baseline with one connection: " << base.pool_in_use;
	EXPECT_EQ(end.pool_bad_frees, base.pool_bad_frees);
	EXPECT_GT(end.msgs_recv, base.msgs_recv);
	EXPECT_GT(RxeCounter(env_, "rcvd_pkts"), 0);
}
