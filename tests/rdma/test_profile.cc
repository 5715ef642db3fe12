// Device profiles over rxe (issue 13 item 4, the skeleton the hardware
// issue fills in): what the context learned about each device once, and
// the quirk the send queue follows (docs/design.md "Device profiles").
#include <cstring>
#include <string>

#include "rdma_env.h"
#include "zcrpc/transport.h"

extern "C" {
#include "../../src/transport/profile.h"
const struct zcrpc__dev_profile *zcrpc__context_profile(const zcrpc_context *ctx, int idx);
}

namespace
{
class Profile : public RdmaTest {};
} // namespace

// Every device of the guest is a Soft-RoCE device: provider rxe, the
// InfiniBand transport (RoCE), a shared receive queue deep enough for the
// default receive budget, and the drain-before-bind quirk set (the only
// provider that has it).
TEST_F(Profile, EveryRxeDeviceIsProfiledWithItsLimitsAndTheBindDrainQuirk)
{
	zcrpc_context *ctx = nullptr;
	ASSERT_EQ(zcrpc_context_create(&ctx), ZCRPC_OK) << zcrpc_last_error();
	int n = 0;
	for (int i = 0;; i++) {
		const zcrpc__dev_profile *p = zcrpc__context_profile(ctx, i);
		if (!p)
			break;
		n++;
		EXPECT_EQ(std::strncmp(p->name, "rxe", 3), 0) << p->name;
		EXPECT_EQ(p->provider, ZCRPC_PROV_RXE) << p->name;
		EXPECT_STREQ(zcrpc__provider_name(p->provider), "rxe");
		EXPECT_EQ(p->transport, IBV_TRANSPORT_IB) << p->name;
		EXPECT_GE(p->max_srq_wr, 32768u) << p->name;
		EXPECT_GT(p->max_cqe, 0u);
		EXPECT_GT(p->max_qp_wr, 0u);
		EXPECT_TRUE(p->bind_needs_drain) << p->name;
	}
	EXPECT_EQ(n, 2) << "the guest has rxe0 and rxe1";
	EXPECT_EQ(zcrpc__context_profile(ctx, -1), nullptr);
	zcrpc_context_destroy(ctx);
}
