// The completion routes: POST /v1/chat/completions and /v1/completions. A request is validated,
// submitted to the engine loop and answered whole or as server-sent events; while it runs its
// connection is looked at every 100 ms, and a client that has gone is cancelled.
#pragma once

#include <cstdint>
#include <string>

#include "io/tokenizer.h"
#include "runtime/engine_loop.h"
#include "server/http/http_transport.h"

namespace dsinfer::server {

struct CompletionRoute {
  bool chat = true;  // /v1/chat/completions (messages) or /v1/completions (prompt)
  EngineLoop& loop;
  const Tokenizer& tokenizer;
  const std::string& model_name;
  int64_t context = 0;
};

void handle_completion(http::HttpExchange& ex, const CompletionRoute& route);

/// Sends `s` as an OpenAI error body with the status of its kind.
void send_error(http::HttpExchange& ex, const Status& s);

}  // namespace dsinfer::server
