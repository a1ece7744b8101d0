// Chat encoding and completion parsing (spec §13.3).
//
// Rendering, per turn after tool results are merged into user turns:
//   BOS [<｜System｜>Reasoning Effort: b (...)\n\n]      thinking mode, before message 0
//   system (leading)   <｜System｜>{content}[\n\n{tools block}]
//   system (later)     <｜System｜>{content}              counts as a user turn
//   user / developer   <｜User｜>{content}
//   latest_reminder    <｜latest_reminder｜>{content}
//   assistant          <｜Assistant｜>{<think>|</think>}[{reasoning}</think>]{content}{DSML calls}EOS
// and the prompt ends with <｜Assistant｜><think> (thinking) or <｜Assistant｜></think> (chat).
// Reasoning is kept (`<think>`) for assistant turns after the last user turn, and for all of them
// when tools are present.
#include "chat/chat_format.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "chat/chat_json.h"

namespace dsinfer {
namespace {

namespace tok = chat_tokens;

constexpr std::string_view kCallsOpen = "<｜DSML｜ calls>";
constexpr std::string_view kCallsClose = "</｜DSML｜ calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜ invoke name=\"";
constexpr std::string_view kInvokeClose = "</｜DSML｜ invoke>";
constexpr std::string_view kParamOpen = "<｜DSML｜ parameter name=\"";
constexpr std::string_view kParamClose = "</｜DSML｜ parameter>";

// The tools block of the system prompt. The spec (§13.3) gives its content, not its wording:
// this text is ours (docs/chat-format.md).
Result<std::string> tools_block(const std::vector<ToolSpec>& tools) {
  std::string out = fmt::format(
      "## Tools\n\n"
      "You can call the tools listed below. To call tools, end your reply with one block in this form:\n\n"
      "{}\n{}TOOL_NAME\">\n{}PARAMETER_NAME\" string=\"true|false\">VALUE{}\n{}\n{}\n\n"
      "Write one invoke element per call (several are allowed) and one parameter element per argument. "
      "Write string arguments as they are, with string=\"true\"; write every other argument (number, boolean, "
      "array, object) as JSON, with string=\"false\".\n\n"
      "In thinking mode, finish your reasoning inside <think>...</think> before any tool call or answer.\n\n"
      "### Tool schemas\n\n",
      kCallsOpen, kInvokeOpen, kParamOpen, kParamClose, kInvokeClose, kCallsClose);
  for (const ToolSpec& t : tools) {
    DSINFER_ASSIGN_OR_RETURN(std::string schema, tool_schema_line(t));
    out += schema + "\n";
  }
  out += "\nCall only the tools above, with the parameters their schemas define.";
  return out;
}

Result<std::string> render_tool_calls(const std::vector<ToolCall>& calls) {
  if (calls.empty()) return std::string();
  std::string out = fmt::format("\n\n{}\n", kCallsOpen);
  for (const ToolCall& c : calls) {
    auto args = tool_arguments_from_json(c.arguments);
    if (!args.ok())
      return error(ErrorKind::kInvalidArgument, fmt::format("tool call '{}': {}", c.name, args.status().message()));
    out += fmt::format("{}{}\">\n", kInvokeOpen, c.name);
    for (const ToolArgument& a : *args)
      out += fmt::format("{}{}\" string=\"{}\">{}{}\n", kParamOpen, a.name, a.is_string ? "true" : "false", a.value,
                         kParamClose);
    out += fmt::format("{}\n", kInvokeClose);
  }
  return out + std::string(kCallsClose);
}

}  // namespace

std::string forced_tool_call_opening(std::string_view tool) {
  std::string out = fmt::format("\n\n{}\n", kCallsOpen);  // as render_tool_calls opens the block
  if (!tool.empty()) out += fmt::format("{}{}\">\n", kInvokeOpen, tool);
  return out;
}

namespace {

struct Turn {
  ChatRole role;
  std::string text;
  const ChatMessage* message = nullptr;  // assistant turns
};

// Tool messages become <tool_result> blocks of a user turn, in the order of the calls they answer.
std::vector<Turn> merge_tool_results(std::span<const ChatMessage> messages) {
  std::vector<Turn> turns;
  const ChatMessage* last_assistant = nullptr;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != ChatRole::kTool) {
      if (m.role == ChatRole::kAssistant) last_assistant = &m;
      turns.push_back({m.role, m.content, &m});
      continue;
    }
    size_t end = i;
    while (end < messages.size() && messages[end].role == ChatRole::kTool) ++end;
    std::vector<const ChatMessage*> results;
    for (size_t j = i; j < end; ++j) results.push_back(&messages[j]);
    auto call_order = [&](const ChatMessage* r) {
      if (last_assistant)
        for (size_t c = 0; c < last_assistant->tool_calls.size(); ++c)
          if (last_assistant->tool_calls[c].id == r->tool_call_id) return c;
      return size_t{1} << 30;  // unknown ids after the known ones, in arrival order
    };
    std::stable_sort(results.begin(), results.end(),
                     [&](const ChatMessage* a, const ChatMessage* b) { return call_order(a) < call_order(b); });
    std::string text;
    for (const ChatMessage* r : results)
      text += (text.empty() ? "" : "\n\n") + fmt::format("<tool_result>{}</tool_result>", r->content);
    if (!turns.empty() && (turns.back().role == ChatRole::kUser || turns.back().role == ChatRole::kDeveloper))
      turns.back().text += "\n\n" + text;
    else
      turns.push_back({ChatRole::kUser, std::move(text)});
    i = end - 1;
  }
  return turns;
}

