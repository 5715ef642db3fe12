// Typed streams over rxe: tests/proto/pbstream.proto (one service with a
// unary, a server-streaming, a client-streaming and a bidirectional
// method) through the stubs zcrpc-gen writes and the protobuf-c glue for
// streams (zcrpc_pb_stream_*). Each kind end to end with typed messages
// and metadata, messages that do not unpack (either way), and the glue's
// argument checks. Client and server share one worker, so every callback
// runs on the test's thread.
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pbstream.zcrpc.h"
#include "rdma_env.h"
#include "zcrpc/pb.h"
#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"

namespace {

using Md = std::vector<std::pair<std::string, std::string>>;
using Num = Zcrpc__Pbstream__Num;
using Sum = Zcrpc__Pbstream__Sum;

Md CopyMd(const zcrpc_md *md, size_t n)
{
	Md out;
	for (size_t i = 0; i < n; i++)
		out.emplace_back(std::string(md[i].key, md[i].key_len),
				 std::string(static_cast<const char *>(md[i].value),
					     md[i].value_len));
	return out;
}

std::vector<zcrpc_md> MdOf(const Md &m)
{
	std::vector<zcrpc_md> v;
	for (const auto &p : m)
		v.push_back({p.first.data(), p.first.size(), p.second.data(), p.second.size()});
	return v;
}

// A Num whose tag points at @tag, which must outlive it (a named string:
// a temporary would be gone before the Num is packed).
Num MakeNum(int64_t v, const std::string &tag)
{
	Num n = ZCRPC__PBSTREAM__NUM__INIT;
	n.v = v;
	n.tag = const_cast<char *>(tag.c_str());
	return n;
}
Num MakeNum(int64_t v, const char *tag)
{
	Num n = ZCRPC__PBSTREAM__NUM__INIT;
	n.v = v;
	n.tag = const_cast<char *>(tag);
	return n;
}
Num MakeNum(int64_t, std::string &&) = delete;

// Bytes that are no Num: field 2 (tag) claims 5 bytes, 2 follow.
const char kNotANum[] = "\x12\x05" "ab";
const size_t kNotANumLen = 4;

// ---- the server: what each stream saw (its zcrpc_stream user pointer) ----

struct SStream {
	zcrpc_stream *s = nullptr;
	uint32_t method = 0;
	Md open_md;
	std::vector<std::pair<int64_t, std::string>> msgs;
	bool half = false, finished = false;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
	int64_t want = 0, next = 0; // Count: how many to write, written
	int64_t total = 0;	    // Total
	std::string tags;
};

struct Server {
	std::vector<std::unique_ptr<SStream>> streams;
	int unary_calls = 0;

	static SStream &Of(zcrpc_stream *s) { return *static_cast<SStream *>(zcrpc_stream_get_user(s)); }
	static Server &Me(void *arg) { return *static_cast<Server *>(arg); }

