// Composite ops: what a backend may run as kernels of its own, written once in terms of the
// elementary ops for the backends (and the cases) that do not.
#pragma once

#include "ops/backend.h"

namespace dsinfer {

/// The routed experts with the choice read back to the host, which groups the tokens by expert:
/// one GEMM per chosen expert over its tokens, in ascending expert id.
void routed_experts_by_expert(Backend& be, const RoutedExpertsArgs& a);

}  // namespace dsinfer
