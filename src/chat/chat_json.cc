// OpenAI-style JSON -> the chat types, and the JSON text of tool objects and call arguments.
#include "chat/chat_json.h"

#include <fmt/format.h>

namespace dsinfer {
namespace {

Status invalid(std::string_view field, std::string_view why) {
  return error(ErrorKind::kInvalidArgument, fmt::format("{}: {}", field, why));
}

// An image part's source: the url of `image_url` (an object or a string), or `image` / `url`.
std::string image_source(const OrderedJson& part) {
  for (const char* key : {"image_url", "image", "url"}) {
    if (!part.contains(key)) continue;
    const OrderedJson& v = part[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("url") && v["url"].is_string()) return v["url"].get<std::string>();
  }
  return "";
}

Result<std::vector<ContentPart>> content_parts(const OrderedJson& content, const std::string& field) {
  std::vector<ContentPart> out;
  if (content.is_null()) return out;
  if (content.is_string()) {
    out.push_back({false, content.get<std::string>()});
    return out;
  }
  if (!content.is_array())
    return invalid(field, fmt::format("expected a string, null or a list of parts, got {}", json_type_name(content)));
  for (size_t i = 0; i < content.size(); ++i) {
    const OrderedJson& part = content[i];
    const std::string where = fmt::format("{}[{}]", field, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return invalid(where, "expected an object with a string type");
    const std::string type = part["type"].get<std::string>();
    if (type == "text") {
      if (!part.contains("text") || !part["text"].is_string()) return invalid(where, "a text part needs a string text");
      out.push_back({false, part["text"].get<std::string>()});
    } else if (type == "image_url" || type == "image") {
      std::string source = image_source(part);
      if (source.empty()) return invalid(where, "an image part has no source");
      out.push_back({true, std::move(source)});
    } else {
      return invalid(where, fmt::format("unsupported part type '{}'", type));
    }
  }
  return out;
}

Result<ChatRole> role_of(const std::string& role, const std::string& field) {
  if (role == "system") return ChatRole::kSystem;
  if (role == "user") return ChatRole::kUser;
  if (role == "developer") return ChatRole::kDeveloper;
  if (role == "assistant") return ChatRole::kAssistant;
  if (role == "tool") return ChatRole::kTool;
  if (role == "latest_reminder") return ChatRole::kLatestReminder;
  return invalid(field, fmt::format("unknown role '{}'", role));
}

Result<std::vector<ToolCall>> tool_calls_of(const OrderedJson& calls, const std::string& field) {
  if (!calls.is_array()) return invalid(field, "expected an array");
  std::vector<ToolCall> out;
  for (size_t c = 0; c < calls.size(); ++c) {
    const OrderedJson& call = calls[c];
    const OrderedJson* fn = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return invalid(fmt::format("{}[{}]", field, c), "expected {\"function\": {\"name\": ...}}");
    ToolCall tc;
    tc.id = call.contains("id") && call["id"].is_string() ? call["id"].get<std::string>() : "";
    tc.name = (*fn)["name"].get<std::string>();
    if (!fn->contains("arguments") || (*fn)["arguments"].is_null())
      tc.arguments = "{}";
    else if (const OrderedJson& args = (*fn)["arguments"]; args.is_string())
      tc.arguments = args.get<std::string>();  // its spelling is what gets parsed
    else
      tc.arguments = python_json_dumps(args);
    out.push_back(std::move(tc));
  }
  return out;
}

Result<ChatMessage> message_of(const OrderedJson& m, size_t i) {
  const std::string field = fmt::format("messages[{}]", i);
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    return invalid(field, "expected an object with a string role");
  ChatMessage msg;
  DSINFER_ASSIGN_OR_RETURN(msg.role, role_of(m["role"].get<std::string>(), field + ".role"));
  DSINFER_ASSIGN_OR_RETURN(msg.content,
                           content_parts(m.contains("content") ? m["content"] : OrderedJson(), field + ".content"));
  auto string_field = [&](const char* key, std::string* out) -> Status {
    if (!m.contains(key) || m[key].is_null()) return {};
    if (!m[key].is_string()) return invalid(field + "." + key, "expected a string");
    *out = m[key].get<std::string>();
    return {};
  };
  DSINFER_RETURN_IF_ERROR(string_field("reasoning_content", &msg.reasoning_content));
  DSINFER_RETURN_IF_ERROR(string_field("tool_call_id", &msg.tool_call_id));
  DSINFER_RETURN_IF_ERROR(string_field("task", &msg.task));
  if (m.contains("wo_eos") && !m["wo_eos"].is_null()) {
    if (!m["wo_eos"].is_boolean()) return invalid(field + ".wo_eos", "expected a boolean");
    msg.wo_eos = m["wo_eos"].get<bool>();
  }
  if (msg.role == ChatRole::kAssistant && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    DSINFER_ASSIGN_OR_RETURN(msg.tool_calls, tool_calls_of(m["tool_calls"], field + ".tool_calls"));
  }
  if (m.contains("tools") && !m["tools"].is_null()) {
    DSINFER_ASSIGN_OR_RETURN(msg.tools, tool_specs_from_json(m["tools"]));
  }
  if (m.contains("response_format") && !m["response_format"].is_null())
    msg.response_format = python_json_dumps(m["response_format"]);
  return msg;
}

}  // namespace

Result<std::vector<ChatMessage>> chat_messages_from_json(const OrderedJson& messages) {
  if (!messages.is_array()) return invalid("messages", "expected an array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    DSINFER_ASSIGN_OR_RETURN(ChatMessage m, message_of(messages[i], i));
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<ToolSpec>> tool_specs_from_json(const OrderedJson& tools) {
  if (!tools.is_array()) return invalid("tools", "expected an array");
  std::vector<ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const OrderedJson& t = tools[i];
    const OrderedJson* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return invalid(fmt::format("tools[{}]", i), "expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
    out.push_back({(*fn)["name"].get<std::string>(), python_json_dumps(*fn)});
  }
  return out;
}

Result<int> reasoning_effort_from_json(const OrderedJson& effort) {
  if (effort.is_null()) return 75;
  if (effort.is_string()) {  // a name only: "50" as a string is refused, as the official encoder does
    const std::string name = effort.get<std::string>();
    if (name == "low" || name == "high" || name == "max") return parse_reasoning_effort(name);
  }
  if (effort.is_number_integer()) {
    const int64_t v = effort.get<int64_t>();
    if (v >= 1 && v <= 100) return static_cast<int>(v);
  }
  return invalid("reasoning_effort",
                 fmt::format("{}: expected low, high, max or an integer 1-100", python_json_dumps(effort)));
}

Result<ChatOptions> chat_options_from_json(const OrderedJson& options) {
  ChatOptions o;
  if (options.is_null()) return o;
  if (!options.is_object()) return invalid("options", "expected an object");
  if (options.contains("thinking_mode") && !options["thinking_mode"].is_null()) {
    const OrderedJson& mode = options["thinking_mode"];
    if (mode != "chat" && mode != "thinking")
      return invalid("thinking_mode", fmt::format("{}: expected \"chat\" or \"thinking\"", python_json_dumps(mode)));
    o.thinking = mode == "thinking";
  }
  DSINFER_ASSIGN_OR_RETURN(o.reasoning_effort,
                           reasoning_effort_from_json(options.value("reasoning_effort", OrderedJson())));
  for (auto [key, out] :
       {std::pair{"drop_thinking", &o.drop_thinking}, std::pair{"add_default_bos_token", &o.add_bos}}) {
    if (!options.contains(key) || options[key].is_null()) continue;
    if (!options[key].is_boolean()) return invalid(key, "expected a boolean");
    *out = options[key].get<bool>();
  }
  if (options.contains("context") && !options["context"].is_null()) {
    DSINFER_ASSIGN_OR_RETURN(o.context, chat_messages_from_json(options["context"]));
  }
  return o;
}

Result<std::vector<ToolArgument>> tool_arguments_from_json(std::string_view arguments) {
  DSINFER_ASSIGN_OR_RETURN(OrderedJson value, parse_ordered_json(arguments.empty() ? "{}" : arguments, "arguments"));
  if (value.is_string()) {  // double-encoded: a JSON string holding the object's text
    DSINFER_ASSIGN_OR_RETURN(value, parse_ordered_json(value.get<std::string>(), "arguments"));
  }
  if (!value.is_object())
    return invalid("tool call arguments", fmt::format("expected a JSON object, got {}", json_type_name(value)));
  std::vector<ToolArgument> out;
  for (auto it = value.begin(); it != value.end(); ++it) {
    const bool is_string = it.value().is_string();
    out.push_back({it.key(), is_string, is_string ? it.value().get<std::string>() : python_json_dumps(it.value())});
  }
  return out;
}

}  // namespace dsinfer
