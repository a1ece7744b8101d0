// make-tiny: the checkpoint it writes loads, matches its manifest, is deterministic, and its
// quantised weights decode to the drawn distributions.
#include "testing/tiny_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/float_formats.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/engram_token_map.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "model/weight_manifest.h"
#include "test_util.h"
#include "testing/config_builder.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TinyModel, WritesAValidCheckpoint) {
  testing::TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 7).ok());
  auto config = load_model_config(dir.path());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_GT(ckpt->files().size(), 1u);  // sharded like the release
  const Status s = check_checkpoint(build_weight_manifest(*config), *ckpt);
  EXPECT_TRUE(s.ok()) << s.to_string();

  // Every layer kind is present.
  std::set<AttentionRole> roles;
  for (int l = 0; l < config->n_layers; ++l) roles.insert(config->attention_role(l));
  EXPECT_EQ(roles.size(), 4u);
  EXPECT_TRUE(config->dspark_enabled());
  EXPECT_TRUE(config->vision_enabled());
  EXPECT_FALSE(config->engram_layer_ids.empty());
  EXPECT_GE(config->candidate_source_layer, 0);

  // The Engram vocab in the config is the one its tokenizer yields.
  auto vocab = TokenizerVocab::load(dir.path() / "tokenizer.json");
  ASSERT_TRUE(vocab.ok());
  EXPECT_EQ(vocab->size(), config->vocab_size);
  EXPECT_GT(vocab->size(), 259 + 100);  // specials, bytes and a real set of merges
  EXPECT_EQ(build_engram_token_map(*vocab).compressed_vocab_size, config->engram_compressed_vocab_size);
}

TEST(TinyModel, DeterministicInTheSeed) {
  testing::TempDir a, b, c;
  ASSERT_TRUE(write_tiny_checkpoint(a.path(), 1).ok());
  ASSERT_TRUE(write_tiny_checkpoint(b.path(), 1).ok());
  ASSERT_TRUE(write_tiny_checkpoint(c.path(), 2).ok());
  int shards = 0;
  for (const auto& f : std::filesystem::directory_iterator(a.path())) {
    const auto name = f.path().filename();
    EXPECT_EQ(slurp(a.path() / name), slurp(b.path() / name)) << name;
    if (name.extension() == ".safetensors") {
      ++shards;
      EXPECT_NE(slurp(a.path() / name), slurp(c.path() / name)) << name;
    }
  }
  EXPECT_GT(shards, 1);
  EXPECT_EQ(slurp(a.path() / "tokenizer.json"), slurp(c.path() / "tokenizer.json"));
}

TEST(TinyModel, QuantisedWeightsHaveRealisticScales) {
  testing::TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 3).ok());
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  // fp8 weight N(0,1)/sqrt(128): block amax ~0.3 -> scale 2^ceil(log2(0.3/448)) = 2^-10 (byte 117).
  const auto* scale = ckpt->find("layers.0.attn.wq_a.scale");
  ASSERT_NE(scale, nullptr);
  for (uint8_t b : scale->data()) EXPECT_TRUE(b >= 115 && b <= 119) << int{b};
  // Dequantised fp8 weights keep the drawn spread (std 1/sqrt(fan_in)).
  const auto* w = ckpt->find("layers.0.attn.wq_a.weight");
  double sum2 = 0;
  const auto codes = w->data();
  const int64_t cols = w->entry->shape[1];
  for (size_t i = 0; i < codes.size(); ++i) {
    const float v = e4m3_to_f32(codes[i]) * e8m0_to_f32(scale->data()[(i / cols / 32) * (cols / 32) + (i % cols) / 32]);
    sum2 += double{v} * v;
  }
  EXPECT_NEAR(std::sqrt(sum2 / codes.size()), 1.0 / std::sqrt(128.0), 0.01);
  // fp4 experts: per-row scales over 32 columns, bytes near 2^ceil(log2(amax/6)).
  const auto* es = ckpt->find("layers.3.ffn.experts.5.w1.scale");
  ASSERT_NE(es, nullptr);
  EXPECT_EQ(es->entry->shape, (std::vector<int64_t>{64, 4}));
  for (uint8_t b : es->data()) EXPECT_TRUE(b >= 120 && b <= 124) << int{b};
}

}  // namespace
// Benchmark checkpoints: the big fp8/fp4 weights left unwritten (zeros, scales 2^-9), everything
// else byte for byte what a full write holds.
// The benchmark model's tokenizer: every id of the model's vocabulary decodes to text, and text
// encodes as with the tokenizer it pads.
TEST(TinyTokenizer, PaddedToAVocabularyEveryIdDecodesToText) {
  const Json tiny = make_tiny_tokenizer_json(kTinyTokenizerMerges);
  auto plain = Tokenizer::from_json(tiny, "tiny");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  const int64_t size = plain->vocab().size() + 1000;
  auto padded = Tokenizer::from_json(pad_tokenizer_vocab(tiny, size), "padded");
  ASSERT_TRUE(padded.ok()) << padded.status().to_string();
  EXPECT_EQ(padded->vocab().size(), size);
  const std::string text = "The tokens t1 and t300 stay text: <｜User｜>hello t99999.";
  EXPECT_EQ(padded->encode(text), plain->encode(text));
  for (int32_t id = 0; id < size; ++id) {
    const std::string t = padded->decode(std::span<const int32_t>(&id, 1));
    if (id >= plain->vocab().size()) {
      EXPECT_EQ(t, " t" + std::to_string(id));
    } else {
      EXPECT_FALSE(t.empty()) << id;
    }
  }
  EXPECT_EQ(pad_tokenizer_vocab(tiny, 10), tiny);  // already larger: unchanged
}

