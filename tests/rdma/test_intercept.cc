// Interceptors over rxe (include/zcrpc/intercept.h): a client chain that
// adds an auth token and logs, one that refuses a method locally; a server
// chain that checks the token before any handler runs and logs each call's
// messages and end; for unary calls and streams; target channels sharing
// a connection, each with its own chain.
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "rdma_env.h"
#include "zcrpc/balance.h"
#include "zcrpc/intercept.h"
#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"

namespace {

const char *kEcho = "/zcrpc.test.Ic/Echo";
const char *kChat = "/zcrpc.test.Ic/Chat";
const char *kSecret = "/zcrpc.test.Ic/Secret";

// What one interceptor saw, as lines ("start M", "out 4", "in 4", "end 0").
struct Log {
	std::vector<std::string> lines;
	int state_tag = 0; // handed out as the per-call state
	std::string token = "Bearer good";
	uint32_t refuse_method = 0;
};

std::string Md(const zcrpc_md *md, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (md[i].key_len == strlen(key) && !memcmp(md[i].key, key, md[i].key_len))
			return std::string(static_cast<const char *>(md[i].value), md[i].value_len);
	return "<none>";
}

zcrpc_client_interceptor ClientLogger(Log *log)
{
	zcrpc_client_interceptor ic{};
	ic.size = sizeof(ic);
	ic.arg = log;
	ic.on_start = [](const zcrpc_call_info *call, zcrpc_md *add, size_t room, size_t *n_add,
			 void **state, void *arg) {
		auto *l = static_cast<Log *>(arg);
		l->lines.push_back(std::string("start ") + (call->streaming ? "stream" : "unary"));
		*state = &l->state_tag;
		if (l->refuse_method && call->method_id == l->refuse_method)
			return ZCRPC_PERMISSION_DENIED;
		EXPECT_GE(room, 1u);
		static const char k[] = "authorization";
		add[0] = {k, sizeof(k) - 1, l->token.data(), l->token.size()};
		*n_add = 1;
		return ZCRPC_OK;
	};
	ic.on_message = [](void *state, int out, size_t len, void *arg) {
		auto *l = static_cast<Log *>(arg);
		EXPECT_EQ(state, &l->state_tag);
		l->lines.push_back(std::string(out ? "out " : "in ") + std::to_string(len));
	};
	ic.on_end = [](void *state, zcrpc_status st, const char *, const zcrpc_md *md, size_t n,
		       void *arg) {
		auto *l = static_cast<Log *>(arg);
		EXPECT_EQ(state, &l->state_tag);
		l->lines.push_back("end " + std::to_string(st) + " " + Md(md, n, "x-served-by"));
	};
	return ic;
}

zcrpc_server_interceptor ServerAuth(Log *log)
{
	zcrpc_server_interceptor ic{};
	ic.size = sizeof(ic);
	ic.arg = log;
	ic.on_call = [](const zcrpc_call_info *call, const char **msg, void **state, void *arg) {
		auto *l = static_cast<Log *>(arg);
		*state = &l->state_tag;
		std::string tok = Md(call->md, call->n_md, "authorization");
		l->lines.push_back(std::string("call ") + (call->streaming ? "stream " : "unary ") + tok);
		if (tok != l->token) {
			*msg = "bad token";
			return ZCRPC_UNAUTHENTICATED;
		}
		return ZCRPC_OK;
	};
	ic.on_message = [](void *state, int out, size_t len, void *arg) {
		auto *l = static_cast<Log *>(arg);
		EXPECT_EQ(state, &l->state_tag);
		l->lines.push_back(std::string(out ? "out " : "in ") + std::to_string(len));
	};
	ic.on_end = [](void *state, zcrpc_status st, void *arg) {
		auto *l = static_cast<Log *>(arg);
		EXPECT_EQ(state, &l->state_tag);
		l->lines.push_back("end " + std::to_string(st));
	};
	return ic;
}

class Intercept : public RdmaTest {
protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w_), ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_create(w_, nullptr, &srv_), ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_register(
				  srv_, kEcho,
				  [](zcrpc_server_call *c, const zcrpc_request *r, void *a) {
					  static_cast<Intercept *>(a)->handler_runs_++;
					  static const char k[] = "x-served-by", v[] = "echo";
					  zcrpc_md t[] = {{k, sizeof(k) - 1, v, sizeof(v) - 1}};
					  zcrpc_reply_opts o;
					  zcrpc_reply_opts_init(&o);
					  o.md = t;
					  o.n_md = 1;
					  zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, &o);
				  },
				  this),
			  ZCRPC_OK);
		zcrpc_stream_handlers h{};
		h.size = sizeof(h);
		h.arg = this;
		h.on_open = [](zcrpc_stream *, const zcrpc_stream_open *, void *a) {
			static_cast<Intercept *>(a)->handler_runs_++;
		};
		h.on_message = [](zcrpc_stream *s, const void *d, size_t n, void *) {
			zcrpc_stream_write(s, d, n);
		};
		h.on_half_close = [](zcrpc_stream *s, void *) {
			zcrpc_stream_finish(s, ZCRPC_OK, nullptr, nullptr, 0);
		};
		h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *, void *) {};
		ASSERT_EQ(zcrpc_server_register_stream(srv_, kChat, &h), ZCRPC_OK);
	}
	void Listen()
	{
		ASSERT_EQ(zcrpc_server_listen(srv_, env_.addr0.c_str(), "0"), ZCRPC_OK);
		ASSERT_EQ(zcrpc_channel_create(w_, env_.addr0.c_str(),
					       std::to_string(zcrpc_server_get_port(srv_)).c_str(),
					       nullptr, &ch_),
			  ZCRPC_OK);
	}
	void TearDown() override
	{
		zcrpc_channel_destroy(ch_);
		zcrpc_server_destroy(srv_);
		zcrpc_worker_destroy(w_);
	}
	struct R {
		int n = 0;
		zcrpc_status st = ZCRPC_UNKNOWN;
		std::string msg;
	};
	static void Cb(zcrpc_channel *, const zcrpc_reply *rep, void *a)
	{
		auto *r = static_cast<R *>(a);
		r->n++;
		r->st = rep->status;
		r->msg = rep->message;
	}
	bool Until(const std::function<bool()> &f) { return ProgressUntil(w_, f, Scaled(10000)); }
	zcrpc_worker *w_ = nullptr;
	zcrpc_server *srv_ = nullptr;
	zcrpc_channel *ch_ = nullptr;
	int handler_runs_ = 0;
};

} // namespace

