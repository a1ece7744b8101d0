// Row-wise kernels: embedding, RMSNorm, RoPE, SwiGLU, hyper-connection pre/post (one thread per
// output element or pair, or per 8 values where rows allow 16-byte accesses; one block per row for
// the norm's reduction).
#include <algorithm>
#include <initializer_list>
#include <utility>

#include "backends/cuda/common/bf16.cuh"
#include "backends/cuda/common/dependent_launch.cuh"
#include "backends/cuda/common/dmma_dots.cuh"
#include "backends/cuda/common/fp8.cuh"
#include "backends/cuda/common/reduce.cuh"
#include "backends/cuda/kernels/elementwise/config.h"
#include "backends/cuda/kernels/elementwise/elementwise.h"
#include "backends/cuda/kernels/linear/wgmma_operand.cuh"
#include "backends/cuda/kernels/linear/wgmma_order.h"

namespace dsinfer::cuda {
namespace {

using namespace common;
using namespace elementwise_config;

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::min<int64_t>((items + kThreads - 1) / kThreads, kMaxBlocks));
}

__global__ void sm90_bf16_embed(EmbedParams p) {
  after_prior_grids();
  const int64_t total = static_cast<int64_t>(p.n) * p.dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / p.dim, j = i % p.dim;
    const int64_t local = p.ids[t] - p.vocab_offset;
    p.out[t * p.out_stride + j] = local >= 0 && local < p.rows ? p.table[local * p.dim + j] : 0;
  }
}

// Row copies: a block per row (grid-stride over rows), 16-byte chunks where every row start is
// 16-byte aligned, else a value at a time. Gather reads row rows[r] into row r; scatter the reverse.
template <bool kGather, bool kVector>
__global__ void sm90_u16_copy_rows(const uint16_t* src, int64_t src_stride, const int32_t* rows, uint16_t* out,
                                   int64_t out_stride, int m, int d) {
  after_prior_grids();
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const uint16_t* from = src + (kGather ? rows[r] : r) * src_stride;
    uint16_t* to = out + (kGather ? r : rows[r]) * out_stride;
    if constexpr (kVector) {
      for (int j = threadIdx.x; j < d / 8; j += blockDim.x)
        reinterpret_cast<uint4*>(to)[j] = reinterpret_cast<const uint4*>(from)[j];
    } else {
      for (int j = threadIdx.x; j < d; j += blockDim.x) to[j] = from[j];
    }
  }
}

__global__ void sm90_f32_scatter_add(ScatterAddParams p) {
  after_prior_grids();
  const int64_t total = static_cast<int64_t>(p.m) * p.d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.d, j = i % p.d, row = p.rows[r];
    float& acc = p.acc[row * p.acc_stride + j];
    acc = acc + bf16_to_float(p.src[r * p.src_stride + j]);
    if (p.out) p.out[row * p.out_stride + j] = float_to_bf16(acc);
  }
}

// A block per row. kVector: the row's x and weight as 16-byte chunks (8 values), every chunk of
// both loaded at once into registers (rows of up to kNormMaxChunks * kThreads * 8 values), so a
// call costs about one memory latency; otherwise a value at a time. Every element's arithmetic is
// the same either way.
template <bool kVector>
__global__ void sm90_bf16_rms_norm(RmsNormParams p) {
  after_prior_grids();
  __shared__ double partial[kThreads / 32];
  const int64_t row = blockIdx.x;
  const uint16_t* x = p.x + row * p.x_stride;
  uint16_t* out = p.out + row * p.out_stride;
  if constexpr (kVector) {
    const int chunks = p.d / 8;
    uint4 xv[kNormMaxChunks], wv[kNormMaxChunks];
#pragma unroll
    for (int u = 0; u < kNormMaxChunks; ++u) {
      const int c = threadIdx.x + u * kThreads;
      xv[u] = c < chunks ? reinterpret_cast<const uint4*>(x)[c] : make_uint4(0, 0, 0, 0);
      wv[u] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(p.weight) + c) : make_uint4(0, 0, 0, 0);
    }
    double ss = 0;
#pragma unroll
    for (int u = 0; u < kNormMaxChunks; ++u) {
      const uint32_t words[4] = {xv[u].x, xv[u].y, xv[u].z, xv[u].w};
#pragma unroll
      for (int h = 0; h < 8; ++h) {
        const double v = bf16_to_float(static_cast<uint16_t>(words[h / 2] >> (16 * (h % 2))));
        ss += v * v;  // exact: a bf16 squared fits a double (zero chunks past the row add nothing)
      }
    }
    const double total = block_sum_of_warps<kThreads>(ss, partial);
    const float r = 1.0f / sqrtf(static_cast<float>(total) / static_cast<float>(p.d) + p.eps);
#pragma unroll
    for (int u = 0; u < kNormMaxChunks; ++u) {
      const int c = threadIdx.x + u * kThreads;
      if (c >= chunks) break;
      const uint32_t xw[4] = {xv[u].x, xv[u].y, xv[u].z, xv[u].w}, ww[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
      uint32_t o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t two = 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float normed = bf16_to_float(static_cast<uint16_t>(xw[q] >> (16 * h))) * r;
          const float w = bf16_to_float(static_cast<uint16_t>(ww[q] >> (16 * h)));
          two |= static_cast<uint32_t>(float_to_bf16(normed * w)) << (16 * h);
        }
        o[q] = two;
      }
      reinterpret_cast<uint4*>(out)[c] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  } else {
    double ss = 0;
    for (int j = threadIdx.x; j < p.d; j += blockDim.x) {
      const double v = bf16_to_float(x[j]);
      ss += v * v;  // exact: a bf16 squared fits a double
    }
    // Warp sums, then the warps' (exact in double: any order); one barrier instead of a tree's eight.
    const double total = block_sum_of_warps<kThreads>(ss, partial);
    const float r = 1.0f / sqrtf(static_cast<float>(total) / static_cast<float>(p.d) + p.eps);
    __syncthreads();  // every thread has read x's row before any writes it (out may alias x)
    for (int j = threadIdx.x; j < p.d; j += blockDim.x) {
      const float normed = bf16_to_float(x[j]) * r;
      out[j] = float_to_bf16(normed * bf16_to_float(p.weight[j]));
    }
  }
}

