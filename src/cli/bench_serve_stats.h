// When `dsinfer bench-serve` sends each request, what it keeps of each streamed request, and the
// latency samples over many: a
// request's first token is the first event that carries text, so a request whose output renders
// no text at all (a random-weight model's special or partial tokens) has no TTFT and no TPOT; it
// is counted apart instead of taking a TTFT of zero.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/json.h"

namespace dsinfer {

/// Seconds from the start at which each of `n` requests is sent: a Poisson process of `rate`
/// requests a second (exponential gaps, seeded), or all at once for an infinite rate (the clients
/// then keep `concurrency` requests in flight).
inline std::vector<double> arrival_times(int n, double rate, uint64_t seed) {
  std::vector<double> at(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return at;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (double& a : at) a = t += gap(rng);
  return at;
}

struct StreamSample {
  bool ok = false;
  std::optional<double> ttft;  // seconds to the first event with text; none if none came
  double e2e = 0;
  std::vector<double> itl;  // seconds between consecutive events with text
  int64_t prompt_tokens = 0, output_tokens = 0;
  std::string error;  // why not ok: the HTTP status and the server's message, the stream's error
                      // event, or the connection's error
};

/// Reads one request's stream (an OpenAI streaming response's body, in the pieces it arrives in)
/// into its sample: the usage, the first event with text (ttft) and the gaps between the later
/// ones (itl). A request that fails after its 200 went out (the server's engine broke, or it was
/// cancelled) ends its stream with an error event: error_event() is then its message.
class StreamReader {
 public:
  explicit StreamReader(StreamSample& s) : s_(s) {}

  /// `data` arrived `seconds` after the request was sent.
  void feed(std::string_view data, double seconds) {
    buffer_.append(data);
    for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos; buffer_.erase(0, end + 2)) {
      const std::string_view line = std::string_view(buffer_).substr(0, end);
      if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
      const auto parsed = parse_json(line.substr(6), "event");  // nesting bounded by kMaxJsonDepth
      if (!parsed.ok()) continue;
      const Json& e = *parsed;
      if (e.contains("error") && e["error"].is_object()) {
        error_ = e["error"].value("message", std::string("an error event"));
        continue;
      }
      if (e.contains("usage") && e["usage"].is_object()) {
        s_.prompt_tokens = e["usage"].value("prompt_tokens", 0);
        s_.output_tokens = e["usage"].value("completion_tokens", 0);
      }
      if (e.contains("choices") && e["choices"].is_array() && !e["choices"].empty() && e["choices"][0].is_object() &&
          !e["choices"][0].value("text", "").empty()) {
        if (!s_.ttft)
          s_.ttft = seconds;
        else
          s_.itl.push_back(seconds - last_);
        last_ = seconds;
      }
    }
  }
  const std::string& error_event() const { return error_; }

 private:
  StreamSample& s_;
  std::string buffer_, error_;
  double last_ = 0;
};

struct LatencySamples {
  int ok = 0, without_text = 0;  // requests that succeeded; of those, the ones that streamed no text
  int64_t prompt_tokens = 0, output_tokens = 0;
  std::vector<double> ttft, tpot, itl, e2e;
};

inline LatencySamples latency_samples(std::span<const StreamSample> samples) {
  LatencySamples l;
  for (const StreamSample& s : samples) {
    if (!s.ok) continue;
    ++l.ok, l.prompt_tokens += s.prompt_tokens, l.output_tokens += s.output_tokens;
    l.e2e.push_back(s.e2e);
    l.itl.insert(l.itl.end(), s.itl.begin(), s.itl.end());
    if (!s.ttft) {
      ++l.without_text;
      continue;
    }
    l.ttft.push_back(*s.ttft);
    if (s.output_tokens > 1) l.tpot.push_back((s.e2e - *s.ttft) / static_cast<double>(s.output_tokens - 1));
  }
  return l;
}

}  // namespace dsinfer