std::string_view trim_view(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool consume(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// `name">` (or `name" string="true">`): the attribute value up to the closing quote.
bool consume_quoted(std::string_view& s, std::string* value) {
  const size_t q = s.find('"');
  if (q == std::string_view::npos) return false;
  *value = std::string(s.substr(0, q));
  s.remove_prefix(q + 1);
  return true;
}

// One `<｜DSML｜ calls>...</｜DSML｜ calls>` block, whitespace allowed between elements.
bool parse_calls_block(std::string_view s, std::vector<ToolCall>* calls) {
  s = trim_view(s);
  if (!consume(s, kCallsOpen)) return false;
  for (;;) {
    s = trim_view(s);
    if (consume(s, kCallsClose)) return trim_view(s).empty() && !calls->empty();
    ToolCall call;
    if (!consume(s, kInvokeOpen) || !consume_quoted(s, &call.name) || !consume(s, ">") || call.name.empty())
      return false;
    std::vector<ToolArgument> args;
    for (;;) {
      s = trim_view(s);
      if (consume(s, kInvokeClose)) break;
      std::string key, is_string;
      if (!consume(s, kParamOpen) || !consume_quoted(s, &key) || !consume(s, " string=\"") ||
          !consume_quoted(s, &is_string) || !consume(s, ">"))
        return false;
      const size_t end = s.find(kParamClose);
      if (end == std::string_view::npos) return false;
      const std::string_view value = s.substr(0, end);
      s.remove_prefix(end + kParamClose.size());
      if (is_string != "true" && is_string != "false") return false;
      args.push_back({std::move(key), is_string == "true", std::string(value)});
    }
    auto arguments = tool_arguments_to_json(args);  // fails when a string="false" value is not JSON
    if (!arguments.ok()) return false;
    call.arguments = std::move(*arguments);
    calls->push_back(std::move(call));
  }
}

}  // namespace

Result<int> parse_reasoning_effort(std::string_view text) {
  if (text == "low") return 25;
  if (text == "medium" || text == "high") return 50;
  if (text == "xhigh") return 75;
  if (text == "max") return 100;
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1 || v > 100)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("reasoning effort '{}': expected low, high, xhigh, max or an integer 1-100", text));
  return v;
}

