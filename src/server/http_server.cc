#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "io/json.h"
#include "server/openai_response.h"
#include "server/openai_schema.h"

namespace dsinfer::server {
namespace {

constexpr const char* kJson = "application/json";
constexpr size_t kConnectionThreads = 128;
constexpr int kListenBacklog = 1024;

void send_error(httplib::Response& res, const Status& s) {
  res.status = http_status(s);
  res.set_content(error_body(s), kJson);
}

std::string random_hex(int digits) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < digits; ++i) s += "0123456789abcdef"[rng() & 15];
  return s;
}

std::string finish_name(FinishReason f, bool tool_calls) {
  return finish_reason(tool_calls, f == FinishReason::kLength);
}

// The engine request of a validated API request: the prompt's tokens (rendered through the chat
// encoding for chat), the end token, the budget (all the context that is left by default), and a
// forced calls-block opening for a required tool call: right after the prompt in chat mode, after
// `</think>` in thinking mode.
Result<EngineRequest> engine_request(const CompletionRequest& r, const Tokenizer& tok, int64_t context) {
  std::string text = r.prompt;
  if (r.chat) {
    DSINFER_ASSIGN_OR_RETURN(text, render_chat_prompt(r.messages, r.chat_options));
  }
  EngineRequest e;
  e.prompt = tok.encode(text);
  const int64_t room = context - static_cast<int64_t>(e.prompt.size());
  if (room < 1)
    return error(ErrorKind::kInvalidArgument,
                 fmt::format("the prompt is {} tokens; the context is {}", e.prompt.size(), context));
  e.max_tokens = static_cast<int>(std::min<int64_t>(r.max_tokens.value_or(room), room));
  e.sampling = r.sampling;
  e.stop_strings = r.stop;
  e.logprobs = r.logprobs;
  if (auto eos = tok.vocab().id_of(chat_tokens::kEos)) e.stop_ids.push_back(*eos);
  if (r.tool_required) {
    e.forced.tokens = tok.encode(forced_tool_call_opening(r.forced_tool));
    if (r.chat_options.thinking) {
      const auto think_end = tok.vocab().id_of(chat_tokens::kThinkEnd);
      if (!think_end)
        return error(ErrorKind::kInvalidArgument,
                     "tool_choice: the tokenizer has no </think> token to force a call after");
      e.forced.after_token = *think_end;
    }
  }
  return e;
}

}  // namespace

