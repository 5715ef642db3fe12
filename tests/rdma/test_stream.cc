// Streaming calls over rxe (docs/protocol.md §8): server-streaming,
// client-streaming and bidirectional streams with initial and trailing
// metadata, per-stream flow control (a paused reader holds back only its
// own writer), cancellation from either side, the deadline over the whole
// stream, a lost server, and clients that break a stream's rules (each
// loses only that stream). Client and server share one worker here, so
// every callback runs on the test's thread.
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rdma_env.h"
#include "rpc/frame.h"
#include "transport/hello.h"
#include "transport/test_hooks.h"
#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"

namespace {

const char *kStream = "/zcrpc.test.Stream/Bidi";
const char *kUnary = "/zcrpc.test.Stream/Unary";

using Md = std::vector<std::pair<std::string, std::string>>;

Md CopyMd(const zcrpc_md *md, size_t n)
{
	Md out;
	for (size_t i = 0; i < n; i++)
		out.emplace_back(std::string(md[i].key, md[i].key_len),
				 std::string(static_cast<const char *>(md[i].value),
					     md[i].value_len));
	return out;
}

// What one side saw of one stream.
struct Seen {
	zcrpc_stream *s = nullptr;
	std::vector<std::string> msgs;
	Md open_md, headers, trailers;
	int64_t open_timeout_us = 0;
	bool half = false, finished = false, got_headers = false;
	int writable = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
	// Test-specific reactions (may be empty).
	std::function<void(Seen &, const std::string &)> on_msg;
	std::function<void(Seen &)> on_half, on_writable;
};

// The server's side: every stream it was given, and what the test wants
// done at each event.
struct Service {
	std::vector<std::unique_ptr<Seen>> streams;
	std::function<void(Seen &)> on_open;
	std::function<void(Seen &, const std::string &)> on_msg;
	std::function<void(Seen &)> on_half, on_writable;

	static Seen &Of(zcrpc_stream *s) { return *static_cast<Seen *>(zcrpc_stream_get_user(s)); }
	static void Open(zcrpc_stream *s, const zcrpc_stream_open *o, void *arg)
	{
		auto *svc = static_cast<Service *>(arg);
		svc->streams.push_back(std::make_unique<Seen>());
		Seen &x = *svc->streams.back();
		x.s = s;
		x.open_md = CopyMd(o->md, o->n_md);
		x.open_timeout_us = o->timeout_us;
		x.on_msg = svc->on_msg;
		x.on_half = svc->on_half;
		x.on_writable = svc->on_writable;
		zcrpc_stream_set_user(s, &x);
		if (svc->on_open)
			svc->on_open(x);
	}
	static void Msg(zcrpc_stream *s, const void *d, size_t n, void *)
	{
		Seen &x = Of(s);
		x.msgs.emplace_back(static_cast<const char *>(d), n);
		if (x.on_msg)
			x.on_msg(x, x.msgs.back());
	}
	static void Half(zcrpc_stream *s, void *)
	{
		Seen &x = Of(s);
		x.half = true;
		if (x.on_half)
			x.on_half(x);
	}
	static void Writable(zcrpc_stream *s, void *)
	{
		Seen &x = Of(s);
		x.writable++;
		if (x.on_writable)
			x.on_writable(x);
	}
	static void Finish(zcrpc_stream *s, const zcrpc_stream_end *e, void *)
	{
		Seen &x = Of(s);
		EXPECT_FALSE(x.finished) << "on_finish ran twice";
		x.finished = true;
		x.status = e->status;
		x.message = e->message;
		x.s = nullptr;
	}
	zcrpc_stream_handlers Handlers()
	{
		zcrpc_stream_handlers h{};
		h.size = sizeof(h);
		h.on_open = Open;
		h.on_message = Msg;
		h.on_half_close = Half;
		h.on_writable = Writable;
		h.on_finish = Finish;
		h.arg = this;
		return h;
	}
};

// The client's callbacks: arg is the Seen of that stream.
void CHeaders(zcrpc_stream *, const zcrpc_md *md, size_t n, void *a)
{
	auto *x = static_cast<Seen *>(a);
	EXPECT_FALSE(x->got_headers);
	EXPECT_TRUE(x->msgs.empty()) << "headers after a message";
	x->got_headers = true;
	x->headers = CopyMd(md, n);
}
void CMsg(zcrpc_stream *, const void *d, size_t n, void *a)
{
	auto *x = static_cast<Seen *>(a);
	x->msgs.emplace_back(static_cast<const char *>(d), n);
	if (x->on_msg)
		x->on_msg(*x, x->msgs.back());
}
void CWritable(zcrpc_stream *, void *a)
{
	auto *x = static_cast<Seen *>(a);
	x->writable++;
	if (x->on_writable)
		x->on_writable(*x);
}
void CFinish(zcrpc_stream *, const zcrpc_stream_end *e, void *a)
{
	auto *x = static_cast<Seen *>(a);
	EXPECT_FALSE(x->finished) << "on_finish ran twice";
	x->finished = true;
	x->status = e->status;
	x->message = e->message;
	x->trailers = CopyMd(e->md, e->n_md);
	x->s = nullptr;
}

zcrpc_stream_handlers ClientHandlers(Seen *x)
{
	zcrpc_stream_handlers h{};
	h.size = sizeof(h);
	h.on_headers = CHeaders;
	h.on_message = CMsg;
	h.on_writable = CWritable;
	h.on_finish = CFinish;
	h.arg = x;
	return h;
}

std::vector<zcrpc_md> MdOf(const Md &m)
{
	std::vector<zcrpc_md> v;
	for (const auto &p : m)
		v.push_back({p.first.data(), p.first.size(), p.second.data(), p.second.size()});
	return v;
}

// Writes messages "<prefix><i>" for i in [*next, n) while the window lets
// it; returns how many writes the window refused (0 or 1).
int WriteSome(zcrpc_stream *s, const std::string &prefix, int *next, int n)
{
	while (*next < n) {
		std::string m = prefix + std::to_string(*next);
		zcrpc_status st = zcrpc_stream_write(s, m.data(), m.size());
		if (st == ZCRPC_RESOURCE_EXHAUSTED)
			return 1;
		EXPECT_EQ(st, ZCRPC_OK) << zcrpc_status_str(st);
		if (st != ZCRPC_OK)
			return 0;
		++*next;
	}
	return 0;
}

void UnaryEcho(zcrpc_server_call *c, const zcrpc_request *r, void *)
{
	zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, nullptr);
}

// A server and a channel on one worker (one thread runs both).
class Stream : public RdmaTest {
protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w_), ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_create(w_, nullptr, &srv_), ZCRPC_OK);
	}
	// Registers the stream method (with svc_'s behaviour), a unary echo,
	// listens and makes the channel.
	void Listen(const zcrpc_channel_opts *co = nullptr)
	{
		zcrpc_stream_handlers h = svc_.Handlers();
		ASSERT_EQ(zcrpc_server_register_stream(srv_, kStream, &h), ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_register(srv_, kUnary, UnaryEcho, nullptr), ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_listen(srv_, env_.addr0.c_str(), "0"), ZCRPC_OK);
		ASSERT_EQ(zcrpc_channel_create(w_, env_.addr0.c_str(),
					       std::to_string(zcrpc_server_get_port(srv_)).c_str(),
					       co, &ch_),
			  ZCRPC_OK);
	}
	zcrpc_stream *Start(Seen &x, const zcrpc_stream_opts *o = nullptr,
			    const char *method = kStream)
	{
		zcrpc_stream_handlers h = ClientHandlers(&x);
		zcrpc_stream *s = nullptr;
		EXPECT_EQ(zcrpc_stream_start(ch_, zcrpc_method_id(method), o, &h, &s), ZCRPC_OK);
		x.s = s;
		return s;
	}
	bool Until(const std::function<bool()> &f, int ms = 20000)
	{
		return ProgressUntil(w_, f, Scaled(ms));
	}
	// A unary echo through the same channel: true when it came back.
	bool UnaryWorks()
	{
		struct R {
			int n = 0;
			zcrpc_status st = ZCRPC_UNKNOWN;
			std::string data;
		} r;
		auto cb = [](zcrpc_channel *, const zcrpc_reply *rep, void *a) {
			auto *rr = static_cast<R *>(a);
			rr->n++;
			rr->st = rep->status;
			rr->data.assign(static_cast<const char *>(rep->data), rep->len);
		};
		if (zcrpc_call_async(ch_, zcrpc_method_id(kUnary), "ping", 4, nullptr, cb, &r,
				     nullptr) != ZCRPC_OK)
			return false;
		return Until([&] { return r.n > 0; }) && r.st == ZCRPC_OK && r.data == "ping";
	}
	void TearDown() override
	{
		zcrpc_channel_destroy(ch_);
		zcrpc_server_destroy(srv_);
		zcrpc_worker_destroy(w_);
	}
	zcrpc_worker *w_ = nullptr;
	zcrpc_server *srv_ = nullptr;
	zcrpc_channel *ch_ = nullptr;
	Service svc_;
};

} // namespace

