// CudaStepGraphs (step_graphs.h): captures, kept graphs, relaunches.
#include "backends/cuda/step_graphs.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "core/check.h"

namespace dsinfer {
namespace {

using cuda::check_cuda;

constexpr size_t kFirstUploadBytes = size_t{8} << 20;  // room for a step's uploads at V4.1-Flash shapes

// Room to grow: a regrown buffer drops every kept graph.
size_t grown(size_t needed) {
  return needed + needed / 2;
}

}  // namespace

CudaStepGraphs::CudaStepGraphs(cudaStream_t& stream, int64_t max_tokens, std::function<bool()> may_capture)
    : stream_(stream), max_tokens_(max_tokens), may_capture_(std::move(may_capture)) {}

CudaStepGraphs::~CudaStepGraphs() {
  for (const auto& [id, g] : graphs_) cudaGraphExecDestroy(g.exec);
  cudaFreeHost(uploads_buffer_);
  if (ready_) cudaEventDestroy(ready_);
  if (capture_) cudaStreamDestroy(capture_);
}

bool CudaStepGraphs::begin_capture() {
  DSINFER_CHECK(!active_, "begin_capture: a capture is running");
  // The first step offered runs as it is: it makes what the ops keep from one step to the next
  // (the experts' device tables, the scratch buffers at their sizes), which a capture could not
  // keep.
  if (!may_capture_() || offered_++ == 0) return false;
  if (!capture_) {
    check_cuda(cudaStreamCreateWithFlags(&capture_, cudaStreamNonBlocking), "capture stream");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "capture event");
  }
  // The kept graphs' uploads read the pinned buffer this capture rewrites, and they may still run.
  check_cuda(cudaStreamSynchronize(stream_), "graph uploads");
  // What the last capture uploaded, at a fresh address: the kept graphs name the old one. The
  // first capture gets room too: an upload that misses this buffer goes through the backend's
  // staging ring, which cannot move to its other half inside a capture.
  if (upload_needed_ > upload_bytes_ || upload_bytes_ == 0) {
    cudaFreeHost(uploads_buffer_);
    upload_bytes_ = grown(std::max(upload_needed_, kFirstUploadBytes));
    check_cuda(cudaMallocHost(&uploads_buffer_, upload_bytes_), "graph uploads");
    ++generation_;
  }
  // The capture stream starts after everything queued so far, and the ops go to it.
  check_cuda(cudaEventRecord(ready_, stream_), "capture");
  check_cuda(cudaStreamWaitEvent(capture_, ready_), "capture");
  eager_ = stream_, stream_ = capture_;
  check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "begin capture");
  active_ = true, keepable_ = true, upload_used_ = upload_needed_ = 0;
  slots_.clear();
  return true;
}

