#include "server/openai_schema.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "chat/chat_json.h"
#include "io/json.h"

namespace dsinfer::server {
namespace {

Status invalid(std::string_view field, std::string_view why) {
  return error(ErrorKind::kInvalidArgument, fmt::format("'{}': {}", field, why));
}

// Typed optional fields: absent or null leaves `out` as it is.
Status read_number(const OrderedJson& j, const char* field, float* out) {
  if (!j.contains(field) || j[field].is_null()) return {};
  if (!j[field].is_number()) return invalid(field, fmt::format("expected a number, got {}", json_type_name(j[field])));
  // Beyond float's range the value becomes an infinity (not UB), which every range check refuses.
  const double v = j[field].get<double>();
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  *out = v > kFloatMax    ? std::numeric_limits<float>::infinity()
         : v < -kFloatMax ? -std::numeric_limits<float>::infinity()
                          : static_cast<float>(v);
  return {};
}

// An integer within [lo, hi], checked on the JSON's own value before any narrowing: a value
// past int64 (nlohmann keeps it unsigned) or past the field's range is refused, never wrapped.
Status read_int(const OrderedJson& j, const char* field, int64_t* out, bool* present = nullptr,
                int64_t lo = std::numeric_limits<int64_t>::min(), int64_t hi = std::numeric_limits<int64_t>::max()) {
  if (!j.contains(field) || j[field].is_null()) return {};
  const OrderedJson& v = j[field];
  const auto out_of_range = [&] {
    return invalid(field, fmt::format("must be an integer in [{}, {}], got {}", lo, hi, v.dump()));
  };
  if (v.is_number_float()) return out_of_range();
  if (!v.is_number_integer()) return invalid(field, fmt::format("expected an integer, got {}", json_type_name(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return out_of_range();
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) return out_of_range();
  *out = n;
  if (present) *present = true;
  return {};
}

Status read_bool(const OrderedJson& j, const char* field, bool* out) {
  if (!j.contains(field) || j[field].is_null()) return {};
  if (!j[field].is_boolean())
    return invalid(field, fmt::format("expected a boolean, got {}", json_type_name(j[field])));
  *out = j[field].get<bool>();
  return {};
}

Status read_stop(const OrderedJson& j, std::vector<std::string>* out) {
  if (!j.contains("stop") || j["stop"].is_null()) return {};
  const OrderedJson& s = j["stop"];
  if (s.is_string()) {
    out->push_back(s.get<std::string>());
  } else if (s.is_array()) {
    for (const OrderedJson& v : s) {
      if (!v.is_string()) return invalid("stop", "expected a string or an array of strings");
      out->push_back(v.get<std::string>());
    }
  } else {
    return invalid("stop", "expected a string or an array of strings");
  }
  if (out->size() > 4) return invalid("stop", "at most 4 sequences");
  for (const std::string& v : *out)
    if (v.empty()) return invalid("stop", "sequences must not be empty");
  return {};
}

// `reasoning_effort` as an OpenAI client sends it, onto the official effort (docs/chat-format.md):
// the official names low / high / max and integers 1-100 as they are; OpenAI's "medium" (its
// default) as the official default, high (75).
Result<int> openai_reasoning_effort(const OrderedJson& v) {
  if (v.is_string() && v.get<std::string>() == "medium") return 75;
  if (v.is_string() || v.is_number_integer()) {
    auto effort = reasoning_effort_from_json(v);
    if (effort.ok()) return effort;
  }
  return invalid("reasoning_effort", "expected low, medium, high, max or an integer 1-100");
}

// Thinking on or off: DeepSeek's `thinking: {"type": "enabled" | "disabled"}` or vLLM's
// `chat_template_kwargs: {"thinking": bool}`; the effort as `reasoning_effort`.
Status read_reasoning(const OrderedJson& j, ChatOptions* o) {
  if (j.contains("thinking") && !j["thinking"].is_null()) {
    const OrderedJson& t = j["thinking"];
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
      return invalid("thinking", "expected {\"type\": \"enabled\" | \"disabled\"}");
    const std::string type = t["type"].get<std::string>();
    if (type != "enabled" && type != "disabled") return invalid("thinking.type", "expected enabled or disabled");
    o->thinking = type == "enabled";
  }
  if (j.contains("chat_template_kwargs") && j["chat_template_kwargs"].is_object())
    DSINFER_RETURN_IF_ERROR(read_bool(j["chat_template_kwargs"], "thinking", &o->thinking));
  if (j.contains("reasoning_effort") && !j["reasoning_effort"].is_null()) {
    DSINFER_ASSIGN_OR_RETURN(o->reasoning_effort, openai_reasoning_effort(j["reasoning_effort"]));
  }
  return {};
}

Status read_tools(const OrderedJson& j, CompletionRequest* r) {
  if (j.contains("tools") && !j["tools"].is_null()) {
    auto tools = tool_specs_from_json(j["tools"]);
    if (!tools.ok()) return tools.status();
    r->chat_options.tools = std::move(*tools);
  }
  if (!j.contains("tool_choice") || j["tool_choice"].is_null()) return {};
  const OrderedJson& c = j["tool_choice"];
  const auto bad_choice = [] { return invalid("tool_choice", "expected none, auto, required or a function"); };
  if (c.is_string()) {
    const std::string v = c.get<std::string>();
    if (v == "none") {
      r->chat_options.tools.clear();  // not to be called: left out of the prompt
    } else if (v == "required") {
      r->tool_required = true;
    } else if (v != "auto") {
      return bad_choice();
    }
  } else if (c.is_object()) {  // {"type": "function", "function": {"name": ...}}
    if (!c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string())
      return invalid("tool_choice", "expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
    r->tool_required = true;
    r->forced_tool = c["function"]["name"].get<std::string>();
    const auto& tools = r->chat_options.tools;
    if (std::none_of(tools.begin(), tools.end(), [&](const ToolSpec& t) { return t.name == r->forced_tool; }))
      return invalid("tool_choice", fmt::format("function '{}' is not among the request's tools", r->forced_tool));
  } else {
    return bad_choice();
  }
  if (r->tool_required && r->chat_options.tools.empty())
    return invalid("tool_choice", "a tool call is required but no tools are given");
  return {};
}

// Chat: `logprobs` (bool) and `top_logprobs` (0-20); completions: `logprobs` (the number of
// alternatives, 0-20).
Status read_logprobs(const OrderedJson& j, bool chat, int* out) {
  if (chat) {
    bool on = false;
    int64_t top = 0;
    DSINFER_RETURN_IF_ERROR(read_bool(j, "logprobs", &on));
    DSINFER_RETURN_IF_ERROR(read_int(j, "top_logprobs", &top, nullptr, 0, 20));
    if (top > 0 && !on) return invalid("top_logprobs", "needs logprobs: true");
    *out = on ? static_cast<int>(top) : -1;
    return {};
  }
  int64_t n = -1;
  DSINFER_RETURN_IF_ERROR(read_int(j, "logprobs", &n, nullptr, 0, 20));
  *out = static_cast<int>(n);
  return {};
}

// `n` and `best_of`: one choice per request is all the engine makes; more would be silently
// dropped, so they are refused (kUnsupported) rather than ignored.
Status read_choice_count(const OrderedJson& j, const char* field) {
  int64_t n = 1;
  DSINFER_RETURN_IF_ERROR(read_int(j, field, &n, nullptr, 1, std::numeric_limits<int64_t>::max()));
  if (n != 1)
    return error(ErrorKind::kUnsupported,
                 fmt::format("'{}': this server returns one choice per request; {} is not supported", field, n));
  return {};
}

// `response_format`: there is no constrained decoding, so anything but plain text is refused
// rather than answered with text that does not follow the format.
Status read_response_format(const OrderedJson& j) {
  if (!j.contains("response_format") || j["response_format"].is_null()) return {};
  const OrderedJson& f = j["response_format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    return invalid("response_format", "expected {\"type\": \"text\"}");
  const std::string type = f["type"].get<std::string>();
  if (type != "text")
    return error(ErrorKind::kUnsupported,
                 fmt::format("'response_format': type '{}' is not supported (no constrained decoding); only "
                             "\"text\" is",
                             type));
  return {};
}

// OpenAI fields that would change the answer and that this server does not implement: refused
// when they ask for something (their neutral values pass), never silently ignored.
Status refuse_unimplemented(const OrderedJson& j) {
  struct Field {
    const char* name;
    bool (*neutral)(const OrderedJson&);
    const char* instead;
  };
  static const Field kFields[] = {
      {"echo", [](const OrderedJson& v) { return v.is_boolean() && !v.get<bool>(); }, "the prompt is not echoed"},
      {"suffix", [](const OrderedJson& v) { return v.is_string() && v.get<std::string>().empty(); },
       "no insertion (fill-in-the-middle) mode"},
      {"logit_bias", [](const OrderedJson& v) { return v.is_object() && v.empty(); }, "no logit biases"},
      {"functions", [](const OrderedJson& v) { return v.is_array() && v.empty(); }, "send 'tools' instead"},
      {"function_call", [](const OrderedJson& v) { return v.is_string() && v.get<std::string>() == "none"; },
       "send 'tool_choice' instead"},
      {"parallel_tool_calls", [](const OrderedJson& v) { return v.is_boolean() && v.get<bool>(); },
       "the model may always call several tools"},
      {"prediction", [](const OrderedJson&) { return false; }, "no predicted outputs"},
      {"audio", [](const OrderedJson&) { return false; }, "text only"},
  };
  for (const Field& f : kFields) {
    if (!j.contains(f.name) || j[f.name].is_null() || f.neutral(j[f.name])) continue;
    return error(ErrorKind::kUnsupported, fmt::format("'{}' is not supported ({})", f.name, f.instead));
  }
  return {};
}

// `stream_options`: null or an object; only meaningful (and only allowed, as in OpenAI's API)
// with stream: true.
Status read_stream_options(const OrderedJson& j, bool stream, bool* include_usage) {
  if (!j.contains("stream_options") || j["stream_options"].is_null()) return {};
  const OrderedJson& o = j["stream_options"];
  if (!o.is_object()) return invalid("stream_options", fmt::format("expected an object, got {}", json_type_name(o)));
  if (!stream) return invalid("stream_options", "only allowed with stream: true");
  if (o.contains("include_usage") && !o["include_usage"].is_null() && !o["include_usage"].is_boolean())
    return invalid("stream_options.include_usage",
                   fmt::format("expected a boolean, got {}", json_type_name(o["include_usage"])));
  return read_bool(o, "include_usage", include_usage);
}

}  // namespace

Result<CompletionRequest> parse_completion_request(std::string_view body, bool chat, std::string_view served_model) {
  auto parsed = parse_ordered_json(body, "request body");
  if (!parsed.ok()) return error(ErrorKind::kInvalidArgument, parsed.status().message());
  const OrderedJson& j = *parsed;
  if (!j.is_object()) return invalid("body", "expected a JSON object");
  CompletionRequest r;
  r.chat = chat;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) return invalid("model", "expected a string");
    if (const std::string m = j["model"].get<std::string>(); m != served_model)
      return error(ErrorKind::kNotFound,
                   fmt::format("model '{}' does not exist (this server serves '{}')", m, served_model));
  }
  if (chat) {
    if (!j.contains("messages")) return invalid("messages", "required");
    DSINFER_ASSIGN_OR_RETURN(r.messages, chat_messages_from_json(j["messages"]));
    if (r.messages.empty()) return invalid("messages", "expected at least one message");
    DSINFER_RETURN_IF_ERROR(read_reasoning(j, &r.chat_options));
    DSINFER_RETURN_IF_ERROR(read_tools(j, &r));
  } else {
    if (!j.contains("prompt") || !j["prompt"].is_string()) return invalid("prompt", "required, a string");
    r.prompt = j["prompt"].get<std::string>();
    DSINFER_RETURN_IF_ERROR(read_bool(j, "add_special_tokens", &r.add_bos));
  }
  SamplingParams& s = r.sampling;
  DSINFER_RETURN_IF_ERROR(read_number(j, "temperature", &s.temperature));
  DSINFER_RETURN_IF_ERROR(read_number(j, "top_p", &s.top_p));
  DSINFER_RETURN_IF_ERROR(read_number(j, "min_p", &s.min_p));
  DSINFER_RETURN_IF_ERROR(read_number(j, "presence_penalty", &s.presence_penalty));
  DSINFER_RETURN_IF_ERROR(read_number(j, "frequency_penalty", &s.frequency_penalty));
  DSINFER_RETURN_IF_ERROR(read_number(j, "repetition_penalty", &s.repetition_penalty));
  int64_t top_k = s.top_k;
  DSINFER_RETURN_IF_ERROR(read_int(j, "top_k", &top_k, nullptr, -1, std::numeric_limits<int>::max()));
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);  // -1 (vLLM's "off") is 0 here
  // Any int64 seed, as OpenAI and vLLM take it; negative ones keep their bits, so seeds stay distinct.
  int64_t seed = 0;
  bool has_seed = false;
  DSINFER_RETURN_IF_ERROR(read_int(j, "seed", &seed, &has_seed));
  if (has_seed) s.seed = static_cast<uint64_t>(seed);
  DSINFER_RETURN_IF_ERROR(s.validate());
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    int64_t v = 0;
    bool present = false;
    DSINFER_RETURN_IF_ERROR(read_int(j, field, &v, &present, 1));
    // More than the context is clamped to what is left of it (engine_request); 2^30 is past any context.
    if (present) r.max_tokens = static_cast<int>(std::min<int64_t>(v, 1 << 30));
  }
  DSINFER_RETURN_IF_ERROR(read_choice_count(j, "n"));
  DSINFER_RETURN_IF_ERROR(read_choice_count(j, "best_of"));
  DSINFER_RETURN_IF_ERROR(read_response_format(j));
  DSINFER_RETURN_IF_ERROR(refuse_unimplemented(j));
  DSINFER_RETURN_IF_ERROR(read_stop(j, &r.stop));
  DSINFER_RETURN_IF_ERROR(read_bool(j, "stream", &r.stream));
  DSINFER_RETURN_IF_ERROR(read_stream_options(j, r.stream, &r.include_usage));
  DSINFER_RETURN_IF_ERROR(read_logprobs(j, chat, &r.logprobs));
  return r;
}

}  // namespace dsinfer::server
