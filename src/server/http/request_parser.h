// An incremental HTTP/1.x request reader (RFC 9112): bytes in as they arrive, whole requests out,
// every limit of HttpLimits applied before the bytes it bounds are kept. The framing is strict
// where a lenient reader would let a proxy and this server disagree about where a request ends:
// conflicting Content-Length values, Content-Length together with Transfer-Encoding, a transfer
// coding other than chunked, whitespace before a header's colon and folded header lines are
// refused.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "server/http/http_request.h"

namespace dsinfer::http {

class RequestParser {
 public:
  enum class State {
    kNeedMore,  // feed more bytes
    kComplete,  // take() the request; the bytes after it stay in the buffer (a pipelined request)
    kError,     // error_status() and error_message() say why; the connection cannot be reused
  };

  explicit RequestParser(HttpLimits limits) : limits_(limits) {}

  /// Reads what it can from the front of `buffer`, erasing the bytes it has used.
  State feed(std::string& buffer);
  /// Whether the request line and headers have been read (the body may still be coming).
  bool head_complete() const { return phase_ > Phase::kHead; }
  /// Whether the client waits for `100 Continue` before it sends the body.
  bool expects_continue() const { return expects_continue_; }
  /// Whether a request has begun: a byte of its request line has come (an idle keep-alive
  /// connection, or one that only sent blank lines between requests, has not).
  bool started() const { return started_; }
  /// The request line and headers, once head_complete(): what a server decides on before it lets
  /// the body come (route, method, key).
  const HttpRequest& head() const { return request_; }
  /// The body bytes read so far.
  size_t body_bytes() const { return request_.body.size(); }
  /// The request just completed; the parser is then ready for the next one.
  HttpRequest take();
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class Phase { kHead, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailers, kComplete, kError };
  State fail(int status, std::string message);
  // One line ending in LF (a CR before it dropped) from buffer[pos_...]; false when it has not
  // arrived yet. Refuses a line longer than `limit`, and with `crlf` one that ends in a bare LF.
  bool next_line(const std::string& buffer, size_t limit, int too_long_status, std::string_view* line,
                 bool crlf = false);
  State request_line(std::string_view line);
  State header_line(std::string_view line);
  // A header or trailer field's syntax; an error message, or empty.
  std::string field_problem(std::string_view line) const;
  State head_done();
  State chunk_size_line(std::string_view line);

  HttpLimits limits_;
  HttpRequest request_;
  Phase phase_ = Phase::kHead;
  size_t pos_ = 0;            // into the buffer of the current feed()
  size_t head_bytes_ = 0;     // request line, headers and trailers so far
  size_t remaining_ = 0;      // body bytes (Content-Length) or chunk bytes still to come
  size_t framing_bytes_ = 0;  // chunk-size lines so far
  size_t scanned_ = 0;        // bytes of the partial line at pos_ already searched for its LF
  int blank_lines_ = 0;       // empty lines before the request line
  bool have_request_line_ = false;
  bool expects_continue_ = false;
  bool started_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace dsinfer::http
