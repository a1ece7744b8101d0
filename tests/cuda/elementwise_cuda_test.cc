// CUDA row-wise kernels against the CPU backend at V4.1-Flash shapes (skipped without a GPU):
// bit for bit, except SwiGLU's expf (within 1 bf16 ulp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/elementwise/elementwise.h"
#include "test_util.h"

namespace dsinfer {
namespace {

// A device copy of a host vector, copied back by `get`.
template <typename T>
struct DeviceCopy {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceCopy(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

std::vector<float> random_f32(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TensorView view(const void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(const_cast<void*>(p), t, shape);
}

class CudaRowOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  CpuBackend cpu{0};
};

TEST_F(CudaRowOps, EmbedAndRmsNorm) {
  const int n = 7, dim = 5120, rows = 1000, offset = 500;
  const std::vector<uint16_t> table = testing::random_bf16(static_cast<size_t>(rows) * dim, 1);
  const std::vector<int32_t> ids = {500, 1499, 499, 1500, 777, 0, 1234};  // two outside this shard
  std::vector<uint16_t> want(static_cast<size_t>(n) * dim);
  cpu.embed({view(ids.data(), DType::kI32, {n}), view(table.data(), DType::kBF16, {rows, dim}), offset,
             view(want.data(), DType::kBF16, {n, dim})});
  DeviceCopy<int32_t> dids(ids);
  DeviceCopy<uint16_t> dtable(table), dout(std::vector<uint16_t>(want.size(), 0xFFFF));
  cuda::EmbedParams e;
  e.ids = dids.p, e.table = dtable.p, e.rows = rows, e.vocab_offset = offset, e.out = dout.p, e.out_stride = dim,
  e.n = n, e.dim = dim;
  ASSERT_EQ(cuda::launch_embed(e), cudaSuccess);
  EXPECT_EQ(dout.get(), want);

  const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * dim, 2, 3.0f);
  const std::vector<uint16_t> w = testing::random_bf16(dim, 3);
  std::vector<uint16_t> normed(x.size());
  cpu.rms_norm({view(x.data(), DType::kBF16, {n, dim}), view(w.data(), DType::kBF16, {dim}), 1e-6,
                view(normed.data(), DType::kBF16, {n, dim})});
  DeviceCopy<uint16_t> dx(x), dw(w);
  cuda::RmsNormParams r;
  r.x = dx.p, r.x_stride = dim, r.weight = dw.p, r.out = dx.p, r.out_stride = dim, r.n = n, r.d = dim, r.eps = 1e-6f;
  ASSERT_EQ(cuda::launch_rms_norm(r), cudaSuccess);  // in place
  EXPECT_EQ(dx.get(), normed);
}

TEST_F(CudaRowOps, RopeBothDirections) {
  const int n = 5, heads = 64, d = 512, half = 32;
  const std::vector<float> cos = random_f32(n * half, 4, -1, 1), sin = random_f32(n * half, 5, -1, 1);
  for (const bool inverse : {false, true}) {
    std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * heads * d, 6);
    DeviceCopy<uint16_t> dx(x);
    DeviceCopy<float> dc(cos), ds(sin);
    cpu.rope({view(x.data(), DType::kBF16, {n, heads, d}), view(cos.data(), DType::kF32, {n, half}),
              view(sin.data(), DType::kF32, {n, half}), inverse});
    cuda::RopeParams p;
    p.x = dx.p, p.x_stride = static_cast<int64_t>(heads) * d, p.head_stride = d, p.cos = dc.p, p.sin = ds.p;
    p.table_stride = half, p.n = n, p.heads = heads, p.d = d, p.half = half, p.inverse = inverse;
    ASSERT_EQ(cuda::launch_rope(p), cudaSuccess);
    EXPECT_EQ(dx.get(), x) << "inverse " << inverse;
  }
}

// Rows whose dims are multiples of 8 take the 8-wide kernels, the others a thread per value: both
// are checked.
TEST_F(CudaRowOps, SwigluWithClampAndRoutingWeights) {
  const int n = 6;
  for (const int f : {2304, 2300}) {
    SCOPED_TRACE(f);
    const std::vector<uint16_t> g = testing::random_bf16(static_cast<size_t>(n) * f, 7, 8.0f),
                                u = testing::random_bf16(static_cast<size_t>(n) * f, 8, 8.0f);
    const std::vector<float> rw = random_f32(n, 9, 0, 1);
    std::vector<uint16_t> want(g.size());
    cpu.swiglu({view(g.data(), DType::kBF16, {n, f}), view(u.data(), DType::kBF16, {n, f}),
                view(rw.data(), DType::kF32, {n}), 10.0f, view(want.data(), DType::kBF16, {n, f})});
    DeviceCopy<uint16_t> dg(g), du(u), dout(std::vector<uint16_t>(g.size(), 0xFFFF));
    DeviceCopy<float> drw(rw);
    cuda::SwigluParams p;
    p.gate = dg.p, p.up = du.p, p.gate_stride = f, p.up_stride = f, p.row_weight = drw.p, p.limit = 10.0f;
    p.out = dout.p, p.out_stride = f, p.n = n, p.f = f;
    ASSERT_EQ(cuda::launch_swiglu(p), cudaSuccess);
    const std::vector<uint16_t> got = dout.get();
    int equal = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      equal += got[j] == want[j];
      ASSERT_LE(std::abs(static_cast<int>(got[j]) - static_cast<int>(want[j])), 1) << j;  // same sign: 1 ulp
    }
    EXPECT_GE(equal, static_cast<int>(got.size() * 0.99));
  }
}

// SwiGLU quantised into the wgmma kernel's operand (the routed experts' w2 input): the bits of
// SwiGLU's bf16 rows then act_quant's operand, over rows that end mid-warp (7 x 2304: 2016 threads).
TEST_F(CudaRowOps, SwigluAsTheWgmmaOperand) {
  const int n = 7, f = 2304;
  const std::vector<uint16_t> g = testing::random_bf16(static_cast<size_t>(n) * f, 17, 8.0f),
                              u = testing::random_bf16(static_cast<size_t>(n) * f, 18, 8.0f);
  const std::vector<float> rw = random_f32(n, 19, 0, 1);
  DeviceCopy<uint16_t> dg(g), du(u), dact(std::vector<uint16_t>(g.size(), 0)),
      dwant(std::vector<uint16_t>(g.size(), 0xFFFF)), dgot(std::vector<uint16_t>(g.size(), 0xFFFF));
  DeviceCopy<float> drw(rw);
  cuda::SwigluParams p;
  p.gate = dg.p, p.up = du.p, p.gate_stride = f, p.up_stride = f, p.row_weight = drw.p, p.limit = 10.0f;
  p.out = dact.p, p.out_stride = f, p.n = n, p.f = f;
  ASSERT_EQ(cuda::launch_swiglu(p), cudaSuccess);
  cuda::QuantizeInputParams q;
  q.x = dact.p, q.x_stride = f, q.operand = dwant.p, q.n = n, q.k = f;
  ASSERT_EQ(cuda::launch_quantize_input(q), cudaSuccess);
  p.out = nullptr, p.out_stride = 0, p.operand = dgot.p;
  ASSERT_EQ(cuda::launch_swiglu(p), cudaSuccess);
  EXPECT_EQ(dgot.get(), dwant.get());
  p.f = 2300;  // not a whole span of the operand's K order
  EXPECT_EQ(cuda::launch_swiglu(p), cudaErrorInvalidValue);
}

TEST_F(CudaRowOps, HyperConnectionPreAndPost) {
  const int n = 3, hc = 4;
  for (const int dim : {5120, 1004}) {
    SCOPED_TRACE(dim);
    const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * hc * dim, 10),
                                sub = testing::random_bf16(static_cast<size_t>(n) * dim, 11);
    const std::vector<float> pre = random_f32(n * hc, 12, 0, 1), post = random_f32(n * hc, 13, 0, 2),
                             comb = random_f32(n * hc * hc, 14, 0, 1);
    std::vector<uint16_t> want_pre(static_cast<size_t>(n) * dim), want_post(x.size());
    cpu.hc_pre({view(x.data(), DType::kBF16, {n, hc, dim}), view(pre.data(), DType::kF32, {n, hc}),
                view(want_pre.data(), DType::kBF16, {n, dim})});
    cpu.hc_post({view(sub.data(), DType::kBF16, {n, dim}), view(x.data(), DType::kBF16, {n, hc, dim}),
                 view(post.data(), DType::kF32, {n, hc}), view(comb.data(), DType::kF32, {n, hc, hc}),
                 view(want_post.data(), DType::kBF16, {n, hc, dim})});
    DeviceCopy<uint16_t> dx(x), dsub(sub), dout(std::vector<uint16_t>(want_pre.size(), 0xFFFF));
    DeviceCopy<float> dpre(pre), dpost(post), dcomb(comb);
    cuda::HcPreParams a;
    a.x = dx.p, a.x_stride = static_cast<int64_t>(hc) * dim, a.pre = dpre.p, a.out = dout.p, a.out_stride = dim;
    a.n = n, a.hc = hc, a.dim = dim;
    ASSERT_EQ(cuda::launch_hc_pre(a), cudaSuccess);
    EXPECT_EQ(dout.get(), want_pre);
    cuda::HcPostParams b;
    b.sub = dsub.p, b.sub_stride = dim, b.residual = dx.p, b.residual_stride = static_cast<int64_t>(hc) * dim;
    b.post = dpost.p, b.comb = dcomb.p, b.out = dx.p, b.out_stride = static_cast<int64_t>(hc) * dim;  // in place
    b.n = n, b.hc = hc, b.dim = dim;
    ASSERT_EQ(cuda::launch_hc_post(b), cudaSuccess);
    EXPECT_EQ(dx.get(), want_post);
    b.hc = 9;
    EXPECT_EQ(cuda::launch_hc_post(b), cudaErrorInvalidValue);
  }
}