__global__ void sm90_bf16_rope(RopeParams p) {
  after_prior_grids();
  const int64_t total = static_cast<int64_t>(p.n) * p.heads * p.half;
  const int first = p.d - 2 * p.half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / (static_cast<int64_t>(p.heads) * p.half);
    const int h = static_cast<int>((i / p.half) % p.heads), k = static_cast<int>(i % p.half);
    uint16_t* v = p.x + t * p.x_stride + h * p.head_stride + first;
    const float c = p.cos[t * p.table_stride + k], s = p.sin[t * p.table_stride + k];
    const float re = bf16_to_float(v[2 * k]), im = bf16_to_float(v[2 * k + 1]);
    const float rc = re * c, is = im * s, rs = re * s, ic = im * c;  // four products, then one add each
    v[2 * k] = float_to_bf16(p.inverse ? rc + is : rc - is);
    v[2 * k + 1] = float_to_bf16(p.inverse ? ic - rs : rs + ic);
  }
}

// The 8-wide row kernels: a thread per 8 consecutive values of a row (one 16-byte load of each
// input, one store), where every row's dim is a multiple of 8 and its start 16-byte aligned; else a
// thread per value. Every value's arithmetic is the same either way.
struct Eight {
  float v[8];
};

__device__ inline Eight unpack8(uint4 w) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  Eight e;
#pragma unroll
  for (int h = 0; h < 8; ++h) e.v[h] = bf16_to_float(static_cast<uint16_t>(words[h / 2] >> (16 * (h % 2))));
  return e;
}

__device__ inline uint4 pack8(const Eight& e) {
  uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q)
    w[q] = static_cast<uint32_t>(float_to_bf16(e.v[2 * q])) | static_cast<uint32_t>(float_to_bf16(e.v[2 * q + 1]))
                                                                  << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ inline uint4 load8(const uint16_t* at) {
  return *reinterpret_cast<const uint4*>(at);
}
__device__ inline void store8(uint16_t* at, uint4 w) {
  *reinterpret_cast<uint4*>(at) = w;
}

__device__ inline float swiglu_value(float g, float u, const SwigluParams& p, int64_t t) {
  if (p.limit > 0) u = fminf(fmaxf(u, -p.limit), p.limit), g = fminf(g, p.limit);
  float act = g * (1.0f / (1.0f + expf(-g))) * u;
  if (p.row_weight) act = act * p.row_weight[t];
  return act;
}

template <int kWidth>
__global__ void sm90_bf16_swiglu(SwigluParams p) {
  after_prior_grids();
  const int64_t per_row = p.f / kWidth, total = static_cast<int64_t>(p.n) * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, j = i % per_row * kWidth;
    const uint16_t *gate = p.gate + t * p.gate_stride + j, *up = p.up + t * p.up_stride + j;
    uint16_t* out = p.out + t * p.out_stride + j;
    if constexpr (kWidth == 8) {
      const Eight g = unpack8(load8(gate)), u = unpack8(load8(up));
      Eight act;
#pragma unroll
      for (int h = 0; h < 8; ++h) act.v[h] = swiglu_value(g.v[h], u.v[h], p, t);
      store8(out, pack8(act));
    } else {
      *out = float_to_bf16(swiglu_value(bf16_to_float(*gate), bf16_to_float(*up), p, t));
    }
  }
}

