// `dsinfer tokenize` / `dsinfer detokenize`: text <-> token ids with a model's tokenizer.json,
// one JSON object per line ({"text": ...} <-> {"ids": [...]}).
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "io/json.h"
#include "io/tokenizer.h"

namespace dsinfer::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer, text, input;
  bool has_text = false;
};

// Calls fn on every JSON line of `input` ("-" is stdin); errors name the line.
Status for_each_json_line(const std::string& input, const std::function<Status(const Json&, int)>& fn) {
  std::ifstream file;
  if (input != "-") {
    file.open(input);
    if (!file) return error(ErrorKind::kNotFound, fmt::format("{}: cannot open", input));
  }
  std::istream& in = input == "-" ? std::cin : file;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    auto j = parse_json(line, fmt::format("{}:{}", input, n));  // nesting bounded by kMaxJsonDepth
    if (!j.ok()) return error(ErrorKind::kInvalidArgument, j.status().message());
    DSINFER_RETURN_IF_ERROR(fn(*j, n));
  }
  return {};
}

int run_tokenize(const TokenizeOptions& o) {
  auto tok = Tokenizer::load(o.tokenizer);
  if (!tok.ok()) return report_error(tok.status());
  if (o.has_text) {
    fmt::print("{}\n", Json{{"ids", tok->encode(o.text)}}.dump());
    return 0;
  }
  const Status s = for_each_json_line(o.input, [&](const Json& j, int n) -> Status {
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      return error(ErrorKind::kInvalidArgument, fmt::format("{}:{}: expected {{\"text\": \"...\"}}", o.input, n));
    fmt::print("{}\n", Json{{"ids", tok->encode(j["text"].get<std::string>())}}.dump());
    return {};
  });
  return s.ok() ? 0 : report_error(s);
}

int run_detokenize(const TokenizeOptions& o) {
  auto tok = Tokenizer::load(o.tokenizer);
  if (!tok.ok()) return report_error(tok.status());
  const Status s = for_each_json_line(o.input, [&](const Json& j, int n) -> Status {
    const Json* ids = j.is_object() && j.contains("ids") ? &j["ids"] : nullptr;
    if (!ids || !ids->is_array())
      return error(ErrorKind::kInvalidArgument, fmt::format("{}:{}: expected {{\"ids\": [...]}}", o.input, n));
    std::vector<int32_t> v;
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tok->vocab().size())
        return error(ErrorKind::kInvalidArgument, fmt::format("{}:{}: {} is not a token id", o.input, n, id.dump()));
      v.push_back(id.get<int32_t>());
    }
    fmt::print("{}\n", Json{{"text", tok->decode(v)}}.dump());
    return {};
  });
  return s.ok() ? 0 : report_error(s);
}

}  // namespace

void register_tokenize(CLI::App& app, CommandResult& result) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* enc = app.add_subcommand("tokenize", "Text to token ids: one {\"ids\": [...]} line per input");
  enc->add_option("--tokenizer", o->tokenizer, "tokenizer.json")->required();
  auto* text = enc->add_option("--text", o->text, "One text to encode");
  auto* input = enc->add_option("--input", o->input, "JSONL file of {\"text\": ...} lines (- for stdin)");
  text->excludes(input);
  enc->callback([o, &result, text] {
    o->has_text = text->count() > 0;
    if (!o->has_text && o->input.empty()) {
      result.exit_code = usage_error("tokenize needs --text or --input (see dsinfer tokenize --help)");
      return;
    }
    result.exit_code = run_tokenize(*o);
  });
  CLI::App* dec = app.add_subcommand("detokenize", "Token ids to text: one {\"text\": ...} line per input");
  dec->add_option("--tokenizer", o->tokenizer, "tokenizer.json")->required();
  dec->add_option("--input", o->input, "JSONL file of {\"ids\": [...]} lines (- for stdin)")->default_val("-");
  dec->callback([o, &result] { result.exit_code = run_detokenize(*o); });
}

}  // namespace dsinfer::cli
