// Peers that break a stream's rules (docs/protocol.md §8), over rxe: a raw
// transport client against a zcrpc server (a writer that ignores the
// window, a message after the half-close, a second half-close, frames for
// streams that do not exist, a stream opened twice, a server's frame from a
// client) and a raw server against a zcrpc channel (a message past the
// window, headers after a message). Each broken rule ends only that stream
// with a status; the connection's other streams and calls go on, except
// where the protocol itself is broken (then only that connection closes).
#include <string>
#include <vector>

#include "rdma_env.h"
#include "rpc/frame.h"
#include "transport/hello.h"
#include "transport/test_hooks.h"
#include "zcrpc/rpc.h"
#include "zcrpc/stream.h"

namespace {

const char *kStream = "/zcrpc.test.Hostile/Stream";
const char *kUnary = "/zcrpc.test.Hostile/Unary";

// A decoded frame as a raw peer received it.
struct Got {
	uint8_t type;
	uint16_t flags;
	uint32_t call_id, status, window;
	std::string payload;
	uint64_t bulk_addr, bulk_len;
	uint32_t bulk_rkey, bulk_token;
};

struct RawPeer {
	zcrpc_worker *w = nullptr; // progressed while the transport has no credit
	zcrpc_conn *conn = nullptr;
	int up = 0, closed = 0;
	std::vector<Got> got;
	zcrpc_conn_handlers Handlers()
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.arg = this;
		h.on_state = [](zcrpc_conn *, zcrpc_conn_state st, zcrpc_status, void *a) {
			auto *p = static_cast<RawPeer *>(a);
			if (st == ZCRPC_CONN_ESTABLISHED)
				p->up = 1;
			if (st == ZCRPC_CONN_CLOSED)
				p->closed = 1;
		};
		h.on_recv = [](zcrpc_conn *, const void *d, size_t n, void *a) {
			auto *p = static_cast<RawPeer *>(a);
			// Its hello carries BATCH (every bit of this revision): a
			// message may hold several stream frames (protocol.md §8).
			const uint8_t *at = static_cast<const uint8_t *>(d);
			while (n) {
				zcrpc_frame f;
				char why[128];
				size_t used = 0;
				ASSERT_EQ(zcrpc__frame_decode_next(at, n, &f, &used, why, sizeof(why)),
					  ZCRPC_OK)
					<< why;
				p->got.push_back({f.type, f.flags, f.call_id, f.status, f.count,
						  std::string(reinterpret_cast<const char *>(f.payload),
							      f.payload_len),
						  f.bulk_addr, f.bulk_len, f.bulk_rkey, f.bulk_token});
				at += used;
				n -= used;
			}
		};
		return h;
	}
	// Sends a frame with an inline payload and no metadata.
	zcrpc_status Send(uint8_t type, uint16_t flags, uint32_t ref, const std::string &payload = "",
			  uint32_t method = 0, uint32_t window = 0, uint64_t bulk_len = 0,
			  uint32_t bulk_token = 0)
	{
		zcrpc_frame f{};
		f.type = type;
		f.flags = flags;
		f.call_id = ref;
		f.method_id = method;
		f.count = window;
		f.bulk_len = bulk_len;
		f.bulk_token = bulk_token;
		f.payload_len = static_cast<uint32_t>(payload.size());
		std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN);
		zcrpc__frame_encode(&f, b.data());
		b.insert(b.end(), payload.begin(), payload.end());
		zcrpc_status st = zcrpc_conn_send(conn, b.data(), b.size());
		if (st == ZCRPC_RESOURCE_EXHAUSTED && w) { // the transport's credit, not the stream's
			ProgressUntil(w, [&] { return zcrpc_conn_can_send(conn) != 0; }, Scaled(10000));
			st = zcrpc_conn_send(conn, b.data(), b.size());
		}
		return st;
	}
	// The final status the peer got for @ref (a REPLY), or nullptr.
	const Got *EndOf(uint32_t ref) const
	{
		for (const auto &g : got)
			if (g.type == ZCRPC_FRAME_REPLY && g.call_id == ref)
				return &g;
		return nullptr;
	}
	// The grant the peer got for stream @ref's message, or nullptr.
	const Got *GrantOf(uint32_t ref) const
	{
		for (const auto &g : got)
			if (g.type == ZCRPC_FRAME_BULK_GRANT && g.call_id == ref)
				return &g;
		return nullptr;
	}
	int MessagesOf(uint32_t ref) const
	{
		int n = 0;
		for (const auto &g : got)
			n += g.type == ZCRPC_FRAME_MESSAGE && g.call_id == ref;
		return n;
	}
};

