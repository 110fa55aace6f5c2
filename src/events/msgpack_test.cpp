#include "events/msgpack.h"

#include <gtest/gtest.h>

namespace prefixd::events {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {d[c >> 4], d[c & 15]};
  return out;
}

// Known vectors from the MessagePack spec: each value in its shortest form.
TEST(MsgpackTest, IntegersTakeTheShortestForm) {
  MsgpackWriter w;
  w.Uint(0), w.Uint(127), w.Uint(128), w.Uint(256), w.Uint(65536), w.Uint(1ull << 32);
  EXPECT_EQ(Hex(w.bytes()), "007f" "cc80" "cd0100" "ce00010000" "cf0000000100000000");
  MsgpackWriter n;
  n.Int(-1), n.Int(-32), n.Int(-33), n.Int(-129), n.Int(-32769), n.Int(INT64_MIN), n.Int(5);
  EXPECT_EQ(Hex(n.bytes()),
            "ff" "e0" "d0df" "d1ff7f" "d2ffff7fff" "d38000000000000000" "05");
}

TEST(MsgpackTest, StringsArraysMapsNilAndDouble) {
  MsgpackWriter w;
  w.Str("type");
  w.Str(std::string(32, 'a'));
  EXPECT_EQ(Hex(w.bytes()).substr(0, 14), "a474797065d920");
  MsgpackWriter c;
  c.Array(3), c.Array(16), c.Map(1), c.Map(16), c.Nil(), c.Double(1.5);
  EXPECT_EQ(Hex(c.bytes()), "93" "dc0010" "81" "de0010" "c0" "cb3ff8000000000000");
}

}  // namespace
}  // namespace prefixd::events
