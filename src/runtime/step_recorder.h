// StepRecorder: a Backend in front of another that records the calls of a step (one sequence's
// decode) and, when a later step makes the same calls, runs the recorded step again instead of
// issuing them one by one. "The same" means the same ops on the same memory with the same shapes
// and scalars, in the same order; only the bytes the step uploads may differ. On a backend that
// keeps captured steps (CUDA graphs: ops/step_graphs.h) that is one relaunch with the
// step's new uploads; elsewhere the recorded calls are issued again, which is how the CPU tests
// check the mechanism. The model keeps a decode step's calls the same from one step to the next
// when asked (ForwardContext::fixed_shapes: positions, slots and lengths are uploaded data, never
// addresses or sizes), so a replayed step costs the host its own bookkeeping and the comparisons,
// not a launch per op. The ModelRunner (runtime/model_runner.h) owns the recorder.
//
// A step's allocations come from an arena of the recorder's (bump, the same addresses whenever
// the allocation sizes repeat), so the step's temporaries are at the addresses its recording
// names. A step that needed more than the arena grows it at the next begin_step, which drops
// every recording (their calls name the old arena).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/backend.h"

namespace dsinfer {

class StepRecorder final : public Backend {
 public:
  explicit StepRecorder(Backend& inner) : inner_(inner) {}
  ~StepRecorder() override;
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  Backend& inner() const { return inner_; }
  /// Off (the default): begin_step() says false and every call goes to the inner backend.
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }

  /// Starts a step (false: not enabled). Until end_step no copy to the host is allowed, and the
  /// calls may be held back until end_step decides how the step runs.
  bool begin_step();
  /// Ends the step: ok: its calls are issued to the inner backend (or its recording relaunched);
  /// not ok: the step failed and whatever was held back is dropped.
  void end_step(bool ok);

  struct Stats {
    int64_t steps = 0;       // begun
    int64_t relaunched = 0;  // run as the inner backend's kept step
    int64_t reissued = 0;    // run by issuing a recording's calls (no kept step to relaunch)
    int64_t recorded = 0;    // whose calls differed from every recording: issued and recorded anew
    int64_t diverged = 0;    // of those, steps that matched a recording for some calls first
  };
  const Stats& stats() const { return stats_; }
  static constexpr size_t kMaxRecordings = 4;  // a decode step alternates between two (ratio-2 groups)

  Device device() const override { return inner_.device(); }
  DSINFER_OVERRIDE_MEMORY  // a step's allocations from the arena, its uploads staged

  DSINFER_OVERRIDE_OPS  // each compared with the recordings, recorded, or passed through (call below)
  int64_t max_tokens_without_reads() const override { return inner_.max_tokens_without_reads(); }
  int64_t max_invariant_rows() const override { return inner_.max_invariant_rows(); }

  struct Entry;  // one recorded call (step_recorder.cc)

 private:
  // kPass: outside a step, or not enabled. kProbe: comparing the step's calls with the recordings
  // (nothing issued yet). kRecord: issuing the calls (captured where the inner backend can) and
  // recording them.
  enum class Mode { kPass, kProbe, kRecord };
  struct Recording {
    std::vector<std::shared_ptr<const Entry>> calls;
    uint64_t id = 0;        // the inner backend's kept step, 0: none
    int64_t last_used = 0;  // the step that last ran it
  };

  template <typename A>
  void call(void (Backend::*op)(const A&), const A& a);
  // The next call of a probed step: true when some recording still matches every call so far
  // (`matches` tests a recording's entry), else the step turns into a recording.
  template <typename Match>
  bool probe(Match matches);
  void add(std::shared_ptr<const Entry> e);  // records an entry the step issued
  // Starts recording with the first `prefix` calls of recording `from` (they equal this step's
  // first calls) issued to the inner backend.
  void start_recording(const Recording* from, size_t prefix);
  void issue(const Recording& r, size_t count);  // r's first `count` calls, with this step's uploads
  void run_recording(Recording& r);              // the step equals r: relaunch it or issue its calls
  void keep_recording(uint64_t id);
  void drop_recordings();
  bool in_arena(const void* p) const;

  Backend& inner_;
  bool enabled_ = false;
  Mode mode_ = Mode::kPass;
  Stats stats_;
  std::vector<Recording> recordings_;
  std::vector<size_t> live_;      // kProbe: recordings that matched every call so far
  size_t calls_ = 0;              // the step's calls so far
  Recording current_;             // kRecord: the calls issued this step
  StepGraphs* graphs_ = nullptr;  // the inner backend's, once it has them (kept: recordings name its steps)
  bool capturing_ = false;        // kRecord: the inner backend captures the step
  // This step's uploads, back to back: recordings name their bytes by offset here, so a replayed
  // or re-issued step copies the bytes of its own uploads.
  std::vector<uint8_t> staged_;
  uint8_t* arena_ = nullptr;
  size_t arena_bytes_ = 0, used_ = 0, needed_ = 0;
  int64_t arena_live_ = 0;  // arena allocations of this step not yet freed
  bool stable_ = true;      // every allocation of this step came from the arena
};

}  // namespace dsinfer
