// Device profiles over rxe (issue 13 item 4, the skeleton the hardware
// issue fills in): what the context learned about each device once, and
// the quirk the send queue follows (docs/design.md "Device profiles").
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rdma_env.h"
#include "zcrpc/transport.h"

extern "C" {
#include "../../src/transport/profile.h"
const struct zcrpc__dev_profile *
zcrpc__context_profile(const zcrpc_context *ctx, int idx);
int zcrpc__profile_describe(const struct zcrpc__dev_profile *p, char *buf,
			    size_t cap);
}

namespace
{
class Profile : public RdmaTest
{
};
} // namespace

// Every device of the guest is profiled once at context creation: rxe
// (RoCE: IB transport, type-2 windows, write with immediate, the
// drain-before-bind quirk) or, in the Soft-iWARP guest, siw (iWARP: no
// windows, no write with immediate, the active side first, no quirk); a
// shared receive queue deep enough for the default receive budget. Under a
// capability mask (ZCRPC_DEVICE_CAPS) the hidden features read as absent.
TEST_F(Profile, EveryDeviceIsProfiledWithItsFeaturesLimitsAndQuirks)
{
	zcrpc_context *ctx = nullptr;
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK) << zcrpc_last_error();
	const bool siw = env_.provider == "siw";
	int n = 0;
	for (int i = 0;; i++) {
		const zcrpc__dev_profile *p = zcrpc__context_profile(ctx, i);
		if (!p)
			break;
		n++;
		char line[256];
		zcrpc__profile_describe(p, line, sizeof(line));
		std::printf("profile: %s\n", line);
		EXPECT_EQ(std::string(p->name).substr(0, 3), env_.provider)
			<< p->name;
		EXPECT_STREQ(zcrpc__provider_name(p->provider),
			     env_.provider.c_str());
		EXPECT_EQ(p->transport,
			  siw ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB)
			<< p->name;
		EXPECT_EQ(p->link_layer, IBV_LINK_LAYER_ETHERNET) << p->name;
		EXPECT_GE(p->max_srq_wr, 1024u) << p->name;
		EXPECT_GT(p->max_cqe, 0u);
		EXPECT_GT(p->max_qp_wr, 0u);
		EXPECT_GT(p->max_sge, 0u);
		EXPECT_EQ(p->bind_needs_drain, siw ? 0u : 1u) << p->name;
		EXPECT_EQ(p->mw_type2, !siw && !MaskHas("no_mw") ? 1u : 0u)
			<< p->name;
		EXPECT_EQ(p->write_imm,
			  !siw && !MaskHas("no_write_imm") ? 1u : 0u)
			<< p->name;
		EXPECT_EQ(p->active_first,
			  siw || MaskHas("active_first") ? 1u : 0u)
			<< p->name;
		if (siw)
			EXPECT_EQ(p->max_mw, 0u) << "siw has no memory windows";
		EXPECT_EQ(p->masked,
			  std::getenv("ZCRPC_DEVICE_CAPS") &&
					  *std::getenv("ZCRPC_DEVICE_CAPS")
				  ? 1u
				  : 0u);
	}
	EXPECT_EQ(n, 2) << "the guest has two devices";
	EXPECT_EQ(zcrpc__context_profile(ctx, -1), nullptr);
	zcrpc_context_destroy(ctx);
}

namespace
{
// One connection to an echo server on the guest's first address, from a
// worker created while ZCRPC_DEVICE_CAPS is @caps (restored afterwards).
struct MaskedConn {
	zcrpc_worker *w = nullptr;
	zcrpc_conn *c = nullptr;
	bool up = false;
	MaskedConn(const RxeEnv &env, EchoServer &srv, const char *caps)
	{
		const char *old = std::getenv("ZCRPC_DEVICE_CAPS");
		std::string saved = old ? old : "";
		if (caps)
			setenv("ZCRPC_DEVICE_CAPS", caps, 1);
		zcrpc_status st = zcrpc_worker_create(nullptr, &w);
		if (old)
			setenv("ZCRPC_DEVICE_CAPS", saved.c_str(), 1);
		else
			unsetenv("ZCRPC_DEVICE_CAPS");
		if (st != ZCRPC_OK)
			return;
		zcrpc_conn_handlers h;
		zcrpc_conn_handlers_init(&h);
		if (zcrpc_connect(w, env.addr0.c_str(),
				  std::to_string(srv.port()).c_str(), nullptr,
				  &h, &c) != ZCRPC_OK)
			return;
		up = ProgressUntil(
			w,
			[&] {
				return zcrpc_conn_get_state(c) ==
				       ZCRPC_CONN_ESTABLISHED;
			},
			Scaled(10000));
	}
	~MaskedConn()
	{
		if (c)
			zcrpc_conn_destroy(c);
		if (w)
			zcrpc_worker_destroy(w);
	}
};
} // namespace

