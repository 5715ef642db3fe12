// The server-side call's lifetime over rxe (issue 11): what a call owns
// until its reply (the request view, the protobuf-c closure), replies that
// go wrong, and replies made from helper threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pbtest.pb-c.h"
#include "rdma_env.h"
#include "zcrpc/pb.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

const char *kHold = "/zcrpc.test.Life/Hold";

// A server on its own worker and thread; handlers and on_tick run there.
// A shutdown requested through shutdown_grace_ms runs on that thread too.
// Stats() may be called from any thread: the server's thread publishes a
// copy after each progress call (the server itself is the worker's only).
class LifeServer {
public:
	std::function<void(zcrpc_server_call *, const zcrpc_request *)> on_hold;
	std::function<void()> on_tick;
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::atomic<int> hold_runs{0};
	std::atomic<int> shutdown_grace_ms{-1};
	std::atomic<bool> shutdown_done{false};
	std::atomic<zcrpc_status> shutdown_status{ZCRPC_UNKNOWN};

	bool Start(const std::string &addr, ProtobufCService *pb = nullptr)
	{
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_server_create(w, nullptr, &s) != ZCRPC_OK ||
		    zcrpc_server_register(s, kHold, Hold, this) != ZCRPC_OK ||
		    (pb && zcrpc_pb_server_register(s, pb) != ZCRPC_OK) ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load()) {
				zcrpc_worker_progress(w, 0);
				Publish();
				if (on_tick)
					on_tick();
				int g = shutdown_grace_ms.exchange(-1);
				if (g >= 0) {
					shutdown_status = zcrpc_server_shutdown(s, g);
					Publish();
					shutdown_done = true;
				}
			}
		});
		return true;
	}
	uint16_t port() const { return zcrpc_server_get_port(s); }
	void Stop()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
	}
	~LifeServer()
	{
		Stop();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}
	zcrpc_server_stats Stats()
	{
		if (!thread_.joinable() || std::this_thread::get_id() == thread_.get_id()) {
			zcrpc_server_stats st;
			zcrpc_server_get_stats(s, &st, sizeof(st));
			return st;
		}
		std::lock_guard<std::mutex> g(stats_mu_);
		return stats_;
	}

private:
	void Publish()
	{
		std::lock_guard<std::mutex> g(stats_mu_);
		zcrpc_server_get_stats(s, &stats_, sizeof(stats_));
	}
	std::mutex stats_mu_;
	zcrpc_server_stats stats_{};
	static void Hold(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		auto *self = static_cast<LifeServer *>(a);
		self->hold_runs++;
		if (self->on_hold)
			self->on_hold(c, r);
		else
			zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, nullptr);
	}
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

struct Result {
	int calls = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message, data;
};

void Collect(zcrpc_channel *, const zcrpc_reply *r, void *arg)
{
	auto *res = static_cast<Result *>(arg);
	res->calls++;
	res->status = r->status;
	res->message = r->message ? r->message : "";
	res->data.assign(static_cast<const char *>(r->data), r->len);
}

struct Client {
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	Client(const std::string &addr, uint16_t port)
	{
		EXPECT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
		EXPECT_EQ(zcrpc_channel_create(w, addr.c_str(), std::to_string(port).c_str(), nullptr,
					       &ch),
			  ZCRPC_OK);
	}
	~Client()
	{
		zcrpc_channel_destroy(ch);
		zcrpc_worker_destroy(w);
	}
	bool Wait(const std::function<bool()> &f, int ms = 60000)
	{
		return ProgressUntil(w, f, Scaled(ms));
	}
};

bool AllDone(const std::vector<Result> &res)
{
	for (auto &r : res)
		if (!r.calls)
			return false;
	return true;
}

// What a request view said when its handler ran: every field and pointer,
// and deep copies of what they point to.
struct Snap {
	zcrpc_request v{};
	std::string payload;
	std::vector<std::string> keys, values;
};

Snap Take(const zcrpc_request *r)
{
	Snap s;
	s.v = *r;
	s.payload.assign(static_cast<const char *>(r->data), r->len);
	for (size_t k = 0; k < r->n_md; k++) {
		s.keys.emplace_back(r->md[k].key, r->md[k].key_len);
		s.values.emplace_back(static_cast<const char *>(r->md[k].value), r->md[k].value_len);
	}
	return s;
}

