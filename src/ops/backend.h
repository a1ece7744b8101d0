// Backend: one method per op the model uses (the list in ops/args.h), and the memory those ops run
// on. CpuBackend is the readable reference; CudaBackend implements the same interface and is checked
// against it op by op. The model keeps its activations and caches in the backend's memory
// (DeviceArray), so the same forward pass runs on either; host code sees that memory only through
// the copies below.
#pragma once

#include <cstddef>
#include <cstdint>

#include <algorithm>

#include "core/threading.h"
#include "ops/args.h"
#include "ops/step_graphs.h"

namespace dsinfer {

#define DSINFER_DECLARE_OP(name, Args) virtual void name(const Args& a) = 0;
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

  DSINFER_OPS(DSINFER_DECLARE_OP)

  /// The backend's capture of whole steps (ops/step_graphs.h), or nullptr where it has none.
  virtual StepGraphs* step_graphs() { return nullptr; }
  /// The most tokens a step may hold for which no op reads device memory back on its own (above
  /// it, the routed experts read the router's choice to group the tokens by expert); such a step
  /// can be recorded and run again as a unit. The CPU has no bound.
  virtual int64_t max_tokens_without_reads() const { return INT64_MAX; }
  /// The most rows a call of the row-wise ops (linear, grouped_linear, hc_mixes, router,
  /// routed_experts) may hold with each row's results the ones it gets in a call of its own; past
  /// it the kernels depend on the call's row count (the model then calls them on runs of rows:
  /// model/row_runs.h). The CPU's exact sums have no bound.
  virtual int64_t max_invariant_rows() const { return INT64_MAX; }
  /// Host threads the model may use for its own work between ops (the Engram lookups of a
  /// prompt's chunk), or nullptr: the calling thread alone.
  virtual ThreadPool* host_threads() { return nullptr; }
};
#undef DSINFER_DECLARE_OP

/// Side work (side_queue) as a scope: what `queue` issues is the side work; the ops issued after
/// join(), or after the scope on any way out of it, run once it is done.
class SideWork {
 public:
  template <typename Queue>
  SideWork(Backend& be, Queue&& queue) : be_(be) {
    be_.side_queue({SideQueue::kFork});
    queue();
    be_.side_queue({SideQueue::kResume});
  }
  ~SideWork() { join(); }
  SideWork(const SideWork&) = delete;
  SideWork& operator=(const SideWork&) = delete;
  void join() {
    if (!joined_) be_.side_queue({SideQueue::kJoin});
    joined_ = true;
  }

 private:
  Backend& be_;
  bool joined_ = false;
};

/// The threads of a device backend's host_threads(): up to 8 of the host's, idle while the device
/// runs the ops.
inline int device_host_thread_count() {
  return std::min(8, hardware_threads());
}

/// In a backend's class: the declarations of every op of the list, and of the memory calls.
#define DSINFER_OVERRIDE_OP(name, Args) void name(const Args& a) override;
#define DSINFER_OVERRIDE_OPS DSINFER_OPS(DSINFER_OVERRIDE_OP)
#define DSINFER_OVERRIDE_MEMORY                                                \
  void* allocate(size_t bytes) override;                                       \
  void deallocate(void* p) override;                                           \
  void zero(void* p, size_t bytes) override;                                   \
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override; \
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;   \
  void copy_on_device(void* dst, const void* src, size_t bytes) override;

}  // namespace dsinfer
