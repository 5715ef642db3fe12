// The remote-region descriptor a side sends so its peer can RDMA WRITE.
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "zcrpc/transport.h"

TEST(RemoteRegion, RoundTripsLittleEndian)
{
	zcrpc_remote_region r{0x0102030405060708ull, 64ull << 20, 0x395, 0}, out{};
	uint8_t buf[ZCRPC_REMOTE_REGION_LEN];
	zcrpc_remote_region_encode(&r, buf);
	EXPECT_EQ(buf[0], 0x08);
	EXPECT_EQ(buf[7], 0x01);
	EXPECT_EQ(buf[16], 0x95);
	EXPECT_EQ(buf[17], 0x03);
	ASSERT_EQ(zcrpc_remote_region_decode(buf, sizeof(buf), &out), ZCRPC_OK);
	EXPECT_EQ(out.addr, r.addr);
	EXPECT_EQ(out.len, r.len);
	EXPECT_EQ(out.rkey, r.rkey);
}

TEST(RemoteRegion, RejectsShortZeroLengthReservedAndWrappingDescriptors)
{
	zcrpc_remote_region r{4096, 100, 7, 0}, out{};
	uint8_t buf[ZCRPC_REMOTE_REGION_LEN];
	zcrpc_remote_region_encode(&r, buf);
	EXPECT_EQ(zcrpc_remote_region_decode(buf, sizeof(buf) - 1, &out), ZCRPC_INVALID_ARGUMENT);
	EXPECT_EQ(zcrpc_remote_region_decode(nullptr, sizeof(buf), &out), ZCRPC_INVALID_ARGUMENT);
	uint8_t bad[ZCRPC_REMOTE_REGION_LEN];
	std::memcpy(bad, buf, sizeof(bad));
	bad[20] = 1; // reserved must be zero
	EXPECT_EQ(zcrpc_remote_region_decode(bad, sizeof(bad), &out), ZCRPC_INVALID_ARGUMENT);
	zcrpc_remote_region z{4096, 0, 7, 0};
	zcrpc_remote_region_encode(&z, bad);
	EXPECT_EQ(zcrpc_remote_region_decode(bad, sizeof(bad), &out), ZCRPC_INVALID_ARGUMENT);
	zcrpc_remote_region wrap{UINT64_MAX - 10, 100, 7, 0};
	zcrpc_remote_region_encode(&wrap, bad);
	EXPECT_EQ(zcrpc_remote_region_decode(bad, sizeof(bad), &out), ZCRPC_INVALID_ARGUMENT);
}
