// CudaBackend: the Backend interface on device memory, one kernel launch (or two) per op on one
// stream. Every view must live on the GPU. Checked against CpuBackend op by op
// (tests/cuda/cuda_backend_test.cc).
//
// Its rooms: the adapters from each op's arguments to its kernel's parameters (cuda_backend.cc),
// the memory (memory.h: the pool, the upload ring, grow-only scratch buffers), the decisions
// which path a linear takes (linear_dispatch.h), the routed experts on the device's choice
// (routed_experts.h), and the capture of whole steps as CUDA graphs (step_graphs.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "backends/cuda/memory.h"
#include "backends/cuda/options.h"
#include "backends/cuda/routed_experts.h"
#include "backends/cuda/step_graphs.h"
#include "ops/backend.h"

struct cublasContext;  // cublasHandle_t's pointee (cublas_v2.h stays out of this header)

namespace dsinfer {

class CudaBackend final : public Backend {
 public:
  static constexpr int64_t kDeviceRoutedTokens = CudaBackendOptions::kDeviceRoutedTokens;
  // With the exact kernels, steps of up to this many tokens run their routed experts token after
  // token (the single-token GEMVs measured faster than the grouped mma kernel there).
  static constexpr int64_t kExactTokenByToken = 8;

  /// On the current device, which must exist (cuda::device_count() > 0); `stream` may be null (the
  /// default stream).
  explicit CudaBackend(const CudaBackendOptions& options = {}, cudaStream_t stream = nullptr);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  const CudaBackendOptions& options() const { return options_; }
  /// Where the ops go: the backend's stream, or the capture's while a step is captured.
  cudaStream_t stream() const { return stream_; }

  // Stream-ordered (cudaMallocAsync) from the device's pool, which keeps what is freed: after the
  // first step a forward pass's temporaries come from the pool without a device allocation.
  DSINFER_OVERRIDE_MEMORY

  /// With options().graph_tokens: decode steps captured as CUDA graphs and kept to run again
  /// (step_graphs.h), as a StepRecorder in front decides.
  StepGraphs* step_graphs() override { return options_.graph_tokens > 0 ? &graphs_ : nullptr; }
  /// For the benchmarks: runs the last launched step's graph `times` more times (its uploads as
  /// they are: call it right after the step) and returns the seconds per run, 0 when no graph
  /// ran. The device time of a step without any host in between.
  double replay_last_step(int times) { return graphs_.replay_last(times); }

  /// What the host did for the device since construction (for the benchmarks): API calls by
  /// kind, and the time the host spent waiting for the device in copies to the host.
  struct Stats {
    int64_t ops = 0, allocations = 0, uploads = 0, downloads = 0, device_copies = 0;
    double download_wait_s = 0;
    int64_t graph_steps = 0, graph_instantiations = 0;  // steps run as graphs; graphs made (captured steps)
  };
  Stats stats() const;

  DSINFER_OVERRIDE_OPS
  /// routed_experts: up to options().routed_tokens tokens (one at least) with block-scaled
  /// experts run on the router's ids in device memory (routed_experts.h): one token (or each token
  /// with the fma or gemv kernel forced, up to kExactTokenByToken with the exact kernels) on its own,
  /// more sorted by expert on the device, each used
  /// expert's weights read once for all its tokens; so the choice is never read back and the
  /// step can be captured. More tokens (a prefill chunk): grouped by expert on the host
  /// (routed_experts_grouped_on_host).
  int64_t max_tokens_without_reads() const override { return options_.routed_tokens; }
  int64_t max_invariant_rows() const override;  // below cuBLAS's rows (linear_dispatch.h)
  ThreadPool* host_threads() override { return &host_threads_; }