// "" when @r still says what @s recorded; else the first difference. The
// scalars and pointers are compared before anything is dereferenced.
std::string Differs(const zcrpc_request *r, const Snap &s)
{
	if (!r)
		return "no request view";
	if (r->method_id != s.v.method_id || r->timeout_us != s.v.timeout_us ||
	    r->n_md != s.v.n_md || r->len != s.v.len || r->data != s.v.data || r->md != s.v.md)
		return "timeout_us=" + std::to_string(r->timeout_us) +
		       " n_md=" + std::to_string(r->n_md) + " len=" + std::to_string(r->len) +
		       " (was " + std::to_string(s.v.timeout_us) + ", " +
		       std::to_string(s.v.n_md) + ", " + std::to_string(s.v.len) + ")";
	if (std::string(static_cast<const char *>(r->data), r->len) != s.payload)
		return "payload changed";
	for (size_t k = 0; k < r->n_md; k++)
		if (std::string(r->md[k].key, r->md[k].key_len) != s.keys[k] ||
		    std::string(static_cast<const char *>(r->md[k].value), r->md[k].value_len) !=
			    s.values[k])
			return "metadata pair " + std::to_string(k) + " changed";
	return "";
}

// The metadata and deadline call @i is sent with, and the check that a
// request view carries them.
struct CallSpec {
	std::string idx, tag;
	zcrpc_md md[2];
	int64_t timeout_us;
	explicit CallSpec(int i)
	    : idx(std::to_string(i)), tag("tag-" + std::to_string(i * 7919 % 1000) + "-x"),
	      timeout_us(static_cast<int64_t>((120000 + i) * 1000 * TimeScale()))
	{
		md[0] = zcrpc_md{"idx", 3, idx.data(), idx.size()};
		md[1] = zcrpc_md{"tag", 3, tag.data(), tag.size()};
	}
	CallSpec(const CallSpec &) = delete; // md points into the strings
	CallSpec &operator=(const CallSpec &) = delete;
	std::string Mismatch(const Snap &s) const
	{
		if (s.keys.size() != 2 || s.keys[0] != "idx" || s.values[0] != idx ||
		    s.keys[1] != "tag" || s.values[1] != tag)
			return "metadata of another call";
		// Time left when it arrived: below what was sent, within a minute.
		if (s.v.timeout_us > timeout_us ||
		    s.v.timeout_us < timeout_us - static_cast<int64_t>(60e6 * TimeScale()))
			return "deadline " + std::to_string(s.v.timeout_us) + " for " +
			       std::to_string(timeout_us);
		return "";
	}
};

// The call number in a view's first metadata value; -1 when there is none.
int IdxOf(const Snap &s)
{
	if (s.values.empty() || s.values[0].empty() || s.values[0].size() > 6)
		return -1;
	int i = 0;
	for (char ch : s.values[0]) {
		if (ch < '0' || ch > '9')
			return -1;
		i = i * 10 + (ch - '0');
	}
	return i;
}

// Replies handed to a helper thread, taken in random order.
class Helper {
public:
	explicit Helper(uint32_t seed) : rng_(seed)
	{
		t_ = std::thread([this] { Run(); });
	}
	~Helper()
	{
		{
			std::lock_guard<std::mutex> g(mu_);
			stop_ = true;
		}
		cv_.notify_all();
		t_.join();
	}
	void Push(std::function<void()> f)
	{
		{
			std::lock_guard<std::mutex> g(mu_);
			q_.push_back(std::move(f));
		}
		cv_.notify_all();
	}

private:
	void Run()
	{
		std::unique_lock<std::mutex> g(mu_);
		for (;;) {
			cv_.wait_for(g, 2ms);
			if (q_.empty()) {
				if (stop_)
					return;
				continue;
			}
			size_t k = std::uniform_int_distribution<size_t>(0, q_.size() - 1)(rng_);
			auto f = std::move(q_[k]);
			q_.erase(q_.begin() + static_cast<std::ptrdiff_t>(k));
			g.unlock();
			f();
			g.lock();
		}
	}
	std::mutex mu_;
	std::condition_variable cv_;
	std::deque<std::function<void()>> q_;
	bool stop_ = false;
	std::mt19937 rng_;
	std::thread t_;
};

