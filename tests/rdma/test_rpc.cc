// The RPC layer over rxe: calls of every size, many in flight, deadlines,
// cancellation, async replies, dead and restarted servers, graceful
// shutdown, unknown methods and malformed frames.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "rdma_env.h"
#include "rpc/frame.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

const char *kEcho = "/zcrpc.test.Svc/Echo";
const char *kHold = "/zcrpc.test.Svc/Hold";

uint8_t Pat(uint64_t seed, uint64_t k)
{
	return static_cast<uint8_t>((seed * 0x9E3779B1u + k * 131u + (k >> 9)) >> 5);
}

// A server on its own worker and thread. Handlers run on that thread.
class RpcServer {
public:
	std::function<void(zcrpc_server_call *, const zcrpc_request *)> on_echo, on_hold;
	std::function<void()> on_tick;
	std::atomic<int> echo_runs{0}, hold_runs{0};
	std::atomic<bool> paused{false}; // the worker makes no progress while set
	std::atomic<bool> parked{false}; // the thread saw `paused` and stopped
	void Pause()
	{
		paused = true;
		while (!parked.load())
			std::this_thread::sleep_for(1ms);
	}
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;

	bool Start(const std::string &addr, const zcrpc_server_opts *o = nullptr)
	{
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_server_create(w, o, &s) != ZCRPC_OK)
			return false;
		if (zcrpc_server_register(s, kEcho, Echo, this) != ZCRPC_OK ||
		    zcrpc_server_register(s, kHold, Hold, this) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		thread_ = std::thread([this] {
			while (!stop_.load(std::memory_order_relaxed)) {
				if (paused.load()) {
					parked = true; // no progress call is running now
					std::this_thread::sleep_for(1ms);
					continue;
				}
				parked = false;
				zcrpc_worker_progress(w, 0);
				if (on_tick)
					on_tick();
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
	~RpcServer()
	{
		Stop();
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
	static void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		auto *self = static_cast<RpcServer *>(a);
		self->echo_runs++;
		if (self->on_echo) {
			self->on_echo(c, r);
			return;
		}
		zcrpc_reply_opts o{};
		o.size = sizeof(o);
		if (r->attachment_len)
			o.attachment = &r->attachment_mr;
		EXPECT_EQ(zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, &o), ZCRPC_OK);
	}
	static void Hold(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		auto *self = static_cast<RpcServer *>(a);
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
	std::string message;
	std::vector<uint8_t> data, attachment;
};

void Collect(zcrpc_channel *, const zcrpc_reply *r, void *arg)
{
	auto *res = static_cast<Result *>(arg);
	res->calls++;
	res->status = r->status;
	res->message = r->message ? r->message : "";
	auto *d = static_cast<const uint8_t *>(r->data);
	res->data.assign(d, d + r->len);
	auto *b = static_cast<const uint8_t *>(r->attachment);
	res->attachment.assign(b, b + r->attachment_len);
}

struct Client {
	zcrpc_worker *w = nullptr;
	zcrpc_channel *ch = nullptr;
	Client(const std::string &addr, uint16_t port, const zcrpc_channel_opts *o = nullptr)
	{
		EXPECT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
		EXPECT_EQ(zcrpc_channel_create(w, addr.c_str(), std::to_string(port).c_str(), o, &ch),
			  ZCRPC_OK);
	}
	~Client()
	{
		zcrpc_channel_destroy(ch);
		zcrpc_worker_destroy(w);
	}
	bool Wait(const std::function<bool()> &f, int ms = 20000)
	{
		return ProgressUntil(w, f, Scaled(ms));
	}
	zcrpc_channel_stats Stats()
	{
		zcrpc_channel_stats s;
		zcrpc_channel_get_stats(ch, &s, sizeof(s));
		return s;
	}
};

class Rpc : public RdmaTest {};

} // namespace

TEST_F(Rpc, EchoOfEverySizeIsExactAndBulkIsZeroCopy)
{
	RpcServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	uint32_t echo = zcrpc_method_id(kEcho);
	const size_t slot = 4096 - ZCRPC_FRAME_HDR_LEN; // largest inline payload

	// Inline payloads, packed straight into registered memory.
	for (size_t n : {size_t{0}, size_t{1}, slot}) {
		Result res;
		struct Fill {
			static void F(void *dst, size_t len, void *)
			{
				for (size_t k = 0; k < len; k++)
					static_cast<uint8_t *>(dst)[k] = Pat(len, k);
			}
		};
		ASSERT_EQ(zcrpc_call_start(cl.ch, echo, n, Fill::F, nullptr, nullptr, Collect, &res,
					   nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return res.calls > 0; })) << n;
		ASSERT_EQ(res.status, ZCRPC_OK) << res.message;
		ASSERT_EQ(res.data.size(), n);
		for (size_t k = 0; k < n; k++)
			ASSERT_EQ(res.data[k], Pat(n, k)) << "size " << n << " byte " << k;
	}
	zcrpc_channel_stats s0 = cl.Stats();
	EXPECT_EQ(s0.copied_bytes, 0u) << "inline payloads were packed in place";

	// Slot size + 1, 1 MiB, 64 MiB: the payload travels by RDMA WRITE.
	for (size_t n : {slot + 1, size_t{1} << 20}) {
		std::vector<uint8_t> req(n);
		for (size_t k = 0; k < n; k++)
			req[k] = Pat(n + 1, k);
		Result res;
		ASSERT_EQ(zcrpc_call_async(cl.ch, echo, req.data(), n, nullptr, Collect, &res, nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(cl.Wait([&] { return res.calls > 0; }, 60000)) << n;
		ASSERT_EQ(res.status, ZCRPC_OK) << res.message;
		EXPECT_TRUE(res.data == req) << "payload of " << n << " bytes differs";
	}

	// Attachments from and into user-registered memory: no copy anywhere.
	const size_t big = 64u << 20;
	std::unique_ptr<uint8_t[]> src(new uint8_t[big]), dst(new uint8_t[big]());
	for (size_t k = 0; k < big; k++)
		src[k] = Pat(64, k);
	zcrpc_mr *smr = nullptr, *dmr = nullptr;
	zcrpc_context *ctx = zcrpc_worker_get_context(cl.w);
	ASSERT_EQ(zcrpc_mr_register(ctx, src.get(), big, 0, &smr), ZCRPC_OK);
	ASSERT_EQ(zcrpc_mr_register(ctx, dst.get(), big, ZCRPC_MR_REMOTE_WRITE, &dmr), ZCRPC_OK);
	zcrpc_bulk a{smr, 0, big}, into{dmr, 0, big};
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.attachment = &a;
	o.reply_into = &into;
	uint64_t copied0 = cl.Stats().copied_bytes;
	zcrpc_worker_stats ws0;
	zcrpc_worker_get_stats(cl.w, &ws0, sizeof(ws0));
	Result res;
	ASSERT_EQ(zcrpc_call_async(cl.ch, echo, "hdr", 3, &o, Collect, &res, nullptr), ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return res.calls > 0; }, 120000));
	ASSERT_EQ(res.status, ZCRPC_OK) << res.message;
	EXPECT_EQ(res.attachment.size(), big);
	EXPECT_EQ(std::memcmp(dst.get(), src.get(), big), 0) << "64 MiB echo differs";
	EXPECT_EQ(cl.Stats().copied_bytes - copied0, 3u) << "only the 3-byte payload was copied";
	zcrpc_worker_stats ws1;
	zcrpc_worker_get_stats(cl.w, &ws1, sizeof(ws1));
	EXPECT_EQ(ws1.copied_bytes, ws0.copied_bytes) << "the transport copied bytes";
	EXPECT_EQ(ws1.write_bytes - ws0.write_bytes, big);
	zcrpc_channel_destroy(cl.ch);
	cl.ch = nullptr;
	zcrpc_mr_deregister(smr);
	zcrpc_mr_deregister(dmr);
}

TEST_F(Rpc, SixteenConnectionsOnOneServer)
{
	RpcServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	zcrpc_worker *w = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
	std::vector<zcrpc_channel *> chs(16);
	for (auto &ch : chs)
		ASSERT_EQ(zcrpc_channel_create(w, env_.addr0.c_str(),
					       std::to_string(server.port()).c_str(), nullptr, &ch),
			  ZCRPC_OK);
	std::vector<Result> res(16 * 20);
	for (int i = 0; i < 16 * 20; i++) {
		uint32_t v = static_cast<uint32_t>(i);
		ASSERT_EQ(zcrpc_call_async(chs[static_cast<size_t>(i % 16)], zcrpc_method_id(kEcho), &v,
					   sizeof(v), nullptr, Collect, &res[static_cast<size_t>(i)], nullptr),
			  ZCRPC_OK);
	}
	ASSERT_TRUE(ProgressUntil(w, [&] {
		for (auto &r : res)
			if (!r.calls)
				return false;
		return true;
	}, Scaled(30000)));
	for (int i = 0; i < 16 * 20; i++) {
		auto &r = res[static_cast<size_t>(i)];
		ASSERT_EQ(r.calls, 1);
		ASSERT_EQ(r.status, ZCRPC_OK) << r.message;
		uint32_t v;
		ASSERT_EQ(r.data.size(), sizeof(v));
		std::memcpy(&v, r.data.data(), sizeof(v));
		EXPECT_EQ(v, static_cast<uint32_t>(i));
	}
	EXPECT_EQ(server.Stats().connections, 16u);
	for (auto *ch : chs)
		zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(w);
}

TEST_F(Rpc, ThousandTwentyFourCallsInFlightAtOnce)
{
	const int n = 1024;
	std::vector<zcrpc_server_call *> held; // server thread only
	std::atomic<int> released{0};
	RpcServer server;
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *) {
		held.push_back(c);
		if (static_cast<int>(held.size()) == n) {
			// Every request is at the server at once: answer them all.
			for (auto *h : held)
				EXPECT_EQ(zcrpc_server_call_reply(h, ZCRPC_OK, nullptr, "ok", 2, nullptr),
					  ZCRPC_OK);
			released = n;
		}
	};
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	std::vector<int> fired(n, 0);
	std::vector<zcrpc_status> sts(n, ZCRPC_UNKNOWN);
	struct Ctx {
		std::vector<int> *fired;
		std::vector<zcrpc_status> *sts;
		int i;
	};
	std::vector<Ctx> ctx(n);
	for (int i = 0; i < n; i++) {
		ctx[static_cast<size_t>(i)] = {&fired, &sts, i};
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), &i, sizeof(i), nullptr,
					   [](zcrpc_channel *, const zcrpc_reply *r, void *a) {
						   auto *c = static_cast<Ctx *>(a);
						   (*c->fired)[static_cast<size_t>(c->i)]++;
						   (*c->sts)[static_cast<size_t>(c->i)] = r->status;
					   },
					   &ctx[static_cast<size_t>(i)], nullptr),
			  ZCRPC_OK)
			<< i;
	}
	ASSERT_TRUE(cl.Wait([&] {
		for (int f : fired)
			if (!f)
				return false;
		return true;
	}, 60000)) << "server held " << released.load();
	cl.Wait([] { return false; }, 200); // any duplicate would show up now
	for (int i = 0; i < n; i++) {
		EXPECT_EQ(fired[static_cast<size_t>(i)], 1) << i;
		EXPECT_EQ(sts[static_cast<size_t>(i)], ZCRPC_OK) << i;
	}
	EXPECT_EQ(released.load(), n);
	EXPECT_EQ(cl.Stats().in_flight, 0u);
}

