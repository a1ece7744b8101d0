// The dsinfer subcommands: each registers its options on the CLI11 app and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <string_view>

#include "backends/cpu/cpu_backend.h"
#include "core/status.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "ops/communicator.h"
#include "runtime/scheduler.h"

namespace dsinfer::cli {

/// Where a subcommand leaves its exit code (CLI11 callbacks return void).
struct CommandResult {
  int exit_code = 0;
};

void register_inspect(CLI::App& app, CommandResult& result);
void register_make_tiny(CLI::App& app, CommandResult& result);
void register_logits(CLI::App& app, CommandResult& result);
void register_generate(CLI::App& app, CommandResult& result);
void register_chat(CLI::App& app, CommandResult& result);
void register_chat_encoding(CLI::App& app, CommandResult& result);  // render-chat and parse-completion
void register_serve(CLI::App& app, CommandResult& result);
void register_bench_serve(CLI::App& app, CommandResult& result);
void register_bench(CLI::App& app, CommandResult& result);
void register_perplexity(CLI::App& app, CommandResult& result);
void register_tokenize(CLI::App& app, CommandResult& result);  // tokenize and detokenize
void register_train_tokenizer(CLI::App& app, CommandResult& result);

/// Prints "dsinfer: error: <message>" to stderr and returns the exit code for the error's kind
/// (docs/errors.md).
int report_error(const Status& status);
/// A usage problem the flag parser cannot see (a missing one-of option): one line, exit code 2.
int usage_error(std::string_view message);

/// Where and how the model runs: `--device cpu` (default) or `cuda` (GPU 0), `--threads` for the
/// CPU, `--max-model-len N` the context (every command that runs the model takes them).
struct BackendFlags {
  std::string device = "cpu";
  int threads = 0;
  int64_t max_model_len = 0;  // 0: the config's context (docs/context.md)
  // Several ranks: how long a rank waits for the others in a collective before the job ends with
  // an error (a rank that died or stopped answering); the longest waits for the slowest rank's share
  // of a prefill.
  double collective_timeout_s = 300;
  int tensor_parallel = 0;  // --tensor-parallel N: the ranks the job must have (0: any)
};
void add_backend_flags(CLI::App* cmd, BackendFlags& flags);

/// Speculative decoding (`generate`, `chat`, `serve`, `bench`): on by default where the checkpoint
/// has the DSpark drafter.
struct SpeculativeFlags {
  std::string drafts = "5";  // --speculative: off or 1-5
  float min_confidence = SpeculativeConfig{}.min_confidence;
};
void add_speculative_flags(CLI::App* cmd, SpeculativeFlags& f);
/// kInvalidArgument for a --speculative other than off or 1-5.
Result<SpeculativeConfig> speculative_config(const SpeculativeFlags& f);

/// A loaded model; the backend and communicator live as long as it. On several ranks `steps` is
/// the channel from rank 0 to the others (null on one).
struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<StepChannel> steps;
  std::unique_ptr<Model> model;
};
/// Loads the model on this process's rank: started by mpirun with several ranks (a build with
/// MPI), the communicator is the job's and the rank holds its shard; otherwise one rank.
/// `several_ranks`: whether the command runs on several (the others refuse them by name).
Result<LoadedModel> load_model(const std::string& dir, const BackendFlags& flags, const char* command,
                               bool several_ranks = false);

/// This process's rank and the job's size as mpirun set them (0 of 1 outside an MPI job).
struct JobRank {
  int rank = 0, size = 1;
  bool under_mpirun = false;  // started by mpirun (also with one rank)
};
JobRank job_rank();
/// `generate`, `logits` or `serve` with `--tensor-parallel N` (N > 1) outside mpirun: starts the same
/// command as N ranks under mpirun (exec: does not return on success) and returns the exit code of
/// the failure; -1 when the command line asks for no such thing.
int relaunch_as_ranks(int argc, char** argv);
/// The config of `dir` at the context `--max-model-len` asks for (its own when 0); the flag's
/// errors name it.
Result<ModelConfig> load_config_at_context(const std::filesystem::path& source, int64_t max_model_len);
void add_max_model_len_flag(CLI::App* cmd, int64_t& max_model_len);
/// The model folder's tokenizer.json, loaded and validated (vocab, merges, regexes) as every
/// command that runs the model needs it; `inspect` calls it too, so it passes no folder these refuse.
Result<Tokenizer> load_tokenizer(const std::string& dir);

}  // namespace dsinfer::cli
