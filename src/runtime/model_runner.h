// ModelRunner: runs the model's forward passes for the engine: it owns the step recorder and
// decides, step by step, whether a step goes through it (a decode step of few enough tokens, which
// reads nothing back before its logits) and then asks the model for fixed shapes, so the step's
// calls repeat and its recording runs again (runtime/step_recorder.h). The model describes the
// math only; recording and replay are this room's.
#pragma once

#include <span>

#include "core/status.h"
#include "model/model.h"
#include "ops/device_array.h"
#include "runtime/step_recorder.h"

namespace dsinfer {

class ModelRunner {
 public:
  /// replay_steps: record decode steps and run them again as recorded while their calls repeat
  /// (the same sequences in the same order); on anyway where the model's backend keeps captured
  /// steps (Backend::step_graphs: CUDA graphs), since that is what makes replay pay.
  explicit ModelRunner(Model& model, bool replay_steps = false);

  Model& model() const { return model_; }
  /// Runs the chunks and copies the fp32 logits of each chunk's last token to `logits` [chunks, V].
  Status forward(std::span<ForwardChunk> chunks, std::span<float> logits);

  /// Turns the recording of decode steps on or off between calls.
  void set_replay_steps(bool on) { recorder_.set_enabled(on); }
  /// How the decode steps ran (recorded, relaunched, re-issued): for tests and benchmarks.
  const StepRecorder::Stats& step_stats() const { return recorder_.stats(); }

 private:
  Model& model_;
  StepRecorder recorder_;      // in front of the model's backend
  DeviceArray<float> logits_;  // [chunks, V]: one address, so that a recorded step writes them there again
};

}  // namespace dsinfer