// The server's streams: the first message "pause" pauses the stream; every
// other message is echoed.
struct Served {
	int opened = 0, finished = 0;
	std::vector<zcrpc_status> ends;
};

class StreamHostile : public RdmaTest {
protected:
	void SetUp() override
	{
		RdmaTest::SetUp();
		ASSERT_EQ(zcrpc_worker_create(nullptr, &w_), ZCRPC_OK);
	}
	// A raw server (@srv records what the channel sends) and the channel
	// to it.
	void ServeRaw(RawPeer &srv)
	{
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		srv.w = w_;
		zcrpc_conn_handlers lh = srv.Handlers(); // (copied by zcrpc_listen)
		lo.conn_handlers = &lh;
		lo.arg = &srv;
		lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
			static_cast<RawPeer *>(a)->conn = c;
			static_cast<RawPeer *>(a)->up = 1;
		};
		ASSERT_EQ(zcrpc_listen(w_, env_.addr0.c_str(), "0", &lo, &l_), ZCRPC_OK);
		ASSERT_EQ(zcrpc_channel_create(w_, env_.addr0.c_str(),
					       std::to_string(zcrpc_listener_get_port(l_)).c_str(),
					       nullptr, &ch_),
			  ZCRPC_OK);
	}
	void TearDown() override
	{
		zcrpc_conn_destroy(raw_.conn);
		zcrpc_channel_destroy(ch_);
		zcrpc_server_destroy(srv_);
		zcrpc_listener_destroy(l_);
		zcrpc_worker_destroy(w_);
	}
	// A zcrpc server with the stream method and a unary echo, and the raw
	// client connected to it.
	void ServerAndRawClient()
	{
		zcrpc_server_opts so;
		zcrpc_server_opts_init(&so);
		if (write_timeout_ms_)
			so.bulk_write_timeout_ms = write_timeout_ms_;
		so.arg = &closed_why_;
		so.on_disconnect = [](zcrpc_server *, zcrpc_conn *c, zcrpc_status, void *a) {
			*static_cast<std::string *>(a) = zcrpc_conn_get_error(c);
		};
		ASSERT_EQ(zcrpc_server_create(w_, &so, &srv_), ZCRPC_OK);
		raw_.w = w_;
		zcrpc_stream_handlers h{};
		h.size = sizeof(h);
		h.arg = &served_;
		h.on_open = [](zcrpc_stream *, const zcrpc_stream_open *, void *a) {
			static_cast<Served *>(a)->opened++;
		};
		h.on_message = [](zcrpc_stream *s, const void *d, size_t n, void *) {
			std::string m(static_cast<const char *>(d), n);
			if (m == "pause")
				zcrpc_stream_pause(s);
			else
				zcrpc_stream_write(s, d, n);
		};
		h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *a) {
			auto *sv = static_cast<Served *>(a);
			sv->finished++;
			sv->ends.push_back(e->status);
		};
		ASSERT_EQ(zcrpc_server_register_stream(srv_, kStream, &h), ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_register(
				  srv_, kUnary,
				  [](zcrpc_server_call *c, const zcrpc_request *r, void *) {
					  zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len,
								  nullptr);
				  },
				  nullptr),
			  ZCRPC_OK);
		ASSERT_EQ(zcrpc_server_listen(srv_, env_.addr0.c_str(), "0"), ZCRPC_OK);
		zcrpc_conn_handlers ch = raw_.Handlers();
		ASSERT_EQ(zcrpc_connect(w_, env_.addr0.c_str(),
					std::to_string(zcrpc_server_get_port(srv_)).c_str(), nullptr, &ch,
					&raw_.conn),
			  ZCRPC_OK);
		ASSERT_TRUE(Until([&] { return raw_.up == 1; }));
	}
	uint32_t Open(uint32_t ref)
	{
		EXPECT_EQ(raw_.Send(ZCRPC_FRAME_REQUEST, ZCRPC_FRAME_F_STREAM, ref, "",
				    zcrpc_method_id(kStream)),
			  ZCRPC_OK);
		return ref;
	}
	// A unary call over the raw connection is still answered.
	bool UnaryAnswered(uint32_t ref)
	{
		if (raw_.Send(ZCRPC_FRAME_REQUEST, 0, ref, "ping", zcrpc_method_id(kUnary)) != ZCRPC_OK)
			return false;
		return Until([&] { return raw_.EndOf(ref) != nullptr; }) &&
		       raw_.EndOf(ref)->status == ZCRPC_OK && raw_.EndOf(ref)->payload == "ping";
	}
	bool Until(const std::function<bool()> &f, int ms = 10000)
	{
		return ProgressUntil(w_, f, Scaled(ms));
	}
	zcrpc_worker *w_ = nullptr;
	zcrpc_server *srv_ = nullptr;
	zcrpc_listener *l_ = nullptr;
	zcrpc_channel *ch_ = nullptr;
	RawPeer raw_;
	Served served_;
	std::string closed_why_; // the server's text for the last connection it closed
	int write_timeout_ms_ = 0; // the server's bulk_write_timeout_ms, 0 = its default
};

} // namespace

