// KeepingBackend: a stand-in for a backend that keeps captured steps (CudaBackend's graphs) in
// front of the CPU backend, for the tests of the step recorder and the model runner.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/backend.h"
#include "ops/step_graphs.h"

namespace dsinfer::testing {

// A call's args as a kept call holds them: plain views and scalars, but a grouped linear's list
// is the caller's (often on its stack), so it is copied.
template <typename A>
struct Owned {
  A args;
  explicit Owned(const A& a) : args(a) {}
  const A& get() const { return args; }
};
template <>
struct Owned<GroupedLinearArgs> {
  std::vector<LinearArgs> ops;
  explicit Owned(const GroupedLinearArgs& a) : ops(a.ops.begin(), a.ops.end()) {}
  GroupedLinearArgs get() const { return {ops}; }
};

// A backend that keeps captured steps, as CudaBackend's graphs: between begin and end the calls
// are kept (uploads with a copy of their bytes), end runs them; a kept step runs again with the
// bytes relaunch gives. `moved` makes every kept step unusable (memory it names moved).
class KeepingBackend final : public Backend, private StepGraphs {
 public:
  /// max_tokens: the largest step worth capturing (StepGraphs::max_step_tokens).
  explicit KeepingBackend(CpuBackend& cpu, int64_t max_tokens = INT64_MAX) : cpu_(cpu), max_tokens_(max_tokens) {}
  bool moved = false;
  int relaunches = 0;

  Device device() const override { return Device::kCpu; }
  void* allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  void deallocate(void* p) override {  // a captured call may still read it: freed once they ran
    if (capturing_)
      freed_.push_back(p);
    else
      cpu_.deallocate(p);
  }
  void zero(void* p, size_t bytes) override {
    add([=, this] { cpu_.zero(p, bytes); });
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (!capturing_) return cpu_.copy_to_device(dst, src, bytes);
    auto bytes_kept = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                             static_cast<const uint8_t*>(src) + bytes);
    uploads_.push_back(bytes_kept);
    add([=, this] { cpu_.copy_to_device(dst, bytes_kept->data(), bytes_kept->size()); });
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    add([=, this] { cpu_.copy_on_device(dst, src, bytes); });
  }
  StepGraphs* step_graphs() override { return this; }
  size_t kept() const { return kept_.size(); }

#define DSINFER_KEEP_OP(name, Args)                                \
  void name(const Args& a) override {                              \
    add([kept = Owned<Args>(a), this] { cpu_.name(kept.get()); }); \
  }
  DSINFER_OPS(DSINFER_KEEP_OP)
#undef DSINFER_KEEP_OP

 private:
  bool begin_capture() override {
    return capturing_ = true;
  }
  int64_t max_step_tokens() const override {
    return max_tokens_;
  }
  uint64_t end_capture(bool run) override {
    capturing_ = false;
    Kept k{std::move(calls_), std::move(uploads_)};
    calls_.clear(), uploads_.clear();
    if (run)
      for (const auto& c : k.calls) c();
    for (void* p : freed_) cpu_.deallocate(p);
    freed_.clear();
    if (!run) return 0;
    kept_[next_] = std::move(k);
    return next_++;
  }
  bool relaunch(uint64_t id, std::span<const std::span<const uint8_t>> uploads) override {
    auto it = kept_.find(id);
    if (moved || it == kept_.end() || uploads.size() != it->second.uploads.size()) return false;
    for (size_t i = 0; i < uploads.size(); ++i) {
      if (uploads[i].size() != it->second.uploads[i]->size()) return false;
      std::copy(uploads[i].begin(), uploads[i].end(), it->second.uploads[i]->begin());
    }
    for (const auto& c : it->second.calls) c();
    ++relaunches;
    return true;
  }
  void release(uint64_t id) override {
    kept_.erase(id);
  }

  void add(std::function<void()> c) {
    if (capturing_)
      calls_.push_back(std::move(c));
    else
      c();
  }
  struct Kept {
    std::vector<std::function<void()>> calls;
    std::vector<std::shared_ptr<std::vector<uint8_t>>> uploads;
  };
  CpuBackend& cpu_;
  int64_t max_tokens_;
  bool capturing_ = false;
  std::vector<std::function<void()>> calls_;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> uploads_;
  std::vector<void*> freed_;
  std::map<uint64_t, Kept> kept_;
  uint64_t next_ = 1;
};

}  // namespace dsinfer::testing