// The same, its bf16 result quantised as act_quant would (common::act_quant_eight: four lanes a
// group of 32) into the wgmma kernel's operand: the routed experts' w2 input in one kernel, not two.
// Every lane of a warp runs the loop alike (the group's shuffles); lanes past the end carry zeros.
__global__ void sm90_bf16_swiglu_operand(SwigluParams p) {
  after_prior_grids();
  const int64_t per_row = p.f / 8, total = static_cast<int64_t>(p.n) * per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x - threadIdx.x % kWarp; base < total;
       base += step) {
    const int64_t i = base + threadIdx.x % kWarp;
    const bool valid = i < total;
    const int64_t t = valid ? i / per_row : 0, j = valid ? i % per_row * 8 : 0;
    float x[8] = {};
    if (valid) {
      const Eight g = unpack8(load8(p.gate + t * p.gate_stride + j)), u = unpack8(load8(p.up + t * p.up_stride + j));
#pragma unroll
      for (int h = 0; h < 8; ++h) x[h] = bf16_to_float(float_to_bf16(swiglu_value(g.v[h], u.v[h], p, t)));
    }
    uint32_t codes[2], pairs[4];
    const unsigned e = act_quant_eight(x, codes);
    act_quant_eight_bf16(codes, e, pairs);
    // The operand's columns j .. j + 7: a row's span of 64 is eight consecutive lanes (f is a
    // multiple of 64 and the warp's first value a multiple of 32).
    const uint4 operand = wgmma_operand_sixteen_bytes(pairs);
    if (valid) *reinterpret_cast<uint4*>(p.operand + t * p.f + j) = operand;
  }
}

template <int kWidth>
__global__ void sm90_bf16_hc_pre(HcPreParams p) {
  after_prior_grids();
  const int64_t per_row = p.dim / kWidth, total = static_cast<int64_t>(p.n) * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, d = i % per_row * kWidth;
    const uint16_t* x = p.x + t * p.x_stride + d;
    const float* pre = p.pre + t * p.hc;
    uint16_t* out = p.out + t * p.out_stride + d;
    if constexpr (kWidth == 8) {
      Eight y{};
      for (int c = 0; c < p.hc; ++c) {
        const Eight xc = unpack8(load8(x + c * p.dim));
#pragma unroll
        for (int h = 0; h < 8; ++h) y.v[h] = y.v[h] + pre[c] * xc.v[h];
      }
      store8(out, pack8(y));
    } else {
      float y = 0.0f;
      for (int c = 0; c < p.hc; ++c) y = y + pre[c] * bf16_to_float(x[c * p.dim]);
      *out = float_to_bf16(y);
    }
  }
}

// One thread per (token, kWidth positions): all hc outputs of those positions, so the residual
// columns it reads are the ones it writes (out may alias residual). The loops run to kMaxHc with
// the copies past hc skipped, so that the residual's copies stay in registers (a loop bounded by
// hc alone put them on the stack); the mixes are read-only here (__ldg), so an output's loads need
// not wait for the stores before it.
template <int kWidth>
__global__ void sm90_bf16_hc_post(HcPostParams p) {
  after_prior_grids();
  const int64_t per_row = p.dim / kWidth, total = static_cast<int64_t>(p.n) * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, d = i % per_row * kWidth;
    const uint16_t* r = p.residual + t * p.residual_stride + d;
    const uint16_t* sub_at = p.sub + t * p.sub_stride + d;
    const float* comb = p.comb + t * p.hc * p.hc;
    const float* post = p.post + t * p.hc;
    uint16_t* out = p.out + t * p.out_stride + d;
    const auto weights = [&](int j, float(&w)[kMaxHc]) {  // column j of the combination
#pragma unroll
      for (int c = 0; c < kMaxHc; ++c) w[c] = c < p.hc ? __ldg(comb + c * p.hc + j) : 0.0f;
    };
    if constexpr (kWidth == 8) {
      Eight rv[kMaxHc];
#pragma unroll
      for (int c = 0; c < kMaxHc; ++c)
        if (c < p.hc) rv[c] = unpack8(load8(r + c * p.dim));
      const Eight sub = unpack8(load8(sub_at));
#pragma unroll
      for (int j = 0; j < kMaxHc; ++j) {
        if (j >= p.hc) break;
        float w[kMaxHc];
        weights(j, w);
        const float pj = __ldg(post + j);
        Eight o;
#pragma unroll
        for (int h = 0; h < 8; ++h) {
          float s = 0.0f;
#pragma unroll
          for (int c = 0; c < kMaxHc; ++c)
            if (c < p.hc) s = s + w[c] * rv[c].v[h];
          o.v[h] = pj * sub.v[h] + s;
        }
        store8(out + j * p.dim, pack8(o));
      }
    } else {
      float rv[kMaxHc];
#pragma unroll
      for (int c = 0; c < kMaxHc; ++c) rv[c] = c < p.hc ? bf16_to_float(r[c * p.dim]) : 0.0f;
      const float sub = bf16_to_float(*sub_at);
#pragma unroll
      for (int j = 0; j < kMaxHc; ++j) {
        if (j >= p.hc) break;
        float w[kMaxHc];
        weights(j, w);
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxHc; ++c)
          if (c < p.hc) s = s + w[c] * rv[c];
        out[j * p.dim] = float_to_bf16(__ldg(post + j) * sub + s);
      }
    }
  }
}