Result<std::string> render_chat_prompt(std::span<const ChatMessage> messages, const ChatOptions& options) {
  if (messages.empty()) return error(ErrorKind::kInvalidArgument, "a chat needs at least one message");
  if (options.reasoning_effort < 1 || options.reasoning_effort > 100)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("reasoning effort {} is outside 1-100", options.reasoning_effort));
  std::vector<Turn> turns = merge_tool_results(messages);
  if (!options.tools.empty()) {
    DSINFER_ASSIGN_OR_RETURN(std::string tools, tools_block(options.tools));
    if (turns.front().role == ChatRole::kSystem)
      turns.front().text += (turns.front().text.empty() ? "" : "\n\n") + tools;
    else
      turns.insert(turns.begin(), Turn{ChatRole::kSystem, std::move(tools)});
  }
  // Leading system turns are the system prompt; later ones count as user turns.
  size_t leading = 0;
  while (leading < turns.size() && turns[leading].role == ChatRole::kSystem) ++leading;
  int64_t last_user = -1;
  for (size_t i = leading; i < turns.size(); ++i)
    if (turns[i].role == ChatRole::kUser || turns[i].role == ChatRole::kDeveloper || turns[i].role == ChatRole::kSystem)
      last_user = static_cast<int64_t>(i);
  auto keeps_reasoning = [&](size_t i) {
    return options.thinking && (static_cast<int64_t>(i) > last_user || !options.tools.empty());
  };
  auto assistant_prefix = [&](size_t i) {
    return fmt::format("{}{}", tok::kAssistant, keeps_reasoning(i) ? tok::kThinkStart : tok::kThinkEnd);
  };

  std::string out(tok::kBos);
  if (options.thinking)
    out +=
        fmt::format("{}Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the reasoning)\n\n",
                    tok::kSystem, options.reasoning_effort);
  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn& t = turns[i];
    switch (t.role) {
      case ChatRole::kSystem:
        out += (i == 0 && options.thinking ? "" : std::string(tok::kSystem)) + t.text;
        break;
      case ChatRole::kUser:
      case ChatRole::kDeveloper:
        out += fmt::format("{}{}", tok::kUser, t.text);
        break;
      case ChatRole::kLatestReminder:
        out += fmt::format("{}{}", tok::kLatestReminder, t.text);
        break;
      case ChatRole::kAssistant: {
        DSINFER_ASSIGN_OR_RETURN(std::string calls, render_tool_calls(t.message->tool_calls));
        out += assistant_prefix(i);
        if (keeps_reasoning(i)) out += fmt::format("{}{}", t.message->reasoning_content, tok::kThinkEnd);
        out += fmt::format("{}{}{}", t.text, calls, tok::kEos);
        break;
      }
      case ChatRole::kTool:
        break;  // merged above
    }
  }
  if (turns.back().role != ChatRole::kAssistant) out += assistant_prefix(turns.size());
  return out;
}

ParsedCompletion parse_completion(std::string_view text, bool thinking) {
  ParsedCompletion p;
  while (text.ends_with(tok::kEos)) text.remove_suffix(tok::kEos.size());
  if (thinking) {
    const size_t end = text.find(tok::kThinkEnd);
    if (end == std::string_view::npos) {
      p.reasoning_content = std::string(text);
      return p;
    }
    p.reasoning_content = std::string(text.substr(0, end));
    text.remove_prefix(end + tok::kThinkEnd.size());
  }
  const size_t calls = text.find(kCallsOpen);
  if (calls != std::string_view::npos && parse_calls_block(text.substr(calls), &p.tool_calls)) {
    std::string_view content = text.substr(0, calls);
    while (content.ends_with('\n')) content.remove_suffix(1);
    p.content = std::string(content);
    return p;
  }
  p.tool_calls.clear();
  p.content = std::string(text);
  return p;
}

}  // namespace dsinfer