TEST_F(Rpc, DeadlinesAndRequestsThatExpireBeforeTheyRun)
{
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.max_concurrent = 1;
	std::vector<zcrpc_server_call *> held;
	std::atomic<int> reply_status{-1};
	auto hold_until = steady_clock::now();
	RpcServer server;
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *) {
		held.push_back(c);
		hold_until = steady_clock::now() + 500ms;
	};
	server.on_tick = [&] {
		if (!held.empty() && steady_clock::now() >= hold_until) {
			reply_status = zcrpc_server_call_reply(held[0], ZCRPC_OK, nullptr, "late", 4, nullptr);
			held.clear();
		}
	};
	ASSERT_TRUE(server.Start(env_.addr0, &so));
	Client cl(env_.addr0, server.port());
	// Warm the connection up so timing covers only the call.
	Result warm;
	ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kEcho), "x", 1, nullptr, Collect, &warm,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return warm.calls > 0; }));

	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.timeout_us = 100000; // 100 ms against a handler that takes 500 ms
	Result slow, queued;
	auto t0 = steady_clock::now();
	ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "a", 1, &o, Collect, &slow, nullptr),
		  ZCRPC_OK);
	// The next request waits behind the slow one (max_concurrent 1) and
	// its deadline passes there: it must never run.
	ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kEcho), "b", 1, &o, Collect, &queued,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return slow.calls && queued.calls; }));
	auto took = duration_cast<milliseconds>(steady_clock::now() - t0);
	EXPECT_EQ(slow.status, ZCRPC_DEADLINE_EXCEEDED);
	EXPECT_EQ(queued.status, ZCRPC_DEADLINE_EXCEEDED);
	EXPECT_LT(took, 100ms + Scaled(1000));
	// Let the server get past the slow handler.
	auto until = steady_clock::now() + Scaled(5000);
	while (reply_status.load() == -1 && steady_clock::now() < until)
		zcrpc_worker_progress(cl.w, 1);
	// The client gave up at its deadline and told the server (CANCEL):
	// the late reply is not sent.
	EXPECT_TRUE(reply_status.load() == ZCRPC_CANCELLED ||
		    reply_status.load() == ZCRPC_DEADLINE_EXCEEDED)
		<< zcrpc_status_str(static_cast<zcrpc_status>(reply_status.load()));
	cl.Wait([] { return false; }, 300);
	server.Stop();
	EXPECT_EQ(server.echo_runs.load(), 1) << "the expired request ran";
	zcrpc_server_stats ss = server.Stats();
	EXPECT_GE(ss.expired_not_run + ss.cancelled, 2u);
	EXPECT_EQ(slow.calls, 1);
	EXPECT_EQ(queued.calls, 1);
}

