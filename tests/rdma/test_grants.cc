// Grants as type-2 memory windows over rxe (T12, T13, T14): writes through a
// wrong, foreign, revoked or never-granted rkey fail only the writer's
// connection and leave the memory (canaries around every window) unchanged;
// the RPC layer reads bulk data only after revoking its window, and cancels
// or timeouts racing bulk replies never cost an honest peer its connection.
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grant_hooks.h"
#include "rdma_env.h"
#include "rpc/frame.h"
#include "zcrpc/rpc.h"

using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

constexpr uint8_t kCanary = 0xc5;
constexpr size_t kBuf = 64 * 1024;

// One end of a connection, driven on the test thread.
struct Peer {
	zcrpc_conn *c = nullptr;
	int established = 0, closed = 0;
	zcrpc_status close_status = ZCRPC_OK;
	std::string error;
	std::vector<std::vector<uint8_t>> got;
	std::vector<zcrpc_status> writes;
	std::vector<uint32_t> imms;
	std::vector<zcrpc_status> revokes;

	zcrpc_conn_handlers Handlers()
	{
		zcrpc_conn_handlers h{};
		h.size = sizeof(h);
		h.on_state = [](zcrpc_conn *c, zcrpc_conn_state st, zcrpc_status s, void *a) {
			auto *p = static_cast<Peer *>(a);
			if (st == ZCRPC_CONN_ESTABLISHED)
				p->established++;
			if (st == ZCRPC_CONN_CLOSED) {
				p->closed++;
				p->close_status = s;
				p->error = zcrpc_conn_get_error(c);
			}
		};
		h.on_recv = [](zcrpc_conn *, const void *d, size_t n, void *a) {
			auto *b = static_cast<const uint8_t *>(d);
			static_cast<Peer *>(a)->got.emplace_back(b, b + n);
		};
		h.on_write_done = [](zcrpc_conn *, void *, zcrpc_status s, void *a) {
			static_cast<Peer *>(a)->writes.push_back(s);
		};
		h.on_write_imm = [](zcrpc_conn *, uint32_t imm, size_t, void *a) {
			static_cast<Peer *>(a)->imms.push_back(imm);
		};
		h.on_revoked = [](zcrpc_conn *, void *, zcrpc_status s, void *a) {
			static_cast<Peer *>(a)->revokes.push_back(s);
		};
		h.arg = this;
		return h;
	}
};

// Drives several workers on the test thread.
bool Drive(const std::vector<zcrpc_worker *> &ws, const std::function<bool()> &done,
	   milliseconds timeout)
{
	auto end = steady_clock::now() + timeout;
	while (!done()) {
		if (steady_clock::now() > end)
			return false;
		for (auto *w : ws)
			zcrpc_worker_progress(w, 0);
	}
	return true;
}

// A target worker that listens (and grants) and a writer worker that
// connects, both on the test thread; a registered target buffer full of
// canaries on the target's context and a source buffer on the writer's.
class Rig {
public:
	zcrpc_worker *tw = nullptr, *ww = nullptr;
	zcrpc_listener *l = nullptr;
	uint16_t port = 0;
	std::vector<std::unique_ptr<Peer>> accepted;
	std::unique_ptr<uint8_t[]> target{new uint8_t[kBuf]}, src{new uint8_t[kBuf]};
	std::vector<uint8_t> expect = std::vector<uint8_t>(kBuf, kCanary);
	zcrpc_mr *tmr = nullptr, *smr = nullptr;
	// Exactly [8 KiB, 16 KiB) of the target, on its own: rxe checks a
	// window's rkey, QP and state, but a write's range only against the
	// window's MR (see docs/design.md), so the end of a window is enforced
	// where the MR ends.
	zcrpc_mr *emr = nullptr;

