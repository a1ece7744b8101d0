// The encoder: messages -> prompt pieces, by the rules docs/chat-format.md lists. In outline:
//   1. reasoning dropping (thinking mode, drop_thinking, no tools anywhere): before the last user
//      message, assistants lose their reasoning and developer messages are left out;
//   2. merging: tool results become <tool_result> blocks of a user turn, in the order of the calls
//      they answer; consecutive user turns (without a task) are one turn joined by "\n\n";
//   3. rendering: BOS, the effort line before message 0 (thinking mode), each turn, and after a
//      user turn (or a later system message) not followed by another, the assistant prefix.
#include <algorithm>

#include <fmt/format.h>

#include "chat/chat_format.h"
#include "chat/chat_json.h"
#include "io/json.h"

namespace dsinfer {
namespace {

namespace tok = chat_tokens;

constexpr std::string_view kTasks[] = {"action", "query", "authority", "domain", "title", "read_url"};

// A message after merging: its own fields, and the content of everything merged into it.
struct Turn {
  const ChatMessage* message;
  ChatRole role;
  ChatPrompt body;
  bool reasoning_dropped = false;
  bool from_context = false;
  bool holds_last_user = false;  // the last user message (before merging) is in this turn
};

Status invalid(std::string_view why) {
  return error(ErrorKind::kInvalidArgument, std::string(why));
}

Status check_task(std::string_view task) {
  if (task.empty() || std::find(std::begin(kTasks), std::end(kTasks), task) != std::end(kTasks)) return {};
  return invalid(fmt::format("unknown task '{}'", task));
}

Result<ChatPrompt> render_content(const std::vector<ContentPart>& parts) {
  ChatPrompt out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.control("\n\n");
    if (parts[i].is_image) {
      if (parts[i].text.empty()) return invalid("an image part has no source");
      out.control(tok::kImage);
    } else {
      if (parts[i].text.find(tok::kImage) != std::string::npos)
        return invalid(
            fmt::format("message content contains the image token '{}': send images as image parts", tok::kImage));
      out.text(parts[i].text);
    }
  }
  return out;
}

void append(ChatPrompt& to, const ChatPrompt& from) {
  to.pieces.insert(to.pieces.end(), from.pieces.begin(), from.pieces.end());
}

// Tool messages [begin, end) as one user turn's body, ordered by the position of their call in
// `calls` (an unknown id sorts like the first call).
Result<ChatPrompt> tool_results(std::span<const ChatMessage* const> results, const std::vector<ToolCall>& calls) {
  std::vector<const ChatMessage*> sorted(results.begin(), results.end());
  auto position = [&](const ChatMessage* r) {
    for (size_t c = 0; c < calls.size(); ++c)
      if (calls[c].id == r->tool_call_id) return c;
    return size_t{0};
  };
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const ChatMessage* a, const ChatMessage* b) { return position(a) < position(b); });
  ChatPrompt out;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0) out.control("\n\n");
    out.control("<tool_result>");
    DSINFER_ASSIGN_OR_RETURN(ChatPrompt content, render_content(sorted[i]->content));
    append(out, content);
    out.control("</tool_result>");
  }
  return out;
}

struct Source {
  const ChatMessage* message;
  bool from_context, last_user, reasoning_dropped;
};

bool mergeable_user(const std::vector<Turn>& turns, const Source& s) {
  return !turns.empty() && turns.back().role == ChatRole::kUser && turns.back().message->task.empty() &&
         turns.back().from_context == s.from_context;
}

Result<std::vector<Turn>> merge_turns(const std::vector<Source>& sources) {
  std::vector<Turn> turns;
  const std::vector<ToolCall> no_calls;
  const std::vector<ToolCall>* last_calls = &no_calls;
  for (size_t i = 0; i < sources.size(); ++i) {
    const Source& s = sources[i];
    if (s.message->role == ChatRole::kTool) {
      std::vector<const ChatMessage*> group;
      size_t end = i;
      while (end < sources.size() && sources[end].message->role == ChatRole::kTool &&
             sources[end].from_context == s.from_context)
        group.push_back(sources[end++].message);
      DSINFER_ASSIGN_OR_RETURN(ChatPrompt body, tool_results(group, *last_calls));
      if (mergeable_user(turns, s)) {
        turns.back().body.control("\n\n");
        append(turns.back().body, body);
      } else {
        turns.push_back({s.message, ChatRole::kUser, std::move(body), false, s.from_context, false});
      }
      i = end - 1;
      continue;
    }
    DSINFER_ASSIGN_OR_RETURN(ChatPrompt body, render_content(s.message->content));
    if (s.message->role == ChatRole::kAssistant) last_calls = &s.message->tool_calls;
    if (s.message->role == ChatRole::kUser && s.message->task.empty() && mergeable_user(turns, s)) {
      turns.back().body.control("\n\n");
      append(turns.back().body, body);
      turns.back().holds_last_user |= s.last_user;
      continue;
    }
    turns.push_back({s.message, s.message->role, std::move(body), s.reasoning_dropped, s.from_context, s.last_user});
  }
  return turns;
}