TEST_F(Rpc, CancelBeforeSendAtTheServerAndAfterTheReply)
{
	std::vector<zcrpc_server_call *> held;
	std::atomic<int> cancelled_seen{0};
	RpcServer server;
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *) { held.push_back(c); };
	server.on_tick = [&] {
		for (size_t i = 0; i < held.size();) {
			if (zcrpc_server_call_cancelled(held[i])) {
				EXPECT_EQ(zcrpc_server_call_reply(held[i], ZCRPC_OK, nullptr, "z", 1, nullptr),
					  ZCRPC_CANCELLED);
				cancelled_seen++;
				held.erase(held.begin() + static_cast<long>(i));
			} else {
				i++;
			}
		}
	};
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	std::mt19937 rng(12345);
	int before = 0, at_server = 0, after = 0;
	std::vector<Result> res(1000);
	for (int t = 0; t < 1000; t++) {
		Result &r = res[static_cast<size_t>(t)];
		zcrpc_call_id id = 0;
		switch (rng() % 3) {
		case 0: // before the request left: queued behind nothing, cancel at once
			ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "q", 1, nullptr,
						   Collect, &r, &id),
				  ZCRPC_OK);
			ASSERT_EQ(zcrpc_call_cancel(cl.ch, id), ZCRPC_OK);
			ASSERT_EQ(r.calls, 0) << "callback ran inside cancel";
			ASSERT_TRUE(cl.Wait([&] { return r.calls > 0; }));
			EXPECT_EQ(r.status, ZCRPC_CANCELLED);
			before++;
			break;
		case 1: { // while the server holds it
			int seen = cancelled_seen.load();
			// A call cancelled "before it left" may still reach the
			// server and be held until its CANCEL arrives: wait for a
			// new hold, not for any.
			int runs = server.hold_runs.load();
			ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "h", 1, nullptr,
						   Collect, &r, &id),
				  ZCRPC_OK);
			ASSERT_TRUE(cl.Wait([&] { return server.hold_runs.load() > runs && r.calls == 0 &&
						       static_cast<int>(server.Stats().running) > 0; },
					    10000))
				<< "iteration " << t << ": hold runs " << server.hold_runs.load()
				<< ", running " << server.Stats().running << ", answered " << r.calls
				<< " (" << zcrpc_status_str(r.status) << ": " << r.message << ")";
			ASSERT_EQ(zcrpc_call_cancel(cl.ch, id), ZCRPC_OK);
			ASSERT_TRUE(cl.Wait([&] { return r.calls > 0 && cancelled_seen.load() > seen; }));
			EXPECT_EQ(r.status, ZCRPC_CANCELLED);
			at_server++;
			break;
		}
		default: // after the reply arrived
			ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kEcho), "e", 1, nullptr,
						   Collect, &r, &id),
				  ZCRPC_OK);
			ASSERT_TRUE(cl.Wait([&] { return r.calls > 0; }));
			EXPECT_EQ(r.status, ZCRPC_OK);
			EXPECT_EQ(zcrpc_call_cancel(cl.ch, id), ZCRPC_NOT_FOUND);
			after++;
			break;
		}
	}
	cl.Wait([] { return false; }, 300);
	for (auto &r : res)
		EXPECT_EQ(r.calls, 1);
	EXPECT_GE(before, 200);
	EXPECT_GE(at_server, 200);
	EXPECT_GE(after, 200);
	EXPECT_EQ(cl.Stats().in_flight, 0u);
}