int64_t NowNs()
{
	return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

// A reply delay of 0-300 ms (scaled).
int64_t DelayNs(std::mt19937 &rng)
{
	return std::uniform_int_distribution<int64_t>(0, static_cast<int64_t>(300e6 * TimeScale()))(
		rng);
}

class CallLifetime : public RdmaTest {};

constexpr int kCalls = 1000;

} // namespace

// Item 2: each of 1,000 handlers keeps its call and replies 0-300 ms later,
// in random order, half from a timer on the worker and half from a helper
// thread; at reply time its request view must still be its own.
TEST_F(CallLifetime, RequestViewOfThousandDeferredCallsStaysTheirOwnUntilTheReply)
{
	struct Held {
		zcrpc_server_call *c;
		const zcrpc_request *r;
		Snap snap;
	};
	std::multimap<int64_t, std::shared_ptr<Held>> held; // by due time; worker thread only
	std::mt19937 rng(11);
	std::mutex mu;
	int mismatches = 0;
	std::atomic<int> wrong_at_handler{0};
	std::string first;
	auto check = [&](const Held &h) {
		std::string d = Differs(h.r, h.snap);
		if (d.empty())
			return;
		std::lock_guard<std::mutex> g(mu);
		if (!mismatches++)
			first = "call " + std::to_string(IdxOf(h.snap)) + " saw " + d;
	};
	std::deque<CallSpec> specs; // never moved
	for (int i = 0; i < kCalls; i++)
		specs.emplace_back(i);
	LifeServer server;
	Helper helper(7);
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *r) {
		auto h = std::make_shared<Held>(Held{c, r, Take(r)});
		int i = IdxOf(h->snap);
		if (i < 0 || i >= kCalls || !specs[static_cast<size_t>(i)].Mismatch(h->snap).empty())
			wrong_at_handler++;
		held.emplace(NowNs() + DelayNs(rng), h);
	};
	server.on_tick = [&] {
		int64_t now = NowNs();
		while (!held.empty() && held.begin()->first <= now) {
			auto h = held.begin()->second;
			held.erase(held.begin());
			std::string rep = "ok-" + h->snap.payload;
			if (rng() & 1) { // from the timer, on the worker
				check(*h);
				EXPECT_EQ(zcrpc_server_call_reply(h->c, ZCRPC_OK, nullptr, rep.data(), rep.size(),
							   nullptr),
					  ZCRPC_OK);
			} else {
				helper.Push([h, rep, &check] {
					check(*h);
					EXPECT_EQ(zcrpc_server_call_reply_any_thread(h->c, ZCRPC_OK, nullptr,
									      rep.data(), rep.size()),
						  ZCRPC_OK);
				});
			}
		}
	};
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	std::vector<Result> res(kCalls);
	for (int i = 0; i < kCalls; i++) {
		auto &sp = specs[static_cast<size_t>(i)];
		zcrpc_call_opts o;
		zcrpc_call_opts_init(&o);
		o.md = sp.md;
		o.n_md = 2;
		o.timeout_us = sp.timeout_us;
		std::string p = "call-" + sp.idx;
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), p.data(), p.size(), &o,
					   Collect, &res[static_cast<size_t>(i)], nullptr),
			  ZCRPC_OK);
	}
	ASSERT_TRUE(cl.Wait([&] { return AllDone(res); }));
	int ok = 0;
	for (int i = 0; i < kCalls; i++) {
		auto &r = res[static_cast<size_t>(i)];
		EXPECT_EQ(r.calls, 1);
		if (r.status == ZCRPC_OK && r.data == "ok-call-" + std::to_string(i))
			ok++;
	}
	EXPECT_EQ(ok, kCalls);
	EXPECT_EQ(wrong_at_handler.load(), 0);
	std::lock_guard<std::mutex> g(mu);
	EXPECT_EQ(mismatches, 0) << mismatches << " of " << kCalls
				 << " request views were not their own at reply time; first: " << first;
	printf("request views checked at reply: %d, not their own: %d %s\n", kCalls, mismatches,
	       first.c_str());
}

