// safetensors reader/writer: round trips, every header check, sharded checkpoints.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "io/checkpoint.h"
#include "io/json.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace dsinfer {
namespace {

std::vector<uint8_t> file_bytes_with_header(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

Status parse_header(const std::string& header, size_t data_bytes) {
  const auto bytes = file_bytes_with_header(header, data_bytes);
  return SafetensorsFile::parse(bytes, "t.safetensors").status();
}

void expect_corrupt(const std::string& header, size_t data_bytes, const std::string& needle) {
  const Status s = parse_header(header, data_bytes);
  EXPECT_EQ(s.kind(), ErrorKind::kCorruptFile) << header;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("t.safetensors"), std::string::npos) << s.message();
}

TEST(Safetensors, WriteThenReadRoundTrips) {
  testing::TempDir dir;
  SafetensorsWriter w;
  const std::vector<float> f = {1.5f, -2.0f, 3.25f};
  const std::vector<uint8_t> codes = {1, 2, 3, 4, 5};
  w.add_values<float>("a.weight", DType::kF32, {3}, f);
  w.add("b.scale", DType::kF8E8M0, {5, 1}, codes);
  w.add("empty", DType::kBF16, {0, 4}, std::span<const uint8_t>());
  w.set_metadata("format", "pt");
  ASSERT_TRUE(w.write(dir.path() / "x.safetensors").ok());

  auto file = SafetensorsFile::open(dir.path() / "x.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ASSERT_EQ(file->entries().size(), 3u);
  const SafetensorsEntry* a = file->find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, std::vector<int64_t>{3});
  EXPECT_EQ(a->data_offset % 8, 0u);
  float back[3];
  std::memcpy(back, file->data(*a).data(), sizeof back);
  EXPECT_EQ(back[2], 3.25f);
  const SafetensorsEntry* b = file->find("b.scale");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kF8E8M0);
  EXPECT_EQ(file->data(*b)[4], 5);
  EXPECT_EQ(file->find("nope"), nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "x.safetensors.tmp"));
}

// Unwritten tensors (benchmark checkpoints larger than the disk) read as zeros, in the middle of
// the file and at its end, and the file holds every byte the header promises.
TEST(Safetensors, UnwrittenTensorsReadAsZeros) {
  testing::TempDir dir;
  SafetensorsWriter w;
  const std::vector<uint8_t> codes = {7, 8, 9};
  w.add_unwritten("hole", DType::kU8, {1 << 20}, 1 << 20);
  w.add("b", DType::kU8, {3}, codes);
  w.add_unwritten("tail", DType::kBF16, {5}, 10);
  EXPECT_EQ(w.data_bytes(), (1u << 20) + 3 + 10);
  ASSERT_TRUE(w.write(dir.path() / "x.safetensors").ok());
  auto file = SafetensorsFile::open(dir.path() / "x.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const auto hole = file->data(*file->find("hole"));
  ASSERT_EQ(hole.size(), 1u << 20);
  EXPECT_TRUE(std::all_of(hole.begin(), hole.end(), [](uint8_t v) { return v == 0; }));
  EXPECT_EQ(file->data(*file->find("b"))[2], 9);
  const auto tail = file->data(*file->find("tail"));
  ASSERT_EQ(tail.size(), 10u);
  EXPECT_TRUE(std::all_of(tail.begin(), tail.end(), [](uint8_t v) { return v == 0; }));
}

TEST(Safetensors, RejectsBrokenHeaders) {
  const auto too_short = std::vector<uint8_t>(5, 0);
  EXPECT_EQ(SafetensorsFile::parse(too_short, "t.safetensors").status().kind(), ErrorKind::kCorruptFile);
  auto huge = file_bytes_with_header("{}", 0);
  huge[7] = 0x7F;  // header length ~ 2^62
  EXPECT_NE(SafetensorsFile::parse(huge, "t.safetensors").status().message().find("exceeds"), std::string::npos);
  auto truncated = file_bytes_with_header("{}", 0);
  truncated[0] = 40;
  EXPECT_NE(SafetensorsFile::parse(truncated, "t.safetensors").status().message().find("truncated"), std::string::npos);
  expect_corrupt("{\"a\": ", 0, "not valid JSON");
  expect_corrupt("[1, 2]", 0, "not a JSON object");
  expect_corrupt(R"({"w": 3})", 0, "'w': entry is not a JSON object");
  expect_corrupt(R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}})", 2, "unknown dtype 'Q4'");
  expect_corrupt(R"({"w": {"dtype": 7, "shape": [2], "data_offsets": [0, 2]}})", 2, "dtype");
  expect_corrupt(R"({"w": {"dtype": "U8", "shape": [-2], "data_offsets": [0, 2]}})", 2, "non-negative");
  expect_corrupt(R"({"w": {"dtype": "U8", "shape": [2.5], "data_offsets": [0, 2]}})", 2, "non-negative");
  expect_corrupt(R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0]}})", 2, "[begin, end]");
  expect_corrupt(R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [2, 0]}})", 2, "reversed");
  expect_corrupt(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 8, "needs 8 bytes");
  expect_corrupt(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 2, "run past the data section");
  expect_corrupt(R"({"w": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0,
                 "overflows");
  expect_corrupt(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                     "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
                 8, "overlap");
  expect_corrupt(R"({"__metadata__": {"k": 1}})", 0, "is not a string");
  EXPECT_TRUE(parse_header(R"({"a": {"dtype": "U8", "shape": [2, 2], "data_offsets": [0, 4]},
                               "b": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]}})",
                           8)
                  .ok());
}

