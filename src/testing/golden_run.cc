// The golden experiment loop and the replay / dump plumbing around Model::forward.
#include "testing/golden_run.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace dsinfer {
namespace {

template <typename T>
Result<std::vector<T>> read_all(const SafetensorsFile& f, const std::string& name, std::vector<int64_t>* shape) {
  const SafetensorsEntry* e = f.find(name);
  if (!e) return error(ErrorKind::kNotFound, fmt::format("{}: no tensor '{}'", f.label(), name));
  if (static_cast<size_t>(dtype_bits(e->dtype) / 8) != sizeof(T))
    return error(ErrorKind::kCorruptFile, fmt::format("{}: '{}' has dtype {}", f.label(), name, dtype_name(e->dtype)));
  std::vector<T> v(e->numel());
  std::memcpy(v.data(), f.data(*e).data(), e->data_bytes);
  if (shape) *shape = e->shape;
  return v;
}

// The golden run's selections for row `row` of step `step` (spec fixtures' golden_debug layout).
Result<std::map<int, LayerReplay>> replay_for(const SafetensorsFile& f, const ModelConfig& c, int step, int64_t row,
                                              int64_t s, bool decode) {
  std::map<int, LayerReplay> out;
  const std::string pre = fmt::format("step{:02d}.layer", step);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerReplay& lr = out[l];
    std::vector<int64_t> shape;
    DSINFER_ASSIGN_OR_RETURN(auto experts, read_all<int32_t>(f, fmt::format("{}{}.gate_indices", pre, l), &shape));
    const int64_t k = shape[1];
    lr.experts.assign(experts.begin() + row * s * k, experts.begin() + (row + 1) * s * k);
    if (c.is_index_source(l)) {
      DSINFER_ASSIGN_OR_RETURN(auto idx, read_all<int32_t>(f, fmt::format("{}{}.topk_idxs", pre, l), &shape));
      const int64_t kk = shape[2], offset = decode ? c.window_size : s;
      lr.topk.assign(idx.begin() + row * s * kk, idx.begin() + (row + 1) * s * kk);
      for (int32_t& v : lr.topk)
        if (v >= 0) v -= static_cast<int32_t>(offset);  // back to compressed positions
    }
    if (c.is_candidate_source(l) && f.find(fmt::format("{}{}.candidates", pre, l))) {
      DSINFER_ASSIGN_OR_RETURN(auto cand, read_all<uint8_t>(f, fmt::format("{}{}.candidates", pre, l), &shape));
      const int64_t width = shape[2];
      lr.candidates.assign(cand.begin() + row * s * width, cand.begin() + (row + 1) * s * width);
    }
  }
  return out;
}

// Stacks the rows' debug tensors of one step into the golden layout [batch, ...] (the expert ids
// are [batch * s, k] there).
void append_debug(SafetensorsWriter& w, int step, const std::vector<std::map<std::string, DebugTensor>>& rows) {
  for (const auto& [name, first] : rows.front()) {
    std::vector<int64_t> shape = first.shape;
    std::vector<uint8_t> bytes;
    for (const auto& r : rows) bytes.insert(bytes.end(), r.at(name).bytes.begin(), r.at(name).bytes.end());
    if (name.find("gate_indices") != std::string::npos)
      shape[0] *= static_cast<int64_t>(rows.size());
    else
      shape.insert(shape.begin(), static_cast<int64_t>(rows.size()));
    w.add(fmt::format("step{:02d}.{}", step, name), first.dtype, shape, std::move(bytes));
  }
}

}  // namespace