TEST(TinyModel, UnwrittenBigWeights) {
  testing::TempDir full, sparse;
  auto vocab = TokenizerVocab::from_json(make_tiny_tokenizer_json(kTinyTokenizerMerges), "tiny");
  ASSERT_TRUE(vocab.ok());
  auto config = tiny_model_config(*vocab);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const ModelConfig& c = *config;
  const int64_t above = 4096;
  ASSERT_TRUE(make_random_weights(c, 3).write(full.path() / "m.safetensors").ok());
  ASSERT_TRUE(make_random_weights(c, 3, above).write(sparse.path() / "m.safetensors").ok());
  auto a = Checkpoint::open(full.path());
  auto b = Checkpoint::open(sparse.path());
  ASSERT_TRUE(a.ok() && b.ok());
  int unwritten = 0, kept = 0;
  for (const TensorSpec& t : build_weight_manifest(c)) {
    if (t.is_scale) continue;
    const auto* wa = a->find(t.name);
    const auto* wb = b->find(t.name);
    ASSERT_TRUE(wa && wb) << t.name;
    const std::string scale = t.name.substr(0, t.name.rfind('.')) + ".scale";
    const bool quantised = a->find(scale) != nullptr;
    if (quantised && t.bytes() > above) {
      ++unwritten;
      for (uint8_t v : wb->data()) ASSERT_EQ(v, 0) << t.name;
      for (uint8_t v : b->find(scale)->data()) ASSERT_EQ(v, 127 - 9) << scale;
    } else {
      ++kept;
      ASSERT_TRUE(std::equal(wa->data().begin(), wa->data().end(), wb->data().begin(), wb->data().end())) << t.name;
    }
  }
  EXPECT_GT(unwritten, 0);
  EXPECT_GT(kept, 0);
}

}  // namespace dsinfer

namespace dsinfer {
namespace {

namespace fs = std::filesystem;

// Every file of a folder (names and contents), sorted by name.
std::map<std::string, std::string> folder_contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& de : fs::directory_iterator(dir)) out[de.path().filename().string()] = slurp(de.path());
  return out;
}