TEST(Safetensors, MissingFileIsNotFound) {
  const auto r = SafetensorsFile::open("/nonexistent/x.safetensors");
  EXPECT_EQ(r.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/x.safetensors"), std::string::npos);
}

// A folder where a shard should be: fstat succeeds, so errno must not be quoted (it said "Success").
TEST(Safetensors, DirectoryIsNotARegularFile) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir.path() / "model-00001-of-00002.safetensors");
  const auto r = SafetensorsFile::open(dir.path() / "model-00001-of-00002.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kCorruptFile);
  EXPECT_NE(r.status().message().find("model-00001-of-00002.safetensors: is a directory, not a regular file"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("Success"), std::string::npos) << r.status().message();
}

SafetensorsWriter three_tensors() {
  SafetensorsWriter w;
  for (const char* name : {"a", "b", "c"}) w.add(name, DType::kU8, {16}, std::vector<uint8_t>(16, 7));
  return w;
}

TEST(Checkpoint, ShardedFolderOpensThroughTheIndex) {
  testing::TempDir dir;
  ASSERT_TRUE(three_tensors().write_sharded(dir.path(), 20).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "model-00003-of-00003.safetensors"));
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->tensors().size(), 3u);
  EXPECT_EQ(ckpt->files().size(), 3u);
  ASSERT_NE(ckpt->find("c"), nullptr);
  EXPECT_EQ(ckpt->find("c")->data()[15], 7);
  EXPECT_EQ(ckpt->total_bytes(), 48u);
  // Prefaulting reports monotone progress that ends at the total.
  std::vector<uint64_t> seen;
  ckpt->prefault([&](uint64_t done, uint64_t total) {
    EXPECT_EQ(total, 48u);
    if (!seen.empty()) {
      EXPECT_GE(done, seen.back());
    }
    seen.push_back(done);
  });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 48u);
}

TEST(Checkpoint, IndexAndShardsMustAgree) {
  testing::TempDir dir;
  ASSERT_TRUE(three_tensors().write_sharded(dir.path(), 1000).ok());
  const auto index_path = dir.path() / "model.safetensors.index.json";
  auto index = read_json_file(index_path);
  ASSERT_TRUE(index.ok());
  Json edited = *index;
  edited["weight_map"]["d"] = "model-00001-of-00001.safetensors";
  edited["weight_map"].erase("a");
  std::ofstream(index_path) << edited.dump();
  const auto r = Checkpoint::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'d' is listed"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("'a' in"), std::string::npos) << r.status().message();

  edited["weight_map"]["a"] = "../../etc/passwd";
  std::ofstream(index_path) << edited.dump();
  EXPECT_NE(Checkpoint::open(dir.path()).status().message().find("not a file name"), std::string::npos);
}

