// SchemaGaps: the keywords of a tool's schema that no grammar holds, found where they are.
#include "engine/chat/schema_gaps.h"

#include <gtest/gtest.h>

namespace prefixd::engine {
namespace {

using Gaps = std::vector<std::string>;

TEST(SchemaGapsTest, WhatTheGrammarsHoldIsNoGap) {
  EXPECT_EQ(SchemaGaps(R"({"type":"object","properties":{
      "mode":{"type":"string","enum":["read","write"]},
      "n":{"type":"integer","minimum":1,"maximum":9},
      "path":{"type":"string","minLength":1,"maxLength":8,"pattern":"^[a-z/]+$"},
      "when":{"type":"string","format":"date-time"},
      "id":{"type":"string","format":"uuid4"},
      "edits":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"object",
        "properties":{"line":{"type":"integer"}},"required":["line"],"additionalProperties":false}}},
      "required":["mode"],"additionalProperties":false})"),
            Gaps{});
}

TEST(SchemaGapsTest, EachGapIsNamedWhereItIs) {
  EXPECT_EQ(SchemaGaps(R"({"type":"object","properties":{
      "url":{"type":"string","format":"uri"},
      "ratio":{"type":"number","minimum":0,"exclusiveMaximum":1},
      "word":{"type":"string","pattern":"^(?!no).*$"},
      "tags":{"type":"array","uniqueItems":true,"items":{"anyOf":[{"type":"integer","multipleOf":2},
        {"type":"string","format":"email"}]}}}})"),
            (Gaps{"properties.url: format \"uri\"", "properties.ratio: number minimum 0",
                  "properties.ratio: number exclusiveMaximum 1",
                  "properties.word: pattern \"^(?!no).*$\"", "properties.tags: uniqueItems true",
                  "properties.tags.items.anyOf.0: multipleOf 2",
                  "properties.tags.items.anyOf.1: format \"email\""}));
}

TEST(SchemaGapsTest, WholeNumberBoundsAreHeldOthersAreNot) {
  EXPECT_EQ(SchemaGaps(R"({"type":"integer","minimum":0})"), Gaps{});
  EXPECT_EQ(SchemaGaps(R"({"type":["number","null"],"minimum":-1,"maximum":5.0})"), Gaps{});
  EXPECT_EQ(SchemaGaps(R"({"type":"number","minimum":0,"maximum":0.5})"),
            (Gaps{"number minimum 0", "number maximum 0.5"}));
  EXPECT_EQ(SchemaGaps(R"({"type":"number","minimum":2,"maximum":1})"),
            (Gaps{"number minimum 2", "number maximum 1"}));
}

TEST(SchemaGapsTest, NotAnObjectIsNoGap) {
  EXPECT_EQ(SchemaGaps("not json"), Gaps{});
  EXPECT_EQ(SchemaGaps("[1,2]"), Gaps{});
}

TEST(SchemaGapsTest, TheMessageNamesTheToolAndEveryGap) {
  EXPECT_EQ(SchemaGapsMessage("fetch", {}), "");
  EXPECT_EQ(SchemaGapsMessage("fetch", {"properties.url: format \"uri\"", "x: not {}"}),
            "tool 'fetch': no grammar holds properties.url: format \"uri\"; x: not {} (a call "
            "may break them; the rest of its schema is held)");
}

}  // namespace
}  // namespace prefixd::engine
