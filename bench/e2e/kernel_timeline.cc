#include "e2e/kernel_timeline.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace dsinfer::bench {
namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kAlign = 8;

std::mutex recorded_mutex;
std::vector<KernelSpan>& recorded() {
  static std::vector<KernelSpan> spans;
  return spans;
}
// The runtime calls' ends on the host, by correlation id (the launches, the copies).
std::map<uint32_t, uint64_t>& calls_returned() {
  static std::map<uint32_t, uint64_t> ends;
  return ends;
}

// "void ns::(anonymous namespace)::kernel<1, true>(Params, int)" -> "kernel<1, true>".
std::string base_name(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                        &std::free);
  std::string s = status == 0 && demangled ? demangled.get() : mangled;
  for (size_t at; (at = s.find("(anonymous namespace)")) != std::string::npos;) s.replace(at, 21, "anon");
  size_t begin = 0, end = s.size();
  int depth = 0;
  for (size_t i = 0; i < s.size() && end == s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (depth != 0) continue;
    if (s[i] == '(') end = i;                       // the parameters
    if (s[i] == ' ' || s[i] == ':') begin = i + 1;  // past the return type and each namespace
  }
  return s.substr(begin, end - begin);
}

// Copies and memsets are recorded beside the kernels: a stream's upload between two kernels is time
// with no kernel running that is not the host's.
std::string copy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "[copy host to device]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "[copy device to host]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "[copy device to device]";
    default:
      return "[copy, CUPTI kind " + std::to_string(kind) + "]";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(recorded_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      recorded().push_back({base_name(k->name), static_cast<int64_t>(k->gridX) * k->gridY * k->gridZ, k->streamId,
                            k->start, k->end, k->correlationId});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {  // start 0: no timestamps
      const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      if (c->start != 0)
        recorded().push_back({copy_name(c->copyKind), 0, c->streamId, c->start, c->end, c->correlationId});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      if (m->start != 0) recorded().push_back({"[memset]", 0, m->streamId, m->start, m->end, m->correlationId});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      calls_returned()[api->correlationId] = api->end;
    }
  }
  std::free(buffer);
}

bool check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* message = nullptr;
  cuptiGetResultString(r, &message);
  std::fprintf(stderr, "timeline: %s: %s\n", what, message ? message : "unknown CUPTI error");
  return false;
}

}  // namespace

bool timeline_start() {
  static const bool registered =
      check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "registering the buffers");
  if (!registered) return false;
  {
    std::lock_guard<std::mutex> lock(recorded_mutex);
    recorded().clear();
    calls_returned().clear();
  }
  cudaDeviceSynchronize();
  // Copies and memsets too, so that an upload between two kernels is not counted as idle time; the
  // runtime calls, for when the host launched each kernel.
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enabling copy records");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enabling memset records");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enabling runtime call records");
  return check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records");
}

std::vector<KernelSpan> timeline_stop() {
  cudaDeviceSynchronize();
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disabling kernel records");
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY), "disabling copy records");
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET), "disabling memset records");
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME), "disabling runtime call records");
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flushing the records");
  std::lock_guard<std::mutex> lock(recorded_mutex);
  for (KernelSpan& k : recorded())
    if (const auto at = calls_returned().find(k.correlation); at != calls_returned().end()) k.launched_ns = at->second;
  return std::move(recorded());
}

void print_timeline(const std::vector<KernelSpan>& spans, int repeats, int top) {
  if (spans.empty()) return (void)std::printf("timeline: no kernels recorded\n");
  std::vector<KernelSpan> by_end = spans;
  std::sort(by_end.begin(), by_end.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.end_ns < b.end_ns; });
  struct Share {
    int64_t calls = 0;
    double exclusive_us = 0, span_us = 0;
  };
  std::map<std::string, Share> by_name, by_launch, by_gap;
  uint64_t first = by_end.front().start_ns;
  for (const KernelSpan& k : by_end) first = std::min(first, k.start_ns);
  uint64_t covered = first;          // the GPU's time accounted for: up to the latest end so far
  const KernelSpan* last = nullptr;  // the kernel that ended there
  double gaps_us = 0, late_us = 0;   // the gaps, and of them the time before the next one was even launched
  const auto named = [](const KernelSpan& k) { return k.name + " (stream " + std::to_string(k.stream) + ")"; };
  for (const KernelSpan& k : by_end) {
    if (k.start_ns > covered) {
      const double gap = (k.start_ns - covered) * 1e-3;
      gaps_us += gap;
      if (k.launched_ns > covered) late_us += (std::min(k.launched_ns, k.start_ns) - covered) * 1e-3;
      Share& s = by_gap[(last ? named(*last) : std::string("the start")) + " -> " + named(k)];
      ++s.calls, s.exclusive_us += gap, s.span_us += gap;
    }
    const uint64_t from = std::max(covered, k.start_ns);
    const double exclusive = k.end_ns > from ? (k.end_ns - from) * 1e-3 : 0.0;
    if (k.end_ns >= covered) last = &k;
    covered = std::max(covered, k.end_ns);
    for (Share* s : {&by_name[k.name], &by_launch[k.name + " [" + std::to_string(k.grid) + " CTAs]"]}) {
      ++s->calls;
      s->exclusive_us += exclusive;
      s->span_us += (k.end_ns - k.start_ns) * 1e-3;
    }
  }
  const double total_us = (covered - first) * 1e-3, per = 1.0 / repeats;
  std::printf(
      "timeline: %zu kernels and copies a step, %.3f ms from the first one's start to the last one's end, "
      "%.3f ms of it with none running, %.3f ms of those before the host had launched the next one (a step: the "
      "mean of %d)\n",
      spans.size() / static_cast<size_t>(repeats), total_us * per * 1e-3, gaps_us * per * 1e-3, late_us * per * 1e-3,
      repeats);
  const auto table = [&](const std::map<std::string, Share>& shares, const char* what, int rows) {
    std::vector<std::pair<std::string, Share>> sorted(shares.begin(), shares.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.exclusive_us > b.second.exclusive_us; });
    std::printf(
        "\n| %s | calls a step | exclusive us a step | %% of the step | us a call (exclusive) | us a call "
        "(start to end) |\n| --- | --- | --- | --- | --- | --- |\n",
        what);
    for (int i = 0; i < std::min<int>(rows, static_cast<int>(sorted.size())); ++i) {
      const Share& s = sorted[i].second;
      std::printf("| %s | %.0f | %.1f | %.1f | %.2f | %.2f |\n", sorted[i].first.c_str(), s.calls * per,
                  s.exclusive_us * per, 100.0 * s.exclusive_us / total_us, s.exclusive_us / s.calls,
                  s.span_us / s.calls);
    }
  };
  table(by_name, "kernel", static_cast<int>(by_name.size()));
  table(by_launch, "kernel [grid]", top);
  // Where the device sat idle: each gap under the kernel that ended before it and the one that
  // started after it (its "exclusive" columns are the gaps' time).
  table(by_gap, "nothing running: after -> before", top);
}

}  // namespace dsinfer::bench
