// CudaBackend: the Backend interface on device memory, one kernel launch (or two) per op on one
// stream. Every view must live on the GPU. Scratch buffers (quantised GEMM inputs, the kernels'
// partial sums) grow to the largest call and are then reused, so a warmed-up step allocates
// nothing. Checked against CpuBackend op by op (tests/cuda/cuda_backend_test.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <span>
#include <vector>

#include "backends/cuda/kernels/linear/params.h"
#include "backends/cuda/options.h"
#include "ops/backend.h"

struct cublasContext;  // cublasHandle_t's pointee (cublas_v2.h stays out of this header)

namespace dsinfer {

class CudaBackend final : public Backend, private StepGraphs {
 public:
  /// On the current device, which must exist (cuda::device_count() > 0); `stream` may be null (the
  /// default stream).
  explicit CudaBackend(const CudaBackendOptions& options = {}, cudaStream_t stream = nullptr);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  const CudaBackendOptions& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }

  // Stream-ordered (cudaMallocAsync) from the device's pool, which keeps what is freed: after the
  // first step a forward pass's temporaries come from the pool without a device allocation.
  void* allocate(size_t bytes) override;
  void deallocate(void* p) override;
  void zero(void* p, size_t bytes) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  /// The step as a CUDA graph (step_capture.cc): its kernels run back to back, without the gaps
  /// of launches one by one, and the graph is kept to run again (relaunch) with the step's
  /// uploads rewritten in place: a StepRecorder in front decides when (ops/step_recorder.h).
  /// Temporaries of the captured ops come from an arena at the same addresses every capture and
  /// uploads from a pinned buffer of the graphs'; a kept graph is dropped (relaunch says
  /// false) once memory it names has moved (a scratch buffer or the arena regrown). The first
  /// single-token step runs as it is (it makes the experts' device tables and grows the scratch
  /// buffers, which a capture may not). With options().step_graphs.
  StepGraphs* step_graphs() override { return capture_.enabled ? this : nullptr; }
  /// For the benchmarks: runs the last launched step's graph `times` more times (its uploads as
  /// they are: call it right after the step) and returns the seconds per run, 0 when no graph
  /// ran. The device time of a step without any host in between.
  double replay_last_step(int times);

  /// What the host did for the device since construction (for the benchmarks): API calls by
  /// kind, and the time the host spent waiting for the device in copies to the host.
  struct Stats {
    int64_t ops = 0, allocations = 0, uploads = 0, downloads = 0, device_copies = 0;
    double download_wait_s = 0;
    int64_t graph_steps = 0, graph_instantiations = 0;  // steps run as graphs; graphs made (captured steps)
  };
  const Stats& stats() const { return stats_; }

  DSINFER_OVERRIDE_OPS
  /// Up to options().routed_tokens tokens with block-scaled experts: token after token, the
  /// expert GEMVs read the router's ids from device memory (a table of the experts' weights on
  /// the device), so the choice is never read back and the step can be captured; more tokens:
  /// Backend's grouping by expert (each chosen expert's weights read once for all its tokens).
  static constexpr int64_t kDeviceRoutedTokens = CudaBackendOptions::kDeviceRoutedTokens;
  int64_t max_tokens_without_reads() const override { return options_.routed_tokens; }

 private:
  bool begin_capture() override;
  uint64_t end_capture(bool run) override;
  bool relaunch(uint64_t id, std::span<const std::span<const uint8_t>> uploads) override;
  void release(uint64_t id) override;

  // A device buffer that only grows.
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };
  void* scratch(Scratch& s, size_t bytes);
  // The quantised-input scratch for `rows` rows of k (values, codes, scales).
  struct Quantized {
    uint16_t* values;
    uint8_t* codes;
    float* scales;
  };
  Quantized quant_scratch(int64_t rows, int64_t k);
  struct RouteTable {
    const ExpertWeights* experts;
    std::vector<cuda::RoutedWeight> host;
    cuda::RoutedWeight* device;
    bool ok;  // block-scaled, every expert of one format and shape: the device path applies
  };
  const RouteTable& route_table(std::span<const ExpertWeights> experts);
  // The paths of linear_dispatch.h. Block-scaled weights of one format and shape with equal row
  // counts, in one launch after the input quantisation (each distinct input once).
  void block_linear(std::span<const LinearArgs> ops);
  void tensor_core_linear(const LinearArgs& a);  // cuBLAS
  // Dense weights (bf16, or fp8 read as bf16) with double sums; several ops: one launch, op g
  // reading and writing the g-th column block of op 0's input and output (block-diagonal).
  void dense_linear(std::span<const LinearArgs> ops);
  static void check_device(std::initializer_list<const TensorView*> views, const char* op);
  void launched(cudaError_t e, const char* op);  // counts a kernel launch, fails loudly on its error

  // Uploads go through a pinned ring in two halves, so they are asynchronous (a copy from
  // pageable memory may wait for the device); a half is reused once its copies have finished.
  struct Staging {
    uint8_t* host = nullptr;
    size_t half_bytes = 0, used = 0;
    int half = 0;
    cudaEvent_t done[2] = {nullptr, nullptr};
  };

  // The capture of a step: its own stream (the legacy stream cannot be captured), the graphs kept,
  // the arena the captured ops' temporaries come from and the pinned buffer their uploads read
  // (both grown between captures to what the last one needed; what did not fit came from graph
  // allocations and the ring meanwhile, and that graph is not kept).
  struct Capture {
    bool enabled = false, active = false;
    int64_t single_token_steps = 0;
    cudaStream_t stream = nullptr, eager = nullptr;
    cudaEvent_t ready = nullptr;
    struct Slot {  // a captured upload: `bytes` to `dst`, copied from `staged`
      void* dst;
      uint8_t* staged;
      size_t bytes;
    };
    struct Graph {
      cudaGraphExec_t exec;
      uint64_t generation;  // `generation` when captured: the memory it names is still there while equal
      std::vector<Slot> slots;
    };
    std::vector<std::pair<uint64_t, Graph>> graphs;  // by id
    uint64_t next_id = 1, generation = 0;
    cudaGraphExec_t last = nullptr;  // the graph launched most recently
    std::vector<Slot> slots;         // the running capture's uploads
    bool keepable = true;            // the running capture's memory all comes from the arena and the buffer
    uint8_t* arena = nullptr;
    size_t arena_bytes = 0, used = 0, needed = 0;
    int64_t live = 0;  // arena allocations not yet freed
    uint8_t* uploads = nullptr;
    size_t upload_bytes = 0, upload_used = 0, upload_needed = 0;
    std::vector<void*> retired;  // scratch buffers replaced during a capture, freed after it ran
  };
  bool in_arena(const void* p) const;
  bool capture_upload(void* dst, const void* host_src, size_t bytes);  // false: the graphs' buffer is full

  CudaBackendOptions options_;
  cudaStream_t stream_;
  Staging staging_;
  Capture capture_;
  Stats stats_;
  Scratch quant_values_, quant_codes_, quant_scales_, dense_x_, hc_mix_, tc_weights_, tc_inputs_, attn_scores_,
      router_logits_;
  cublasContext* cublas_ = nullptr;       // made on the first large batch
  std::vector<RouteTable> route_tables_;  // one per MoE layer seen
};

}  // namespace dsinfer
