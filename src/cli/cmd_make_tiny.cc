// `dsinfer make-tiny`: writes the built-in tiny random-weight checkpoint.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "testing/tiny_model.h"

namespace dsinfer::cli {
namespace {

struct MakeTinyOptions {
  std::string out;
  uint64_t seed = 0;
  int tensor_parallel = 1;
};

int run_make_tiny(const MakeTinyOptions& o) {
  if (Status s = write_tiny_checkpoint(o.out, o.seed, 0, o.tensor_parallel); !s.ok()) return report_error(s);
  auto config = load_model_config(o.out);
  auto ckpt = Checkpoint::open(o.out);
  if (!config.ok()) return report_error(config.status());
  if (!ckpt.ok()) return report_error(ckpt.status());
  fmt::print("wrote a tiny V4.1 checkpoint to {}: {} tensors in {} shards, {:.1f} MiB, vocab {}, seed {}\n", o.out,
             ckpt->tensors().size(), ckpt->files().size(), ckpt->total_bytes() / 1048576.0, config->vocab_size, o.seed);
  fmt::print("its weights are random: it runs the whole model but writes gibberish\n");
  return 0;
}

}  // namespace

void register_make_tiny(CLI::App& app, CommandResult& result) {
  auto opts = std::make_shared<MakeTinyOptions>();
  CLI::App* cmd = app.add_subcommand("make-tiny", "Write a tiny random-weight V4.1 checkpoint in the release format");
  cmd->add_option("--out", opts->out,
                  "Folder to write (created if missing; an existing checkpoint there is replaced whole)")
      ->required();
  cmd->add_option("--seed", opts->seed, "Random seed of the weights")->capture_default_str();
  cmd->add_option("--tensor-parallel", opts->tensor_parallel,
                  "Make the model divide among N ranks (2 or 4: as many output groups and index heads, the "
                  "vocabulary padded)")
      ->capture_default_str();
  cmd->callback([opts, &result] { result.exit_code = run_make_tiny(*opts); });
}

}  // namespace dsinfer::cli
