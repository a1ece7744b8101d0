// The completion parser: what the official parser accepts, and the fallback an API client gets.
//   [reasoning </think>] content (EOS | "\n\n<｜DSML｜ calls>" invoke* "</｜DSML｜ calls>" [EOS])
// string="true" parameter values become JSON strings of the arguments; string="false" values are
// written into the arguments verbatim (as the official parser does: the model's spelling is kept).
#include <fmt/format.h>

#include "chat/chat_format.h"
#include "io/json.h"

namespace dsinfer {
namespace {

namespace tok = chat_tokens;

constexpr std::string_view kCallsStart = "\n\n<｜DSML｜ calls>";
constexpr std::string_view kCallsEnd = "</｜DSML｜ calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜ invoke name=\"";
constexpr std::string_view kInvokeEnd = "</｜DSML｜ invoke>";
constexpr std::string_view kParamOpen = "<｜DSML｜ parameter name=\"";
constexpr std::string_view kParamEnd = "</｜DSML｜ parameter>";

Status refuse(std::string_view why) {
  return error(ErrorKind::kInvalidArgument, std::string(why));
}

bool consume(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

void skip_space(std::string_view& s) {
  while (!s.empty() && (s[0] == '\n' || s[0] == ' ' || s[0] == '\t' || s[0] == '\r')) s.remove_prefix(1);
}

// The attribute value up to the closing quote.
bool consume_quoted(std::string_view& s, std::string_view* value) {
  const size_t q = s.find('"');
  if (q == std::string_view::npos) return false;
  *value = s.substr(0, q);
  s.remove_prefix(q + 1);
  return true;
}

std::string json_string(std::string_view s) {
  return OrderedJson(std::string(s)).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

// `<｜DSML｜ parameter name="K" string="true|false">V</｜DSML｜ parameter>` -> `"K": V` of the
// arguments text.
Status parse_parameter(std::string_view& s, std::vector<std::string>* names, std::string* arguments) {
  std::string_view name, flag;
  if (!consume(s, kParamOpen) || !consume_quoted(s, &name) || !consume(s, " string=\"") || !consume_quoted(s, &flag) ||
      !consume(s, ">"))
    return refuse("tool call: a malformed DSML parameter");
  if (flag != "true" && flag != "false")
    return refuse(fmt::format("tool call: parameter '{}' has string=\"{}\" (expected true or false)", name, flag));
  const size_t end = s.find(kParamEnd);
  if (end == std::string_view::npos) return refuse("tool call: a parameter is not closed");
  const std::string_view value = s.substr(0, end);
  s.remove_prefix(end + kParamEnd.size());
  for (const std::string& n : *names)
    if (n == name) return refuse(fmt::format("tool call: parameter '{}' is given twice", name));
  names->emplace_back(name);
  if (arguments->size() > 1) *arguments += ", ";
  arguments->append(json_string(name));
  arguments->append(": ");
  arguments->append(flag == "true" ? json_string(value) : std::string(value));
  return {};
}

// The calls block after its opening tag, up to and including its closing tag.
Status parse_calls(std::string_view& s, std::vector<ToolCall>* calls) {
  for (;;) {
    skip_space(s);
    if (consume(s, kCallsEnd)) return {};
    std::string_view name;
    if (!consume(s, kInvokeOpen) || !consume_quoted(s, &name) || !consume(s, ">"))
      return refuse("tool call: a malformed DSML invoke");
    ToolCall call;
    call.name = std::string(name);
    call.arguments.push_back('{');
    std::vector<std::string> names;
    for (;;) {
      skip_space(s);
      if (consume(s, kInvokeEnd)) break;
      DSINFER_RETURN_IF_ERROR(parse_parameter(s, &names, &call.arguments));
    }
    call.arguments.push_back('}');
    calls->push_back(std::move(call));
  }
}

Status check_no_special_tokens(std::string_view text, std::string_view field) {
  for (std::string_view t : {tok::kBos, tok::kEos, tok::kThinkStart, tok::kThinkEnd, tok::kDsml})
    if (text.find(t) != std::string_view::npos)
      return refuse(fmt::format("unexpected special token '{}' in the {}", t, field));
  return {};
}

}  // namespace

Result<ParsedCompletion> parse_completion_strict(std::string_view text, bool thinking) {
  ParsedCompletion p;
  std::string_view s = text;
  if (thinking) {
    const size_t end = s.find(tok::kThinkEnd);
    if (end == std::string_view::npos || s.substr(0, end).find(kCallsStart) != std::string_view::npos)
      return refuse("thinking mode: the reasoning is not closed by </think>");
    p.reasoning_content = std::string(s.substr(0, end));
    s.remove_prefix(end + tok::kThinkEnd.size());
  }
  const size_t eos = s.find(tok::kEos), calls = s.find(kCallsStart);
  if (eos == std::string_view::npos && calls == std::string_view::npos)
    return refuse("the completion does not end with the end-of-sentence token");
  if (calls < eos) {
    p.content = std::string(s.substr(0, calls));
    s.remove_prefix(calls + kCallsStart.size());
    DSINFER_RETURN_IF_ERROR(parse_calls(s, &p.tool_calls));
    if (!s.empty() && s != tok::kEos) return refuse("text after the tool calls block");
  } else {
    p.content = std::string(s.substr(0, eos));
    if (eos + tok::kEos.size() != s.size()) return refuse("text after the end-of-sentence token");
  }
  DSINFER_RETURN_IF_ERROR(check_no_special_tokens(p.reasoning_content, "reasoning"));
  DSINFER_RETURN_IF_ERROR(check_no_special_tokens(p.content, "content"));
  return p;
}

ParsedCompletion parse_completion(std::string_view text, bool thinking) {
  std::string whole(text);
  if (!text.ends_with(tok::kEos)) whole += tok::kEos;
  if (auto parsed = parse_completion_strict(whole, thinking); parsed.ok()) return std::move(*parsed);
  ParsedCompletion plain;
  const std::string_view body = std::string_view(whole).substr(0, whole.size() - tok::kEos.size());
  // A reply cut off (max_tokens) before `</think>` is reasoning that did not finish, as a stream
  // delivers it, not content; anything else the official parser refuses is plain content.
  if (thinking && body.find(tok::kThinkEnd) == std::string_view::npos &&
      body.find(tok::kThinkStart) == std::string_view::npos)
    plain.reasoning_content = std::string(body);
  else
    plain.content = std::string(body);
  return plain;
}

}  // namespace dsinfer
