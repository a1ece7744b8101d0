// CudaStepGraphs: CudaBackend's StepGraphs (ops/step_graphs.h). A step's ops are captured as a
// CUDA graph on a stream of its own, run, and kept to run again (relaunch) with the step's uploads
// rewritten in place: its kernels then run back to back, without the gaps of launches one by
// one. A StepRecorder in front decides when (runtime/step_recorder.h).
//
// The memory a kept graph names must still be there when it runs again. Its temporaries come from
// the recorder's arena (allocated through the backend between captures), the backend ops' own
// temporaries from grow-only scratch buffers, its uploads from a pinned buffer of the graphs'. A
// capture that allocates through the backend (a graph allocation, freed with the graph) or uploads
// past that buffer runs once and is not kept; the buffer grows at the next capture to what the
// last one needed. Growing it or a scratch buffer drops every kept graph (relaunch says false).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "ops/step_graphs.h"

namespace dsinfer {

class CudaStepGraphs final : public StepGraphs {
 public:
  /// `stream`: the backend's, which its ops go to; a capture points it at the capture stream and
  /// back. `max_tokens`: the largest step worth capturing. `may_capture`: false while a step's ops
  /// would read device memory back, which a captured step may not (begin_capture then says not now).
  CudaStepGraphs(cudaStream_t& stream, int64_t max_tokens, std::function<bool()> may_capture);
  ~CudaStepGraphs() override;
  CudaStepGraphs(const CudaStepGraphs&) = delete;
  CudaStepGraphs& operator=(const CudaStepGraphs&) = delete;

  bool begin_capture() override;
  uint64_t end_capture(bool run) override;
  bool relaunch(uint64_t id, std::span<const std::span<const uint8_t>> uploads) override;
  void release(uint64_t id) override;
  int64_t max_step_tokens() const override { return max_tokens_; }

  bool capturing() const { return active_; }
  /// A captured upload, copied from the graphs' pinned buffer (where relaunch writes the next
  /// step's bytes). false: the buffer is full; the caller copies it otherwise, and this capture is
  /// not kept.
  bool upload(void* dst, const void* host_src, size_t bytes);
  /// An allocation reached the backend during the capture: a graph allocation, at an address no
  /// later step gets again, so this capture is not kept.
  void graph_allocation(void* p);
  /// Whether the graphs see to freeing `p` instead of the caller: a free during a capture of
  /// memory from before it (a captured free may name only the graph's own allocations) is done
  /// once the capture ran; memory a capture that never ran allocated is nothing to free.
  bool takes_free(void* p);
  /// Scratch::at_least's retire: a buffer replaced by a larger one. Kept graphs name it (dropped);
  /// a running capture's earlier nodes read it (freed once the capture ran, which is not kept).
  void retire(void* old);

  /// Runs the graph launched last `times` more times (its uploads as they are) and returns the
  /// device seconds per run; 0 when none ran.
  double replay_last(int times);

  int64_t launches() const { return launches_; }              // steps run as graphs
  int64_t instantiations() const { return instantiations_; }  // graphs made
  int64_t uploads() const { return uploads_; }                // uploads rewritten by relaunches

 private:
  struct Slot {  // a captured upload: `bytes` to `dst`, copied from `staged`
    void* dst;
    uint8_t* staged;
    size_t bytes;
  };
  struct Graph {
    cudaGraphExec_t exec;
    uint64_t generation;  // generation_ when captured: the memory it names is still there while equal
    std::vector<Slot> slots;
  };

  cudaStream_t& stream_;
  int64_t max_tokens_;
  std::function<bool()> may_capture_;
  int64_t offered_ = 0;  // begin_capture calls that could capture
  bool active_ = false;
  cudaStream_t capture_ = nullptr, eager_ = nullptr;  // the capture's stream; the backend's meanwhile
  cudaEvent_t ready_ = nullptr;
  std::vector<std::pair<uint64_t, Graph>> graphs_;  // by id
  uint64_t next_id_ = 1, generation_ = 0;
  cudaGraphExec_t last_ = nullptr;  // the graph launched most recently
  std::vector<Slot> slots_;         // the running capture's uploads
  bool keepable_ = true;            // the running capture names only memory a later step finds again
  uint8_t* uploads_buffer_ = nullptr;
  size_t upload_bytes_ = 0, upload_used_ = 0, upload_needed_ = 0;
  std::vector<void*> retired_;               // scratch buffers replaced during the capture, freed after it ran
  std::vector<void*> captured_allocations_;  // the running capture's, not freed in it
  std::vector<void*> deferred_frees_;        // memory from before the running capture, freed in it
  std::vector<void*> unborn_;                // allocations of captures that never ran
  int64_t launches_ = 0, instantiations_ = 0, uploads_ = 0;
};

}  // namespace dsinfer
