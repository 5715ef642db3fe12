// The protobuf-c glue's unary metadata, handler context and one-call error
// reply over rxe: a service built with protoc-c's ZCRPC__ECHO__ECHO__INIT
// and registered with zcrpc-gen's zcrpc__echo__echo__zcrpc_register_opts()
// (its handlers find their state through zcrpc_pb_server_get_ctx()),
// called through protoc-c's plain stubs (closures) and through the typed
// asynchronous stubs (zcrpc_pb_call_async's done).
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "echo.zcrpc.h"
#include "rdma_env.h"
#include "zcrpc/pb.h"
#include "zcrpc/rpc.h"

using namespace std::chrono_literals;

namespace {

// seq values the handler acts on.
constexpr uint64_t kOk = 10;		// reply with metadata on the worker
constexpr uint64_t kOtherThread = 11;	// the same from another thread
constexpr uint64_t kError = 12;		// zcrpc_pb_reply_error() with metadata
constexpr uint64_t kErrorTwice = 13;	// reply_error, then the closure too
constexpr uint64_t kNoMd = 14;		// a plain reply: no metadata at all

const char kTrailBin[] = {'t', '\0', '\xff', 'x'}; // binary trailing value

std::string Str(const void *p, size_t n)
{
	return std::string(static_cast<const char *>(p), n);
}

// The handlers' state: reached through zcrpc_pb_server_get_ctx() only.
struct State {
	std::atomic<int> ctx_ok{0}, ctx_bad{0}, calls{0};
	std::mutex mu;
	std::vector<std::thread> repliers;
};

// The request's "x-in" value, or "".
std::string InValue(void *cd)
{
	const zcrpc_request *r = zcrpc_pb_server_get_request(cd);
	for (size_t i = 0; r && i < r->n_md; i++)
		if (Str(r->md[i].key, r->md[i].key_len) == "x-in")
			return Str(r->md[i].value, r->md[i].value_len);
	return "";
}

// Initial "x-init" = "<x-in>-i", trailing "x-trail-bin" = kTrailBin and
// "x-seq" = the request's seq. The handler's memory goes when this
// returns: the glue copies.
zcrpc_status SetMd(void *cd, uint64_t seq)
{
	std::string init = InValue(cd) + "-i", sseq = std::to_string(seq);
	zcrpc_md i[1] = {{"x-init", 6, init.data(), init.size()}};
	zcrpc_md t[2] = {{"x-trail-bin", 11, kTrailBin, sizeof(kTrailBin)},
			 {"x-seq", 5, sseq.data(), sseq.size()}};
	zcrpc_status st = zcrpc_pb_set_reply_md(cd, i, 1, t, 2);
	std::memset(&init[0], '#', init.size()); // copied: this must not show
	return st;
}

void md_ping(Zcrpc__Echo__Echo_Service *, const Zcrpc__Echo__EchoRequest *in,
	     Zcrpc__Echo__EchoReply_Closure closure, void *cd)
{
	auto *st = static_cast<State *>(zcrpc_pb_server_get_ctx(cd));
	if (!st) {
		zcrpc_pb_reply_error(cd, ZCRPC_INTERNAL, "no ctx");
		return;
	}
	st->calls++;
	Zcrpc__Echo__EchoReply r = ZCRPC__ECHO__ECHO_REPLY__INIT;
	r.payload = in->payload;
	r.seq = in->seq;
	if (in->seq == kNoMd) {
		closure(&r, cd);
		return;
	}
	// A count without its list is refused, and what was set stays.
	EXPECT_EQ(zcrpc_pb_set_reply_md(cd, nullptr, 1, nullptr, 0), ZCRPC_INVALID_ARGUMENT);
	// So are lists beyond one frame's metadata (9 + 8 = 17 pairs).
	zcrpc_md many[9];
	for (auto &m : many)
		m = {"x-many", 6, "v", 1};
	EXPECT_EQ(zcrpc_pb_set_reply_md(cd, many, 9, many, 8), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(SetMd(cd, in->seq), ZCRPC_OK);
	if (in->seq == kError) {
		zcrpc_pb_reply_error(cd, ZCRPC_PERMISSION_DENIED, "denied 12");
	} else if (in->seq == kErrorTwice) {
		zcrpc_pb_reply_error(cd, ZCRPC_FAILED_PRECONDITION, "first answer");
		closure(&r, cd); // spent: ignored and counted
		zcrpc_pb_reply_error(cd, ZCRPC_ABORTED, "third answer");
	} else if (in->seq == kOtherThread) {
		// The request stays valid until the closure; the reply and its
		// metadata go through zcrpc_server_call_reply_any_thread_opts().
		std::lock_guard<std::mutex> g(st->mu);
		st->repliers.emplace_back([in, closure, cd] {
			std::this_thread::sleep_for(20ms);
			Zcrpc__Echo__EchoReply r2 = ZCRPC__ECHO__ECHO_REPLY__INIT;
			r2.payload = in->payload;
			r2.seq = in->seq;
			closure(&r2, cd);
		});
	} else {
		closure(&r, cd);
	}
}

// Reverse: checks only that its ctx is the registration's.
void md_reverse(Zcrpc__Echo__Echo_Service *, const Zcrpc__Echo__EchoRequest *in,
		Zcrpc__Echo__EchoReply_Closure closure, void *cd)
{
	auto *st = static_cast<State *>(zcrpc_pb_server_get_ctx(cd));
	Zcrpc__Echo__EchoReply r = ZCRPC__ECHO__ECHO_REPLY__INIT;
	r.seq = in->seq;
	if (st)
		st->ctx_ok++;
	closure(&r, cd);
	// Once the closure ran, the handle names nothing: no ctx.
	if (zcrpc_pb_server_get_ctx(cd))
		st->ctx_bad++;
}

struct MdServer {
	Zcrpc__Echo__Echo_Service impl = ZCRPC__ECHO__ECHO__INIT(md_);
	State state;
	zcrpc_pb_server_opts po{};
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::atomic<bool> stop{false};
	std::thread t;

	bool Start(const std::string &addr)
	{
		po.size = sizeof(po);
		po.ctx = &state;
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_server_create(w, nullptr, &s) != ZCRPC_OK ||
		    zcrpc__echo__echo__zcrpc_register_opts(s, &impl, &po) != ZCRPC_OK ||
		    zcrpc_server_listen(s, addr.c_str(), "0") != ZCRPC_OK)
			return false;
		t = std::thread([this] {
			while (!stop.load())
				zcrpc_worker_progress(w, 0);
		});
		return true;
	}
	~MdServer()
	{
		{
			std::lock_guard<std::mutex> g(state.mu);
			for (auto &r : state.repliers)
				r.join();
		}
		stop = true;
		if (t.joinable())
			t.join();
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}
};

// Metadata as (key, value) strings.
using Pairs = std::vector<std::pair<std::string, std::string>>;

Pairs Of(const zcrpc_md *md, size_t n)
{
	Pairs p;
	for (size_t i = 0; i < n; i++)
		p.emplace_back(Str(md[i].key, md[i].key_len), Str(md[i].value, md[i].value_len));
	return p;
}

Pairs WantInitial(const std::string &in)
{
	return {{"x-init", in + "-i"}};
}

Pairs WantTrailing(uint64_t seq)
{
	return {{"x-trail-bin", Str(kTrailBin, sizeof(kTrailBin))},
		{"x-seq", std::to_string(seq)}};
}

// What a closure or a done saw.
struct Seen {
	ProtobufCService *svc = nullptr;
	int calls = 0;
	zcrpc_status st = ZCRPC_UNKNOWN;
	std::string msg;
	uint64_t seq = 0;
	bool reply = false;
	zcrpc_status reply_md_st = ZCRPC_UNKNOWN;
	Pairs last_i, last_t, reply_i, reply_t; // get_last_md, get_reply_md
};

void ReadReplyMd(Seen *s)
{
	const zcrpc_md *i = nullptr, *t = nullptr;
	size_t ni = 99, nt = 99;
	s->reply_md_st = zcrpc_pb_get_reply_md(&i, &ni, &t, &nt);
	s->reply_i = Of(i, ni);
	s->reply_t = Of(t, nt);
}

void OnReply(const Zcrpc__Echo__EchoReply *m, void *arg)
{
	auto *s = static_cast<Seen *>(arg);
	const char *msg = nullptr;
	const zcrpc_md *i = nullptr, *t = nullptr;
	size_t ni = 99, nt = 99;

	s->calls++;
	s->st = zcrpc_pb_get_last_status(s->svc, &msg);
	s->msg = msg ? msg : "(null)";
	s->reply = m != nullptr;
	s->seq = m ? m->seq : 0;
	EXPECT_EQ(zcrpc_pb_get_last_md(s->svc, &i, &ni, &t, &nt), ZCRPC_OK);
	s->last_i = Of(i, ni);
	s->last_t = Of(t, nt);
	ReadReplyMd(s);
}

void OnDone(zcrpc_status st, const char *message, const Zcrpc__Echo__EchoReply *reply,
	    void *arg)
{
	auto *s = static_cast<Seen *>(arg);
	s->calls++;
	s->st = st;
	s->msg = message;
	s->reply = reply != nullptr;
	s->seq = reply ? reply->seq : 0;
	ReadReplyMd(s);
}

class PbMd : public RdmaTest {
protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		if (HasFatalFailure())
			return;
		ASSERT_TRUE(srv_.Start(env_.addr0));
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w_), ZCRPC_OK);
		ASSERT_EQ(zcrpc_channel_create(w_, env_.addr0.c_str(),
					       std::to_string(zcrpc_server_get_port(srv_.s)).c_str(),
					       nullptr, &ch_),
			  ZCRPC_OK);
		ASSERT_EQ(zcrpc_pb_client_create(ch_, &zcrpc__echo__echo__descriptor, &svc_),
			  ZCRPC_OK);
		zcrpc_call_opts_init(&o_);
		o_.md = in_md_;
		o_.n_md = 1;
		ASSERT_EQ(zcrpc_pb_client_set_opts(svc_, &o_), ZCRPC_OK);
	}
	void TearDown() override
	{
		if (svc_)
			protobuf_c_service_destroy(svc_);
		zcrpc_channel_destroy(ch_);
		zcrpc_worker_destroy(w_);
	}
	// One call through protoc-c's plain stub: the closure path.
	Seen Closure(uint64_t seq)
	{
		Seen s;
		s.svc = svc_;
		Zcrpc__Echo__EchoRequest req = ZCRPC__ECHO__ECHO_REQUEST__INIT;
		req.seq = seq;
		zcrpc__echo__echo__ping(svc_, &req, OnReply, &s);
		EXPECT_TRUE(ProgressUntil(w_, [&] { return s.calls > 0; }, Scaled(20000)));
		return s;
	}
	// One call through the typed asynchronous stub: zcrpc_pb_call_async.
	Seen Typed(uint64_t seq)
	{
		Seen s;
		Zcrpc__Echo__EchoRequest req = ZCRPC__ECHO__ECHO_REQUEST__INIT;
		req.seq = seq;
		EXPECT_EQ(zcrpc__echo__echo__ping__async(ch_, &req, &o_, OnDone, &s, nullptr),
			  ZCRPC_OK);
		EXPECT_TRUE(ProgressUntil(w_, [&] { return s.calls > 0; }, Scaled(20000)));
		return s;
	}

	MdServer srv_;
	zcrpc_worker *w_ = nullptr;
	zcrpc_channel *ch_ = nullptr;
	ProtobufCService *svc_ = nullptr;
	zcrpc_md in_md_[1] = {{"x-in", 4, "abc", 3}};
	zcrpc_call_opts o_;
};

} // namespace

