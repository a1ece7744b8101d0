// The weight recipe (the same distributions as the golden fixtures' make_tiny.json), the
// release-format quantisation of each tensor, and the tiny checkpoint's files.
#include "testing/tiny_model.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "core/float_formats.h"
#include "core/hash.h"
#include "io/atomic_file.h"
#include "model/weight_manifest.h"
#include "testing/config_builder.h"
#include "testing/tiny_tokenizer.h"

namespace dsinfer {
namespace {

// splitmix64 + Box-Muller: portable, unlike std::normal_distribution whose output is library-defined.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  double uniform() { return splitmix64_uniform(s_); }  // [0, 1)
  float normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

 private:
  uint64_t s_;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// The distribution of a tensor (the fixtures' make_tiny.json recipe), decided once per tensor.
enum class Draw {
  kNormal,
  kScaledNormal,
  kNormOne,
  kUniformScale,
  kHalfNormal,
  kSmallNormal,
  kNearOne,
  kTwiceFanIn,
  kFanIn,
  kGate
};

Draw draw_kind(const std::string& n) {
  if (n == "embed.weight" || contains(n, "engram.embed") || contains(n, "markov_head.embed") ||
      contains(n, "attn_sink") || n.rfind("image_", 0) == 0)
    return Draw::kNormal;
  if (n == "head.weight") return Draw::kScaledNormal;
  if (ends_with(n, "norm.weight") || ends_with(n, "norm1.weight") || ends_with(n, "norm2.weight"))
    return Draw::kNormOne;
  if (contains(n, "hc_") && ends_with(n, "_scale")) return Draw::kUniformScale;
  if (contains(n, "hc_") && ends_with(n, "_base")) return Draw::kHalfNormal;
  if (ends_with(n, "gate.weight") && contains(n, "ffn.")) return Draw::kGate;
  if (ends_with(n, "gate.bias") || ends_with(n, "gate.bias_vl") || ends_with(n, ".bias")) return Draw::kSmallNormal;
  if (ends_with(n, "q_weight") || ends_with(n, "k_weight")) return Draw::kNearOne;
  if (contains(n, "compressor.wgate")) return Draw::kTwiceFanIn;
  return Draw::kFanIn;  // Linear weights, hc_*_fn
}

// Values of one tensor with logical shape [rows, cols] (1-D tensors: rows = 1).
std::vector<float> draw(const TensorSpec& t, int64_t rows, int64_t cols, const ModelConfig& c, uint64_t seed) {
  Rng rng(seed ^ fnv1a64(t.name));
  std::vector<float> v(static_cast<size_t>(rows * cols));
  const std::string& n = t.name;
  const float inv_sqrt_fan_in = 1.0f / std::sqrt(static_cast<float>(cols));
  const Draw kind = draw_kind(n);
  for (float& x : v) {
    switch (kind) {
      case Draw::kNormal:
        x = rng.normal();
        break;
      case Draw::kScaledNormal:
        x = rng.normal() / std::sqrt(static_cast<float>(c.dim));
        break;
      case Draw::kNormOne:
        x = 1.0f + 0.1f * rng.normal();
        break;
      case Draw::kUniformScale:
        x = static_cast<float>(0.5 + rng.uniform());
        break;
      case Draw::kHalfNormal:
        x = 0.5f * rng.normal();
        break;
      case Draw::kSmallNormal:
        x = (ends_with(n, ".bias") && !contains(n, "gate.") ? 0.02f : 0.2f) * rng.normal();
        break;
      case Draw::kNearOne:
        x = 1.0f + 0.25f * rng.normal();
        break;
      case Draw::kGate:
        x = 1.5f * rng.normal() * inv_sqrt_fan_in;
        break;
      case Draw::kTwiceFanIn:
        x = 2.0f * rng.normal() * inv_sqrt_fan_in;
        break;
      case Draw::kFanIn:
        x = rng.normal() * inv_sqrt_fan_in;
        break;
    }
  }
  if (kind == Draw::kHalfNormal)  // a comb near the identity keeps the stream stable
    for (int i = 0; i < c.hc_mult; ++i) v[2 * c.hc_mult + i * c.hc_mult + i] += 2.0f;
  return v;
}

std::vector<uint8_t> to_bytes(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> out(v.size() * (dtype == DType::kF32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t b = f32_to_bf16(v[i]);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

// fp8 with 32x32 block scales (weights) or per-row scales over 32 columns (Engram tables).
void quantize_fp8(const std::vector<float>& w, int64_t rows, int64_t cols, bool per_row, std::vector<uint8_t>* codes,
                  std::vector<uint8_t>* scales) {
  const int64_t bm = per_row ? 1 : 32, sr = (rows + bm - 1) / bm, sc = (cols + 31) / 32;
  codes->assign(static_cast<size_t>(rows * cols), 0);
  scales->assign(static_cast<size_t>(sr * sc), 0);
  for (int64_t br = 0; br < sr; ++br)
    for (int64_t bc = 0; bc < sc; ++bc) {
      float amax = 0;
      for (int64_t r = br * bm; r < std::min(rows, (br + 1) * bm); ++r)
        for (int64_t k = bc * 32; k < std::min(cols, (bc + 1) * 32); ++k)
          amax = std::fmax(amax, std::fabs(w[r * cols + k]));
      const uint8_t sb = e8m0_ceil_pow2(std::fmax(amax, 1e-30f) / kE4M3Max);
      (*scales)[br * sc + bc] = sb;
      const float s = e8m0_to_f32(sb);
      for (int64_t r = br * bm; r < std::min(rows, (br + 1) * bm); ++r)
        for (int64_t k = bc * 32; k < std::min(cols, (bc + 1) * 32); ++k)
          (*codes)[r * cols + k] = f32_to_e4m3(w[r * cols + k] / s);
    }
}

// fp4 e2m1 packed two per byte along K, one e8m0 scale per row per 32 columns.
void quantize_fp4(const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<uint8_t>* packed,
                  std::vector<uint8_t>* scales) {
  const int64_t sc = cols / 32;
  packed->assign(static_cast<size_t>(rows * cols / 2), 0);
  scales->assign(static_cast<size_t>(rows * sc), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < sc; ++g) {
      float amax = 0;
      for (int64_t k = g * 32; k < g * 32 + 32; ++k) amax = std::fmax(amax, std::fabs(w[r * cols + k]));
      const uint8_t sb = e8m0_ceil_pow2(std::fmax(amax, 1e-30f) / kE2M1Max);
      (*scales)[r * sc + g] = sb;
      const float s = e8m0_to_f32(sb);
      for (int64_t k = g * 32; k < g * 32 + 32; ++k) {
        const uint8_t code = f32_to_e2m1(w[r * cols + k] / s);
        (*packed)[(r * cols + k) / 2] |= static_cast<uint8_t>((k & 1) ? code << 4 : code);
      }
    }
}

}  // namespace

SafetensorsWriter make_random_weights(const ModelConfig& config, uint64_t seed, int64_t unwritten_above) {
  const std::vector<TensorSpec> manifest = build_weight_manifest(config);
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& t : manifest) by_name[t.name] = &t;
  // Every tensor draws from its own generator (seeded by its name), so tensors are made in parallel
  // and the bytes do not depend on the thread count; they are added in manifest order.
  struct Made {
    std::vector<uint8_t> values, scales;
    bool unwritten = false;
  };
  const auto scale_of = [&](const TensorSpec& t) { return by_name.at(t.name.substr(0, t.name.rfind('.')) + ".scale"); };
  std::vector<Made> made(manifest.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i; (i = next++) < manifest.size();) {
      const TensorSpec& t = manifest[i];
      if (t.is_scale) continue;  // made with its weight
      const DType dtype = t.dtypes.front();
      const bool fp4 = dtype == DType::kI8 || dtype == DType::kU8;
      const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
      const int64_t cols = (t.shape.size() == 2 ? t.shape[1] : t.shape[0]) * (fp4 ? 2 : 1);
      if (dtype != DType::kBF16 && dtype != DType::kF32 && unwritten_above >= 0 && t.bytes() > unwritten_above) {
        made[i].unwritten = true;
        made[i].scales.assign(scale_of(t)->bytes(), 127 - 9);
        continue;
      }
      const std::vector<float> values = draw(t, rows, cols, config, seed);
      if (dtype == DType::kBF16 || dtype == DType::kF32)
        made[i].values = to_bytes(values, dtype);
      else if (fp4)
        quantize_fp4(values, rows, cols, &made[i].values, &made[i].scales);
      else
        quantize_fp8(values, rows, cols, /*per_row=*/t.part == Part::kEngramTable, &made[i].values, &made[i].scales);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned k = 1; k < std::max(1u, std::thread::hardware_concurrency()); ++k) threads.emplace_back(work);
  work();
  for (std::thread& th : threads) th.join();

  SafetensorsWriter w;
  for (size_t i = 0; i < manifest.size(); ++i) {
    const TensorSpec& t = manifest[i];
    if (t.is_scale) continue;
    const DType dtype = t.dtypes.front();
    if (made[i].unwritten)
      w.add_unwritten(t.name, dtype, t.shape, t.bytes());
    else
      w.add(t.name, dtype, t.shape, std::move(made[i].values));
    if (dtype == DType::kBF16 || dtype == DType::kF32) continue;
    const TensorSpec* scale = scale_of(t);
    w.add(scale->name, DType::kF8E8M0, scale->shape, std::move(made[i].scales));
  }
  w.set_metadata("format", "pt");
  return w;
}

Status write_tiny_checkpoint(const std::filesystem::path& dir, uint64_t seed, int64_t max_seq_len, int ranks) {
  const Json tokenizer = make_tiny_tokenizer_json(kTinyTokenizerMerges);
  DSINFER_ASSIGN_OR_RETURN(TokenizerVocab vocab, TokenizerVocab::from_json(tokenizer, "tiny tokenizer"));
  DSINFER_ASSIGN_OR_RETURN(ModelConfig config, tiny_model_config(vocab, ranks));
  if (max_seq_len > 0) config.max_seq_len = max_seq_len;
  return write_tiny_checkpoint(dir, seed, config);
}

Status write_tiny_checkpoint(const std::filesystem::path& dir, uint64_t seed, const ModelConfig& config) {
  DSINFER_RETURN_IF_ERROR(config.validate());
  const Json tokenizer = make_tiny_tokenizer_json(kTinyTokenizerMerges);
  const Json tokenizer_config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", TinyTokenizerSpecials::kBos},
      {"eos_token", TinyTokenizerSpecials::kEos},     {"pad_token", TinyTokenizerSpecials::kEos},
      {"clean_up_tokenization_spaces", false},        {"model_max_length", config.max_seq_len}};
  // The checkpoint is written as a whole (a temporary sibling folder renamed into place): an
  // interrupted run leaves the old checkpoint or the new one, never shards of both.
  return write_folder_atomic(dir, [&](const std::filesystem::path& tmp) -> Status {
    DSINFER_RETURN_IF_ERROR(make_random_weights(config, seed).write_sharded(tmp, 2u << 20));
    DSINFER_RETURN_IF_ERROR(write_file_atomic(tmp / "tokenizer.json", tokenizer.dump(1) + "\n"));
    DSINFER_RETURN_IF_ERROR(write_file_atomic(tmp / "tokenizer_config.json", tokenizer_config.dump(1) + "\n"));
    return write_file_atomic(tmp / "config.json", config.to_json().dump(1) + "\n");
  });
}

}  // namespace dsinfer
