// CudaBackend's step capture: a single sequence's decode step recorded as a CUDA graph and run as
// one unit (cuda_backend.h says when). The graph of the step before is updated in place where
// CUDA allows it (same nodes, other parameters), else instantiated anew.
#include <algorithm>
#include <chrono>

#include "backends/cuda/cuda_backend.h"
#include "core/check.h"

namespace dsinfer {
namespace {

constexpr size_t kMaxStepShapes = 8;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(cudaError_t e, const char* what) {
  DSINFER_CHECK(e == cudaSuccess, "CUDA {}: {}", what, cudaGetErrorString(e));
}

}  // namespace

bool CudaBackend::in_arena(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return capture_.arena && b >= capture_.arena && b < capture_.arena + capture_.arena_bytes;
}

bool CudaBackend::begin_step_capture() {
  Capture& c = capture_;
  DSINFER_CHECK(!c.active, "begin_step_capture: a capture is running");
  if (!c.enabled || c.single_token_steps++ == 0) return false;
  c.started = now_s();
  if (!c.stream) {
    check(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "capture stream");
    check(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming), "capture event");
  }
  if (c.needed > c.arena_bytes) {  // what the last capture allocated, all at fresh addresses
    check(cudaStreamSynchronize(stream_), "arena");
    cudaFree(c.arena);
    c.arena_bytes = c.needed + c.needed / 4;
    check(cudaMalloc(&c.arena, c.arena_bytes), "arena");
  }
  // A step's uploads must not switch the pinned ring's halves (that waits on the device): begin
  // with a fresh half when this one is half full.
  if (staging_.used > staging_.half_bytes / 2) {
    check(cudaEventRecord(staging_.done[staging_.half], stream_), "staging");
    staging_.half ^= 1, staging_.used = 0;
    check(cudaEventSynchronize(staging_.done[staging_.half]), "staging");
  }
  // The capture stream starts after everything queued so far, and the ops go to it.
  check(cudaEventRecord(c.ready, stream_), "capture");
  check(cudaStreamWaitEvent(c.stream, c.ready), "capture");
  c.eager = stream_, stream_ = c.stream;
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "begin capture");
  c.active = true, c.used = 0, c.needed = 0, c.live = 0, c.at_begin = stats_;
  return true;
}

void CudaBackend::end_step_capture(bool run) {
  Capture& c = capture_;
  DSINFER_CHECK(c.active, "end_step_capture without begin_step_capture");
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  stream_ = c.eager, c.active = false;
  check(ended, "end capture");
  DSINFER_CHECK(c.live == 0, "a captured step kept {} temporaries past its end", c.live);
  if (run) {
    const Stats& b = c.at_begin;
    const Capture::Exec shape{stats_.ops - b.ops, stats_.device_copies - b.device_copies, stats_.uploads - b.uploads,
                              stats_.allocations - b.allocations, nullptr};
    auto it = std::find_if(c.execs.begin(), c.execs.end(), [&](const Capture::Exec& e) {
      return e.ops == shape.ops && e.copies == shape.copies && e.uploads == shape.uploads &&
             e.allocations == shape.allocations;
    });
    if (it != c.execs.end()) {
      cudaGraphExecUpdateResultInfo info;
      if (cudaGraphExecUpdate(it->exec, graph, &info) != cudaSuccess) {
        (void)cudaGetLastError();  // not updatable after all: made anew below
        cudaGraphExecDestroy(it->exec);
        c.execs.erase(it);
        it = c.execs.end();
      }
    }
    if (it == c.execs.end()) {
      if (c.execs.size() == kMaxStepShapes) {
        cudaGraphExecDestroy(c.execs.front().exec);
        c.execs.erase(c.execs.begin());
      }
      c.execs.push_back(shape);
      check(cudaGraphInstantiate(&c.execs.back().exec, graph, 0), "graph instantiation");
      it = c.execs.end() - 1;
      ++stats_.graph_instantiations;
    }
    c.last = it->exec;
    check(cudaGraphLaunch(c.last, stream_), "graph launch");
    ++stats_.graph_steps;
  }
  cudaGraphDestroy(graph);
  if (!c.retired.empty()) {
    check(cudaStreamSynchronize(stream_), "retired scratch");
    for (void* p : c.retired) cudaFree(p);
    c.retired.clear();
  }
  stats_.capture_s += now_s() - c.started;
}

double CudaBackend::replay_last_step(int times) {
  if (!capture_.last || times <= 0) return 0;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start, stream_), "event");
  for (int i = 0; i < times; ++i) check(cudaGraphLaunch(capture_.last, stream_), "graph launch");
  check(cudaEventRecord(stop, stream_), "event");
  check(cudaEventSynchronize(stop), "event");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "event");
  cudaEventDestroy(start), cudaEventDestroy(stop);
  return ms * 1e-3 / times;
}

}  // namespace dsinfer
