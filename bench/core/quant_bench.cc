// Throughput of the scalar CPU quantisers on a V4.1-sized activation row block (the reference
// path; SIMD kernels will be measured against these numbers).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/float_formats.h"
#include "core/quant.h"

namespace {

std::vector<uint16_t> activations(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = dsinfer::f32_to_bf16(d(rng));
  return v;
}

// 8 tokens x dim 5120: one decode step of a batch of 8 entering an fp8 GEMM.
constexpr size_t kN = 8 * 5120;

void BM_ActQuantFake(benchmark::State& state) {
  const std::vector<uint16_t> src = activations(kN);
  std::vector<uint16_t> x = src;
  for (auto _ : state) {
    x = src;
    dsinfer::act_quant_inplace(x);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kN * 2));
}
BENCHMARK(BM_ActQuantFake);

void BM_ActQuantCodes(benchmark::State& state) {
  const std::vector<uint16_t> x = activations(kN);
  std::vector<uint8_t> codes(kN), scales(kN / 32);
  for (auto _ : state) {
    dsinfer::act_quant(x, codes, scales);
    benchmark::DoNotOptimize(codes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kN * 2));
}
BENCHMARK(BM_ActQuantCodes);

void BM_Fp4KvQuantFake(benchmark::State& state) {
  const std::vector<uint16_t> src = activations(kN);
  std::vector<uint16_t> x = src;
  for (auto _ : state) {
    x = src;
    dsinfer::fp4_act_quant_inplace(x, dsinfer::kFp4KvGroup, dsinfer::Fp4ScaleKind::kE4M3);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kN * 2));
}
BENCHMARK(BM_Fp4KvQuantFake);

}  // namespace