TEST_F(Rpc, AsyncReplyFromAnotherThread)
{
	std::vector<std::thread> threads;
	std::mutex mu;
	RpcServer server;
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *r) {
		std::string copy(static_cast<const char *>(r->data), r->len);
		std::lock_guard<std::mutex> g(mu);
		threads.emplace_back([c, copy] {
			std::this_thread::sleep_for(5ms);
			EXPECT_EQ(zcrpc_server_call_reply_any_thread(c, ZCRPC_OK, nullptr, copy.data(), copy.size()),
				  ZCRPC_OK);
		});
	};
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	std::vector<Result> res(50);
	for (int i = 0; i < 50; i++) {
		std::string m = "call-" + std::to_string(i);
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), m.data(), m.size(), nullptr,
					   Collect, &res[static_cast<size_t>(i)], nullptr),
			  ZCRPC_OK);
	}
	ASSERT_TRUE(cl.Wait([&] {
		for (auto &r : res)
			if (!r.calls)
				return false;
		return true;
	}));
	for (int i = 0; i < 50; i++) {
		auto &r = res[static_cast<size_t>(i)];
		EXPECT_EQ(r.status, ZCRPC_OK) << r.message;
		EXPECT_EQ(std::string(r.data.begin(), r.data.end()), "call-" + std::to_string(i));
	}
	std::lock_guard<std::mutex> g(mu);
	for (auto &t : threads)
		t.join();
}

