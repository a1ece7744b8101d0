// `dsinfer serve`: the OpenAI-compatible server (SIGINT / SIGTERM stop it). Under mpirun with several
// ranks rank 0 serves and schedules; the others run each step's forward on their shards.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "core/units.h"
#include "model/cache_sizes.h"
#include "runtime/engine_loop.h"
#include "runtime/model_runner.h"
#include "server/http_server.h"

namespace dsinfer::cli {
namespace {

struct ServeOptions {
  std::string model, host = "127.0.0.1", api_key, name = "dsinfer";
  int port = 8000, max_running = 32, max_pending = 256;
  BackendFlags backend;
  int64_t token_budget = 0, cache_block_tokens = 256;  // 0: kCpuTokenBudget or kGpuTokenBudget
  int64_t prefill_with_decodes = 0;                    // 0: the budget's rest
  int64_t warmup_tokens = -1;                          // -1: the token budget on a GPU, none on the CPU
  double cache_gib = 8;
  int max_connections = 1024, max_connections_per_client = 64;
  double request_timeout_s = 30, keep_alive_timeout_s = 5;
  SpeculativeFlags speculative;
};

// A step's tokens by default. On the GPU a bigger step costs little more than a small one, and
// under load the prompts then enter in fewer steps: on the H200 with the Flash-shaped model, 64
// clients of 1K-token prompts and 256 output tokens got 199 / 347 / 403 output tokens/s at 512 /
// 2048 / 8192 (docs/perf-notes.md).
constexpr int64_t kCpuTokenBudget = 512, kGpuTokenBudget = 8192;

// A rank other than 0 of a job of several: no server, the forward of each step rank 0's engine
// plans, on this rank's shard, with the caches laid out as rank 0's.
int follow_rank_zero(LoadedModel& model, const CacheLayout& cache) {
  if (Status s = model.model->reserve_cache(cache); !s.ok()) return report_error(s);
  ModelRunner runner(*model.model);
  if (Status s = follow_steps(runner, *model.steps); !s.ok()) return report_error(s);
  return 0;
}

// One request run through the engine before the server opens: a prompt of `tokens` tokens and
// kWarmupOutputTokens decode steps. On a GPU the first steps load their kernels and grow the memory
// pool, the scratch buffers and the upload ring; after this no client's request pays for that. The
// prompt's tokens are arbitrary ids: only the shapes matter.
constexpr int kWarmupOutputTokens = 4;
Status warm_up(Engine& engine, int64_t tokens, int32_t vocab) {
  const auto start = std::chrono::steady_clock::now();
  EngineRequest r;
  r.prompt.resize(static_cast<size_t>(tokens));
  for (size_t i = 0; i < r.prompt.size(); ++i) r.prompt[i] = static_cast<int32_t>((i * 7919 + 1) % vocab);
  r.sampling.temperature = 0.0f;
  r.max_tokens = kWarmupOutputTokens;
  Status failed;
  r.on_output = [&](const RequestOutput& out) {
    if (out.finish == FinishReason::kError) failed = error(ErrorKind::kInternal, out.error);
  };
  auto id = engine.submit(std::move(r));
  if (!id.ok()) return id.status();
  while (engine.step()) {
  }
  if (!failed.ok()) return failed;
  std::fprintf(stderr, "dsinfer: warmed up with a %lld-token prompt in %.2f s\n", static_cast<long long>(tokens),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return {};
}

int run_serve(const ServeOptions& o) {
  // Block the stop signals before any thread starts, so that only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // Every connection is a descriptor: take the hard limit, and refuse a cap it cannot hold.
  constexpr int kSpareDescriptors = 64;  // checkpoint shards, the listening socket, stdio
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  if (static_cast<rlim_t>(o.max_connections) + kSpareDescriptors > files.rlim_cur)
    return report_error(error(
        ErrorKind::kInvalidArgument,
        fmt::format("--max-connections {} needs {} file descriptors; the limit is {} (ulimit -n)", o.max_connections,
                    o.max_connections + kSpareDescriptors, static_cast<uint64_t>(files.rlim_cur))));
  auto speculative = speculative_config(o.speculative);
  if (!speculative.ok()) return report_error(speculative.status());
  auto tok = Tokenizer::load(std::filesystem::path(o.model) / "tokenizer.json");
  if (!tok.ok()) return report_error(tok.status());
  auto model = load_model(o.model, o.backend, "serve", /*several_ranks=*/true);
  if (!model.ok()) return report_error(model.status());
  const ModelConfig& mc = model->model->config();
  auto cache = cache_layout(reference_cache_sizes(mc), static_cast<int64_t>(o.cache_gib * 1073741824.0),
                            o.cache_block_tokens, mc.max_seq_len);
  if (!cache.ok())
    return report_error(
        Status(cache.status().kind(),
               fmt::format("--cache-memory {:g} (GiB): {}; raise --cache-memory or lower --max-model-len "
                           "(the context, now {})",
                           o.cache_gib, cache.status().message(), mc.max_seq_len)));
  if (job_rank().rank != 0) return follow_rank_zero(*model, *cache);
  const int64_t token_budget =
      o.token_budget > 0 ? o.token_budget : (o.backend.device == "cuda" ? kGpuTokenBudget : kCpuTokenBudget);
  SchedulerConfig scheduling{token_budget, o.max_running, *speculative};
  scheduling.prefill_with_decodes = o.prefill_with_decodes;
  Engine engine(*model->model, *tok, scheduling, *cache, model->steps.get());
  const int64_t warmup_tokens = std::min(o.warmup_tokens >= 0         ? o.warmup_tokens
                                         : o.backend.device == "cuda" ? token_budget
                                                                      : 0,
                                         int64_t{mc.max_seq_len} - kWarmupOutputTokens);
  if (warmup_tokens > 0) {
    if (Status s = warm_up(engine, warmup_tokens, static_cast<int32_t>(mc.vocab_size)); !s.ok())
      return report_error(Status(
          s.kind(), fmt::format("the warm-up request of {} tokens (--warmup-tokens): {}", warmup_tokens, s.message())));
  }
  // The engine breaks when another rank dies or stops answering: the job ends with its error.
  const pthread_t main_thread = ::pthread_self();
  Status broken;
  EngineLoop loop(engine, o.max_pending, [&](const Status& s) {
    broken = s;
    ::pthread_kill(main_thread, SIGTERM);  // the signal wait below ends
  });
  server::ServerConfig config;
  config.transport.host = o.host, config.transport.port = o.port;
  config.transport.max_connections = o.max_connections;
  config.transport.max_connections_per_client = o.max_connections_per_client;
  config.transport.request_timeout_s = o.request_timeout_s;
  config.transport.keep_alive_timeout_s = o.keep_alive_timeout_s;
  config.api_key = o.api_key, config.model_name = o.name;
  config.context = model->model->config().max_seq_len;
  server::HttpServer http(config, loop, *tok);
  auto port = http.bind();
  if (!port.ok()) return report_error(port.status());
  std::fprintf(
      stderr, "dsinfer: cache %s: %d blocks of %lld positions (%s), %lld fixed per request\n",
      human_bytes(o.cache_gib * 1073741824.0).c_str(), cache->num_blocks, static_cast<long long>(cache->block_tokens),
      human_bytes(static_cast<double>(cache->block_bytes)).c_str(), static_cast<long long>(cache->fixed_blocks));
  std::fprintf(stderr, "dsinfer: serving %s as '%s' on http://%s:%d (Ctrl-C stops)\n", o.model.c_str(), o.name.c_str(),
               o.host.c_str(), *port);
  Status served;
  std::thread serving([&] {
    served = http.serve();
    if (!served.ok()) ::pthread_kill(main_thread, SIGTERM);  // the signal wait below ends
  });
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fputs("dsinfer: stopping\n", stderr);
  http.stop();       // no new connections; the serving thread then joins the handlers
  loop.shut_down();  // at the next step: handlers waiting on their requests return; later ones are refused
  serving.join();
  if (!served.ok()) return report_error(served);
  if (!broken.ok()) return report_error(broken);
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions)");
  cmd->add_option("--model", o->model, "Model folder")->required();
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free one)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY'");
  cmd->add_option("--served-model-name", o->name, "The model's name in the API")->capture_default_str();
  cmd->add_option("--max-running", o->max_running, "Requests decoding at once")->capture_default_str();
  cmd->add_option("--max-pending", o->max_pending, "Requests accepted at once (more get 503)")->capture_default_str();
  cmd->add_option("--token-budget", o->token_budget,
                  fmt::format("Tokens per step (prefill pieces + decodes); by default {} on the CPU, {} on a GPU",
                              kCpuTokenBudget, kGpuTokenBudget))
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--prefill-with-decodes", o->prefill_with_decodes,
                  "Prompt tokens a step takes beside running decodes at most (default: the rest of the token "
                  "budget); lower bounds the time between a stream's tokens under load, at some throughput")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--warmup-tokens", o->warmup_tokens,
                  "Prompt tokens of a request run before the server opens, so that the first clients do not "
                  "wait for the kernels' loading and the first allocations (0: none; by default the token "
                  "budget on a GPU, none on the CPU)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  add_speculative_flags(cmd, o->speculative);
  cmd->add_option("--cache-memory", o->cache_gib,
                  "GiB for the requests' caches (running requests are preempted beyond)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--cache-block-tokens", o->cache_block_tokens, "Positions per cache block (an even number)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-connections", o->max_connections, "Open connections at most (more get 503)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-connections-per-client", o->max_connections_per_client,
                  "Open connections per client address (0: no cap, e.g. behind a proxy)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--request-timeout", o->request_timeout_s,
                  "Seconds to receive a whole request, from its first byte (slower ones get 408)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--keep-alive-timeout", o->keep_alive_timeout_s, "Seconds an idle connection stays open")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  add_backend_flags(cmd, o->backend);
  cmd->callback([o, &result] { result.exit_code = run_serve(*o); });
}

}  // namespace dsinfer::cli