TEST_F(Stream, ServerStreamingSendsEveryMessageInOrderWithHeadersAndTrailers)
{
	// The request names how many messages to send back; the server writes
	// them as its window allows, then finishes with trailing metadata.
	struct State {
		int next = 0, n = 0, refused = 0;
	} st;
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		st.n = std::stoi(m);
		Md h = {{"initial-key", "initial-value"}};
		auto hv = MdOf(h);
		EXPECT_EQ(zcrpc_stream_send_headers(x.s, hv.data(), hv.size()), ZCRPC_OK);
		EXPECT_EQ(zcrpc_stream_send_headers(x.s, hv.data(), hv.size()),
			  ZCRPC_FAILED_PRECONDITION)
			<< "headers go once";
	};
	auto pump = [&](Seen &x) {
		st.refused += WriteSome(x.s, "m", &st.next, st.n);
		if (st.next == st.n && x.half) {
			Md t = {{"trailing-key", "trailing-value"}, {"count", std::to_string(st.n)}};
			auto tv = MdOf(t);
			EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, tv.data(), tv.size()),
				  ZCRPC_OK);
			EXPECT_EQ(zcrpc_stream_write(x.s, "late", 4), ZCRPC_FAILED_PRECONDITION);
		}
	};
	svc_.on_half = pump;
	svc_.on_writable = pump;
	Listen();

	Seen cl;
	zcrpc_stream_opts o;
	zcrpc_stream_opts_init(&o);
	Md md = {{"client-key", "client-value"}};
	auto mdv = MdOf(md);
	o.md = mdv.data();
	o.n_md = mdv.size();
	o.timeout_us = 60 * 1000 * 1000;
	zcrpc_stream *s = Start(cl, &o);
	ASSERT_NE(s, nullptr);
	ASSERT_EQ(zcrpc_stream_write(s, "1000", 4), ZCRPC_OK);
	ASSERT_EQ(zcrpc_stream_close_send(s), ZCRPC_OK);
	EXPECT_EQ(zcrpc_stream_close_send(s), ZCRPC_FAILED_PRECONDITION) << "a second half-close";
	EXPECT_EQ(zcrpc_stream_write(s, "x", 1), ZCRPC_FAILED_PRECONDITION)
		<< "a write after the half-close";
	ASSERT_TRUE(Until([&] { return cl.finished; }, 60000));

	EXPECT_EQ(cl.status, ZCRPC_OK) << cl.message;
	ASSERT_EQ(cl.msgs.size(), 1000u);
	for (int i = 0; i < 1000; i++)
		ASSERT_EQ(cl.msgs[i], "m" + std::to_string(i)) << "message " << i;
	EXPECT_TRUE(cl.got_headers);
	EXPECT_EQ(cl.headers, (Md{{"initial-key", "initial-value"}}));
	EXPECT_EQ(cl.trailers, (Md{{"trailing-key", "trailing-value"}, {"count", "1000"}}));
	ASSERT_EQ(svc_.streams.size(), 1u);
	const Seen &sv = *svc_.streams[0];
	EXPECT_EQ(sv.open_md, md);
	EXPECT_GT(sv.open_timeout_us, 0);
	EXPECT_LE(sv.open_timeout_us, 60 * 1000 * 1000);
	EXPECT_EQ(sv.msgs, (std::vector<std::string>{"1000"}));
	EXPECT_TRUE(sv.half);
	ASSERT_TRUE(Until([&] { return sv.finished; }));
	EXPECT_EQ(sv.status, ZCRPC_OK);
	// 1000 messages through a window of 16: the writer was held back and
	// let go again, many times.
	EXPECT_GT(st.refused, 1000 / int(ZCRPC_STREAM_WINDOW) - 2);
	EXPECT_EQ(sv.writable, st.refused);
}

TEST_F(Stream, ClientStreamingAndABidirectionalPingPong)
{
	// Method behaviour by the first message: "sum" counts the bytes of
	// every message until the half-close and answers once; "echo" echoes
	// each message at once.
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		if (x.msgs.size() == 1)
			return; // the mode
		if (x.msgs[0] == "echo")
			EXPECT_EQ(zcrpc_stream_write(x.s, m.data(), m.size()), ZCRPC_OK);
	};
	svc_.on_half = [&](Seen &x) {
		if (x.msgs[0] == "sum") {
			size_t bytes = 0;
			for (size_t i = 1; i < x.msgs.size(); i++)
				bytes += x.msgs[i].size();
			std::string r = std::to_string(x.msgs.size() - 1) + "/" + std::to_string(bytes);
			EXPECT_EQ(zcrpc_stream_write(x.s, r.data(), r.size()), ZCRPC_OK);
		}
		EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	Listen();

	// Client-streaming: 300 messages of sizes up to 11 KB (some in
	// pieces), written as the window allows, then one answer.
	Seen sum;
	zcrpc_stream *s = Start(sum);
	ASSERT_EQ(zcrpc_stream_write(s, "sum", 3), ZCRPC_OK);
	const size_t max = zcrpc_stream_max_message(s);
	ASSERT_GE(max, 4000u);
	std::string big(max + 1, 'x');
	EXPECT_EQ(zcrpc_stream_write(s, big.data(), big.size()), ZCRPC_INVALID_ARGUMENT);
	int sent = 0, refused = 0;
	size_t bytes = 0;
	auto pump = [&](Seen &) {
		while (sent < 300) {
			size_t n = (size_t(sent) * 37) % (max + 1);
			std::string m(n, char('a' + sent % 26));
			zcrpc_status st = zcrpc_stream_write(s, m.data(), m.size());
			if (st == ZCRPC_RESOURCE_EXHAUSTED) {
				EXPECT_FALSE(zcrpc_stream_can_write(s));
				refused++;
				return;
			}
			ASSERT_EQ(st, ZCRPC_OK);
			bytes += n;
			sent++;
		}
		EXPECT_EQ(zcrpc_stream_close_send(s), ZCRPC_OK);
	};
	sum.on_writable = pump;
	pump(sum);
	ASSERT_TRUE(Until([&] { return sum.finished; }, 60000));
	EXPECT_EQ(sum.status, ZCRPC_OK) << sum.message;
	EXPECT_EQ(sum.msgs, (std::vector<std::string>{"300/" + std::to_string(bytes)}));
	EXPECT_GT(refused, 0) << "300 messages went through a 16-message window";
	ASSERT_EQ(svc_.streams.size(), 1u);
	for (int i = 0; i < 300; i++) {
		size_t n = (size_t(i) * 37) % (max + 1);
		ASSERT_EQ(svc_.streams[0]->msgs[1 + i], std::string(n, char('a' + i % 26))) << i;
	}

	// Bidirectional ping-pong: each answer brings the next message; one
	// empty message among them (an empty message is a message).
	Seen pp;
	zcrpc_stream *b = Start(pp);
	ASSERT_EQ(zcrpc_stream_write(b, "echo", 4), ZCRPC_OK);
	int round = 0;
	pp.on_msg = [&](Seen &x, const std::string &m) {
		EXPECT_EQ(m, round == 7 ? std::string() : "ping" + std::to_string(round));
		if (++round == 200) {
			EXPECT_EQ(zcrpc_stream_close_send(x.s), ZCRPC_OK);
			return;
		}
		std::string next = round == 7 ? std::string() : "ping" + std::to_string(round);
		EXPECT_EQ(zcrpc_stream_write(x.s, next.data(), next.size()), ZCRPC_OK);
	};
	ASSERT_EQ(zcrpc_stream_write(b, "ping0", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return pp.finished; }, 60000));
	EXPECT_EQ(pp.status, ZCRPC_OK) << pp.message;
	EXPECT_EQ(round, 200);
	EXPECT_EQ(pp.msgs.size(), 200u);
}

TEST_F(Stream, APausedReaderHoldsBackOnlyItsOwnWriter)
{
	// Both streams ask for 500 messages; the client pauses stream A. The
	// server's writer of A stops at the window; B and unary calls go on.
	struct W {
		int next = 0;
	};
	std::vector<W> wr(2);
	auto pump = [&](Seen &x) {
		int i = x.open_md.empty() ? 0 : 1;
		WriteSome(x.s, "m", &wr[i].next, 500);
		if (wr[i].next == 500)
			EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	svc_.on_open = pump;
	svc_.on_writable = pump;
	Listen();

	Seen a, b;
	zcrpc_stream *sa = Start(a);
	zcrpc_stream_pause(sa);
	zcrpc_stream_opts o;
	zcrpc_stream_opts_init(&o);
	Md tag = {{"stream", "b"}};
	auto tv = MdOf(tag);
	o.md = tv.data();
	o.n_md = tv.size();
	Start(b, &o);
	ASSERT_TRUE(Until([&] { return b.finished; }, 60000));
	EXPECT_EQ(b.status, ZCRPC_OK);
	EXPECT_EQ(b.msgs.size(), 500u);
	EXPECT_TRUE(UnaryWorks()) << "a unary call while A is paused";
	// A's writer got exactly one window through and no more.
	EXPECT_TRUE(a.msgs.empty());
	EXPECT_EQ(wr[0].next, int(ZCRPC_STREAM_WINDOW));
	EXPECT_FALSE(a.finished);

	zcrpc_stream_resume(sa);
	ASSERT_TRUE(Until([&] { return a.finished; }, 60000));
	EXPECT_EQ(a.status, ZCRPC_OK) << a.message;
	ASSERT_EQ(a.msgs.size(), 500u);
	for (int i = 0; i < 500; i++)
		ASSERT_EQ(a.msgs[i], "m" + std::to_string(i));

	// Paused when the server's final status arrives: the messages before
	// it are still handed over (after the resume), then on_finish.
	wr[0].next = 0;
	Seen c;
	zcrpc_stream *sc = Start(c);
	zcrpc_stream_pause(sc);
	// Let the server write its window; it cannot finish (500 > 16), so
	// finish it from here once the window is used up.
	ASSERT_TRUE(Until([&] { return wr[0].next == int(ZCRPC_STREAM_WINDOW); }));
	Seen *srv_c = svc_.streams.back().get();
	ASSERT_EQ(zcrpc_stream_finish(srv_c->s, ZCRPC_ABORTED, "enough", nullptr, 0), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return srv_c->finished; }));
	EXPECT_FALSE(Until([&] { return c.finished; }, 300)) << "finished while paused";
	zcrpc_stream_resume(sc);
	ASSERT_TRUE(Until([&] { return c.finished; }));
	EXPECT_EQ(c.status, ZCRPC_ABORTED);
	EXPECT_EQ(c.message, "enough");
	EXPECT_EQ(c.msgs.size(), size_t(ZCRPC_STREAM_WINDOW));
}

