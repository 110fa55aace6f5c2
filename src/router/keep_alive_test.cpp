#include "router/keep_alive.h"

#include <gtest/gtest.h>

namespace prefixd::router {
namespace {

using json = nlohmann::json;
using Kind = KeepAlive::Kind;
using std::chrono::milliseconds;

KeepAlive Parsed(const json& body) {
  Result<KeepAlive> k = ParseKeepAlive(body);
  EXPECT_TRUE(k.ok()) << body.dump() << ": " << k.status().ToString();
  return k.ok() ? *k : KeepAlive{};
}

TEST(KeepAlive, ReadsOllamaAndLmStudioDurations) {
  EXPECT_EQ(Parsed(json::object()).kind, Kind::kAsConfigured);
  EXPECT_EQ(Parsed({{"keep_alive", "5m"}}).idle, milliseconds(300000));
  EXPECT_EQ(Parsed({{"keep_alive", "250ms"}}).idle, milliseconds(250));
  EXPECT_EQ(Parsed({{"keep_alive", 30}}).idle, milliseconds(30000));
  EXPECT_EQ(Parsed({{"keep_alive", 0}}).kind, Kind::kFor);
  EXPECT_EQ(Parsed({{"keep_alive", -1}}).kind, Kind::kForever);
  EXPECT_EQ(Parsed({{"ttl", 60}}).idle, milliseconds(60000));
  for (const json& bad : {json("soon"), json("5d"), json(true), json("1e400h"), json("")}) {
    EXPECT_FALSE(ParseKeepAlive({{"keep_alive", bad}}).ok()) << bad.dump();
  }
  EXPECT_FALSE(ParseKeepAlive({{"ttl", -5}}).ok());
}

// 5,000,000 h used to wrap the clock and unload the model at once.
TEST(KeepAlive, DurationsPastAnyClockAreForever) {
  for (const json& huge : {json("5000000h"), json(1e300), json("1e17ms"), json(4e10)}) {
    const KeepAlive k = Parsed({{"keep_alive", huge}});
    EXPECT_EQ(k.kind, Kind::kForever) << huge.dump();
  }
  const KeepAlive year = Parsed({{"keep_alive", "8760h"}});
  EXPECT_EQ(year.kind, Kind::kFor);
  EXPECT_LE(year.idle, kMaxKeepAlive);
}

TEST(KeepAlive, ATenantKeepsAModelLongerWithinTheBoundButNeverUnloadsIt) {
  const milliseconds bound(900000);
  const KeepAlive zero = KeepAliveFor(Parsed({{"keep_alive", 0}}), false, bound);
  EXPECT_EQ(zero.kind, Kind::kAtLeast);
  EXPECT_EQ(zero.idle, milliseconds(0));
  const KeepAlive forever = KeepAliveFor(Parsed({{"keep_alive", -1}}), false, bound);
  EXPECT_EQ(forever.kind, Kind::kAtLeast);
  EXPECT_EQ(forever.idle, bound);
  EXPECT_EQ(KeepAliveFor(Parsed({{"keep_alive", "100h"}}), false, bound).idle, bound);
  EXPECT_EQ(KeepAliveFor(Parsed({{"keep_alive", -1}}), false, milliseconds(0)).kind,
            Kind::kAsConfigured);
  // An admin's ask stands.
  EXPECT_EQ(KeepAliveFor(Parsed({{"keep_alive", 0}}), true, bound).kind, Kind::kFor);
  EXPECT_EQ(KeepAliveFor(Parsed({{"keep_alive", -1}}), true, bound).kind, Kind::kForever);
}

}  // namespace
}  // namespace prefixd::router
