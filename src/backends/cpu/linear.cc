// CPU GEMMs for every Linear format (spec §3.6), reading the quantised weights directly.
// Block-scaled formats: for each output and each 32-wide K block, the partial sum of code products
// is exact (block_dot.h) and rounded once to fp32, then acc = acc + (partial * s_x) * s_w in fp32,
// then one bf16 rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/block_dot.h"
#include "backends/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/float_formats.h"

namespace dsinfer {
namespace {

constexpr int kBlock = 32;

// One block-scaled GEMM input, act_quant-ised once in the layout the kernels read.
struct QuantizedInput {
  const TensorView* x = nullptr;  // the bf16 rows it was made from
  bool fp4 = false;
  std::vector<double> codes;
  std::vector<float> xs;  // [n, blocks] act_quant scales
  cpu::BlockActivations acts;
};

void quantize_input(cpu::Isa isa, const TensorView& x, int64_t k, bool fp4, QuantizedInput& q) {
  const int64_t n = x.size(0), blocks = (k + kBlock - 1) / kBlock;
  q.x = &x, q.fp4 = fp4;
  q.codes.resize(n * k);
  q.xs.resize(n * blocks);
  for (int64_t i = 0; i < n; ++i) cpu::act_quant_row(isa, cpu::bf16_row(x, i), k, &q.codes[i * k], &q.xs[i * blocks]);
  cpu::prepare_block_activations(isa, fp4, q.codes.data(), n, k, q.acts);
}

// The same rows of bf16 values (the routed experts of one token see copies of the same row).
bool same_rows(const TensorView& a, const TensorView& b) {
  if (a.size(0) != b.size(0) || a.size(1) != b.size(1)) return false;
  for (int64_t i = 0; i < a.size(0); ++i)
    if (std::memcmp(cpu::bf16_row(a, i), cpu::bf16_row(b, i), a.size(1) * sizeof(uint16_t)) != 0) return false;
  return true;
}

struct BlockGemm {
  const LinearWeight* w;
  const QuantizedInput* x;
  TensorView out;
};

// Every GEMM's output rows in groups of kRowGroup, all GEMMs in one parallel region: the
// reference's K-ordered fp32 scale accumulations of a group run side by side as independent chains.
void run_block_gemms(ThreadPool& pool, std::span<const BlockGemm> gemms) {
  constexpr int64_t kRows = cpu::kRowGroup;
  std::vector<int64_t> first{0};  // gemm j owns row groups [first[j], first[j + 1])
  for (const BlockGemm& g : gemms) first.push_back(first.back() + (g.w->out + kRows - 1) / kRows);
  pool.parallel_for(first.back(), 1, [&](int64_t gb, int64_t ge) {
    thread_local std::vector<float> partials, ws, acc;
    for (int64_t g = gb; g < ge; ++g) {
      const size_t j = std::upper_bound(first.begin(), first.end(), g) - first.begin() - 1;
      const LinearWeight& w = *gemms[j].w;
      const cpu::BlockActivations& x = gemms[j].x->acts;
      const bool fp4 = w.format == LinearFormat::kFp4;
      const int64_t n = x.n, blocks = x.blocks, r0 = (g - first[j]) * kRows;
      const int rows = static_cast<int>(std::min(kRows, w.out - r0));
      partials.resize(n * blocks * kRows);
      ws.resize(blocks * kRows);
      acc.resize(n * kRows);
      const uint8_t* codes = w.weight.as<const uint8_t>() + r0 * w.weight.stride[0];
      for (int l = 0; l < rows; ++l) cpu::block_partials(x, codes + l * w.weight.stride[0], partials.data() + l, kRows);
      // fp4 experts have one scale per row and block, fp8 weights one per 32 x 32 tile (a group of
      // kRows rows never straddles two tiles).
      static_assert(kBlock % kRows == 0);
      const int64_t s_stride = w.scale.stride[0];
      cpu::block_scales(x.isa, w.scale.as<const uint8_t>() + (fp4 ? r0 : r0 / kBlock) * s_stride, fp4 ? s_stride : 0,
                        rows, blocks, ws.data());
      cpu::accumulate_block_scales(x.isa, partials.data(), gemms[j].x->xs.data(), ws.data(), n, blocks, rows,
                                   acc.data());
      const TensorView& out = gemms[j].out;
      if (out.dtype == DType::kF32) {  // a rank's partial sum, reduced over the ranks before it is rounded
        for (int64_t i = 0; i < n; ++i)
          for (int l = 0; l < rows; ++l) out.as<float>()[i * out.stride[0] + r0 + l] = acc[i * kRows + l];
      } else {
        for (int64_t i = 0; i < n; ++i)
          for (int l = 0; l < rows; ++l) cpu::bf16_row_mut(out, i)[r0 + l] = f32_to_bf16(acc[i * kRows + l]);
      }
    }
  });
}

// Dense paths: bf16 (or exactly dequantised fp8) weights, fp32 accumulation (computed in double,
// whose products are exact and whose sum is the order-free ideal of the reference's fp32 sum, then
// rounded once), bf16 or f32 output.
void linear_dense(ThreadPool& pool, cpu::Isa isa, const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  const int64_t n = a.x.size(0), k = w.in;
  const bool x_f32 = a.x.dtype == DType::kF32, out_f32 = a.out.dtype == DType::kF32;
  std::vector<double> xd(n * k);  // x once as doubles for the vector dot
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      xd[i * k + j] = x_f32 ? a.x.as<const float>()[i * a.x.stride[0] + j] : bf16_to_f32(cpu::bf16_row(a.x, i)[j]);
  const auto store = [&](int64_t i, int64_t r, double acc) {
    if (out_f32)
      a.out.as<float>()[i * a.out.stride[0] + r] = static_cast<float>(acc);
    else
      cpu::bf16_row_mut(a.out, i)[r] = f32_to_bf16(static_cast<float>(acc));
  };
  pool.parallel_for(w.out, 16, [&](int64_t ob, int64_t oe) {
    std::vector<float> wrow(k);
    for (int64_t r = ob; r < oe; ++r) {
      if (w.format == LinearFormat::kFp8AsBf16) {
        const uint8_t* wr = w.weight.as<const uint8_t>() + r * w.weight.stride[0];
        const uint8_t* sr = w.scale.as<const uint8_t>() + (r / kBlock) * w.scale.stride[0];
        if (n == 1) {  // a GEMV: no fp32 row in between
          store(0, r, cpu::dot_e4m3_f64(isa, wr, sr, xd.data(), k));
          continue;
        }
        cpu::e4m3_row_to_f32(isa, wr, sr, k, wrow.data());
      } else {
        const uint16_t* wr = w.weight.as<const uint16_t>() + r * w.weight.stride[0];
        for (int64_t j = 0; j < k; ++j) wrow[j] = bf16_to_f32(wr[j]);
      }
      for (int64_t i = 0; i < n; ++i) store(i, r, cpu::dot_f32_f64(isa, wrow.data(), &xd[i * k], k));
    }
  });
}

void check_shapes(const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  DSINFER_CHECK(a.x.size(1) == w.in && a.out.size(1) == w.out && a.out.size(0) == a.x.size(0),
                "linear: x [{}, {}] W [{}, {}] out [{}, {}]", a.x.size(0), a.x.size(1), w.out, w.in, a.out.size(0),
                a.out.size(1));
}

}  // namespace

void CpuBackend::linear(const LinearArgs& a) {
  grouped_linear({{&a, 1}});
}

// Block-scaled GEMMs: each distinct input quantised once (at batch 1 every routed expert's w1 and
// w3 read the same row), then all of them in one parallel region. Dense ones run one by one.
void CpuBackend::grouped_linear(const GroupedLinearArgs& a) {
  // Kept per calling thread: a decode step runs hundreds of GEMMs, and fresh allocations of this
  // size would each cost page faults.
  thread_local std::vector<QuantizedInput> inputs;
  std::vector<BlockGemm> gemms;
  std::vector<size_t> input_of;  // gemm j reads inputs[input_of[j]]
  size_t used = 0;
  for (const LinearArgs& op : a.ops) {
    check_shapes(op);
    if (op.x.size(0) == 0) continue;
    if (!is_block_scaled(op.w->format)) {
      linear_dense(*pool_, isa_, op);
      continue;
    }
    const bool fp4 = op.w->format == LinearFormat::kFp4;
    size_t at = 0;
    while (at < used && !(inputs[at].fp4 == fp4 && same_rows(*inputs[at].x, op.x))) ++at;
    if (at == used) {
      if (inputs.size() == used) inputs.emplace_back();
      quantize_input(isa_, op.x, op.w->in, fp4, inputs[used++]);
    }
    gemms.push_back({op.w, nullptr, op.out});
    input_of.push_back(at);
  }
  // (Pointers taken once `inputs` has stopped growing.)
  for (size_t j = 0; j < gemms.size(); ++j) gemms[j].x = &inputs[input_of[j]];
  if (!gemms.empty()) run_block_gemms(*pool_, gemms);
}

}  // namespace dsinfer