TEST_F(PbMd, ReplyMetadataBothWaysThroughClosuresAndTypedStubs)
{
	// Closure path: inside the closure both getters read the server's
	// metadata (built from the request's "x-in": it arrived).
	Seen s = Closure(kOk);
	EXPECT_EQ(s.calls, 1);
	EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
	EXPECT_TRUE(s.reply);
	EXPECT_EQ(s.seq, kOk);
	EXPECT_EQ(s.last_i, WantInitial("abc"));
	EXPECT_EQ(s.last_t, WantTrailing(kOk));
	EXPECT_EQ(s.reply_md_st, ZCRPC_OK);
	EXPECT_EQ(s.reply_i, WantInitial("abc"));
	EXPECT_EQ(s.reply_t, WantTrailing(kOk));
	// After the closure: get_last_md still reads it, get_reply_md nothing.
	const zcrpc_md *i = nullptr, *t = nullptr;
	size_t ni = 0, nt = 0;
	ASSERT_EQ(zcrpc_pb_get_last_md(svc_, &i, &ni, &t, &nt), ZCRPC_OK);
	EXPECT_EQ(Of(i, ni), WantInitial("abc"));
	EXPECT_EQ(Of(t, nt), WantTrailing(kOk));
	EXPECT_EQ(zcrpc_pb_get_reply_md(&i, &ni, &t, &nt), ZCRPC_FAILED_PRECONDITION);
	EXPECT_EQ(ni + nt, 0u);

	// Another request value comes back changed: nothing is cached.
	in_md_[0].value = "xyz";
	ASSERT_EQ(zcrpc_pb_client_set_opts(svc_, &o_), ZCRPC_OK);
	s = Closure(kOk);
	EXPECT_EQ(s.last_i, WantInitial("xyz"));

	// A plain reply: the last call's metadata is gone, none is read.
	s = Closure(kNoMd);
	EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
	EXPECT_TRUE(s.last_i.empty());
	EXPECT_TRUE(s.last_t.empty());
	EXPECT_EQ(s.reply_md_st, ZCRPC_OK);
	EXPECT_TRUE(s.reply_i.empty());
	EXPECT_TRUE(s.reply_t.empty());

	// Typed stubs: done reads it with zcrpc_pb_get_reply_md().
	s = Typed(kOk);
	EXPECT_EQ(s.calls, 1);
	EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
	EXPECT_EQ(s.seq, kOk);
	EXPECT_EQ(s.reply_md_st, ZCRPC_OK);
	EXPECT_EQ(s.reply_i, WantInitial("xyz"));
	EXPECT_EQ(s.reply_t, WantTrailing(kOk));
	EXPECT_EQ(srv_.state.calls.load(), 4);
}