	static void Open(zcrpc_stream *s, const zcrpc_stream_open *o, void *arg)
	{
		Server &me = Me(arg);
		me.streams.push_back(std::make_unique<SStream>());
		SStream &x = *me.streams.back();
		x.s = s;
		x.method = o->method_id;
		x.open_md = CopyMd(o->md, o->n_md);
		zcrpc_stream_set_user(s, &x);
	}
	static void Record(SStream &x, const Num *n)
	{
		x.msgs.emplace_back(n->v, n->tag ? n->tag : "");
	}
	static void Finish(zcrpc_stream *s, const zcrpc_stream_end *e, void *)
	{
		SStream &x = Of(s);
		EXPECT_FALSE(x.finished) << "on_finish ran twice";
		x.finished = true;
		x.status = e->status;
		x.message = e->message;
		x.s = nullptr;
	}
	static void Half(zcrpc_stream *s, void *)
	{
		SStream &x = Of(s);
		x.half = true;
		if (x.method == ZCRPC__PBSTREAM__CALC__COUNT__ZCRPC_ID) {
			PumpCount(x);
		} else if (x.method == ZCRPC__PBSTREAM__CALC__TOTAL__ZCRPC_ID) {
			Sum r = ZCRPC__PBSTREAM__SUM__INIT;
			r.total = x.total;
			r.count = uint32_t(x.msgs.size());
			r.tags = const_cast<char *>(x.tags.c_str());
			EXPECT_EQ(zcrpc__pbstream__calc__total__reply(s, &r), ZCRPC_OK);
			Md t = {{"kind", "client-streaming"}};
			auto tv = MdOf(t);
			EXPECT_EQ(zcrpc__pbstream__calc__total__finish(s, ZCRPC_OK, nullptr, tv.data(),
								      tv.size()),
				  ZCRPC_OK);
		} else {
			EXPECT_EQ(zcrpc__pbstream__calc__chat__finish(s, ZCRPC_OK, nullptr, nullptr, 0),
				  ZCRPC_OK);
		}
	}
	// Count: writes v = 0.. as the window allows, finishes once all went
	// and the client half-closed.
	static void PumpCount(SStream &x)
	{
		while (x.next < x.want) {
			std::string tag = "c" + std::to_string(x.next);
			Num n = MakeNum(x.next, tag);
			zcrpc_status st = zcrpc__pbstream__calc__count__reply(x.s, &n);
			if (st == ZCRPC_RESOURCE_EXHAUSTED)
				return; // on_writable brings us back
			ASSERT_EQ(st, ZCRPC_OK) << zcrpc_status_str(st);
			x.next++;
		}
		if (x.half) {
			Md t = {{"written", std::to_string(x.next)}};
			auto tv = MdOf(t);
			EXPECT_EQ(zcrpc__pbstream__calc__count__finish(x.s, ZCRPC_OK, nullptr, tv.data(),
								      tv.size()),
				  ZCRPC_OK);
			EXPECT_EQ(zcrpc__pbstream__calc__count__finish(x.s, ZCRPC_OK, nullptr, nullptr, 0),
				  ZCRPC_FAILED_PRECONDITION);
		}
	}
	static void CountMsg(zcrpc_stream *s, const Num *n, void *)
	{
		SStream &x = Of(s);
		Record(x, n);
		x.want = n->v;
		Md h = {{"count-headers", "yes"}};
		auto hv = MdOf(h);
		EXPECT_EQ(zcrpc_stream_send_headers(s, hv.data(), hv.size()), ZCRPC_OK);
		PumpCount(x);
	}
	static void CountWritable(zcrpc_stream *s, void *) { PumpCount(Of(s)); }
	static void TotalMsg(zcrpc_stream *s, const Num *n, void *)
	{
		SStream &x = Of(s);
		Record(x, n);
		x.total += n->v;
		x.tags += n->tag;
	}
	static void ChatMsg(zcrpc_stream *s, const Num *n, void *)
	{
		SStream &x = Of(s);
		Record(x, n);
		if (std::string(n->tag) == "garbage-please") {
			// A reply the client cannot unpack, written raw.
			EXPECT_EQ(zcrpc_stream_write(s, kNotANum, kNotANumLen), ZCRPC_OK);
			return;
		}
		Num r = MakeNum(2 * n->v, n->tag);
		EXPECT_EQ(zcrpc__pbstream__calc__chat__reply(s, &r), ZCRPC_OK);
	}
};

// The unary method, through protoc-c's service struct.
void calc_inc(Zcrpc__Pbstream__Calc_Service *, const Num *in, Zcrpc__Pbstream__Num_Closure closure,
	      void *closure_data)
{
	Num r = MakeNum(in->v + 1, "inc");
	closure(&r, closure_data);
}
// protoc-c's unary slots of the streaming methods: never called.
void calc_count(Zcrpc__Pbstream__Calc_Service *, const Num *, Zcrpc__Pbstream__Num_Closure closure,
		void *closure_data)
{
	ADD_FAILURE() << "protoc-c's slot of a streaming method ran";
	closure(nullptr, closure_data);
}
void calc_total(Zcrpc__Pbstream__Calc_Service *, const Num *, Zcrpc__Pbstream__Sum_Closure closure,
		void *closure_data)
{
	ADD_FAILURE() << "protoc-c's slot of a streaming method ran";
	closure(nullptr, closure_data);
}
void calc_chat(Zcrpc__Pbstream__Calc_Service *, const Num *, Zcrpc__Pbstream__Num_Closure closure,
	       void *closure_data)
{
	ADD_FAILURE() << "protoc-c's slot of a streaming method ran";
	closure(nullptr, closure_data);
}

// ---- the client: what one stream saw (the handlers' arg) ----------------

struct CStream {
	zcrpc_stream *s = nullptr;
	std::vector<std::pair<int64_t, std::string>> msgs;
	std::vector<std::pair<int64_t, std::string>> sums; // Total: (total/count, tags)
	Md headers, trailers;
	bool got_headers = false, finished = false;
	int writable = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
	std::function<void(CStream &, const Num *)> on_msg;
	std::function<void(CStream &)> on_writable;
};

void CHeaders(zcrpc_stream *, const zcrpc_md *md, size_t n, void *a)
{
	auto *x = static_cast<CStream *>(a);
	EXPECT_FALSE(x->got_headers);
	x->got_headers = true;
	x->headers = CopyMd(md, n);
}
void CNum(zcrpc_stream *, const Num *n, void *a)
{
	auto *x = static_cast<CStream *>(a);
	x->msgs.emplace_back(n->v, n->tag ? n->tag : "");
	if (x->on_msg)
		x->on_msg(*x, n);
}
void CSum(zcrpc_stream *, const Sum *r, void *a)
{
	auto *x = static_cast<CStream *>(a);
	x->sums.emplace_back(r->total * 1000 + r->count, r->tags ? r->tags : "");
}
void CWritable(zcrpc_stream *, void *a)
{
	auto *x = static_cast<CStream *>(a);
	x->writable++;
	if (x->on_writable)
		x->on_writable(*x);
}
void CFinish(zcrpc_stream *, const zcrpc_stream_end *e, void *a)
{
	auto *x = static_cast<CStream *>(a);
	EXPECT_FALSE(x->finished) << "on_finish ran twice";
	x->finished = true;
	x->status = e->status;
	x->message = e->message;
	x->trailers = CopyMd(e->md, e->n_md);
	x->s = nullptr;
}

// The typed client handlers of any of the three streaming methods.
template <class H, class M>
H ClientHandlers(CStream *x, M on_message)
{
	H h{};
	h.on_headers = CHeaders;
	h.on_message = on_message;
	h.on_writable = CWritable;
	h.on_finish = CFinish;
	h.arg = x;
	return h;
}

class PbStream : public RdmaTest {
protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w_), ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_create(w_, nullptr, &srv_), ZCRPC_OK);
		// The mixed service: its registration serves the unary method,
		// each streaming method has its own.
		ASSERT_EQ(zcrpc__pbstream__calc__zcrpc_register(srv_, &impl_), ZCRPC_OK);
		count_.on_open = Server::Open;
		count_.on_message = Server::CountMsg;
		count_.on_half_close = Server::Half;
		count_.on_writable = Server::CountWritable;
		count_.on_finish = Server::Finish;
		count_.arg = &svc_;
		total_.on_open = Server::Open;
		total_.on_message = Server::TotalMsg;
		total_.on_half_close = Server::Half;
		total_.on_finish = Server::Finish;
		total_.arg = &svc_;
		chat_.on_open = Server::Open;
		chat_.on_message = Server::ChatMsg;
		chat_.on_half_close = Server::Half;
		chat_.on_finish = Server::Finish;
		chat_.arg = &svc_;
		ASSERT_EQ(zcrpc__pbstream__calc__count__zcrpc_register(srv_, &count_), ZCRPC_OK);
		ASSERT_EQ(zcrpc__pbstream__calc__total__zcrpc_register(srv_, &total_), ZCRPC_OK);
		ASSERT_EQ(zcrpc__pbstream__calc__chat__zcrpc_register(srv_, &chat_), ZCRPC_OK);
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
	bool Until(const std::function<bool()> &f, int ms = 20000)
	{
		return ProgressUntil(w_, f, Scaled(ms));
	}
	// The unary Inc through the same channel: v + 1, or -1 on failure.
	int64_t Inc(int64_t v)
	{
		struct R {
			int n = 0;
			zcrpc_status st = ZCRPC_UNKNOWN;
			int64_t v = -1;
		} r;
		std::string tag = "i";
		Num req = MakeNum(v, tag);
		auto done = [](zcrpc_status st, const char *, const Num *rep, void *a) {
			auto *rr = static_cast<R *>(a);
			rr->n++;
			rr->st = st;
			if (rep)
				rr->v = rep->v;
		};
		if (zcrpc__pbstream__calc__inc__async(ch_, &req, nullptr, done, &r, nullptr) != ZCRPC_OK)
			return -1;
		if (!Until([&] { return r.n > 0; }) || r.st != ZCRPC_OK)
			return -1;
		return r.v;
	}

	// A client stream's record, kept until after TearDown (a test that
	// fails early leaves streams whose on_finish runs in the destroy).
	CStream &NewC()
	{
		cs_.emplace_back();
		return cs_.back();
	}

	std::deque<CStream> cs_;
	zcrpc_worker *w_ = nullptr;
	zcrpc_server *srv_ = nullptr;
	zcrpc_channel *ch_ = nullptr;
	Server svc_;
	Zcrpc__Pbstream__Calc_Service impl_ = ZCRPC__PBSTREAM__CALC__INIT(calc_);
	Zcrpc__Pbstream__Calc__Count_ZcrpcServer count_{};
	Zcrpc__Pbstream__Calc__Total_ZcrpcServer total_{};
	Zcrpc__Pbstream__Calc__Chat_ZcrpcServer chat_{};
};

} // namespace

