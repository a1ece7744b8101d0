// CPU GEMMs for every Linear format (spec §3.6), reading the quantised weights directly.
// Block-scaled formats: for each output and each 32-wide K block, the partial sum of code products
// is exact (block_dot.h) and rounded once to fp32, then acc = acc + (partial * s_x) * s_w in fp32,
// then one bf16 rounding.
#include <cmath>
#include <vector>

#include "backends/cpu/block_dot.h"
#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/float_formats.h"

namespace dsinfer {
namespace {

constexpr int kBlock = 32;

// One row of x as act_quant codes (as doubles, unscaled) and per-block scales.
void quantize_row(const uint16_t* x, int64_t k, double* codes, float* scales) {
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t k0 = b * kBlock, len = std::min<int64_t>(kBlock, k - k0);
    float amax = 0;
    for (int64_t j = 0; j < len; ++j) amax = std::fmax(amax, std::fabs(bf16_to_f32(x[k0 + j])));
    const float s = act_quant_scale(amax);
    scales[b] = s;
    for (int64_t j = 0; j < len; ++j)
      codes[k0 + j] = round_to_e4m3(std::fmin(std::fmax(bf16_to_f32(x[k0 + j]) / s, -kE4M3Max), kE4M3Max));
  }
}

void linear_block_scaled(ThreadPool& pool, const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  const int64_t n = a.x.size(0), k = w.in, o = w.out, blocks = (k + kBlock - 1) / kBlock;
  const bool fp4 = w.format == LinearFormat::kFp4;
  // Scratch kept per calling thread: a decode step runs hundreds of GEMMs, and fresh allocations
  // of this size would each cost page faults.
  // (Workers reach them through the references: a thread_local named in the lambda would be the
  // worker's own.)
  thread_local std::vector<double> codes_buf;
  thread_local std::vector<float> xs_buf;
  thread_local cpu::BlockActivations x_buf;
  std::vector<double>& codes = codes_buf;
  std::vector<float>& xs = xs_buf;
  cpu::BlockActivations& x = x_buf;
  codes.resize(n * k);
  xs.resize(n * blocks);
  for (int64_t i = 0; i < n; ++i) quantize_row(cpu::bf16_row(a.x, i), k, &codes[i * k], &xs[i * blocks]);
  cpu::prepare_block_activations(cpu::best_isa(), fp4, codes.data(), n, k, x);
  const uint8_t* wcodes = w.weight.as<const uint8_t>();
  const uint8_t* scales = w.scale.as<const uint8_t>();
  const int64_t w_stride = w.weight.stride[0], s_stride = w.scale.stride[0];
  // Output rows in groups of kRowGroup: the reference's K-ordered fp32 scale accumulations of a
  // group run side by side as independent chains.
  constexpr int64_t kRows = cpu::kRowGroup;
  pool.parallel_for((o + kRows - 1) / kRows, 1, [&](int64_t gb, int64_t ge) {
    thread_local std::vector<float> partials, ws, acc;
    partials.resize(n * blocks * kRows);
    ws.resize(blocks * kRows);
    acc.resize(n * kRows);
    for (int64_t g = gb; g < ge; ++g) {
      const int64_t r0 = g * kRows;
      const int rows = static_cast<int>(std::min(kRows, o - r0));
      for (int l = 0; l < rows; ++l) cpu::block_partials(x, wcodes + (r0 + l) * w_stride, partials.data() + l, kRows);
      // fp4 experts have one scale per row and block, fp8 weights one per 32 x 32 tile (a group of
      // kRows rows never straddles two tiles).
      static_assert(kBlock % kRows == 0);
      cpu::block_scales(x.isa, scales + (fp4 ? r0 : r0 / kBlock) * s_stride, fp4 ? s_stride : 0, rows, blocks,
                        ws.data());
      cpu::accumulate_block_scales(x.isa, partials.data(), xs.data(), ws.data(), n, blocks, rows, acc.data());
      for (int64_t i = 0; i < n; ++i)
        for (int l = 0; l < rows; ++l) cpu::bf16_row_mut(a.out, i)[r0 + l] = f32_to_bf16(acc[i * kRows + l]);
    }
  });
}

// Dense paths: bf16 (or exactly dequantised fp8) weights, fp32 accumulation (computed in double,
// whose products are exact and whose sum is the order-free ideal of the reference's fp32 sum, then
// rounded once), bf16 or f32 output.
void linear_dense(ThreadPool& pool, const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  const int64_t n = a.x.size(0), k = w.in;
  const bool x_f32 = a.x.dtype == DType::kF32, out_f32 = a.out.dtype == DType::kF32;
  std::vector<double> xd(n * k);  // x once as doubles for the vector dot
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      xd[i * k + j] = x_f32 ? a.x.as<const float>()[i * a.x.stride[0] + j] : bf16_to_f32(cpu::bf16_row(a.x, i)[j]);
  pool.parallel_for(w.out, 16, [&](int64_t ob, int64_t oe) {
    std::vector<float> wrow(k);
    for (int64_t r = ob; r < oe; ++r) {
      if (w.format == LinearFormat::kFp8AsBf16) {
        const uint8_t* wr = w.weight.as<const uint8_t>() + r * w.weight.stride[0];
        const uint8_t* sr = w.scale.as<const uint8_t>() + (r / kBlock) * w.scale.stride[0];
        cpu::e4m3_row_to_f32(cpu::best_isa(), wr, sr, k, wrow.data());
      } else {
        const uint16_t* wr = w.weight.as<const uint16_t>() + r * w.weight.stride[0];
        for (int64_t j = 0; j < k; ++j) wrow[j] = bf16_to_f32(wr[j]);
      }
      for (int64_t i = 0; i < n; ++i) {
        const double acc = cpu::dot_f32_f64(cpu::best_isa(), wrow.data(), &xd[i * k], k);
        if (out_f32)
          a.out.as<float>()[i * a.out.stride[0] + r] = static_cast<float>(acc);
        else
          cpu::bf16_row_mut(a.out, i)[r] = f32_to_bf16(static_cast<float>(acc));
      }
    }
  });
}

}  // namespace

void CpuBackend::linear(const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  DSINFER_CHECK(a.x.size(1) == w.in && a.out.size(1) == w.out && a.out.size(0) == a.x.size(0),
                "linear: x [{}, {}] W [{}, {}] out [{}, {}]", a.x.size(0), a.x.size(1), w.out, w.in, a.out.size(0),
                a.out.size(1));
  if (a.x.size(0) == 0) return;
  switch (w.format) {
    case LinearFormat::kFp8:
    case LinearFormat::kFp4:
      return linear_block_scaled(*pool_, a);
    case LinearFormat::kBf16:
    case LinearFormat::kBf16AsF32:
    case LinearFormat::kFp8AsBf16:
      return linear_dense(*pool_, a);
  }
}

}  // namespace dsinfer