TEST_F(StreamHostile, EachBrokenRuleOfAClientEndsOnlyItsStream)
{
	ServerAndRawClient();
	// A healthy stream beside the broken ones: it keeps working throughout.
	const uint32_t good = Open(0x100001);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, good, "one"), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.MessagesOf(good) == 1; }));

	// A writer that ignores the window: the server's reader paused at the
	// first message, 16 more arrive (1 + 16 = 17 > 16).
	const uint32_t greedy = Open(0x100002);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, greedy, "pause"), ZCRPC_OK);
	for (int i = 0; i < 16; i++)
		ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, greedy, "m" + std::to_string(i)), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.EndOf(greedy) != nullptr; }));
	EXPECT_EQ(raw_.EndOf(greedy)->status, ZCRPC_RESOURCE_EXHAUSTED);
	EXPECT_EQ(raw_.EndOf(greedy)->payload, "the client wrote past the stream's window");
	EXPECT_EQ(raw_.EndOf(greedy)->flags, ZCRPC_FRAME_F_STREAM);

	// A message after the half-close; a second half-close.
	const uint32_t after = Open(0x100003);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_HALF_CLOSE, 0, after), ZCRPC_OK);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, after, "late"), ZCRPC_OK);
	const uint32_t twice = Open(0x100004);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_HALF_CLOSE, 0, twice), ZCRPC_OK);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_HALF_CLOSE, 0, twice), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.EndOf(after) && raw_.EndOf(twice); }));
	EXPECT_EQ(raw_.EndOf(after)->status, ZCRPC_INTERNAL);
	EXPECT_EQ(raw_.EndOf(after)->payload, "a message after the client's half-close");
	EXPECT_EQ(raw_.EndOf(twice)->status, ZCRPC_INTERNAL);
	EXPECT_EQ(raw_.EndOf(twice)->payload, "a second half-close from the client");

	// Frames for streams that never existed or already ended: dropped.
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, 0x7777777, "who"), ZCRPC_OK);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_WINDOW, 0, 0x7777777, "", 0, 5), ZCRPC_OK);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, greedy, "after its end"), ZCRPC_OK);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_CANCEL, ZCRPC_FRAME_F_STREAM, 0x7777778), ZCRPC_OK);

	// The healthy stream and unary calls still work; the server ended the
	// three broken streams and nothing else.
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, good, "two"), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.MessagesOf(good) == 2; }));
	EXPECT_TRUE(UnaryAnswered(0x200001));
	EXPECT_EQ(served_.opened, 4);
	ASSERT_TRUE(Until([&] { return served_.finished == 3; }));
	EXPECT_EQ(raw_.EndOf(good), nullptr);
	EXPECT_FALSE(raw_.closed);
	zcrpc_server_stats ss;
	zcrpc_server_get_stats(srv_, &ss, sizeof(ss));
	EXPECT_EQ(ss.protocol_errors, 0u) << "no connection was closed for a stream's rule";
	EXPECT_EQ(ss.streams_refused, 3u) << "the three broken streams, counted";
	EXPECT_EQ(ss.streams_failed, 3u);
	EXPECT_EQ(ss.streams_ok, 0u);
	EXPECT_EQ(ss.streams_open, 1u) << "the healthy one";
}