TEST_F(Stream, CancelFromEitherSideAndTheDeadlineCoversTheWholeStream)
{
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		if (m == "cancel-me")
			EXPECT_EQ(zcrpc_stream_cancel(x.s), ZCRPC_OK);
		else
			EXPECT_EQ(zcrpc_stream_write(x.s, m.data(), m.size()), ZCRPC_OK);
	};
	Listen();

	// The client cancels: its on_finish reads CANCELLED, the server's too.
	Seen a;
	zcrpc_stream *sa = Start(a);
	ASSERT_EQ(zcrpc_stream_write(sa, "hello", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.msgs.size() == 1; }));
	ASSERT_EQ(zcrpc_stream_cancel(sa), ZCRPC_OK);
	EXPECT_FALSE(a.finished) << "on_finish ran inside zcrpc_stream_cancel";
	EXPECT_EQ(zcrpc_stream_cancel(sa), ZCRPC_NOT_FOUND);
	EXPECT_EQ(zcrpc_stream_write(sa, "x", 1), ZCRPC_FAILED_PRECONDITION);
	ASSERT_TRUE(Until([&] { return a.finished && svc_.streams[0]->finished; }));
	EXPECT_EQ(a.status, ZCRPC_CANCELLED);
	EXPECT_EQ(svc_.streams[0]->status, ZCRPC_CANCELLED);
	EXPECT_EQ(svc_.streams[0]->message, "cancelled by the client");

	// The server cancels.
	Seen b;
	zcrpc_stream *sb = Start(b);
	ASSERT_EQ(zcrpc_stream_write(sb, "cancel-me", 9), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return b.finished; }));
	EXPECT_EQ(b.status, ZCRPC_CANCELLED);
	EXPECT_EQ(b.message, "cancelled by the server");

	// A deadline of 300 ms over a stream that keeps exchanging messages:
	// it ends DEADLINE_EXCEEDED on both sides though every message was
	// answered.
	Seen c;
	zcrpc_stream_opts o;
	zcrpc_stream_opts_init(&o);
	o.timeout_us = 300 * 1000;
	zcrpc_stream *s = Start(c, &o);
	c.on_msg = [&](Seen &x, const std::string &m) {
		zcrpc_stream_write(x.s, m.data(), m.size());
	};
	ASSERT_EQ(zcrpc_stream_write(s, "tick", 4), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return c.finished; }));
	EXPECT_EQ(c.status, ZCRPC_DEADLINE_EXCEEDED);
	EXPECT_GT(c.msgs.size(), 1u) << "the stream was alive until its deadline";
	Seen *sv = svc_.streams.back().get();
	ASSERT_TRUE(Until([&] { return sv->finished; }));
	// The server's clock started at arrival: the client's deadline comes
	// first and its CANCEL usually ends the server's side.
	EXPECT_TRUE(sv->status == ZCRPC_CANCELLED || sv->status == ZCRPC_DEADLINE_EXCEEDED)
		<< zcrpc_status_str(sv->status);
	EXPECT_TRUE(UnaryWorks()) << "the connection outlived its streams";
}

TEST_F(Stream, MethodKindsAreKeptApartAndUnknownMethodsAreUnimplemented)
{
	Listen();
	// A stream of a unary method, of an unknown one.
	Seen a, b;
	Start(a, nullptr, kUnary);
	Start(b, nullptr, "/zcrpc.test.Stream/Nope");
	ASSERT_TRUE(Until([&] { return a.finished && b.finished; }));
	EXPECT_EQ(a.status, ZCRPC_UNIMPLEMENTED);
	EXPECT_NE(a.message.find("not a streaming method"), std::string::npos) << a.message;
	EXPECT_EQ(b.status, ZCRPC_UNIMPLEMENTED);
	EXPECT_NE(b.message.find("unknown method"), std::string::npos) << b.message;
	// A unary call of the streaming method.
	struct R {
		int n = 0;
		zcrpc_status st = ZCRPC_OK;
		std::string msg;
	} r;
	auto cb = [](zcrpc_channel *, const zcrpc_reply *rep, void *arg) {
		auto *rr = static_cast<R *>(arg);
		rr->n++;
		rr->st = rep->status;
		rr->msg = rep->message;
	};
	ASSERT_EQ(zcrpc_call_async(ch_, zcrpc_method_id(kStream), "x", 1, nullptr, cb, &r, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return r.n > 0; }));
	EXPECT_EQ(r.st, ZCRPC_UNIMPLEMENTED);
	EXPECT_NE(r.msg.find("is a streaming method"), std::string::npos) << r.msg;
	EXPECT_TRUE(svc_.streams.empty());
	EXPECT_TRUE(UnaryWorks());

	// Bad arguments.
	zcrpc_stream *s = nullptr;
	zcrpc_stream_handlers h{};
	h.size = sizeof(h);
	EXPECT_EQ(zcrpc_stream_start(ch_, 1, nullptr, &h, &s), ZCRPC_INVALID_ARGUMENT)
		<< "no on_finish";
	h.on_finish = CFinish;
	EXPECT_EQ(zcrpc_stream_start(nullptr, 1, nullptr, &h, &s), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_stream_start(ch_, 1, nullptr, nullptr, &s), ZCRPC_INVALID_ARGUMENT);
	zcrpc_stream_handlers sh{};
	sh.size = sizeof(sh);
	sh.on_finish = CFinish;
	EXPECT_EQ(zcrpc_server_register_stream(srv_, "/x.Y/Z", &sh), ZCRPC_INVALID_ARGUMENT)
		<< "no on_open";
	EXPECT_EQ(zcrpc_stream_write(nullptr, "x", 1), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_stream_cancel(nullptr), ZCRPC_NOT_FOUND);
}

TEST_F(Stream, ALostServerEndsItsStreamsUnavailableAndADestroyedChannelCancelsThem)
{
	Listen();
	Seen a;
	zcrpc_stream *sa = Start(a);
	ASSERT_EQ(zcrpc_stream_write(sa, "hi", 2), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return svc_.streams.size() == 1 && svc_.streams[0]->msgs.size() == 1; }));
	// The channel goes: the client's stream ends CANCELLED inside the
	// destroy (on_finish always runs), the server's UNAVAILABLE when the
	// connection closes.
	zcrpc_channel_destroy(ch_);
	ch_ = nullptr;
	EXPECT_TRUE(a.finished);
	EXPECT_EQ(a.status, ZCRPC_CANCELLED);
	ASSERT_TRUE(Until([&] { return svc_.streams[0]->finished; }));
	EXPECT_EQ(svc_.streams[0]->status, ZCRPC_UNAVAILABLE);

	// The server goes while a stream is open: the client's ends UNAVAILABLE.
	ASSERT_EQ(zcrpc_channel_create(w_, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_get_port(srv_)).c_str(), nullptr,
				       &ch_),
		  ZCRPC_OK);
	Seen b;
	zcrpc_stream *sb = Start(b);
	ASSERT_EQ(zcrpc_stream_write(sb, "hi", 2), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return svc_.streams.size() == 2 && svc_.streams[1]->msgs.size() == 1; }));
	zcrpc_server_destroy(srv_);
	srv_ = nullptr;
	EXPECT_TRUE(svc_.streams[1]->finished) << "on_finish runs inside the server's destroy";
	ASSERT_TRUE(Until([&] { return b.finished; }));
	EXPECT_EQ(b.status, ZCRPC_UNAVAILABLE) << b.message;
}