HttpServer::HttpServer(ServerConfig config, EngineLoop& loop, const Tokenizer& tokenizer)
    : config_(std::move(config)), loop_(loop), tokenizer_(tokenizer), http_(std::make_unique<httplib::Server>()) {
  routes();
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::bind() {
  // cpp-httplib listens with a backlog of 5, compiled into Debian's library: a burst of clients
  // overflows it and the kernel drops connections the clients believe open. The socket-options
  // hook sees the listening socket, so listen again on it with a deep backlog after the bind.
  int listen_fd = -1;
  http_->set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  const int port = config_.port == 0                                 ? http_->bind_to_any_port(config_.host)
                   : http_->bind_to_port(config_.host, config_.port) ? config_.port
                                                                     : -1;
  if (port < 0) return error(ErrorKind::kIo, fmt::format("cannot listen on {}:{}", config_.host, config_.port));
  if (listen_fd >= 0) ::listen(listen_fd, kListenBacklog);
  return port;
}

void HttpServer::serve() {
  http_->listen_after_bind();
}

void HttpServer::stop() {
  http_->stop();
}

void HttpServer::routes() {
  httplib::Server& s = *http_;
  // A connection holds its thread while its request runs (streams for the whole generation), so
  // the pool is sized for the clients, not for the cores.
  s.new_task_queue = [] { return new httplib::ThreadPool(kConnectionThreads); };
  s.set_payload_max_length(config_.max_body_bytes);
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config_.api_key.empty() || !req.path.starts_with("/v1/")) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + config_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    res.set_content(
        R"({"error": {"message": "invalid or missing API key", "type": "authentication_error", "param": null, "code": 401}})",
        kJson);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const Status st = res.status == 404
                          ? error(ErrorKind::kNotFound, fmt::format("no route {} {}", req.method, req.path))
                      : res.status == 413 ? error(ErrorKind::kInvalidArgument, "the request body is too large")
                                          : error(ErrorKind::kInternal, fmt::format("HTTP {}", res.status));
    const int status = res.status;
    res.set_content(error_body(st), kJson);
    res.status = status;
  });
  s.Get("/health",
        [](const httplib::Request&, httplib::Response& res) { res.set_content(R"({"status": "ok"})", kJson); });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    OrderedJson j;
    j["object"] = "list";
    j["data"] = OrderedJson::array({{{"id", config_.model_name}, {"object", "model"}, {"owned_by", "dsinfer"}}});
    res.set_content(j.dump(), kJson);
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const EngineLoopStats st = loop_.stats();
    std::string text = fmt::format(
        "# HELP dsinfer_requests_total Requests accepted.\n# TYPE dsinfer_requests_total counter\n"
        "dsinfer_requests_total {}\n"
        "# HELP dsinfer_prompt_tokens_total Prompt tokens of finished requests.\n"
        "# TYPE dsinfer_prompt_tokens_total counter\ndsinfer_prompt_tokens_total {}\n"
        "# HELP dsinfer_generated_tokens_total Tokens generated by finished requests.\n"
        "# TYPE dsinfer_generated_tokens_total counter\ndsinfer_generated_tokens_total {}\n"
        "# HELP dsinfer_requests_active Requests running or waiting.\n# TYPE dsinfer_requests_active gauge\n"
        "dsinfer_requests_active {}\n"
        "# HELP dsinfer_requests_running Requests holding caches.\n# TYPE dsinfer_requests_running gauge\n"
        "dsinfer_requests_running {}\n"
        "# HELP dsinfer_requests_waiting Requests queued for caches.\n# TYPE dsinfer_requests_waiting gauge\n"
        "dsinfer_requests_waiting {}\n"
        "# HELP dsinfer_cache_blocks Cache blocks of the budget.\n# TYPE dsinfer_cache_blocks gauge\n"
        "dsinfer_cache_blocks {}\n"
        "# HELP dsinfer_cache_blocks_used Cache blocks held by requests.\n# TYPE dsinfer_cache_blocks_used gauge\n"
        "dsinfer_cache_blocks_used {}\n"
        "# HELP dsinfer_preemptions_total Requests preempted to free cache blocks (they recompute).\n"
        "# TYPE dsinfer_preemptions_total counter\ndsinfer_preemptions_total {}\n",
        st.requests, st.prompt_tokens, st.completion_tokens, st.active, st.engine.running, st.engine.waiting,
        st.engine.cache_blocks, st.engine.cache_blocks - st.engine.cache_blocks_free, st.engine.preemptions);
    text += st.ttft.prometheus("dsinfer_time_to_first_token_seconds", "From submission to the first output.");
    text += st.tpot.prometheus("dsinfer_time_per_output_token_seconds", "Per output token after the first.");
    res.set_content(text, "text/plain; version=0.0.4");
  });
  for (const bool chat : {true, false}) {
    s.Post(chat ? "/v1/chat/completions" : "/v1/completions", [this, chat](const httplib::Request& req,
                                                                           httplib::Response& res) {
      auto parsed = parse_completion_request(req.body, chat, config_.model_name);
      if (!parsed.ok()) return send_error(res, parsed.status());
      auto request = engine_request(*parsed, tokenizer_, config_.context);
      if (!request.ok()) return send_error(res, request.status());
      auto stream = loop_.submit(std::move(*request));
      if (!stream.ok()) return send_error(res, stream.status());
      const ResponseHeader header{
          (chat ? "chatcmpl-" : "cmpl-") + random_hex(24), config_.model_name,
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
              .count()};
      const bool thinking = chat && parsed->chat_options.thinking;
      if (!parsed->stream) {
        std::string text;
        std::vector<SampledLogprobs> sampled;
        RequestOutput out, last;
        while ((*stream)->next(&out)) {
          text += out.text;
          sampled.insert(sampled.end(), out.logprobs.begin(), out.logprobs.end());
          last = out;
        }
        if (last.finish == FinishReason::kError) return send_error(res, error(ErrorKind::kInternal, last.error));
        const Usage usage{last.prompt_tokens, last.completion_tokens};
        int64_t offset = 0;
        const std::vector<LogprobEntry> entries = logprob_entries(sampled, tokenizer_, &offset);
        const ChoiceLogprobs logprobs = parsed->logprobs >= 0 ? &entries : nullptr;
        if (!chat)
          return res.set_content(completion_body(header, text, finish_name(last.finish, false), usage, logprobs),
                                 kJson);
        ParsedCompletion c = parse_completion(text, thinking);
        for (ToolCall& t : c.tool_calls) t.id = "call_" + random_hex(24);
        return res.set_content(
            chat_completion_body(header, c, finish_name(last.finish, !c.tool_calls.empty()), usage, logprobs), kJson);
      }
      auto shared = std::make_shared<ChatStreamParser>(thinking);
      const CompletionRequest options = *parsed;
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, stream = *stream, shared, header, chat, options, first = true, offset = int64_t{0}](
              size_t, httplib::DataSink& sink) mutable {
            RequestOutput out;
            if (!stream->next(&out)) return false;
            auto write = [&](const std::string& e) { return sink.is_writable() && sink.write(e.data(), e.size()); };
            const std::vector<LogprobEntry> entries = logprob_entries(out.logprobs, tokenizer_, &offset);
            const ChoiceLogprobs logprobs = options.logprobs >= 0 ? &entries : nullptr;
            bool ok = true;
            if (out.finish == FinishReason::kNone) {
              if (chat) {
                const ChatStreamParser::Delta d = shared->push(out.text);
                if (!d.reasoning.empty() || !d.content.empty() || !entries.empty() || first)
                  ok = write(chat_chunk_event(header, d, first, {}, std::nullopt, logprobs)), first = false;
              } else if (!out.text.empty() || !entries.empty()) {
                ok = write(completion_chunk_event(header, out.text, std::nullopt, logprobs));
              }
              if (!ok) loop_.cancel(stream->id());  // the client went away
              return ok;
            }
            std::vector<ToolCall> calls;
            if (chat) {
              ChatStreamParser::Delta d = shared->push(out.text);
              const ChatStreamParser::Delta rest = shared->finish(&calls);
              d.reasoning += rest.reasoning, d.content += rest.content;
              for (ToolCall& t : calls) t.id = "call_" + random_hex(24);
              ok = write(chat_chunk_event(header, d, first, calls, finish_name(out.finish, !calls.empty()), logprobs));
            } else {
              ok = write(completion_chunk_event(header, out.text, finish_name(out.finish, false), logprobs));
            }
            if (ok && options.include_usage)
              ok = write(usage_event(header, chat, {out.prompt_tokens, out.completion_tokens}));
            if (ok) write(std::string(kDoneEvent));
            sink.done();
            return true;
          },
          [this, stream = *stream](bool success) {
            if (!success) loop_.cancel(stream->id());
          });
    });
  }
}

}  // namespace dsinfer::server