// A call's arguments as DSML parameters: a JSON object's members (a JSON string holding an object
// is decoded twice); anything else is one string parameter named "arguments".
std::vector<ToolArgument> call_parameters(const std::string& arguments) {
  auto parsed = tool_arguments_from_json(arguments);
  if (parsed.ok()) return *parsed;
  return {{"arguments", true, arguments}};
}

// Whether JSON-like text opens more than kMaxJsonDepth brackets at once (strings skipped): such
// arguments are refused rather than kept as text, like every JSON the server takes (issue 17).
bool nested_too_deep(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    if (ch == '[' || ch == '{') ++depth;
    if (ch == ']' || ch == '}') --depth;
    if (depth > kMaxJsonDepth) return true;
  }
  return false;
}

Status render_tool_calls(const std::vector<ToolCall>& calls, ChatPrompt& out) {
  for (const ToolCall& c : calls)
    if (nested_too_deep(c.arguments))
      return invalid(fmt::format("tool call '{}': arguments JSON nested deeper than {} levels", c.name, kMaxJsonDepth));
  out.control("\n\n<｜DSML｜ calls>\n");
  for (size_t c = 0; c < calls.size(); ++c) {
    if (c > 0) out.control("\n");
    out.control("<｜DSML｜ invoke name=\"");
    out.text(calls[c].name);
    out.control("\">\n");
    const std::vector<ToolArgument> params = call_parameters(calls[c].arguments);
    for (size_t p = 0; p < params.size(); ++p) {
      if (p > 0) out.control("\n");
      out.control("<｜DSML｜ parameter name=\"");
      out.text(params[p].name);
      out.control(fmt::format("\" string=\"{}\">", params[p].is_string ? "true" : "false"));
      out.text(params[p].value);
      out.control("</｜DSML｜ parameter>");
    }
    out.control("\n</｜DSML｜ invoke>");
  }
  out.control("\n</｜DSML｜ calls>");
  return {};
}

constexpr std::string_view kToolsIntro =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<｜DSML｜ calls>\" block like the following:\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke "
    "name=\"$TOOL_NAME\">\n<｜DSML｜ parameter name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n<｜DSML｜ invoke "
    "name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n</｜DSML｜ calls>\n\nString parameters should be specified as "
    "is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in "
    "JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST "
    "output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool "
    "Schemas\n\n";
constexpr std::string_view kToolsOutro =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

void render_system_extras(const ChatMessage& m, ChatPrompt& out) {
  if (!m.tools.empty()) {
    out.control("\n\n");
    out.control(kToolsIntro);
    for (size_t t = 0; t < m.tools.size(); ++t) {
      if (t > 0) out.control("\n");
      out.text(m.tools[t].function_json);
    }
    out.control(kToolsOutro);
  }
  if (m.response_format) {
    out.control("\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n");
    out.text(*m.response_format);
  }
}

// The conversation the encoder sees: the context, then the messages, with a request's tools on a
// leading system message (made, and part of the context when there is one, if there is none).
std::vector<ChatMessage> conversation(std::span<const ChatMessage> messages, const ChatOptions& o,
                                      size_t* context_size) {
  std::vector<ChatMessage> all(o.context.begin(), o.context.end());
  all.insert(all.end(), messages.begin(), messages.end());
  *context_size = o.context.size();
  if (!o.tools.empty()) {
    if (all.empty() || all.front().role != ChatRole::kSystem) {
      ChatMessage system;
      system.role = ChatRole::kSystem;
      all.insert(all.begin(), std::move(system));
      if (*context_size > 0) ++*context_size;
    }
    all.front().tools.insert(all.front().tools.end(), o.tools.begin(), o.tools.end());
  }
  return all;
}

}  // namespace