namespace {

// The protobuf-c service of the tests below, named for
// ZCRPC__PBTEST__TEST__INIT(life_). Later keeps the closure for the test's
// timer or helper thread; Fail calls its closure twice (f_int32 says how).
struct PbHeld {
	ProtobufCClosure closure;
	void *cd;
	const Zcrpc__Pbtest__All *in;
	Snap snap;
};
std::multimap<int64_t, std::shared_ptr<PbHeld>> *g_pb_held; // worker thread only
std::vector<PbHeld> *g_pb_twice;			     // worker thread only
std::mt19937 *g_pb_rng;
Helper *g_pb_helper;

void life_echo(Zcrpc__Pbtest__Test_Service *, const Zcrpc__Pbtest__All *in,
	       Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	closure(in, cd);
}

void life_later(Zcrpc__Pbtest__Test_Service *, const Zcrpc__Pbtest__All *in,
		Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	const zcrpc_request *r = zcrpc_pb_server_get_request(cd);
	auto h = std::make_shared<PbHeld>(
		PbHeld{reinterpret_cast<ProtobufCClosure>(closure), cd, in, r ? Take(r) : Snap{}});
	g_pb_held->emplace(NowNs() + DelayNs(*g_pb_rng), h);
}

void life_fail(Zcrpc__Pbtest__Test_Service *, const Zcrpc__Pbtest__All *in,
	       Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	auto cl = reinterpret_cast<ProtobufCClosure>(closure);
	const ProtobufCMessage *m = &in->base;
	switch (in->f_int32 % 3) {
	case 0: // twice inside the handler
		cl(m, cd);
		cl(m, cd);
		break;
	case 1: // twice from a helper thread
		g_pb_helper->Push([cl, m, cd] {
			cl(m, cd);
			cl(m, cd);
		});
		break;
	default: // once now, once later on the worker, after other calls ran
		cl(m, cd);
		g_pb_twice->push_back(PbHeld{cl, cd, nullptr, Snap{}});
		break;
	}
}

void life_big(Zcrpc__Pbtest__Test_Service *, const Zcrpc__Pbtest__Size *,
	      Zcrpc__Pbtest__All_Closure closure, void *cd)
{
	closure(nullptr, cd);
}

#define life_missing nullptr

struct PbGot {
	int calls = 0;
	bool null_msg = true;
	int32_t f_int32 = -1;
};

void OnPb(const Zcrpc__Pbtest__All *m, void *arg)
{
	auto *g = static_cast<PbGot *>(arg);
	g->calls++;
	g->null_msg = m == nullptr;
	if (m)
		g->f_int32 = m->f_int32;
}

// A pb server and client for the tests below.
struct PbRig {
	Zcrpc__Pbtest__Test_Service impl = ZCRPC__PBTEST__TEST__INIT(life_);
	std::multimap<int64_t, std::shared_ptr<PbHeld>> held;
	std::vector<PbHeld> twice;
	std::mt19937 rng{5};
	Helper helper{9};
	LifeServer server;
	PbRig()
	{
		g_pb_held = &held;
		g_pb_twice = &twice;
		g_pb_rng = &rng;
		g_pb_helper = &helper;
	}
};

bool AllDone(const std::vector<PbGot> &got)
{
	for (auto &g : got)
		if (!g.calls)
			return false;
	return true;
}

} // namespace

