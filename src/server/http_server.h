// HttpServer: the OpenAI-compatible HTTP front (transport only): routes, the API key, body limits,
// JSON validation through openai_schema, prompts through the chat encoding, and responses whole or
// as server-sent events. Requests go to an EngineLoop; a client that disconnects mid-stream
// cancels its request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "io/tokenizer.h"
#include "runtime/engine_loop.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace dsinfer::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (bind() says which)
  std::string api_key;  // empty: no key required
  std::string model_name = "dsinfer";
  size_t max_body_bytes = 8u << 20;
  int64_t context = 0;  // the model's max_seq_len
};

class HttpServer {
 public:
  HttpServer(ServerConfig config, EngineLoop& loop, const Tokenizer& tokenizer);
  ~HttpServer();
  /// Binds the socket; returns the port, or kIo naming the address.
  Result<int> bind();
  /// Serves until stop(); call after bind().
  void serve();
  void stop();

 private:
  void routes();
  /// POST /v1/chat/completions (chat) or /v1/completions: validates the body, submits the request
  /// and answers whole or as server-sent events.
  /// `hung_up`: whether the client has gone (a whole response's wait polls it and cancels then).
  void complete(std::string_view body, bool chat, httplib::Response& res, const std::function<bool()>& hung_up);
  ServerConfig config_;
  EngineLoop& loop_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<httplib::Server> http_;
};

}  // namespace dsinfer::server