// zcrpc_conn_get_info names the device the connection runs on (the guest's
// first one: its address is there) and the path chosen from the profile.
TEST_F(Profile, ConnectionInfoNamesTheDeviceAndThePathItUses)
{
	EchoServer srv(env_.addr0);
	ASSERT_TRUE(srv.ok());
	MaskedConn mc(env_, srv, nullptr);
	ASSERT_TRUE(mc.up) << zcrpc_conn_get_error(mc.c);
	zcrpc_conn_info info;
	std::memset(&info, 0xab, sizeof(info));
	zcrpc_conn_get_info(mc.c, &info, sizeof(info));
	EXPECT_EQ(std::string(info.device), env_.dev0);
	EXPECT_EQ(std::string(info.provider), env_.provider);
	EXPECT_EQ(info.port, 1u);
	const bool siw = env_.provider == "siw";
	EXPECT_EQ(info.transport,
		  siw ? ZCRPC_TRANSPORT_IWARP : ZCRPC_TRANSPORT_ROCE);
	EXPECT_EQ(info.grant_path, siw || MaskHas("no_mw")
					   ? ZCRPC_GRANT_REGISTRATION
					   : ZCRPC_GRANT_WINDOW);
	EXPECT_EQ(info.write_end, siw || MaskHas("no_write_imm")
					  ? ZCRPC_WRITE_END_MSG
					  : ZCRPC_WRITE_END_IMM);
	EXPECT_EQ(info.active_first, siw || MaskHas("active_first") ? 1u : 0u);
	// An older caller's shorter struct: only its bytes are written.
	zcrpc_conn_info small;
	std::memset(&small, 0xab, sizeof(small));
	zcrpc_conn_get_info(mc.c, &small, offsetof(zcrpc_conn_info, port));
	EXPECT_EQ(std::string(small.device), env_.dev0);
	EXPECT_EQ(small.port, 0xababababu);
	zcrpc_conn_get_info(nullptr, &info, sizeof(info)); // no-op, no crash
}

// Inline is found by asking: a first ask above what the device grants (a
// mask raises it to 4096; rxe and siw refuse that) steps down to a size the
// device takes, and the size that worked is asked first by the next QP. A
// mask of 96 (bnxt_re's limit) caps what a connection uses.
TEST_F(Profile, InlineIsFoundByAskingAndClampedToTheProfile)
{
	EchoServer srv(env_.addr0);
	ASSERT_TRUE(srv.ok());
	zcrpc_conn_stats st;
	{
		MaskedConn mc(env_, srv, "inline_ask=4096");
		ASSERT_TRUE(mc.up) << zcrpc_conn_get_error(mc.c);
		zcrpc_conn_get_stats(mc.c, &st, sizeof(st));
		std::printf("inline asked 4096, granted %u\n", st.max_inline);
		EXPECT_GT(st.max_inline, 0u)
			<< "a refusal must not end at no inline";
		EXPECT_LT(st.max_inline, 4096u);
		const char *m = "inline after a step down";
		ASSERT_EQ(zcrpc_conn_send(mc.c, m, std::strlen(m)), ZCRPC_OK);
		ASSERT_TRUE(ProgressUntil(
			mc.w, [&] { return srv.echoed() > 0; }, Scaled(5000)));
	}
	{
		MaskedConn mc(env_, srv, "inline=96");
		ASSERT_TRUE(mc.up) << zcrpc_conn_get_error(mc.c);
		zcrpc_conn_get_stats(mc.c, &st, sizeof(st));
		EXPECT_LE(st.max_inline, 96u);
		std::printf("inline capped at 96: %u\n", st.max_inline);
	}
}