TEST_F(PbStream, UnaryMethodOfTheMixedFileWorksAndStreamingOnesAreNotUnary)
{
	EXPECT_EQ(Inc(41), 42);
	// The service's registration left the streaming methods to their own.
	EXPECT_EQ(zcrpc__pbstream__calc__chat__zcrpc_register(srv_, &chat_), ZCRPC_ALREADY_EXISTS);
	EXPECT_EQ(zcrpc__pbstream__calc__zcrpc_register(srv_, &impl_), ZCRPC_ALREADY_EXISTS);
	// A unary call of a streaming method reaches the stream's method.
	std::string tag = "x";
	Num req = MakeNum(1, tag);
	struct R {
		int n = 0;
		zcrpc_status st = ZCRPC_OK;
		std::string msg;
	} r;
	auto done = [](zcrpc_status st, const char *m, const ProtobufCMessage *, zcrpc_pb_fn,
		       void *a) {
		auto *rr = static_cast<R *>(a);
		rr->n++;
		rr->st = st;
		rr->msg = m;
	};
	ASSERT_EQ(zcrpc_pb_call_async(ch_, ZCRPC__PBSTREAM__CALC__CHAT__ZCRPC_ID, &req.base,
				      &zcrpc__pbstream__num__descriptor, nullptr, done, nullptr, &r,
				      nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return r.n > 0; }));
	EXPECT_EQ(r.st, ZCRPC_UNIMPLEMENTED);
	EXPECT_NE(r.msg.find("is a streaming method"), std::string::npos) << r.msg;
	EXPECT_TRUE(svc_.streams.empty());
}