TEST_F(StreamHostile, AStreamOpenedTwiceOrAServersFrameFromAClientClosesThatConnectionOnly)
{
	ServerAndRawClient();
	// A second, well-behaved client over a channel.
	ASSERT_EQ(zcrpc_channel_create(w_, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_get_port(srv_)).c_str(), nullptr, &ch_),
		  ZCRPC_OK);
	struct End {
		bool done = false;
		zcrpc_status st = ZCRPC_UNKNOWN;
		int msgs = 0;
	} e;
	zcrpc_stream_handlers h{};
	h.size = sizeof(h);
	h.arg = &e;
	h.on_message = [](zcrpc_stream *, const void *, size_t, void *a) {
		static_cast<End *>(a)->msgs++;
	};
	h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *x, void *a) {
		static_cast<End *>(a)->done = true;
		static_cast<End *>(a)->st = x->status;
	};
	zcrpc_stream *s = nullptr;
	ASSERT_EQ(zcrpc_stream_start(ch_, zcrpc_method_id(kStream), nullptr, &h, &s), ZCRPC_OK);
	ASSERT_EQ(zcrpc_stream_write(s, "hello", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return e.msgs == 1; }));

	Open(0x100005);
	Open(0x100005); // the same reference while it is open
	ASSERT_TRUE(Until([&] { return raw_.closed == 1; }));
	zcrpc_server_stats ss;
	zcrpc_server_get_stats(srv_, &ss, sizeof(ss));
	EXPECT_EQ(ss.protocol_errors, 1u);
	ASSERT_TRUE(Until([&] { return !closed_why_.empty(); }));
	EXPECT_NE(closed_why_.find("protocol error from the client: a stream opened twice"),
		  std::string::npos)
		<< closed_why_;

	// The channel's stream never noticed.
	ASSERT_EQ(zcrpc_stream_write(s, "again", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return e.msgs == 2; }));
	EXPECT_FALSE(e.done);

	// A client that sends HEADERS: its connection closes.
	zcrpc_conn_destroy(raw_.conn);
	raw_ = RawPeer();
	raw_.w = w_;
	closed_why_.clear();
	zcrpc_conn_handlers rh = raw_.Handlers();
	ASSERT_EQ(zcrpc_connect(w_, env_.addr0.c_str(),
				std::to_string(zcrpc_server_get_port(srv_)).c_str(), nullptr, &rh,
				&raw_.conn),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.up == 1; }));
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_HEADERS, 0, 0x100006), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.closed == 1; }));
	ASSERT_TRUE(Until([&] { return !closed_why_.empty(); }));
	EXPECT_NE(closed_why_.find("a server's frame from the client"), std::string::npos)
		<< closed_why_;
	ASSERT_EQ(zcrpc_stream_write(s, "third", 5), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return e.msgs == 3; }));
	EXPECT_EQ(zcrpc_stream_cancel(s), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return e.done; }));
	EXPECT_EQ(e.st, ZCRPC_CANCELLED);
}