__global__ void sm90_f32_compress_pool(CompressPoolParams p) {
  after_prior_grids();
  const int64_t total = static_cast<int64_t>(p.groups) * p.d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / p.d, c = i % p.d;
    const float* kv = p.kv + g * 2 * p.d;
    const float* sc = p.score + g * 2 * p.d;
    const float m = fmaxf(sc[c], sc[p.d + c]);
    const float e0 = expf(sc[c] - m), e1 = expf(sc[p.d + c] - m);
    const float sum = e0 + e1;
    p.out[i] = float_to_bf16(kv[c] * (e0 / sum) + kv[p.d + c] * (e1 / sum));
  }
}

__global__ void sm90_bf16_engram_gate(EngramGateParams p) {
  after_prior_grids();
  __shared__ double scratch[kThreads];
  const int64_t t = blockIdx.x / p.hc;
  const int c = static_cast<int>(blockIdx.x % p.hc);
  uint16_t* x = p.x + t * p.x_stride + static_cast<int64_t>(c) * p.dim;
  const uint16_t* key = p.kv + t * p.kv_stride + static_cast<int64_t>(c) * p.dim;
  const uint16_t* value = p.kv + t * p.kv_stride + static_cast<int64_t>(p.hc) * p.dim;
  double hh = 0, kk = 0, dot = 0;
  for (int d = threadIdx.x; d < p.dim; d += blockDim.x) {
    const float h = bf16_to_float(x[d]), k = bf16_to_float(key[d]);
    hh += static_cast<double>(h) * h, kk += static_cast<double>(k) * k;
    dot += (h * p.wgt[static_cast<int64_t>(c) * p.dim + d]) * k;  // (h * wgt) rounded, times key rounded
  }
  hh = block_sum_tree<kThreads>(hh, scratch), kk = block_sum_tree<kThreads>(kk, scratch),
  dot = block_sum_tree<kThreads>(dot, scratch);
  const float inv_sqrt_dim = static_cast<float>(1.0 / sqrt(static_cast<double>(p.dim)));
  const float rstd = (1.0f / sqrtf(static_cast<float>(hh) / static_cast<float>(p.dim) + p.norm_eps)) *
                     (1.0f / sqrtf(static_cast<float>(kk) / static_cast<float>(p.dim) + p.norm_eps));
  const float dv = static_cast<float>(dot) * rstd * inv_sqrt_dim;
  const float sv = copysignf(sqrtf(fmaxf(fabsf(dv), 1e-6f)), dv);
  float gate = 1.0f / (1.0f + expf(-sv));
  if (p.live && !p.live[t]) gate = 0.0f;
  for (int d = threadIdx.x; d < p.dim; d += blockDim.x)
    x[d] = float_to_bf16(bf16_to_float(x[d]) + gate * bf16_to_float(value[d]));
}

// Steps of at least this many tokens (prefill) take the tiled kernel on the fp64 tensor cores
// (common/dmma_dots.cuh): a block per kHcTileTokens tokens, chunk of the row and kDotOutputs
// projections. Fewer take a block per (token, projection or the norm, chunk of the row), which
// fills the GPU at decode's batches (the tiled kernel's few blocks do not). Both split a row into
// kMaxHcChunks chunks whatever the step's size, but sum a chunk in different orders: a total can
// differ in its last double bits between a step under and over kHcTiledTokens tokens.
constexpr int kHcTiledTokens = 128;
constexpr int kHcMTiles = 2;  // m8 tiles of tokens a warp
constexpr int kHcTileTokens = dot_tile_tokens<kHcMTiles>();

bool hc_tiled(const HcMixesParams& p) {
  const int64_t width = static_cast<int64_t>(p.hc) * p.dim;
  return p.n >= kHcTiledTokens && width % 8 == 0 && dmma_dots_aligned(p.x, p.x_stride, 2) &&
         dmma_dots_aligned(p.fn, width, 4);
}