TEST_F(Intercept, ChainsSeeEveryUnaryCallAndTheServersRefusesBeforeTheHandler)
{
	Log srv_log, cl_log, cl_log2;
	zcrpc_server_interceptor si = ServerAuth(&srv_log);
	ASSERT_EQ(zcrpc_server_add_interceptor(srv_, &si), ZCRPC_OK);
	Listen();
	EXPECT_EQ(zcrpc_server_add_interceptor(srv_, &si), ZCRPC_FAILED_PRECONDITION)
		<< "added after listening";
	zcrpc_client_interceptor ci = ClientLogger(&cl_log);
	ASSERT_EQ(zcrpc_channel_add_interceptor(ch_, &ci), ZCRPC_OK);
	cl_log2.refuse_method = zcrpc_method_id(kSecret);
	cl_log2.token = "Bearer wrong";
	zcrpc_client_interceptor ci2 = ClientLogger(&cl_log2);
	ASSERT_EQ(zcrpc_channel_add_interceptor(ch_, &ci2), ZCRPC_OK);

	// An accepted call: the client's first interceptor adds the right
	// token, the second a wrong one after it; the server reads the first.
	R ok;
	ASSERT_EQ(zcrpc_call_async(ch_, zcrpc_method_id(kEcho), "ping", 4, nullptr, Cb, &ok, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return ok.n > 0; }));
	EXPECT_EQ(ok.st, ZCRPC_OK) << ok.msg;
	EXPECT_EQ(handler_runs_, 1);
	EXPECT_EQ(cl_log.lines,
		  (std::vector<std::string>{"start unary", "out 4", "in 4", "end 0 echo"}));
	EXPECT_EQ(cl_log2.lines,
		  (std::vector<std::string>{"start unary", "out 4", "in 4", "end 0 echo"}));
	EXPECT_EQ(srv_log.lines, (std::vector<std::string>{"call unary Bearer good", "in 4", "out 4",
							   "end 0"}));

	// The client's second interceptor refuses a method: nothing is sent,
	// the call does not start, the first interceptor sees the end.
	cl_log.lines.clear();
	cl_log2.lines.clear();
	srv_log.lines.clear();
	R never;
	EXPECT_EQ(zcrpc_call_async(ch_, zcrpc_method_id(kSecret), "x", 1, nullptr, Cb, &never,
				   nullptr),
		  ZCRPC_PERMISSION_DENIED);
	EXPECT_EQ(cl_log.lines, (std::vector<std::string>{"start unary", "end 7 <none>"}));
	EXPECT_EQ(cl_log2.lines, (std::vector<std::string>{"start unary"}))
		<< "the refusing interceptor gets no end";
	EXPECT_TRUE(srv_log.lines.empty());
	EXPECT_EQ(never.n, 0);
	EXPECT_EQ(zcrpc_channel_add_interceptor(ch_, &ci), ZCRPC_FAILED_PRECONDITION)
		<< "added after a call";

	// A wrong token: the server's interceptor answers UNAUTHENTICATED and
	// the handler never runs.
	cl_log.token = "Bearer stolen";
	cl_log.lines.clear();
	R denied;
	ASSERT_EQ(zcrpc_call_async(ch_, zcrpc_method_id(kEcho), "ping", 4, nullptr, Cb, &denied,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return denied.n > 0; }));
	EXPECT_EQ(denied.st, ZCRPC_UNAUTHENTICATED);
	EXPECT_EQ(denied.msg, "bad token");
	EXPECT_EQ(handler_runs_, 1);
	EXPECT_EQ(srv_log.lines, (std::vector<std::string>{"call unary Bearer stolen"}))
		<< "the refusing interceptor gets no end (it knows)";
	EXPECT_EQ(cl_log.lines, (std::vector<std::string>{"start unary", "out 4", "end 16 <none>"}));
}