TEST_F(StreamHostile, AServerThatBreaksAStreamsRulesEndsOnlyThatStreamAtTheClient)
{
	// A raw server: it records the streams the channel opens.
	RawPeer srv;
	ASSERT_NO_FATAL_FAILURE(ServeRaw(srv));
	struct End {
		bool done = false;
		zcrpc_status st = ZCRPC_UNKNOWN;
		std::string msg;
		int msgs = 0;
	};
	End a, b, c;
	auto start = [&](End *x, bool paused) {
		zcrpc_stream_handlers h{};
		h.size = sizeof(h);
		h.arg = x;
		h.on_message = [](zcrpc_stream *, const void *, size_t, void *p) {
			static_cast<End *>(p)->msgs++;
		};
		h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *p) {
			auto *y = static_cast<End *>(p);
			y->done = true;
			y->st = e->status;
			y->msg = e->message;
		};
		zcrpc_stream *s = nullptr;
		EXPECT_EQ(zcrpc_stream_start(ch_, zcrpc_method_id(kStream), nullptr, &h, &s), ZCRPC_OK);
		if (paused)
			zcrpc_stream_pause(s);
		return s;
	};
	start(&a, true);
	start(&b, false);
	start(&c, false);
	// The three REQUESTs arrive; their references are the streams' names.
	std::vector<uint32_t> refs;
	ASSERT_TRUE(Until([&] {
		refs.clear();
		for (const auto &g : srv.got)
			if (g.type == ZCRPC_FRAME_REQUEST && (g.flags & ZCRPC_FRAME_F_STREAM))
				refs.push_back(g.call_id);
		return refs.size() == 3;
	}));
	// A: 17 messages to a paused reader; B: a message then headers.
	for (int i = 0; i < 17; i++)
		ASSERT_EQ(srv.Send(ZCRPC_FRAME_MESSAGE, 0, refs[0], "m"), ZCRPC_OK);
	ASSERT_EQ(srv.Send(ZCRPC_FRAME_MESSAGE, 0, refs[1], "m"), ZCRPC_OK);
	ASSERT_EQ(srv.Send(ZCRPC_FRAME_HEADERS, 0, refs[1]), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return a.done && b.done; }));
	EXPECT_EQ(a.st, ZCRPC_INTERNAL);
	EXPECT_EQ(a.msg, "the server wrote past the stream's window");
	EXPECT_EQ(b.st, ZCRPC_INTERNAL);
	EXPECT_EQ(b.msg, "the server sent its headers twice or after a message");
	EXPECT_EQ(b.msgs, 1);
	// The channel told the server with a CANCEL for each; C goes on and
	// ends with the server's status.
	ASSERT_TRUE(Until([&] {
		int n = 0;
		for (const auto &g : srv.got)
			n += g.type == ZCRPC_FRAME_CANCEL && (g.flags & ZCRPC_FRAME_F_STREAM) &&
			     (g.call_id == refs[0] || g.call_id == refs[1]);
		return n == 2;
	}));
	EXPECT_FALSE(c.done);
	ASSERT_EQ(srv.Send(ZCRPC_FRAME_MESSAGE, 0, refs[2], "fine"), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return c.msgs == 1; }));
	zcrpc_frame f{};
	f.type = ZCRPC_FRAME_REPLY;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.call_id = refs[2];
	f.status = ZCRPC_NOT_FOUND;
	f.payload_len = 4;
	std::vector<uint8_t> buf(ZCRPC_FRAME_HDR_LEN);
	zcrpc__frame_encode(&f, buf.data());
	buf.insert(buf.end(), {'g', 'o', 'n', 'e'});
	ASSERT_EQ(zcrpc_conn_send(srv.conn, buf.data(), buf.size()), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return c.done; }));
	EXPECT_EQ(c.st, ZCRPC_NOT_FOUND);
	EXPECT_EQ(c.msg, "gone");
	// A late MESSAGE for the ended stream is dropped; the connection stays.
	ASSERT_EQ(srv.Send(ZCRPC_FRAME_MESSAGE, 0, refs[2], "late"), ZCRPC_OK);
	EXPECT_FALSE(Until([&] { return srv.closed != 0; }, 300));
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(cs.protocol_errors, 0u) << "no connection was closed for a stream's rule";
	zcrpc_conn_destroy(srv.conn);
}