Result<ChatPrompt> encode_chat(std::span<const ChatMessage> messages, const ChatOptions& o) {
  if (o.reasoning_effort < 1 || o.reasoning_effort > 100)
    return invalid(fmt::format("reasoning effort {} is outside 1-100", o.reasoning_effort));
  size_t context_size = 0;
  const std::vector<ChatMessage> all = conversation(messages, o, &context_size);
  const bool has_tools = std::any_of(all.begin(), all.end(), [](const ChatMessage& m) { return !m.tools.empty(); });
  const bool drop = o.thinking && o.drop_thinking && !has_tools;
  int64_t last_user = -1;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].role == ChatRole::kUser || all[i].role == ChatRole::kDeveloper) last_user = static_cast<int64_t>(i);
  std::vector<Source> sources;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool before_last_user = static_cast<int64_t>(i) < last_user;
    if (drop && before_last_user && all[i].role == ChatRole::kDeveloper) continue;
    sources.push_back({&all[i], i < context_size, static_cast<int64_t>(i) == last_user,
                       drop && before_last_user && all[i].role == ChatRole::kAssistant});
  }
  DSINFER_ASSIGN_OR_RETURN(std::vector<Turn> turns, merge_turns(sources));
  int64_t last_user_turn = -1;
  for (size_t i = 0; i < turns.size(); ++i)
    if (turns[i].holds_last_user) last_user_turn = static_cast<int64_t>(i);

  ChatPrompt out;
  if (o.add_bos && context_size == 0) out.control(tok::kBos);
  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn& t = turns[i];
    const ChatMessage& m = *t.message;
    if (t.from_context) continue;
    const bool effort_line = i == 0 && o.thinking;
    if (effort_line)
      out.control(
          fmt::format("{}Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the reasoning)\n\n",
                      tok::kSystem, o.reasoning_effort));
    const Turn* next = i + 1 < turns.size() ? &turns[i + 1] : nullptr;
    const bool next_is_user_like = next && (next->role == ChatRole::kUser || next->role == ChatRole::kSystem);
    const bool reasoning_follows = o.thinking && (!drop || static_cast<int64_t>(i) >= last_user_turn);
    auto assistant_prefix = [&](bool think) {
      out.control(tok::kAssistant);
      out.control(think ? tok::kThinkStart : tok::kThinkEnd);
    };
    switch (t.role) {
      case ChatRole::kSystem:
        if (!effort_line) out.control(tok::kSystem);
        append(out, t.body);
        render_system_extras(m, out);
        if (i > 0 && !next_is_user_like) assistant_prefix(reasoning_follows);
        break;
      case ChatRole::kUser: {
        DSINFER_RETURN_IF_ERROR(check_task(m.task));
        out.control(tok::kUser);
        append(out, t.body);
        if (next_is_user_like) break;
        if (!m.task.empty() && m.task != "action") {
          out.control(fmt::format("<｜{}｜>", m.task));
          break;
        }
        assistant_prefix(reasoning_follows && m.task.empty());
        if (m.task == "action") out.control("<｜action｜>");
        break;
      }
      case ChatRole::kLatestReminder:
        out.control(tok::kLatestReminder);
        append(out, t.body);
        break;
      case ChatRole::kAssistant: {
        DSINFER_RETURN_IF_ERROR(check_task(m.task));
        const Turn* prev = i > 0 ? &turns[i - 1] : nullptr;
        const bool answers_task = prev && prev->role == ChatRole::kUser && !prev->message->task.empty();
        if (o.thinking && !t.reasoning_dropped && !answers_task) {
          out.text(m.reasoning_content);
          out.control(tok::kThinkEnd);
        }
        append(out, t.body);
        if (!m.tool_calls.empty()) DSINFER_RETURN_IF_ERROR(render_tool_calls(m.tool_calls, out));
        if (!m.wo_eos) out.control(tok::kEos);
        if (!m.task.empty()) out.control(fmt::format("<｜{}｜>", m.task));
        break;
      }
      case ChatRole::kDeveloper:
        return invalid(
            "a developer message is only accepted before the last user message in thinking mode "
            "with drop_thinking, where the encoder drops it");
      case ChatRole::kTool:
        break;  // merged into user turns
    }
  }
  return out;
}

ChatPrompt forced_tool_call_opening(std::string_view tool) {
  ChatPrompt out;
  out.control("\n\n<｜DSML｜ calls>\n");  // as render_tool_calls opens the block
  if (!tool.empty()) {
    out.control("<｜DSML｜ invoke name=\"");
    out.text(tool);
    out.control("\">\n");
  }
  return out;
}

}  // namespace dsinfer
