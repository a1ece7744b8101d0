// `dsinfer logits`: the golden fixtures' experiment (prefill, then greedy decode steps), writing
// every forward's last-position logits and argmax tokens; with the debug switches of issue 3 and
// the DSpark drafter after every forward (the DSpark fixture's forward_spec calls).
#include <cstdio>
#include <tuple>

#include <fmt/format.h>

#include "cli/commands.h"
#include "io/json.h"
#include "io/safetensors_writer.h"
#include "testing/golden_run.h"

namespace dsinfer::cli {
namespace {

struct LogitsOptions {
  std::string model, prompts, out, force_tokens, replay, dump_debug, dspark_alone;
  bool dspark = false;
  int steps = 0;
  int64_t prefill_chunk = 0;
  BackendFlags backend;
};

Result<std::vector<std::vector<int32_t>>> read_prompts(const std::string& path) {
  DSINFER_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  const auto bad = [&](std::string_view why) {
    return error(ErrorKind::kInvalidArgument, fmt::format("{}: {}", path, why));
  };
  if (!j.is_object() || !j.contains("prompts") || !j["prompts"].is_array())
    return bad("expected {\"prompts\": [[ids...], ...]}");
  std::vector<std::vector<int32_t>> out;
  for (const Json& p : j["prompts"]) {
    if (!p.is_array() || p.empty()) return bad("every prompt must be a non-empty list of token ids");
    std::vector<int32_t> ids;
    for (const Json& t : p) {
      if (!t.is_number_integer()) return bad("token ids must be integers");
      ids.push_back(t.get<int32_t>());
    }
    out.push_back(std::move(ids));
  }
  if (out.empty()) return bad("no prompts");
  return out;
}

int run_logits(const LogitsOptions& o) {
  auto prompts = read_prompts(o.prompts);
  if (!prompts.ok()) return report_error(prompts.status());
  auto model = load_model(o.model, o.backend, "logits", /*several_ranks=*/true);
  if (!model.ok()) return report_error(model.status());
  std::optional<SafetensorsFile> forced, replay, alone;
  GoldenRunOptions ro;
  ro.steps = o.steps;
  ro.dump_debug = !o.dump_debug.empty();
  ro.prefill_chunk = o.prefill_chunk;
  ro.dspark = o.dspark;
  // The files the flags name: the golden's tokens, its selections, its main hidden states.
  for (auto [path, file, option] :
       {std::tuple{&o.force_tokens, &forced, &ro.force_tokens}, std::tuple{&o.replay, &replay, &ro.replay},
        std::tuple{&o.dspark_alone, &alone, &ro.main_hidden_from}}) {
    if (path->empty()) continue;
    auto f = SafetensorsFile::open(*path);
    if (!f.ok()) return report_error(f.status());
    *file = std::move(*f);
    *option = &**file;
  }
  auto res = run_golden_experiment(*model->model, *prompts, ro);
  if (!res.ok()) return report_error(res.status());
  if (model->comm->rank() != 0) return 0;  // every rank holds the logits; rank 0 writes them
  SafetensorsWriter w;
  w.add_values<float>("logits", DType::kF32, {res->batch, res->forwards, res->vocab}, res->logits);
  w.add_values<int32_t>("tokens", DType::kI32, {res->batch, res->forwards}, res->tokens);
  if (res->block > 0) {  // the DSpark fixture's layout
    const int64_t b = res->batch, d = res->forwards - 1, B = res->block;
    w.add_values<int32_t>("spec_out", DType::kI32, {b, d, B + 1}, res->spec_out);
    w.add_values<float>("spec_base", DType::kF32, {b, d, B, res->vocab}, res->spec_base);
    w.add_values<float>("spec_confidence", DType::kF32, {b, d, B}, res->spec_confidence);
    w.add_values<uint16_t>("main_hidden_decode", DType::kBF16, {b, d, res->hidden_width}, res->main_hidden_decode);
  }
  if (Status s = w.write(o.out); !s.ok()) return report_error(s);
  if (ro.dump_debug)
    if (Status s = res->debug.write(o.dump_debug); !s.ok()) return report_error(s);
  fmt::print("wrote {} forwards x {} rows of logits to {}\n", res->forwards, res->batch, o.out);
  return 0;
}

}  // namespace

void register_logits(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "Prefill prompts, decode greedily, write every step's logits");
  cmd->add_option("--model", o->model, "Model folder")->required();
  cmd->add_option("--prompts", o->prompts, "JSON file {\"prompts\": [[ids...], ...]}")->required();
  cmd->add_option("--steps", o->steps, "Decode steps after the prefill")->required()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--out", o->out, "Output .safetensors (logits f32 [batch, steps+1, vocab], tokens i32)")->required();
  cmd->add_option("--force-tokens", o->force_tokens, "golden.safetensors: forward k+1 takes its tokens[:, k]");
  cmd->add_option("--replay", o->replay, "golden_debug.safetensors: use its expert / top-k / candidate choices");
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prefill in pieces of N tokens (a server's token budget)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--dump-debug", o->dump_debug, "Write internals under golden_debug's names to this file");
  cmd->add_flag("--dspark", o->dspark,
                "Run the DSpark drafter after every forward; write spec_out, spec_base, spec_confidence and "
                "main_hidden_decode");
  cmd->add_option("--dspark-alone", o->dspark_alone,
                  "The DSpark fixture's golden.safetensors: the drafter fed its main hidden states and anchors");
  add_backend_flags(cmd, o->backend);
  cmd->callback([o, &result] { result.exit_code = run_logits(*o); });
}

}  // namespace dsinfer::cli