TEST_F(PbStream, ServerStreamingTypedMessagesHeadersAndTrailers)
{
	CStream &cl = NewC();
	auto h = ClientHandlers<Zcrpc__Pbstream__Calc__Count_ZcrpcClient>(&cl, CNum);
	zcrpc_stream_opts o;
	zcrpc_stream_opts_init(&o);
	Md md = {{"client-key", "client-value"}};
	auto mdv = MdOf(md);
	o.md = mdv.data();
	o.n_md = mdv.size();
	ASSERT_EQ(zcrpc__pbstream__calc__count__start(ch_, &o, &h, &cl.s), ZCRPC_OK);
	ASSERT_NE(cl.s, nullptr);
	std::string tag = "how-many";
	Num req = MakeNum(300, tag);
	ASSERT_EQ(zcrpc__pbstream__calc__count__write(cl.s, &req), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pbstream__calc__count__close_send(cl.s), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pbstream__calc__count__write(cl.s, &req), ZCRPC_FAILED_PRECONDITION)
		<< "a write after the half-close";
	ASSERT_TRUE(Until([&] { return cl.finished; }, 60000));

	EXPECT_EQ(cl.status, ZCRPC_OK) << cl.message;
	ASSERT_EQ(cl.msgs.size(), 300u);
	for (int i = 0; i < 300; i++) {
		ASSERT_EQ(cl.msgs[i].first, i);
		ASSERT_EQ(cl.msgs[i].second, "c" + std::to_string(i));
	}
	EXPECT_TRUE(cl.got_headers);
	EXPECT_EQ(cl.headers, (Md{{"count-headers", "yes"}}));
	EXPECT_EQ(cl.trailers, (Md{{"written", "300"}}));
	ASSERT_EQ(svc_.streams.size(), 1u);
	const SStream &sv = *svc_.streams[0];
	EXPECT_EQ(sv.method, uint32_t(ZCRPC__PBSTREAM__CALC__COUNT__ZCRPC_ID));
	EXPECT_EQ(sv.open_md, md);
	ASSERT_EQ(sv.msgs.size(), 1u);
	EXPECT_EQ(sv.msgs[0], (std::pair<int64_t, std::string>{300, "how-many"}));
	EXPECT_TRUE(sv.half);
	ASSERT_TRUE(Until([&] { return sv.finished; }));
	EXPECT_EQ(sv.status, ZCRPC_OK);
}

