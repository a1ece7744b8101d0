// One HTTP/1.x request as the transport hands it to a handler, and the limits its reading obeys.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsinfer::http {

struct HttpLimits {
  size_t max_request_line_bytes = 8 << 10;
  size_t max_header_bytes = 64 << 10;  // the request line and every header line, trailers included
  size_t max_headers = 100;
  size_t max_body_bytes = 8 << 20;  // after chunked decoding, whatever the transfer encoding
};

struct HttpRequest {
  std::string method;                                        // case-sensitive, as sent
  std::string path;                                          // the target without its query
  std::string query;                                         // after '?', undecoded
  int minor_version = 1;                                     // HTTP/1.0 or HTTP/1.1
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in the order sent
  std::string body;                                          // chunked bodies decoded

  /// The first value of header `name` (lower-case), or nullptr.
  const std::string* header(std::string_view name) const;
  /// Whether the client keeps the connection open after the response (HTTP/1.1 unless
  /// `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`).
  bool keep_alive() const;
};

/// The reason phrase of a status code ("Not Found"); "Unknown" for one this server never sends.
std::string_view reason_phrase(int status);

}  // namespace dsinfer::http
