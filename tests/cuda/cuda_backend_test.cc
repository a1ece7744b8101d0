// CudaBackend through the Backend interface against CpuBackend (skipped without a GPU): the view
// to kernel mapping (strides, formats, scratch) for the linear formats (small batches on the
// exact kernels, large ones on cuBLAS) and the fake quantisers.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/linear_dispatch.h"
#include "backends/cuda/memory.h"
#include "core/float_formats.h"
#include "ops/composite.h"
#include "ops/device_array.h"
#include "test_util.h"

namespace dsinfer {
namespace {

// Host data and a device copy of it, with views of both.
struct Mirror {
  std::vector<uint8_t> host;
  void* dev = nullptr;
  explicit Mirror(size_t bytes, const void* src = nullptr) : host(bytes) {
    if (src) std::memcpy(host.data(), src, bytes);
    EXPECT_EQ(cudaMalloc(&dev, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Mirror() { cudaFree(dev); }
  TensorView view(bool device, DType t, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(device ? dev : host.data(), t, shape, device ? Device::kCuda : Device::kCpu);
  }
  std::vector<uint8_t> fetch() const {
    std::vector<uint8_t> h(host.size());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), dev, h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// bf16 outputs within 2 ulps, or 1e-2 of the outputs' RMS where sums cancel (the fp8 tensor cores).
void expect_close_bf16(const std::vector<uint8_t>& got_bytes, const std::vector<uint8_t>& want_bytes,
                       const char* what) {
  const auto* got = reinterpret_cast<const uint16_t*>(got_bytes.data());
  const auto* want = reinterpret_cast<const uint16_t*>(want_bytes.data());
  const size_t n = got_bytes.size() / 2;
  double sq = 0;
  for (size_t j = 0; j < n; ++j) sq += double{bf16_to_f32(want[j])} * bf16_to_f32(want[j]);
  const double rms = std::sqrt(sq / n);
  for (size_t j = 0; j < n; ++j) {
    const float g = bf16_to_f32(got[j]), w = bf16_to_f32(want[j]);
    const bool ulps_ok = std::abs(static_cast<int>(got[j]) - static_cast<int>(want[j])) <= 2 && (g >= 0) == (w >= 0);
    ASSERT_TRUE(ulps_ok || std::fabs(g - w) <= 1e-2 * rms) << what << " " << j << ": " << g << " vs " << w;
  }
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaBackend>();  // needs a device: made after the skip
  }
  CpuBackend cpu{0};
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(CudaBackendTest, LinearInEveryFormat) {
  std::mt19937 rng(1);
  const int64_t o = 256, k = 1024;
  for (const LinearFormat f : {LinearFormat::kFp8, LinearFormat::kFp4, LinearFormat::kBf16, LinearFormat::kBf16AsF32,
                               LinearFormat::kFp8AsBf16}) {
    const bool fp8 = f == LinearFormat::kFp8 || f == LinearFormat::kFp8AsBf16, fp4 = f == LinearFormat::kFp4;
    const bool f32 = f == LinearFormat::kBf16AsF32;
    const int64_t w_bytes = fp4 ? o * k / 2 : fp8 ? o * k : o * k * 2;
    std::vector<uint8_t> w(w_bytes), s(fp4 ? o * (k / 32) : (o / 32) * (k / 32));
    if (fp8 || fp4) {
      for (auto& b : w)
        b = fp4 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>((rng() & 0x80) | (8 + rng() % 0x70));
      for (auto& b : s) b = static_cast<uint8_t>(116 + rng() % 8);
    } else {
      const std::vector<uint16_t> wb = testing::random_bf16(o * k, 2);
      std::memcpy(w.data(), wb.data(), w.size());
    }
    Mirror mw(w.size(), w.data()), ms(s.size(), s.data());
    const DType wt = fp4 ? DType::kU8 : fp8 ? DType::kU8 : DType::kBF16;
    const int64_t wcols = fp4 ? k / 2 : k;
    for (const int64_t n : {1, 5, 80}) {  // 80: the tensor-core path of large batches (bf16 x)
      const std::vector<uint16_t> xb = testing::random_bf16(n * k, 3 + n);
      std::vector<float> xf(n * k);
      for (auto& v : xf) v = std::uniform_real_distribution<float>(-1, 1)(rng);
      Mirror mx(f32 ? n * k * 4 : n * k * 2, f32 ? static_cast<const void*>(xf.data()) : xb.data());
      Mirror my(f32 ? n * o * 4 : n * o * 2);
      for (const bool device : {false, true}) {
        const LinearWeight lw{f, o, k, mw.view(device, wt, {o, wcols}),
                              fp8 || fp4 ? ms.view(device, DType::kU8, {fp4 ? o : o / 32, k / 32}) : TensorView{}};
        Backend& be = device ? static_cast<Backend&>(*gpu_) : cpu;
        be.linear({mx.view(device, f32 ? DType::kF32 : DType::kBF16, {n, k}), &lw,
                   my.view(device, f32 ? DType::kF32 : DType::kBF16, {n, o})});
      }
      if (f32) {
        const std::vector<uint8_t> got = my.fetch();
        const auto* g = reinterpret_cast<const float*>(got.data());
        const auto* want = reinterpret_cast<const float*>(my.host.data());
        for (int64_t j = 0; j < n * o; ++j) ASSERT_NEAR(g[j], want[j], 1e-6f * std::fabs(want[j]) + 1e-30f) << j;
      } else {
        expect_close_bf16(my.fetch(), my.host, "linear");
      }
    }
  }
}

// Grouped calls: three fp4 experts on back-to-back input rows, then two fp8 weights sharing one
// input (the quantise-once paths), against one CPU linear each.
TEST_F(CudaBackendTest, GroupedLinearAsOneLinearEach) {
  std::mt19937 rng(5);
  const int64_t o = 256, k = 512;
  for (const LinearFormat f : {LinearFormat::kFp4, LinearFormat::kFp8}) {
    const bool fp4 = f == LinearFormat::kFp4;
    const int groups = fp4 ? 3 : 2;
    for (const int64_t n : {1, 3}) {
      std::vector<std::unique_ptr<Mirror>> ws, ss;
      for (int g = 0; g < groups; ++g) {
        std::vector<uint8_t> w(fp4 ? o * k / 2 : o * k), s(fp4 ? o * (k / 32) : (o / 32) * (k / 32));
        for (auto& b : w)
          b = fp4 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>((rng() & 0x80) | (8 + rng() % 0x70));
        for (auto& b : s) b = static_cast<uint8_t>(116 + rng() % 8);
        ws.push_back(std::make_unique<Mirror>(w.size(), w.data()));
        ss.push_back(std::make_unique<Mirror>(s.size(), s.data()));
      }
      const int64_t inputs = fp4 ? groups : 1;
      const std::vector<uint16_t> xb = testing::random_bf16(inputs * n * k, 21 + n);
      Mirror mx(xb.size() * 2, xb.data()), my(groups * n * o * 2);
      for (const bool device : {false, true}) {
        std::vector<LinearWeight> lws;
        for (int g = 0; g < groups; ++g)
          lws.push_back({f, o, k, ws[g]->view(device, DType::kU8, {o, fp4 ? k / 2 : k}),
                         ss[g]->view(device, DType::kU8, {fp4 ? o : o / 32, k / 32})});
        std::vector<LinearArgs> ops;
        for (int g = 0; g < groups; ++g) {
          TensorView x = mx.view(device, DType::kBF16, {n, k}), y = my.view(device, DType::kBF16, {n, o});
          x.data = static_cast<uint16_t*>(x.data) + (fp4 ? g : 0) * n * k;
          y.data = static_cast<uint16_t*>(y.data) + g * n * o;
          ops.push_back({x, &lws[g], y});
        }
        if (device)
          gpu_->grouped_linear({ops});
        else
          for (const LinearArgs& op : ops) cpu.linear(op);
      }
      expect_close_bf16(my.fetch(), my.host, "grouped linear");
    }
  }
}

// wo_a's groups at decode (fp8 codes read as bf16, block-diagonal: group g's rows of one matrix on
// the g-th column block of the input): the wgmma kernel's decode tiles on the rows as they are,
// within the bound above of the CPU's sums; a row's outputs the same bits alone as among 64.
TEST_F(CudaBackendTest, BlockDiagonalFp8GroupsOnTheWgmmaKernel) {
  std::mt19937 rng(9);
  const int64_t groups = 8, o = 256, k = 512, n = 64, row = 37;
  std::vector<uint8_t> w(groups * o * k), s(groups * (o / 32) * (k / 32));
  for (auto& b : w) b = static_cast<uint8_t>((rng() & 0x80) | (8 + rng() % 0x70));
  for (auto& b : s) b = static_cast<uint8_t>(116 + rng() % 8);
  Mirror mw(w.size(), w.data()), ms(s.size(), s.data());
  const std::vector<uint16_t> xb = testing::random_bf16(n * groups * k, 41);
  Mirror mx(xb.size() * 2, xb.data()), my(n * groups * o * 2), mone(groups * o * 2);
  const auto run = [&](bool device, int64_t rows, int64_t first, Mirror& out) {
    std::vector<LinearWeight> lws;
    for (int64_t g = 0; g < groups; ++g) {
      TensorView wv = mw.view(device, DType::kU8, {o, k}), sv = ms.view(device, DType::kU8, {o / 32, k / 32});
      wv.data = static_cast<uint8_t*>(wv.data) + g * o * k;
      sv.data = static_cast<uint8_t*>(sv.data) + g * (o / 32) * (k / 32);
      lws.push_back({LinearFormat::kFp8AsBf16, o, k, wv, sv});
    }
    std::vector<LinearArgs> ops;
    for (int64_t g = 0; g < groups; ++g) {
      TensorView x = mx.view(device, DType::kBF16, {rows, k}), y = out.view(device, DType::kBF16, {rows, o});
      x.data = static_cast<uint16_t*>(x.data) + first * groups * k + g * k;
      y.data = static_cast<uint16_t*>(y.data) + g * o;
      x.stride[0] = groups * k, y.stride[0] = groups * o;
      ops.push_back({x, &lws[g], y});
    }
    if (device) {
      EXPECT_EQ(cuda::group_path(ops), cuda::GroupPath::kBlockDiagonalWgmma);
      gpu_->grouped_linear({ops});
    } else {
      for (const LinearArgs& op : ops) cpu.linear(op);
    }
  };
  run(false, n, 0, my);
  run(true, n, 0, my);
  const std::vector<uint8_t> all = my.fetch();
  expect_close_bf16(all, my.host, "wo_a's groups");
  run(true, 1, row, mone);
  const std::vector<uint8_t> alone = mone.fetch();
  EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + row * groups * o * 2))
      << "row " << row << " alone differs from the step of " << n;
}

TEST_F(CudaBackendTest, FakeQuantOnStridedRows) {
  const int64_t rows = 6, d = 256;
  const std::vector<uint16_t> x = testing::random_bf16(rows * 2 * d, 9, 2.0f);  // every other row is used
  for (const FakeQuant kind : {FakeQuant::kFp8Group32, FakeQuant::kFp4E8M0Group32, FakeQuant::kFp4E4M3Group16}) {
    Mirror m(x.size() * 2, x.data());
    for (const bool device : {false, true}) {
      TensorView v = m.view(device, DType::kBF16, {rows, d});
      v.stride[0] = 2 * d;
      Backend& be = device ? static_cast<Backend&>(*gpu_) : cpu;
      be.fake_quant({v, kind});
    }
    EXPECT_EQ(m.fetch(), m.host) << static_cast<int>(kind);
  }
}

TEST_F(CudaBackendTest, GatherScatterAndScatterAddRowsAsTheCpu) {
  const int64_t n = 9, d = 4096, m = 4;
  const std::vector<uint16_t> x = testing::random_bf16(n * d, 11);
  const std::vector<uint16_t> src = testing::random_bf16(m * d, 12);
  std::vector<float> acc(n * d);
  for (int64_t j = 0; j < n * d; ++j) acc[j] = bf16_to_f32(x[j]) * 0.37f;
  const std::vector<int32_t> rows = {7, 0, 3, 8};
  Mirror mx(x.size() * 2, x.data()), msrc(src.size() * 2, src.data()), mrows(rows.size() * 4, rows.data());
  Mirror mgather(m * d * 2), macc(acc.size() * 4, acc.data()), mout(n * d * 2), mscattered(x.size() * 2, x.data());
  for (const bool device : {false, true}) {
    Backend& be = device ? static_cast<Backend&>(*gpu_) : cpu;
    be.gather_rows({mx.view(device, DType::kBF16, {n, d}), mrows.view(device, DType::kI32, {m}),
                    mgather.view(device, DType::kBF16, {m, d})});
    be.scatter_rows({msrc.view(device, DType::kBF16, {m, d}), mrows.view(device, DType::kI32, {m}),
                     mscattered.view(device, DType::kBF16, {n, d})});
    be.scatter_add({msrc.view(device, DType::kBF16, {m, d}), mrows.view(device, DType::kI32, {m}),
                    macc.view(device, DType::kF32, {n, d}), mout.view(device, DType::kBF16, {n, d})});
  }
  EXPECT_EQ(mgather.fetch(), mgather.host);
  EXPECT_EQ(macc.fetch(), macc.host);
  EXPECT_EQ(mout.fetch(), mout.host);
  EXPECT_EQ(mscattered.fetch(), mscattered.host);
}

TEST_F(CudaBackendTest, DeviceArrayKeepsItsRowsWhenItGrows) {
  std::vector<float> host(1000);
  for (size_t j = 0; j < host.size(); ++j) host[j] = static_cast<float>(j) - 0.5f;
  DeviceArray<float> a(*gpu_, std::span<const float>(host));
  a.resize(5000);  // past the capacity: a new allocation, the old rows copied, the rest zero
  std::vector<float> want = host;
  want.resize(5000, 0.0f);
  EXPECT_EQ(a.download(), want);
  a.resize(10);
  a.resize(20);  // inside the capacity: the regrown tail is zeroed again
  want.resize(10);
  want.resize(20, 0.0f);
  EXPECT_EQ(a.download(), want);
  EXPECT_EQ(a.download(5, 3), std::vector<float>(want.begin() + 5, want.begin() + 8));
}

// Uploads of every size the pinned ring meets (within a half, past it: the ring grows, past its
// largest half: from pageable memory), each source rewritten as soon as its copy is queued, land
// as they were when queued.
TEST_F(CudaBackendTest, UploadsOfAnySizeLandAsQueued) {
  const size_t mib = size_t{1} << 20;
  const size_t sizes[] = {3 * mib, 20 * mib, 5 * mib, 48 * mib, cuda::StagingRing::kMaxHalfBytes + 4 * mib, 7 * mib};
  std::vector<std::vector<uint8_t>> want;
  std::vector<DeviceArray<uint8_t>> got;
  std::vector<uint8_t> source;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    source.resize(sizes[i]);
    for (size_t j = 0; j < sizes[i]; ++j) source[j] = static_cast<uint8_t>(j * 31 + i * 7 + j / 4096);
    got.push_back(DeviceArray<uint8_t>::uninitialized(*gpu_, sizes[i]));
    gpu_->copy_to_device(got.back().data(), source.data(), sizes[i]);
    want.push_back(source);
    std::fill(source.begin(), source.end(), uint8_t{0xA5});  // reused at once, as the contract allows
  }
  for (size_t i = 0; i < std::size(sizes); ++i) EXPECT_TRUE(got[i].download() == want[i]) << "upload " << i;
}

// The routed experts run on the device's choice (no read back): up to kDeviceRoutedTokens tokens on
// the tiled kernel, a prefill chunk's (from 65) on the wgmma kernel; all as the CPU's grouping (fp4
// experts, choices out of order) within the bound, and a token alone as in a batch, or a chunk's
// tokens as in a larger chunk, bit for bit.
TEST_F(CudaBackendTest, RoutedExpertsAsTheCpuWithoutReadingTheChoice) {
  std::mt19937 rng(7);
  const int64_t experts = 10, dim = 512, ff = 256, k = 6;
  std::vector<std::unique_ptr<Mirror>> store;
  std::vector<ExpertWeights> host(experts), dev(experts);
  const auto fp4_weight = [&](int64_t out, int64_t in, LinearWeight& h, LinearWeight& d) {
    std::vector<uint8_t> w(out * in / 2), sc(out * (in / 32));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    for (auto& b : sc) b = static_cast<uint8_t>(118 + rng() % 8);
    // The Mirrors by address: a reference into `store` would not survive its next growth.
    Mirror* mw = store.emplace_back(std::make_unique<Mirror>(w.size(), w.data())).get();
    Mirror* ms = store.emplace_back(std::make_unique<Mirror>(sc.size(), sc.data())).get();
    // Each assigned on its own line: GCC 12 miscompiled `(device ? d : h) = {...}` in a loop over
    // both (the host weight took the previous call's views, the first a null one).
    const auto weight = [&](bool device) -> LinearWeight {
      return {LinearFormat::kFp4, out, in, mw->view(device, DType::kU8, {out, in / 2}),
              ms->view(device, DType::kU8, {out, in / 32})};
    };
    h = weight(false);
    d = weight(true);
  };
  for (int64_t e = 0; e < experts; ++e) {
    fp4_weight(ff, dim, host[e].w1, dev[e].w1);
    fp4_weight(ff, dim, host[e].w3, dev[e].w3);
    fp4_weight(dim, ff, host[e].w2, dev[e].w2);
  }
  const int64_t batch = CudaBackend::kDeviceRoutedTokens;
  for (const int64_t n : {int64_t{1}, int64_t{3}, batch, batch + 4, int64_t{300}}) {
    const std::vector<uint16_t> x = testing::random_bf16(n * dim, 8, 1.0f);
    std::vector<int32_t> choice(2 * n * k);  // ids, then the weights' f32 bits (as the model keeps them)
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> ids(experts);
      for (int64_t e = 0; e < experts; ++e) ids[e] = static_cast<int32_t>(e);
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int64_t j = 0; j < k; ++j) {
        choice[t * k + j] = ids[j];
        const float wt = std::uniform_real_distribution<float>(0.05f, 0.5f)(rng);
        std::memcpy(&choice[n * k + t * k + j], &wt, 4);
      }
    }
    Mirror mx(x.size() * 2, x.data()), mc(choice.size() * 4, choice.data());
    Mirror macc(n * dim * 4, std::vector<float>(n * dim, 0.25f).data());
    const auto args = [&](bool device) {
      TensorView weights = mc.view(device, DType::kF32, {n, k});
      weights.data = static_cast<uint8_t*>(weights.data) + n * k * 4;
      return RoutedExpertsArgs{mx.view(device, DType::kBF16, {n, dim}),
                               mc.view(device, DType::kI32, {n, k}),
                               weights,
                               device ? dev : host,
                               10.0f,
                               macc.view(device, DType::kF32, {n, dim})};
    };
    cpu.routed_experts(args(false));
    const int64_t reads = gpu_->stats().downloads;
    gpu_->routed_experts(args(true));
    const std::vector<uint8_t> got = macc.fetch();
    EXPECT_EQ(gpu_->stats().downloads, reads) << "the choice stays on the device";
    const auto* g = reinterpret_cast<const float*>(got.data());
    if (n == 300) {  // tokens 100 .. 167 as a chunk of their own (68 tokens: the wgmma kernel too)
      const int64_t t0 = 100, m = 68;
      std::vector<int32_t> part(choice.begin() + t0 * k, choice.begin() + (t0 + m) * k);
      part.insert(part.end(), choice.begin() + n * k + t0 * k, choice.begin() + n * k + (t0 + m) * k);
      Mirror px(m * dim * 2, x.data() + t0 * dim), pc(part.size() * 4, part.data());
      Mirror pacc(m * dim * 4, std::vector<float>(m * dim, 0.25f).data());
      TensorView weights = pc.view(true, DType::kF32, {m, k});
      weights.data = static_cast<uint8_t*>(weights.data) + m * k * 4;
      gpu_->routed_experts({px.view(true, DType::kBF16, {m, dim}), pc.view(true, DType::kI32, {m, k}), weights, dev,
                            10.0f, pacc.view(true, DType::kF32, {m, dim})});
      const std::vector<uint8_t> alone = pacc.fetch();
      EXPECT_EQ(std::memcmp(alone.data(), g + t0 * dim, m * dim * 4), 0)
          << "a chunk's tokens differ from the same tokens in a larger chunk";
    }
    const auto* w = reinterpret_cast<const float*>(macc.host.data());
    double sq = 0;
    for (int64_t j = 0; j < n * dim; ++j) sq += double{w[j]} * w[j];
    // The tiled kernel's fp32 sums are in another order than the CPU's (and each difference in the
    // first matrices' bf16 outputs passes through SwiGLU and the second's input quantisation), so
    // the bound is on the error alone; how many are bit-equal is printed.
    int equal = 0;
    for (int64_t j = 0; j < n * dim; ++j) {
      equal += g[j] == w[j];
      ASSERT_LE(std::fabs(g[j] - w[j]), 1e-2 * std::sqrt(sq / (n * dim))) << "n=" << n << " " << j;
    }
    std::printf("routed experts n=%ld: %.1f %% of outputs bit-equal to the CPU\n", static_cast<long>(n),
                100.0 * equal / (n * dim));
    if (n != batch) continue;
    // Batch invariance: a token alone gets its row of the batch's outputs, bit for bit.
    for (const int64_t t : {int64_t{0}, batch / 2, batch - 1}) {
      std::vector<int32_t> one = {choice.begin() + t * k, choice.begin() + (t + 1) * k};
      one.insert(one.end(), choice.begin() + n * k + t * k, choice.begin() + n * k + (t + 1) * k);
      Mirror ox(dim * 2, x.data() + t * dim), oc(one.size() * 4, one.data());
      Mirror oacc(dim * 4, std::vector<float>(dim, 0.25f).data());
      TensorView weights = oc.view(true, DType::kF32, {1, k});
      weights.data = static_cast<uint8_t*>(weights.data) + k * 4;
      gpu_->routed_experts({ox.view(true, DType::kBF16, {1, dim}), oc.view(true, DType::kI32, {1, k}), weights, dev,
                            10.0f, oacc.view(true, DType::kF32, {1, dim})});
      const std::vector<uint8_t> mine = oacc.fetch();
      EXPECT_EQ(std::memcmp(mine.data(), g + t * dim, dim * 4), 0) << "token " << t << " alone differs from the batch";
    }
  }
}

// The DSpark Markov chain at Flash shapes (V 129280, rank 256): the CPU's bits (the same sums in
// double in the same order), the same drafts, and a block's chain the same alone as in a batch
// (18 blocks: the kernel's passes of 16 and 2).
TEST_F(CudaBackendTest, MarkovDraftAsTheCpu) {
  const int64_t blocks = 18, J = 5, V = 129280, r = 256;
  const std::vector<uint16_t> embed = testing::random_bf16(V * r, 11), head = testing::random_bf16(V * r, 12, 0.1f);
  std::vector<float> base(blocks * J * V);
  std::mt19937 rng(13);
  for (float& v : base) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  std::vector<int32_t> tokens(blocks * (J + 1), 0);
  for (int64_t b = 0; b < blocks; ++b) tokens[b * (J + 1)] = static_cast<int32_t>((b * 40503 + 7) % V);
  Mirror me(embed.size() * 2, embed.data()), mh(head.size() * 2, head.data()), mb(base.size() * 4, base.data());
  Mirror mt(tokens.size() * 4, tokens.data()), mx(blocks * J * r * 2);
  for (const bool device : {false, true}) {
    MarkovDraftArgs a{mb.view(device, DType::kF32, {blocks, J, V}), me.view(device, DType::kBF16, {V, r}),
                      mh.view(device, DType::kBF16, {V, r}), mt.view(device, DType::kI32, {blocks, J + 1}),
                      mx.view(device, DType::kBF16, {blocks * J, r})};
    device ? gpu_->markov_draft(a) : cpu.markov_draft(a);
  }
  const std::vector<uint8_t> gb = mb.fetch(), gt = mt.fetch(), gx = mx.fetch();
  EXPECT_EQ(std::memcmp(gb.data(), mb.host.data(), gb.size()), 0) << "biased logits";
  EXPECT_EQ(std::memcmp(gt.data(), mt.host.data(), gt.size()), 0) << "drafts";
  EXPECT_EQ(std::memcmp(gx.data(), mx.host.data(), gx.size()), 0) << "embeddings";
  // Blocks 1 and 17 alone: their rows of the batch's outputs.
  for (const int64_t b : {int64_t{1}, blocks - 1}) {
    Mirror ob(J * V * 4, base.data() + b * J * V), ot((J + 1) * 4, tokens.data() + b * (J + 1)), ox(J * r * 2);
    gpu_->markov_draft({ob.view(true, DType::kF32, {1, J, V}), me.view(true, DType::kBF16, {V, r}),
                        mh.view(true, DType::kBF16, {V, r}), ot.view(true, DType::kI32, {1, J + 1}),
                        ox.view(true, DType::kBF16, {J, r})});
    EXPECT_EQ(std::memcmp(ob.fetch().data(), gb.data() + b * J * V * 4, J * V * 4), 0) << "block " << b;
    EXPECT_EQ(std::memcmp(ot.fetch().data(), gt.data() + b * (J + 1) * 4, (J + 1) * 4), 0) << "block " << b;
  }
}

}  // namespace
}  // namespace dsinfer