TEST_F(StreamHostile, AServerThatMisusesAStreamMessagesGrantLosesOnlyThatStreamAtTheClient)
{
	// A raw server announces large messages by RDMA WRITE (MESSAGE with
	// BULK, its record in the bulk token): the channel grants memory for
	// each, naming that record; a write with the wrong byte count ends only
	// that stream (INVALID_ARGUMENT, the server told), an honest write on
	// the other stream is handed over whole.
	RawPeer srv;
	ASSERT_NO_FATAL_FAILURE(ServeRaw(srv));
	struct End {
		bool done = false;
		zcrpc_status st = ZCRPC_UNKNOWN;
		std::string msg;
		std::vector<std::string> msgs;
	};
	End a, b;
	auto start = [&](End *x) {
		zcrpc_stream_handlers h{};
		h.size = sizeof(h);
		h.arg = x;
		h.on_message = [](zcrpc_stream *, const void *d, size_t n, void *p) {
			static_cast<End *>(p)->msgs.emplace_back(static_cast<const char *>(d), n);
		};
		h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *p) {
			auto *y = static_cast<End *>(p);
			y->done = true;
			y->st = e->status;
			y->msg = e->message;
		};
		zcrpc_stream *s = nullptr;
		EXPECT_EQ(zcrpc_stream_start(ch_, zcrpc_method_id(kStream), nullptr, &h, &s), ZCRPC_OK);
		return s;
	};
	start(&a);
	start(&b);
	std::vector<uint32_t> refs;
	ASSERT_TRUE(Until([&] {
		refs.clear();
		for (const auto &g : srv.got)
			if (g.type == ZCRPC_FRAME_REQUEST && (g.flags & ZCRPC_FRAME_F_STREAM))
				refs.push_back(g.call_id);
		return refs.size() == 2;
	}));
	std::string body(70000, '\0');
	for (size_t k = 0; k < body.size(); k++)
		body[k] = static_cast<char>(k * 31 + (k >> 8));
	zcrpc_mr *mr = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(w_), &body[0], body.size(), 0, &mr),
		  ZCRPC_OK);
	const uint32_t rec_a = 0x1234, rec_b = 0x5678; // the raw server's records
	ASSERT_EQ(srv.Send(ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_F_BULK, refs[0], "", 0, 0, 65536, rec_a),
		  ZCRPC_OK);
	ASSERT_EQ(srv.Send(ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_F_BULK, refs[1], "", 0, 0, body.size(),
			   rec_b),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return srv.GrantOf(rec_a) && srv.GrantOf(rec_b); }))
		<< "the channel grants memory for each, naming the server's record";
	EXPECT_GE(srv.GrantOf(rec_a)->bulk_len, 65536u);
	EXPECT_EQ(srv.GrantOf(rec_a)->flags & ZCRPC_FRAME_F_STREAM, 0)
		<< "a plain grant, as for a reply part";
	// A: 100 bytes of the 65536 announced.
	{
		const Got *g = srv.GrantOf(rec_a);
		zcrpc_remote_region r{g->bulk_addr, g->bulk_len, g->bulk_rkey, 0};
		uint32_t imm = g->bulk_token;
		ASSERT_EQ(zcrpc_conn_write(srv.conn, mr, 0, 100, &r, 0, &imm, nullptr), ZCRPC_OK);
	}
	ASSERT_TRUE(Until([&] { return a.done; }));
	EXPECT_EQ(a.st, ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(a.msg.find("another byte count than it announced"), std::string::npos) << a.msg;
	EXPECT_TRUE(a.msgs.empty()) << "the message was never handed over";
	ASSERT_TRUE(Until([&] {
		for (const auto &g : srv.got)
			if (g.type == ZCRPC_FRAME_CANCEL && g.call_id == refs[0])
				return true;
		return false;
	})) << "the server is told";
	// B: the whole message, then the final status.
	{
		const Got *g = srv.GrantOf(rec_b);
		zcrpc_remote_region r{g->bulk_addr, g->bulk_len, g->bulk_rkey, 0};
		uint32_t imm = g->bulk_token;
		ASSERT_EQ(zcrpc_conn_write(srv.conn, mr, 0, body.size(), &r, 0, &imm, nullptr),
			  ZCRPC_OK);
	}
	ASSERT_TRUE(Until([&] { return b.msgs.size() == 1; }));
	EXPECT_TRUE(b.msgs[0] == body) << "arrived changed";
	zcrpc_frame f{};
	f.type = ZCRPC_FRAME_REPLY;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.call_id = refs[1];
	std::vector<uint8_t> buf(ZCRPC_FRAME_HDR_LEN);
	zcrpc__frame_encode(&f, buf.data());
	ASSERT_EQ(zcrpc_conn_send(srv.conn, buf.data(), buf.size()), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return b.done; }));
	EXPECT_EQ(b.st, ZCRPC_OK) << b.msg;
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(cs.protocol_errors, 0u) << "no connection was closed for a stream's write";
	EXPECT_EQ(cs.stream_bulk_msgs_recv, 1u);
	EXPECT_GE(cs.bulk_bad_writes, 1u);
	EXPECT_EQ(cs.in_flight, 0u);
	zcrpc_mr_deregister(mr);
	zcrpc_conn_destroy(srv.conn);
}