TEST_F(Intercept, ChainsSeeAStreamsStartEachMessageAndItsEnd)
{
	Log srv_log, cl_log;
	zcrpc_server_interceptor si = ServerAuth(&srv_log);
	ASSERT_EQ(zcrpc_server_add_interceptor(srv_, &si), ZCRPC_OK);
	Listen();
	zcrpc_client_interceptor ci = ClientLogger(&cl_log);
	ASSERT_EQ(zcrpc_channel_add_interceptor(ch_, &ci), ZCRPC_OK);

	struct S {
		bool done = false;
		zcrpc_status st = ZCRPC_UNKNOWN;
		int msgs = 0;
	} a, b;
	auto start = [&](S *x) {
		zcrpc_stream_handlers h{};
		h.size = sizeof(h);
		h.arg = x;
		h.on_message = [](zcrpc_stream *, const void *, size_t, void *p) {
			static_cast<S *>(p)->msgs++;
		};
		h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *p) {
			static_cast<S *>(p)->done = true;
			static_cast<S *>(p)->st = e->status;
		};
		zcrpc_stream *s = nullptr;
		EXPECT_EQ(zcrpc_stream_start(ch_, zcrpc_method_id(kChat), nullptr, &h, &s), ZCRPC_OK);
		return s;
	};
	zcrpc_stream *s = start(&a);
	ASSERT_EQ(zcrpc_stream_write(s, "one", 3), ZCRPC_OK);
	ASSERT_EQ(zcrpc_stream_write(s, "three", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.msgs == 2; }));
	ASSERT_EQ(zcrpc_stream_close_send(s), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.done; }));
	EXPECT_EQ(a.st, ZCRPC_OK);
	EXPECT_EQ(cl_log.lines, (std::vector<std::string>{"start stream", "out 3", "out 5", "in 3",
							  "in 5", "end 0 <none>"}));
	ASSERT_TRUE(Until([&] { return srv_log.lines.size() == 6; }));
	EXPECT_EQ(srv_log.lines, (std::vector<std::string>{"call stream Bearer good", "in 3", "out 3",
							   "in 5", "out 5", "end 0"}));

	// Refused by the server's interceptor: the stream ends UNAUTHENTICATED
	// and its on_open never ran.
	cl_log.token = "nope";
	int runs = handler_runs_;
	start(&b);
	ASSERT_TRUE(Until([&] { return b.done; }));
	EXPECT_EQ(b.st, ZCRPC_UNAUTHENTICATED);
	EXPECT_EQ(handler_runs_, runs);
}

