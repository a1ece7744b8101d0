// --speculative and --draft-confidence (commands.h).
#include <charconv>

#include <fmt/format.h>

#include "cli/commands.h"

namespace dsinfer::cli {

void add_speculative_flags(CLI::App* cmd, SpeculativeFlags& f) {
  cmd->add_option("--speculative", f.drafts,
                  "DSpark speculative decoding where the checkpoint has the drafter (mtp.*): off, or the most "
                  "drafts a step verifies (1-5); greedy output is the same, sampled output has the same "
                  "distribution")
      ->capture_default_str();
  cmd->add_option("--draft-confidence", f.min_confidence,
                  "Verify a draft while the drafter's confidence that it and those before it are accepted is at "
                  "least this (0: always the --speculative count)")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
}

Result<SpeculativeConfig> speculative_config(const SpeculativeFlags& f) {
  SpeculativeConfig c;
  c.min_confidence = f.min_confidence;
  if (f.drafts == "off") return c;
  const auto [end, ec] = std::from_chars(f.drafts.data(), f.drafts.data() + f.drafts.size(), c.draft_tokens);
  if (ec != std::errc() || end != f.drafts.data() + f.drafts.size() || c.draft_tokens < 1 || c.draft_tokens > 5)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("--speculative takes off or a count of drafts from 1 to 5, not '{}'", f.drafts));
  return c;
}

}  // namespace dsinfer::cli
