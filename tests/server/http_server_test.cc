// The HTTP server end to end on the tiny model over loopback: routes, the API key, errors in
// OpenAI's shape (400, 401, 404, 413), whole and streamed chat completions that agree, 32 clients
// at once, a client that disconnects mid-stream while the server keeps serving, and a long whole
// completion that holds up neither /metrics nor a short request and is cancelled when its client
// hangs up.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "io/json.h"
#include "server/http/raw_client.h"
#include "tiny_model_fixture.h"

namespace dsinfer::server {
namespace {

constexpr const char* kChat = R"({"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 6,
    "temperature": 0, "thinking": {"type": "disabled"}})";

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tiny_.ok());
    // A context of 1024 positions and a cache budget of one such sequence in two-position blocks:
    // about six short requests fit, not the sixteen that may run at once, so the 32 clients below
    // get preempted and recompute.
    constexpr int64_t kContext = 1024;  // room for the official tools block (about 700 tiny-tokenizer tokens)
    const CacheSizes sizes = reference_cache_sizes(tiny_.model->config());
    const CacheLayout probe = *cache_layout(sizes, 1 << 30, 2, kContext);
    auto cache = cache_layout(sizes, (probe.fixed_blocks + kContext / 2) * probe.block_bytes, 2, kContext);
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    cache_blocks_ = cache->num_blocks;
    engine_ = std::make_unique<Engine>(*tiny_.model, *tiny_.tok, SchedulerConfig{64, 16, speculative()}, *cache);
    loop_ = std::make_unique<EngineLoop>(*engine_, 64);
    ServerConfig config;
    config.transport.port = 0, config.api_key = "secret", config.transport.limits.max_body_bytes = 1 << 16;
    // Every client here is 127.0.0.1: 64 streams right after another request would meet the
    // per-address cap (64) while the server still closes that request's connection.
    config.transport.max_connections_per_client = 0;
    config.context = kContext;
    server_ = std::make_unique<HttpServer>(config, *loop_, *tiny_.tok);
    auto port = server_->bind();
    ASSERT_TRUE(port.ok());
    port_ = *port;
    serving_ = std::thread([this] { EXPECT_TRUE(server_->serve().ok()); });
  }
  virtual SpeculativeConfig speculative() const { return {}; }
  void TearDown() override {
    if (server_) server_->stop();
    if (serving_.joinable()) serving_.join();
  }
  // A streaming POST: `on_data` sees the body as it arrives and may hang up by returning false.
  httplib::Result post_streaming(const std::string& body, std::function<bool(const char*, size_t)> on_data) {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.headers = {{"Authorization", "Bearer secret"}, {"Content-Type", "application/json"}};
    req.body = body;
    req.content_receiver = [on_data](const char* data, size_t n, uint64_t, uint64_t) { return on_data(data, n); };
    auto c = client();
    return c.send(req);
  }
  httplib::Client client(bool key = true) {
    httplib::Client c("127.0.0.1", port_);
    if (key) c.set_default_headers({{"Authorization", "Bearer secret"}});
    // Long enough for the last of 32 clients under the sanitizers on two cores (about a minute
    // there), short enough that a hung server fails the test well before ctest's own limit.
    c.set_read_timeout(300);
    return c;
  }
  // 32 clients at once send the greedy chat of 48 tokens; each must get what one alone got.
  void expect_thirty_two_clients_get_one_alones_text() {
    Json request = Json::parse(kChat);
    request["max_tokens"] = 48;  // enough output that the requests admitted on their prompts outgrow the budget
    const std::string body = request.dump();
    auto alone = client().Post("/v1/chat/completions", body, "application/json");
    ASSERT_TRUE(alone);
    const std::string expected = Json::parse(alone->body)["choices"][0]["message"]["content"];
    std::atomic<int> ok{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < 32; ++i)
      clients.emplace_back([&] {
        auto c = client();
        auto r = c.Post("/v1/chat/completions", body, "application/json");
        if (r && r->status == 200 && Json::parse(r->body)["usage"]["completion_tokens"] == 48 &&
            Json::parse(r->body)["choices"][0]["message"]["content"] == expected)
          ++ok;
        else
          ADD_FAILURE() << (r ? std::to_string(r->status) + " " + r->body : "error " + httplib::to_string(r.error()));
      });
    for (auto& c : clients) c.join();
    EXPECT_EQ(ok.load(), 32);  // each the same as alone, preempted or not
  }

  testing::TinyModel tiny_{5};
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<HttpServer> server_;
  std::thread serving_;
  int port_ = 0;
  int cache_blocks_ = 0;
};

