// Single-thread throughput of the block-dot kernels at batch 1: bytes of weights read per second,
// per instruction set, on weights that stay in L2 (the compute ceiling) and on weights far larger
// than the caches (what a decode step does).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backends/cpu/block_dot.h"
#include "core/float_formats.h"

namespace {

using dsinfer::cpu::Isa;

constexpr int64_t kK = 2048;  // V4.1-Flash dim: the K of most decode GEMMs

void BM_BlockPartials(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  const bool fp4 = state.range(1) != 0;
  const int64_t kWeightBytes = state.range(2) << 10;
  if (isa > dsinfer::cpu::best_isa()) return state.SkipWithError("instruction set not available");
  std::mt19937 rng(1);
  std::vector<uint8_t> w(kWeightBytes);
  for (auto& b : w)  // normal codes, as quantised trained weights nearly always are
    b = static_cast<uint8_t>((rng() & 0x80) | (8 + rng() % 0x70));
  std::vector<double> codes(kK);
  for (auto& c : codes) c = dsinfer::e4m3_to_f32(static_cast<uint8_t>(rng() % 0x7E | (rng() & 0x80)));
  dsinfer::cpu::BlockActivations x;
  dsinfer::cpu::prepare_block_activations(isa, fp4, codes.data(), 1, kK, x);
  const int64_t row_bytes = fp4 ? kK / 2 : kK, rows = kWeightBytes / row_bytes;
  std::vector<float> partials(kK / 32 * dsinfer::cpu::kRowGroup);
  for (auto _ : state)
    for (int64_t r = 0; r < rows; ++r) {
      dsinfer::cpu::block_partials(x, w.data() + r * row_bytes, partials.data() + r % dsinfer::cpu::kRowGroup,
                                   dsinfer::cpu::kRowGroup);
      benchmark::DoNotOptimize(partials.data());
    }
  state.SetBytesProcessed(state.iterations() * kWeightBytes);
}
BENCHMARK(BM_BlockPartials)
    ->ArgNames({"isa", "fp4", "KiB"})
    ->ArgsProduct({{static_cast<int>(Isa::kAvx2), static_cast<int>(Isa::kAvx512)}, {0, 1}, {512, 256 << 10}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
