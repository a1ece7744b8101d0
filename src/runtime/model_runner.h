// ModelRunner: runs the model's forward passes for the engine: it owns the step recorder and
// decides, step by step, whether a step goes through it (a decode step of few enough tokens, which
// reads nothing back before its logits) and then asks the model for fixed shapes, so the step's
// calls repeat and its recording runs again (runtime/step_recorder.h). The model describes the
// math only; recording and replay are this room's.
//
// On rank 0 of a job of several ranks it also leads the others: each forward's plan (the chunks,
// their sequences, the states that went since) goes to them before it runs, and follow_steps runs
// it there on their shards, their collectives meeting rank 0's.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "ops/communicator.h"
#include "ops/device_array.h"
#include "runtime/step_plan.h"
#include "runtime/step_recorder.h"

namespace dsinfer {

/// What the host reads back of a forward's logit row.
enum class RowReadback : uint8_t {
  kWhole,  // the row's logits (sampling, penalties, logprobs)
  kPick,   // its greedy pick alone (Backend::greedy_pick: the first maximum, -1 when not all finite)
  kDraw,   // the token drawn from it on the device (Backend::draw_tokens, the draw in `draws`)
  kNone,   // nothing (a prompt's piece before its end: nothing is sampled from it)
};

/// Where a forward's logits go on the host: `logits` [rows, V] gets the kWhole rows, `picks`
/// [rows] the kPick and kDraw rows' tokens; with `rows` empty every row is whole. `draws`: a
/// draw for each kDraw row, naming it.
struct LogitsReadback {
  std::span<float> logits;
  std::span<const RowReadback> rows = {};
  std::span<int32_t> picks = {};
  std::span<const RowDraw> draws = {};
};

class ModelRunner {
 public:
  /// replay_steps: record decode steps and run them again as recorded while their calls repeat
  /// (the same sequences in the same order); on anyway where the model's backend keeps captured
  /// steps (Backend::step_graphs: CUDA graphs), since that is what makes replay pay.
  /// followers: on rank 0 of several ranks, the channel to the others (they stop when the runner goes).
  explicit ModelRunner(Model& model, bool replay_steps = false, StepChannel* followers = nullptr);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  Model& model() const { return model_; }
  bool leads_followers() const { return followers_ != nullptr; }
  /// Runs the chunks and copies the fp32 logits of each chunk's last token (a verify chunk's every
  /// token) to `logits` [Model::logit_rows(chunks), V]. `sequences`: each chunk's sequence id,
  /// which the followers key their states by (required with followers, else ignored).
  /// `main_hidden`: where the DSpark taps go (ForwardContext::main_hidden); such a step and one
  /// with a verify chunk is not recorded, and refused with followers.
  Status forward(std::span<ForwardChunk> chunks, std::span<float> logits, std::span<const uint64_t> sequences = {},
                 const TensorView& main_hidden = {}) {
    return forward(chunks, LogitsReadback{logits}, sequences, main_hidden);
  }
  /// The same, reading back of each row what `out` asks for: a step of greedy requests reads a
  /// token a row instead of the vocabulary's logits.
  Status forward(std::span<ForwardChunk> chunks, const LogitsReadback& out, std::span<const uint64_t> sequences = {},
                 const TensorView& main_hidden = {});
  /// A sequence's state went (finished, preempted): the followers drop theirs before the next forward.
  void release(uint64_t sequence);

  /// Turns the recording of decode steps on or off between calls.
  void set_replay_steps(bool on) { recorder_.set_enabled(on); }
  /// How the decode steps ran (recorded, relaunched, re-issued): for tests and benchmarks.
  const StepRecorder::Stats& step_stats() const { return recorder_.stats(); }

 private:
  /// Copies what `out` asks for of the step's n logit rows to the host.
  void read_back(const LogitsReadback& out, int64_t n, int64_t vocab);

  Model& model_;
  StepRecorder recorder_;       // in front of the model's backend
  DeviceArray<float> logits_;   // [chunks, V]: one address, so that a recorded step writes them there again
  DeviceArray<int32_t> picks_;  // [chunks]: the device's greedy picks
  StepChannel* followers_;
  std::vector<uint64_t> released_;  // since the last plan sent
};

/// The loop of a rank other than 0 in a job whose scheduler runs on rank 0: receives each step's
/// plan and runs its forward on this rank's shard until rank 0 stops (then ok). A forward that fails
/// as rank 0's does (a request's error) does not end it; what does is returned: a channel or a
/// collective that failed (kUnavailable), a malformed message (kInternal). `after_step`, when
/// given, sees each step's plan and the logits its forward computed (tests).
using StepObserver = std::function<void(const StepPlan& plan, std::span<const float> logits)>;
Status follow_steps(ModelRunner& runner, StepChannel& leader, const StepObserver& after_step = {});

}  // namespace dsinfer