TEST_F(Rpc, SyncCallsAndSyncCallFromAHandlerIsRefused)
{
	RpcServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	zcrpc_result r;
	ASSERT_EQ(zcrpc_call(cl.ch, zcrpc_method_id(kEcho), "sync", 4, nullptr,
			     &r, sizeof(r)),
		  ZCRPC_OK);
	EXPECT_EQ(std::string(static_cast<char *>(r.data), r.len), "sync");
	zcrpc_result_free(&r);
	// From inside a callback of the same worker: FAILED_PRECONDITION.
	struct Ctx {
		zcrpc_status inner = ZCRPC_UNKNOWN;
		int done = 0;
	} ctx;
	ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kEcho), "a", 1, nullptr,
				   [](zcrpc_channel *ch, const zcrpc_reply *, void *a) {
					   auto *c = static_cast<Ctx *>(a);
					   zcrpc_result rr;
					   c->inner = zcrpc_call(
						   ch, zcrpc_method_id(kEcho),
						   "b", 1, nullptr, &rr,
						   sizeof(rr));
					   zcrpc_result_free(&rr);
					   c->done = 1;
				   },
				   &ctx, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return ctx.done == 1; }));
	EXPECT_EQ(ctx.inner, ZCRPC_FAILED_PRECONDITION);
}

TEST_F(Rpc, UnknownMethodIsUnimplementedAndTheConnectionStays)
{
	RpcServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	zcrpc_result r;
	EXPECT_EQ(zcrpc_call(cl.ch, zcrpc_method_id("/nope.Svc/Missing"), "x",
			     1, nullptr, &r, sizeof(r)),
		  ZCRPC_UNIMPLEMENTED);
	EXPECT_NE(std::string(r.message).find("unknown method"), std::string::npos) << r.message;
	zcrpc_result_free(&r);
	EXPECT_EQ(zcrpc_call(cl.ch, zcrpc_method_id(kEcho), "ok", 2, nullptr,
			     &r, sizeof(r)),
		  ZCRPC_OK);
	zcrpc_result_free(&r);
	EXPECT_EQ(cl.Stats().reconnects, 0u);
	EXPECT_EQ(server.Stats().unimplemented, 1u);
}

TEST_F(Rpc, MalformedFramesCloseOnlyThatConnection)
{
	RpcServer server;
	ASSERT_TRUE(server.Start(env_.addr0));
	Client good(env_.addr0, server.port());
	zcrpc_result r;
	ASSERT_EQ(zcrpc_call(good.ch, zcrpc_method_id(kEcho), "1", 1, nullptr,
			     &r, sizeof(r)),
		  ZCRPC_OK);
	zcrpc_result_free(&r);

	auto frame = [](uint8_t type) {
		struct zcrpc_frame f{};
		f.type = type;
		f.method_id = zcrpc_method_id(kEcho);
		f.call_id = 1;
		std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN);
		zcrpc__frame_encode(&f, b.data());
		return b;
	};
	std::vector<std::vector<uint8_t>> bad;
	bad.push_back(frame(ZCRPC_FRAME_REQUEST));
	bad.back()[0] ^= 0xff; // bad magic
	bad.push_back(frame(ZCRPC_FRAME_REQUEST));
	bad.back()[2] = 9; // bad version
	bad.push_back(frame(ZCRPC_FRAME_REQUEST));
	bad.back()[24] = 0xff; // payload length beyond the message
	{
		struct zcrpc_frame g{};
		g.type = ZCRPC_FRAME_BULK_GRANT; // a grant for no reply: outside any grant
		g.call_id = 0x123;
		g.bulk_addr = 4096;
		g.bulk_len = 1 << 20;
		std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN);
		zcrpc__frame_encode(&g, b.data());
		bad.push_back(b);
	}
	int64_t errs0 = static_cast<int64_t>(server.Stats().protocol_errors);
	for (auto &b : bad) {
		zcrpc_worker *w = nullptr;
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w), ZCRPC_OK);
		struct St {
			int up = 0, closed = 0;
		} st;
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = [](zcrpc_conn *, zcrpc_conn_state s, zcrpc_status, void *a) {
			auto *x = static_cast<St *>(a);
			if (s == ZCRPC_CONN_ESTABLISHED)
				x->up = 1;
			else
				x->closed = 1;
		};
		h.arg = &st;
		zcrpc_connect_opts co;
		zcrpc_connect_opts_init(&co);
		zcrpc_conn *c = nullptr;
		ASSERT_EQ(zcrpc_connect(w, env_.addr0.c_str(), std::to_string(server.port()).c_str(),
					&co, &h, &c),
			  ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(w, [&] { return st.up || st.closed; }, Scaled(10000)));
		ASSERT_EQ(st.up, 1);
		ASSERT_EQ(zcrpc_conn_send(c, b.data(), b.size()), ZCRPC_OK);
		EXPECT_TRUE(ProgressUntil(w, [&] { return st.closed > 0; }, Scaled(10000)))
			<< "the server kept a connection that sent garbage";
		zcrpc_conn_destroy(c);
		zcrpc_worker_destroy(w);
		// The well-behaved client is still served.
		ASSERT_EQ(zcrpc_call(good.ch, zcrpc_method_id(kEcho), "2", 1,
				     nullptr, &r, sizeof(r)),
			  ZCRPC_OK);
		zcrpc_result_free(&r);
	}
	EXPECT_EQ(static_cast<int64_t>(server.Stats().protocol_errors) - errs0,
		  static_cast<int64_t>(bad.size()));
}

