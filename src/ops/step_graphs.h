// StepGraphs: a backend's capture of a whole step's ops as one unit that it keeps and runs again
// (CUDA graphs). Optional: Backend::step_graphs() gives it where a backend has one. A StepRecorder
// (runtime/step_recorder.h) decides when a step is captured and when a kept one runs again.
#pragma once

#include <cstdint>
#include <span>

namespace dsinfer {

class StepGraphs {
 public:
  virtual ~StepGraphs() = default;
  /// Starts a capture (false: not now): the ops issued to the backend until end_capture are
  /// recorded, not run, and no copy to the host is allowed.
  virtual bool begin_capture() = 0;
  /// Ends the capture. run: the captured ops run now and are kept under the id returned (0: not
  /// kept); else they are dropped.
  virtual uint64_t end_capture(bool run) = 0;
  /// Runs kept step `id` again, its uploads (in recorded order, to the same places, of the same
  /// sizes) now copying `uploads`. false: nothing ran (not kept, or memory it used has moved).
  virtual bool relaunch(uint64_t id, std::span<const std::span<const uint8_t>> uploads) = 0;
  virtual void release(uint64_t id) = 0;
  /// Steps of more tokens are not worth capturing (they run op by op).
  virtual int64_t max_step_tokens() const = 0;
};

}  // namespace dsinfer