TEST_F(Stream, AGracefulShutdownWaitsForOpenStreamsWithinItsGrace)
{
	// The handler finishes a stream when the client half-closes; a second
	// stream is never finished by the server.
	svc_.on_half = [&](Seen &x) {
		EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	Listen();
	Seen a;
	zcrpc_stream *sa = Start(a);
	ASSERT_EQ(zcrpc_stream_write(sa, "x", 1), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return svc_.streams.size() == 1 && svc_.streams[0]->msgs.size() == 1; }));
	// While shutting down (it progresses the worker itself), the client
	// half-closes from a timer of its own: the posted function runs inside
	// the shutdown's progress.
	ASSERT_EQ(zcrpc_worker_post(
			  w_, [](zcrpc_worker *, void *arg) {
				  EXPECT_EQ(zcrpc_stream_close_send(static_cast<zcrpc_stream *>(arg)),
					    ZCRPC_OK);
			  },
			  sa),
		  ZCRPC_OK);
	EXPECT_EQ(zcrpc_server_shutdown(srv_, 5000), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.finished; }));
	EXPECT_EQ(a.status, ZCRPC_OK) << "the open stream finished within the grace";
	EXPECT_TRUE(svc_.streams[0]->finished);
}

TEST_F(Stream, AShutdownWhoseGraceRunsOutEndsTheStreamsLeftUnavailable)
{
	Listen();
	Seen a;
	zcrpc_stream *sa = Start(a);
	ASSERT_EQ(zcrpc_stream_write(sa, "x", 1), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return svc_.streams.size() == 1 && svc_.streams[0]->msgs.size() == 1; }));
	EXPECT_EQ(zcrpc_server_shutdown(srv_, 300), ZCRPC_DEADLINE_EXCEEDED);
	ASSERT_TRUE(Until([&] { return a.finished && svc_.streams[0]->finished; }));
	EXPECT_EQ(a.status, ZCRPC_UNAVAILABLE) << a.message;
	EXPECT_EQ(svc_.streams[0]->status, ZCRPC_UNAVAILABLE);
	// A new stream after the shutdown cannot reach the server.
	Seen b;
	Start(b);
	ASSERT_TRUE(Until([&] { return b.finished; }));
	EXPECT_EQ(b.status, ZCRPC_UNAVAILABLE) << b.message;
}

// Unary calls carry initial and trailing metadata apart (docs/protocol.md
// §7): the async reply shows both, the synchronous result holds copies.
TEST_F(Stream, UnaryRepliesCarryInitialAndTrailingMetadataApart)
{
	const char *kMd = "/zcrpc.test.Stream/Md";
	ASSERT_EQ(zcrpc_server_register(
			  srv_, kMd,
			  [](zcrpc_server_call *c, const zcrpc_request *r, void *) {
				  // Echo the request's metadata as initial, add a trailer.
				  std::vector<zcrpc_md> init(r->md, r->md + r->n_md);
				  static const char tk[] = "x-trailer", tv[] = "t-value";
				  zcrpc_md trail[] = {{tk, sizeof(tk) - 1, tv, sizeof(tv) - 1}};
				  zcrpc_reply_opts o;
				  zcrpc_reply_opts_init(&o);
				  o.initial_md = init.data();
				  o.n_initial_md = init.size();
				  o.md = trail;
				  o.n_md = 1;
				  std::string m(static_cast<const char *>(r->data), r->len);
				  EXPECT_EQ(zcrpc_server_call_reply(c, m == "fail" ? ZCRPC_ABORTED : ZCRPC_OK,
								    "failed on purpose", r->data, r->len,
								    &o),
					    ZCRPC_OK);
			  },
			  nullptr),
		  ZCRPC_OK);
	Listen();
	Md req_md = {{"x-initial", "i-value"}, {"x-two", ""}};
	auto rv = MdOf(req_md);
	zcrpc_call_opts co;
	zcrpc_call_opts_init(&co);
	co.md = rv.data();
	co.n_md = rv.size();

	struct R {
		int n = 0;
		zcrpc_status st = ZCRPC_UNKNOWN;
		Md initial, trailing;
	};
	auto cb = [](zcrpc_channel *, const zcrpc_reply *rep, void *a) {
		auto *r = static_cast<R *>(a);
		r->n++;
		r->st = rep->status;
		ASSERT_TRUE(ZCRPC_VIEW_HAS(rep, zcrpc_reply, n_initial_md));
		r->initial = CopyMd(rep->initial_md, rep->n_initial_md);
		r->trailing = CopyMd(rep->md, rep->n_md);
	};
	for (const char *what : {"ok", "fail"}) {
		R r;
		ASSERT_EQ(zcrpc_call_async(ch_, zcrpc_method_id(kMd), what, strlen(what), &co, cb, &r,
					   nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(Until([&] { return r.n > 0; }));
		EXPECT_EQ(r.st, std::string(what) == "ok" ? ZCRPC_OK : ZCRPC_ABORTED);
		EXPECT_EQ(r.initial, req_md) << what;
		EXPECT_EQ(r.trailing, (Md{{"x-trailer", "t-value"}})) << what;
	}
	// Synchronous: heap copies in the result, freed by zcrpc_result_free.
	// zcrpc_call progresses the worker, which also runs the server here.
	zcrpc_result res;
	ASSERT_EQ(zcrpc_call(ch_, zcrpc_method_id(kMd), "ok", 2, &co, &res, sizeof(res)), ZCRPC_OK);
	EXPECT_EQ(CopyMd(res.initial_md, res.n_initial_md), req_md);
	EXPECT_EQ(CopyMd(res.md, res.n_md), (Md{{"x-trailer", "t-value"}}));
	zcrpc_result_free(&res);
	// A caller built before the metadata fields: they are neither written
	// nor freed (its struct ends before them).
	struct Old {
		zcrpc_result r;
		char guard[64];
	} old;
	std::memset(&old, 0x5a, sizeof(old));
	const size_t old_size = offsetof(zcrpc_result, md);
	ASSERT_EQ(zcrpc_call(ch_, zcrpc_method_id(kMd), "ok", 2, &co, &old.r, old_size), ZCRPC_OK);
	EXPECT_EQ(old.r.size, old_size);
	const unsigned char *tail = reinterpret_cast<const unsigned char *>(&old.r) + old_size;
	for (size_t k = 0; k < sizeof(zcrpc_result) - old_size; k++)
		ASSERT_EQ(tail[k], 0x5a) << "byte " << k << " past the old struct was written";
	zcrpc_result_free(&old.r);
}

// Messages larger than a frame go in pieces (docs/protocol.md §8): the
// interop test's sizes both ways, a 1 MiB message, a finish and a
// half-close right after a large write, and a reader's limit.
TEST_F(Stream, MessagesLargerThanAFrameGoInPiecesBothWays)
{
	// The server answers each message with one of the size it names
	// ("N" -> N bytes of a pattern), or, for "big-then-finish", writes
	// 200 KiB and finishes at once.
	auto pattern = [](size_t n, char seed) {
		std::string m(n, '\0');
		for (size_t k = 0; k < n; k++)
			m[k] = static_cast<char>(seed + k * 7 + (k >> 10));
		return m;
	};
	std::vector<size_t> got_sizes;
	bool server_ok = true;
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		if (m == "big-then-finish") {
			std::string big = pattern(200 * 1024, 'b');
			EXPECT_EQ(zcrpc_stream_write(x.s, big.data(), big.size()), ZCRPC_OK);
			EXPECT_EQ(zcrpc_stream_write(x.s, "x", 1), ZCRPC_RESOURCE_EXHAUSTED)
				<< "the next write waits for the pieces";
			EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
			return;
		}
		if (m.size() > 64) { // a large message from the client: check it
			got_sizes.push_back(m.size());
			server_ok = server_ok && m == pattern(m.size(), 'c');
			return;
		}
		std::string r = pattern(std::stoul(m), 's');
		EXPECT_EQ(zcrpc_stream_write(x.s, r.data(), r.size()), ZCRPC_OK);
	};
	svc_.on_half = [&](Seen &x) {
		EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	// Pieces both ways: large messages would go by RDMA WRITE above each
	// side's bulk threshold (the tests below), so this one has none.
	zcrpc_channel_opts co;
	zcrpc_channel_opts_init(&co);
	co.bulk_threshold = SIZE_MAX;
	zcrpc_server_destroy(srv_);
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.bulk_threshold = SIZE_MAX;
	ASSERT_EQ(zcrpc_server_create(w_, &so, &srv_), ZCRPC_OK);
	Listen(&co);

	// Ping-pong with gRPC's interop sizes, answers of 31415, 9, 2653, 58979.
	Seen pp;
	zcrpc_stream *s = Start(pp);
	const size_t sizes[] = {31415, 9, 2653, 58979};
	size_t round = 0;
	pp.on_msg = [&](Seen &x, const std::string &m) {
		EXPECT_EQ(m, pattern(sizes[round], 's')) << "answer " << round;
		if (++round < 4) {
			std::string n = std::to_string(sizes[round]);
			EXPECT_EQ(zcrpc_stream_write(x.s, n.data(), n.size()), ZCRPC_OK);
		} else {
			EXPECT_EQ(zcrpc_stream_close_send(x.s), ZCRPC_OK);
		}
	};
	ASSERT_EQ(zcrpc_stream_write(s, "31415", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return pp.finished; }, 60000));
	EXPECT_EQ(pp.status, ZCRPC_OK) << pp.message;
	EXPECT_EQ(round, 4u);

	// The client writes 1 MiB and 5000 bytes, half-closing right after the
	// second (the half-close goes after its pieces).
	Seen up;
	zcrpc_stream *u = Start(up);
	std::string mib = pattern(1 << 20, 'c'), mid = pattern(5000, 'c');
	ASSERT_EQ(zcrpc_stream_write(u, mib.data(), mib.size()), ZCRPC_OK);
	EXPECT_FALSE(zcrpc_stream_can_write(u));
	EXPECT_EQ(zcrpc_stream_write(u, mid.data(), mid.size()), ZCRPC_RESOURCE_EXHAUSTED)
		<< "refused until the pieces went; on_writable follows";
	up.on_writable = [&](Seen &x) {
		EXPECT_EQ(zcrpc_stream_write(x.s, mid.data(), mid.size()), ZCRPC_OK);
		EXPECT_EQ(zcrpc_stream_close_send(x.s), ZCRPC_OK);
		x.on_writable = nullptr;
	};
	ASSERT_TRUE(Until([&] { return up.finished; }, 60000));
	EXPECT_EQ(up.status, ZCRPC_OK) << up.message;
	EXPECT_EQ(got_sizes, (std::vector<size_t>{size_t(1) << 20, 5000}));
	EXPECT_TRUE(server_ok) << "a large message arrived changed";

	// A finish right after a large write: the message, then the status.
	Seen fin;
	zcrpc_stream *f = Start(fin);
	ASSERT_EQ(zcrpc_stream_write(f, "big-then-finish", 15), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return fin.finished; }, 60000));
	EXPECT_EQ(fin.status, ZCRPC_OK) << fin.message;
	ASSERT_EQ(fin.msgs.size(), 1u);
	EXPECT_EQ(fin.msgs[0], pattern(200 * 1024, 'b'));

	// A reader's limit: 100 KiB; the server's 200 KiB message ends the
	// stream RESOURCE_EXHAUSTED at the client, CANCELLED at the server.
	Seen lim;
	zcrpc_stream_opts o;
	zcrpc_stream_opts_init(&o);
	o.max_message = 100 * 1024;
	zcrpc_stream *l = Start(lim, &o);
	ASSERT_EQ(zcrpc_stream_write(l, "big-then-finish", 15), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return lim.finished; }, 60000));
	EXPECT_EQ(lim.status, ZCRPC_RESOURCE_EXHAUSTED) << lim.message;
	EXPECT_EQ(lim.message, "a stream message above the reader's limit");
	EXPECT_TRUE(lim.msgs.empty());
	std::string huge(zcrpc_stream_max_message(l) + 1, 'h');
	Seen z;
	zcrpc_stream *zs = Start(z);
	EXPECT_EQ(zcrpc_stream_write(zs, huge.data(), huge.size()), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_stream_cancel(zs), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return z.finished; }));
}