// A device whose max_qp_wr is below what the send queue needs (a mask of
// 100: the default depth 64 needs 129 work requests with windows, 65
// without) refuses the connection clearly, naming the device and the limit,
// instead of a bare EINVAL from the provider.
TEST_F(Profile, SendQueueBeyondTheDeviceMaxQpWrIsRefusedNamingIt)
{
	EchoServer srv(env_.addr0);
	ASSERT_TRUE(srv.ok());
	const bool windows = env_.provider != "siw" && !MaskHas("no_mw");
	MaskedConn mc(env_, srv, windows ? "max_qp_wr=100" : "max_qp_wr=60");
	ASSERT_FALSE(mc.up);
	ASSERT_NE(mc.c, nullptr);
	ProgressUntil(
		mc.w,
		[&] { return zcrpc_conn_get_state(mc.c) == ZCRPC_CONN_CLOSED; },
		Scaled(5000));
	std::string err = zcrpc_conn_get_error(mc.c);
	EXPECT_NE(err.find("max_qp_wr"), std::string::npos) << err;
	EXPECT_NE(err.find(env_.dev0), std::string::npos) << err;
	EXPECT_NE(err.find("send_depth"), std::string::npos) << err;
}

namespace
{
void KeepAccepted(zcrpc_listener *, zcrpc_conn *c, void *a)
{
	*static_cast<zcrpc_conn **>(a) = c;
}

// A worker listening on @addr that keeps the last connection it accepted;
// the tests connect to it from the same worker.
struct SelfServer {
	zcrpc_worker *w = nullptr;
	zcrpc_listener *l = nullptr;
	zcrpc_conn *accepted = nullptr;
	std::string port;
	bool ok = false;
	explicit SelfServer(const std::string &addr)
	{
		if (zcrpc_worker_create(nullptr, &w) != ZCRPC_OK)
			return;
		zcrpc_listen_opts lo;
		zcrpc_listen_opts_init(&lo);
		lo.on_accept = KeepAccepted;
		lo.arg = &accepted;
		if (zcrpc_listen(w, addr.c_str(), "0", &lo, &l) != ZCRPC_OK)
			return;
		port = std::to_string(zcrpc_listener_get_port(l));
		ok = true;
	}
	~SelfServer()
	{
		if (l)
			zcrpc_listener_destroy(l);
		if (w)
			zcrpc_worker_destroy(w);
	}
};
} // namespace

// Item 6: a connection's ToS (RDMA_OPTION_ID_TOS, set before the route is
// resolved) is what the client's queue pair carries as its traffic class,
// and the server's side follows the client's request. iWARP's queue pairs
// have no address vector (the ToS goes to the TCP socket): info reads 0.
TEST_F(Profile, TosIsSetBeforeTheRouteAndBothQueuePairsCarryIt)
{
	SelfServer srv(env_.addr0);
	ASSERT_TRUE(srv.ok);
	zcrpc_worker *w = srv.w;
	zcrpc_conn *&accepted = srv.accepted;
	const std::string &port = srv.port;
	zcrpc_conn_handlers h;
	zcrpc_conn_handlers_init(&h);
	zcrpc_connect_opts co;
	zcrpc_connect_opts_init(&co);
	zcrpc_conn *c = nullptr;
	co.tos = 256;
	EXPECT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &c),
		ZCRPC_INVALID_ARGUMENT);
	co.tos = 0x68; // DSCP 26 (AF31)
	ASSERT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &c),
		ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w,
		[&] {
			return accepted && zcrpc_conn_get_state(c) ==
						   ZCRPC_CONN_ESTABLISHED;
		},
		Scaled(10000)))
		<< zcrpc_conn_get_error(c);
	zcrpc_conn_info ci, si;
	zcrpc_conn_get_info(c, &ci, sizeof(ci));
	zcrpc_conn_get_info(accepted, &si, sizeof(si));
	std::printf("client: traffic class %u, sl %u, gid index %u; server: "
		    "%u, %u, %u\n",
		    ci.traffic_class, ci.service_level, ci.gid_index,
		    si.traffic_class, si.service_level, si.gid_index);
	if (env_.provider == "siw") {
		EXPECT_EQ(ci.traffic_class, 0u) << "iWARP: no address vector";
	} else {
		EXPECT_EQ(ci.traffic_class, 0x68u);
		EXPECT_EQ(si.traffic_class, 0x68u)
			<< "the server's side follows the request";
	}

	// Without the option: the kernel's default (0 in the guest).
	zcrpc_conn *d = nullptr;
	accepted = nullptr;
	co.tos = 0;
	ASSERT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &d),
		ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w,
		[&] {
			return accepted && zcrpc_conn_get_state(d) ==
						   ZCRPC_CONN_ESTABLISHED;
		},
		Scaled(10000)))
		<< zcrpc_conn_get_error(d);
	zcrpc_conn_get_info(d, &ci, sizeof(ci));
	EXPECT_EQ(ci.traffic_class, 0u);
	zcrpc_conn_destroy(c);
	zcrpc_conn_destroy(d);
	ProgressUntil(
		w, [] { return false; }, Scaled(200));
}