	bool Start(const std::string &addr)
	{
		std::memset(target.get(), kCanary, kBuf);
		for (size_t k = 0; k < kBuf; k++)
			src[k] = static_cast<uint8_t>(k * 7 + 1);
		if (zcrpc_worker_create(nullptr, &tw) != ZCRPC_OK ||
		    zcrpc_worker_create(nullptr, &ww) != ZCRPC_OK)
			return false;
		if (zcrpc_mr_register(zcrpc_worker_get_context(tw), target.get(), kBuf,
				      ZCRPC_MR_REMOTE_WRITE, &tmr) != ZCRPC_OK ||
		    zcrpc_mr_register(zcrpc_worker_get_context(ww), src.get(), kBuf, 0, &smr) !=
			    ZCRPC_OK ||
		    zcrpc_mr_register(zcrpc_worker_get_context(tw), target.get() + 8192, 8192,
				      ZCRPC_MR_REMOTE_WRITE, &emr) != ZCRPC_OK)
			return false;
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
			auto *r = static_cast<Rig *>(a);
			r->accepted.emplace_back(new Peer);
			Peer *p = r->accepted.back().get();
			p->c = c;
			p->established = 1;
			auto h = p->Handlers();
			zcrpc_conn_set_handlers(c, &h);
		};
		lo.arg = this;
		if (zcrpc_listen(tw, addr.c_str(), "0", &lo, &l) != ZCRPC_OK)
			return false;
		port = zcrpc_listener_get_port(l);
		return true;
	}
	~Rig()
	{
		zcrpc_listener_destroy(l);
		// Connections (and their windows) go with the workers, before
		// the registrations they were bound to.
		zcrpc_worker_destroy(ww);
		zcrpc_worker_destroy(tw);
		zcrpc_mr_deregister(tmr);
		zcrpc_mr_deregister(emr);
		zcrpc_mr_deregister(smr);
	}
	bool Run(const std::function<bool()> &done, int ms = 10000)
	{
		return Drive({tw, ww}, done, Scaled(ms));
	}
	// Connects @w to the target; returns the target's end.
	Peer *Connect(const std::string &addr, Peer &w)
	{
		size_t before = accepted.size();
		auto h = w.Handlers();
		if (zcrpc_connect(ww, addr.c_str(), std::to_string(port).c_str(), nullptr, &h,
				  &w.c) != ZCRPC_OK)
			return nullptr;
		if (!Run([&] { return w.established && accepted.size() > before; }))
			return nullptr;
		return accepted[before].get();
	}
	// Grants [off, off+len) on @t (read-only window if asked) and hands
	// the descriptor to @w in a message sent after the bind.
	bool Grant(Peer *t, Peer &w, size_t off, size_t len, zcrpc_remote_region *r,
		   zcrpc_grant **g = nullptr, bool read_only = false, zcrpc_mr *mr = nullptr)
	{
		zcrpc_remote_region mine;
		if (!mr)
			mr = tmr;
		zcrpc_status st = ZCRPC_OK;
		// Without memory windows a grant takes a registration the
		// spare thread may still be making: RESOURCE_EXHAUSTED, retry.
		Run([&] {
			st = read_only ? grant_hook_read_only(mr, t->c, off, len, &mine, g)
				       : zcrpc_mr_grant(mr, t->c, off, len, &mine, g);
			return st != ZCRPC_RESOURCE_EXHAUSTED;
		});
		if (st != ZCRPC_OK)
			return false;
		uint8_t buf[ZCRPC_REMOTE_REGION_LEN];
		zcrpc_remote_region_encode(&mine, buf);
		size_t before = w.got.size();
		if (zcrpc_conn_send(t->c, buf, sizeof(buf)) != ZCRPC_OK)
			return false;
		if (!Run([&] { return w.got.size() > before; }))
			return false;
		return zcrpc_remote_region_decode(w.got.back().data(), w.got.back().size(), r) ==
		       ZCRPC_OK;
	}
	// Writes @len source bytes (from @src_off) through @r at @dst_off and
	// waits for the writer's completion.
	zcrpc_status Write(Peer &w, const zcrpc_remote_region &r, uint64_t dst_off, size_t len,
			   size_t src_off = 0, const uint32_t *imm = nullptr)
	{
		size_t before = w.writes.size();
		zcrpc_status st = zcrpc_conn_write(w.c, smr, src_off, len, &r, dst_off, imm, nullptr);
		if (st != ZCRPC_OK)
			return st;
		if (!Run([&] { return w.writes.size() > before; }))
			return ZCRPC_DEADLINE_EXCEEDED;
		return w.writes.back();
	}
	// Records that [r.addr + dst_off, +len) now holds src[src_off, +len).
	void Landed(const zcrpc_remote_region &r, uint64_t dst_off, size_t len, size_t src_off = 0)
	{
		size_t at = static_cast<size_t>(r.addr + dst_off -
						reinterpret_cast<uintptr_t>(target.get()));
		std::memcpy(expect.data() + at, src.get() + src_off, len);
	}
	// Bytes of the target that differ from what should be there.
	size_t Diff() const
	{
		size_t n = 0;
		for (size_t k = 0; k < kBuf; k++)
			n += target[k] != expect[k];
		return n;
	}
	// A live pair still passes a message each way and a checked write
	// with immediate through its grant @r.
	void ExpectWorks(Peer &w, Peer *t, const zcrpc_remote_region &r, size_t src_off)
	{
		size_t gw = w.got.size(), gt = t->got.size(), ni = t->imms.size();
		uint8_t m = 42;
		ASSERT_EQ(zcrpc_conn_send(w.c, &m, 1), ZCRPC_OK);
		ASSERT_EQ(zcrpc_conn_send(t->c, &m, 1), ZCRPC_OK);
		uint32_t imm = 0xabc0u + static_cast<uint32_t>(src_off & 0xf);
		ASSERT_EQ(Write(w, r, 0, 1024, src_off, &imm), ZCRPC_OK);
		ASSERT_TRUE(Run([&] {
			return w.got.size() > gw && t->got.size() > gt && t->imms.size() > ni;
		}));
		EXPECT_EQ(t->imms.back(), imm);
		Landed(r, 0, 1024, src_off);
		EXPECT_EQ(Diff(), 0u);
		EXPECT_EQ(t->closed, 0);
		EXPECT_EQ(w.closed, 0);
	}
};

class Grants : public RdmaTest {};

// How @c's grants are made: ZCRPC_GRANT_WINDOW, or ZCRPC_GRANT_REGISTRATION
// on a device without type-2 windows (siw, or rxe under the capability mask
// no_mw), where some promises are weaker (docs/reliability.md "Devices").
uint32_t GrantPath(const zcrpc_conn *c)
{
	zcrpc_conn_info info;
	zcrpc_conn_get_info(c, &info, sizeof(info));
	return info.grant_path;
}

// How a bad write fails its writer. Over IB / RoCE its completion is a
// remote access error. Over iWARP (siw) a WRITE completes once it left, and
// the target's TERMINATE closes the connection ("peer disconnected"): the
// write itself may read OK, the connection fails all the same
// (docs/reliability.md "Devices").
void ExpectWriterFault(zcrpc_status write_st, const std::string &err, const std::string &what)
{
	if (GetRxeEnv().provider == "siw") {
		EXPECT_TRUE(write_st == ZCRPC_OK || write_st == ZCRPC_UNAVAILABLE)
			<< what << ": " << zcrpc_status_str(write_st);
		EXPECT_FALSE(err.empty()) << what << ": the writer's connection has no error";
		return;
	}
	EXPECT_EQ(write_st, ZCRPC_UNAVAILABLE) << what;
	EXPECT_NE(err.find("remote access error"), std::string::npos)
		<< what << ": writer's error was: " << err;
}

// Waits until a bad write failed the writer and tore the target's end
// down; checks the writer saw its fault.
void ExpectFaultLanded(Rig &rig, Peer &w, Peer *t, const char *what)
{
	ASSERT_TRUE(rig.Run([&] { return w.closed && t->closed; })) << what;
	ASSERT_EQ(w.writes.size(), 1u) << what;
	ExpectWriterFault(w.writes.back(), w.error, what);
	EXPECT_NE(t->close_status, ZCRPC_OK) << what << ": target's end was torn down";
}

} // namespace

