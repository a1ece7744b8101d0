// Whether Hopper's bf16 wgmma chains give the fp32 bits of the mma.sync chains the sparse
// attention's passes use (kernels/attention/attention.cu). If they do, a wgmma attention keeps
// the passes' bits, and with them decode's batch invariance and prefill's chunking invariance
// across the switch between kernels; if not, it cannot replace them one for one.
//
// One CTA of one warpgroup computes D = A . B^T for A 64 x K and B N x K (bf16, K contiguous in
// both, as q and the KV rows lie) twice: each warp's 16 rows by mma.m16n8k16 chains over K in
// steps of 16 (an n8 tile of D a chain, as the scores pass), and by wgmma.m64n64k16 chains over
// the same steps, A from registers (the same fragments) and B from shared memory in the
// no-swizzle core-matrix layout, a step at a time. Both start from zero accumulators. The host counts equal bits and
// compares both with the sums in double, which a layout error would miss by far.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/mma.cuh"
#include "backends/cuda/common/wgmma.cuh"
#include "lab/lab.h"

namespace dsinfer::cuda::lab {
namespace {

using namespace common;

constexpr int kRows = 64, kCols = 64;
constexpr int kThreads = 128;               // one warpgroup
constexpr int kStepBytes = kCols * 16 * 2;  // B's 64 columns x 16 K values of one step

// No swizzle: a step's B is 8 x 2 core matrices of 8 x 16 bytes, (n-group j, K half h) at 256 j +
// 128 h. K-major (layout 0): a core matrix's rows are 8 columns' 8 K values; the leading-byte offset
// steps along K (128), the stride-byte offset along N (256), as the lab's fp8 kernel
// (linear_wgmma.cu) measured. MN-major (layouts 1 and 2, B transposed): a core matrix's rows are 8
// K values' 8 columns (as the KV rows lie for the value sums); which offset steps along which
// dimension is what the two layouts try: 1 as K-major, 2 swapped.
enum Layout { kKMajor, kMnMajor, kMnMajorSwapped };
__device__ inline uint64_t descriptor(const void* smem, Layout layout) {
  return layout == kMnMajorSwapped ? smem_descriptor(smem, 256, 128) : smem_descriptor(smem, 128, 256);
}

template <int kTransB>
__device__ inline void wgmma_bf16_n64(const uint32_t a[4], uint64_t b, float (&d)[32]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB));
}

// a: 64 x k, b: 64 x k (bf16 bits); out_mma, out_wgmma: 64 x 64 floats.
__global__ void __launch_bounds__(kThreads)
    sm90_bf16_chain_bits(const uint16_t* a, const uint16_t* b, int k, Layout layout, float* out_mma, float* out_wgmma) {
  __shared__ __align__(128) uint8_t bs[kStepBytes];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int steps = k / 16;
  const auto word = [](const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); };
  const uint16_t* ra = a + static_cast<int64_t>(16 * warp + g) * k;  // rows g and g + 8 of the warp's tile
  const uint16_t* rb = ra + 8 * k;
  float dm[kCols / 8][4] = {}, dw[32] = {};
  for (int s = 0; s < steps; ++s) {
    const int kk = 16 * s + 2 * q;
    const uint32_t frag[4] = {word(ra + kk), word(rb + kk), word(ra + kk + 8), word(rb + kk + 8)};
    for (int j = 0; j < kCols / 8; ++j) {
      const uint16_t* col = b + static_cast<int64_t>(8 * j + g) * k + kk;
      mma_bf16(frag, word(col), word(col + 8), dm[j]);
    }
    // Step s of B into core matrices: K-major, column n and K half h at 256 (n / 8) + 128 h + 16 (n %
    // 8); MN-major, K value x of the step and n at 256 (n / 8) + 128 (x / 8) + 16 (x % 8) + 2 (n % 8).
    __syncthreads();  // the last step's wgmma has read bs
    if (layout == kKMajor) {
      for (int i = threadIdx.x; i < kCols * 2; i += kThreads) {
        const int n = i / 2, h = i % 2;
        *reinterpret_cast<uint4*>(bs + 256 * (n / 8) + 128 * h + 16 * (n % 8)) =
            *reinterpret_cast<const uint4*>(b + static_cast<int64_t>(n) * k + 16 * s + 8 * h);
      }
    } else {
      for (int i = threadIdx.x; i < kCols * 16; i += kThreads) {
        const int n = i % kCols, x = i / kCols;
        *reinterpret_cast<uint16_t*>(bs + 256 * (n / 8) + 128 * (x / 8) + 16 * (x % 8) + 2 * (n % 8)) =
            b[static_cast<int64_t>(n) * k + 16 * s + x];
      }
    }
    fence_shared_for_wgmma();
    __syncthreads();
    wgmma_fence();
    if (layout == kKMajor)
      wgmma_bf16_n64<0>(frag, descriptor(bs, layout), dw);
    else
      wgmma_bf16_n64<1>(frag, descriptor(bs, layout), dw);
    wgmma_commit();
    wgmma_wait_all();
  }
  // Both D fragments: n8 tile j holds row g, columns 8j + 2q, + 1 and row g + 8, the same columns.
  for (int j = 0; j < kCols / 8; ++j)
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * warp + g + (e >= 2 ? 8 : 0), col = 8 * j + 2 * q + (e & 1);
      out_mma[row * kCols + col] = dm[j][e];
      out_wgmma[row * kCols + col] = dw[4 * j + e];
    }
}