// Item 2 through the protobuf-c glue: zcrpc_pb_server_get_request() at the time
// the closure runs, 1,000 calls, replied in random order from a timer and a
// helper thread.
TEST_F(CallLifetime, PbRequestViewOfThousandDeferredCallsStaysTheirOwnUntilTheClosure)
{
	PbRig rig;
	std::mutex mu;
	int mismatches = 0;
	std::atomic<int> view_after_closure{0};
	std::string first;
	std::deque<CallSpec> specs; // never moved
	for (int i = 0; i < kCalls; i++)
		specs.emplace_back(i);
	auto check = [&](const PbHeld &h) {
		std::string d = Differs(zcrpc_pb_server_get_request(h.cd), h.snap);
		int i = IdxOf(h.snap);
		if (d.empty() && (i < 0 || i >= kCalls || i != h.in->f_int32))
			d = "metadata of another call";
		if (d.empty())
			d = specs[static_cast<size_t>(i)].Mismatch(h.snap);
		if (d.empty())
			return;
		std::lock_guard<std::mutex> g(mu);
		if (!mismatches++)
			first = "call " + std::to_string(h.in->f_int32) + " saw " + d;
	};
	rig.server.on_tick = [&] {
		int64_t now = NowNs();
		while (!rig.held.empty() && rig.held.begin()->first <= now) {
			auto h = rig.held.begin()->second;
			rig.held.erase(rig.held.begin());
			if (rig.rng() & 1) {
				check(*h);
				h->closure(&h->in->base, h->cd);
				if (zcrpc_pb_server_get_request(h->cd))
					view_after_closure++;
			} else {
				rig.helper.Push([h, &check] {
					check(*h);
					h->closure(&h->in->base, h->cd);
				});
			}
		}
	};
	ASSERT_TRUE(rig.server.Start(env_.addr0, &rig.impl.base));
	Client cl(env_.addr0, rig.server.port());
	ProtobufCService *svc = nullptr;
	ASSERT_EQ(zcrpc_pb_client_create(cl.ch, &zcrpc__pbtest__test__descriptor, &svc), ZCRPC_OK);
	std::vector<PbGot> got(kCalls);
	std::vector<Zcrpc__Pbtest__All> msgs(kCalls);
	for (int i = 0; i < kCalls; i++) {
		auto &sp = specs[static_cast<size_t>(i)];
		zcrpc_call_opts o;
		zcrpc_call_opts_init(&o);
		o.md = sp.md;
		o.n_md = 2;
		o.timeout_us = sp.timeout_us;
		ASSERT_EQ(zcrpc_pb_client_set_opts(svc, &o), ZCRPC_OK);
		auto &m = msgs[static_cast<size_t>(i)];
		zcrpc__pbtest__all__init(&m);
		m.f_int32 = i;
		zcrpc__pbtest__test__later(svc, &m, OnPb, &got[static_cast<size_t>(i)]);
	}
	ASSERT_TRUE(cl.Wait([&] { return AllDone(got); }));
	int ok = 0;
	for (int i = 0; i < kCalls; i++) {
		auto &g = got[static_cast<size_t>(i)];
		EXPECT_EQ(g.calls, 1);
		if (!g.null_msg && g.f_int32 == i)
			ok++;
	}
	EXPECT_EQ(ok, kCalls);
	EXPECT_EQ(view_after_closure.load(), 0); // pb.h: NULL once the closure ran
	protobuf_c_service_destroy(svc);
	std::lock_guard<std::mutex> g(mu);
	EXPECT_EQ(mismatches, 0) << mismatches << " of " << kCalls
				 << " request views were not their own when the closure ran; first: "
				 << first;
	printf("pb request views checked at the closure: %d, not their own: %d %s\n", kCalls,
	       mismatches, first.c_str());
}

// Item 3: a handler that calls its closure twice (inside the handler, from
// a helper thread, or later after other calls ran) gets the first reply
// sent and the second ignored (and counted); nothing reads freed memory
// (run under ASan).
TEST_F(CallLifetime, PbClosureCalledTwiceIsIgnoredAndCounted)
{
	PbRig rig;
	const int n = 30;
	size_t twice_seen = 0;
	uint64_t ignored0 = zcrpc_pb_server_get_closures_ignored();
	std::atomic<bool> late_done{false};
	rig.server.on_tick = [&] {
		// The late second calls, once every call was answered and more
		// calls came and went since.
		if (rig.twice.size() == static_cast<size_t>(n / 3) && !late_done &&
		    rig.server.Stats().replies >= static_cast<uint64_t>(n + n)) {
			for (auto &t : rig.twice)
				t.closure(nullptr, t.cd);
			twice_seen = rig.twice.size();
			late_done = true;
		}
	};
	ASSERT_TRUE(rig.server.Start(env_.addr0, &rig.impl.base));
	Client cl(env_.addr0, rig.server.port());
	ProtobufCService *svc = nullptr;
	ASSERT_EQ(zcrpc_pb_client_create(cl.ch, &zcrpc__pbtest__test__descriptor, &svc), ZCRPC_OK);
	std::vector<PbGot> got(n), echo(n);
	std::vector<Zcrpc__Pbtest__All> msgs(n);
	for (int i = 0; i < n; i++) {
		auto &m = msgs[static_cast<size_t>(i)];
		zcrpc__pbtest__all__init(&m);
		m.f_int32 = i;
		zcrpc__pbtest__test__fail(svc, &m, OnPb, &got[static_cast<size_t>(i)]);
	}
	ASSERT_TRUE(cl.Wait([&] { return AllDone(got); }));
	// Other calls, whose memory may take the place of the freed ones.
	for (int i = 0; i < n; i++)
		zcrpc__pbtest__test__echo(svc, &msgs[static_cast<size_t>(i)], OnPb,
					  &echo[static_cast<size_t>(i)]);
	ASSERT_TRUE(cl.Wait([&] { return AllDone(echo) && late_done.load(); }));
	// A little longer: nothing more may arrive.
	cl.Wait([] { return false; }, 300);
	for (int i = 0; i < n; i++) {
		auto &g = got[static_cast<size_t>(i)];
		EXPECT_EQ(g.calls, 1) << i;
		EXPECT_FALSE(g.null_msg) << i;
		EXPECT_EQ(g.f_int32, i);
		EXPECT_EQ(echo[static_cast<size_t>(i)].calls, 1);
	}
	EXPECT_EQ(twice_seen, static_cast<size_t>(n / 3));
	zcrpc_server_stats st = rig.server.Stats();
	EXPECT_EQ(st.running, 0u);
	EXPECT_EQ(st.replies, static_cast<uint64_t>(2 * n));
	uint64_t ignored = zcrpc_pb_server_get_closures_ignored() - ignored0;
	EXPECT_EQ(ignored, static_cast<uint64_t>(n));
	protobuf_c_service_destroy(svc);
	printf("second closure calls: %d, ignored and counted: %llu; replies %llu for %d calls\n",
	       n, static_cast<unsigned long long>(ignored),
	       static_cast<unsigned long long>(st.replies), 2 * n);
}