TEST_F(Intercept, BadArgumentsAndTheChainsLimit)
{
	Listen();
	Log l;
	zcrpc_client_interceptor ci = ClientLogger(&l);
	EXPECT_EQ(zcrpc_channel_add_interceptor(nullptr, &ci), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_channel_add_interceptor(ch_, nullptr), ZCRPC_INVALID_ARGUMENT);
	zcrpc_client_interceptor shorter = ci;
	shorter.size = 8;
	EXPECT_EQ(zcrpc_channel_add_interceptor(ch_, &shorter), ZCRPC_INVALID_ARGUMENT);
	for (int i = 0; i < ZCRPC_MAX_INTERCEPTORS; i++)
		ASSERT_EQ(zcrpc_channel_add_interceptor(ch_, &ci), ZCRPC_OK);
	EXPECT_EQ(zcrpc_channel_add_interceptor(ch_, &ci), ZCRPC_RESOURCE_EXHAUSTED);
	// Four interceptors each adding one pair: all reach the server.
	R r;
	ASSERT_EQ(zcrpc_call_async(ch_, zcrpc_method_id(kEcho), "x", 1, nullptr, Cb, &r, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return r.n > 0; }));
	EXPECT_EQ(r.st, ZCRPC_OK);
	EXPECT_EQ(l.lines.size(), 4u * 4u) << "start, out, in, end for each of four";
}