// ---- a client's large messages by RDMA WRITE (stream_bulk.c) -------------

namespace {

std::string Pattern(size_t n, char seed)
{
	std::string m(n, '\0');
	for (size_t k = 0; k < n; k++)
		m[k] = static_cast<char>(seed + k * 13 + (k >> 9));
	return m;
}

zcrpc_server_stats ServerStats(zcrpc_server *s)
{
	zcrpc_server_stats st{};
	zcrpc_server_get_stats(s, &st, sizeof(st));
	return st;
}

} // namespace

TEST_F(Stream, ClientMessagesAboveTheBulkThresholdGoByRdmaWriteInOrder)
{
	// The server checks every message against the pattern its size names
	// and pauses after the first large one for a while: what the client
	// sends behind it waits, in order.
	std::vector<size_t> sizes;
	bool intact = true, paused_once = false;
	zcrpc_stream *paused = nullptr;
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		sizes.push_back(m.size());
		intact = intact && m == Pattern(m.size(), 'a');
		if (m.size() > 16384 && !paused_once) {
			paused_once = true;
			paused = x.s;
			zcrpc_stream_pause(x.s);
		}
	};
	svc_.on_half = [&](Seen &x) {
		std::string n = std::to_string(x.msgs.size());
		EXPECT_EQ(zcrpc_stream_write(x.s, n.data(), n.size()), ZCRPC_OK);
		EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	Listen();
	ASSERT_TRUE(UnaryWorks()); // the connection is up: attachments from here

	const std::vector<size_t> want = {100, size_t(1) << 20, 5, 20000, 3000000, 16385, 7};
	Seen up;
	zcrpc_stream *u = Start(up);
	size_t next = 0;
	auto write_more = [&](Seen &x) {
		while (next < want.size()) {
			std::string m = Pattern(want[next], 'a');
			zcrpc_status st = zcrpc_stream_write(x.s, m.data(), m.size());
			if (st == ZCRPC_RESOURCE_EXHAUSTED)
				return; // an attachment is going: on_writable follows
			ASSERT_EQ(st, ZCRPC_OK) << zcrpc_status_str(st);
			next++;
		}
		EXPECT_EQ(zcrpc_stream_close_send(x.s), ZCRPC_OK);
		x.on_writable = nullptr;
	};
	up.on_writable = write_more;
	write_more(up);
	ASSERT_TRUE(Until([&] { return paused_once; }, 60000));
	// Paused at the server: the rest waits there (or at the client).
	ASSERT_FALSE(Until([&] { return up.finished; }, 500));
	zcrpc_server_stats during = ServerStats(srv_);
	EXPECT_GT(during.bulk_pinned, 0u) << "the server registered memory for the parts";
	zcrpc_stream_resume(paused);
	ASSERT_TRUE(Until([&] { return up.finished; }, 90000));
	EXPECT_EQ(up.status, ZCRPC_OK) << up.message;
	EXPECT_EQ(sizes, want) << "every message, in order";
	EXPECT_TRUE(intact) << "a message arrived changed";
	ASSERT_EQ(up.msgs.size(), 1u);
	EXPECT_EQ(up.msgs[0], std::to_string(want.size()));
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_GE(cs.copied_bytes, (size_t(1) << 20) + 3000000 + 20000 + 16385)
		<< "the large messages went from the channel's registered copies";
	ASSERT_TRUE(Until([&] { return ServerStats(srv_).bulk_in_use == 0; }))
		<< "the server's parts' memory went back";
	EXPECT_EQ(ServerStats(srv_).protocol_errors, 0u);
	EXPECT_TRUE(UnaryWorks());
}

TEST_F(Stream, AStreamEndedWhileItsLargeMessageIsGrantedLeavesNothingBehind)
{
	// The server finishes a stream at its first (small) message, while the
	// client's 2 MiB message behind it waits for its grant or its write;
	// another stream is cancelled by the client right after a large write.
	// Neither leaks server memory or breaks the connection.
	zcrpc_server_destroy(srv_);
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.bulk_write_timeout_ms = 300; // a grant never written ends soon
	ASSERT_EQ(zcrpc_server_create(w_, &so, &srv_), ZCRPC_OK);
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		if (m == "finish")
			EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	Listen();
	ASSERT_TRUE(UnaryWorks());
	std::string big = Pattern(2 << 20, 'b');

	Seen a;
	zcrpc_stream *sa = Start(a);
	ASSERT_EQ(zcrpc_stream_write(sa, "finish", 6), ZCRPC_OK);
	ASSERT_EQ(zcrpc_stream_write(sa, big.data(), big.size()), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.finished; }, 60000));
	EXPECT_EQ(a.status, ZCRPC_OK) << a.message;

	Seen b;
	zcrpc_stream *sb = Start(b);
	ASSERT_EQ(zcrpc_stream_write(sb, big.data(), big.size()), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return ServerStats(srv_).bulk_pinned > 0; }, 60000));
	ASSERT_EQ(zcrpc_stream_cancel(sb), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return b.finished; }, 60000));
	EXPECT_EQ(b.status, ZCRPC_CANCELLED);
	ASSERT_TRUE(Until([&] {
		return svc_.streams.size() == 2 && svc_.streams[1]->finished;
	}, 60000));
	EXPECT_EQ(svc_.streams[1]->status, ZCRPC_CANCELLED) << svc_.streams[1]->message;
	EXPECT_TRUE(svc_.streams[1]->msgs.empty());

	ASSERT_TRUE(Until([&] { return ServerStats(srv_).bulk_in_use == 0; }, 30000))
		<< "every part's memory went back (written, revoked or timed out)";
	EXPECT_EQ(ServerStats(srv_).protocol_errors, 0u);
	EXPECT_TRUE(UnaryWorks()) << "the connection stayed";
	// And a new stream's large message still goes.
	Seen c;
	std::vector<size_t> got;
	svc_.on_msg = [&](Seen &, const std::string &m) { got.push_back(m.size()); };
	svc_.on_half = [&](Seen &x) {
		EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	zcrpc_stream *sc = Start(c);
	ASSERT_EQ(zcrpc_stream_write(sc, big.data(), big.size()), ZCRPC_OK);
	EXPECT_EQ(zcrpc_stream_close_send(sc), ZCRPC_OK) << "a half-close waits behind it";
	ASSERT_TRUE(Until([&] { return c.finished; }, 60000));
	EXPECT_EQ(c.status, ZCRPC_OK) << c.message;
	EXPECT_EQ(got, std::vector<size_t>{big.size()});
}

// ---- a server's large messages by RDMA WRITE (stream_bulk.c) -------------

