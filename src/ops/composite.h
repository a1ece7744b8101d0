// Composite ops: what a backend may run as kernels of its own, written once in terms of the
// elementary ops for the backends (and the cases) that do not.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace dsinfer {

/// The routed experts' slots grouped by expert on the host, the choice read back (one read where
/// the weights follow the ids in memory): expert e (its index in the table) owns rows
/// [first[e], first[e + 1]) of `token` and `weight`, its tokens ascending; slot_row[t * k + j] is
/// the row of token t's choice j, -1 where that expert is another rank's.
struct ExpertGroups {
  std::vector<int64_t> first;
  std::vector<int32_t> token;
  std::vector<float> weight;
  std::vector<int32_t> slot_row;
  int64_t rows() const { return first.empty() ? 0 : first.back(); }
  int64_t rows_of(size_t e) const { return first[e + 1] - first[e]; }
};
ExpertGroups group_by_expert(Backend& be, const RoutedExpertsArgs& a);

/// The routed experts with the choice read back to the host, which groups the tokens by expert:
/// one GEMM per chosen expert over its tokens, in ascending expert id.
void routed_experts_by_expert(Backend& be, const RoutedExpertsArgs& a);

}  // namespace dsinfer
