// The golden experiment loop and the replay / dump plumbing around Model::forward.
#include "testing/golden_run.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/float_formats.h"

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

  const bool drafts = o.dspark || o.main_hidden_from;
  if (drafts && !model.has_drafter()) return error(ErrorKind::kUnsupported, "the model has no DSpark drafter");
  if (drafts && o.prefill_chunk > 0)
    return error(ErrorKind::kInvalidArgument, "the drafter's golden run takes the prefill in one piece");
  const int64_t width = model.main_hidden_width(), B = c.dspark_block_size, Dn = o.steps;
  std::vector<float> given_prefill, given_decode;  // the golden's main hidden states (bf16 values)
  std::vector<int32_t> given_out;
  if (o.main_hidden_from) {
    std::vector<int64_t> shape;
    DSINFER_ASSIGN_OR_RETURN(given_prefill, read_all<float>(*o.main_hidden_from, "main_hidden_prefill", &shape));
    if (shape != std::vector<int64_t>{res.batch, min_len, width})
      return error(ErrorKind::kInvalidArgument, "main_hidden_prefill does not match the prompts");
    DSINFER_ASSIGN_OR_RETURN(given_decode, read_all<float>(*o.main_hidden_from, "main_hidden_decode", &shape));
    if (shape.size() != 3 || shape[0] != res.batch || shape[1] < Dn || shape[2] != width)
      return error(ErrorKind::kInvalidArgument, "main_hidden_decode does not cover the steps");
    DSINFER_ASSIGN_OR_RETURN(given_out, read_all<int32_t>(*o.main_hidden_from, "spec_out", &shape));
    if (shape.size() != 3 || shape[1] < Dn || shape[2] != B + 1)
      return error(ErrorKind::kInvalidArgument, "spec_out does not cover the steps");
  }
  if (drafts) {
    res.block = B, res.hidden_width = width;
    res.spec_out.assign(res.batch * Dn * (B + 1), 0);
    res.spec_base.assign(res.batch * Dn * B * res.vocab, 0.0f);
    res.spec_confidence.assign(res.batch * Dn * B, 0.0f);
    res.main_hidden_decode.assign(res.batch * Dn * width, 0);
  }
  Backend& be = model.backend();
  DeviceArray<float> device_logits = DeviceArray<float>::uninitialized(be, res.batch * res.vocab);
  DeviceArray<uint16_t> hidden(be);
  DeviceArray<int32_t> draft_tokens(be);
  DeviceArray<float> draft_base(be), draft_confidence(be);
  if (drafts) {
    draft_tokens = DeviceArray<int32_t>::uninitialized(be, res.batch * (B + 1));
    draft_base = DeviceArray<float>::uninitialized(be, res.batch * B * res.vocab);
    draft_confidence = DeviceArray<float>::uninitialized(be, res.batch * B);
  }

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
    if (!drafts) {
      DSINFER_RETURN_IF_ERROR(model.forward(chunks, logits, &taps));
    } else {
      if (hidden.size() < static_cast<size_t>(res.batch * s * width))
        hidden = DeviceArray<uint16_t>::uninitialized(be, res.batch * s * width);
      ForwardContext ctx;
      ctx.taps = &taps;
      ctx.main_hidden = hidden.view(DType::kBF16, {res.batch * s, width});
      DSINFER_RETURN_IF_ERROR(model.forward(chunks, device_logits.view(DType::kF32, {res.batch, res.vocab}), ctx));
      be.copy_to_host(logits.data(), device_logits.data(), logits.size() * sizeof(float));
    }
    for (int64_t i = 0; i < res.batch; ++i) {
      const float* row = &logits[i * res.vocab];
      std::copy(row, row + res.vocab, &res.logits[(i * res.forwards + step) * res.vocab]);
      res.tokens[i * res.forwards + step] = static_cast<int32_t>(std::max_element(row, row + res.vocab) - row);
    }
    if (drafts) {
      // The drafter after this forward: the prefill seeds the rings; a decode forward at p drafts
      // from the token forward step + 1 takes.
      if (o.main_hidden_from) {
        const std::vector<float>& given = decode ? given_decode : given_prefill;
        const int64_t per_row = decode ? static_cast<int64_t>(given_decode.size()) / res.batch : s * width;
        std::vector<uint16_t> rows(res.batch * s * width);
        for (int64_t i = 0; i < res.batch; ++i)
          for (int64_t j = 0; j < s * width; ++j)
            rows[i * s * width + j] = f32_to_bf16(given[i * per_row + (decode ? (step - 1) * width : 0) + j]);
        be.copy_to_device(hidden.data(), rows.data(), rows.size() * sizeof(uint16_t));
      }
      std::vector<DraftChunk> draft(res.batch);
      for (int64_t i = 0; i < res.batch; ++i) {
        draft[i] = {&states[i], start, s, i * s, decode, 0};
        if (!decode) continue;
        const int64_t d = step - 1;
        draft[i].anchor = o.main_hidden_from ? given_out[(i * (given_out.size() / (res.batch * (B + 1))) + d) * (B + 1)]
                          : o.force_tokens   ? forced[i * forced_width + step]
                                             : res.tokens[i * res.forwards + step];
      }
      ChunkTaps draft_taps(res.batch);
      for (int64_t i = 0; i < res.batch; ++i) draft_taps[i].dump = o.dump_debug;
      for (int stage = 0; o.replay && decode && stage < c.n_draft_layers(); ++stage) {  // the stages' experts
        std::vector<int64_t> shape;
        DSINFER_ASSIGN_OR_RETURN(
            auto experts,
            read_all<int32_t>(*o.replay, fmt::format("step{:02d}.spec.stage{}.gate_indices", step, stage), &shape));
        const int64_t k = shape[1];  // [batch * B, k]: row i's block rows in turn
        for (int64_t i = 0; i < res.batch; ++i)
          draft_taps[i].replay[c.n_layers + stage].experts.assign(experts.begin() + i * B * k,
                                                                  experts.begin() + (i + 1) * B * k);
      }
      ForwardContext ctx;
      ctx.taps = &draft_taps;
      const TensorView main_hidden = hidden.view(DType::kBF16, {res.batch * s, width});
      DSINFER_RETURN_IF_ERROR(model.draft(
          draft, main_hidden,
          {draft_tokens.view(DType::kI32, {res.batch, B + 1}), draft_base.view(DType::kF32, {res.batch, B, res.vocab}),
           draft_confidence.view(DType::kF32, {res.batch, B})},
          ctx));
      if (decode) {
        const int64_t d = step - 1;
        const std::vector<int32_t> out = draft_tokens.download();
        const std::vector<float> base = draft_base.download(), confidence = draft_confidence.download();
        const std::vector<uint16_t> mh = hidden.download(0, res.batch * width);
        for (int64_t i = 0; i < res.batch; ++i) {
          std::copy_n(&out[i * (B + 1)], B + 1, &res.spec_out[(i * Dn + d) * (B + 1)]);
          std::copy_n(&base[i * B * res.vocab], B * res.vocab, &res.spec_base[(i * Dn + d) * B * res.vocab]);
          std::copy_n(&confidence[i * B], B, &res.spec_confidence[(i * Dn + d) * B]);
          std::copy_n(&mh[i * width], width, &res.main_hidden_decode[(i * Dn + d) * width]);
        }
      }
      if (o.dump_debug)
        for (int64_t i = 0; i < res.batch; ++i) taps[i].tensors.merge(draft_taps[i].tensors);
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