namespace {

// The server's side of the two tests below: at "go" it writes messages of
// the sizes in @want (each the pattern of its size), continuing from
// on_writable while a large one is out, and finishes right after the last
// write (the status goes after that message's write). "big:N" writes one
// message of N bytes and finishes.
void ServeSizes(Service &svc, const std::vector<size_t> &want, size_t &next)
{
	auto write_more = [&want, &next](Seen &x) {
		while (next < want.size()) {
			std::string m = Pattern(want[next], 's');
			zcrpc_status st = zcrpc_stream_write(x.s, m.data(), m.size());
			if (st == ZCRPC_RESOURCE_EXHAUSTED)
				return; // a message is going out: on_writable follows
			ASSERT_EQ(st, ZCRPC_OK) << zcrpc_status_str(st);
			next++;
		}
		zcrpc_md t = {"n", 1, "all", 3};
		EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, &t, 1), ZCRPC_OK);
		x.on_writable = nullptr;
	};
	svc.on_msg = [write_more](Seen &x, const std::string &m) {
		if (m.rfind("big:", 0) == 0) {
			std::string b = Pattern(std::stoul(m.substr(4)), 's');
			EXPECT_EQ(zcrpc_stream_write(x.s, b.data(), b.size()), ZCRPC_OK);
			EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
			return;
		}
		x.on_writable = write_more;
		write_more(x);
	};
}

} // namespace

TEST_F(Stream, ServerMessagesAboveTheBulkThresholdGoByRdmaWriteInOrder)
{
	// Small and large messages in a row, the large ones (above the
	// server's bulk threshold, 16384) written by the server into memory
	// the client grants; the client pauses after the first large one, so
	// what follows (announcements included) waits at the client, in
	// order; the final status, sent right after the last large write,
	// comes after that message.
	const std::vector<size_t> want = {100,   size_t(1) << 20, 5,    20000, 3000000,
					  16385, 7,		  40000};
	size_t next = 0;
	ServeSizes(svc_, want, next);
	Listen();
	ASSERT_TRUE(UnaryWorks()); // the connection is up

	Seen dn;
	zcrpc_stream *d = Start(dn);
	bool paused_once = false;
	dn.on_msg = [&](Seen &x, const std::string &m) {
		if (m.size() > 16384 && !paused_once) {
			paused_once = true;
			zcrpc_stream_pause(x.s);
		}
	};
	ASSERT_EQ(zcrpc_stream_write(d, "go", 2), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return paused_once; }, 60000));
	ASSERT_FALSE(Until([&] { return dn.finished; }, 500)) << "paused: the rest waits";
	zcrpc_stream_resume(d);
	ASSERT_TRUE(Until([&] { return dn.finished; }, 90000));
	EXPECT_EQ(dn.status, ZCRPC_OK) << dn.message;
	ASSERT_EQ(dn.msgs.size(), want.size()) << "every message before the final status";
	for (size_t i = 0; i < want.size(); i++)
		EXPECT_TRUE(dn.msgs[i] == Pattern(want[i], 's'))
			<< "message " << i << " (" << want[i] << " bytes) arrived changed or out of order";
	EXPECT_EQ(dn.trailers, (Md{{"n", "all"}}));

	zcrpc_server_stats ss = ServerStats(srv_);
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(ss.stream_bulk_msgs_sent, 5u) << "the five above 16384 bytes by RDMA WRITE";
	EXPECT_EQ(cs.stream_bulk_msgs_recv, 5u);
	EXPECT_EQ(ss.stream_bulk_msgs, 0u) << "the client wrote none";
	EXPECT_EQ(cs.stream_msgs_recv, want.size());
	EXPECT_EQ(cs.in_flight, 0u) << "a stream message's record is no call";
	EXPECT_EQ(cs.calls_started, cs.calls_ok) << "nor counted as one";
	EXPECT_EQ(ss.protocol_errors, 0u);
	EXPECT_EQ(cs.protocol_errors, 0u);
	ASSERT_TRUE(Until([&] { return ServerStats(srv_).bulk_in_use == 0; }))
		<< "the server's copies went back";

	// A reader's limit (100 KiB): a 200 KiB announcement is refused
	// before anything is granted; the server's stream ends CANCELLED.
	Seen lim;
	zcrpc_stream_opts o;
	zcrpc_stream_opts_init(&o);
	o.max_message = 100 * 1024;
	zcrpc_stream *l = Start(lim, &o);
	ASSERT_EQ(zcrpc_stream_write(l, "big:204800", 10), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return lim.finished; }, 60000));
	EXPECT_EQ(lim.status, ZCRPC_RESOURCE_EXHAUSTED) << lim.message;
	EXPECT_EQ(lim.message, "a stream message above the reader's limit");
	EXPECT_TRUE(lim.msgs.empty());
	ASSERT_TRUE(Until([&] { return ServerStats(srv_).bulk_in_use == 0; }, 30000))
		<< "the refused message's copy went back (its grant never came)";
	EXPECT_TRUE(UnaryWorks()) << "the connection stayed";
}

TEST_F(Stream, AClientThatLeavesWhileTheServersLargeMessageIsOutLeavesNothingBehind)
{
	// The client cancels a stream as soon as a small message arrives that
	// the server wrote just before a 2 MiB one: the announcement finds the
	// stream ended (no grant) or its grant is out; either way the server's
	// copy goes back (written, or its time for a grant ran out) and the
	// connection stays.
	zcrpc_server_destroy(srv_);
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.bulk_write_timeout_ms = 300; // a grant that never comes ends soon
	ASSERT_EQ(zcrpc_server_create(w_, &so, &srv_), ZCRPC_OK);
	svc_.on_msg = [&](Seen &x, const std::string &) {
		std::string big = Pattern(2 << 20, 'x');
		EXPECT_EQ(zcrpc_stream_write(x.s, "a", 1), ZCRPC_OK);
		EXPECT_EQ(zcrpc_stream_write(x.s, big.data(), big.size()), ZCRPC_OK);
	};
	Listen();
	ASSERT_TRUE(UnaryWorks());
	for (int round = 0; round < 3; round++) {
		SCOPED_TRACE("round " + std::to_string(round));
		Seen c;
		zcrpc_stream *s = Start(c);
		c.on_msg = [&](Seen &x, const std::string &) {
			if (round < 2)
				EXPECT_EQ(zcrpc_stream_cancel(x.s), ZCRPC_OK); // at "a"
			else if (x.msgs.size() == 2)
				EXPECT_EQ(zcrpc_stream_cancel(x.s), ZCRPC_OK); // after the big one
		};
		ASSERT_EQ(zcrpc_stream_write(s, "go", 2), ZCRPC_OK);
		ASSERT_TRUE(Until([&] { return c.finished; }, 60000));
		EXPECT_EQ(c.status, ZCRPC_CANCELLED);
		EXPECT_LE(c.msgs.size(), round < 2 ? 1u : 2u);
	}
	ASSERT_TRUE(Until([&] {
		return svc_.streams.size() == 3 && svc_.streams[2]->finished;
	}, 30000));
	ASSERT_TRUE(Until([&] { return ServerStats(srv_).bulk_in_use == 0; }, 30000))
		<< "every copy went back";
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(cs.protocol_errors, 0u);
	EXPECT_EQ(ServerStats(srv_).protocol_errors, 0u);
	EXPECT_EQ(cs.in_flight, 0u);
	EXPECT_TRUE(UnaryWorks()) << "the connection stayed";
}

TEST_F(Stream, WithoutServerStreamBulkInTheHellosTheServersLargeMessagesGoInPieces)
{
	// An older peer (its hello without SERVER_STREAM_BULK, 0x800): the
	// same large messages arrive whole, in pieces, none by RDMA WRITE.
	zcrpc__worker_test_clear_features(w_, ZCRPC_FEAT_SERVER_STREAM_BULK);
	const std::vector<size_t> want = {size_t(1) << 20, 9, 40000};
	size_t next = 0;
	ServeSizes(svc_, want, next);
	Listen();
	ASSERT_TRUE(UnaryWorks());
	Seen dn;
	zcrpc_stream *d = Start(dn);
	ASSERT_EQ(zcrpc_stream_write(d, "go", 2), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return dn.finished; }, 90000));
	EXPECT_EQ(dn.status, ZCRPC_OK) << dn.message;
	ASSERT_EQ(dn.msgs.size(), want.size());
	for (size_t i = 0; i < want.size(); i++)
		EXPECT_TRUE(dn.msgs[i] == Pattern(want[i], 's')) << "message " << i;
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(ServerStats(srv_).stream_bulk_msgs_sent, 0u);
	EXPECT_EQ(cs.stream_bulk_msgs_recv, 0u);
	EXPECT_TRUE(UnaryWorks());
}

// ---- messages written in place from registered memory ---------------------

namespace {

// A registered buffer of the worker's context, freed with the test.
struct RegBuf {
	std::vector<char> mem;
	zcrpc_mr *mr = nullptr;
	RegBuf(zcrpc_worker *w, size_t n) : mem(n)
	{
		EXPECT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(w), mem.data(), n, 0, &mr),
			  ZCRPC_OK);
	}
	~RegBuf() { zcrpc_mr_deregister(mr); }
	void Fill(size_t off, const std::string &v) { std::memcpy(&mem[off], v.data(), v.size()); }
	zcrpc_bulk At(size_t off, size_t len) const { return zcrpc_bulk{mr, off, len}; }
};

