// The routed experts of a few tokens on the device's choice: each MoE layer's expert weights in a
// device table, which the routed GEMVs index with the router's ids in device memory, so the
// choice is never read back and a decode step can be captured (CudaBackend::routed_experts in
// routed_experts.cc; the decision in linear_dispatch.h).
#pragma once

#include <cstdint>
#include <deque>
#include <span>

#include "backends/cuda/kernels/linear/params.h"
#include "ops/args.h"

namespace dsinfer::cuda {

/// One MoE layer's experts as the routed GEMVs read them: w1 and w3 of expert e at 2e and 2e + 1,
/// then w2 of expert e at 2E + e.
struct ExpertTable {
  // The calls it serves: the layer's experts (by address, first and last weights) and top-k.
  const ExpertWeights* experts = nullptr;
  size_t count = 0;
  const void *first_w1 = nullptr, *last_w2 = nullptr;
  int64_t k = 0;
  DType x_dtype = DType::kBF16;
  /// The experts run on the device's choice (experts_on_device); false: their tokens are grouped
  /// by expert, which reads the choice back.
  bool on_device = false;
  RoutedWeight* device = nullptr;  // the table in device memory (on_device only)
  /// The same weights as the wgmma kernel's TMA tensor maps (kTensorMapBytes each, the same
  /// indexing), for prefill chunks; null where the TMA cannot read them (their steps then take the
  /// tiled kernel).
  void* maps = nullptr;
};

/// The tables of the MoE layers seen, each made at the layer's first call of a few tokens (the
/// decision whether it runs on the device is made then, once).
class ExpertTables {
 public:
  ExpertTables() = default;
  ~ExpertTables();
  ExpertTables(const ExpertTables&) = delete;
  ExpertTables& operator=(const ExpertTables&) = delete;

  /// The table of a's experts, made if new (a decode step looks up every layer's: no walk over
  /// all the experts once it is made).
  const ExpertTable& find(const RoutedExpertsArgs& a);
  /// Some layer's few-token calls read the router's choice back (its experts cannot run on the
  /// device's choice): then no decode step of this model can be captured.
  bool reads_choice() const { return reads_choice_; }

 private:
  std::deque<ExpertTable> tables_;  // a table found stays where it is
  bool reads_choice_ = false;
};

}  // namespace dsinfer::cuda