TEST_F(PbStream, ClientStreamingSumsEveryTypedMessageIntoOneReply)
{
	CStream &cl = NewC();
	auto h = ClientHandlers<Zcrpc__Pbstream__Calc__Total_ZcrpcClient>(&cl, CSum);
	ASSERT_EQ(zcrpc__pbstream__calc__total__start(ch_, nullptr, &h, &cl.s), ZCRPC_OK);
	// 100 messages through a window of 16: written as on_writable allows.
	int sent = 0, refused = 0;
	int64_t want = 0;
	std::string want_tags;
	auto pump = [&](CStream &x) {
		while (sent < 100) {
			std::string tag(1, char('a' + sent % 26));
			Num n = MakeNum(sent * 3, tag);
			zcrpc_status st = zcrpc__pbstream__calc__total__write(x.s, &n);
			if (st == ZCRPC_RESOURCE_EXHAUSTED) {
				refused++;
				return;
			}
			ASSERT_EQ(st, ZCRPC_OK);
			want += sent * 3;
			want_tags += tag;
			sent++;
		}
		EXPECT_EQ(zcrpc__pbstream__calc__total__close_send(x.s), ZCRPC_OK);
	};
	cl.on_writable = pump;
	pump(cl);
	ASSERT_TRUE(Until([&] { return cl.finished; }, 60000));
	EXPECT_EQ(cl.status, ZCRPC_OK) << cl.message;
	EXPECT_GT(refused, 0) << "100 messages went through a 16-message window";
	EXPECT_EQ(cl.writable, refused);
	ASSERT_EQ(cl.sums.size(), 1u);
	EXPECT_EQ(cl.sums[0].first, want * 1000 + 100);
	EXPECT_EQ(cl.sums[0].second, want_tags);
	EXPECT_EQ(cl.trailers, (Md{{"kind", "client-streaming"}}));
	EXPECT_TRUE(cl.msgs.empty());
	ASSERT_EQ(svc_.streams.size(), 1u);
	EXPECT_EQ(svc_.streams[0]->msgs.size(), 100u);
}

TEST_F(PbStream, BidirectionalPingPongWithTypedMessages)
{
	CStream &cl = NewC();
	auto h = ClientHandlers<Zcrpc__Pbstream__Calc__Chat_ZcrpcClient>(&cl, CNum);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__start(ch_, nullptr, &h, &cl.s), ZCRPC_OK);
	int round = 0;
	std::string tag;
	cl.on_msg = [&](CStream &x, const Num *n) {
		EXPECT_EQ(n->v, 2 * round) << round;
		EXPECT_EQ(std::string(n->tag), "r" + std::to_string(round));
		if (++round == 100) {
			EXPECT_EQ(zcrpc__pbstream__calc__chat__close_send(x.s), ZCRPC_OK);
			return;
		}
		tag = "r" + std::to_string(round);
		Num next = MakeNum(round, tag);
		EXPECT_EQ(zcrpc__pbstream__calc__chat__write(x.s, &next), ZCRPC_OK);
	};
	tag = "r0";
	Num first = MakeNum(0, tag);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__write(cl.s, &first), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return cl.finished; }, 60000));
	EXPECT_EQ(cl.status, ZCRPC_OK) << cl.message;
	EXPECT_EQ(round, 100);
	EXPECT_EQ(cl.msgs.size(), 100u);
	ASSERT_EQ(svc_.streams.size(), 1u);
	EXPECT_EQ(svc_.streams[0]->msgs.size(), 100u);
	ASSERT_TRUE(Until([&] { return svc_.streams[0]->finished; }));
	EXPECT_EQ(svc_.streams[0]->status, ZCRPC_OK);
}

