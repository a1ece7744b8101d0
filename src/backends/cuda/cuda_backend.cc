// CudaBackend: argument checks and the mapping of each op's views onto its kernel's parameters.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include "backends/cuda/kernels/act_quant/act_quant.h"
#include "backends/cuda/kernels/attention/attention.h"
#include "backends/cuda/kernels/elementwise/elementwise.h"

#include "backends/cuda/kernels/linear/dense.h"
#include "backends/cuda/kernels/linear/dequant.h"
#include "backends/cuda/kernels/linear/linear.h"
#include "backends/cuda/kernels/moe/router.h"
#include "core/check.h"
#include "ops/composite.h"
#include "ops/device_array.h"

namespace dsinfer {
namespace {

// A launch error is a programmer error here (shapes were checked): fail loudly with its name.
void check_launch(cudaError_t e, const char* op) {
  DSINFER_CHECK(e == cudaSuccess, "CUDA {}: {}", op, cudaGetErrorString(e));
}

void check_device(std::initializer_list<const TensorView*> views, const char* op) {
  for (const TensorView* v : views)
    DSINFER_CHECK(!v->data || v->device == Device::kCuda, "CudaBackend::{}: a view is in host memory", op);
}

const uint16_t* bf16(const TensorView& t) {
  return t.as<const uint16_t>();
}

}  // namespace

CudaBackend::CudaBackend(cudaStream_t stream) : stream_(stream) {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  check_launch(cudaGetDevice(&device), "device");
  check_launch(cudaDeviceGetDefaultMemPool(&pool, device), "memory pool");
  uint64_t keep_all = UINT64_MAX;
  check_launch(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), "memory pool");
  staging_.half_bytes = size_t{16} << 20;
  check_launch(cudaMallocHost(&staging_.host, 2 * staging_.half_bytes), "pinned staging");
  for (cudaEvent_t& e : staging_.done) check_launch(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
  const char* graphs = std::getenv("DSINFER_CUDA_GRAPH");
  capture_.enabled = graphs && std::string(graphs) == "1";
  if (const char* r = std::getenv("DSINFER_CUDA_ROUTED_TOKENS")) device_routed_tokens_ = std::max(0, std::atoi(r));
  if (const char* r = std::getenv("DSINFER_CUDA_GEMV_ROWS"))
    gemv_rows_ = std::atoi(r) == 8 ? 8 : std::atoi(r) == 1 ? 1 : 0;
  if (const char* k = std::getenv("DSINFER_CUDA_LINEAR")) {
    const std::string name = k;
    linear_kernel_ = name == "fma"    ? cuda::LinearKernel::kFma
                     : name == "gemv" ? cuda::LinearKernel::kGemv
                     : name == "mma"  ? cuda::LinearKernel::kMma
                                      : cuda::LinearKernel::kAuto;
  }
}

void* CudaBackend::allocate(size_t bytes) {
  ++stats_.allocations;
  void* p = nullptr;
  if (capture_.active) {
    const size_t aligned = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    capture_.needed += aligned;
    if (capture_.used + aligned <= capture_.arena_bytes) {
      p = capture_.arena + capture_.used;
      capture_.used += aligned, ++capture_.live;
      return p;
    }
  }
  if (capture_.active) capture_.keepable = false;  // a graph allocation: freed with the graph, not reused
  check_launch(cudaMallocAsync(&p, bytes ? bytes : 1, stream_), "allocation");
  return p;
}

void CudaBackend::deallocate(void* p) {
  if (in_arena(p)) {
    --capture_.live;
    return;
  }
  check_launch(cudaFreeAsync(p, stream_), "free");
}

void CudaBackend::zero(void* p, size_t bytes) {
  check_launch(cudaMemsetAsync(p, 0, bytes, stream_), "memset");
}

void CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  ++stats_.uploads;
  if (capture_.active && capture_upload(dst, host_src, bytes)) return;
  Staging& st = staging_;
  DSINFER_CHECK(!capture_.active || st.used + bytes <= st.half_bytes,
                "CudaBackend: a captured step's uploads must fit the pinned ring's half");
  if (bytes > st.half_bytes) {  // from pageable memory: returns once the source is staged
    check_launch(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
    return;
  }
  if (st.used + bytes > st.half_bytes) {  // move to the other half once its copies are done
    check_launch(cudaEventRecord(st.done[st.half], stream_), "copy to device");
    st.half ^= 1, st.used = 0;
    check_launch(cudaEventSynchronize(st.done[st.half]), "copy to device");
  }
  uint8_t* staged = st.host + st.half * st.half_bytes + st.used;
  std::memcpy(staged, host_src, bytes);
  check_launch(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  st.used += (bytes + 255) / 256 * 256;
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  DSINFER_CHECK(!capture_.active, "CudaBackend: a captured step may not read device memory back");
  ++stats_.downloads;
  const auto t0 = std::chrono::steady_clock::now();
  check_launch(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  check_launch(cudaStreamSynchronize(stream_), "copy to host");
  stats_.download_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
  ++stats_.device_copies;
  check_launch(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy on device");
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  cudaFreeHost(staging_.host);
  for (cudaEvent_t e : staging_.done) cudaEventDestroy(e);
  for (Scratch* s : {&quant_values_, &quant_codes_, &quant_scales_, &wgmma_, &dense_x_, &hc_mix_, &tc_weights_,
                     &tc_inputs_, &attn_scores_, &router_logits_})
    cudaFree(s->data);
  if (cublas_) cublasDestroy(cublas_);
  for (RouteTable& t : route_tables_) cudaFree(t.device);
  for (const auto& [id, g] : capture_.graphs) cudaGraphExecDestroy(g.exec);
  cudaFree(capture_.arena);
  cudaFreeHost(capture_.uploads);
  if (capture_.ready) cudaEventDestroy(capture_.ready);
  if (capture_.stream) cudaStreamDestroy(capture_.stream);
}

void CudaBackend::launched(cudaError_t e, const char* op) {
  ++stats_.ops;
  check_launch(e, op);
}

void* CudaBackend::scratch(Scratch& s, size_t bytes) {
  if (bytes > s.bytes) {
    if (capture_.active)  // the graph's earlier nodes read the old buffer: freed once it ran, not kept
      capture_.retired.push_back(s.data), capture_.keepable = false;
    else
      cudaFree(s.data);
    ++capture_.generation;  // kept graphs name the old buffer
    s.data = nullptr;
    check_launch(cudaMalloc(&s.data, bytes), "scratch allocation");
    s.bytes = bytes;
  }
  return s.data;
}

void CudaBackend::embed(const EmbedArgs& a) {
  check_device({&a.ids, &a.table, &a.out}, "embed");
  DSINFER_CHECK(a.table.is_contiguous() && a.out.stride[1] == 1, "embed: contiguous rows only");
  cuda::EmbedParams p;
  p.ids = a.ids.as<const int32_t>(), p.table = bf16(a.table), p.rows = a.table.size(0), p.vocab_offset = a.vocab_offset;
  p.out = a.out.as<uint16_t>(), p.out_stride = a.out.stride[0], p.n = static_cast<int>(a.ids.size(0));
  p.dim = static_cast<int>(a.table.size(1));
  p.stream = stream_;
  launched(cuda::launch_embed(p), "embed");
}

void CudaBackend::rms_norm(const RmsNormArgs& a) {
  check_device({&a.x, &a.weight, &a.out}, "rms_norm");
  cuda::RmsNormParams p;
  p.x = bf16(a.x), p.x_stride = a.x.stride[0], p.weight = bf16(a.weight), p.out = a.out.as<uint16_t>();
  p.out_stride = a.out.stride[0], p.n = static_cast<int>(a.x.size(0)), p.d = static_cast<int>(a.x.size(1));
  p.eps = static_cast<float>(a.eps), p.stream = stream_;
  launched(cuda::launch_rms_norm(p), "rms_norm");
}

void CudaBackend::linear(const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  check_device({&a.x, &w.weight, &w.scale, &a.out}, "linear");
  const int64_t n = a.x.size(0), k = w.in;
  DSINFER_CHECK(a.x.size(1) == k && a.out.size(1) == w.out && a.out.size(0) == n, "linear shapes");
  if (n == 0) return;
  if (n >= kTensorCoreRows && tensor_core_linear(a)) return;
  if (is_block_scaled(w.format)) {
    block_linear({&a, 1});
    return;
  }
  dense_linear({&a, 1});
}

void CudaBackend::dense_linear(std::span<const LinearArgs> ops) {
  const LinearArgs& a = ops[0];
  const LinearWeight& w = *a.w;
  const int64_t n = a.x.size(0), k = w.in, groups = static_cast<int64_t>(ops.size());
  cuda::DenseLinearParams p;
  p.x = a.x.data, p.x_f32 = a.x.dtype == DType::kF32, p.x_stride = a.x.stride[0];
  p.x_f64 = static_cast<double*>(scratch(
      dense_x_, cuda::dense_linear_scratch_bytes(static_cast<int>(n), static_cast<int>(k), static_cast<int>(groups))));
  p.fp8_weights = w.format == LinearFormat::kFp8AsBf16, p.w = w.weight.data, p.w_stride = w.weight.stride[0];
  p.w_scales = w.scale.as<const uint8_t>(), p.s_stride = w.scale.ndim ? w.scale.stride[0] : 0;
  p.y = a.out.data, p.y_f32 = a.out.dtype == DType::kF32, p.y_stride = a.out.stride[0];
  p.n = static_cast<int>(n), p.k = static_cast<int>(k), p.out = static_cast<int>(w.out * groups), p.stream = stream_;
  if (groups > 1) {
    p.group_rows = static_cast<int>(w.out);
    for (int64_t g = 0; g < groups; ++g)
      p.group_w[g] = ops[g].w->weight.data, p.group_scales[g] = ops[g].w->scale.as<const uint8_t>();
  }
  launched(cuda::launch_dense_linear(p), "linear (dense)");
}

// Dense weights of one shape, each against the next columns of one input into the next columns of
// one output (wo_a's groups): one block-diagonal launch.
bool CudaBackend::block_diagonal_dense(std::span<const LinearArgs> ops) {
  const LinearArgs& o0 = ops[0];
  const LinearWeight& w0 = *o0.w;
  const int64_t n = o0.x.size(0), k = w0.in, out = w0.out;
  if (is_block_scaled(w0.format) || n >= kTensorCoreRows || n == 0 ||
      ops.size() > static_cast<size_t>(cuda::DenseLinearParams::kMaxGroups))
    return false;
  const auto at = [](const TensorView& v, const TensorView& v0, int64_t elements) {
    return v.dtype == v0.dtype && v.stride[0] == v0.stride[0] &&
           v.as<const uint8_t>() == v0.as<const uint8_t>() + dtype_bytes(v0.dtype, elements);
  };
  for (size_t g = 0; g < ops.size(); ++g) {
    const LinearArgs& op = ops[g];
    const LinearWeight& w = *op.w;
    if (w.format != w0.format || w.in != k || w.out != out || op.x.size(0) != n ||
        w.weight.stride[0] != w0.weight.stride[0] || w.scale.ndim != w0.scale.ndim ||
        (w.scale.ndim && w.scale.stride[0] != w0.scale.stride[0]) || !at(op.x, o0.x, g * k) ||
        !at(op.out, o0.out, g * out))
      return false;
  }
  for (const LinearArgs& op : ops) check_device({&op.x, &op.w->weight, &op.w->scale, &op.out}, "linear");
  dense_linear(ops);
  return true;
}

bool CudaBackend::tensor_core_linear(const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  const int64_t n = a.x.size(0), k = w.in, o = w.out;
  const bool block_scaled = is_block_scaled(w.format);
  const bool dequantised = block_scaled || w.format == LinearFormat::kFp8AsBf16;
  if (linear_kernel_ != cuda::LinearKernel::kAuto || a.x.dtype != DType::kBF16 || k % 32 != 0 ||
      (a.out.dtype != DType::kBF16 && a.out.dtype != DType::kF32) || (!dequantised && w.weight.dtype != DType::kBF16))
    return false;
  if (!cublas_) {
    DSINFER_CHECK(cublasCreate(&cublas_) == CUBLAS_STATUS_SUCCESS, "cuBLAS could not start");
  }
  DSINFER_CHECK(cublasSetStream(cublas_, stream_) == CUBLAS_STATUS_SUCCESS, "cuBLAS stream");  // a capture's, maybe
  const uint16_t* wb = bf16(w.weight);
  int64_t ldw = w.weight.stride[0];
  if (dequantised) {
    cuda::DequantWeightParams d;
    d.codes = w.weight.as<const uint8_t>(), d.w_stride = w.weight.stride[0], d.scales = w.scale.as<const uint8_t>();
    d.s_stride = w.scale.stride[0], d.fp4 = w.format == LinearFormat::kFp4;
    d.out = static_cast<uint16_t*>(scratch(tc_weights_, o * k * 2)), d.rows = static_cast<int>(o);
    d.k = static_cast<int>(k), d.stream = stream_;
    launched(cuda::launch_dequant_weight(d), "linear (weights to bf16)");
    wb = d.out, ldw = k;
  }
  const uint16_t* xb = bf16(a.x);
  int64_t ldx = a.x.stride[0];
  if (block_scaled) {  // the input as act_quant leaves it: code * scale, exact in bf16
    auto* xq = static_cast<uint16_t*>(scratch(tc_inputs_, n * k * 2));
    check_launch(cudaMemcpy2DAsync(xq, k * 2, xb, ldx * 2, k * 2, n, cudaMemcpyDeviceToDevice, stream_), "linear");
    cuda::ActQuantParams q;
    q.x = q.fake = xq, q.n = n * k, q.stream = stream_;
    launched(cuda::launch_act_quant(q), "linear (input act_quant)");
    xb = xq, ldx = k;
  }
  const float one = 1.0f, zero = 0.0f;
  const bool y32 = a.out.dtype == DType::kF32;
  // Row-major Y[n, o] = X[n, k] W[o, k]^T is column-major Y^T = W^T(op T of W's storage) X^T.
  const cublasStatus_t st = cublasGemmEx(
      cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(o), static_cast<int>(n), static_cast<int>(k), &one, wb,
      CUDA_R_16BF, static_cast<int>(ldw), xb, CUDA_R_16BF, static_cast<int>(ldx), &zero, a.out.data,
      y32 ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(a.out.stride[0]), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  DSINFER_CHECK(st == CUBLAS_STATUS_SUCCESS, "linear: cuBLAS GEMM [{}, {}] x [{}, {}]^T failed ({})", n, k, o, k,
                static_cast<int>(st));
  ++stats_.ops;
  return true;
}

void CudaBackend::grouped_linear(const GroupedLinearArgs& a) {
  const std::span<const LinearArgs> ops = a.ops;
  const auto groupable = [&] {
    if (ops.size() < 2 || ops.size() > static_cast<size_t>(cuda::kMaxLinearGroups)) return false;
    const LinearArgs& o0 = ops[0];
    const LinearWeight& w0 = *o0.w;
    if (!is_block_scaled(w0.format) || o0.x.size(0) == 0) return false;
    if (o0.x.size(0) >= kTensorCoreRows && linear_kernel_ == cuda::LinearKernel::kAuto) return false;  // each on cuBLAS
    for (const LinearArgs& op : ops) {
      const LinearWeight& w = *op.w;
      if (w.format != w0.format || w.in != w0.in || w.out != w0.out || w.weight.stride[0] != w0.weight.stride[0] ||
          w.scale.stride[0] != w0.scale.stride[0] || op.x.size(0) != o0.x.size(0) || op.x.size(1) != w.in ||
          op.out.size(0) != o0.x.size(0) || op.out.size(1) != w.out || op.out.stride[0] != o0.out.stride[0] ||
          op.x.stride[0] != o0.x.stride[0])
        return false;
    }
    return true;
  };
  if (!groupable()) {
    if (ops.size() > 1 && block_diagonal_dense(ops)) return;
    for (const LinearArgs& op : ops) linear(op);
    return;
  }
  block_linear(ops);
}

CudaBackend::Quantized CudaBackend::quant_scratch(int64_t rows, int64_t k) {
  return {static_cast<uint16_t*>(scratch(quant_values_, rows * k * 2)),
          static_cast<uint8_t*>(scratch(quant_codes_, rows * k)),
          static_cast<float*>(scratch(quant_scales_, rows * (k / 32) * 4))};
}

void CudaBackend::block_linear(std::span<const LinearArgs> ops) {
  const LinearWeight& w0 = *ops[0].w;
  const int64_t n = ops[0].x.size(0), k = w0.in;
  // Each distinct input is quantised once, into its slot; inputs that lie back to back in memory
  // (the experts' gathered rows) in one launch.
  std::vector<const uint16_t*> inputs;
  std::vector<int> slot(ops.size());
  for (size_t g = 0; g < ops.size(); ++g) {
    check_device({&ops[g].x, &ops[g].w->weight, &ops[g].w->scale, &ops[g].out}, "linear");
    const uint16_t* x = bf16(ops[g].x);
    const auto it = std::find(inputs.begin(), inputs.end(), x);
    slot[g] = static_cast<int>(it - inputs.begin());
    if (it == inputs.end()) inputs.push_back(x);
  }
  const size_t m = inputs.size();
  const auto [values, codes, scales] = quant_scratch(static_cast<int64_t>(m) * n, k);
  for (size_t i = 0; i < m;) {
    size_t run = 1;  // inputs i .. i + run - 1 are consecutive rows of one array
    while (i + run < m && ops[0].x.stride[0] == k && inputs[i + run] == inputs[i] + run * n * k) ++run;
    cuda::QuantizeInputParams q;
    q.x = inputs[i], q.x_stride = ops[0].x.stride[0], q.n = static_cast<int>(run * n), q.k = static_cast<int>(k);
    q.values = values + i * n * k, q.codes = codes + i * n * k, q.scales = scales + i * n * (k / 32);
    q.stream = stream_;
    launched(cuda::launch_quantize_input(q), "linear (input quantisation)");
    i += run;
  }
  cuda::BlockLinearParams p;
  for (size_t g = 0; g < ops.size(); ++g) {
    const int64_t at = slot[g];
    p.op[g] = {values + at * n * k,
               scales + at * n * (k / 32),
               ops[g].w->weight.as<const uint8_t>(),
               ops[g].w->scale.as<const uint8_t>(),
               ops[g].out.as<uint16_t>(),
               codes + at * n * k};
  }
  p.groups = static_cast<int>(ops.size()), p.n = static_cast<int>(n), p.k = static_cast<int>(k);
  p.out = static_cast<int>(w0.out), p.fp4 = w0.format == LinearFormat::kFp4, p.w_stride = w0.weight.stride[0];
  p.s_stride = w0.scale.stride[0], p.y_stride = ops[0].out.stride[0], p.stream = stream_;
  p.kernel = linear_kernel_;
  p.gemv_rows = gemv_rows_;
  launched(cuda::launch_block_linear(p), "linear");
}

void CudaBackend::rope(const RopeArgs& a) {
  check_device({&a.x, &a.cos, &a.sin}, "rope");
  cuda::RopeParams p;
  p.x = a.x.as<uint16_t>(), p.x_stride = a.x.stride[0], p.head_stride = a.x.stride[1];
  p.cos = a.cos.as<const float>(), p.sin = a.sin.as<const float>(), p.table_stride = a.cos.stride[0];
  DSINFER_CHECK(a.sin.stride[0] == a.cos.stride[0], "rope: cos and sin tables of one layout");
  p.n = static_cast<int>(a.x.size(0)), p.heads = static_cast<int>(a.x.size(1)), p.d = static_cast<int>(a.x.size(2));
  p.half = static_cast<int>(a.cos.size(1)), p.inverse = a.inverse, p.stream = stream_;
  launched(cuda::launch_rope(p), "rope");
}

void CudaBackend::fake_quant(const FakeQuantArgs& a) {
  check_device({&a.x}, "fake_quant");
  const int64_t n = a.x.size(0), d = a.x.size(1);
  if (a.kind == FakeQuant::kFp8Group32) {
    // One launch over contiguous rows, else one per (contiguous) row.
    const bool contiguous = a.x.stride[0] == d;
    for (int64_t i = 0; i < (contiguous ? 1 : n); ++i) {
      cuda::ActQuantParams p;
      p.x = p.fake = a.x.as<uint16_t>() + i * a.x.stride[0];
      p.n = contiguous ? n * d : d, p.stream = stream_;
      launched(cuda::launch_act_quant(p), "fake_quant (fp8)");
    }
    return;
  }
  cuda::Fp4FakeQuantParams p;
  p.x = a.x.as<uint16_t>(), p.stride = a.x.stride[0], p.n = static_cast<int>(n), p.d = static_cast<int>(d);
  p.group = a.kind == FakeQuant::kFp4E4M3Group16 ? 16 : 32, p.e4m3_scale = a.kind == FakeQuant::kFp4E4M3Group16;
  p.stream = stream_;
  launched(cuda::launch_fp4_fake_quant(p), "fake_quant (fp4)");
}

void CudaBackend::hc_mixes(const HcMixesArgs& a) {
  check_device({&a.x, &a.fn, &a.scale, &a.base, &a.pre, &a.post, &a.comb}, "hc_mixes");
  cuda::HcMixesParams p;
  p.x = bf16(a.x), p.x_stride = a.x.stride[0], p.fn = a.fn.as<const float>(), p.scale = a.scale.as<const float>();
  p.base = a.base.as<const float>(), p.norm_eps = static_cast<float>(a.norm_eps),
  p.hc_eps = static_cast<float>(a.hc_eps);
  p.sinkhorn_iters = a.sinkhorn_iters, p.pre = a.pre.as<float>(), p.post = a.post.as<float>(),
  p.comb = a.comb.as<float>();
  p.n = static_cast<int>(a.x.size(0)), p.hc = static_cast<int>(a.x.size(1)), p.dim = static_cast<int>(a.x.size(2));
  p.partial = static_cast<double*>(scratch(hc_mix_, cuda::hc_mixes_workspace_bytes(p)));
  p.stream = stream_;
  launched(cuda::launch_hc_mixes(p), "hc_mixes");
}

void CudaBackend::hc_pre(const HcPreArgs& a) {
  check_device({&a.x, &a.pre, &a.out}, "hc_pre");
  cuda::HcPreParams p;
  p.x = bf16(a.x), p.x_stride = a.x.stride[0], p.pre = a.pre.as<const float>(), p.out = a.out.as<uint16_t>();
  p.out_stride = a.out.stride[0], p.n = static_cast<int>(a.x.size(0)), p.hc = static_cast<int>(a.x.size(1));
  p.dim = static_cast<int>(a.x.size(2)), p.stream = stream_;
  launched(cuda::launch_hc_pre(p), "hc_pre");
}

void CudaBackend::hc_post(const HcPostArgs& a) {
  check_device({&a.sub, &a.residual, &a.post, &a.comb, &a.out}, "hc_post");
  cuda::HcPostParams p;
  p.sub = bf16(a.sub), p.sub_stride = a.sub.stride[0], p.residual = bf16(a.residual);
  p.residual_stride = a.residual.stride[0], p.post = a.post.as<const float>(), p.comb = a.comb.as<const float>();
  p.out = a.out.as<uint16_t>(), p.out_stride = a.out.stride[0], p.n = static_cast<int>(a.residual.size(0));
  p.hc = static_cast<int>(a.residual.size(1)), p.dim = static_cast<int>(a.residual.size(2)), p.stream = stream_;
  launched(cuda::launch_hc_post(p), "hc_post");
}

void CudaBackend::sparse_attn(const SparseAttnArgs& a) {
  check_device({&a.q, &a.window, &a.compressed, &a.idx, &a.sink, &a.out}, "sparse_attn");
  DSINFER_CHECK(a.q.stride[1] == a.q.size(2) && a.out.stride[1] == a.out.size(2), "sparse_attn: heads contiguous");
  cuda::SparseAttnParams p;
  p.q = bf16(a.q), p.q_stride = a.q.stride[0], p.window = bf16(a.window), p.compressed = bf16(a.compressed);
  p.n_win = a.window.ndim ? static_cast<int>(a.window.size(0)) : 0;
  p.n_cmp = a.compressed.ndim ? static_cast<int>(a.compressed.size(0)) : 0;
  p.idx = a.idx.as<const int32_t>(), p.idx_stride = a.idx.stride[0], p.sink = a.sink.as<const float>();
  p.scale = a.scale, p.out = a.out.as<uint16_t>(), p.out_stride = a.out.stride[0];
  p.n = static_cast<int>(a.q.size(0)), p.heads = static_cast<int>(a.q.size(1)), p.d = static_cast<int>(a.q.size(2));
  p.k = static_cast<int>(a.idx.size(1)), p.stream = stream_;
  p.scores = static_cast<float*>(scratch(attn_scores_, cuda::sparse_attn_workspace_bytes(p)));
  launched(cuda::launch_sparse_attn(p), "sparse_attn");
}

void CudaBackend::indexer_scores(const IndexerScoresArgs& a) {
  check_device({&a.q, &a.keys, &a.weights, &a.visible, &a.out, &a.key_rows}, "indexer_scores");
  DSINFER_CHECK(a.q.stride[1] == a.q.size(2), "indexer_scores: heads contiguous");
  cuda::IndexerScoresParams p;
  p.q = bf16(a.q), p.q_stride = a.q.stride[0], p.keys = bf16(a.keys), p.weights = bf16(a.weights);
  p.visible = a.visible.as<const int32_t>(), p.out = a.out.as<float>(), p.out_stride = a.out.stride[0];
  p.n = static_cast<int>(a.q.size(0)), p.heads = static_cast<int>(a.q.size(1)), p.d = static_cast<int>(a.q.size(2));
  p.key_rows = a.key_rows.data ? a.key_rows.as<const int32_t>() : nullptr, p.weight_scale = a.weight_scale;
  p.T = p.key_rows ? static_cast<int>(a.key_rows.size(0)) : a.keys.ndim ? static_cast<int>(a.keys.size(0)) : 0;
  p.stream = stream_;
  launched(cuda::launch_indexer_scores(p), "indexer_scores");
}

void CudaBackend::candidate_blocks(const CandidateBlocksArgs& a) {
  check_device({&a.scores, &a.visible, &a.mask}, "candidate_blocks");
  cuda::CandidateBlocksParams p;
  p.scores = a.scores.as<const float>(), p.score_stride = a.scores.stride[0], p.visible = a.visible.as<const int32_t>();
  p.mask = a.mask.as<uint8_t>(), p.mask_stride = a.mask.stride[0];
  p.n = static_cast<int>(a.scores.size(0)), p.T = static_cast<int>(a.scores.size(1));
  p.block_size = static_cast<int>(a.block_size), p.topk_blocks = static_cast<int>(a.topk_blocks), p.stream = stream_;
  launched(cuda::launch_candidate_blocks(p), "candidate_blocks");
}

void CudaBackend::topk(const TopkArgs& a) {
  check_device({&a.scores, &a.mask, &a.visible, &a.out}, "topk");
  cuda::TopkParams p;
  p.scores = a.scores.as<const float>(), p.score_stride = a.scores.stride[0];
  p.mask = a.mask.data ? a.mask.as<const uint8_t>() : nullptr, p.mask_stride = a.mask.data ? a.mask.stride[0] : 0;
  p.visible = a.visible.as<const int32_t>(), p.out = a.out.as<int32_t>(), p.out_stride = a.out.stride[0];
  p.n = static_cast<int>(a.scores.size(0)), p.T = static_cast<int>(a.scores.size(1));
  p.k = static_cast<int>(a.out.size(1)), p.stream = stream_;
  launched(cuda::launch_topk(p), "topk");
}

void CudaBackend::paged_rows(const PagedRowsArgs& a) {
  check_device({&a.positions, &a.blocks, &a.out}, "paged_rows");
  cuda::PagedRowsParams p;
  p.positions = a.positions.as<const int32_t>(), p.pos_stride = a.positions.stride[0];
  p.blocks = a.blocks.as<const int32_t>(), p.out = a.out.as<int32_t>(), p.out_stride = a.out.stride[0];
  p.n = static_cast<int>(a.positions.size(0)), p.k = static_cast<int>(a.positions.size(1));
  p.rows_per_block = static_cast<int>(a.rows_per_block), p.base = a.base, p.stream = stream_;
  launched(cuda::launch_paged_rows(p), "paged_rows");
}

void CudaBackend::swiglu(const SwigluArgs& a) {
  check_device({&a.gate, &a.up, &a.row_weight, &a.out}, "swiglu");
  cuda::SwigluParams p;
  p.gate = bf16(a.gate), p.up = bf16(a.up), p.gate_stride = a.gate.stride[0], p.up_stride = a.up.stride[0];
  p.row_weight = a.row_weight.as<const float>(), p.limit = a.limit, p.out = a.out.as<uint16_t>();
  p.out_stride = a.out.stride[0], p.n = static_cast<int>(a.gate.size(0)), p.f = static_cast<int>(a.gate.size(1));
  p.stream = stream_;
  launched(cuda::launch_swiglu(p), "swiglu");
}

void CudaBackend::router(const RouterArgs& a) {
  check_device({&a.x, &a.weight, &a.bias, &a.bias_vl, &a.is_image, &a.indices, &a.weights}, "router");
  cuda::RouterParams p;
  p.x = bf16(a.x), p.x_stride = a.x.stride[0], p.weight = a.weight.data, p.weight_f32 = a.weight.dtype == DType::kF32;
  p.w_stride = a.weight.stride[0], p.bias = a.bias.as<const float>(), p.bias_vl = a.bias_vl.as<const float>();
  p.is_image = a.is_image.as<const uint8_t>();
  p.score = a.score == RouterScore::kSqrtSoftplus ? cuda::RouterScoreKind::kSqrtSoftplus
            : a.score == RouterScore::kSigmoid    ? cuda::RouterScoreKind::kSigmoid
                                                  : cuda::RouterScoreKind::kSoftmax;
  p.gate_temp = static_cast<float>(a.gate_temp), p.route_scale = static_cast<float>(a.route_scale);
  p.norm_topk_prob = a.norm_topk_prob, p.given_indices = a.given_indices, p.indices = a.indices.as<int32_t>();
  p.weights = a.weights.as<float>(), p.n = static_cast<int>(a.x.size(0)), p.dim = static_cast<int>(a.x.size(1));
  p.experts = static_cast<int>(a.weight.size(0)), p.k = static_cast<int>(a.indices.size(1)), p.stream = stream_;
  p.logits = static_cast<float*>(scratch(router_logits_, static_cast<size_t>(p.n) * p.experts * sizeof(float)));
  launched(cuda::launch_router(p), "router");
}

void CudaBackend::compress_pool(const CompressPoolArgs& a) {
  check_device({&a.kv, &a.score, &a.out}, "compress_pool");
  DSINFER_CHECK(a.kv.is_contiguous() && a.score.is_contiguous() && a.out.is_contiguous(),
                "compress_pool: contiguous views only");
  cuda::CompressPoolParams p;
  p.kv = a.kv.as<const float>(), p.score = a.score.as<const float>(), p.out = a.out.as<uint16_t>();
  p.groups = static_cast<int>(a.kv.size(0)), p.d = static_cast<int>(a.kv.size(2)), p.stream = stream_;
  launched(cuda::launch_compress_pool(p), "compress_pool");
}

void CudaBackend::engram_gate(const EngramGateArgs& a) {
  check_device({&a.x, &a.kv, &a.wgt, &a.live}, "engram_gate");
  cuda::EngramGateParams p;
  p.x = a.x.as<uint16_t>(), p.x_stride = a.x.stride[0], p.kv = bf16(a.kv), p.kv_stride = a.kv.stride[0];
  p.wgt = a.wgt.as<const float>(), p.live = a.live.as<const uint8_t>(), p.norm_eps = static_cast<float>(a.norm_eps);
  p.n = static_cast<int>(a.x.size(0)), p.hc = static_cast<int>(a.x.size(1)), p.dim = static_cast<int>(a.x.size(2));
  p.stream = stream_;
  launched(cuda::launch_engram_gate(p), "engram_gate");
}

void CudaBackend::gather_rows(const GatherRowsArgs& a) {
  check_device({&a.src, &a.rows, &a.out}, "gather_rows");
  DSINFER_CHECK(a.src.stride[1] == 1 && a.out.stride[1] == 1, "gather_rows: contiguous rows only");
  cuda::GatherRowsParams p;
  p.src = bf16(a.src), p.src_stride = a.src.stride[0], p.rows = a.rows.as<const int32_t>();
  p.out = a.out.as<uint16_t>(), p.out_stride = a.out.stride[0], p.m = static_cast<int>(a.rows.size(0));
  p.d = static_cast<int>(a.src.size(1)), p.stream = stream_;
  launched(cuda::launch_gather_rows(p), "gather_rows");
}

void CudaBackend::scatter_rows(const ScatterRowsArgs& a) {
  check_device({&a.src, &a.rows, &a.out}, "scatter_rows");
  DSINFER_CHECK(a.src.stride[1] == 1 && a.out.stride[1] == 1 && a.src.size(1) == a.out.size(1),
                "scatter_rows: contiguous rows of one width");
  cuda::ScatterRowsParams p;
  p.src = bf16(a.src), p.src_stride = a.src.stride[0], p.rows = a.rows.as<const int32_t>();
  p.out = a.out.as<uint16_t>(), p.out_stride = a.out.stride[0], p.m = static_cast<int>(a.rows.size(0));
  p.d = static_cast<int>(a.src.size(1)), p.stream = stream_;
  launched(cuda::launch_scatter_rows(p), "scatter_rows");
}

void CudaBackend::scatter_add(const ScatterAddArgs& a) {
  check_device({&a.src, &a.rows, &a.acc, &a.out}, "scatter_add");
  cuda::ScatterAddParams p;
  p.src = bf16(a.src), p.src_stride = a.src.stride[0], p.rows = a.rows.as<const int32_t>();
  p.acc = a.acc.as<float>(), p.acc_stride = a.acc.stride[0];
  p.out = a.out.data ? a.out.as<uint16_t>() : nullptr, p.out_stride = a.out.data ? a.out.stride[0] : 0;
  p.m = static_cast<int>(a.rows.size(0)), p.d = static_cast<int>(a.src.size(1)), p.stream = stream_;
  launched(cuda::launch_scatter_add(p), "scatter_add");
}

// The device's table of the experts' weights (w1 and w3 of expert e at 2e and 2e + 1, then w2 of
// expert e at 2E + e), made at a layer's first call; found again by the experts' address and their
// first and last weights (a decode step looks up every layer's: no walk over all the experts).
const CudaBackend::RouteTable& CudaBackend::route_table(std::span<const ExpertWeights> experts) {
  for (const RouteTable& t : route_tables_)
    if (t.experts == experts.data() && t.host.size() == 3 * experts.size() &&
        t.host.front().w == experts.front().w1.weight.as<const uint8_t>() &&
        t.host.back().w == experts.back().w2.weight.as<const uint8_t>())
      return t;
  std::vector<cuda::RoutedWeight> host(3 * experts.size());
  const LinearWeight& w1 = experts[0].w1;
  bool ok = is_block_scaled(w1.format) && experts.size() <= static_cast<size_t>(INT32_MAX / 3);
  for (size_t e = 0; e < experts.size(); ++e) {
    const ExpertWeights& ew = experts[e];
    for (const auto& [w, at] : {std::pair{&ew.w1, 2 * e}, {&ew.w3, 2 * e + 1}, {&ew.w2, 2 * experts.size() + e}}) {
      const LinearWeight& ref = w == &ew.w2 ? experts[0].w2 : w1;
      ok = ok && w->format == ref.format && w->in == ref.in && w->out == ref.out &&
           w->weight.stride[0] == ref.weight.stride[0] && w->scale.stride[0] == ref.scale.stride[0] &&
           w->weight.device == Device::kCuda && w->scale.device == Device::kCuda;
      host[at] = {w->weight.as<const uint8_t>(), w->scale.as<const uint8_t>()};
    }
  }
  ok = ok && experts[0].w2.format == w1.format && experts[0].w2.in == w1.out;
  RouteTable t{experts.data(), std::move(host), nullptr, ok};
  check_launch(cudaMalloc(&t.device, t.host.size() * sizeof(cuda::RoutedWeight)), "route table");
  check_launch(cudaMemcpy(t.device, t.host.data(), t.host.size() * sizeof(cuda::RoutedWeight), cudaMemcpyHostToDevice),
               "route table");
  route_tables_.push_back(std::move(t));
  return route_tables_.back();
}

void CudaBackend::routed_experts(const RoutedExpertsArgs& a) {
  const int64_t n = a.x.size(0), k = a.indices.size(1), experts = static_cast<int64_t>(a.experts.size());
  const bool exact_gemv = linear_kernel_ == cuda::LinearKernel::kAuto || linear_kernel_ == cuda::LinearKernel::kFma ||
                          linear_kernel_ == cuda::LinearKernel::kGemv;
  const bool few = n >= 1 && (n == 1 || n <= device_routed_tokens_);
  const RouteTable* routes =
      few && experts > 0 && 2 * k <= cuda::kMaxLinearGroups && exact_gemv && a.x.dtype == DType::kBF16
          ? &route_table(a.experts)
          : nullptr;
  if (!routes || !routes->ok) {
    if (few) capture_.enabled = false;  // this model's decode steps read the choice back
    routed_experts_by_expert(*this, a);
    return;
  }
  const RouteTable& table = *routes;
  check_device({&a.x, &a.indices, &a.weights, &a.acc}, "routed_experts");
  DSINFER_CHECK(a.indices.is_contiguous() && a.weights.is_contiguous() && a.acc.dtype == DType::kF32 &&
                    a.acc.is_contiguous() && a.x.stride[1] == 1,
                "routed_experts: contiguous choices, an f32 accumulator");
  if (n > 1) {  // token after token: each its own experts' GEMVs on the device's choice, as below
    const auto row = [](TensorView v, int64_t t) {
      v.data = v.as<uint8_t>() + dtype_bytes(v.dtype, t * v.stride[0]);
      v.shape[0] = 1;
      return v;
    };
    for (int64_t t = 0; t < n; ++t)
      routed_experts({row(a.x, t), row(a.indices, t), row(a.weights, t), a.experts, a.swiglu_limit, row(a.acc, t)});
    return;
  }
  const LinearWeight &w1 = a.experts[0].w1, &w2 = a.experts[0].w2;
  const int64_t dim = w1.in, ff = w1.out;
  auto gate = DeviceArray<uint16_t>::uninitialized(*this, k * ff),
       up = DeviceArray<uint16_t>::uninitialized(*this, k * ff);
  auto act = DeviceArray<uint16_t>::uninitialized(*this, k * ff),
       o = DeviceArray<uint16_t>::uninitialized(*this, k * dim);
  const auto routed_gemv = [&](const uint16_t* x, int64_t rows, int64_t in, const LinearWeight& w, int per_route,
                               const cuda::RoutedWeight* entries, const std::vector<uint16_t*>& outs) {
    const auto [values, codes, scales] = quant_scratch(rows, in);
    cuda::QuantizeInputParams q;
    q.x = x, q.x_stride = in, q.values = values, q.codes = codes, q.scales = scales, q.n = static_cast<int>(rows);
    q.k = static_cast<int>(in), q.stream = stream_;
    launched(cuda::launch_quantize_input(q), "routed experts (input quantisation)");
    cuda::BlockLinearParams p;
    for (size_t g = 0; g < outs.size(); ++g) {
      const int64_t r = rows == 1 ? 0 : static_cast<int64_t>(g);  // the one token's row, or slot g's
      p.op[g] = {values + r * in, scales + r * (in / 32), nullptr, nullptr, outs[g], codes + r * in};
    }
    p.groups = static_cast<int>(outs.size()), p.n = 1, p.k = static_cast<int>(in), p.out = static_cast<int>(w.out);
    p.fp4 = w.format == LinearFormat::kFp4, p.w_stride = w.weight.stride[0], p.s_stride = w.scale.stride[0];
    p.y_stride = w.out, p.kernel = linear_kernel_, p.gemv_rows = gemv_rows_, p.stream = stream_;
    p.routes = a.indices.as<const int32_t>(), p.route_table = entries, p.per_route = per_route;
    p.route_count = static_cast<int>(experts);
    launched(cuda::launch_block_linear(p), "routed experts");
  };
  std::vector<uint16_t*> up_outs, down_outs;
  for (int64_t j = 0; j < k; ++j) {
    up_outs.push_back(gate.data() + j * ff), up_outs.push_back(up.data() + j * ff);
    down_outs.push_back(o.data() + j * dim);
  }
  routed_gemv(bf16(a.x), 1, dim, w1, 2, table.device, up_outs);
  swiglu({gate.view(DType::kBF16, {k, ff}), up.view(DType::kBF16, {k, ff}),
          TensorView::contiguous(a.weights.data, DType::kF32, {k}, Device::kCuda), a.swiglu_limit,
          act.view(DType::kBF16, {k, ff})});
  routed_gemv(act.data(), k, ff, w2, 1, table.device + 2 * experts, down_outs);
  cuda::RoutedCombineParams c;
  c.o = o.data(), c.indices = a.indices.as<const int32_t>(), c.acc = a.acc.as<float>(), c.k = static_cast<int>(k);
  c.dim = static_cast<int>(dim), c.stream = stream_;
  launched(cuda::launch_routed_combine(c), "routed experts (sum)");
}

}  // namespace dsinfer