__global__ void __launch_bounds__(kDotThreads, 2) sm90_bf16_hc_mixes_dots_tiled(HcMixesParams p) {
  after_prior_grids();
  extern __shared__ __align__(16) uint8_t smem[];
  const int mix = (2 + p.hc) * p.hc, outputs = mix + 1, ch = static_cast<int>(blockIdx.y);
  const int first = static_cast<int>(blockIdx.z) * kDotOutputs;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kHcTileTokens;
  const int tokens = p.n - t0 < kHcTileTokens ? static_cast<int>(p.n - t0) : kHcTileTokens;
  // Chunks of whole 8-value pieces (the copies' 16 bytes).
  const int64_t width = static_cast<int64_t>(p.hc) * p.dim;
  const int64_t span = ((width + kMaxHcChunks - 1) / kMaxHcChunks + 7) / 8 * 8;
  const int64_t begin = ch * span < width ? ch * span : width, end = begin + span < width ? begin + span : width;
  const bool squares = blockIdx.z == 0;  // the norm's sum of squares, once a token
  double acc[kHcMTiles][4][2] = {}, sq[kHcMTiles] = {};
  dmma_dots<kHcMTiles>(p.x + t0 * p.x_stride, p.x_stride, tokens, p.fn + first * width, width,
                       mix - first < kDotOutputs ? mix - first : kDotOutputs, begin, end, squares, smem, acc, sq);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int m = 0; m < kHcMTiles; ++m) {
    const int token = warp * 8 * kHcMTiles + m * 8 + g;
    double* out = p.partial + (t0 + token) * outputs * kMaxHcChunks + ch;
    const bool live = token < tokens;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int o = first + n * 8 + 2 * t + e;
        if (live && o < mix) out[o * kMaxHcChunks] = acc[m][n][e];
      }
    if (squares) {  // the four lanes' columns of the token, in a fixed tree
      double s = sq[m];
      s += __shfl_xor_sync(kFullMask, s, 1);
      s += __shfl_xor_sync(kFullMask, s, 2);
      if (live && t == 0) out[mix * kMaxHcChunks] = s;
    }
  }
}

// Decode's dots: a block per (kTokens tokens, projection or the norm, chunk of the row), each fn
// value loaded once for the block's tokens (a step of 64 read the 1.5 MB matrix 64 times with a
// block a token). A token's chunk is summed as by a block of its own, whatever kTokens: a thread's
// values in order, then block_sum_tree's tree, so its sums do not depend on the tokens beside it.
template <int kTokens>
__global__ void __launch_bounds__(kThreads) sm90_bf16_hc_mixes_dots(HcMixesParams p) {
  after_prior_grids();
  constexpr int chunks = kMaxHcChunks;
  __shared__ double scratch[kTokens * kThreads];
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int tokens = static_cast<int>(min(static_cast<int64_t>(kTokens), p.n - t0));
  const int o = static_cast<int>(blockIdx.y), mix = (2 + p.hc) * p.hc, ch = static_cast<int>(blockIdx.z);
  const int64_t width = static_cast<int64_t>(p.hc) * p.dim, span = (width + chunks - 1) / chunks;
  const int64_t end = min(width, (ch + 1) * span);
  const uint16_t* x = p.x + t0 * p.x_stride;
  double sum[kTokens] = {};
  for (int64_t j = ch * span + threadIdx.x; j < end; j += blockDim.x) {
    const double f = o == mix ? 0.0 : static_cast<double>(p.fn[o * width + j]);
#pragma unroll
    for (int u = 0; u < kTokens; ++u) {
      if (u >= tokens) break;
      const double v = bf16_to_float(x[u * p.x_stride + j]);
      sum[u] += o == mix ? v * v : f * v;  // exact products
    }
  }
  block_sum_trees<kThreads>(sum, scratch);
  if (threadIdx.x < tokens) {
    double total = sum[0];
#pragma unroll
    for (int u = 1; u < kTokens; ++u) total = threadIdx.x == u ? sum[u] : total;
    p.partial[((t0 + threadIdx.x) * (mix + 1) + o) * chunks + ch] = total;
  }
}

// Element x of the combination, held in slot x / 32 of lane x % 32 (every lane of the warp calls it).
template <int kSlots>
__device__ inline float element_of(const float (&c)[kSlots], int x) {
  float v = __shfl_sync(kFullMask, c[0], x % kWarp);
  if constexpr (kSlots == 2) {
    const float v1 = __shfl_sync(kFullMask, c[1], x % kWarp);
    v = x < kWarp ? v : v1;
  }
  return v;
}

// Divides each element by its row's (or column's) sum plus eps, every sum formed from the elements
// before any changes, in index order (the CPU's). kHc: hc where known at compile time (0: `hc`),
// so that a sum's shuffles are issued together.
template <int kSlots, int kHc>
__device__ inline void normalise(float (&c)[kSlots], int hc_, bool rows, float eps) {
  const int lane = static_cast<int>(threadIdx.x), hc = kHc > 0 ? kHc : hc_;
  float sum[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int e = min(s * kWarp + lane, hc * hc - 1), first = rows ? e / hc * hc : e % hc, step = rows ? 1 : hc;
    sum[s] = 0;
    for (int k = 0; k < hc; ++k) sum[s] += element_of(c, first + k * step);
  }
#pragma unroll
  for (int s = 0; s < kSlots; ++s) c[s] = c[s] / (sum[s] + eps);
}