// T12: rkey+1, a write past the end of the window, a write into a window
// granted for read only, and a write through the MR's own rkey (never
// granted: the registration carries no remote access).
TEST_F(Grants, T12BadRkeyPastTheEndReadOnlyAndNeverGrantedFailOnlyTheWriter)
{
	Rig rig;
	ASSERT_TRUE(rig.Start(env_.addr0));
	// The bystander: a second connection on the same workers.
	Peer wb;
	Peer *tb = rig.Connect(env_.addr0, wb);
	ASSERT_NE(tb, nullptr);
	zcrpc_remote_region rb;
	ASSERT_TRUE(rig.Grant(tb, wb, 48 * 1024, 8192, &rb));
	rig.ExpectWorks(wb, tb, rb, 0);

	const char *cases[] = {"rkey+1", "past the end", "read-only window", "never granted"};
	for (int i = 0; i < 4; i++) {
		Peer wv;
		Peer *tv = rig.Connect(env_.addr0, wv);
		ASSERT_NE(tv, nullptr) << cases[i];
		zcrpc_remote_region r, bad;
		if (i == 2 && GrantPath(tv->c) == ZCRPC_GRANT_REGISTRATION) {
			// A registration grant is a write grant only: a read-only
			// one is refused, and nothing was exposed.
			zcrpc_remote_region ro;
			EXPECT_EQ(grant_hook_read_only(rig.tmr, tv->c, 8192, 8192, &ro, nullptr),
				  ZCRPC_FAILED_PRECONDITION);
			zcrpc_conn_destroy(wv.c);
			continue;
		}
		if (i == 1) // the window ends where its MR does
			ASSERT_TRUE(rig.Grant(tv, wv, 0, 8192, &r, nullptr, false, rig.emr));
		else
			ASSERT_TRUE(rig.Grant(tv, wv, 8192, 8192, &r, nullptr, i == 2)) << cases[i];
		EXPECT_EQ(r.addr, reinterpret_cast<uintptr_t>(rig.target.get()) + 8192);
		EXPECT_EQ(r.len, 8192u);
		uint64_t off = 0;
		size_t len = 4096;
		bad = r;
		if (i != 2) {
			// Control: the window itself takes a write (an MW with
			// REMOTE_WRITE on an MR without it).
			ASSERT_EQ(rig.Write(wv, r, 4096, 4096, 4096), ZCRPC_OK) << cases[i];
			rig.Landed(r, 4096, 4096, 4096);
			ASSERT_EQ(rig.Diff(), 0u) << cases[i];
			wv.writes.clear();
		}
		switch (i) {
		case 0:
			bad.rkey = r.rkey + 1;
			break;
		case 1: // straddles the end: 64 bytes inside, 64 beyond
			bad.len = r.len + 4096;
			off = r.len - 64;
			len = 128;
			break;
		case 2:
			break;
		case 3:
			bad.rkey = grant_hook_mr_own_rkey(rig.tmr, tv->c);
			EXPECT_NE(bad.rkey, r.rkey);
			break;
		}
		ASSERT_EQ(zcrpc_conn_write(wv.c, rig.smr, 8192, len, &bad, off, nullptr, nullptr),
			  ZCRPC_OK)
			<< cases[i];
		ExpectFaultLanded(rig, wv, tv, cases[i]);
		EXPECT_EQ(rig.Diff(), 0u) << cases[i] << ": canaries or window changed";
		rig.ExpectWorks(wb, tb, rb, 1024 * static_cast<size_t>(i + 1));
		zcrpc_conn_destroy(wv.c);
	}
	zcrpc_worker_stats ts;
	zcrpc_worker_get_stats(rig.tw, &ts, sizeof(ts));
	EXPECT_EQ(ts.grants, GrantPath(tb->c) == ZCRPC_GRANT_REGISTRATION ? 4u : 5u);
}