TEST_F(PbMd, ClosureFromAnotherThreadCarriesTheMetadata)
{
	Seen s = Closure(kOtherThread);
	EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
	EXPECT_EQ(s.seq, kOtherThread);
	EXPECT_EQ(s.last_i, WantInitial("abc"));
	EXPECT_EQ(s.last_t, WantTrailing(kOtherThread));
	s = Typed(kOtherThread);
	EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
	EXPECT_EQ(s.reply_i, WantInitial("abc"));
	EXPECT_EQ(s.reply_t, WantTrailing(kOtherThread));
}

TEST_F(PbMd, ReplyErrorAnswersStatusMessageAndMetadataOnce)
{
	Seen s = Closure(kError);
	EXPECT_EQ(s.calls, 1);
	EXPECT_FALSE(s.reply);
	EXPECT_EQ(s.st, ZCRPC_PERMISSION_DENIED);
	EXPECT_EQ(s.msg, "denied 12");
	EXPECT_EQ(s.last_i, WantInitial("abc")); // an error reply carries them too
	EXPECT_EQ(s.last_t, WantTrailing(kError));
	s = Typed(kError);
	EXPECT_EQ(s.st, ZCRPC_PERMISSION_DENIED);
	EXPECT_EQ(s.msg, "denied 12");
	EXPECT_FALSE(s.reply);
	EXPECT_EQ(s.reply_t, WantTrailing(kError));

	// The error reply spends the handle: the closure and a second
	// reply_error after it are ignored and counted; the client sees the
	// first answer only.
	uint64_t before = zcrpc_pb_server_get_closures_ignored();
	s = Typed(kErrorTwice);
	EXPECT_EQ(s.calls, 1);
	EXPECT_EQ(s.st, ZCRPC_FAILED_PRECONDITION);
	EXPECT_EQ(s.msg, "first answer");
	// The reply went out before the handler made its two late answers:
	// the client can see it while the server's thread is still in them.
	for (int i = 0; i < 200 && zcrpc_pb_server_get_closures_ignored() < before + 2; i++)
		std::this_thread::sleep_for(10ms);
	EXPECT_EQ(zcrpc_pb_server_get_closures_ignored(), before + 2);
	// The connection goes on.
	s = Typed(kOk);
	EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
}