Result<GoldenRunResult> run_golden_experiment(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                              const GoldenRunOptions& o) {
  const ModelConfig& c = model.config();
  if (prompts.empty()) return error(ErrorKind::kInvalidArgument, "no prompts");
  GoldenRunResult res;
  res.batch = static_cast<int64_t>(prompts.size());
  res.forwards = o.steps + 1;
  res.vocab = c.vocab_size;
  res.logits.assign(res.batch * res.forwards * res.vocab, 0.0f);
  res.tokens.assign(res.batch * res.forwards, 0);
  int64_t min_len = prompts.front().size();
  for (const auto& p : prompts) min_len = std::min<int64_t>(min_len, p.size());
  if (min_len == 0) return error(ErrorKind::kInvalidArgument, "an empty prompt");

  std::vector<int32_t> forced;
  if (o.force_tokens) {
    std::vector<int64_t> shape;
    DSINFER_ASSIGN_OR_RETURN(forced, read_all<int32_t>(*o.force_tokens, "tokens", &shape));
    if (shape.size() != 2 || shape[0] != res.batch || shape[1] < o.steps)
      return error(ErrorKind::kInvalidArgument, fmt::format("{}: 'tokens' does not cover {} rows x {} steps",
                                                            o.force_tokens->label(), res.batch, o.steps));
  }
  const int64_t forced_width = o.force_tokens ? static_cast<int64_t>(forced.size()) / res.batch : 0;

  if (o.prefill_chunk < 0) return error(ErrorKind::kInvalidArgument, "the prefill chunk must be positive");
  if (o.prefill_chunk > 0 && (o.replay || o.dump_debug))
    return error(ErrorKind::kInvalidArgument,
                 "a chunked prefill cannot replay or dump the one-shot prefill's selections and tensors");

  std::vector<SequenceState> states;
  for (int64_t i = 0; i < res.batch; ++i) states.push_back(model.new_sequence());
  std::vector<float> logits(res.batch * res.vocab);
  // All but the last piece of a chunked prefill; the last is step 0's forward below.
  const int64_t piece = o.prefill_chunk > 0 ? o.prefill_chunk : min_len;
  int64_t prefilled = 0;
  for (; min_len - prefilled > piece; prefilled += piece) {
    std::vector<ForwardChunk> chunks(res.batch);
    for (int64_t i = 0; i < res.batch; ++i) {
      chunks[i] = {&states[i], prefilled, {}, false, min_len};
      chunks[i].tokens.assign(prompts[i].begin() + prefilled, prompts[i].begin() + prefilled + piece);
    }
    DSINFER_RETURN_IF_ERROR(model.forward(chunks, logits));
  }
  for (int step = 0; step < res.forwards; ++step) {
    const bool decode = step > 0;
    const int64_t s = decode ? 1 : min_len - prefilled, start = decode ? min_len + step - 1 : prefilled;
    ChunkTaps taps(res.batch);
    std::vector<ForwardChunk> chunks(res.batch);
    for (int64_t i = 0; i < res.batch; ++i) {
      ForwardChunk& ch = chunks[i];
      ch.state = &states[i];
      ch.start_pos = start;
      ch.decode = decode;
      ch.prompt_len = min_len;
      if (!decode) {
        ch.tokens.assign(prompts[i].begin() + prefilled, prompts[i].begin() + min_len);
      } else if (start < static_cast<int64_t>(prompts[i].size())) {
        ch.tokens = {prompts[i][start]};  // still inside this row's prompt
      } else {
        ch.tokens = {o.force_tokens ? forced[i * forced_width + step - 1] : res.tokens[i * res.forwards + step - 1]};
      }
      if (o.replay) {
        DSINFER_ASSIGN_OR_RETURN(taps[i].replay, replay_for(*o.replay, c, step, i, s, decode));
      }
      taps[i].dump = o.dump_debug;
    }
    DSINFER_RETURN_IF_ERROR(model.forward(chunks, logits, &taps));
    for (int64_t i = 0; i < res.batch; ++i) {
      const float* row = &logits[i * res.vocab];
      std::copy(row, row + res.vocab, &res.logits[(i * res.forwards + step) * res.vocab]);
      res.tokens[i * res.forwards + step] = static_cast<int32_t>(std::max_element(row, row + res.vocab) - row);
    }
    if (o.dump_debug) {
      std::vector<std::map<std::string, DebugTensor>> dumps;
      for (int64_t i = 0; i < res.batch; ++i) dumps.push_back(std::move(taps[i].tensors));
      append_debug(res.debug, step, dumps);
    }
  }
  return res;
}

}  // namespace dsinfer