// T13: connection B writes through the rkey granted to connection A.
TEST_F(Grants, T13AnotherConnectionCannotUseAGrant)
{
	Rig rig;
	ASSERT_TRUE(rig.Start(env_.addr0));
	Peer wa, wb;
	Peer *ta = rig.Connect(env_.addr0, wa);
	Peer *tb = rig.Connect(env_.addr0, wb);
	ASSERT_NE(ta, nullptr);
	ASSERT_NE(tb, nullptr);
	zcrpc_remote_region ra, rb;
	ASSERT_TRUE(rig.Grant(ta, wa, 8192, 8192, &ra));
	ASSERT_TRUE(rig.Grant(tb, wb, 32768, 8192, &rb));
	rig.ExpectWorks(wa, ta, ra, 0);
	std::vector<uint8_t> a_before(rig.target.get() + 8192, rig.target.get() + 16384);

	// B knows A's descriptor (rkey and address) and uses it.
	if (GrantPath(ta->c) == ZCRPC_GRANT_REGISTRATION) {
		// The weaker promise without windows (docs/reliability.md): the
		// rkey of a registration answers to every queue pair of the
		// device's protection domain, so B's write lands — inside A's
		// grant only — until A revokes; after the revoke it fails B.
		ASSERT_EQ(rig.Write(wb, ra, 0, 4096), ZCRPC_OK) << wb.error;
		rig.Landed(ra, 0, 4096);
		EXPECT_EQ(rig.Diff(), 0u) << "B's write reached outside A's grant";
		EXPECT_EQ(wb.closed, 0);
		EXPECT_EQ(ta->closed, 0);
		zcrpc_remote_region ra2;
		zcrpc_grant *ga = nullptr;
		ASSERT_TRUE(rig.Grant(ta, wa, 0, 4096, &ra2, &ga));
		size_t nrev = ta->revokes.size();
		ASSERT_EQ(zcrpc_grant_revoke(ga, nullptr), ZCRPC_OK);
		ASSERT_TRUE(rig.Run([&] { return ta->revokes.size() > nrev; }));
		std::vector<uint8_t> before(rig.target.get(), rig.target.get() + 4096);
		ASSERT_EQ(zcrpc_conn_write(wb.c, rig.smr, 4096, 4096, &ra2, 0, nullptr, nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(rig.Run([&] { return wb.closed && tb->closed; }))
			<< "B through A's revoked rkey";
		ExpectWriterFault(ZCRPC_UNAVAILABLE, wb.error, "B through A's revoked rkey");
		EXPECT_EQ(std::memcmp(before.data(), rig.target.get(), 4096), 0)
			<< "a write after the revoke landed";
		rig.ExpectWorks(wa, ta, ra, 2048);
		return;
	}
	ASSERT_EQ(zcrpc_conn_write(wb.c, rig.smr, 0, 4096, &ra, 0, nullptr, nullptr), ZCRPC_OK);
	ExpectFaultLanded(rig, wb, tb, "B through A's rkey");
	EXPECT_EQ(std::memcmp(a_before.data(), rig.target.get() + 8192, 8192), 0)
		<< "A's buffer changed";
	EXPECT_EQ(rig.Diff(), 0u);
	// A is unaffected.
	rig.ExpectWorks(wa, ta, ra, 2048);
	rig.ExpectWorks(wa, ta, ra, 4096);
}

// T14 (transport): once a revoke completed, a late write through the old
// rkey fails and the memory, granted again to another connection and
// rewritten there, is unchanged.
TEST_F(Grants, T14RevokedWindowRefusesLateWritesAndTheReusedBufferIsUnchanged)
{
	Rig rig;
	ASSERT_TRUE(rig.Start(env_.addr0));
	Peer wa, wb;
	Peer *ta = rig.Connect(env_.addr0, wa);
	Peer *tb = rig.Connect(env_.addr0, wb);
	ASSERT_NE(ta, nullptr);
	ASSERT_NE(tb, nullptr);
	zcrpc_remote_region ra, rb;
	zcrpc_grant *ga = nullptr;
	ASSERT_TRUE(rig.Grant(ta, wa, 8192, 8192, &ra, &ga));
	rig.ExpectWorks(wa, ta, ra, 0);
	ASSERT_EQ(zcrpc_grant_revoke(ga, nullptr), ZCRPC_OK);
	EXPECT_TRUE(ta->revokes.empty()) << "on_revoked ran inside the revoke";
	ASSERT_TRUE(rig.Run([&] { return !ta->revokes.empty(); }));
	EXPECT_EQ(ta->revokes.size(), 1u);
	EXPECT_EQ(ta->revokes[0], ZCRPC_OK);

	// The same memory, granted to B and written there.
	ASSERT_TRUE(rig.Grant(tb, wb, 8192, 8192, &rb));
	EXPECT_EQ(rb.addr, ra.addr);
	EXPECT_NE(rb.rkey, ra.rkey);
	rig.ExpectWorks(wb, tb, rb, 3000);

	// A's late write through its old rkey.
	ASSERT_EQ(zcrpc_conn_write(wa.c, rig.smr, 8192, 4096, &ra, 0, nullptr, nullptr),
		  ZCRPC_OK);
	wa.writes.clear();
	ExpectFaultLanded(rig, wa, ta, "late write through a revoked window");
	EXPECT_EQ(rig.Diff(), 0u) << "the reused buffer changed";
	rig.ExpectWorks(wb, tb, rb, 5000);

	zcrpc_worker_stats ts;
	zcrpc_worker_get_stats(rig.tw, &ts, sizeof(ts));
	EXPECT_EQ(ts.grants, 2u);
	EXPECT_EQ(ts.revokes, 1u);
}

// ---- RPC level ---------------------------------------------------------------

namespace {

const char *kHold = "/zcrpc.grants.Svc/Hold"; // held until the test replies
const char *kAck = "/zcrpc.grants.Svc/Ack";   // empty reply at once
const char *kBig = "/zcrpc.grants.Svc/Big";   // 64 KiB reply (bulk)

struct Held {
	zcrpc_server_call *call;
	const uint8_t *data;
	std::vector<uint8_t> seen; // what the handler saw, copied at once
};

// A zcrpc server on its own worker, driven on the test thread.
struct Srv {
	zcrpc_worker *w = nullptr;
	zcrpc_server *s = nullptr;
	std::vector<Held> held;
	int disconnects = 0;
	std::vector<uint8_t> big = std::vector<uint8_t>(kBuf);

	bool Start(const std::string &addr)
	{
		for (size_t k = 0; k < kBuf; k++)
			big[k] = static_cast<uint8_t>(k * 13 + 5);
		zcrpc_server_opts o;
		zcrpc_server_opts_init(&o);
		o.on_disconnect = [](zcrpc_server *, zcrpc_conn *, zcrpc_status, void *a) {
			static_cast<Srv *>(a)->disconnects++;
		};
		o.arg = this;
		return zcrpc_worker_create(nullptr, &w) == ZCRPC_OK &&
		       zcrpc_server_create(w, &o, &s) == ZCRPC_OK &&
		       zcrpc_server_register(s, kHold, OnHold, this) == ZCRPC_OK &&
		       zcrpc_server_register(s, kAck, OnAck, this) == ZCRPC_OK &&
		       zcrpc_server_register(s, kBig, OnBig, this) == ZCRPC_OK &&
		       zcrpc_server_listen(s, addr.c_str(), "0") == ZCRPC_OK;
	}
	~Srv()
	{
		zcrpc_server_destroy(s);
		zcrpc_worker_destroy(w);
	}
	static void OnHold(zcrpc_server_call *c, const zcrpc_request *r, void *a)
	{
		auto *d = static_cast<const uint8_t *>(r->data);
		static_cast<Srv *>(a)->held.push_back({c, d, std::vector<uint8_t>(d, d + r->len)});
	}
	static void OnAck(zcrpc_server_call *c, const zcrpc_request *, void *)
	{
		zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, nullptr, 0, nullptr);
	}
	static void OnBig(zcrpc_server_call *c, const zcrpc_request *, void *a)
	{
		auto *s = static_cast<Srv *>(a);
		zcrpc_server_call_reply(c, ZCRPC_OK, nullptr, s->big.data(), s->big.size(), nullptr);
	}
	zcrpc_server_stats Stats() const
	{
		zcrpc_server_stats st;
		zcrpc_server_get_stats(s, &st, sizeof(st));
		return st;
	}
};

// A client that speaks frames by hand over a raw transport connection, so
// it can write where and when an honest client would not.
struct RawClient {
	Peer p;
	zcrpc_worker *w = nullptr;
	zcrpc_mr *smr = nullptr;
	std::unique_ptr<uint8_t[]> src{new uint8_t[2 * kBuf]};

	bool Start(const std::string &addr, uint16_t port)
	{
		for (size_t k = 0; k < 2 * kBuf; k++)
			src[k] = static_cast<uint8_t>(k < kBuf ? 0xa0 + (k & 7) : 0x30 + (k & 7));
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK ||
		    zcrpc_mr_register(zcrpc_worker_get_context(w), src.get(), 2 * kBuf, 0, &smr) !=
			    ZCRPC_OK)
			return false;
		auto h = p.Handlers();
		return zcrpc_connect(w, addr.c_str(), std::to_string(port).c_str(), nullptr, &h,
				     &p.c) == ZCRPC_OK;
	}
	~RawClient()
	{
		zcrpc_worker_destroy(w);
		zcrpc_mr_deregister(smr);
	}
	zcrpc_status Send(uint8_t type, uint32_t call_id, uint32_t method = 0,
			  uint64_t bulk_len = 0)
	{
		zcrpc_frame f{};
		f.type = type;
		f.call_id = call_id;
		f.method_id = method;
		if (bulk_len) {
			f.flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
			f.bulk_len = bulk_len;
		}
		uint8_t buf[ZCRPC_FRAME_HDR_LEN];
		zcrpc__frame_encode(&f, buf);
		return zcrpc_conn_send(p.c, buf, sizeof(buf));
	}
	// The last frame received, decoded.
	bool Last(zcrpc_frame *f)
	{
		char why[128];
		return !p.got.empty() &&
		       zcrpc__frame_decode(p.got.back().data(), p.got.back().size(), f, why,
					   sizeof(why)) == ZCRPC_OK;
	}
	// Writes kBuf bytes of the first (@second: the second) pattern into
	// the server's grant @g, with the grant's token as immediate if asked.
	zcrpc_status Write(const zcrpc_frame &g, bool second, bool with_imm)
	{
		zcrpc_remote_region r{g.bulk_addr, g.bulk_len, g.bulk_rkey, 0};
		uint32_t imm = g.bulk_token;
		return zcrpc_conn_write(p.c, smr, second ? kBuf : 0, kBuf, &r, 0,
					with_imm ? &imm : nullptr, nullptr);
	}
};

// A REQUEST whose payload (kBuf bytes) comes by RDMA WRITE; returns the
// server's grant.
bool RequestBulk(RawClient &rc, const std::vector<zcrpc_worker *> &ws, uint32_t call_id,
		 const char *method, zcrpc_frame *grant)
{
	size_t before = rc.p.got.size();
	if (rc.Send(ZCRPC_FRAME_REQUEST, call_id, zcrpc_method_id(method), kBuf) != ZCRPC_OK)
		return false;
	if (!Drive(ws, [&] { return rc.p.got.size() > before; }, Scaled(10000)))
		return false;
	return rc.Last(grant) && grant->type == ZCRPC_FRAME_BULK_GRANT &&
	       grant->call_id == call_id && grant->bulk_len >= kBuf;
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

} // namespace

// The handler reads a bulk request only after its window was revoked: a
// peer that writes again after its write with immediate cannot change what
// the handler saw — whether its second write races the revoke or comes
// after the handler ran — and loses only its own connection.
TEST_F(Grants, HandlerSeesBulkDataOnlyAfterTheWindowIsRevoked)
{
	Srv srv;
	ASSERT_TRUE(srv.Start(env_.addr0));
	for (int racing = 0; racing < 2; racing++) {
		RawClient rc;
		ASSERT_TRUE(rc.Start(env_.addr0, zcrpc_server_get_port(srv.s)));
		std::vector<zcrpc_worker *> ws{srv.w, rc.w};
		ASSERT_TRUE(Drive(ws, [&] { return rc.p.established || rc.p.closed; }, Scaled(10000)));
		ASSERT_EQ(rc.p.established, 1);
		zcrpc_frame g;
		srv.held.clear();
		ASSERT_TRUE(RequestBulk(rc, ws, ((1u << 20) | 1u), kHold, &g));
		ASSERT_EQ(rc.Write(g, false, true), ZCRPC_OK);
		if (racing) // the second write right behind the first
			ASSERT_EQ(rc.Write(g, true, false), ZCRPC_OK);
		else
			ASSERT_TRUE(Drive(ws, [&] { return !srv.held.empty(); }, Scaled(10000)));
		// Keep writing the second pattern until the window refuses it:
		// one write at a time, the next once the last one landed (the
		// revoke may come after a few more: on rxe it waits for a
		// signaled completion, docs/design.md "Send ring and
		// signaling").
		size_t issued = racing ? 2u : 1u;
		ASSERT_TRUE(Drive(
			ws,
			[&] {
				if (!rc.p.closed &&
				    rc.p.writes.size() == issued &&
				    rc.p.writes.back() == ZCRPC_OK &&
				    rc.Write(g, true, false) == ZCRPC_OK)
					issued++;
				return rc.p.closed > 0;
			},
			Scaled(10000)))
			<< issued << " writes";
		ExpectWriterFault(ZCRPC_UNAVAILABLE, rc.p.error, "the late write");
		if (!racing) {
			ASSERT_EQ(srv.held.size(), 1u) << "the handler ran";
			EXPECT_EQ(srv.held[0].seen[0], rc.src[0]) << "saw the first write";
		}
		// Whenever the handler ran, what it saw is still what is there.
		ASSERT_TRUE(Drive(ws, [&] { return srv.disconnects == racing + 1; }, Scaled(10000)));
		for (auto &h : srv.held) {
			EXPECT_EQ(std::memcmp(h.data, h.seen.data(), h.seen.size()), 0)
				<< "the data changed after the handler saw it";
			EXPECT_EQ(zcrpc_server_call_reply(h.call, ZCRPC_OK, nullptr, nullptr, 0, nullptr),
				  ZCRPC_UNAVAILABLE);
		}
	}
	// Other connections are served as before: a bulk echo over a channel.
	zcrpc_worker *cw = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &cw), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(cw, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_get_port(srv.s)).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	Result res;
	std::vector<uint8_t> req(kBuf, 0x77);
	ASSERT_EQ(zcrpc_call_async(ch, zcrpc_method_id(kBig), req.data(), req.size(), nullptr,
				   Collect, &res, nullptr),
		  ZCRPC_OK);
	ASSERT_TRUE(Drive({srv.w, cw}, [&] { return res.calls > 0; }, Scaled(10000)));
	EXPECT_EQ(res.status, ZCRPC_OK);
	EXPECT_EQ(res.data, srv.big);
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(cw);
}