TEST_F(Rpc, GracefulShutdownDrainsAndTurnsNewCallsAway)
{
	std::vector<zcrpc_server_call *> held;
	auto release_at = steady_clock::now() + 24h;
	RpcServer server;
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *) {
		held.push_back(c);
		release_at = steady_clock::now() + 300ms;
	};
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	std::vector<Result> res(8);
	for (auto &r : res)
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "d", 1, nullptr, Collect, &r,
					   nullptr),
			  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return server.hold_runs.load() == 8; }));
	// Take the server's worker over on this thread to shut it down.
	server.Stop();
	std::atomic<bool> client_stop{false};
	std::thread client([&] {
		while (!client_stop)
			zcrpc_worker_progress(cl.w, 0);
	});
	server.on_tick = nullptr;
	// Replies go out during the grace period: arrange them with a post.
	struct P {
		std::vector<zcrpc_server_call *> *held;
	} p{&held};
	ASSERT_EQ(zcrpc_worker_post(server.w,
				    [](zcrpc_worker *, void *a) {
					    auto *pp = static_cast<P *>(a);
					    std::this_thread::sleep_for(100ms);
					    for (auto *c : *pp->held)
						    zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, "done", 4,
								     nullptr);
					    pp->held->clear();
				    },
				    &p),
		  ZCRPC_OK);
	EXPECT_EQ(zcrpc_server_shutdown(server.s, 5000), ZCRPC_OK);
	client_stop = true;
	client.join();
	ASSERT_TRUE(cl.Wait([&] {
		for (auto &r : res)
			if (!r.calls)
				return false;
		return true;
	}));
	for (auto &r : res) {
		EXPECT_EQ(r.status, ZCRPC_OK) << r.message;
		EXPECT_EQ(std::string(r.data.begin(), r.data.end()), "done");
	}
	// The server is gone: a new call fails fast, it does not hang.
	Result late;
	ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kEcho), "n", 1, nullptr, Collect, &late,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(cl.Wait([&] { return late.calls > 0; }, 15000));
	EXPECT_EQ(late.status, ZCRPC_UNAVAILABLE) << late.message;
	(void)release_at;
}

#ifdef ZCRPC_RPC_ECHO_SERVER
namespace {
pid_t StartServerProcess(const std::string &addr, const std::string &port)
{
	pid_t pid = fork();
	if (pid == 0) {
		execl(ZCRPC_RPC_ECHO_SERVER, ZCRPC_RPC_ECHO_SERVER, "-a", addr.c_str(), "-p",
		      port.c_str(), static_cast<char *>(nullptr));
		_exit(127);
	}
	return pid;
}
} // namespace

TEST_F(Rpc, ServerKilledMidCallThenRestartedServerIsReachedAgain)
{
	const std::string port = "7490";
	pid_t pid = StartServerProcess(env_.addr0, port);
	ASSERT_GT(pid, 0);
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.backoff_initial_ms = 50;
	co.backoff_max_ms = 200;
	Client cl(env_.addr0, static_cast<uint16_t>(std::stoi(port)), &co);
	// Wait until the server process answers.
	bool up = false;
	for (int i = 0; i < 100 && !up; i++) {
		zcrpc_result r;
		up = zcrpc_call(cl.ch,
				zcrpc_method_id("/zcrpc.example.Echo/Echo"),
				"p", 1, nullptr, &r, sizeof(r)) == ZCRPC_OK;
		zcrpc_result_free(&r);
		if (!up)
			std::this_thread::sleep_for(100ms);
	}
	ASSERT_TRUE(up) << "the server process never answered";
	// Calls that the server holds for 10 s, then the server dies.
	std::vector<Result> res(32);
	uint32_t ms = 10000;
	for (auto &r : res)
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id("/zcrpc.example.Echo/Hold"), &ms,
					   sizeof(ms), nullptr, Collect, &r, nullptr),
			  ZCRPC_OK);
	cl.Wait([] { return false; }, 300); // let them reach the server
	ASSERT_EQ(kill(pid, SIGKILL), 0);
	int wst;
	waitpid(pid, &wst, 0);
	auto t0 = steady_clock::now();
	ASSERT_TRUE(cl.Wait([&] {
		for (auto &r : res)
			if (!r.calls)
				return false;
		return true;
	}, 10000)) << "calls hang after the server died";
	EXPECT_LT(steady_clock::now() - t0, Scaled(5000));
	for (auto &r : res) {
		EXPECT_EQ(r.calls, 1);
		EXPECT_EQ(r.status, ZCRPC_UNAVAILABLE) << r.message;
	}
	// A restarted server on the same port is found again.
	pid = StartServerProcess(env_.addr0, port);
	ASSERT_GT(pid, 0);
	up = false;
	for (int i = 0; i < 100 && !up; i++) {
		zcrpc_result r;
		up = zcrpc_call(cl.ch,
				zcrpc_method_id("/zcrpc.example.Echo/Echo"),
				"again", 5, nullptr, &r, sizeof(r)) == ZCRPC_OK;
		if (up)
			EXPECT_EQ(std::string(static_cast<char *>(r.data), r.len), "again");
		zcrpc_result_free(&r);
		if (!up)
			std::this_thread::sleep_for(100ms);
	}
	EXPECT_TRUE(up) << "the channel did not reconnect";
	EXPECT_GE(cl.Stats().reconnects, 1u);
	kill(pid, SIGTERM);
	waitpid(pid, &wst, 0);
}
#endif