TEST_F(StreamHostile, AServersStreamMessageByRdmaWriteWithoutTheHelloBitIsAProtocolError)
{
	// Where the hellos lack SERVER_STREAM_BULK (0x800) the channel grants
	// nothing for MESSAGE with BULK from the server: that closes the
	// connection as a protocol error.
	zcrpc__worker_test_clear_features(w_, ZCRPC_FEAT_SERVER_STREAM_BULK);
	RawPeer srv;
	ASSERT_NO_FATAL_FAILURE(ServeRaw(srv));
	bool done = false;
	zcrpc_stream_handlers h{};
	h.size = sizeof(h);
	h.arg = &done;
	h.on_finish = [](zcrpc_stream *, const zcrpc_stream_end *e, void *p) {
		*static_cast<bool *>(p) = true;
		EXPECT_EQ(e->status, ZCRPC_UNAVAILABLE) << e->message;
	};
	zcrpc_stream *s = nullptr;
	ASSERT_EQ(zcrpc_stream_start(ch_, zcrpc_method_id(kStream), nullptr, &h, &s), ZCRPC_OK);
	uint32_t ref = 0;
	ASSERT_TRUE(Until([&] {
		for (const auto &g : srv.got)
			if (g.type == ZCRPC_FRAME_REQUEST)
				ref = g.call_id;
		return ref != 0;
	}));
	ASSERT_EQ(srv.Send(ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_F_BULK, ref, "", 0, 0, 65536, 9),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return done; }));
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch_, &cs, sizeof(cs));
	EXPECT_EQ(cs.protocol_errors, 1u);
	EXPECT_EQ(srv.GrantOf(9), nullptr) << "nothing granted";
	zcrpc_conn_destroy(srv.conn);
}