// One warp per token: the gates and Sinkhorn in fp32, the combination's elements in the lanes'
// registers (kSlots a lane) and their row and column sums gathered by shuffles, so its 2 x 20
// rounds need no barrier. Every element sees the CPU's operations in the CPU's order (each sum in
// index order), so the result is the sequential loop's. First the projections' and the norm's
// partial sums, added up in double in chunk order.
template <int kSlots, int kHc>
__global__ void __launch_bounds__(kWarp) sm90_f32_hc_mixes_sinkhorn(HcMixesParams p) {
  after_prior_grids();
  constexpr int chunks = kMaxHcChunks;
  __shared__ float m[kMaxMix];
  __shared__ double sums[kMaxMix + 1], staged[(kMaxMix + 1) * kMaxHcChunks];
  const int64_t t = blockIdx.x;
  const int hc = kHc > 0 ? kHc : p.hc, mix = (2 + hc) * hc, lane = static_cast<int>(threadIdx.x);
  // The gates' scales and biases first, so that their loads overlap the partial sums'.
  const float scale0 = p.scale[0], scale1 = p.scale[1], scale2 = p.scale[2];
  const float base_pre = lane < hc ? p.base[lane] : 0.0f, base_post = lane < hc ? p.base[hc + lane] : 0.0f;
  float base_comb[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) base_comb[s] = s * kWarp + lane < hc * hc ? p.base[2 * hc + s * kWarp + lane] : 0.0f;
  // The token's partial sums staged with every load in flight at once (a thread adding its own
  // chunks would wait for each load in turn).
  const int count = (mix + 1) * chunks;
  const double* partial = p.partial + t * count;
  for (int i0 = 0; i0 < count; i0 += kWarp * kStageBatch) {
    double v[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int idx = i0 + u * kWarp + lane;
      v[u] = idx < count ? __ldg(partial + idx) : 0.0;
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int idx = i0 + u * kWarp + lane;
      if (idx < count) staged[idx] = v[u];
    }
  }
  __syncwarp();
  for (int o = lane; o <= mix; o += kWarp) {
    double s = 0;
    for (int ch = 0; ch < chunks; ++ch) s += staged[o * chunks + ch];
    sums[o] = s;
  }
  __syncwarp();
  const float width = static_cast<float>(hc * p.dim);
  const float r = 1.0f / sqrtf(static_cast<float>(sums[mix]) / width + p.norm_eps);
  for (int o = lane; o < mix; o += kWarp) m[o] = static_cast<float>(sums[o]) * r;
  __syncwarp();
  const float eps = p.hc_eps;
  if (lane < hc) {
    p.pre[t * hc + lane] = 1.0f / (1.0f + expf(-(m[lane] * scale0 + base_pre))) + eps;
    p.post[t * hc + lane] = 2.0f * (1.0f / (1.0f + expf(-(m[hc + lane] * scale1 + base_post))));
  }
  float c[kSlots], v[kSlots];  // elements past hc * hc: idle copies of the last
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int e = min(s * kWarp + lane, hc * hc - 1);
    c[s] = m[2 * hc + e] * scale2 + base_comb[s];
  }
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {  // the row softmax, + eps
    const int first = min(s * kWarp + lane, hc * hc - 1) / hc * hc;
    float mx = element_of(c, first);
    for (int k = 1; k < hc; ++k) mx = fmaxf(mx, element_of(c, first + k));
    v[s] = expf(c[s] - mx);
  }
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int first = min(s * kWarp + lane, hc * hc - 1) / hc * hc;
    float sum = 0;
    for (int k = 0; k < hc; ++k) sum += element_of(v, first + k);
    c[s] = v[s] / sum + eps;
  }
  for (int it = 0; it < p.sinkhorn_iters; ++it) {
    if (it > 0) normalise<kSlots, kHc>(c, hc, /*rows=*/true, eps);
    normalise<kSlots, kHc>(c, hc, /*rows=*/false, eps);
  }
#pragma unroll
  for (int s = 0; s < kSlots; ++s)
    if (s * kWarp + lane < hc * hc) p.comb[t * hc * hc + s * kWarp + lane] = c[s];
}

// Eight codes a thread (a scale's block is four threads'), 8 bytes in and 16 out: the table's values
// as they are.
__global__ void __launch_bounds__(kThreads) sm90_bf16_decode_rows(DecodeRowsParams p) {
  after_prior_grids();
  const int per_row = p.d / 8;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(p.n) * per_row) return;
  const int64_t row = i / per_row;
  const int j = static_cast<int>(i % per_row) * 8;
  const uint16_t* values = p.values + p.scales[row * p.scales_stride + j / 32] * 256;
  const uint2 c = *reinterpret_cast<const uint2*>(p.codes + row * p.codes_stride + j);
  const uint32_t words[2] = {c.x, c.y};
  uint32_t pairs[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t w = words[q / 2] >> (16 * (q % 2));
    pairs[q] = uint32_t{values[w & 0xFFu]} | uint32_t{values[(w >> 8) & 0xFFu]} << 16;
  }
  *reinterpret_cast<uint4*>(p.out + row * p.out_stride + j) = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
}

}  // namespace