TEST(Checkpoint, FolderWithoutIndexAndDuplicateNames) {
  testing::TempDir dir;
  ASSERT_TRUE(three_tensors().write(dir.path() / "model-00001-of-00002.safetensors").ok());
  ASSERT_TRUE(three_tensors().write(dir.path() / "model-00002-of-00002.safetensors").ok());
  const auto r = Checkpoint::open(dir.path());
  EXPECT_NE(r.status().message().find("is in both"), std::string::npos) << r.status().message();
  EXPECT_EQ(Checkpoint::open(dir.path() / "missing").status().kind(), ErrorKind::kNotFound);
}

SafetensorsWriter one_tensor(const char* name) {
  SafetensorsWriter w;
  w.add(name, DType::kU8, {4}, std::vector<uint8_t>(4, 1));
  return w;
}

// Without an index only the release's shard names make up the checkpoint: other safetensors files
// beside it are left out, and a model* file set that is not one checkpoint is refused.
TEST(Checkpoint, FolderWithoutIndexTakesOnlyTheReleaseShardNames) {
  testing::TempDir dir;
  const auto& d = dir.path();
  ASSERT_TRUE(one_tensor("a").write(d / "only.safetensors").ok());
  auto lone = Checkpoint::open(d);  // a single file under any name is that checkpoint
  ASSERT_TRUE(lone.ok()) << lone.status().to_string();
  EXPECT_NE(lone->find("a"), nullptr);
  ASSERT_TRUE(one_tensor("b").write(d / "other.safetensors").ok());
  auto two = Checkpoint::open(d);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("ambiguous"), std::string::npos) << two.status().message();

  ASSERT_TRUE(one_tensor("x").write(d / "model-00001-of-00002.safetensors").ok());
  ASSERT_TRUE(one_tensor("y").write(d / "model-00002-of-00002.safetensors").ok());
  ASSERT_TRUE(one_tensor("token_map").write(d / "engram_token_map.safetensors").ok());
  auto shards = Checkpoint::open(d);
  ASSERT_TRUE(shards.ok()) << shards.status().to_string();
  EXPECT_EQ(shards->files().size(), 2u);
  EXPECT_EQ(shards->tensors().size(), 2u);
  EXPECT_EQ(shards->find("token_map"), nullptr);
  EXPECT_EQ(shards->find("a"), nullptr);

  const auto refused = [&](const char* extra, const char* why) {
    ASSERT_TRUE(one_tensor("z").write(d / extra).ok());
    const auto r = Checkpoint::open(d);
    ASSERT_FALSE(r.ok()) << extra;
    EXPECT_EQ(r.status().kind(), ErrorKind::kCorruptFile);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
    std::filesystem::remove(d / extra);
    ASSERT_TRUE(Checkpoint::open(d).ok());
  };
  refused("model.safetensors", "neither a lone model.safetensors");
  refused("model-00001-of-00003.safetensors", "different shard counts");
  refused("model_extra.safetensors", "'model_extra.safetensors' is neither");
  refused("model-1-of-2.safetensors", "is neither");
  std::filesystem::remove(d / "model-00002-of-00002.safetensors");
  const auto missing = Checkpoint::open(d);
  EXPECT_NE(missing.status().message().find("shard 2 of 2 is missing"), std::string::npos)
      << missing.status().message();
}

TEST(Checkpoint, FixturesOpen) {
  for (const char* fx : {"v41-tiny-a", "v41-tiny-b"}) {
    auto ckpt = Checkpoint::open(testing::data_dir() / fx / "checkpoint");
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    EXPECT_GT(ckpt->tensors().size(), 500u);
    ASSERT_NE(ckpt->find("embed.weight"), nullptr);
  }
}

}  // namespace
}  // namespace dsinfer
