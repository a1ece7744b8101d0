// OpenAI JSON -> the chat types, and the JSON text of tool schemas and call arguments.
#include "chat/chat_json.h"

#include <fmt/format.h>

namespace dsinfer {
namespace {

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
        if (!fn->contains("arguments")) {
          tc.arguments = "{}";
        } else if (const OrderedJson& args = (*fn)["arguments"]; args.is_string()) {
          tc.arguments = args.get<std::string>();  // parsed again (depth-bounded) when rendered
        } else {
          tc.arguments = python_json_dumps(args);  // iterative; the body's depth is bounded too
        }
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
    if (fn->contains("parameters")) spec.parameters = python_json_dumps((*fn)["parameters"]);
    out.push_back(std::move(spec));
  }
  return out;
}

Result<std::string> tool_schema_line(const ToolSpec& tool) {
  auto parameters = parse_ordered_json(tool.parameters, "parameters");
  if (!parameters.ok())
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("tool '{}': parameters must be JSON, got: {}", tool.name, tool.parameters));
  OrderedJson j;
  j["name"] = tool.name;
  j["description"] = tool.description;
  j["parameters"] = std::move(*parameters);
  return python_json_dumps(j);
}

Result<std::vector<ToolArgument>> tool_arguments_from_json(std::string_view arguments) {
  auto object = parse_ordered_json(arguments.empty() ? "{}" : arguments, "tool call arguments");
  if (!object.ok()) return object.status();
  if (!object->is_object())
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("tool call arguments: expected a JSON object, got {}", json_type_name(*object)));
  std::vector<ToolArgument> out;
  for (auto it = object->begin(); it != object->end(); ++it) {
    const bool is_string = it.value().is_string();
    out.push_back({it.key(), is_string, is_string ? it.value().get<std::string>() : python_json_dumps(it.value())});
  }
  return out;
}

Result<std::string> tool_arguments_to_json(std::span<const ToolArgument> arguments) {
  OrderedJson object = OrderedJson::object();
  for (const ToolArgument& a : arguments) {
    if (a.is_string) {
      object[a.name] = a.value;
    } else {
      DSINFER_ASSIGN_OR_RETURN(object[a.name], parse_ordered_json(a.value, "parameter"));
    }
  }
  return python_json_dumps(object);
}

}  // namespace dsinfer