// Item 4: a reply with a status outside gRPC's codes goes out as UNKNOWN;
// a reply with bad arguments is answered INTERNAL; either way the call is
// freed and the client gets an answer, not its deadline.
TEST_F(CallLifetime, InvalidStatusBecomesUnknownAndBadRepliesStillFreeTheCall)
{
	LifeServer server;
	std::vector<zcrpc_status> returned;
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *r) {
		std::string what(static_cast<const char *>(r->data), r->len);
		zcrpc_reply_opts o{};
		zcrpc_status st;
		if (what == "status17") {
			st = zcrpc_server_call_reply(c, static_cast<zcrpc_status>(17), "seventeen", nullptr, 0,
					      nullptr);
		} else if (what == "status-1") {
			st = zcrpc_server_call_reply(c, static_cast<zcrpc_status>(-1), nullptr, nullptr, 0,
					      nullptr);
		} else if (what == "shortopts") {
			o.size = 1;
			st = zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, "x", 1, &o);
		} else if (what == "nulldata") {
			st = zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, nullptr, 5, nullptr);
		} else if (what == "nullfill") {
			st = zcrpc_server_call_reply_fill(c, 5, nullptr, nullptr, nullptr);
		} else {
			st = zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, nullptr);
		}
		returned.push_back(st);
	};
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	const std::vector<std::string> what = {"status17", "status-1", "shortopts", "nulldata",
					       "nullfill"};
	std::vector<Result> res(what.size());
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.timeout_us = static_cast<int64_t>(5e6 * TimeScale()); // so the old code fails, not hangs
	auto t0 = steady_clock::now();
	for (size_t i = 0; i < what.size(); i++)
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), what[i].data(),
					   what[i].size(), &o, Collect, &res[i], nullptr),
			  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return AllDone(res); }));
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0).count();
	const zcrpc_status want[] = {ZCRPC_UNKNOWN, ZCRPC_UNKNOWN, ZCRPC_INTERNAL, ZCRPC_INTERNAL,
				     ZCRPC_INTERNAL};
	for (size_t i = 0; i < what.size(); i++) {
		EXPECT_EQ(res[i].calls, 1);
		EXPECT_EQ(res[i].status, want[i]) << what[i] << ": " << res[i].message;
		printf("%s: client got %s \"%s\"\n", what[i].c_str(), zcrpc_status_str(res[i].status),
		       res[i].message.c_str());
	}
	EXPECT_EQ(res[0].message, "seventeen");
	// The connection and the server are fine.
	Result ok;
	ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "fine", 4, nullptr, Collect, &ok,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return ok.calls > 0; }));
	EXPECT_EQ(ok.status, ZCRPC_OK);
	zcrpc_server_stats st = server.Stats();
	EXPECT_EQ(st.running, 0u);
	EXPECT_EQ(st.invalid_status, 2u);
	printf("server: running %u, replies %llu, invalid_status %llu; client waited %lld ms\n",
	       st.running, static_cast<unsigned long long>(st.replies),
	       static_cast<unsigned long long>(st.invalid_status), static_cast<long long>(took));
	server.Stop();
	ASSERT_EQ(returned.size(), what.size() + 1);
	EXPECT_EQ(returned[0], ZCRPC_OK);
	EXPECT_EQ(returned[1], ZCRPC_OK);
	EXPECT_EQ(returned[2], ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(returned[3], ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(returned[4], ZCRPC_INVALID_ARGUMENT);
}

namespace {

// Valid UTF-8 (well-formed sequences only; no overlong or surrogate checks
// needed for the strings below).
bool Utf8Ok(const std::string &s)
{
	size_t i = 0;
	while (i < s.size()) {
		unsigned char b = static_cast<unsigned char>(s[i]);
		size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
		if (!n || i + n > s.size())
			return false;
		for (size_t k = 1; k < n; k++)
			if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80)
				return false;
		i += n;
	}
	return true;
}

} // namespace