// bf16 outputs within 1 ulp (expf against glibc's exp), most bit for bit.
void expect_close_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, const char* what) {
  int equal = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    equal += got[j] == want[j];
    ASSERT_LE(std::abs(static_cast<int>(got[j]) - static_cast<int>(want[j])), 1) << what << " " << j;
  }
  EXPECT_GE(equal, static_cast<int>(got.size() * 0.98)) << what;
}

// A prefill chunk's Engram rows at V4.1's shape (24 columns of 256 a token), every code and scale
// byte: the same bits as the CPU's lookup.
TEST_F(CudaRowOps, DecodeRowsAsTheCpu) {
  const int64_t n = 1000, d = 256;
  std::vector<uint16_t> values(256 * 256);
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 256; ++c)
      values[s * 256 + c] = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(c)) * e8m0_to_f32(static_cast<uint8_t>(s)));
  std::mt19937 rng(41);
  std::vector<uint8_t> codes(n * d), scales(n * d / 32);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(rng());
  std::vector<uint16_t> want(n * d);
  cpu.decode_rows({view(codes.data(), DType::kU8, {n, d}), view(scales.data(), DType::kU8, {n, d / 32}),
                   view(values.data(), DType::kBF16, {256 * 256}), view(want.data(), DType::kBF16, {n, d})});
  DeviceCopy<uint8_t> dcodes(codes), dscales(scales);
  DeviceCopy<uint16_t> dvalues(values), dout(std::vector<uint16_t>(want.size(), 0xFFFF));
  ASSERT_EQ(cuda::launch_decode_rows({.codes = dcodes.p,
                                      .scales = dscales.p,
                                      .values = dvalues.p,
                                      .out = dout.p,
                                      .codes_stride = d,
                                      .scales_stride = d / 32,
                                      .out_stride = d,
                                      .n = static_cast<int>(n),
                                      .d = static_cast<int>(d)}),
            cudaSuccess);
  EXPECT_EQ(dout.get(), want);
}

