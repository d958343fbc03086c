// core/json_limits.h: the one entry point for client JSON holds its depth and size limits, and
// the depth scan is not fooled by brackets inside strings.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/json_limits.h"

using namespace deepinfer;

namespace {

std::string nested(size_t n) { return std::string(n, '[') + std::string(n, ']'); }

}  // namespace

TEST(JsonLimits, DepthScanRespectsStrings) {
  EXPECT_EQ(json_nesting_depth("{}"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"(["[[[[", "\"[[["])"), 1u);
  EXPECT_EQ(json_nesting_depth(nested(1000)), 1000u);
  EXPECT_EQ(json_nesting_depth(nested(1000), 10), 11u);  // stops once past the limit
  EXPECT_EQ(json_nesting_depth("]]]]["), 1u);           // unbalanced closers do not go negative
}

TEST(JsonLimits, ParseHoldsDepthAndSize) {
  std::string why;
  EXPECT_TRUE(parse_json_bounded<nlohmann::json>(nested(64), &why)) << why;
  EXPECT_FALSE(parse_json_bounded<nlohmann::json>(nested(65), &why));
  EXPECT_NE(why.find("nested deeper than 64"), std::string::npos) << why;
  EXPECT_FALSE(parse_json_bounded<nlohmann::json>(nested(100000), &why));  // no stack overflow, no value built
  JsonLimits small;
  small.max_bytes = 8;
  EXPECT_TRUE(parse_json_bounded<nlohmann::json>("[1,2,3]", &why, small));
  EXPECT_FALSE(parse_json_bounded<nlohmann::json>("[1,2,3,4]", &why, small));
  EXPECT_NE(why.find("longer than 8 bytes"), std::string::npos) << why;
  EXPECT_FALSE(parse_json_bounded<nlohmann::ordered_json>("{\"a\":", &why));
  EXPECT_EQ(why, "not valid JSON");
  const auto ordered = parse_json_bounded<nlohmann::ordered_json>(R"({"z": 1, "a": 2})");
  ASSERT_TRUE(ordered);
  EXPECT_EQ(ordered->begin().key(), "z");  // key order kept, as the chat encoders need
}
