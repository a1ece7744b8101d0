// dsinfer command-line entry point: parses the subcommand and its flags, then runs it.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
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
  dsinfer::cli::register_logits(app, result);
  dsinfer::cli::register_tokenize(app, result);
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
  return result.exit_code;
}
