// The instruction sets of the CPU backend's block dot products (block_dot.h), picked at run time.
#pragma once

namespace dsinfer::cpu {

enum class Isa { kScalar, kAvx2, kAvx512 };

/// The best instruction set of this CPU up to `cap` (CpuBackendOptions::isa_cap, for comparisons
/// and for machines where the wider one is slower).
Isa best_isa(Isa cap = Isa::kAvx512);
/// A cap by name, as the CLI reads DSINFER_CPU_ISA: `scalar`, `avx2`; anything else `avx512`.
Isa isa_by_name(const char* name);

}  // namespace dsinfer::cpu
