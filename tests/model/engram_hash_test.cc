// Engram hashing: numpy-compatible multipliers and the per-step hashes, exact against the goldens.
#include "model/engram_hash.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io/engram_token_map.h"
#include "io/safetensors.h"
#include "model/numpy_random.h"
#include "test_util.h"

namespace dsinfer {
namespace {

template <typename T>
std::vector<T> read_tensor(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsEntry* e = f.find(name);
  EXPECT_NE(e, nullptr) << name;
  if (!e) return {};
  std::vector<T> v(e->data_bytes / sizeof(T));
  std::memcpy(v.data(), f.data(*e).data(), e->data_bytes);
  return v;
}

TEST(NumpyRandom, FlashMultipliersMatchTheSpec) {
  const int64_t bound = (INT64_MAX / 99092) / 2;
  EXPECT_EQ(bound, 46539438283891);
  auto m1 = numpy_default_rng_integers(10007 * 1, bound, 4);
  auto m14 = numpy_default_rng_integers(10007 * 14, bound, 4);
  for (auto* m : {&m1, &m14})
    for (int64_t& v : *m) v = 2 * v + 1;
  EXPECT_EQ(m1, (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(m14, (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

class EngramGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(EngramGolden, MultipliersLayoutAndEveryStepsHashes) {
  const auto dir = testing::data_dir() / GetParam();
  auto config = load_model_config(dir / "checkpoint");
  auto vocab = TokenizerVocab::load(dir / "checkpoint/tokenizer.json");
  auto golden = SafetensorsFile::open(dir / "golden_debug.safetensors");
  auto tokens_file = SafetensorsFile::open(dir / "golden.safetensors");
  ASSERT_TRUE(config.ok() && vocab.ok() && golden.ok() && tokens_file.ok());
  const EngramHasher hasher(*config, build_engram_token_map(*vocab).map);

  std::vector<int64_t> want_mult = read_tensor<int64_t>(*golden, "engram.multipliers");
  std::vector<int64_t> got_mult;
  for (int l = 0; l < hasher.n_layers(); ++l)
    got_mult.insert(got_mult.end(), hasher.multipliers(l).begin(), hasher.multipliers(l).end());
  EXPECT_EQ(got_mult, want_mult);
  EXPECT_EQ(read_tensor<int64_t>(*golden, "engram.pad_id")[0], hasher.pad_id());
  std::vector<int64_t> want_offsets = read_tensor<int64_t>(*golden, "engram.offsets"), got_offsets;
  for (int l = 0; l < hasher.n_layers(); ++l)
    got_offsets.insert(got_offsets.end(), hasher.layout().offsets[l].begin(), hasher.layout().offsets[l].end());
  EXPECT_EQ(got_offsets, want_offsets);

  // Replay the run: prefill of the prompt, then one token per step (the previous greedy token).
  const SafetensorsEntry* prompt_e = tokens_file->find("prompt_ids");
  const int64_t batch = prompt_e->shape[0], prompt_len = prompt_e->shape[1];
  const std::vector<int32_t> prompts = read_tensor<int32_t>(*tokens_file, "prompt_ids");
  const std::vector<int32_t> generated = read_tensor<int32_t>(*tokens_file, "tokens");
  const int64_t steps = tokens_file->find("tokens")->shape[1];
  const int64_t per_tok = hasher.n_layers() * hasher.n_columns();
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> history;
    for (int64_t step = 0; step < steps; ++step) {
      std::vector<int32_t> chunk;
      int64_t start = 0;
      if (step == 0)
        chunk.assign(prompts.begin() + b * prompt_len, prompts.begin() + (b + 1) * prompt_len);
      else
        chunk = {generated[b * steps + step - 1]}, start = prompt_len + step - 1;
      std::vector<int64_t> got(chunk.size() * per_tok);
      hasher.hash_chunk(history, start, chunk, {}, got);
      const std::string name = fmt::format("step{:02d}.engram_hashes", step);
      const std::vector<int64_t> all = read_tensor<int64_t>(*golden, name);
      const std::vector<int64_t> want(all.begin() + b * chunk.size() * per_tok,
                                      all.begin() + (b + 1) * chunk.size() * per_tok);
      ASSERT_EQ(got, want) << name << " batch row " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngramGolden, ::testing::Values("v41-tiny-a", "v41-tiny-b"));

TEST(EngramHash, DeadPositionsBlockTheirNgrams) {
  auto config = load_model_config(testing::data_dir() / "v41-tiny-a/checkpoint");
  auto vocab = TokenizerVocab::load(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json");
  const EngramHasher h(*config, build_engram_token_map(*vocab).map);
  const std::vector<int32_t> toks = {10, 11, 12, 13, 14};
  const int64_t per_tok = h.n_layers() * h.n_columns();
  std::vector<int64_t> hist_a, hist_b, a(5 * per_tok), b(5 * per_tok);
  h.hash_chunk(hist_a, 0, toks, {}, a);
  const std::vector<uint8_t> live = {1, 1, 0, 1, 1};
  h.hash_chunk(hist_b, 0, toks, live, b);
  EXPECT_EQ(hist_b[2], kEngramDead);
  // Position 4's 2-gram (tokens 3, 4) is unaffected; its 3-gram reaches the dead position.
  for (int l = 0; l < h.n_layers(); ++l) {
    const int64_t base = 4 * per_tok + l * h.n_columns();
    EXPECT_EQ(a[base], b[base]);
    EXPECT_NE(a[base + config->engram_n_heads], b[base + config->engram_n_heads]);
  }
}

}  // namespace
}  // namespace dsinfer
