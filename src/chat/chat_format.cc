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
std::string tools_block(const std::vector<ToolSpec>& tools) {
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
    OrderedJson j;
    j["name"] = t.name;
    j["description"] = t.description;
    j["parameters"] = t.parameters;
    out += python_json_dumps(j) + "\n";
  }
  out += "\nCall only the tools above, with the parameters their schemas define.";
  return out;
}

Result<std::string> render_tool_calls(const std::vector<ToolCall>& calls) {
  if (calls.empty()) return std::string();
  std::string out = fmt::format("\n\n{}\n", kCallsOpen);
  for (const ToolCall& c : calls) {
    auto args = parse_ordered_json(c.arguments.empty() ? "{}" : c.arguments, "tool call arguments");
    if (!args.ok() || !args->is_object())
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("tool call '{}': arguments must be a JSON object, got: {}", c.name, c.arguments));
    out += fmt::format("{}{}\">\n", kInvokeOpen, c.name);
    for (auto it = args->begin(); it != args->end(); ++it) {
      const bool is_string = it.value().is_string();
      out += fmt::format("{}{}\" string=\"{}\">{}{}\n", kParamOpen, it.key(), is_string ? "true" : "false",
                         is_string ? it.value().get<std::string>() : python_json_dumps(it.value()), kParamClose);
    }
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
    OrderedJson args = OrderedJson::object();
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
      if (is_string == "true") {
        args[key] = std::string(value);
      } else if (is_string == "false") {
        auto v = parse_ordered_json(value, "parameter");
        if (!v.ok()) return false;
        args[key] = std::move(*v);
      } else {
        return false;
      }
    }
    call.arguments = python_json_dumps(args);
    calls->push_back(std::move(call));
  }
}

std::string text_of(const OrderedJson& content, size_t index, Status* status) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {  // [{"type": "text", "text": "..."}]: the text parts, joined
    std::string out;
    for (const OrderedJson& part : content) {
      if (!part.is_object() || !part.contains("text") || !part["text"].is_string()) {
        *status = error(ErrorKind::kInvalidArgument,
                        fmt::format("messages[{}].content: only text parts are supported", index));
        return "";
      }
      out += part["text"].get<std::string>();
    }
    return out;
  }
  *status = error(ErrorKind::kInvalidArgument,
                  fmt::format("messages[{}].content: expected a string or an array of text parts, got {}", index,
                              json_type_name(content)));
  return "";
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
    if (turns.front().role == ChatRole::kSystem)
      turns.front().text += (turns.front().text.empty() ? "" : "\n\n") + tools_block(options.tools);
    else
      turns.insert(turns.begin(), Turn{ChatRole::kSystem, tools_block(options.tools)});
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

Result<std::vector<ChatMessage>> chat_messages_from_json(const OrderedJson& messages) {
  if (!messages.is_array() || messages.empty())
    return error(ErrorKind::kInvalidArgument, "messages: expected a non-empty array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return error(ErrorKind::kInvalidArgument, fmt::format("messages[{}]: expected an object with a string role", i));
    const std::string role = m["role"].get<std::string>();
    ChatMessage msg;
    if (role == "system")
      msg.role = ChatRole::kSystem;
    else if (role == "user")
      msg.role = ChatRole::kUser;
    else if (role == "developer")
      msg.role = ChatRole::kDeveloper;
    else if (role == "assistant")
      msg.role = ChatRole::kAssistant;
    else if (role == "tool")
      msg.role = ChatRole::kTool;
    else if (role == "latest_reminder")
      msg.role = ChatRole::kLatestReminder;
    else
      return error(ErrorKind::kInvalidArgument, fmt::format("messages[{}].role: unknown role '{}'", i, role));
    Status status;
    msg.content = text_of(m.contains("content") ? m["content"] : OrderedJson(), i, &status);
    DSINFER_RETURN_IF_ERROR(status);
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
      msg.reasoning_content = m["reasoning_content"].get<std::string>();
    if (msg.role == ChatRole::kTool) {
      if (m.contains("tool_call_id") && !m["tool_call_id"].is_string())
        return error(ErrorKind::kInvalidArgument, fmt::format("messages[{}].tool_call_id: expected a string", i));
      msg.tool_call_id = m.value("tool_call_id", "");
    }
    if (msg.role == ChatRole::kAssistant && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      const OrderedJson& calls = m["tool_calls"];
      if (!calls.is_array())
        return error(ErrorKind::kInvalidArgument, fmt::format("messages[{}].tool_calls: expected an array", i));
      for (size_t c = 0; c < calls.size(); ++c) {
        const OrderedJson& call = calls[c];
        const OrderedJson* fn = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
        if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
          return error(ErrorKind::kInvalidArgument,
                       fmt::format("messages[{}].tool_calls[{}]: expected {{\"function\": {{\"name\": ...}}}}", i, c));
        ToolCall tc;
        tc.id = call.contains("id") && call["id"].is_string() ? call["id"].get<std::string>() : "";
        tc.name = (*fn)["name"].get<std::string>();
        const OrderedJson args = fn->contains("arguments") ? (*fn)["arguments"] : OrderedJson("{}");
        tc.arguments = args.is_string() ? args.get<std::string>() : args.dump();
        msg.tool_calls.push_back(std::move(tc));
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Result<std::vector<ToolSpec>> tool_specs_from_json(const OrderedJson& tools) {
  if (!tools.is_array()) return error(ErrorKind::kInvalidArgument, "tools: expected an array");
  std::vector<ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const OrderedJson& t = tools[i];
    const OrderedJson* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return error(ErrorKind::kInvalidArgument,
                   fmt::format("tools[{}]: expected {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i));
    ToolSpec spec;
    spec.name = (*fn)["name"].get<std::string>();
    spec.description =
        fn->contains("description") && (*fn)["description"].is_string() ? (*fn)["description"].get<std::string>() : "";
    if (fn->contains("parameters")) spec.parameters = (*fn)["parameters"];
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace dsinfer