TEST_F(PbMd, HandlersGetTheRegistrationsContextUntilTheClosure)
{
	for (int k = 0; k < 3; k++) {
		Seen s;
		Zcrpc__Echo__EchoRequest req = ZCRPC__ECHO__ECHO_REQUEST__INIT;
		req.seq = 7;
		s.svc = svc_;
		zcrpc__echo__echo__reverse(svc_, &req, OnReply, &s);
		ASSERT_TRUE(ProgressUntil(w_, [&] { return s.calls > 0; }, Scaled(20000)));
		EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
		EXPECT_EQ(s.seq, 7u);
	}
	EXPECT_EQ(srv_.state.ctx_ok.load(), 3);
	EXPECT_EQ(srv_.state.ctx_bad.load(), 0);
	// md_ping answers INTERNAL "no ctx" without one: it had one.
	Seen s = Closure(kNoMd);
	EXPECT_EQ(s.st, ZCRPC_OK) << s.msg;
}

TEST_F(PbMd, RegisterOptsChecksTheCallersSizeAsEveryInStruct)
{
	// A server of its own on the client's worker (this thread drives it).
	zcrpc_server *s2 = nullptr;
	ASSERT_EQ(zcrpc_server_create(w_, nullptr, &s2), ZCRPC_OK);
	static Zcrpc__Echo__Echo_Service impl2 = ZCRPC__ECHO__ECHO__INIT(md_);
	// A newer caller's struct: a field past this library's sizeof set is
	// refused, not ignored (docs/abi.md); the same struct with that byte
	// zero registers.
	alignas(zcrpc_pb_server_opts) unsigned char buf[sizeof(zcrpc_pb_server_opts) + 16] = {};
	auto *o = reinterpret_cast<zcrpc_pb_server_opts *>(buf);
	o->size = sizeof(buf);
	buf[sizeof(zcrpc_pb_server_opts) + 3] = 1;
	EXPECT_EQ(zcrpc__echo__echo__zcrpc_register_opts(s2, &impl2, o), ZCRPC_INVALID_ARGUMENT);
	buf[sizeof(zcrpc_pb_server_opts) + 3] = 0;
	EXPECT_EQ(zcrpc__echo__echo__zcrpc_register_opts(s2, &impl2, o), ZCRPC_OK);
	// An older caller's struct cut before the method list: refused.
	zcrpc_pb_server_opts old{};
	old.size = offsetof(zcrpc_pb_server_opts, methods);
	old.service = &impl2.base;
	EXPECT_EQ(zcrpc_pb_server_register_opts(s2, &old), ZCRPC_INVALID_ARGUMENT);
	zcrpc_server_destroy(s2);
}