// Item 10, end to end: an error message longer than 512 bytes arrives cut
// at a character boundary, whatever the width of the character at the cut.
TEST_F(CallLifetime, LongStatusMessageArrivesCutAtACharacterBoundary)
{
	LifeServer server;
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *r) {
		std::string m(static_cast<const char *>(r->data), r->len);
		zcrpc_server_call_reply(c, ZCRPC_NOT_FOUND, m.c_str(), nullptr, 0, nullptr);
	};
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	// A character of 1-4 bytes straddling (or ending at) byte 512.
	struct Case {
		std::string msg;
		size_t want;
	};
	std::vector<Case> cases = {
		{std::string(511, 'a') + "\xc3\xa9" + "tail", 511},	    // é over 511-512
		{std::string(510, 'a') + "\xe2\x82\xac" + "tail", 510},	    // € over 510-512
		{std::string(509, 'a') + "\xf0\x9f\x98\x80" + "tail", 509}, // 😀 over 509-512
		{std::string(511, 'a') + "\xf0\x9f\x98\x80", 511},	    // 😀 from 511
		{std::string(508, 'a') + "\xf0\x9f\x98\x80" + "tail", 512}, // ends at 512
		{std::string(600, 'b'), 512},
		{std::string(510, 'a') + "\xc3\xa9", 512}, // exactly 512: whole
	};
	std::vector<Result> res(cases.size());
	for (size_t i = 0; i < cases.size(); i++)
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), cases[i].msg.data(),
					   cases[i].msg.size(), nullptr, Collect, &res[i], nullptr),
			  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return AllDone(res); }));
	for (size_t i = 0; i < cases.size(); i++) {
		EXPECT_EQ(res[i].status, ZCRPC_NOT_FOUND);
		EXPECT_EQ(res[i].message.size(), cases[i].want) << i;
		EXPECT_TRUE(Utf8Ok(res[i].message)) << i;
		EXPECT_EQ(res[i].message, cases[i].msg.substr(0, res[i].message.size())) << i;
		printf("case %zu: %zu bytes sent, %zu arrived, valid UTF-8 %d\n", i,
		       cases[i].msg.size(), res[i].message.size(), Utf8Ok(res[i].message) ? 1 : 0);
	}
}