TEST_F(PbStream, AMessageThatDoesNotUnpackEndsItsStreamInternalEitherWay)
{
	// Client to server: one good message, then bytes that are no Num,
	// then another good one. The server finishes the stream INTERNAL;
	// its on_message saw the first only.
	CStream &a = NewC();
	auto h = ClientHandlers<Zcrpc__Pbstream__Calc__Chat_ZcrpcClient>(&a, CNum);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__start(ch_, nullptr, &h, &a.s), ZCRPC_OK);
	std::string tag = "good";
	Num good = MakeNum(5, tag);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__write(a.s, &good), ZCRPC_OK);
	ASSERT_EQ(zcrpc_stream_write(a.s, kNotANum, kNotANumLen), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__write(a.s, &good), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.finished; }));
	EXPECT_EQ(a.status, ZCRPC_INTERNAL);
	EXPECT_EQ(a.message, "message does not unpack as zcrpc.pbstream.Num");
	ASSERT_EQ(svc_.streams.size(), 1u);
	SStream &sa = *svc_.streams[0];
	ASSERT_TRUE(Until([&] { return sa.finished; }));
	EXPECT_EQ(sa.status, ZCRPC_INTERNAL);
	EXPECT_EQ(sa.message, "message does not unpack as zcrpc.pbstream.Num");
	EXPECT_EQ(sa.msgs.size(), 1u) << "nothing reaches on_message after the bad message";
	EXPECT_LE(a.msgs.size(), 1u);

	// Server to client: the server writes bytes that are no Num. The
	// client's typed layer cancels: the server reads CANCELLED, the
	// client's on_finish INTERNAL with the reason.
	CStream &b = NewC();
	h = ClientHandlers<Zcrpc__Pbstream__Calc__Chat_ZcrpcClient>(&b, CNum);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__start(ch_, nullptr, &h, &b.s), ZCRPC_OK);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__write(b.s, &good), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return b.msgs.size() == 1; }));
	EXPECT_EQ(b.msgs[0], (std::pair<int64_t, std::string>{10, "good"}));
	std::string garbage = "garbage-please";
	Num bad_please = MakeNum(0, garbage);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__write(b.s, &bad_please), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return b.finished; }));
	EXPECT_EQ(b.status, ZCRPC_INTERNAL);
	EXPECT_EQ(b.message, "message does not unpack as zcrpc.pbstream.Num");
	EXPECT_TRUE(b.trailers.empty());
	EXPECT_EQ(b.msgs.size(), 1u);
	ASSERT_EQ(svc_.streams.size(), 2u);
	SStream &sb = *svc_.streams[1];
	ASSERT_TRUE(Until([&] { return sb.finished; }));
	EXPECT_EQ(sb.status, ZCRPC_CANCELLED);

	// The connection outlived both streams.
	EXPECT_EQ(Inc(1), 2);
}