cudaError_t launch_decode_rows(const DecodeRowsParams& p) {
  const auto aligned = [](const void* v, int bytes) { return reinterpret_cast<uintptr_t>(v) % bytes == 0; };
  if (p.n < 0 || p.d <= 0 || p.d % 32 != 0 || !aligned(p.codes, 8) || p.codes_stride % 8 != 0 || !aligned(p.out, 16) ||
      p.out_stride % 8 != 0)
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  return launch_kernel(sm90_bf16_decode_rows, blocks_for(static_cast<int64_t>(p.n) * (p.d / 8)), kThreads, 0, p.stream,
                       p);
}

cudaError_t launch_compress_pool(const CompressPoolParams& p) {
  if (p.groups < 0 || p.d <= 0) return cudaErrorInvalidValue;
  if (p.groups == 0) return cudaSuccess;
  return launch_kernel(sm90_f32_compress_pool, blocks_for(static_cast<int64_t>(p.groups) * p.d), kThreads, 0, p.stream,
                       p);
}

cudaError_t launch_engram_gate(const EngramGateParams& p) {
  if (p.n < 0 || p.hc <= 0 || p.dim <= 0) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  return launch_kernel(sm90_bf16_engram_gate, static_cast<unsigned>(static_cast<int64_t>(p.n) * p.hc), kThreads, 0,
                       p.stream, p);
}

cudaError_t launch_hc_mixes(const HcMixesParams& p) {
  if (p.n < 0 || p.hc <= 0 || p.hc > kMaxHc || p.dim <= 0 || p.sinkhorn_iters < 1 || !p.partial)
    return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const int mix = (2 + p.hc) * p.hc, outputs = mix + 1;
  if (hc_tiled(p)) {
    constexpr int smem = dmma_dots_smem_bytes<kHcMTiles, float>();
    static const cudaError_t opt_in =
        cudaFuncSetAttribute(sm90_bf16_hc_mixes_dots_tiled, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (opt_in != cudaSuccess) return opt_in;
    const dim3 grid(static_cast<unsigned>((p.n + kHcTileTokens - 1) / kHcTileTokens),
                    static_cast<unsigned>(kMaxHcChunks), static_cast<unsigned>((mix + kDotOutputs - 1) / kDotOutputs));
    if (const cudaError_t e = launch_kernel(sm90_bf16_hc_mixes_dots_tiled, grid, kDotThreads, smem, p.stream, p);
        e != cudaSuccess)
      return e;
  } else {
    // Steps of a few tokens keep a block a token (no idle sums); the sums are the same either way.
    const bool grouped = p.n >= kMixTokens;
    const int64_t groups = grouped ? (p.n + kMixTokens - 1) / kMixTokens : p.n;
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(outputs), static_cast<unsigned>(kMaxHcChunks));
    if (const cudaError_t e = grouped
                                  ? launch_kernel(sm90_bf16_hc_mixes_dots<kMixTokens>, grid, kThreads, 0, p.stream, p)
                                  : launch_kernel(sm90_bf16_hc_mixes_dots<1>, grid, kThreads, 0, p.stream, p);
        e != cudaSuccess)
      return e;
  }
  if (p.hc == 4)  // V4.1's
    return launch_kernel(sm90_f32_hc_mixes_sinkhorn<1, 4>, static_cast<unsigned>(p.n), kWarp, 0, p.stream, p);
  if (p.hc * p.hc <= kWarp)
    return launch_kernel(sm90_f32_hc_mixes_sinkhorn<1, 0>, static_cast<unsigned>(p.n), kWarp, 0, p.stream, p);
  return launch_kernel(sm90_f32_hc_mixes_sinkhorn<2, 0>, static_cast<unsigned>(p.n), kWarp, 0, p.stream, p);
}

size_t hc_mixes_workspace_bytes(const HcMixesParams& p) {
  return static_cast<size_t>(p.n) * ((2 + p.hc) * p.hc + 1) * kMaxHcChunks * sizeof(double);
}

cudaError_t launch_embed(const EmbedParams& p) {
  if (p.n < 0 || p.dim <= 0) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  return launch_kernel(sm90_bf16_embed, blocks_for(static_cast<int64_t>(p.n) * p.dim), kThreads, 0, p.stream, p);
}

namespace {

// Whether rows of dim values at these starts and strides (in values) take the 16-byte kernels (8
// values a thread, or a row in 16-byte chunks).
bool rows_of_eight(int dim, std::initializer_list<std::pair<const void*, int64_t>> rows) {
  if (dim % 8 != 0) return false;
  for (const auto& [start, stride] : rows)
    if (reinterpret_cast<uintptr_t>(start) % 16 != 0 || stride % 8 != 0) return false;
  return true;
}

}  // namespace

