// HttpServer: the OpenAI-compatible API over the HTTP transport (server/http): the routes, the API
// key, and the completion routes' handler (completion_handler.h). Requests go to an EngineLoop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "io/tokenizer.h"
#include "runtime/engine_loop.h"
#include "server/http/http_transport.h"

namespace dsinfer::server {

struct ServerConfig {
  http::TransportConfig transport;  // address, limits, deadlines (its error_body is set here)
  std::string api_key;              // empty: no key required
  std::string model_name = "dsinfer";
  int64_t context = 0;  // the model's max_seq_len
};

class HttpServer {
 public:
  HttpServer(ServerConfig config, EngineLoop& loop, const Tokenizer& tokenizer);
  ~HttpServer();
  /// Binds the socket; returns the port, or kIo naming the address.
  Result<int> bind();
  /// Serves until stop(); call after bind(). Returns once every handler has returned; kIo when
  /// the sockets cannot be waited on.
  Status serve();
  void stop();

 private:
  /// What a request gets instead of its handler, decided on its head before its body is read: 404
  /// for no route, 405 for a wrong method, 401 without the key.
  std::optional<http::Refusal> refusal(const http::HttpRequest& req) const;
  void handle(http::HttpExchange& ex);
  ServerConfig config_;
  EngineLoop& loop_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<http::HttpTransport> transport_;
};

}  // namespace dsinfer::server