// Item 6: a connection pinned to a device and port runs there (over rxe,
// the second device: the source becomes its GID's address and the guest
// routes that across to the first); an unknown device, a missing port, a
// GID without an address, or a source address beside the pin is refused
// naming what is wrong. Over siw the GIDs carry no IP: the pin takes the
// netdev's address; siw pins its first device (the cross-device routes
// are set up for rxe's device tests, which do not run over siw).
TEST_F(Profile, PinnedDevicePortAndGidChooseThePathOrAreRefusedNamingWhy)
{
	const bool siw = env_.provider == "siw";
	const std::string pin_dev = siw ? env_.dev0 : env_.dev1;
	SelfServer srv(env_.addr0);
	ASSERT_TRUE(srv.ok);
	zcrpc_worker *w = srv.w;
	zcrpc_conn *&accepted = srv.accepted;
	const std::string &port = srv.port;
	zcrpc_conn_handlers h;
	zcrpc_conn_handlers_init(&h);
	zcrpc_connect_opts co;
	zcrpc_connect_opts_init(&co);
	zcrpc_conn *c = nullptr;

	co.device = "nosuch0";
	EXPECT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &c),
		ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(zcrpc_last_error(), "no RDMA device nosuch0"),
		  nullptr)
		<< zcrpc_last_error();
	co.device = pin_dev.c_str();
	co.port = 2;
	EXPECT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &c),
		ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(std::strstr(zcrpc_last_error(), "has no port 2"), nullptr)
		<< zcrpc_last_error();
	co.port = 0;
	co.src_addr = env_.addr0.c_str();
	EXPECT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &c),
		ZCRPC_INVALID_ARGUMENT);
	co.src_addr = nullptr;
	co.gid_index = 1000; // beyond the table
	EXPECT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &c),
		ZCRPC_INVALID_ARGUMENT);
	EXPECT_NE(
		std::strstr(zcrpc_last_error(),
			    siw ? "no IPv4 address" : "carries no IP address"),
		nullptr)
		<< zcrpc_last_error();
	co.gid_index = 0;

	ASSERT_EQ(
		zcrpc_connect(w, env_.addr0.c_str(), port.c_str(), &co, &h, &c),
		ZCRPC_OK);
	ASSERT_TRUE(ProgressUntil(
		w,
		[&] {
			return accepted && zcrpc_conn_get_state(c) ==
						   ZCRPC_CONN_ESTABLISHED;
		},
		Scaled(10000)))
		<< zcrpc_conn_get_error(c);
	zcrpc_conn_info ci;
	zcrpc_conn_get_info(c, &ci, sizeof(ci));
	EXPECT_EQ(std::string(ci.device), pin_dev);
	EXPECT_EQ(ci.port, 1u);
	std::printf("pinned to %s: runs on %s port %u, GID index %u\n",
		    pin_dev.c_str(), ci.device, ci.port, ci.gid_index);
	zcrpc_conn_destroy(c);
	ProgressUntil(
		w, [] { return false; }, Scaled(200));
}

namespace
{
void OwnSigpipe(int)
{
}
} // namespace

// siw's kernel TCP raises SIGPIPE in the thread that posts on a connection
// the peer reset (seen: Hostile.Garbage… killed by SIGPIPE over siw). A
// context with a siw device ignores SIGPIPE unless the application chose a
// disposition; over rxe nothing changes.
TEST_F(Profile, ASoftIwarpContextIgnoresSigpipeUnlessTheApplicationChose)
{
	struct sigaction dfl {
	}, now{};
	dfl.sa_handler = SIG_DFL;
	ASSERT_EQ(sigaction(SIGPIPE, &dfl, nullptr), 0);
	zcrpc_context *ctx = nullptr;
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK);
	ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
	if (env_.provider == "siw")
		EXPECT_EQ(now.sa_handler, SIG_IGN);
	else
		EXPECT_EQ(now.sa_handler, SIG_DFL);
	zcrpc_context_destroy(ctx);

	struct sigaction own {
	};
	own.sa_handler = OwnSigpipe;
	ASSERT_EQ(sigaction(SIGPIPE, &own, nullptr), 0);
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK);
	ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
	EXPECT_EQ(now.sa_handler, &OwnSigpipe)
		<< "the application's handler stays";
	zcrpc_context_destroy(ctx);
	ASSERT_EQ(sigaction(SIGPIPE, &dfl, nullptr), 0);
}