uint64_t CopiedByChannel(zcrpc_channel *ch)
{
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
	return cs.copied_bytes;
}

} // namespace

TEST_F(Stream, WriteBulkSendsFromTheCallersRegisteredMemoryInPlaceBothWays)
{
	// Each side writes large messages from its own registration: they go
	// by RDMA WRITE with no copy (copied_bytes does not move), and the
	// memory is the caller's again at the next on_writable (rewritten
	// there, the next message carries the new bytes). A small one is
	// copied from the same memory.
	RegBuf cbuf(w_, 2 << 20), sbuf(w_, 2 << 20);
	const std::string d1 = Pattern(1 << 20, 'd'), d2 = Pattern(200000, 'e');
	uint64_t s_copied_before = 0, s_copied_after = 0;
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		if (m != "down")
			return;
		s_copied_before = ServerStats(srv_).copied_bytes;
		sbuf.Fill(0, d1);
		zcrpc_bulk b = sbuf.At(0, d1.size());
		EXPECT_EQ(zcrpc_stream_write_bulk(x.s, &b), ZCRPC_OK);
		x.on_writable = [&](Seen &y) { // the first is out: the memory is ours
			if (y.writable == 1) {
				sbuf.Fill(0, d2);
				zcrpc_bulk b2 = sbuf.At(0, d2.size());
				EXPECT_EQ(zcrpc_stream_write_bulk(y.s, &b2), ZCRPC_OK);
			} else if (y.writable == 2) {
				s_copied_after = ServerStats(srv_).copied_bytes;
				EXPECT_EQ(zcrpc_stream_finish(y.s, ZCRPC_OK, nullptr, nullptr, 0),
					  ZCRPC_OK);
			}
		};
	};
	Listen();
	ASSERT_TRUE(UnaryWorks()); // the connection is up: in place from here
	Seen c;
	zcrpc_stream *s = Start(c);
	zcrpc_bulk bad{cbuf.mr, (2 << 20) - 10, 100};
	EXPECT_EQ(zcrpc_stream_write_bulk(s, &bad), ZCRPC_INVALID_ARGUMENT) << "past the registration";
	bad = cbuf.At(0, 0);
	EXPECT_EQ(zcrpc_stream_write_bulk(s, &bad), ZCRPC_INVALID_ARGUMENT) << "empty";
	EXPECT_EQ(zcrpc_stream_write_bulk(s, nullptr), ZCRPC_INVALID_ARGUMENT);

	const uint64_t copied0 = CopiedByChannel(ch_);
	const std::string u1 = Pattern(1 << 20, 'u'), u2 = Pattern(300000, 'v'), u3 = "small";
	cbuf.Fill(0, u1);
	zcrpc_bulk b1 = cbuf.At(0, u1.size());
	ASSERT_EQ(zcrpc_stream_write_bulk(s, &b1), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return c.writable == 1; }, 60000)) << "on_writable follows";
	cbuf.Fill(4096, u2); // the first message's memory, rewritten
	zcrpc_bulk b2 = cbuf.At(4096, u2.size());
	ASSERT_EQ(zcrpc_stream_write_bulk(s, &b2), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return c.writable == 2; }, 60000));
	cbuf.Fill(100, u3);
	zcrpc_bulk b3 = cbuf.At(100, u3.size());
	ASSERT_EQ(zcrpc_stream_write_bulk(s, &b3), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return c.writable == 3; })) << "on_writable follows a copy too";
	EXPECT_EQ(CopiedByChannel(ch_) - copied0, 0u)
		<< "the large ones went without a copy (a copy into a registered buffer counts; "
		   "a small message's copy into its frame does not)";
	ASSERT_TRUE(Until([&] { return svc_.streams.size() == 1 && svc_.streams[0]->msgs.size() == 3; },
			  60000));
	EXPECT_TRUE(svc_.streams[0]->msgs[0] == u1) << "the first arrived changed";
	EXPECT_TRUE(svc_.streams[0]->msgs[1] == u2) << "the second arrived changed";
	EXPECT_EQ(svc_.streams[0]->msgs[2], u3);

	ASSERT_EQ(zcrpc_stream_write(s, "down", 4), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return c.finished; }, 60000));
	EXPECT_EQ(c.status, ZCRPC_OK) << c.message;
	ASSERT_EQ(c.msgs.size(), 2u);
	EXPECT_TRUE(c.msgs[0] == d1) << "the server's first arrived changed";
	EXPECT_TRUE(c.msgs[1] == d2) << "the server's second arrived changed";
	EXPECT_EQ(s_copied_after, s_copied_before) << "the server copied neither";
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(cs.stream_bulk_msgs, 2u);
	EXPECT_EQ(cs.stream_bulk_msgs_recv, 2u);
	EXPECT_EQ(ServerStats(srv_).stream_bulk_msgs_sent, 2u);
	EXPECT_TRUE(UnaryWorks());
}

TEST_F(Stream, AnInPlaceMessagesOnFinishWaitsUntilTheDeviceCanNoLongerReadIt)
{
	// The server writes 1 MiB in place to a paused client (which grants
	// nothing while paused) and cancels the stream at once: its on_finish
	// waits until the message's record ended (no grant within the write
	// time limit), since until then a grant could still start the write.
	zcrpc_server_destroy(srv_);
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.bulk_write_timeout_ms = 3000;
	ASSERT_EQ(zcrpc_server_create(w_, &so, &srv_), ZCRPC_OK);
	RegBuf sbuf(w_, 1 << 20);
	bool cancelled = false;
	svc_.on_msg = [&](Seen &x, const std::string &) {
		sbuf.Fill(0, Pattern(1 << 20, 'p'));
		zcrpc_bulk b = sbuf.At(0, 1 << 20);
		EXPECT_EQ(zcrpc_stream_write_bulk(x.s, &b), ZCRPC_OK);
		EXPECT_EQ(zcrpc_stream_cancel(x.s), ZCRPC_OK);
		cancelled = true;
	};
	Listen();
	ASSERT_TRUE(UnaryWorks());
	Seen c;
	zcrpc_stream *s = Start(c);
	zcrpc_stream_pause(s);
	ASSERT_EQ(zcrpc_stream_write(s, "go", 2), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return cancelled; }));
	EXPECT_FALSE(Until([&] { return svc_.streams[0]->finished; }, 300))
		<< "on_finish ran while the message could still be written";
	EXPECT_EQ(ServerStats(srv_).bulk_timeouts, 0u);
	ASSERT_TRUE(Until([&] { return svc_.streams[0]->finished; }, 30000));
	EXPECT_EQ(ServerStats(srv_).bulk_timeouts, 1u) << "on_finish came once the record ended";
	EXPECT_EQ(svc_.streams[0]->status, ZCRPC_CANCELLED);
	zcrpc_stream_resume(s);
	ASSERT_TRUE(Until([&] { return c.finished; }));
	EXPECT_EQ(c.status, ZCRPC_CANCELLED) << c.message;
	EXPECT_TRUE(c.msgs.empty()) << "the abandoned message is not handed over";
	EXPECT_EQ(ServerStats(srv_).protocol_errors, 0u);
	EXPECT_TRUE(UnaryWorks()) << "the connection stayed";
}

TEST_F(Stream, CountersCountEachSidesStreamsMessagesBytesAndEnds)
{
	// An echo stream of three messages (one of them large enough for RDMA
	// WRITE) that ends OK, and one the client cancels: each side's
	// counters say how many streams, messages and bytes went which way,
	// how many by RDMA WRITE, how many ended how, and that none is open.
	svc_.on_msg = [&](Seen &x, const std::string &m) {
		if (m.size() < 100)
			EXPECT_EQ(zcrpc_stream_write(x.s, m.data(), m.size()), ZCRPC_OK);
	};
	svc_.on_half = [&](Seen &x) {
		EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	Listen();
	ASSERT_TRUE(UnaryWorks()); // the connection is up: attachments from here
	zcrpc_channel_stats c0{};
	zcrpc_channel_get_stats(ch_, &c0, sizeof(c0));
	EXPECT_EQ(c0.streams_started, 0u);
	EXPECT_EQ(c0.stream_msgs_sent, 0u) << "a unary call is no stream message";

	const std::string big = Pattern(100000, 'c');
	Seen a;
	zcrpc_stream *sa = Start(a);
	ASSERT_EQ(zcrpc_stream_write(sa, "one", 3), ZCRPC_OK);
	ASSERT_EQ(zcrpc_stream_write(sa, "two!", 4), ZCRPC_OK);
	zcrpc_status st = zcrpc_stream_write(sa, big.data(), big.size());
	ASSERT_EQ(st, ZCRPC_OK) << zcrpc_status_str(st);
	zcrpc_channel_stats open{};
	zcrpc_channel_get_stats(ch_, &open, sizeof(open));
	EXPECT_EQ(open.streams_started, 1u);
	EXPECT_EQ(open.streams_open, 1u);
	ASSERT_EQ(zcrpc_stream_close_send(sa), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.finished; }, 60000));
	EXPECT_EQ(a.status, ZCRPC_OK) << a.message;
	ASSERT_EQ(a.msgs.size(), 2u);

	Seen b;
	zcrpc_stream *sb = Start(b);
	ASSERT_EQ(zcrpc_stream_write(sb, "12345", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return b.msgs.size() == 1; }));
	ASSERT_EQ(zcrpc_stream_cancel(sb), ZCRPC_OK);
	ASSERT_TRUE(Until([&] {
		return b.finished && svc_.streams.size() == 2 && svc_.streams[1]->finished;
	}));
	EXPECT_EQ(b.status, ZCRPC_CANCELLED);

	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(cs.streams_started, 2u);
	EXPECT_EQ(cs.streams_ok, 1u);
	EXPECT_EQ(cs.streams_failed, 1u);
	EXPECT_EQ(cs.streams_open, 0u);
	EXPECT_EQ(cs.stream_msgs_sent, 4u);
	EXPECT_EQ(cs.stream_bytes_sent, 3u + 4 + big.size() + 5);
	EXPECT_EQ(cs.stream_msgs_recv, 3u);
	EXPECT_EQ(cs.stream_bytes_recv, 3u + 4 + 5);
	EXPECT_EQ(cs.stream_bulk_msgs, 1u) << "the 100,000-byte message went by RDMA WRITE";
	EXPECT_EQ(cs.calls_started, c0.calls_started) << "streams are not unary calls";

	zcrpc_server_stats ss = ServerStats(srv_);
	EXPECT_EQ(ss.streams_started, 2u);
	EXPECT_EQ(ss.streams_open, 0u);
	EXPECT_EQ(ss.stream_msgs_recv, 4u);
	EXPECT_EQ(ss.stream_bytes_recv, cs.stream_bytes_sent);
	EXPECT_EQ(ss.stream_msgs_sent, 3u);
	EXPECT_EQ(ss.stream_bytes_sent, cs.stream_bytes_recv);
	EXPECT_EQ(ss.stream_bulk_msgs, 1u);
	EXPECT_EQ(ss.streams_ok, 1u);
	EXPECT_EQ(ss.streams_failed, 1u) << "the cancelled one";
	EXPECT_EQ(ss.streams_refused, 0u);
	EXPECT_TRUE(UnaryWorks());
}