TEST_F(Rpc, LateReplyToACancelledCallIsDroppedAndCounted)
{
	RpcServer server; // replies at once, before it sees the CANCEL
	ASSERT_TRUE(server.Start(env_.addr0));
	Client cl(env_.addr0, server.port());
	zcrpc_result r;
	ASSERT_EQ(zcrpc_call(cl.ch, zcrpc_method_id(kEcho), "w", 1, nullptr, &r,
			     sizeof(r)),
		  ZCRPC_OK);
	zcrpc_result_free(&r);
	Result res;
	zcrpc_call_id id = 0;
	ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kEcho), "x", 1, nullptr, Collect, &res, &id),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_call_cancel(cl.ch, id), ZCRPC_OK);
	EXPECT_EQ(zcrpc_call_cancel(cl.ch, id), ZCRPC_NOT_FOUND) << "cancelled twice";
	ASSERT_TRUE(cl.Wait([&] { return cl.Stats().late_replies > 0; }, 10000))
		<< "the reply to the cancelled call was not recognised as late";
	cl.Wait([] { return false; }, 200);
	EXPECT_EQ(res.calls, 1);
	EXPECT_EQ(res.status, ZCRPC_CANCELLED);
	EXPECT_EQ(server.echo_runs.load(), 2);
}

// Issue 13 item 2: a CANCEL never waits for credit. The server reads
// nothing (credits stop coming back); ordinary requests stop one credit
// early, and the CANCEL goes at once with the credit kept for control
// frames; once the server runs it sees the call cancelled. Before, the
// CANCEL found no credit and was dropped ("best effort"): the server's call
// held its place in the window until the connection closed.
TEST_F(Rpc, ACancelGoesWithTheReservedCreditWhileRequestsWaitForCredit)
{
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.window = 8; // the client gets 8 credits
	RpcServer server;
	std::vector<zcrpc_server_call *> held; // the server's thread only
	std::atomic<bool> release{false};
	server.on_hold = [&](zcrpc_server_call *c, const zcrpc_request *) {
		held.push_back(c);
	};
	server.on_tick = [&] {
		if (!release.load())
			return;
		for (auto *c : held)
			zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, "done", 4,
						nullptr);
		held.clear();
	};
	ASSERT_TRUE(server.Start(env_.addr0, &so));
	Client cl(env_.addr0, server.port());
	zcrpc_result r;
	ASSERT_EQ(zcrpc_call(cl.ch, zcrpc_method_id(kEcho), "w", 1, nullptr, &r,
			     sizeof(r)),
		  ZCRPC_OK);
	zcrpc_result_free(&r);
	cl.Wait([] { return false; }, 100); // the echo's credits are back
	server.Pause();
	std::vector<Result> res(12);
	std::vector<zcrpc_call_id> ids(res.size());
	for (size_t i = 0; i < res.size(); i++)
		ASSERT_EQ(zcrpc_call_async(cl.ch, zcrpc_method_id(kHold), "h",
					   1, nullptr, Collect, &res[i],
					   &ids[i]),
			  ZCRPC_OK);
	cl.Wait([] { return false; }, 200);
	auto sent = [&] {
		zcrpc_worker_stats ws;
		zcrpc_worker_get_stats(cl.w, &ws, sizeof(ws));
		return ws.msgs_sent;
	};
	const uint64_t before = sent();
	EXPECT_GT(cl.Stats().pending, 0u)
		<< "every request went: the credits did not run out";
	ASSERT_EQ(zcrpc_call_cancel(cl.ch, ids[0]),
		  ZCRPC_OK); // it went out first
	cl.Wait([] { return false; }, 100);
	EXPECT_EQ(sent(), before + 1)
		<< "the CANCEL waited for credit (or was dropped)";
	EXPECT_EQ(cl.Stats().cancels_lost, 0u);
	server.paused = false;
	ASSERT_TRUE(
		cl.Wait([&] { return server.Stats().cancelled >= 1; }, 10000))
		<< "the server never saw the CANCEL";
	release = true;
	ASSERT_TRUE(cl.Wait(
		[&] {
			for (auto &x : res)
				if (!x.calls)
					return false;
			return true;
		},
		20000));
	EXPECT_EQ(res[0].status, ZCRPC_CANCELLED);
	for (size_t i = 1; i < res.size(); i++)
		EXPECT_EQ(res[i].status, ZCRPC_OK)
			<< i << ": " << res[i].message;
}

