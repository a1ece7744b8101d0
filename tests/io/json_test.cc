// The JSON helpers: the nesting-depth bound every parse goes through, and python_json_dumps at
// depths that would overflow a recursive writer.
#include "io/json.h"

#include <gtest/gtest.h>

#include <string>

namespace dsinfer {
namespace {

std::string nested_arrays(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}
std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += R"({"a": )";
  s += "1";
  return s + std::string(depth, '}');
}
bool names_the_limit(const Status& s) {
  return s.message().find("JSON nested deeper than 128 levels") != std::string::npos;
}

TEST(JsonDepth, AtTheLimitParses) {
  static_assert(kMaxJsonDepth == 128);
  EXPECT_EQ(*check_json_depth("1", "t"), 0);
  EXPECT_EQ(*check_json_depth("[[1], {}]", "t"), 2);
  EXPECT_EQ(*check_json_depth(nested_arrays(kMaxJsonDepth), "t"), kMaxJsonDepth);
  auto arrays = parse_json(nested_arrays(kMaxJsonDepth), "t");
  ASSERT_TRUE(arrays.ok()) << arrays.status().message();
  auto objects = parse_ordered_json(nested_objects(kMaxJsonDepth), "t");
  ASSERT_TRUE(objects.ok()) << objects.status().message();
}

TEST(JsonDepth, OnePastTheLimitIsAnErrorNamingIt) {
  for (const std::string& text : {nested_arrays(kMaxJsonDepth + 1), nested_objects(kMaxJsonDepth + 1)}) {
    const auto d = check_json_depth(text, "body");
    ASSERT_FALSE(d.ok());
    EXPECT_TRUE(names_the_limit(d.status())) << d.status().message();
    EXPECT_EQ(d.status().kind(), ErrorKind::kInvalidArgument);
    const auto j = parse_json(text, "config.json");
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().kind(), ErrorKind::kCorruptFile);
    EXPECT_EQ(j.status().message(), "config.json: JSON nested deeper than 128 levels");
    const auto o = parse_ordered_json(text, "request body");
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().kind(), ErrorKind::kInvalidArgument);
    EXPECT_TRUE(names_the_limit(o.status())) << o.status().message();
  }
}

TEST(JsonDepth, FarPastTheLimitIsAnErrorNotACrash) {
  for (const std::string& text : {nested_arrays(100'000), nested_objects(100'000), std::string(100'000, '[')}) {
    const auto o = parse_ordered_json(text, "t");
    ASSERT_FALSE(o.ok());
    EXPECT_TRUE(names_the_limit(o.status())) << o.status().message();
  }
}

TEST(JsonDepth, InvalidJsonIsStillReportedAsSuch) {
  for (const char* text : {"{", "[1,]", "", "[1] 2"}) {
    const auto o = parse_ordered_json(text, "t");
    ASSERT_FALSE(o.ok()) << text;
    EXPECT_NE(o.status().message().find("invalid JSON"), std::string::npos) << o.status().message();
  }
}

TEST(PythonJsonDumps, AtTheLimitAndFarPastIt) {
  // At the limit, as parsed from a request.
  const std::string objects = nested_objects(kMaxJsonDepth);
  EXPECT_EQ(python_json_dumps(*parse_ordered_json(objects, "t")), objects);
  std::string arrays;
  for (int i = 1; i < kMaxJsonDepth; ++i) arrays += "[1, ";
  arrays += "{}" + std::string(kMaxJsonDepth - 1, ']');  // the {} is the 128th level
  EXPECT_EQ(python_json_dumps(*parse_ordered_json(arrays, "t")), arrays);
  // Built in code, 100,000 levels (moved in, never copied): the writer does not recurse.
  constexpr int kDeep = 100'000;
  OrderedJson deep = OrderedJson::array();
  for (int i = 1; i < kDeep; ++i) {
    OrderedJson outer = OrderedJson::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(python_json_dumps(deep), nested_arrays(kDeep));
  // The spelling: ", " and ": ", UTF-8 kept, keys in their order.
  EXPECT_EQ(python_json_dumps(*parse_ordered_json(R"({"z":[1,"é",null,true],"a":{}})", "t")),
            R"({"z": [1, "é", null, true], "a": {}})");
}

}  // namespace
}  // namespace dsinfer
