// Where a stretch of GPU work spends its time, kernel by kernel, from CUPTI's activity records of
// the kernels (and the copies and memsets, named "[copy ...]", "[memset]") as they ran (concurrent
// records: nothing serialised, the dependent launches overlap as in a real step). ncu replays
// each kernel alone; this sees the stream as it is.
//
// A kernel's share is its exclusive time: from the later of its start and the previous kernel's
// end to its own end, in order of ends. Under programmatic dependent launches a kernel starts
// while the one before it runs and waits for it, so its own span would count that wait twice; the
// shares add up to the stretch's time on the GPU. The gaps where nothing ran are counted apart and
// summed by the kernels around them, and of them the time before the host had even launched the
// next kernel (the runtime calls' records: the host behind the device, not the device waiting).
// Built where CMake finds CUPTI (DSINFER_BENCH_CUPTI).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsinfer::bench {

struct KernelSpan {
  std::string name;     // the function's name with its template arguments, no namespaces or parameters
  int64_t grid = 0;     // CTAs
  uint32_t stream = 0;  // CUPTI's stream id
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t correlation = 0;  // CUPTI's id of the runtime call that launched it
  uint64_t launched_ns = 0;  // when that call returned on the host (0: not recorded)
};

/// Starts recording the kernels of every stream; false with a message on stderr if CUPTI refuses.
bool timeline_start();

/// Waits for the device, stops recording and returns the kernels recorded since timeline_start.
std::vector<KernelSpan> timeline_stop();

/// Prints the stretch's time, its gaps, and each kernel's exclusive time summed by name (and the
/// `top` largest by name and grid, and the `top` largest sums of gaps by the kernels around them),
/// as markdown tables. `repeats`: the steps the stretch held (the
/// figures are per step).
void print_timeline(const std::vector<KernelSpan>& spans, int repeats, int top = 20);

}  // namespace dsinfer::bench