TEST_F(Stream, AWriteThatFoundNoPoolSlotIsFollowedByOnWritable)
{
	// A worker whose pool is small enough to empty: every slot taken, a
	// write with its window open is refused RESOURCE_EXHAUSTED for the
	// slot; on_writable follows without the writer polling, and once the
	// slots are back the write goes and arrives.
	zcrpc_server_destroy(srv_);
	zcrpc_worker_destroy(w_);
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.pool_max_slots = 512;
	ASSERT_EQ(zcrpc_worker_create(&wo, &w_), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_create(w_, nullptr, &srv_), ZCRPC_OK);
	Listen();
	ASSERT_TRUE(UnaryWorks());
	Seen a;
	zcrpc_stream *sa = Start(a);
	ASSERT_EQ(zcrpc_stream_write(sa, "first", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return svc_.streams.size() == 1 && svc_.streams[0]->msgs.size() == 1; }));

	std::vector<zcrpc_msg> hoard;
	for (;;) {
		zcrpc_msg m;
		if (zcrpc_msg_alloc(w_, 1, &m) != ZCRPC_OK)
			break;
		hoard.push_back(m);
	}
	ASSERT_GT(hoard.size(), 0u);
	ASSERT_EQ(zcrpc_stream_can_write(sa), 1) << "the window is open";
	ASSERT_EQ(zcrpc_stream_write(sa, "second", 6), ZCRPC_RESOURCE_EXHAUSTED)
		<< "the write found a slot: the pool is not empty";
	const int before = a.writable;
	// Slots that come back meanwhile (receives) are taken again, so the
	// callback comes from the retry, not from a freed slot.
	auto take_back = [&] {
		zcrpc_msg m;
		while (zcrpc_msg_alloc(w_, 1, &m) == ZCRPC_OK)
			hoard.push_back(m);
	};
	ASSERT_TRUE(Until([&] {
		take_back();
		return a.writable > before;
	}, 2000)) << "no on_writable after a write refused for its slot";
	for (auto &m : hoard)
		zcrpc_msg_free(w_, &m);
	hoard.clear();
	bool sent = false;
	a.on_writable = [&](Seen &x) {
		if (!sent && zcrpc_stream_write(x.s, "second", 6) == ZCRPC_OK)
			sent = true;
	};
	if (zcrpc_stream_write(sa, "second", 6) == ZCRPC_OK)
		sent = true;
	ASSERT_TRUE(Until([&] { return sent; })) << "the write never went";
	ASSERT_TRUE(Until([&] { return svc_.streams[0]->msgs.size() == 2; }));
	EXPECT_EQ(svc_.streams[0]->msgs[1], "second");
	ASSERT_EQ(zcrpc_stream_cancel(sa), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.finished && svc_.streams[0]->finished; }));
	EXPECT_TRUE(UnaryWorks()) << "the connection outlived the empty pool";
}

namespace {

// The exchange of the two batch tests: the client writes a window's worth
// of small messages in one go and half-closes; the server writes @n small
// messages as its window allows (a window's worth, then 8 at each WINDOW,
// each time in one turn) and finishes. Both sides check every message in
// order.
void SmallMessagesBothWays(Service &svc, const std::function<zcrpc_stream *(Seen &)> &start,
			   const std::function<bool(const std::function<bool()> &)> &until,
			   int n)
{
	struct State {
		int next = 0;
	} st;
	auto pump = [&st, n](Seen &x) {
		WriteSome(x.s, "m", &st.next, n);
		if (st.next == n && x.half && x.s)
			EXPECT_EQ(zcrpc_stream_finish(x.s, ZCRPC_OK, nullptr, nullptr, 0), ZCRPC_OK);
	};
	svc.on_half = pump;
	svc.on_writable = pump;
	Seen cl;
	zcrpc_stream *s = start(cl);
	ASSERT_NE(s, nullptr);
	for (unsigned i = 0; i < ZCRPC_STREAM_WINDOW; i++) {
		std::string m = "c" + std::to_string(i);
		ASSERT_EQ(zcrpc_stream_write(s, m.data(), m.size()), ZCRPC_OK) << i;
	}
	ASSERT_EQ(zcrpc_stream_close_send(s), ZCRPC_OK);
	ASSERT_TRUE(until([&] { return cl.finished; }));
	EXPECT_EQ(cl.status, ZCRPC_OK) << cl.message;
	ASSERT_EQ(cl.msgs.size(), size_t(n));
	for (int i = 0; i < n; i++)
		ASSERT_EQ(cl.msgs[i], "m" + std::to_string(i)) << "message " << i;
	ASSERT_EQ(svc.streams.size(), 1u);
	const Seen &sv = *svc.streams[0];
	ASSERT_EQ(sv.msgs.size(), size_t(ZCRPC_STREAM_WINDOW));
	for (unsigned i = 0; i < ZCRPC_STREAM_WINDOW; i++)
		EXPECT_EQ(sv.msgs[i], "c" + std::to_string(i)) << "message " << i;
	svc.on_half = nullptr;
	svc.on_writable = nullptr;
}

} // namespace

TEST_F(Stream, SmallFramesWrittenInOneTurnShareOneMessageBothWays)
{
	// docs/protocol.md §8, Batches: the client's 16 messages written in a
	// row go as one message; the server's messages written at each WINDOW
	// go as one (8 at a time), so most of its 2,000 travel batched, several
	// to a message; order holds, and the final status follows the last.
	Listen();
	ASSERT_TRUE(UnaryWorks()); // the connection is up: the writes batch
	SmallMessagesBothWays(
		svc_, [&](Seen &x) { return Start(x); },
		[&](const std::function<bool()> &f) { return Until(f, 60000); }, 2000);
	zcrpc_server_stats ss = ServerStats(srv_);
	EXPECT_EQ(ss.stream_msgs_sent, 2000u);
	EXPECT_GT(ss.stream_batches, 0u);
	EXPECT_GE(ss.stream_batched_frames, 1000u) << "most messages went batched";
	EXPECT_GE(ss.stream_batched_frames, 4 * ss.stream_batches)
		<< "4 frames or more to a batch on average";
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_GE(cs.stream_batches, 1u);
	EXPECT_GE(cs.stream_batched_frames, uint64_t(ZCRPC_STREAM_WINDOW))
		<< "the client's messages written in a row went together";
	EXPECT_TRUE(UnaryWorks());
}

TEST_F(Stream, WithoutBatchInTheHellosEveryFrameIsAMessageOfItsOwn)
{
	// An older peer (its hello without BATCH, 0x400): the same exchange,
	// every frame a message of its own, nothing batched either way.
	zcrpc__worker_test_clear_features(w_, ZCRPC_FEAT_BATCH);
	Listen();
	ASSERT_TRUE(UnaryWorks());
	SmallMessagesBothWays(
		svc_, [&](Seen &x) { return Start(x); },
		[&](const std::function<bool()> &f) { return Until(f, 60000); }, 300);
	zcrpc_server_stats ss = ServerStats(srv_);
	EXPECT_EQ(ss.stream_msgs_sent, 300u);
	EXPECT_EQ(ss.stream_batches, 0u);
	EXPECT_EQ(ss.stream_batched_frames, 0u);
	zcrpc_channel_stats cs{};
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(cs.stream_batches, 0u);
	EXPECT_TRUE(UnaryWorks());
}
