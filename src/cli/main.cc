// dsinfer command-line entry point: parses the subcommand and its flags, then runs it.
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#ifdef DSINFER_WITH_MPI
#include "parallel/mpi_communicator.h"
#endif

int main(int argc, char** argv) {
  // Under mpirun with several ranks every rank runs the same command; rank 0 speaks for the job
  // (the others' standard output is dropped; their errors still reach standard error).
  // `--tensor-parallel N` outside mpirun: the same command again as N ranks (exec).
  if (const int failed = dsinfer::cli::relaunch_as_ranks(argc, argv); failed >= 0) return failed;
  const dsinfer::cli::JobRank job = dsinfer::cli::job_rank();
#ifdef DSINFER_WITH_MPI
  std::unique_ptr<dsinfer::MpiSession> mpi;
  if (job.size > 1) {
    auto session = dsinfer::MpiSession::start(&argc, &argv);
    if (!session.ok()) return dsinfer::cli::report_error(session.status());
    mpi = std::move(*session);
  }
#endif
  if (job.size > 1 && job.rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  CLI::App app{"dsinfer: inference engine for DeepSeek V4.1", "dsinfer"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dsinfer 0.1.0");
  dsinfer::cli::CommandResult result;
  dsinfer::cli::register_inspect(app, result);
  dsinfer::cli::register_make_tiny(app, result);
  dsinfer::cli::register_generate(app, result);
  dsinfer::cli::register_chat(app, result);
  dsinfer::cli::register_chat_encoding(app, result);
  dsinfer::cli::register_serve(app, result);
  dsinfer::cli::register_bench_serve(app, result);
  dsinfer::cli::register_bench(app, result);
  dsinfer::cli::register_perplexity(app, result);
  dsinfer::cli::register_logits(app, result);
  dsinfer::cli::register_tokenize(app, result);
  dsinfer::cli::register_train_tokenizer(app, result);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line that says what is wrong; usage errors exit with 2 like other Unix tools.
    std::fprintf(stderr, "dsinfer: error: %s (see dsinfer --help)\n", e.what());
    return 2;
  }
#ifdef DSINFER_WITH_MPI
  // A rank that failed ends the job: the others may be waiting for it in a collective.
  if (mpi && result.exit_code != 0) dsinfer::MpiSession::abort_job(result.exit_code);
#endif
  return result.exit_code;
}