uint16_t to_bf16(float f) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int chain_bits() {
  struct Case {
    const char* what;
    int k;
    int spread;  // the values' binary exponents spread over [-spread, spread]
  };
  int failures = 0;
  for (const Layout layout : {kKMajor, kMnMajor, kMnMajorSwapped})
    for (const Case c : {Case{"scores, d 512, normal", 512, 0},
                         {"scores, d 512, exponents +-8", 512, 8},
                         {"values, a 64-slot block, P in [0, 1]", 64, -1},
                         {"d 128, exponents +-20", 128, 20}}) {
      std::mt19937 rng(static_cast<uint32_t>(c.k * 31 + c.spread));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::uniform_real_distribution<float> unit(0.0f, 1.0f);
      std::uniform_int_distribution<int> exponent(-std::max(c.spread, 0), std::max(c.spread, 0));
      const auto draw = [&](bool probability) {
        const float v = probability ? unit(rng) : std::ldexp(normal(rng), exponent(rng));
        return to_bf16(v);
      };
      std::vector<uint16_t> a(kRows * c.k), b(kCols * c.k);
      for (uint16_t& v : a) v = draw(c.spread < 0);  // the values' case: A = P, B = the rows' dims
      for (uint16_t& v : b) v = draw(false);
      uint16_t *da, *db;
      float *dm, *dw;
      cudaMalloc(&da, a.size() * 2), cudaMalloc(&db, b.size() * 2);
      cudaMalloc(&dm, kRows * kCols * 4), cudaMalloc(&dw, kRows * kCols * 4);
      cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
      sm90_bf16_chain_bits<<<1, kThreads>>>(da, db, c.k, layout, dm, dw);
      std::vector<float> m(kRows * kCols), w(kRows * kCols);
      const cudaError_t e = cudaMemcpy(m.data(), dm, m.size() * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(w.data(), dw, w.size() * 4, cudaMemcpyDeviceToHost);
      cudaFree(da), cudaFree(db), cudaFree(dm), cudaFree(dw);
      if (e != cudaSuccess) {
        std::printf("chain-bits %s: %s\n", c.what, cudaGetErrorString(e));
        ++failures;
        continue;
      }
      int equal = 0;
      double rms = 0, off_m = 0, off_w = 0;
      for (int i = 0; i < kRows; ++i)
        for (int j = 0; j < kCols; ++j) {
          double exact = 0;
          for (int x = 0; x < c.k; ++x)
            exact += static_cast<double>(from_bf16(a[i * c.k + x])) * from_bf16(b[j * c.k + x]);
          const float mm = m[i * kCols + j], ww = w[i * kCols + j];
          equal += std::memcmp(&mm, &ww, 4) == 0;
          rms += exact * exact;
          off_m = std::max(off_m, std::fabs(mm - exact)), off_w = std::max(off_w, std::fabs(ww - exact));
        }
      rms = std::sqrt(rms / (kRows * kCols));
      // A layout error leaves outputs off by about their own size; a chain's rounding, by far less.
      const bool laid_out = off_m < 1e-3 * rms && off_w < 1e-3 * rms;
      failures += !laid_out && layout == kKMajor;  // the MN-major readings are the experiment: one is wrong
      std::printf("chain-bits, B %s, %s: %d of %d outputs bit-equal; max |d - exact| / rms: mma %.3g, wgmma %.3g%s\n",
                  layout == kKMajor    ? "K-major"
                  : layout == kMnMajor ? "MN-major"
                                       : "MN-major (offsets swapped)",
                  c.what, equal, kRows * kCols, off_m / rms, off_w / rms, laid_out ? "" : " (layout error)");
    }
  return failures;
}

}  // namespace dsinfer::cuda::lab