TEST_F(CudaRowOps, CompressPoolAndEngramGate) {
  const int groups = 9, d = 512;
  const std::vector<float> kv = random_f32(static_cast<size_t>(groups) * 2 * d, 20, -3, 3),
                           score = random_f32(kv.size(), 21, -5, 5);
  std::vector<uint16_t> want(static_cast<size_t>(groups) * d);
  cpu.compress_pool({view(kv.data(), DType::kF32, {groups, 2, d}), view(score.data(), DType::kF32, {groups, 2, d}),
                     view(want.data(), DType::kBF16, {groups, d})});
  DeviceCopy<float> dkv(kv), dscore(score);
  DeviceCopy<uint16_t> dout(std::vector<uint16_t>(want.size(), 0xFFFF));
  cuda::CompressPoolParams c;
  c.kv = dkv.p, c.score = dscore.p, c.out = dout.p, c.groups = groups, c.d = d;
  ASSERT_EQ(cuda::launch_compress_pool(c), cudaSuccess);
  expect_close_bf16(dout.get(), want, "compress_pool");

  const int n = 3, hc = 4, dim = 5120;
  std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * hc * dim, 22);
  const std::vector<uint16_t> kvs = testing::random_bf16(static_cast<size_t>(n) * (hc + 1) * dim, 23);
  const std::vector<float> wgt = random_f32(static_cast<size_t>(hc) * dim, 24, -1, 1);
  const std::vector<uint8_t> live = {1, 0, 1};
  DeviceCopy<uint16_t> dx(x), dkvs(kvs);
  DeviceCopy<float> dwgt(wgt);
  DeviceCopy<uint8_t> dlive(live);
  cpu.engram_gate({view(x.data(), DType::kBF16, {n, hc, dim}), view(kvs.data(), DType::kBF16, {n, (hc + 1) * dim}),
                   view(wgt.data(), DType::kF32, {hc, dim}), view(live.data(), DType::kU8, {n}), 1e-6});
  cuda::EngramGateParams e;
  e.x = dx.p, e.x_stride = static_cast<int64_t>(hc) * dim, e.kv = dkvs.p,
  e.kv_stride = static_cast<int64_t>(hc + 1) * dim;
  e.wgt = dwgt.p, e.live = dlive.p, e.norm_eps = 1e-6f, e.n = n, e.hc = hc, e.dim = dim;
  ASSERT_EQ(cuda::launch_engram_gate(e), cudaSuccess);
  expect_close_bf16(dx.get(), x, "engram_gate");
}