TEST_F(StreamHostile, AClientThatMisusesAStreamMessagesGrantLosesOnlyThatStream)
{
	write_timeout_ms_ = 400;
	ServerAndRawClient();
	const uint32_t good = Open(0x300001);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, good, "one"), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.MessagesOf(good) == 1; }));

	// Announced and never written: the grant's time limit ends the stream.
	const uint32_t idle = Open(0x300002);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_F_BULK, idle, "", 0, 0, 1 << 20),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.GrantOf(idle) != nullptr; }));
	EXPECT_EQ(raw_.GrantOf(idle)->flags, ZCRPC_FRAME_F_STREAM);
	EXPECT_GE(raw_.GrantOf(idle)->bulk_len, uint64_t(1) << 20);
	ASSERT_TRUE(Until([&] { return raw_.EndOf(idle) != nullptr; }));
	EXPECT_EQ(raw_.EndOf(idle)->status, ZCRPC_RESOURCE_EXHAUSTED);
	EXPECT_EQ(raw_.EndOf(idle)->payload, "bulk part not written within the server's time limit");

	// Above the reader's limit (4 MiB): refused before any memory is taken.
	const uint32_t huge = Open(0x300003);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_F_BULK, huge, "", 0, 0, 5 << 20),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.EndOf(huge) != nullptr; }));
	EXPECT_EQ(raw_.EndOf(huge)->status, ZCRPC_RESOURCE_EXHAUSTED);
	EXPECT_EQ(raw_.EndOf(huge)->payload, "a stream message above the reader's limit");
	EXPECT_EQ(raw_.GrantOf(huge), nullptr);

	// Written short: 100 bytes of a 64 KiB message. The server never hands
	// the message over: the stream ends INVALID_ARGUMENT.
	const uint32_t shorty = Open(0x300004);
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, ZCRPC_FRAME_F_BULK, shorty, "", 0, 0, 65536),
		  ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.GrantOf(shorty) != nullptr; }));
	std::vector<char> src(100, 's');
	zcrpc_mr *mr = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(w_), src.data(), src.size(), 0, &mr),
		  ZCRPC_OK);
	const Got *g = raw_.GrantOf(shorty);
	zcrpc_remote_region r{g->bulk_addr, g->bulk_len, g->bulk_rkey, 0};
	uint32_t imm = g->bulk_token;
	ASSERT_EQ(zcrpc_conn_write(raw_.conn, mr, 0, src.size(), &r, 0, &imm, nullptr), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.EndOf(shorty) != nullptr; }));
	EXPECT_EQ(raw_.EndOf(shorty)->status, ZCRPC_INVALID_ARGUMENT) << raw_.EndOf(shorty)->payload;

	// A grant's frame from a client is a server's frame: that connection only.
	// (Checked last: it closes the raw connection.) Before it, the healthy
	// stream and unary calls still work and nothing is held.
	ASSERT_EQ(raw_.Send(ZCRPC_FRAME_MESSAGE, 0, good, "two"), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.MessagesOf(good) == 2; }));
	EXPECT_TRUE(UnaryAnswered(0x400001));
	zcrpc_server_stats ss;
	ASSERT_TRUE(Until([&] {
		zcrpc_server_get_stats(srv_, &ss, sizeof(ss));
		return ss.bulk_in_use == 0;
	}));
	EXPECT_EQ(ss.protocol_errors, 0u);
	EXPECT_GE(ss.bulk_timeouts, 1u);
	EXPECT_GE(ss.bulk_bad_writes, 1u);
	EXPECT_FALSE(raw_.closed);
	zcrpc_frame f{};
	f.type = ZCRPC_FRAME_BULK_GRANT;
	f.flags = ZCRPC_FRAME_F_STREAM;
	f.call_id = good;
	f.bulk_addr = 4096;
	f.bulk_len = 4096;
	f.bulk_rkey = 1;
	std::vector<uint8_t> b(ZCRPC_FRAME_HDR_LEN);
	zcrpc__frame_encode(&f, b.data());
	ASSERT_EQ(zcrpc_conn_send(raw_.conn, b.data(), b.size()), ZCRPC_OK);
	ASSERT_TRUE(Until([&] { return raw_.closed == 1 && !closed_why_.empty(); }));
	EXPECT_NE(closed_why_.find("a server's frame from the client"), std::string::npos)
		<< closed_why_;
	zcrpc_mr_deregister(mr);
}