TEST_F(Rpc, CallsBeyondCreditsWaitInABoundedQueueThenFailFast)
{
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.window = 8; // the client may have 7 requests unread at the server
	std::atomic<int> connects{0};
	so.on_connect = [](zcrpc_server *, zcrpc_conn *, void *a) {
		(*static_cast<std::atomic<int> *>(a))++;
	};
	so.arg = &connects;
	RpcServer server;
	ASSERT_TRUE(server.Start(env_.addr0, &so));
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.max_pending = 16;
	Client cl(env_.addr0, server.port(), &co);
	zcrpc_result r;
	ASSERT_EQ(zcrpc_call(cl.ch, zcrpc_method_id(kEcho), "w", 1, nullptr, &r,
			     sizeof(r)),
		  ZCRPC_OK);
	zcrpc_result_free(&r);
	int64_t rnr0 = RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	server.Pause(); // it reads nothing now: credits stop coming back
	std::vector<Result> res(100);
	int accepted = 0, refused = 0;
	for (auto &x : res) {
		zcrpc_status st = zcrpc_call_async(cl.ch, zcrpc_method_id(kEcho), "h", 1, nullptr,
						   Collect, &x, nullptr);
		if (st == ZCRPC_OK)
			accepted++;
		else if (st == ZCRPC_RESOURCE_EXHAUSTED)
			refused++;
		else
			ADD_FAILURE() << zcrpc_status_str(st);
		zcrpc_worker_progress(cl.w, 0);
	}
	EXPECT_GT(refused, 0) << "the local queue grew without bound";
	EXPECT_LE(accepted, 7 + 16) << "more calls accepted than credits plus queue";
	EXPECT_EQ(cl.Stats().pending, 16u);
	EXPECT_GE(cl.Stats().queue_full, static_cast<uint64_t>(refused));
	server.paused = false;
	ASSERT_TRUE(cl.Wait([&] {
		int done = 0;
		for (auto &x : res)
			done += x.calls;
		return done == accepted;
	}, 20000));
	for (auto &x : res)
		if (x.calls)
			EXPECT_EQ(x.status, ZCRPC_OK) << x.message;
	int64_t rnr1 = RxeCounter(env_, "rcvd_rnr_err") + RxeCounter(env_, "send_rnr_err");
	EXPECT_EQ(rnr1, rnr0) << "receiver-not-ready under a full window";
	EXPECT_EQ(connects.load(), 1);
}

// A callback the channel delivers from its timer — here a call that
// fails at once because the channel waits to reconnect — ends the
// zcrpc_worker_progress() call that ran it: a turn that ran a timer does
// not go on to sleep. Before, it slept its whole timeout after the
// callback (with -1, until some other event), so a loop waiting for that
// callback hung, and zcrpc_call() took 100 ms to return such a failure.
TEST_F(Rpc, ACallbackRunFromATimerEndsTheProgressCallThatRanIt)
{
	uint16_t port;
	{
		EchoServer probe(env_.addr0); // an ephemeral port, then closed
		ASSERT_TRUE(probe.ok());
		port = probe.port();
	}
	zcrpc_channel_opts o;
	zcrpc_channel_opts_init(&o);
	o.backoff_initial_ms = 60000; // waits a minute after the refusal
	o.backoff_max_ms = 60000;
	Client c(env_.addr0, port, &o);
	Result first, second;
	ASSERT_EQ(zcrpc_call_async(c.ch, zcrpc_method_id("/t/Echo"), "x", 1, nullptr, Collect,
				   &first, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(c.Wait([&] { return first.calls == 1; }, 5000));
	ASSERT_EQ(first.status, ZCRPC_UNAVAILABLE) << first.message;

	// Completed inside the start (waiting to reconnect): its callback
	// runs from the channel's timer in the next progress call.
	ASSERT_EQ(zcrpc_call_async(c.ch, zcrpc_method_id("/t/Echo"), "x", 1, nullptr, Collect,
				   &second, nullptr),
		  ZCRPC_OK);
	EXPECT_EQ(second.calls, 0);
	// Progress calls with a long timeout until it ran (a CM event of the
	// refused connection may end one first): the one that ran it returns
	// at once.
	int64_t ms = 0;
	auto until = steady_clock::now() + Scaled(60000);
	while (second.calls == 0 && steady_clock::now() < until) {
		auto t0 = steady_clock::now();
		ASSERT_EQ(zcrpc_worker_progress(c.w, static_cast<int>(Scaled(20000).count())),
			  ZCRPC_OK);
		ms = duration_cast<milliseconds>(steady_clock::now() - t0).count();
	}
	ASSERT_EQ(second.calls, 1);
	EXPECT_EQ(second.status, ZCRPC_UNAVAILABLE) << second.message;
	EXPECT_LT(ms, Scaled(10000).count()) << "the progress call slept after the callback";
	std::printf("progress call that ran the timer's callback: %lld ms\n",
		    static_cast<long long>(ms));
}
