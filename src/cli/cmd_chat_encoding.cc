// `dsinfer render-chat` and `dsinfer parse-completion`: the chat encoding on JSON lines, one output
// line per case in input order (blank lines are not cases). render-chat reads {"messages",
// "tools", "options"} (the official encode_messages arguments; tools go on the first message, as
// the official harness puts them) and writes {"prompt": ...}; parse-completion reads
// {"completion", "options": {"thinking_mode"}} and writes {"parsed": {...}}. A case the official
// code refuses writes {"error": ...}.
#include <fstream>
#include <functional>

#include <fmt/format.h>

#include "chat/chat_format.h"
#include "chat/chat_json.h"
#include "cli/commands.h"
#include "io/json.h"

namespace dsinfer::cli {
namespace {

std::string dump(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

Status for_each_case(const std::string& input, const std::function<Result<OrderedJson>(const OrderedJson&)>& fn) {
  std::ifstream in(input, std::ios::binary);
  if (!in) return error(ErrorKind::kNotFound, fmt::format("{}: cannot open", input));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    Result<OrderedJson> out = parse_ordered_json(line, fmt::format("{}:{}", input, n));
    if (out.ok()) out = fn(*out);
    fmt::print("{}\n", dump(out.ok() ? *out : OrderedJson{{"error", out.status().message()}}));
  }
  return {};
}

const OrderedJson& field(const OrderedJson& j, const char* key) {
  static const OrderedJson null;
  return j.is_object() && j.contains(key) ? j[key] : null;
}

Result<OrderedJson> render_case(const OrderedJson& c) {
  if (!c.is_object()) return error(ErrorKind::kInvalidArgument, "a case is a JSON object");
  DSINFER_ASSIGN_OR_RETURN(ChatOptions options, chat_options_from_json(field(c, "options")));
  const OrderedJson& messages_json = field(c, "messages");
  std::vector<ChatMessage> messages;
  if (!messages_json.is_null()) {
    DSINFER_ASSIGN_OR_RETURN(messages, chat_messages_from_json(messages_json));
  }
  if (const OrderedJson& tools = field(c, "tools"); !tools.is_null() && !messages.empty()) {
    DSINFER_ASSIGN_OR_RETURN(messages.front().tools, tool_specs_from_json(tools));
  }
  DSINFER_ASSIGN_OR_RETURN(ChatPrompt prompt, encode_chat(messages, options));
  return OrderedJson{{"prompt", prompt.joined()}};
}

Result<OrderedJson> parse_case(const OrderedJson& c) {
  const OrderedJson& completion = field(c, "completion");
  if (!completion.is_string()) return error(ErrorKind::kInvalidArgument, "completion: expected a string");
  const OrderedJson& mode = field(field(c, "options"), "thinking_mode");
  if (mode != "chat" && mode != "thinking")
    return error(ErrorKind::kInvalidArgument, "options.thinking_mode: expected \"chat\" or \"thinking\"");
  DSINFER_ASSIGN_OR_RETURN(ParsedCompletion p,
                           parse_completion_strict(completion.get<std::string>(), mode == "thinking"));
  OrderedJson calls = OrderedJson::array();
  for (const ToolCall& t : p.tool_calls)
    calls.push_back({{"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
  OrderedJson parsed = {{"role", "assistant"},
                        {"content", p.content},
                        {"reasoning_content", p.reasoning_content},
                        {"tool_calls", std::move(calls)}};
  return OrderedJson{{"parsed", std::move(parsed)}};
}

}  // namespace

void register_chat_encoding(CLI::App& app, CommandResult& result) {
  const auto add = [&](const char* name, const char* about, const char* input_help, auto each_case) {
    auto input = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand(name, about);
    cmd->add_option("--input", *input, input_help)->required();
    cmd->callback([input, each_case, &result] {
      const Status s = for_each_case(*input, each_case);
      result.exit_code = s.ok() ? 0 : report_error(s);
    });
  };
  add("render-chat", "Encode chat cases (JSON lines) into V4.1 prompts", "JSON lines of {messages, tools, options}",
      render_case);
  add("parse-completion", "Parse completions (JSON lines) as the official parser",
      "JSON lines of {completion, options: {thinking_mode}}", parse_case);
}

}  // namespace dsinfer::cli