// Item 17: a handler hands its call to a helper thread, which watches
// zcrpc_server_call_cancelled() and replies with
// zcrpc_server_call_reply_any_thread(); zcrpc_server_shutdown() waits within its
// grace for replies made from helper threads; when the grace is too short,
// the helpers see their calls cancelled, reply, and the application waits
// for `running` to reach 0 before zcrpc_server_destroy (rpc.h).
TEST_F(CallLifetime, OffThreadRepliesSeeCancellationAndShutdownWaitsForThem)
{
	std::mutex mu;
	std::vector<std::thread> helpers;
	std::atomic<int> saw_cancel{0}, replied{0};
	auto server = std::make_unique<LifeServer>();
	server->on_hold = [&](zcrpc_server_call *c, const zcrpc_request *r) {
		std::string what(static_cast<const char *>(r->data), r->len);
		std::lock_guard<std::mutex> g(mu);
		helpers.emplace_back([c, what, &saw_cancel, &replied] {
			if (what == "slow") {
				std::this_thread::sleep_for(Scaled(200));
			} else { // "watch": reply once the call is cancelled
				auto end = steady_clock::now() + Scaled(30000);
				while (!zcrpc_server_call_cancelled(c) && steady_clock::now() < end)
					std::this_thread::sleep_for(1ms);
				if (zcrpc_server_call_cancelled(c))
					saw_cancel++;
			}
			EXPECT_EQ(zcrpc_server_call_reply_any_thread(c, ZCRPC_OK, nullptr, what.data(),
							      what.size()),
				  ZCRPC_OK);
			replied++;
		});
	};
	ASSERT_TRUE(server->Start(env_.addr0));
	auto join = [&] {
		std::lock_guard<std::mutex> g(mu);
		for (auto &t : helpers)
			t.join();
		helpers.clear();
	};
	{
		// 1. The client cancels: the helper thread sees it.
		Client cl(env_.addr0, server->port());
		std::vector<Result> res(4);
		std::vector<zcrpc_call_id> ids(4);
		for (size_t i = 0; i < res.size(); i++)
			ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "watch", 5, nullptr,
						   Collect, &res[i], &ids[i]),
				  ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return server->hold_runs.load() == 4; }));
		for (auto id : ids)
			ASSERT_EQ(zcrpc_call_cancel(cl.ch, id), ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return AllDone(res) && replied.load() == 4; }));
		for (auto &r : res)
			EXPECT_EQ(r.status, ZCRPC_CANCELLED);
		EXPECT_EQ(saw_cancel.load(), 4);
		ASSERT_TRUE(cl.Wait([&] { return server->Stats().running == 0; }));
		join();

		// 2. Shutdown with a grace long enough: it waits for the
		// helpers' replies, and every client gets its reply.
		std::vector<Result> slow(20);
		for (auto &r : slow)
			ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "slow", 4, nullptr,
						   Collect, &r, nullptr),
				  ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return server->hold_runs.load() == 24; }));
		server->shutdown_grace_ms = static_cast<int>(10000 * TimeScale());
		ASSERT_TRUE(cl.Wait([&] { return AllDone(slow) && server->shutdown_done.load(); }));
		EXPECT_EQ(server->shutdown_status.load(), ZCRPC_OK);
		for (auto &r : slow) {
			EXPECT_EQ(r.status, ZCRPC_OK) << r.message;
			EXPECT_EQ(r.data, "slow");
		}
		EXPECT_EQ(server->Stats().running, 0u);
		join();
	}
	// 3. A grace too short: the helpers see their calls cancelled when
	// the connections close, reply, and once `running` is 0 the server
	// can be destroyed (ASan checks nothing touches freed calls).
	server = std::make_unique<LifeServer>();
	server->on_hold = [&](zcrpc_server_call *c, const zcrpc_request *) {
		std::lock_guard<std::mutex> g(mu);
		helpers.emplace_back([c, &saw_cancel, &replied] {
			auto end = steady_clock::now() + Scaled(30000);
			while (!zcrpc_server_call_cancelled(c) && steady_clock::now() < end)
				std::this_thread::sleep_for(1ms);
			if (zcrpc_server_call_cancelled(c))
				saw_cancel++;
			zcrpc_server_call_reply_any_thread(c, ZCRPC_OK, nullptr, "late", 4);
			replied++;
		});
	};
	ASSERT_TRUE(server->Start(env_.addr0));
	saw_cancel = 0;
	replied = 0;
	{
		Client cl(env_.addr0, server->port());
		std::vector<Result> res(8);
		for (auto &r : res)
			ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "x", 1, nullptr,
						   Collect, &r, nullptr),
				  ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return server->hold_runs.load() == 8; }));
		server->shutdown_grace_ms = 50;
		ASSERT_TRUE(cl.Wait([&] { return AllDone(res) && server->shutdown_done.load(); }));
		EXPECT_EQ(server->shutdown_status.load(), ZCRPC_DEADLINE_EXCEEDED);
		for (auto &r : res)
			EXPECT_EQ(r.status, ZCRPC_UNAVAILABLE) << r.message;
	}
	// What rpc.h asks before zcrpc_server_destroy: every call replied to.
	auto end = steady_clock::now() + Scaled(30000);
	while ((replied.load() < 8 || server->Stats().running) && steady_clock::now() < end)
		std::this_thread::sleep_for(1ms); // the server's thread drives progress
	EXPECT_EQ(server->Stats().running, 0u);
	EXPECT_EQ(saw_cancel.load(), 8);
	join();
	server.reset();
}
