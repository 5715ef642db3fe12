// Memory for bulk parts and pools over rxe (issue 11, items 5-7): a server
// whose pool is empty delays its grants and error replies instead of
// dropping them; one connection cannot take all bulk memory or stall the
// worker; memory taken at a peak is given back when it stays free.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rdma_env.h"
#include "rpc/frame.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

milliseconds Scaled(int ms)
{
	return milliseconds(static_cast<int64_t>(ms * TimeScale()));
}

const char *kEcho = "/zcrpc.bulkmem.Svc/Echo";

uint8_t Pat(uint64_t seed, uint64_t k)
{
	return static_cast<uint8_t>((seed * 0x9E3779B1u + k * 131u + (k >> 9)) >> 5);
}

std::vector<uint8_t> Pattern(uint64_t seed, size_t n)
{
	std::vector<uint8_t> v(n);
	for (size_t k = 0; k < n; k++)
		v[k] = Pat(seed, k);
	return v;
}

void Echo(zcrpc_server_call *c, const zcrpc_request *r, void *)
{
	zcrpc_reply_opts o{};
	o.size = sizeof(o);
	if (r->attachment_len)
		o.attachment = &r->attachment_mr;
	zcrpc_call_reply(c, ZCRPC_OK, nullptr, r->data, r->len, &o);
}

struct Result {
	int calls = 0;
	zcrpc_status status = ZCRPC_UNKNOWN;
	std::string message;
	std::vector<uint8_t> data;
};

void Collect(zcrpc_channel *, const zcrpc_reply *r, void *arg)
{
	auto *res = static_cast<Result *>(arg);
	res->calls++;
	res->status = r->status;
	res->message = r->message ? r->message : "";
	auto *d = static_cast<const uint8_t *>(r->data);
	res->data.assign(d, d + r->len);
}

// Drives both workers from this thread until @done or @timeout.
bool Drive2(zcrpc_worker *a, zcrpc_worker *b, const std::function<bool()> &done,
	    milliseconds timeout)
{
	auto end = steady_clock::now() + timeout;
	while (!done() && steady_clock::now() < end) {
		zcrpc_worker_progress(a, 0);
		zcrpc_worker_progress(b, 0);
	}
	return done();
}

class BulkMem : public RdmaTest {};

} // namespace

// Item 5: with every slot of the server's pool taken, a bulk request's
// BULK_GRANT and an unknown method's error reply cannot be built. They
// wait for a slot and go out when one returns; before the fix both were
// dropped and the calls (no deadline) waited forever.
TEST_F(BulkMem, EmptyPoolDelaysGrantsAndErrorRepliesButNeverDropsThem)
{
	zcrpc_worker_opts wo;
	zcrpc_worker_opts_init(&wo);
	wo.pool_max_slots = 64; // deliberately tiny
	zcrpc_worker *sw = nullptr, *cw = nullptr;
	ASSERT_EQ(zcrpc_worker_create(&wo, &sw), ZCRPC_OK);
	ASSERT_EQ(zcrpc_worker_create(nullptr, &cw), ZCRPC_OK);
	zcrpc_server_opts so;
	zcrpc_server_opts_init(&so);
	so.window = 8;
	zcrpc_server *s = nullptr;
	ASSERT_EQ(zcrpc_server_create(sw, &so, &s), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_register(s, kEcho, Echo, nullptr), ZCRPC_OK);
	ASSERT_EQ(zcrpc_server_listen(s, env_.addr0.c_str(), "0"), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(cw, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_port(s)).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	const uint32_t echo = zcrpc_method_id(kEcho);

	// Warm up: connected, the bulk path and its buffer class used once.
	const std::vector<uint8_t> big = Pattern(5, 65536);
	{
		Result r;
		ASSERT_EQ(zcrpc_call_async(ch, echo, big.data(), big.size(), nullptr, Collect, &r,
					   nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(Drive2(sw, cw, [&] { return r.calls > 0; }, Scaled(20000)));
		ASSERT_EQ(r.status, ZCRPC_OK) << r.message;
	}

	// Take every slot of the server's pool (this thread drives its worker).
	std::vector<zcrpc_msg> hoard;
	for (;;) {
		zcrpc_msg m;
		if (zcrpc_msg_alloc(sw, 1, &m) != ZCRPC_OK)
			break;
		hoard.push_back(m);
	}
	ASSERT_GT(hoard.size(), 0u);
	zcrpc_worker_stats ws;
	zcrpc_worker_get_stats(sw, &ws);
	ASSERT_EQ(ws.pool_in_use, ws.pool_capacity) << "the pool is not empty";

	// A bulk request (needs a BULK_GRANT) and an unknown method (needs an
	// error reply), neither with a deadline.
	Result bulk, unknown;
	ASSERT_EQ(zcrpc_call_async(ch, echo, big.data(), big.size(), nullptr, Collect, &bulk,
				   nullptr),
		  ZCRPC_OK);
	ASSERT_EQ(zcrpc_call_async(ch, zcrpc_method_id("/no.Such/Method"), "x", 1, nullptr,
				   Collect, &unknown, nullptr),
		  ZCRPC_OK);
	zcrpc_server_stats ss;
	auto arrived = [&] {
		zcrpc_server_get_stats(s, &ss);
		return ss.calls >= 3;
	};
	ASSERT_TRUE(Drive2(sw, cw, arrived, Scaled(10000))) << "the requests did not arrive";
	Drive2(sw, cw, [] { return false; }, Scaled(300));
	EXPECT_EQ(bulk.calls + unknown.calls, 0) << "answered without a slot?";
	zcrpc_server_get_stats(s, &ss);
	std::printf("pool empty: %zu slots hoarded, %llu frames deferred, calls answered %d\n",
		    hoard.size(), (unsigned long long)ss.frames_deferred,
		    bulk.calls + unknown.calls);

	// Slots return: both calls complete, once each, with their real result.
	for (auto &m : hoard)
		ASSERT_EQ(zcrpc_msg_free(sw, &m), ZCRPC_OK);
	hoard.clear();
	bool done = Drive2(sw, cw, [&] { return bulk.calls > 0 && unknown.calls > 0; },
			   Scaled(10000));
	std::printf("slots back: bulk call %d (%s), unknown method %d (%s)\n", bulk.calls,
		    zcrpc_status_str(bulk.status), unknown.calls, zcrpc_status_str(unknown.status));
	EXPECT_TRUE(done) << "a call still waits: its grant or error reply was dropped";
	EXPECT_EQ(bulk.calls, 1);
	EXPECT_EQ(bulk.status, ZCRPC_OK) << bulk.message;
	EXPECT_TRUE(bulk.data == big) << "echoed bytes differ";
	EXPECT_EQ(unknown.calls, 1);
	EXPECT_EQ(unknown.status, ZCRPC_UNIMPLEMENTED) << unknown.message;
	zcrpc_server_get_stats(s, &ss);
	EXPECT_GE(ss.frames_deferred, 2u);
	EXPECT_EQ(ss.running, 0u);

	zcrpc_channel_destroy(ch);
	zcrpc_server_destroy(s);
	zcrpc_worker_destroy(cw);
	zcrpc_worker_destroy(sw);
}