// T14 (RPC): after a bulk request's call completed, or was cancelled, a late
// write through its old rkey fails and the buffer — reused by the next
// call, which is held at the server meanwhile — is unchanged.
TEST_F(Grants, T14LateWritesAfterCompletedOrCancelledCallsFail)
{
	Srv srv;
	ASSERT_TRUE(srv.Start(env_.addr0));
	zcrpc_worker *cw = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &cw), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(cw, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_get_port(srv.s)).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	for (int cancelled = 0; cancelled < 2; cancelled++) {
		const char *what = cancelled ? "cancelled" : "completed";
		RawClient rc;
		ASSERT_TRUE(rc.Start(env_.addr0, zcrpc_server_get_port(srv.s)));
		std::vector<zcrpc_worker *> ws{srv.w, rc.w, cw};
		ASSERT_TRUE(Drive(ws, [&] { return rc.p.established || rc.p.closed; }, Scaled(10000)));
		zcrpc_frame g;
		uint32_t id = ((1u << 20) | 7u);
		ASSERT_TRUE(RequestBulk(rc, ws, id, kAck, &g)) << what;
		zcrpc_worker_stats s0;
		zcrpc_worker_get_stats(srv.w, &s0, sizeof(s0));
		if (!cancelled) {
			size_t before = rc.p.got.size();
			ASSERT_EQ(rc.Write(g, false, true), ZCRPC_OK);
			ASSERT_TRUE(Drive(ws, [&] { return rc.p.got.size() > before; }, Scaled(10000)));
			zcrpc_frame rep;
			ASSERT_TRUE(rc.Last(&rep));
			EXPECT_EQ(rep.type, ZCRPC_FRAME_REPLY);
			EXPECT_EQ(rep.status, static_cast<uint32_t>(ZCRPC_OK));
		} else {
			ASSERT_EQ(rc.Send(ZCRPC_FRAME_CANCEL, id), ZCRPC_OK);
		}
		// The window is revoked once the call is over.
		ASSERT_TRUE(Drive(ws, [&] {
			zcrpc_worker_stats s;
			zcrpc_worker_get_stats(srv.w, &s, sizeof(s));
			return s.revokes > s0.revokes;
		}, Scaled(10000))) << what;
		// The next call of that size gets the same buffer; it is held.
		srv.held.clear();
		std::vector<uint8_t> req(kBuf);
		for (size_t k = 0; k < kBuf; k++)
			req[k] = static_cast<uint8_t>(k * 3 + 1 + cancelled);
		Result res;
		ASSERT_EQ(zcrpc_call_async(ch, zcrpc_method_id(kHold), req.data(), req.size(),
					   nullptr, Collect, &res, nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(Drive(ws, [&] { return !srv.held.empty(); }, Scaled(10000))) << what;
		EXPECT_EQ(reinterpret_cast<uintptr_t>(srv.held[0].data), g.bulk_addr)
			<< what << ": the buffer was reused";
		EXPECT_EQ(srv.held[0].seen, req);
		// The late write, with the token as an honest writer would.
		ASSERT_EQ(rc.Write(g, true, true), ZCRPC_OK);
		ASSERT_TRUE(Drive(ws, [&] { return rc.p.closed > 0; }, Scaled(10000))) << what;
		ASSERT_EQ(rc.p.writes.size(), cancelled ? 1u : 2u);
		ExpectWriterFault(rc.p.writes.back(), rc.p.error, what);
		EXPECT_EQ(std::memcmp(srv.held[0].data, req.data(), kBuf), 0)
			<< what << ": the reused buffer changed";
		ASSERT_TRUE(Drive(ws, [&] { return srv.disconnects == cancelled + 1; }, Scaled(10000)));
		// The channel's call completes normally.
		ASSERT_EQ(zcrpc_server_call_reply(srv.held[0].call, ZCRPC_OK, nullptr, req.data(), 16,
					   nullptr),
			  ZCRPC_OK);
		ASSERT_TRUE(Drive(ws, [&] { return res.calls > 0; }, Scaled(10000)));
		EXPECT_EQ(res.calls, 1);
		EXPECT_EQ(res.status, ZCRPC_OK);
	}
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
	EXPECT_EQ(cs.reconnects, 0u);
	EXPECT_EQ(srv.Stats().cancelled, 1u);
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(cw);
}

// 1,000 calls whose 64 KiB bulk replies race random deadlines and cancels:
// every callback runs exactly once, every reply window is revoked, and the
// honest server never loses its connection.
TEST_F(Grants, ThousandRandomCancelsAndTimeoutsRacingBulkRepliesKeepTheConnection)
{
	Srv srv;
	ASSERT_TRUE(srv.Start(env_.addr0));
	zcrpc_worker *cw = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &cw), ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(cw, env_.addr0.c_str(),
				       std::to_string(zcrpc_server_get_port(srv.s)).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	std::vector<zcrpc_worker *> ws{srv.w, cw};
	const int n = 1000;
	std::vector<Result> res(n);
	std::vector<zcrpc_call_id> ids(n);
	std::vector<int> cancel_at(n, -1); // progress rounds after start, -1 = never
	std::mt19937 rng(12345);
	int started = 0, rounds = 0;
	std::vector<std::pair<int, int>> live; // (call, round started)
	auto end = steady_clock::now() + Scaled(120000);
	while (started < n || !live.empty()) {
		ASSERT_LT(steady_clock::now(), end) << "calls did not finish";
		while (started < n && live.size() < 8) {
			int i = started++;
			zcrpc_call_opts o;
			zcrpc_call_opts_init(&o);
			int kind = static_cast<int>(rng() % 3);
			if (kind == 0)
				o.timeout_us = 200 + static_cast<int64_t>(rng() % 4000);
			else if (kind == 1)
				cancel_at[static_cast<size_t>(i)] = static_cast<int>(rng() % 12);
			uint32_t v = static_cast<uint32_t>(i);
			ASSERT_EQ(zcrpc_call_async(ch, zcrpc_method_id(kBig), &v, sizeof(v), &o, Collect,
						   &res[static_cast<size_t>(i)],
						   &ids[static_cast<size_t>(i)]),
				  ZCRPC_OK);
			live.emplace_back(i, rounds);
		}
		for (auto *w : ws)
			zcrpc_worker_progress(w, 0);
		rounds++;
		for (size_t k = 0; k < live.size();) {
			int i = live[k].first;
			auto &r = res[static_cast<size_t>(i)];
			if (!r.calls && cancel_at[static_cast<size_t>(i)] >= 0 &&
			    rounds - live[k].second >= cancel_at[static_cast<size_t>(i)]) {
				zcrpc_call_cancel(ch, ids[static_cast<size_t>(i)]);
				cancel_at[static_cast<size_t>(i)] = -1;
			}
			if (r.calls) {
				live[k] = live.back();
				live.pop_back();
			} else {
				k++;
			}
		}
	}
	// Late callbacks would show up now; zombies end with their writes.
	ASSERT_TRUE(Drive(ws, [&] {
		zcrpc_channel_stats cs;
		zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
		return cs.in_flight == 0;
	}, Scaled(30000)));
	Drive(ws, [] { return false; }, 200ms);
	int ok = 0, cancelled = 0, expired = 0, other = 0;
	for (int i = 0; i < n; i++) {
		auto &r = res[static_cast<size_t>(i)];
		ASSERT_EQ(r.calls, 1) << "call " << i;
		if (r.status == ZCRPC_OK) {
			ok++;
			EXPECT_EQ(r.data, srv.big) << "call " << i;
		} else if (r.status == ZCRPC_CANCELLED) {
			cancelled++;
		} else if (r.status == ZCRPC_DEADLINE_EXCEEDED) {
			expired++;
		} else {
			if (!other++)
				ADD_FAILURE() << "call " << i << ": " << zcrpc_status_str(r.status)
					      << ": " << r.message;
		}
	}
	zcrpc_channel_stats cs;
	zcrpc_channel_get_stats(ch, &cs, sizeof(cs));
	zcrpc_worker_stats cws;
	zcrpc_worker_get_stats(cw, &cws, sizeof(cws));
	std::printf("ok %d cancelled %d expired %d other %d; client grants %llu revokes %llu\n", ok,
		    cancelled, expired, other, static_cast<unsigned long long>(cws.grants),
		    static_cast<unsigned long long>(cws.revokes));
	EXPECT_EQ(other, 0) << "a call failed for another reason (connection lost?)";
	EXPECT_EQ(srv.disconnects, 0) << "the honest server lost its connection";
	EXPECT_EQ(cs.reconnects, 0u);
	EXPECT_EQ(cs.grant_timeouts, 0u);
	EXPECT_EQ(cws.conns, 1u);
	EXPECT_GE(ok, 100);
	EXPECT_GE(cancelled, 50);
	EXPECT_GE(expired, 50);
	// Every reply window was revoked; some were granted to calls that
	// then ended by cancel or deadline (the race this test is about).
	EXPECT_EQ(cws.revokes, cws.grants);
	EXPECT_GE(cws.grants, static_cast<uint64_t>(ok) + 10)
		<< "too few cancels or deadlines raced a granted reply";
	zcrpc_channel_destroy(ch);
	zcrpc_worker_destroy(cw);
}

// Windows are reused after the quarantine: 300 grant / write / revoke
// cycles on one connection, each write checked, each old rkey refused by
// the transport's own bookkeeping (never equal to the live one).
TEST_F(Grants, ThreeHundredGrantWriteRevokeCyclesReuseQuarantinedWindows)
{
	Rig rig;
	ASSERT_TRUE(rig.Start(env_.addr0));
	Peer wa;
	Peer *ta = rig.Connect(env_.addr0, wa);
	ASSERT_NE(ta, nullptr);
	std::vector<uint32_t> live_keys;
	for (int i = 0; i < 300; i++) {
		zcrpc_remote_region r;
		zcrpc_grant *g = nullptr;
		size_t off = 8192 + static_cast<size_t>(i % 4) * 4096;
		ASSERT_TRUE(rig.Grant(ta, wa, off, 4096, &r, &g)) << "cycle " << i;
		if (!live_keys.empty())
			EXPECT_NE(r.rkey, live_keys.back());
		live_keys.push_back(r.rkey);
		uint32_t imm = static_cast<uint32_t>(i);
		ASSERT_EQ(rig.Write(wa, r, 0, 4096, static_cast<size_t>(i % 8) * 1024, &imm), ZCRPC_OK)
			<< "cycle " << i << ": " << wa.error;
		rig.Landed(r, 0, 4096, static_cast<size_t>(i % 8) * 1024);
		size_t nrev = ta->revokes.size();
		ASSERT_EQ(zcrpc_grant_revoke(g, nullptr), ZCRPC_OK);
		ASSERT_TRUE(rig.Run([&] { return ta->revokes.size() > nrev; })) << "cycle " << i;
		ASSERT_EQ(ta->revokes.back(), ZCRPC_OK) << "cycle " << i << ": " << ta->error;
	}
	EXPECT_EQ(rig.Diff(), 0u);
	EXPECT_EQ(ta->closed, 0) << ta->error;
	zcrpc_worker_stats ts;
	zcrpc_worker_get_stats(rig.tw, &ts, sizeof(ts));
	EXPECT_EQ(ts.grants, 300u);
	EXPECT_EQ(ts.revokes, 300u);
}

// T14 (RPC, timeout): a call whose reply target (the caller's reply_into)
// is granted when its deadline passes completes only once the server can no
// longer write there: the honest server's late write lands and ends the
// grant (no connection lost), the window is revoked, then the callback runs
// with DEADLINE_EXCEEDED. A second write through the old rkey fails, and
// the memory, reused by the caller meanwhile, is unchanged.
TEST_F(Grants, T14ReplyIntoIsHandedBackOnlyAfterRevocationWhenTheCallTimesOut)
{
	// The server: frames by hand on a raw transport listener.
	zcrpc_worker *sw = nullptr, *cw = nullptr;
	ASSERT_EQ(zcrpc_worker_create(nullptr, &sw), ZCRPC_OK);
	ASSERT_EQ(zcrpc_worker_create(nullptr, &cw), ZCRPC_OK);
	std::unique_ptr<uint8_t[]> ssrc(new uint8_t[2 * kBuf]);
	for (size_t k = 0; k < 2 * kBuf; k++)
		ssrc[k] = static_cast<uint8_t>(k < kBuf ? 0x10 + (k & 15) : 0x60 + (k & 15));
	zcrpc_mr *smr = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(sw), ssrc.get(), 2 * kBuf, 0, &smr),
		  ZCRPC_OK);
	std::unique_ptr<Peer> sp;
	zcrpc_listen_opts lo;
	zcrpc_listen_opts_init(&lo);
	lo.on_accept = [](zcrpc_listener *, zcrpc_conn *c, void *a) {
		auto *p = static_cast<std::unique_ptr<Peer> *>(a);
		p->reset(new Peer);
		(*p)->c = c;
		(*p)->established = 1;
		auto h = (*p)->Handlers();
		zcrpc_conn_set_handlers(c, &h);
	};
	lo.arg = &sp;
	zcrpc_listener *l = nullptr;
	ASSERT_EQ(zcrpc_listen(sw, env_.addr0.c_str(), "0", &lo, &l), ZCRPC_OK);

	// The caller's reply_into: 64 KiB between two 64 KiB canary zones.
	std::unique_ptr<uint8_t[]> mem(new uint8_t[3 * kBuf]);
	std::memset(mem.get(), kCanary, 3 * kBuf);
	zcrpc_mr *dmr = nullptr;
	ASSERT_EQ(zcrpc_mr_register(zcrpc_worker_get_context(cw), mem.get(), 3 * kBuf,
				    ZCRPC_MR_REMOTE_WRITE, &dmr),
		  ZCRPC_OK);
	zcrpc_channel *ch = nullptr;
	ASSERT_EQ(zcrpc_channel_create(cw, env_.addr0.c_str(),
				       std::to_string(zcrpc_listener_get_port(l)).c_str(), nullptr, &ch),
		  ZCRPC_OK);
	std::vector<zcrpc_worker *> ws{sw, cw};
	zcrpc_bulk into{dmr, kBuf, kBuf};
	zcrpc_call_opts o;
	zcrpc_call_opts_init(&o);
	o.reply_into = &into;
	// Long enough for connecting and granting under load; the deadline
	// counts from here.
	const auto timeout = Scaled(2000);
	o.timeout_us = duration_cast<microseconds>(timeout).count();
	Result res;
	uint32_t v = 1;
	auto t0 = steady_clock::now();
	ASSERT_EQ(zcrpc_call_async(ch, zcrpc_method_id(kBig), &v, sizeof(v), &o, Collect, &res,
				   nullptr),
		  ZCRPC_OK);
	auto frame = [&](zcrpc_frame *f) {
		char why[128];
		return sp && !sp->got.empty() &&
		       zcrpc__frame_decode(sp->got.back().data(), sp->got.back().size(), f, why,
					   sizeof(why)) == ZCRPC_OK;
	};
	zcrpc_frame req, g;
	ASSERT_TRUE(Drive(ws, [&] { return frame(&req); }, Scaled(10000)));
	ASSERT_EQ(req.type, ZCRPC_FRAME_REQUEST);
	// REPLY announcing a bulk payload; the client grants its reply_into.
	zcrpc_frame rep{};
	rep.type = ZCRPC_FRAME_REPLY;
	rep.call_id = req.call_id;
	rep.flags = ZCRPC_FRAME_F_BULK | ZCRPC_FRAME_F_PAYLOAD_IN_BULK;
	rep.bulk_len = kBuf;
	rep.bulk_token = 0x1234;
	uint8_t hdr[ZCRPC_FRAME_HDR_LEN];
	zcrpc__frame_encode(&rep, hdr);
	ASSERT_EQ(zcrpc_conn_send(sp->c, hdr, sizeof(hdr)), ZCRPC_OK);
	ASSERT_TRUE(Drive(ws, [&] { return sp->got.size() == 2; }, Scaled(10000)));
	ASSERT_TRUE(frame(&g));
	ASSERT_EQ(g.type, ZCRPC_FRAME_BULK_GRANT);
	EXPECT_EQ(g.bulk_addr, reinterpret_cast<uintptr_t>(mem.get()) + kBuf);
	EXPECT_EQ(g.bulk_len, kBuf);
	// Past the deadline the callback has not run: the target is granted.
	ASSERT_EQ(res.calls, 0) << "the grant came after the deadline";
	Drive(ws, [&] { return steady_clock::now() > t0 + timeout + 300ms; }, Scaled(10000));
	EXPECT_EQ(res.calls, 0) << "reply_into handed back while still granted";
	// The honest (late) write lands; the window is revoked; the callback runs.
	zcrpc_remote_region r{g.bulk_addr, g.bulk_len, g.bulk_rkey, 0};
	uint32_t imm = g.bulk_token;
	ASSERT_EQ(zcrpc_conn_write(sp->c, smr, 0, kBuf, &r, 0, &imm, nullptr), ZCRPC_OK);
	ASSERT_TRUE(Drive(ws, [&] { return res.calls > 0; }, Scaled(10000)));
	EXPECT_EQ(res.calls, 1);
	EXPECT_EQ(res.status, ZCRPC_DEADLINE_EXCEEDED);
	ASSERT_EQ(sp->writes.size(), 1u);
	EXPECT_EQ(sp->writes[0], ZCRPC_OK) << "the honest late write";
	EXPECT_EQ(std::memcmp(mem.get() + kBuf, ssrc.get(), kBuf), 0);
	zcrpc_worker_stats cs;
	zcrpc_worker_get_stats(cw, &cs, sizeof(cs));
	EXPECT_EQ(cs.grants, 1u);
	EXPECT_EQ(cs.revokes, 1u);
	EXPECT_EQ(cs.conns, 1u) << "the honest server's connection survived";
	// The caller reuses its memory; a second write through the old rkey.
	std::memset(mem.get() + kBuf, 0x3c, kBuf);
	ASSERT_EQ(zcrpc_conn_write(sp->c, smr, kBuf, kBuf, &r, 0, nullptr, nullptr), ZCRPC_OK);
	ASSERT_TRUE(Drive(ws, [&] { return sp->closed > 0; }, Scaled(10000)));
	ASSERT_EQ(sp->writes.size(), 2u);
	ExpectWriterFault(sp->writes[1], sp->error, "the write through the old rkey");
	for (size_t k = 0; k < 3 * kBuf; k++) {
		uint8_t want = k >= kBuf && k < 2 * kBuf ? 0x3c : kCanary;
		if (mem[k] != want) {
			ADD_FAILURE() << "byte " << k << " changed";
			break;
		}
	}
	zcrpc_channel_destroy(ch);
	zcrpc_listener_destroy(l);
	zcrpc_worker_destroy(cw);
	zcrpc_worker_destroy(sw);
	zcrpc_mr_deregister(dmr);
	zcrpc_mr_deregister(smr);
}
