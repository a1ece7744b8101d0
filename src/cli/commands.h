// The dsinfer subcommands: each registers its options on the CLI11 app and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace dsinfer::cli {

/// Where a subcommand leaves its exit code (CLI11 callbacks return void).
struct CommandResult {
  int exit_code = 0;
};

void register_inspect(CLI::App& app, CommandResult& result);
void register_make_tiny(CLI::App& app, CommandResult& result);
void register_logits(CLI::App& app, CommandResult& result);
void register_generate(CLI::App& app, CommandResult& result);
void register_bench(CLI::App& app, CommandResult& result);
void register_tokenize(CLI::App& app, CommandResult& result);  // tokenize and detokenize

/// Prints "dsinfer: error: <message>" to stderr and returns the exit code for the error's kind
/// (docs/errors.md).
int report_error(const Status& status);

}  // namespace dsinfer::cli