// Two target channels on one worker share their backend's connection, yet
// each runs only its own chain, for its calls and its streams (a call
// records the chain it runs); health checks run none; destroying one ends
// its stream CANCELLED, seen by its chain, and leaves the other working.
TEST_F(Intercept, TargetChannelsSharingAConnectionEachRunOnlyTheirOwnChain)
{
	Listen(); // and ch_, a plain channel: a connection of its own
	std::string target =
		"ipv4:" + env_.addr0 + ":" + std::to_string(zcrpc_server_get_port(srv_));
	zcrpc_channel_opts o;
	zcrpc_channel_opts_init(&o);
	o.health_check_ms = 20;
	zcrpc_channel *a = nullptr, *b = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w_, target.c_str(), &o, &a), ZCRPC_OK);
	o.health_check_ms = 0; // not in the sharing key
	ASSERT_EQ(zcrpc_channel_create_target(w_, target.c_str(), &o, &b), ZCRPC_OK);
	Log la, lb;
	zcrpc_client_interceptor ia = ClientLogger(&la), ib = ClientLogger(&lb);
	ASSERT_EQ(zcrpc_channel_add_interceptor(a, &ia), ZCRPC_OK);
	ASSERT_EQ(zcrpc_channel_add_interceptor(b, &ib), ZCRPC_OK);

	R ra, rb, rp;
	ASSERT_EQ(zcrpc_call_async(a, zcrpc_method_id(kEcho), "ping", 4, nullptr, Cb, &ra, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return ra.n > 0; }));
	EXPECT_EQ(ra.st, ZCRPC_OK) << ra.msg;
	ASSERT_EQ(zcrpc_call_async(b, zcrpc_method_id(kEcho), "pong!", 5, nullptr, Cb, &rb,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_call_async(ch_, zcrpc_method_id(kEcho), "x", 1, nullptr, Cb, &rp, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return rb.n > 0 && rp.n > 0; }));
	EXPECT_EQ(rb.st, ZCRPC_OK) << rb.msg;
	EXPECT_EQ(la.lines, (std::vector<std::string>{"start unary", "out 4", "in 4", "end 0 echo"}));
	EXPECT_EQ(lb.lines, (std::vector<std::string>{"start unary", "out 5", "in 5", "end 0 echo"}));

	// A stream on a: its chain only.
	struct S {
		bool done = false;
		zcrpc_status st = ZCRPC_UNKNOWN;
		int msgs = 0;
	} sa;
	zcrpc_stream_handlers h{};
	h.size = sizeof(h);
	h.arg = &sa;
	h.on_message = [](zcrpc_stream *, const void *, size_t, void *p) {
		static_cast<S *>(p)->msgs++;
	};
	h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *p) {
		static_cast<S *>(p)->done = true;
		static_cast<S *>(p)->st = e->status;
	};
	zcrpc_stream *s = nullptr;
	ASSERT_EQ(zcrpc_stream_start(a, zcrpc_method_id(kChat), nullptr, &h, &s), ZCRPC_OK);
	ASSERT_EQ(zcrpc_stream_write(s, "abc", 3), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return sa.msgs == 1; }));

	// Health checks (every 20 ms on a) go on meanwhile, unseen by its chain.
	auto until = std::chrono::steady_clock::now() + Scaled(300);
	while (std::chrono::steady_clock::now() < until)
		zcrpc_worker_progress(w_, 1);
	EXPECT_EQ(la.lines.size(), 7u) << "4 of the call, start + out + in of the stream";
	EXPECT_EQ(lb.lines.size(), 4u);

	// One connection for the two target channels, one for the plain one.
	zcrpc_server_stats ss;
	zcrpc_server_get_stats(srv_, &ss, sizeof(ss));
	EXPECT_EQ(ss.connections, 2u);

	// Destroying a ends its stream CANCELLED inside, its chain sees it;
	// b goes on over the same connection.
	zcrpc_channel_destroy(a);
	EXPECT_TRUE(sa.done);
	EXPECT_EQ(sa.st, ZCRPC_CANCELLED);
	ASSERT_FALSE(la.lines.empty());
	EXPECT_EQ(la.lines.back(), "end 1 <none>");
	R rb2;
	ASSERT_EQ(zcrpc_call_async(b, zcrpc_method_id(kEcho), "again", 5, nullptr, Cb, &rb2,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return rb2.n > 0; }));
	EXPECT_EQ(rb2.st, ZCRPC_OK) << rb2.msg;
	zcrpc_server_get_stats(srv_, &ss, sizeof(ss));
	EXPECT_EQ(ss.connections, 2u);
	zcrpc_channel_destroy(b);

	// A target channel whose first act was a stream: its chain is fixed.
	zcrpc_channel *c = nullptr;
	ASSERT_EQ(zcrpc_channel_create_target(w_, target.c_str(), &o, &c), ZCRPC_OK);
	S sc;
	h.arg = &sc;
	ASSERT_EQ(zcrpc_stream_start(c, zcrpc_method_id(kChat), nullptr, &h, &s), ZCRPC_OK);
	EXPECT_EQ(zcrpc_channel_add_interceptor(c, &ia), ZCRPC_FAILED_PRECONDITION)
		<< "added after a stream";
	ASSERT_EQ(zcrpc_stream_close_send(s), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return sc.done; }));
	EXPECT_EQ(sc.st, ZCRPC_OK);
	zcrpc_channel_destroy(c);
}