TEST_F(HttpServerTest, RoutesKeysAndErrors) {
  auto c = client();
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(Json::parse(r->body)["data"][0]["id"], "dsinfer");
  auto anonymous = client(false);
  r = anonymous.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "authentication_error");
  r = c.Get("/v2/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(Json::parse(r->body).contains("error"));
  r = c.Post("/v1/chat/completions", "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 7})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("top_p"), std::string::npos);
  r = c.Post("/v1/chat/completions", R"({"model": "other", "messages": [{"role": "user", "content": "hi"}]})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = c.Post("/v1/chat/completions", std::string(1 << 17, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  const std::string long_prompt = R"({"prompt": ")" + std::string(20000, 'a') + R"("})";
  r = c.Post("/v1/completions", long_prompt, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);  // longer than the context
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("dsinfer_requests_total"), std::string::npos);
}

// /health is open; /metrics and the /v1/ routes need the key. Wrong methods get 405 with Allow,
// and the errors the transport answers itself carry OpenAI's error shape with the status as code.
TEST_F(HttpServerTest, KeyPolicyMethodsAndTransportErrorsInOpenAiShape) {
  auto anonymous = client(false);
  auto r = anonymous.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  for (const char* path : {"/metrics", "/v1/models"}) {
    r = anonymous.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
  }
  auto c = client();
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/v1/chat/completions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], 405);
  r = c.Post("/health", "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, HEAD");
  // A NUL byte would hide what follows it from the JSON parser: the body is refused.
  r = c.Post("/v1/chat/completions", std::string(kChat) + std::string(1, '\0') + "{garbage", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("NUL byte"), std::string::npos) << r->body;
  // curl -d labels a JSON body as a form: it is read as JSON whatever its length.
  r = c.Post("/v1/chat/completions", std::string(kChat) + std::string(10000, ' '), "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = c.Post("/v1/chat/completions", std::string(1 << 17, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], 413);

  const auto raw = [this](const std::string& bytes) {
    http::testing::RawClient rc(port_);
    rc.send(bytes);
    return rc.read_all(5);
  };
  const auto status_and_code = [](const std::string& response) {
    const size_t body = response.find("\r\n\r\n");
    if (body == std::string::npos) return std::pair<std::string, int>(response, -1);
    return std::pair<std::string, int>(response.substr(9, 3), Json::parse(response.substr(body + 4))["error"]["code"]);
  };
  std::string flood = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 200; ++i) flood += fmt::format("X-{}: y\r\n", i);
  EXPECT_EQ(status_and_code(raw(flood + "\r\n")), (std::pair<std::string, int>("431", 431)));
  EXPECT_EQ(status_and_code(raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nContent-Length: "
                                "2\r\n\r\n{}")),
            (std::pair<std::string, int>("400", 400)));
  EXPECT_EQ(status_and_code(raw("GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(100000, 'a') + "\r\n\r\n")),
            (std::pair<std::string, int>("431", 431)));
  std::string chunked =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\nTransfer-Encoding: "
      "chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) chunked += fmt::format("{:x}\r\n{}\r\n", 1 << 15, std::string(1 << 15, ' '));
  EXPECT_EQ(status_and_code(raw(chunked)), (std::pair<std::string, int>("413", 413)));
}

// /v1/completions: BOS first as the official encoder's add_default_bos_token, not doubled when the
// prompt starts with it, left out with add_special_tokens false.
TEST_F(HttpServerTest, CompletionsPutBosFirst) {
  auto c = client();
  const auto prompt_tokens = [&](const std::string& body) {
    auto r = c.Post("/v1/completions", body, "application/json");
    EXPECT_TRUE(r);
    if (!r) return int64_t{-1};
    EXPECT_EQ(r->status, 200) << r->body;
    return Json::parse(r->body)["usage"]["prompt_tokens"].get<int64_t>();
  };
  const int64_t bare = tiny_.tok->encode("Once upon").size();
  EXPECT_EQ(prompt_tokens(R"({"prompt": "Once upon", "max_tokens": 1})"), bare + 1);
  EXPECT_EQ(prompt_tokens(R"({"prompt": "<｜begin▁of▁sentence｜>Once upon", "max_tokens": 1})"), bare + 1);
  EXPECT_EQ(prompt_tokens(R"({"prompt": "Once upon", "max_tokens": 1, "add_special_tokens": false})"), bare);
}

TEST_F(HttpServerTest, LogprobsAndAForcedToolCall) {
  auto c = client();
  Json request = Json::parse(kChat);
  request["logprobs"] = true;
  request["top_logprobs"] = 2;
  auto r = c.Post("/v1/chat/completions", request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  const Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u);  // one per generated token (finish "length": no end token)
  for (const Json& t : content) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["token"], t["top_logprobs"][0]["token"]);  // greedy: the likeliest token
    EXPECT_FALSE(t["bytes"].empty());
  }
  // Text completions: the legacy parallel arrays, offsets into the text.
  r = c.Post("/v1/completions", R"({"prompt": "Once upon", "max_tokens": 4, "temperature": 0, "logprobs": 1})",
             "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = Json::parse(r->body);
  const Json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"][0].size(), 1u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (int i = 1; i < 4; ++i) EXPECT_GT(lp["text_offset"][i], lp["text_offset"][i - 1]);  // byte offsets
  // Without the field: null.
  r = c.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(r);
  EXPECT_TRUE(Json::parse(r->body)["choices"][0]["logprobs"].is_null());
  // A named tool choice: the reply opens the call (random weights rarely finish it well-formed,
  // so the call is either parsed or left as content that starts with its opening).
  request = Json::parse(kChat);
  request["max_tokens"] = 80;  // the tiny tokenizer spells the opening in many byte tokens
  request["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "lookup"}}])");
  request["tool_choice"] = Json::parse(R"({"type": "function", "function": {"name": "lookup"}})");
  r = c.Post("/v1/chat/completions", request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = Json::parse(r->body);
  const Json& message = j["choices"][0]["message"];
  if (message.contains("tool_calls"))
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "lookup");
  else
    EXPECT_NE(message["content"].get<std::string>().find("<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"lookup\">"),
              std::string::npos)
        << message.dump();
}