std::vector<std::string> folder_names(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& de : fs::directory_iterator(dir)) out.push_back(de.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

Status load_tiny(const fs::path& dir) {
  CpuBackend backend(2);
  LocalCommunicator comm;
  auto m = Model::load(dir, backend, comm);
  return m.ok() ? Status{} : m.status();
}

// Defect 7 of the reliability probe: a load must not write into the model folder (it once cached
// the Engram token map there, and the cache was then taken for a shard by the next load).
TEST(TinyModel, LoadingWithoutAnIndexLeavesTheFolderAsItWas) {
  testing::TempDir dir;
  ASSERT_TRUE(write_tiny_checkpoint(dir.path(), 5).ok());
  ASSERT_TRUE(fs::remove(dir.path() / "model.safetensors.index.json"));
  const auto before = folder_contents(dir.path());
  for (int i = 0; i < 2; ++i) {
    const Status s = load_tiny(dir.path());
    ASSERT_TRUE(s.ok()) << "load " << i << ": " << s.to_string();
    EXPECT_EQ(folder_contents(dir.path()), before) << "load " << i;
  }
  // A folder that still holds the cache of older builds loads too: it is not a shard.
  SafetensorsWriter cache;
  cache.add_values<int32_t>("token_map", DType::kI32, {2}, std::vector<int32_t>{0, 1});
  ASSERT_TRUE(cache.write(dir.path() / "engram_token_map.safetensors").ok());
  const Status s = load_tiny(dir.path());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// Defect 8: make-tiny over an existing checkpoint replaces it whole, and removes what interrupted
// runs left beside it.
TEST(TinyModel, RewritingReplacesTheWholeCheckpoint) {
  testing::TempDir parent;
  const fs::path out = parent.path() / "tiny", fresh = parent.path() / "fresh";
  ASSERT_TRUE(write_tiny_checkpoint(out, 0).ok());
  // What a killed run leaves: a temporary folder with part of another checkpoint, and (in the
  // fallback without an atomic swap) the old folder set aside. No process has these pids.
  fs::create_directories(out.string() + ".tmp-999999999");
  std::ofstream(out.string() + ".tmp-999999999/model-00001-of-00002.safetensors") << "partial";
  fs::create_directories(out.string() + ".old-999999998");
  fs::create_directories(parent.path() / "tiny.tmp-notapid");  // not ours: left alone
  ASSERT_TRUE(write_tiny_checkpoint(out, 7).ok());
  ASSERT_TRUE(write_tiny_checkpoint(fresh, 7).ok());
  EXPECT_EQ(folder_contents(out), folder_contents(fresh));
  EXPECT_EQ(folder_names(parent.path()), (std::vector<std::string>{"fresh", "tiny", "tiny.tmp-notapid"}));
  EXPECT_TRUE(load_tiny(out).ok());
  // A trailing '/' names the same folder.
  ASSERT_TRUE(write_tiny_checkpoint(out.string() + "/", 0).ok());
  EXPECT_NE(folder_contents(out), folder_contents(fresh));
  EXPECT_EQ(folder_names(parent.path()), (std::vector<std::string>{"fresh", "tiny", "tiny.tmp-notapid"}));
}

TEST(TinyModel, AnInterruptedRewriteLeavesTheOldCheckpoint) {
  testing::TempDir parent;
  const fs::path out = parent.path() / "tiny", other = parent.path() / "other";
  ASSERT_TRUE(write_tiny_checkpoint(out, 0).ok());
  ASSERT_TRUE(write_tiny_checkpoint(other, 7).ok());
  const auto old = folder_contents(out);
  // Killed while writing: a seed-7 shard in the temporary folder, never renamed into place.
  const fs::path killed = out.string() + ".tmp-999999999";
  fs::create_directories(killed);
  fs::copy_file(other / "model-00001-of-00002.safetensors", killed / "model-00001-of-00002.safetensors");
  EXPECT_EQ(folder_contents(out), old);
  EXPECT_TRUE(load_tiny(out).ok());
  // Failing part way (after one shard of the new checkpoint): the old one is untouched, the
  // temporary folder gone.
  const Status s = write_folder_atomic(out, [&](const fs::path& tmp) -> Status {
    fs::copy_file(other / "model-00001-of-00002.safetensors", tmp / "model-00001-of-00002.safetensors");
    return error(ErrorKind::kIo, "interrupted");
  });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(folder_contents(out), old);
  EXPECT_TRUE(load_tiny(out).ok());
  EXPECT_EQ(folder_names(parent.path()), (std::vector<std::string>{"other", "tiny"}));  // the stale one too
}

TEST(TinyModel, DoesNotReplaceAFolderThatIsNoCheckpoint) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "notes.txt") << "mine";
  const Status s = write_tiny_checkpoint(dir.path(), 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("refusing to replace"), std::string::npos) << s.message();
  EXPECT_EQ(folder_names(dir.path()), std::vector<std::string>{"notes.txt"});
}

}  // namespace
}  // namespace dsinfer