TEST_F(PbStream, GlueChecksItsArguments)
{
	// zcrpc_pb_stream_unpack: a Num, bytes that are none, bad arguments.
	std::string tag = "t";
	Num n = MakeNum(-7, tag);
	uint8_t buf[64];
	size_t len = protobuf_c_message_pack(&n.base, buf);
	ProtobufCMessage *m = nullptr;
	ASSERT_EQ(zcrpc_pb_stream_unpack(&zcrpc__pbstream__num__descriptor, buf, len, &m), ZCRPC_OK);
	ASSERT_NE(m, nullptr);
	EXPECT_EQ(reinterpret_cast<Num *>(m)->v, -7);
	protobuf_c_message_free_unpacked(m, nullptr);
	EXPECT_EQ(zcrpc_pb_stream_unpack(&zcrpc__pbstream__num__descriptor, kNotANum, kNotANumLen, &m),
		  ZCRPC_INTERNAL);
	EXPECT_EQ(m, nullptr);
	EXPECT_EQ(zcrpc_pb_stream_unpack(nullptr, buf, len, &m), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_pb_stream_unpack(&zcrpc__pbstream__num__descriptor, nullptr, 3, &m),
		  ZCRPC_INVALID_ARGUMENT);
	ASSERT_EQ(zcrpc_pb_stream_unpack(&zcrpc__pbstream__num__descriptor, nullptr, 0, &m), ZCRPC_OK)
		<< "no bytes are an empty Num";
	EXPECT_EQ(reinterpret_cast<Num *>(m)->v, 0);
	protobuf_c_message_free_unpacked(m, nullptr);

	// Starting and registering.
	Zcrpc__Pbstream__Calc__Chat_ZcrpcClient h{};
	zcrpc_stream *s = nullptr;
	EXPECT_EQ(zcrpc__pbstream__calc__chat__start(ch_, nullptr, &h, &s), ZCRPC_INVALID_ARGUMENT)
		<< "no on_finish";
	EXPECT_EQ(zcrpc__pbstream__calc__chat__start(ch_, nullptr, nullptr, &s),
		  ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc__pbstream__calc__chat__zcrpc_register(srv_, nullptr), ZCRPC_INVALID_ARGUMENT);
	zcrpc_pb_stream_handlers g{};
	g.size = sizeof(g);
	g.on_finish = CFinish;
	EXPECT_EQ(zcrpc_pb_stream_start(ch_, 1, nullptr, &g, &s), ZCRPC_INVALID_ARGUMENT) << "no in";
	EXPECT_EQ(zcrpc_pb_server_register_stream(srv_, "/x.Y/Z", &g), ZCRPC_INVALID_ARGUMENT);
	g.in = &zcrpc__pbstream__num__descriptor;
	g.size = 8;
	EXPECT_EQ(zcrpc_pb_stream_start(ch_, 1, nullptr, &g, &s), ZCRPC_INVALID_ARGUMENT)
		<< "a size below the struct's";
	unsigned too_far = 4;
	EXPECT_EQ(zcrpc_pb_server_register_methods(srv_, &impl_.base, &too_far, 1),
		  ZCRPC_INVALID_ARGUMENT);

	// Writing: a NULL message, one above the largest a stream carries, a
	// fill function missing; an empty message is a message.
	CStream &cl = NewC();
	auto ch = ClientHandlers<Zcrpc__Pbstream__Calc__Chat_ZcrpcClient>(&cl, CNum);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__start(ch_, nullptr, &ch, &cl.s), ZCRPC_OK);
	EXPECT_EQ(zcrpc__pbstream__calc__chat__write(cl.s, nullptr), ZCRPC_INVALID_ARGUMENT);
	std::string big(zcrpc_stream_max_message(cl.s), 'x');
	Num huge = MakeNum(1, big);
	EXPECT_EQ(zcrpc__pbstream__calc__chat__write(cl.s, &huge), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_stream_write_fill(cl.s, 5, nullptr, nullptr), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_stream_write_fill(nullptr, 0, nullptr, nullptr), ZCRPC_INVALID_ARGUMENT);
	std::string empty_tag;
	Num zero = MakeNum(0, empty_tag); // packs to 0 bytes
	EXPECT_EQ(protobuf_c_message_get_packed_size(&zero.base), 0u);
	ASSERT_EQ(zcrpc__pbstream__calc__chat__write(cl.s, &zero), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return cl.msgs.size() == 1; }));
	EXPECT_EQ(cl.msgs[0], (std::pair<int64_t, std::string>{0, ""}));
	EXPECT_EQ(zcrpc__pbstream__calc__chat__cancel(cl.s), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return cl.finished; }));
	EXPECT_EQ(cl.status, ZCRPC_CANCELLED) << "a cancel of our own stays CANCELLED";
}