TEST_F(HttpServerTest, StreamedChatEqualsTheWholeResponse) {
  auto c = client();
  auto whole = c.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json w = Json::parse(whole->body);
  EXPECT_EQ(w["usage"]["completion_tokens"], 6);
  EXPECT_EQ(w["choices"][0]["finish_reason"], "length");
  Json streamed_request = Json::parse(kChat);
  streamed_request["stream"] = true;
  streamed_request["stream_options"] = {{"include_usage", true}};
  std::string sse;
  auto r = post_streaming(streamed_request.dump(), [&](const char* data, size_t n) {
    sse.append(data, n);
    return true;
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::string content;
  int usage_events = 0;
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", at);
    const std::string payload = sse.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") continue;
    const Json e = Json::parse(payload);
    if (e.contains("usage")) ++usage_events;
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
      content += e["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_TRUE(sse.ends_with("data: [DONE]\n\n"));
  EXPECT_EQ(usage_events, 1);
  EXPECT_EQ(content, w["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(HttpServerTest, ThirtyTwoClientsAndADisconnect) {
  expect_thirty_two_clients_get_one_alones_text();
  EXPECT_GT(loop_->stats().engine.preemptions, 0);

  // A streaming client that hangs up after its first event: the server cancels it and goes on.
  Json long_stream = Json::parse(kChat);
  long_stream["stream"] = true;
  long_stream["max_tokens"] = 200;
  int events = 0;
  post_streaming(long_stream.dump(), [&](const char*, size_t) { return ++events < 2; });
  auto again = client().Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  for (int i = 0; i < 100 && loop_->stats().active > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(loop_->stats().active, 0);  // the abandoned stream was cancelled, not run to 200 tokens
  auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("dsinfer_time_to_first_token_seconds_count"), std::string::npos);
  EXPECT_NE(metrics->body.find("dsinfer_time_per_output_token_seconds_bucket{le=\"+Inf\"} 35"), std::string::npos)
      << metrics->body;  // the first, the 32 clients, the cancelled stream and the one after it
  EXPECT_NE(metrics->body.find(fmt::format("dsinfer_cache_blocks {}\n", cache_blocks_)), std::string::npos);
  EXPECT_NE(metrics->body.find("dsinfer_cache_blocks_used 0\n"), std::string::npos);  // all given back
  EXPECT_EQ(metrics->body.find("dsinfer_preemptions_total 0\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("dsinfer_draft_tokens_total 0\n"), std::string::npos);  // no --speculative here
}

// The same with speculative decoding (every step verifying 5 drafts, never stopped): the requests
// verify their drafts together in the server's steps, preempted or not, each with what it gets alone.
class SpeculativeHttpServerTest : public HttpServerTest {
 protected:
  SpeculativeConfig speculative() const override { return {5, 0, 0}; }
};

TEST_F(SpeculativeHttpServerTest, ThirtyTwoClientsVerifyTheirDraftsTogether) {
  expect_thirty_two_clients_get_one_alones_text();
  const EngineStats s = loop_->stats().engine;
  EXPECT_GT(s.preemptions, 0);
  EXPECT_GT(s.verify_steps, 32 * 20);
  auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find(fmt::format("dsinfer_draft_tokens_total {}\n", s.drafted_tokens)), std::string::npos)
      << metrics->body;
}

// The reliability probe's defect 1: JSON nested 30,000 deep in a tool schema or in a tool call's
// arguments (an object, or a JSON string parsed again) crashed the server through recursion. Each
// now gets a 400 in OpenAI's shape naming the limit, and the server keeps serving.
TEST_F(HttpServerTest, DeeplyNestedJsonGets400AndTheServerKeepsServing) {
  constexpr int kDepth = 30'000;
  const std::string deep = std::string(kDepth, '[') + std::string(kDepth, ']');
  const std::string user = R"({"role": "user", "content": "hi"})";
  const std::string call_open =
      R"({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": )";
  const std::string requests[] = {
      // tools[0].function.parameters, the probe's repro
      R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": )" +
          deep + "}}]}",
      // messages[1].tool_calls[0].function.arguments as an object
      "{\"messages\": [" + user + ", " + call_open + R"({"x": )" + deep + "}}}]}]}",
      // ... and as a JSON string, parsed again when the prompt is rendered
      "{\"messages\": [" + user + ", " + call_open + R"("{\"x\": )" + deep + "}\"}}]}]}",
      "{\"messages\": [" + user + ", " + call_open + "\"" + deep + "\"}}]}]}",
  };
  auto c = client();
  for (const std::string& body : requests) {
    ASSERT_LT(body.size(), 1u << 16);  // under the test server's body limit, as the probe's 60 KB
    auto r = c.Post("/v1/chat/completions", body, "application/json");
    ASSERT_TRUE(r) << "no answer: did the server die?";
    EXPECT_EQ(r->status, 400) << r->body;
    auto j = parse_json(r->body, "error body");
    ASSERT_TRUE(j.ok()) << r->body;
    EXPECT_EQ((*j)["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_NE((*j)["error"]["message"].get<std::string>().find("JSON nested deeper than 128 levels"), std::string::npos)
        << r->body;
    EXPECT_LT(r->body.size(), 1024u);  // the error does not echo the input back
  }
  auto again = c.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

// A long whole (not streamed) completion: /metrics answers at once while it runs, a short request
// sent meanwhile finishes while it is still running, and a client that hangs up is cancelled.
TEST_F(HttpServerTest, LongRequestBlocksNothingAndAHangUpCancelsIt) {
  using Clock = std::chrono::steady_clock;
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 500, "temperature": 1, "seed": 2})";
  const std::string http = fmt::format(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
      "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}X",  // X: a byte of a next request, unread
      body.size(), body);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET, addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::write(fd, http.data(), http.size()), static_cast<ssize_t>(http.size()));
  for (int i = 0; i < 500 && loop_->stats().engine.running == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(loop_->stats().engine.running, 1);

  auto t = Clock::now();
  auto metrics = client().Get("/metrics");
  const double metrics_s = std::chrono::duration<double>(Clock::now() - t).count();
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("dsinfer_requests_running 1\n"), std::string::npos) << metrics->body;
  t = Clock::now();
  auto short_one = client().Post("/v1/chat/completions", kChat, "application/json");
  const double short_s = std::chrono::duration<double>(Clock::now() - t).count();
  ASSERT_TRUE(short_one);
  EXPECT_EQ(short_one->status, 200);
  for (int i = 0; i < 200 && loop_->stats().engine.running > 1; ++i)  // the short one's end is published after its step
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineLoopStats during = loop_->stats();
  EXPECT_EQ(during.engine.running, 1);  // the long one still runs
  EXPECT_EQ(during.active, 1);

  ::close(fd);  // hang up without reading the answer
  t = Clock::now();
  for (int i = 0; i < 400 && loop_->stats().active > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double cancel_s = std::chrono::duration<double>(Clock::now() - t).count();
  const EngineLoopStats after = loop_->stats();
  EXPECT_EQ(after.active, 0);
  const int64_t long_tokens = after.completion_tokens - during.completion_tokens;
  EXPECT_LT(long_tokens, 250);  // of 500
  std::printf(
      "/metrics %.4f s and a 6-token request %.3f s beside a long one; a hang-up cancelled it in %.3f s "
      "after %lld of 500 tokens\n",
      metrics_s, short_s, cancel_s, static_cast<long long>(long_tokens));
}

// The probe's soak in small: 64 streaming clients at once, half of them hanging up after one to
// three reads. Those that stay get the text they get alone; those that hang up are cancelled
// within a few tokens of 120; afterwards nothing runs and every cache block is back.
TEST_F(HttpServerTest, SixtyFourStreamsHalfHangingUp) {
  Json request = Json::parse(kChat);
  request["max_tokens"] = 24;
  auto alone = client().Post("/v1/chat/completions", request.dump(), "application/json");
  ASSERT_TRUE(alone);
  const std::string expected = Json::parse(alone->body)["choices"][0]["message"]["content"];
  const int64_t tokens_before = loop_->stats().completion_tokens;
  request["stream"] = true;
  const std::string stays = request.dump();
  request["max_tokens"] = 120;
  const std::string leaves = request.dump();
  std::atomic<int> stayed_ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 64; ++i)
    clients.emplace_back([&, i] {
      const bool hang_up = i % 2 == 0;
      int reads = 0;
      std::string sse;
      auto r = post_streaming(hang_up ? leaves : stays, [&](const char* d, size_t n) {
        sse.append(d, n);
        return !hang_up || ++reads < 1 + i % 3;
      });
      if (hang_up) return;
      std::string content;
      for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
        const Json e = Json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
        if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
          content += e["choices"][0]["delta"]["content"].get<std::string>();
      }
      if (r && r->status == 200 && content == expected && sse.ends_with("data: [DONE]\n\n")) ++stayed_ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(stayed_ok.load(), 32);
  for (int i = 0; i < 400 && loop_->stats().active > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineLoopStats after = loop_->stats();
  EXPECT_EQ(after.active, 0);
  EXPECT_EQ(after.engine.running, 0);
  EXPECT_EQ(after.engine.cache_blocks_free, after.engine.cache_blocks);
  const int64_t left_tokens = after.completion_tokens - tokens_before - 32 * 24;
  EXPECT_LT(left_tokens, 32 * 30) << "tokens generated for the 32 that hung up (of 32 x 120)";
  std::printf("64 streams: the 32 that hung up after 1-3 reads were charged %lld tokens (%.1f each, of 120)\n",
              static_cast<long long>(left_tokens), left_tokens / 32.0);
}

}  // namespace
}  // namespace dsinfer::server