struct HcMixesOut {
  std::vector<float> pre, post, comb;
};

// The mixes of n tokens (rows of x from token `first` on) on the GPU.
HcMixesOut gpu_hc_mixes(const std::vector<uint16_t>& x, int first, int n, int hc, int dim, const std::vector<float>& fn,
                        const std::vector<float>& scale, const std::vector<float>& base) {
  const size_t row = static_cast<size_t>(hc) * dim;
  DeviceCopy<uint16_t> dx(std::vector<uint16_t>(x.begin() + first * row, x.begin() + (first + n) * row));
  DeviceCopy<float> dfn(fn), dscale(scale), dbase(base), dpre(std::vector<float>(n * hc)),
      dpost(std::vector<float>(n * hc)), dcomb(std::vector<float>(n * hc * hc));
  cuda::HcMixesParams p;
  p.x = dx.p, p.x_stride = static_cast<int64_t>(row), p.fn = dfn.p, p.scale = dscale.p, p.base = dbase.p;
  p.norm_eps = 1e-6f, p.hc_eps = 1e-6f, p.sinkhorn_iters = 20, p.pre = dpre.p, p.post = dpost.p, p.comb = dcomb.p;
  p.n = n, p.hc = hc, p.dim = dim;
  DeviceCopy<double> dpartial(std::vector<double>(cuda::hc_mixes_workspace_bytes(p) / sizeof(double)));
  p.partial = dpartial.p;
  EXPECT_EQ(cuda::launch_hc_mixes(p), cudaSuccess);
  return {dpre.get(), dpost.get(), dcomb.get()};
}

