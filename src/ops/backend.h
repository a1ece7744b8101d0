// Backend: one method per op the model uses, and the memory those ops run on. CpuBackend is the
// readable reference; CudaBackend implements the same interface and is checked against it op by op.
// The model keeps its activations and caches in the backend's memory (DeviceArray), so the same
// forward pass runs on either; host code sees that memory only through the copies below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ops/args.h"

namespace dsinfer {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Memory of this backend's device (host memory for the CPU). Ops are queued in order; a copy
  // into host memory returns once the data is there, i.e. after every op queued before it.
  virtual void* allocate(size_t bytes) = 0;  // uninitialised; aborts when the device is full
  virtual void deallocate(void* p) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;

  // A forward step that reads nothing back until its end (one sequence's decode) may be recorded
  // on the device and run as one unit (on CUDA a graph): between begin_step_capture() (false: not
  // on this backend, or not now) and end_step_capture(run) the ops are recorded, not run, and no
  // copy to the host is allowed. end_step_capture(true) runs them and keeps them under the id it
  // returns (0: not kept); false drops them. StepRecorder (ops/step_recorder.h) decides when a
  // step is recorded and when a kept one runs again.
  virtual bool begin_step_capture() { return false; }
  /// Whether begin_step_capture can capture steps and keep them to run again (then recording the
  /// decode steps pays: model.h LoadOptions::replay_steps).
  virtual bool keeps_steps() const { return false; }
  /// The most tokens a step recorded by a StepRecorder may hold: up to it, no op reads device
  /// memory back on its own (the routed experts run on the device's choice); the CPU has no bound.
  virtual int64_t max_recorded_tokens() const { return INT64_MAX; }
  virtual uint64_t end_step_capture(bool /*run*/) { return 0; }
  /// Runs kept step `id` again, its uploads (in recorded order, to the same places, of the same
  /// sizes) now copying `uploads`. false: nothing ran (not kept, or memory it used has moved).
  virtual bool relaunch_step(uint64_t /*id*/, std::span<const std::span<const uint8_t>> /*uploads*/) { return false; }
  virtual void release_step(uint64_t /*id*/) {}

  virtual void embed(const EmbedArgs& a) = 0;
  virtual void rms_norm(const RmsNormArgs& a) = 0;
  virtual void linear(const LinearArgs& a) = 0;
  virtual void grouped_linear(const GroupedLinearArgs& a) {
    for (const LinearArgs& op : a.ops) linear(op);
  }
  virtual void rope(const RopeArgs& a) = 0;
  virtual void fake_quant(const FakeQuantArgs& a) = 0;
  virtual void hc_mixes(const HcMixesArgs& a) = 0;
  virtual void hc_pre(const HcPreArgs& a) = 0;
  virtual void hc_post(const HcPostArgs& a) = 0;
  virtual void sparse_attn(const SparseAttnArgs& a) = 0;
  virtual void indexer_scores(const IndexerScoresArgs& a) = 0;
  virtual void candidate_blocks(const CandidateBlocksArgs& a) = 0;
  virtual void topk(const TopkArgs& a) = 0;
  virtual void paged_rows(const PagedRowsArgs& a) = 0;
  virtual void swiglu(const SwigluArgs& a) = 0;
  virtual void router(const RouterArgs& a) = 0;
  virtual void compress_pool(const CompressPoolArgs& a) = 0;
  virtual void engram_gate(const EngramGateArgs& a) = 0;
  virtual void gather_rows(const GatherRowsArgs& a) = 0;
  virtual void scatter_rows(const ScatterRowsArgs& a) = 0;
  virtual void scatter_add(const ScatterAddArgs& a) = 0;
  /// By default the choice is read back to the host, which groups the tokens by expert: one
  /// GEMM per chosen expert over its tokens (backend_ops.cc).
  virtual void routed_experts(const RoutedExpertsArgs& a);
};

}  // namespace dsinfer
