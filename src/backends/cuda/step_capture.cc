// CudaBackend's step capture: a single sequence's decode step recorded as a CUDA graph, run, and
// kept to run again with its uploads' bytes rewritten (cuda_backend.h says when).
#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "core/check.h"

namespace dsinfer {
namespace {

using cuda::check_cuda;

// Room to grow: a regrown buffer drops every kept graph.
size_t grown(size_t needed) {
  return needed + needed / 2;
}

}  // namespace

bool CudaBackend::in_arena(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return capture_.arena && b >= capture_.arena && b < capture_.arena + capture_.arena_bytes;
}

bool CudaBackend::begin_capture() {
  Capture& c = capture_;
  DSINFER_CHECK(!c.active, "begin_capture: a capture is running");
  if (!c.enabled || c.single_token_steps++ == 0) return false;
  if (!c.stream) {
    check_cuda(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "capture stream");
    check_cuda(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming), "capture event");
  }
  // The kept graphs' uploads read the pinned buffer this capture rewrites, and they may still run.
  check_cuda(cudaStreamSynchronize(stream_), "graph uploads");
  // What the last capture needed, all at fresh addresses: the kept graphs name the old ones.
  if (c.needed > c.arena_bytes || c.upload_needed > c.upload_bytes) {
    if (c.needed > c.arena_bytes) {
      cudaFree(c.arena);
      c.arena_bytes = grown(c.needed);
      check_cuda(cudaMalloc(&c.arena, c.arena_bytes), "arena");
    }
    if (c.upload_needed > c.upload_bytes) {
      cudaFreeHost(c.uploads);
      c.upload_bytes = grown(c.upload_needed);
      check_cuda(cudaMallocHost(&c.uploads, c.upload_bytes), "graph uploads");
    }
    ++c.generation;
  }
  // The capture stream starts after everything queued so far, and the ops go to it.
  check_cuda(cudaEventRecord(c.ready, stream_), "capture");
  check_cuda(cudaStreamWaitEvent(c.stream, c.ready), "capture");
  c.eager = stream_, stream_ = c.stream;
  check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "begin capture");
  c.active = true, c.keepable = true, c.used = c.needed = 0, c.live = 0, c.upload_used = c.upload_needed = 0;
  c.slots.clear();
  return true;
}

// A captured upload reads the graphs' pinned buffer, where relaunch writes the next step's
// bytes.
bool CudaBackend::capture_upload(void* dst, const void* host_src, size_t bytes) {
  Capture& c = capture_;
  const size_t aligned = (bytes + 255) / 256 * 256;
  c.upload_needed += aligned;
  if (c.upload_used + aligned > c.upload_bytes) {
    c.keepable = false;  // goes through the ring: not rewritable
    return false;
  }
  uint8_t* staged = c.uploads + c.upload_used;
  std::memcpy(staged, host_src, bytes);
  check_cuda(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  c.slots.push_back({dst, staged, bytes});
  c.upload_used += aligned;
  return true;
}

uint64_t CudaBackend::end_capture(bool run) {
  Capture& c = capture_;
  DSINFER_CHECK(c.active, "end_capture without begin_capture");
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  stream_ = c.eager, c.active = false;
  check_cuda(ended, "end capture");
  DSINFER_CHECK(c.live == 0, "a captured step kept {} temporaries past its end", c.live);
  uint64_t id = 0;
  if (run) {
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "graph instantiation");
    ++stats_.graph_instantiations;
    check_cuda(cudaGraphLaunch(exec, stream_), "graph launch");
    ++stats_.graph_steps;
    c.last = exec;
    if (c.keepable) {
      id = c.next_id++;
      c.graphs.emplace_back(id, Capture::Graph{exec, c.generation, std::move(c.slots)});
    } else {  // runs once: destroyed once it ran
      c.last = nullptr;
      check_cuda(cudaStreamSynchronize(stream_), "graph");
      cudaGraphExecDestroy(exec);
    }
  }
  cudaGraphDestroy(graph);
  if (!c.retired.empty()) {
    check_cuda(cudaStreamSynchronize(stream_), "retired scratch");
    for (void* p : c.retired) cudaFree(p);
    c.retired.clear();
  }
  return id;
}

bool CudaBackend::relaunch(uint64_t id, std::span<const std::span<const uint8_t>> uploads) {
  Capture& c = capture_;
  DSINFER_CHECK(!c.active, "relaunch during a capture");
  const auto it = std::find_if(c.graphs.begin(), c.graphs.end(), [&](const auto& g) { return g.first == id; });
  if (it == c.graphs.end() || it->second.generation != c.generation) return false;
  const Capture::Graph& g = it->second;
  DSINFER_CHECK(uploads.size() == g.slots.size(), "relaunch: {} uploads for a step of {}", uploads.size(),
                g.slots.size());
  for (size_t i = 0; i < uploads.size(); ++i)
    DSINFER_CHECK(uploads[i].size() == g.slots[i].bytes, "relaunch: upload {} of {} bytes, recorded {}", i,
                  uploads[i].size(), g.slots[i].bytes);
  // The buffer is shared by every kept graph: the one that ran last must be done reading it.
  check_cuda(cudaStreamSynchronize(stream_), "graph uploads");
  for (size_t i = 0; i < uploads.size(); ++i) std::memcpy(g.slots[i].staged, uploads[i].data(), uploads[i].size());
  stats_.uploads += static_cast<int64_t>(uploads.size());
  check_cuda(cudaGraphLaunch(g.exec, stream_), "graph launch");
  ++stats_.graph_steps;
  c.last = g.exec;
  return true;
}

void CudaBackend::release(uint64_t id) {
  Capture& c = capture_;
  const auto it = std::find_if(c.graphs.begin(), c.graphs.end(), [&](const auto& g) { return g.first == id; });
  if (it == c.graphs.end()) return;
  check_cuda(cudaStreamSynchronize(stream_), "graph");  // it may still run
  if (c.last == it->second.exec) c.last = nullptr;
  cudaGraphExecDestroy(it->second.exec);
  c.graphs.erase(it);
}

double CudaBackend::replay_last_step(int times) {
  if (!capture_.last || times <= 0) return 0;
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "event");
  check_cuda(cudaEventCreate(&stop), "event");
  check_cuda(cudaEventRecord(start, stream_), "event");
  for (int i = 0; i < times; ++i) check_cuda(cudaGraphLaunch(capture_.last, stream_), "graph launch");
  check_cuda(cudaEventRecord(stop, stream_), "event");
  check_cuda(cudaEventSynchronize(stop), "event");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start, stop), "event");
  cudaEventDestroy(start), cudaEventDestroy(stop);
  return ms * 1e-3 / times;
}

}  // namespace dsinfer