TEST_F(CudaRowOps, HyperConnectionMixesWithSinkhorn) {
  // Batches of each kernel (a block a token or 8, projection and chunk of the row; from 128 tokens
  // tiles of 128 tokens and 32 projections on the fp64 tensor cores, the last tile partial);
  // V4.1's 4 copies (a lane an element of the combination, hc known to the kernel), 5 (the same,
  // hc not known) and 6 and 8 (two a lane; 48 and 80 projections: two and three tiles of
  // projections, the last partial).
  for (const auto& [n, hc] : {std::pair{3, 4}, {6, 4}, {17, 4}, {300, 4}, {4, 5}, {5, 6}, {130, 6}, {2, 8}, {129, 8}}) {
    const int dim = 5120, mix = (2 + hc) * hc;
    const std::vector<uint16_t> x = testing::random_bf16(static_cast<size_t>(n) * hc * dim, 30);
    const std::vector<float> fn = random_f32(static_cast<size_t>(mix) * hc * dim, 31, -0.02f, 0.02f),
                             scale = random_f32(3, 32, 0.5f, 1.5f), base = random_f32(mix, 33, -1, 1);
    std::vector<float> pre(n * hc), post(n * hc), comb(n * hc * hc);
    cpu.hc_mixes({view(x.data(), DType::kBF16, {n, hc, dim}), view(fn.data(), DType::kF32, {mix, hc * dim}),
                  view(scale.data(), DType::kF32, {3}), view(base.data(), DType::kF32, {mix}), 1e-6, 1e-6, 20,
                  view(pre.data(), DType::kF32, {n, hc}), view(post.data(), DType::kF32, {n, hc}),
                  view(comb.data(), DType::kF32, {n, hc, hc})});
    const HcMixesOut got = gpu_hc_mixes(x, 0, n, hc, dim, fn, scale, base);
    const auto close = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
      for (size_t j = 0; j < got.size(); ++j)
        EXPECT_NEAR(got[j], want[j], 1e-5f * std::fabs(want[j]) + 1e-7f) << what << j;
    };
    close(got.pre, pre, "pre");
    close(got.post, post, "post");
    close(got.comb, comb, "comb");
    const auto same_as = [&](const HcMixesOut& part, int first) {
      EXPECT_TRUE(std::equal(part.pre.begin(), part.pre.end(), got.pre.begin() + first * hc)) << n << " " << first;
      EXPECT_TRUE(std::equal(part.post.begin(), part.post.end(), got.post.begin() + first * hc)) << n << " " << first;
      EXPECT_TRUE(std::equal(part.comb.begin(), part.comb.end(), got.comb.begin() + first * hc * hc))
          << n << " " << first;
    };
    if (n == 17) {
      // Decode's steps (a block a token below 8 tokens, 8 tokens a block from there, the last group
      // partial): a token alone, and the last 12 in other groups, give the same bits.
      same_as(gpu_hc_mixes(x, 9, 1, hc, dim, fn, scale, base), 9);
      same_as(gpu_hc_mixes(x, 5, 12, hc, dim, fn, scale, base), 5);
    }
    if (n < 300) continue;
    // A token's mixes do not depend on the step's other tokens: its last 150 tokens alone (in
    // other tiles, rows and lanes) give the same bits.
    same_as(gpu_hc_mixes(x, n - 150, 150, hc, dim, fn, scale, base), n - 150);
  }
}

}  // namespace
}  // namespace dsinfer