 private:
  static void check_device(std::initializer_list<const TensorView*> views, const char* op);
  void launched(cudaError_t e, const char* op);  // counts a kernel launch, fails loudly on its error
  void* scratch(cuda::Scratch& s, size_t bytes);
  // The quantised-input scratch for `rows` rows of k (values, codes, scales).
  struct Quantized {
    uint16_t* values;
    uint8_t* codes;
    float* scales;
  };
  Quantized quant_scratch(int64_t rows, int64_t k);
  // `rows` contiguous rows of k quantised into quant_scratch (the routed experts' inputs); for the
  // wgmma kernel (wgmma_takes) as its operand, in the values' buffer, and nothing else. With
  // x_rows (device memory), output row i quantises row x_rows[i] of x, rows x_stride apart.
  Quantized quantize_rows(const uint16_t* x, int64_t rows, int64_t k, const char* what, bool wgmma = false,
                          const int32_t* x_rows = nullptr, int64_t x_stride = 0);
  // A block-scaled launch of `groups` matrices shaped as w over n rows: its shape, the weights'
  // strides, outputs w.out apart, the backend's kernel choice and stream (operands: the caller's).
  cuda::BlockLinearParams block_params(const LinearWeight& w, int64_t groups, int64_t n) const;
  // The paths of linear_dispatch.h. Block-scaled weights of one format and shape with equal row
  // counts, in one launch after the input quantisation (each distinct input once).
  void block_linear(std::span<const LinearArgs> ops);
  // cuBLAS (dense weights; fp8 read as bf16 dequantised first).
  void tensor_core_linear(const LinearArgs& a);
  // Dense weights (bf16, or fp8 read as bf16) with double sums; several ops: one launch, op g
  // reading and writing the g-th column block of op 0's input and output (block-diagonal).
  void dense_linear(std::span<const LinearArgs> ops);
  // A block-diagonal group of fp8 weights read as bf16 over a decode step's rows on the wgmma
  // kernel's decode tiles (linear_dispatch.h: GroupPath::kBlockDiagonalWgmma).
  void block_diagonal_wgmma(std::span<const LinearArgs> ops);
  // routed_experts of up to routed_tokens tokens, or of a prefill chunk, sorted by expert on the
  // device, each used expert's rows in one grouped launch a matrix kind (routed_experts.cc).
  void grouped_routed_experts(const RoutedExpertsArgs& a, const cuda::ExpertTable& table);
  // routed_experts of tokens the device cannot group (a table it cannot index, or a step size
  // between the two above): grouped by expert on the host (composite.h's group_by_expert), each
  // expert's matrices on the path linear_dispatch.h picks for its rows, the outputs added in one launch.
  void routed_experts_grouped_on_host(const RoutedExpertsArgs& a);

  CudaBackendOptions options_;
  cudaStream_t stream_;
  cuda::StagingRing staging_;
  cuda::ExpertTables experts_;  // one per MoE layer seen
  CudaStepGraphs graphs_;       // switches stream_ while it captures
  Stats stats_;
  // The ops' scratch buffers and cuBLAS handle, a set for each stream: side work (side_queue)
  // runs beside the main stream's ops, so it has buffers of its own.
  struct StreamScratch {
    cuda::Scratch quant_values, quant_codes, quant_scales;  // block-scaled inputs (QuantizeInputParams)
    cuda::Scratch dense_x, hc_mix, tc_weights, attn_scores, router_logits;
    cuda::Scratch routed_gate, routed_up, routed_act, routed_out;  // the routed experts' rows
    cuda::Scratch routed_order;                                    // the grouped experts' tokens and groups
    cuda::Scratch markov;                                          // the Markov chain's best column of each tile
    cuda::Scratch draws;                                           // draw_tokens' rows and their parameters
    cublasContext* cublas = nullptr;                               // made on the first large batch
  };
  StreamScratch main_scratch_, side_scratch_;
  StreamScratch* scratch_ = &main_scratch_;  // the current stream's
  // side_queue: the second stream (made at the first fork), the events that start it after the
  // ops before the fork and the ops after the join after it, the stream the ops go back to.
  struct {
    cudaStream_t stream = nullptr, main = nullptr;
    cudaEvent_t forked = nullptr, done = nullptr;
    bool open = false, unjoined = false;
  } side_;
  ThreadPool host_threads_{device_host_thread_count()};
};

}  // namespace dsinfer
