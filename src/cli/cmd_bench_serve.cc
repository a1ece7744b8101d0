// `dsinfer bench-serve`: load on a running server (like `vllm bench serve`): random prompts of
// about --input-len words, --output-len tokens each (greedy, or sampled with --temperature and
// --top-p), --concurrency clients at once, sent all at once or at --request-rate requests a
// second (Poisson arrivals); prints request
// and token throughput and TTFT / TPOT / ITL mean, median and p99 (streamed text completions, so
// the times are what a client sees).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "cli/bench_serve_stats.h"
#include "cli/commands.h"
#include "io/json.h"

namespace dsinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchServeOptions {
  std::string host = "127.0.0.1", api_key, model = "dsinfer";
  int port = 8000, input_len = 128, output_len = 64, num_prompts = 32, concurrency = 8;
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t seed = 1;
  double temperature = 0, top_p = 1;
};

std::string random_prompt(int words, std::mt19937_64& rng) {
  static const char* kWords[] = {"the",    "river", "stone",  "light", "quiet", "number", "seven", "over",   "under",
                                 "garden", "music", "window", "cloud", "paper", "story",  "north", "bright", "cold"};
  std::string s;
  for (int i = 0; i < words; ++i) {
    if (i) s += ' ';
    s += kWords[rng() % std::size(kWords)];
  }
  return s;
}

// The server's message in an error response's body (OpenAI's {"error": {"message": ...}}), else
// the body, else the status line's reason.
std::string error_message(const std::string& body, const std::string& reason) {
  const auto parsed = parse_json(body, "error response");
  if (parsed.ok() && parsed->contains("error") && (*parsed)["error"].is_object() &&
      (*parsed)["error"].value("message", "") != "")
    return (*parsed)["error"]["message"].get<std::string>();
  return body.empty() ? reason : body.substr(0, 200);
}

// One request on the client thread's connection `c` (kept alive between its requests, as a
// benchmark client's pool does: `concurrency` connections in all, not one a request).
StreamSample run_one(const BenchServeOptions& o, httplib::Client& c, const std::string& prompt) {
  Json body = {{"model", o.model},
               {"prompt", prompt},
               {"max_tokens", o.output_len},
               {"temperature", o.temperature},
               {"top_p", o.top_p},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  if (!o.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + o.api_key);
  req.body = body.dump();
  StreamSample s;
  StreamReader stream(s);
  std::string error_body;
  const auto start = Clock::now();
  int status = 0;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {  // an error's body (its first 4 KiB), for its message
      if (error_body.size() < 4096) error_body.append(data, std::min(n, 4096 - error_body.size()));
      return true;
    }
    stream.feed({data, n}, std::chrono::duration<double>(Clock::now() - start).count());
    return true;
  };
  auto r = c.send(req);
  s.e2e = std::chrono::duration<double>(Clock::now() - start).count();
  s.ok = r && r->status == 200 && stream.error_event().empty();
  if (!r)
    s.error = "connection: " + httplib::to_string(r.error());
  else if (r->status != 200)
    s.error = fmt::format("HTTP {}: {}", r->status, error_message(error_body, r->reason));
  else if (!s.ok)
    s.error = "the stream ended with an error: " + stream.error_event();
  return s;
}

void print_stat(const char* name, std::vector<double> v) {
  if (v.empty()) return std::fprintf(stdout, "%-14s n/a\n", name), void();
  std::sort(v.begin(), v.end());
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  const auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  std::printf("%-14s mean %9.2f ms   median %9.2f ms   p99 %9.2f ms\n", name, 1e3 * mean, 1e3 * at(0.5),
              1e3 * at(0.99));
}

int run_bench_serve(const BenchServeOptions& o) {
  if (!(o.request_rate > 0))
    return report_error(
        error(ErrorKind::kInvalidArgument,
              fmt::format("--request-rate: {} is not a positive number of requests a second", o.request_rate)));
  // A connection the server closes (a refused or timed-out request) is an error to count, not a
  // signal that ends the benchmark.
  std::signal(SIGPIPE, SIG_IGN);
  std::mt19937_64 rng(o.seed);
  std::vector<std::string> prompts;
  for (int i = 0; i < o.num_prompts; ++i) prompts.push_back(random_prompt(o.input_len, rng));
  const std::vector<double> arrivals = arrival_times(o.num_prompts, o.request_rate, o.seed);
  std::vector<StreamSample> samples(prompts.size());
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int t = 0; t < o.concurrency; ++t)
    clients.emplace_back([&] {
      httplib::Client c(o.host, o.port);
      c.set_keep_alive(true);
      // A request goes out as headers, then body: with Nagle's algorithm the body waits for the
      // server's delayed ACK of the headers (~40 ms on Linux), which TTFT would count.
      c.set_tcp_nodelay(true);
      c.set_read_timeout(600);
      for (int i; (i = next.fetch_add(1)) < static_cast<int>(prompts.size());) {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
        samples[i] = run_one(o, c, prompts[i]);
      }
    });
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const LatencySamples l = latency_samples(samples);
  const int ok = l.ok;
  std::map<std::string, int> failures;  // by reason
  for (const StreamSample& s : samples)
    if (!s.ok) ++failures[s.error];
  for (const auto& [why, count] : failures)
    std::printf("failed: %d request%s: %s\n", count, count == 1 ? "" : "s", why.c_str());
  const int64_t in_tokens = l.prompt_tokens, out_tokens = l.output_tokens;
  if (ok == 0) return report_error(error(ErrorKind::kIo, fmt::format("no request to {}:{} succeeded", o.host, o.port)));
  std::printf("requests: %d ok of %zu, concurrency %d, %s, %.2f s\n", ok, samples.size(), o.concurrency,
              std::isinf(o.request_rate) ? "sent at once" : fmt::format("{:g} a second", o.request_rate).c_str(), wall);
  std::printf("input: %.1f tokens a request; output: %.1f tokens a request\n", static_cast<double>(in_tokens) / ok,
              static_cast<double>(out_tokens) / ok);
  std::printf("throughput: %.2f requests/s, %.1f output tokens/s, %.1f total tokens/s\n", ok / wall, out_tokens / wall,
              (in_tokens + out_tokens) / wall);
  if (l.without_text > 0)
    std::printf("%d of %d requests streamed no text (their TTFT and TPOT are left out)\n", l.without_text, ok);
  print_stat("TTFT", l.ttft);
  print_stat("TPOT", l.tpot);
  print_stat("ITL", l.itl);
  print_stat("end to end", l.e2e);
  return ok == static_cast<int>(samples.size()) ? 0 : 1;
}

}  // namespace

void register_bench_serve(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<BenchServeOptions>();
  CLI::App* cmd = app.add_subcommand("bench-serve", "Load a running server and measure throughput and latency");
  cmd->add_option("--host", o->host)->capture_default_str();
  cmd->add_option("--port", o->port)->capture_default_str();
  cmd->add_option("--api-key", o->api_key);
  cmd->add_option("--model", o->model, "The served model name")->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "Words per prompt")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", o->output_len, "max_tokens")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--num-prompts", o->num_prompts)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--concurrency", o->concurrency, "Requests in flight at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--request-rate", o->request_rate,
                  "Requests a second, sent at Poisson arrival times (default: all at once)");
  cmd->add_option("--seed", o->seed)->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "Sampling temperature of every request (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", o->top_p, "Nucleus of every request")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->callback([o, &result] { result.exit_code = run_bench_serve(*o); });
}

}  // namespace dsinfer::cli