bool CudaStepGraphs::upload(void* dst, const void* host_src, size_t bytes) {
  const size_t aligned = (bytes + 255) / 256 * 256;
  upload_needed_ += aligned;
  if (upload_used_ + aligned > upload_bytes_) {
    keepable_ = false;  // copied from elsewhere: not rewritable
    return false;
  }
  uint8_t* staged = uploads_buffer_ + upload_used_;
  std::memcpy(staged, host_src, bytes);
  check_cuda(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  slots_.push_back({dst, staged, bytes});
  upload_used_ += aligned;
  return true;
}

void CudaStepGraphs::graph_allocation(void* p) {
  keepable_ = false;
  captured_allocations_.push_back(p);
}

bool CudaStepGraphs::takes_free(void* p) {
  const auto take = [p](std::vector<void*>& list) {
    const auto it = std::find(list.begin(), list.end(), p);
    if (it == list.end()) return false;
    list.erase(it);
    return true;
  };
  if (take(unborn_)) return true;
  if (!active_ || take(captured_allocations_)) return false;  // freed now (in the capture: a free node)
  deferred_frees_.push_back(p);
  return true;
}

void CudaStepGraphs::retire(void* old) {
  if (active_)  // the graph's earlier nodes read the old buffer: freed once it ran, not kept
    retired_.push_back(old), keepable_ = false;
  else
    cudaFree(old);
  ++generation_;  // kept graphs name the old buffer
}

uint64_t CudaStepGraphs::end_capture(bool run) {
  DSINFER_CHECK(active_, "end_capture without begin_capture");
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  stream_ = eager_, active_ = false;
  check_cuda(ended, "end capture");
  uint64_t id = 0;
  if (run) {
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "graph instantiation");
    ++instantiations_;
    check_cuda(cudaGraphLaunch(exec, stream_), "graph launch");
    ++launches_;
    last_ = exec;
    if (keepable_) {
      id = next_id_++;
      graphs_.emplace_back(id, Graph{exec, generation_, std::move(slots_)});
    } else {  // runs once: destroyed once it ran
      last_ = nullptr;
      check_cuda(cudaStreamSynchronize(stream_), "graph");
      cudaGraphExecDestroy(exec);
    }
  }
  cudaGraphDestroy(graph);
  // After the step on the stream: what it freed of the memory from before it, and none of what it
  // allocated if it never ran.
  for (void* p : deferred_frees_) check_cuda(cudaFreeAsync(p, stream_), "free");
  deferred_frees_.clear();
  if (!run) unborn_.insert(unborn_.end(), captured_allocations_.begin(), captured_allocations_.end());
  captured_allocations_.clear();
  if (!retired_.empty()) {
    check_cuda(cudaStreamSynchronize(stream_), "retired scratch");
    for (void* p : retired_) cudaFree(p);
    retired_.clear();
  }
  return id;
}

bool CudaStepGraphs::relaunch(uint64_t id, std::span<const std::span<const uint8_t>> uploads) {
  DSINFER_CHECK(!active_, "relaunch during a capture");
  const auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const auto& g) { return g.first == id; });
  if (it == graphs_.end() || it->second.generation != generation_) return false;
  const Graph& g = it->second;
  DSINFER_CHECK(uploads.size() == g.slots.size(), "relaunch: {} uploads for a step of {}", uploads.size(),
                g.slots.size());
  for (size_t i = 0; i < uploads.size(); ++i)
    DSINFER_CHECK(uploads[i].size() == g.slots[i].bytes, "relaunch: upload {} of {} bytes, recorded {}", i,
                  uploads[i].size(), g.slots[i].bytes);
  // The buffer is shared by every kept graph: the one that ran last must be done reading it.
  check_cuda(cudaStreamSynchronize(stream_), "graph uploads");
  for (size_t i = 0; i < uploads.size(); ++i) std::memcpy(g.slots[i].staged, uploads[i].data(), uploads[i].size());
  uploads_ += static_cast<int64_t>(uploads.size());
  check_cuda(cudaGraphLaunch(g.exec, stream_), "graph launch");
  ++launches_;
  last_ = g.exec;
  return true;
}

void CudaStepGraphs::release(uint64_t id) {
  const auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const auto& g) { return g.first == id; });
  if (it == graphs_.end()) return;
  check_cuda(cudaStreamSynchronize(stream_), "graph");  // it may still run
  if (last_ == it->second.exec) last_ = nullptr;
  cudaGraphExecDestroy(it->second.exec);
  graphs_.erase(it);
}

double CudaStepGraphs::replay_last(int times) {
  if (!last_ || times <= 0) return 0;
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "event");
  check_cuda(cudaEventCreate(&stop), "event");
  check_cuda(cudaEventRecord(start, stream_), "event");
  for (int i = 0; i < times; ++i) check_cuda(cudaGraphLaunch(last_, stream_), "graph launch");
  check_cuda(cudaEventRecord(stop, stream_), "event");
  check_cuda(cudaEventSynchronize(stop), "event");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start, stop), "event");
  cudaEventDestroy(start), cudaEventDestroy(stop);
  return ms * 1e-3 / times;
}

}  // namespace dsinfer
