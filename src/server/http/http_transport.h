// The HTTP/1.1 transport of `dsinfer serve`: it listens, reads requests and writes responses;
// what a request means is the handler's. One event thread reads every connection that is between
// requests or in the middle of sending one, so a client that sends slowly or nothing holds a
// socket, never a thread, and loses it at a deadline; a whole request runs its handler on a
// thread of its own, which may stream. Limits: bytes and count of header fields and the body
// (every transfer encoding), connections in all and per client address, a deadline for reading
// a whole request, for an idle keep-alive connection and for each write of a response.
// Pipelined requests on one connection are answered in order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/http/http_request.h"

namespace dsinfer::http {

using Header = std::pair<std::string, std::string>;

/// An answer the server gives instead of reading a request's body (a route that does not exist,
/// a wrong method, a missing key).
struct Refusal {
  int status = 400;
  std::string message;
  std::vector<Header> headers;
};

struct TransportConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() says which)
  HttpLimits limits;
  int max_connections = 1024;
  int max_connections_per_client = 64;    // by peer address; 0: no cap (behind a proxy, one address)
  double request_timeout_s = 30;          // from a request's first byte to its last
  double keep_alive_timeout_s = 5;        // a connection with no request under way
  double send_timeout_s = 30;             // one write of a response that the client does not read
  size_t max_buffered_bytes = 256 << 20;  // request bytes held by all connections being read (more: 503)
  // Looks at a request's line and headers before its body is read (and before `100 Continue`):
  // a refusal is sent at once and the body never read. May be empty.
  std::function<std::optional<Refusal>(const HttpRequest&)> head_check;
  // The body and content type of an error the transport answers itself (a malformed request, a
  // limit, a busy server): a status and a message naming the problem.
  std::function<std::pair<std::string, std::string>(int status, std::string_view message)> error_body;
};

/// One request and its response, handed to the handler on the request's own thread.
class HttpExchange {
 public:
  const HttpRequest& request() const { return request_; }
  const std::string& peer_address() const { return peer_; }
  /// Whether the client closed its end or reset the connection (bytes of a next, pipelined request
  /// mean it is still there; a client that only half-closes counts as gone).
  bool client_gone() const;
  /// A whole response (HEAD: the same head, no body).
  void respond(int status, std::string_view content_type, std::string_view body, std::span<const Header> extra = {});
  /// Starts a response whose body comes in pieces: chunked for HTTP/1.1, ended by closing the
  /// connection for HTTP/1.0. False when the client is gone.
  bool start_stream(int status, std::string_view content_type, std::span<const Header> extra = {});
  /// One piece of a started stream; false once the client is gone (or stopped reading for the
  /// send timeout), after which nothing more is written.
  bool write(std::string_view piece);
  void end_stream();
  bool responded() const { return state_ != State::kNone; }
  /// Ends the response as broken: nothing more is written and the connection is closed (a
  /// stream that cannot finish must not look finished).
  void abandon() { broken_ = true; }

 private:
  friend class HttpTransport;
  enum class State { kNone, kStreaming, kDone };
  HttpExchange(int fd, HttpRequest request, std::string peer, double send_timeout_s)
      : fd_(fd), request_(std::move(request)), peer_(std::move(peer)), send_timeout_s_(send_timeout_s) {}
  std::string head(int status, std::string_view content_type, std::span<const Header> extra,
                   std::string_view framing) const;
  bool send(std::string_view bytes);
  // Whether the connection can carry the next request after this one.
  bool reusable() const;

  int fd_;
  HttpRequest request_;
  std::string peer_;
  double send_timeout_s_;
  State state_ = State::kNone;
  bool broken_ = false;           // a write failed: the connection is closed after the handler
  bool close_delimited_ = false;  // an HTTP/1.0 stream: its end is the connection's
};

using Handler = std::function<void(HttpExchange&)>;

class HttpTransport {
 public:
  HttpTransport(TransportConfig config, Handler handler);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  /// Listens on the configured address; returns the port, or kIo naming the address.
  Result<int> bind();
  /// Serves until stop(); returns once every handler has returned. Call after bind(). kIo when
  /// waiting on the sockets fails.
  Status serve();
  /// From any thread: stops accepting and reading; running handlers finish their responses.
  void stop();

 private:
  struct Connection;
  void accept_all();
  // Reads what the socket has; false when the connection failed. Sets c.peer_closed at its end.
  bool read_from(Connection& c);
  // Parses what has been read: answers errors, sends 100 Continue, hands a whole request to a
  // handler thread. False when the connection left the event loop (handed over or closed).
  bool advance(std::unique_ptr<Connection>& c);
  void run_handler(std::unique_ptr<Connection> c, HttpRequest request);
  // Writes an error of the transport's own and closes the connection after a short drain.
  void reject(Connection& c, int status, std::string_view message, std::span<const Header> headers = {});
  // Stops writing and reads what the client still sends for a moment, then closes: closing with
  // unread bytes would reset the connection and could destroy an answer before it is read.
  void linger(Connection& c);
  // The bytes a connection being read holds, counted into buffered_.
  void count_buffered(Connection& c);
  void close_connection(Connection& c);
  void wake();

  TransportConfig config_;
  Handler handler_;
  int listen_fd_ = -1, wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Connection>> reading_;  // the event thread's own
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::vector<char> read_chunk_;  // the event thread's recv buffer
  size_t buffered_ = 0;           // bytes held by the connections in reading_ (count_buffered)

  std::mutex mu_;  // guards what follows
  std::condition_variable handlers_done_;
  int handlers_ = 0;
  int connections_ = 0;
  std::unordered_map<std::string, int> per_client_;
  std::vector<std::unique_ptr<Connection>> returned_;  // back from handlers, for the event thread
};

}  // namespace dsinfer::http