template <bool kGather>
cudaError_t launch_copy_rows(const uint16_t* src, int64_t src_stride, const int32_t* rows, uint16_t* out,
                             int64_t out_stride, int m, int d, cudaStream_t stream) {
  if (m < 0 || d <= 0) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  const bool vector = rows_of_eight(d, {{src, src_stride}, {out, out_stride}});
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(m, kMaxBlocks));
  if (vector)
    return launch_kernel(sm90_u16_copy_rows<kGather, true>, blocks, kThreads, 0, stream, src, src_stride, rows, out,
                         out_stride, m, d);
  return launch_kernel(sm90_u16_copy_rows<kGather, false>, blocks, kThreads, 0, stream, src, src_stride, rows, out,
                       out_stride, m, d);
}

cudaError_t launch_gather_rows(const GatherRowsParams& p) {
  return launch_copy_rows<true>(p.src, p.src_stride, p.rows, p.out, p.out_stride, p.m, p.d, p.stream);
}

cudaError_t launch_scatter_rows(const ScatterRowsParams& p) {
  return launch_copy_rows<false>(p.src, p.src_stride, p.rows, p.out, p.out_stride, p.m, p.d, p.stream);
}

cudaError_t launch_scatter_add(const ScatterAddParams& p) {
  if (p.m < 0 || p.d <= 0) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  return launch_kernel(sm90_f32_scatter_add, blocks_for(static_cast<int64_t>(p.m) * p.d), kThreads, 0, p.stream, p);
}

cudaError_t launch_rms_norm(const RmsNormParams& p) {
  if (p.n < 0 || p.d <= 0) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const bool vector = p.d <= kNormMaxChunks * kThreads * 8 &&
                      rows_of_eight(p.d, {{p.x, p.x_stride}, {p.out, p.out_stride}, {p.weight, 0}});
  if (vector) return launch_kernel(sm90_bf16_rms_norm<true>, static_cast<unsigned>(p.n), kThreads, 0, p.stream, p);
  return launch_kernel(sm90_bf16_rms_norm<false>, static_cast<unsigned>(p.n), kThreads, 0, p.stream, p);
}

cudaError_t launch_rope(const RopeParams& p) {
  if (p.n < 0 || p.half < 0 || 2 * p.half > p.d) return cudaErrorInvalidValue;
  if (p.n == 0 || p.half == 0) return cudaSuccess;
  return launch_kernel(sm90_bf16_rope, blocks_for(static_cast<int64_t>(p.n) * p.heads * p.half), kThreads, 0, p.stream,
                       p);
}

template <typename Params>
cudaError_t launch_rows(void (*eight)(Params), void (*one)(Params), bool wide, int64_t values, const Params& p) {
  if (wide) return launch_kernel(eight, blocks_for(values / 8), kThreads, 0, p.stream, p);
  return launch_kernel(one, blocks_for(values), kThreads, 0, p.stream, p);
}

cudaError_t launch_swiglu(const SwigluParams& p) {
  if (p.n < 0 || p.f <= 0) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  if (p.operand) {
    if (p.f % kWgmmaOrderSpan != 0 || reinterpret_cast<uintptr_t>(p.operand) % 16 != 0 ||
        !rows_of_eight(p.f, {{p.gate, p.gate_stride}, {p.up, p.up_stride}}))
      return cudaErrorInvalidValue;
    return launch_kernel(sm90_bf16_swiglu_operand, blocks_for(static_cast<int64_t>(p.n) * p.f / 8), kThreads, 0,
                         p.stream, p);
  }
  const bool wide = rows_of_eight(p.f, {{p.gate, p.gate_stride}, {p.up, p.up_stride}, {p.out, p.out_stride}});
  return launch_rows(sm90_bf16_swiglu<8>, sm90_bf16_swiglu<1>, wide, static_cast<int64_t>(p.n) * p.f, p);
}

cudaError_t launch_hc_pre(const HcPreParams& p) {
  if (p.n < 0 || p.hc <= 0 || p.dim <= 0) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const bool wide = rows_of_eight(p.dim, {{p.x, p.x_stride}, {p.out, p.out_stride}});
  return launch_rows(sm90_bf16_hc_pre<8>, sm90_bf16_hc_pre<1>, wide, static_cast<int64_t>(p.n) * p.dim, p);
}

cudaError_t launch_hc_post(const HcPostParams& p) {
  if (p.n < 0 || p.hc <= 0 || p.hc > kMaxHc || p.dim <= 0) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaSuccess;
  const bool wide =
      rows_of_eight(p.dim, {{p.sub, p.sub_stride}, {p.residual, p.residual_stride}, {p.out, p.out_stride}});
  return launch_rows(sm90_bf16_hc_post<8>, sm90_bf16_hc_post<1>, wide, static_cast<int64_t>(p.n) * p.dim, p);
}

}  // namespace dsinfer::cuda
