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

namespace {

std::string object_of(size_t keys) {
  std::string s = "{";
  for (size_t k = 0; k < keys; ++k) s += (k ? ",\"" : "\"") + std::to_string(k) + "\":" + std::to_string(k);
  return s + "}";
}

}  // namespace

// Objects with too many keys are refused before anything is built: the key-ordered type's
// insertion walks the keys before it, so one object of n keys costs n^2 / 2 comparisons
// (40k keys: 1.7 s). The scan counts members at their ':' outside strings, in objects only.
TEST(JsonLimits, ObjectKeysAreBounded) {
  EXPECT_EQ(json_object_keys("{}").most, 0u);
  const JsonObjectKeys k = json_object_keys(R"({"a": 1, "b": {"c": [1, 2, {"d": 3, "e": "x:y"}], "f": "{:"}})");
  EXPECT_EQ(k.most, 2u);    // the top object and "b" and the innermost have 2 each
  EXPECT_EQ(k.pairs, 3u);   // 1 pair each
  EXPECT_EQ(json_object_keys("[1, 2, 3]").most, 0u);
  std::string why;
  EXPECT_TRUE(parse_json_bounded<nlohmann::ordered_json>(object_of(4096), &why)) << why;
  EXPECT_FALSE(parse_json_bounded<nlohmann::ordered_json>(object_of(4097), &why));
  EXPECT_NE(why.find("more than 4096 keys"), std::string::npos) << why;
  // Many objects at the limit: each allowed alone, together over the pair budget.
  std::string many = "[";
  for (int i = 0; i < 9; ++i) many += (i ? "," : "") + object_of(4096);
  many += "]";
  EXPECT_FALSE(parse_json_bounded<nlohmann::ordered_json>(many, &why));
  EXPECT_NE(why.find("too many keys"), std::string::npos) << why;
  // 40k keys of the kind that took 1.7 s: refused at once.
  EXPECT_FALSE(parse_json_bounded<nlohmann::ordered_json>(object_of(40000), &why));
  // Keys inside strings do not count.
  EXPECT_TRUE(parse_json_bounded<nlohmann::json>("[\"" + std::string(100000, ':') + "\"]", &why)) << why;
}
