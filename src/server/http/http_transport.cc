#include "server/http/http_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "server/http/request_parser.h"

namespace dsinfer::http {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kListenBacklog = 1024;
constexpr int kTickMs = 200;                    // how often deadlines are looked at
constexpr double kDrainSeconds = 1.0;           // reading on after an error, so the client sees the answer
constexpr size_t kReadChunk = 64 << 10;         // one recv
constexpr size_t kReadPerWake = 256 << 10;      // one connection's bytes per pass, so one cannot starve the rest
constexpr int kAcceptsPerWake = 64;             // likewise for a flood of connections
constexpr size_t kKeptBufferBytes = 256 << 10;  // a buffer's capacity kept between requests

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string numeric_host(const sockaddr* a, socklen_t len) {
  char host[NI_MAXHOST];
  if (::getnameinfo(a, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

// Writes what the socket takes now and drops the rest (the transport's own small answers);
// whether all of it went.
bool send_now(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

struct HttpTransport::Connection {
  int fd = -1;
  std::string peer;
  std::string buffer;  // read, not yet parsed (the start of a pipelined request after a handler)
  RequestParser parser;
  Clock::time_point deadline;
  bool continue_sent = false;
  bool head_checked = false;  // the head_check has passed this request
  bool draining = false;      // an error was answered: read and drop until the client closes or the deadline
  bool peer_closed = false;   // the client has closed its end: what it sent is answered, then closed
  size_t counted = 0;         // the bytes counted into the transport's buffered_
  Connection(int f, std::string p, const HttpLimits& limits) : fd(f), peer(std::move(p)), parser(limits) {}
};

// --- HttpExchange --------------------------------------------------------------------------------

bool HttpExchange::client_gone() const {
  if (broken_) return true;
  // POLLRDHUP: the client's FIN, even behind bytes of a next request not read yet.
  pollfd p{fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool HttpExchange::send(std::string_view bytes) {
  if (broken_) return false;
  const auto deadline = after(send_timeout_s_);
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd_, POLLOUT, 0};
      if (left > 0 && ::poll(&p, 1, static_cast<int>(left)) >= 0) continue;
    }
    broken_ = true;
    return false;
  }
  return true;
}

std::string HttpExchange::head(int status, std::string_view content_type, std::span<const Header> extra,
                               std::string_view framing) const {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\n", status, reason_phrase(status));
  if (!content_type.empty()) h += fmt::format("Content-Type: {}\r\n", content_type);
  h += framing;
  h += reusable() ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : extra) h += fmt::format("{}: {}\r\n", name, value);
  h += "\r\n";
  return h;
}

void HttpExchange::respond(int status, std::string_view content_type, std::string_view body,
                           std::span<const Header> extra) {
  if (state_ != State::kNone) return;
  state_ = State::kDone;
  std::string bytes = head(status, content_type, extra, fmt::format("Content-Length: {}\r\n", body.size()));
  if (request_.method != "HEAD") bytes += body;
  send(bytes);
}

bool HttpExchange::start_stream(int status, std::string_view content_type, std::span<const Header> extra) {
  if (state_ != State::kNone) return false;
  state_ = State::kStreaming;
  close_delimited_ = request_.minor_version == 0;
  return send(head(status, content_type, extra, close_delimited_ ? "" : "Transfer-Encoding: chunked\r\n"));
}

bool HttpExchange::write(std::string_view piece) {
  if (state_ != State::kStreaming) return false;
  if (piece.empty() || request_.method == "HEAD") return !broken_;  // an empty chunk would end a chunked body
  if (close_delimited_) return send(piece);
  return send(fmt::format("{:x}\r\n{}\r\n", piece.size(), piece));
}

void HttpExchange::end_stream() {
  if (state_ != State::kStreaming) return;
  state_ = State::kDone;
  if (!close_delimited_ && request_.method != "HEAD") send("0\r\n\r\n");
}

bool HttpExchange::reusable() const {
  return !broken_ && !close_delimited_ && request_.keep_alive();
}

// --- HttpTransport -------------------------------------------------------------------------------

HttpTransport::HttpTransport(TransportConfig config, Handler handler)
    : config_(std::move(config)), handler_(std::move(handler)) {}

HttpTransport::~HttpTransport() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Result<int> HttpTransport::bind() {
  const std::string where = fmt::format("{}:{}", config_.host, config_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM, hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(config_.host.c_str(), std::to_string(config_.port).c_str(), &hints, &found); rc != 0)
    return error(ErrorKind::kIo, fmt::format("cannot listen on {}: {}", where, ::gai_strerror(rc)));
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) return error(ErrorKind::kIo, fmt::format("cannot listen on {}: {}", where, why));
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return error(ErrorKind::kIo, fmt::format("eventfd: {}", std::strerror(errno)));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void HttpTransport::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void HttpTransport::stop() {
  stopping_ = true;
  wake();
}

void HttpTransport::close_connection(Connection& c) {
  ::close(c.fd);
  std::lock_guard lock(mu_);
  --connections_;
  if (auto it = per_client_.find(c.peer); it != per_client_.end() && --it->second == 0) per_client_.erase(it);
}

void HttpTransport::reject(Connection& c, int status, std::string_view message, std::span<const Header> headers) {
  auto [body, type] = config_.error_body ? config_.error_body(status, message)
                                         : std::pair<std::string, std::string>(std::string(message), "text/plain");
  std::string extra;
  for (const auto& [name, value] : headers) extra += fmt::format("{}: {}\r\n", name, value);
  send_now(c.fd,
           fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
                       status, reason_phrase(status), type, body.size(), extra, body));
  linger(c);
}

void HttpTransport::linger(Connection& c) {
  ::shutdown(c.fd, SHUT_WR);
  c.draining = true;
  c.buffer.clear();
  c.buffer.shrink_to_fit();
  c.deadline = after(kDrainSeconds);
}

void HttpTransport::count_buffered(Connection& c) {
  const size_t now = c.draining ? 0 : c.buffer.size() + c.parser.body_bytes();
  buffered_ = buffered_ - c.counted + now;
  c.counted = now;
}

void HttpTransport::accept_all() {
  for (int accepted = 0; accepted < kAcceptsPerWake; ++accepted) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors the pending connection stays readable: wait a tick instead of spinning.
      if (errno == EMFILE || errno == ENFILE) accept_paused_until_ = after(kTickMs / 1000.0);
      return;  // EAGAIN: none left
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // stream events go out as they are made
    const std::string peer = numeric_host(reinterpret_cast<sockaddr*>(&addr), len);
    std::string refusal;
    {
      std::lock_guard lock(mu_);
      const auto it = per_client_.find(peer);
      const int from_client = it == per_client_.end() ? 0 : it->second;
      if (connections_ >= config_.max_connections)
        refusal = fmt::format("the server has {} connections open, its limit", config_.max_connections);
      else if (config_.max_connections_per_client > 0 && from_client >= config_.max_connections_per_client)
        refusal = fmt::format("{} connections are open from this address, the limit per client",
                              config_.max_connections_per_client);
      if (refusal.empty()) ++connections_, ++per_client_[peer];
    }
    if (!refusal.empty()) {
      // Answered and closed at once: a refused connection holds no descriptor past this call.
      auto [body, type] = config_.error_body ? config_.error_body(503, refusal)
                                             : std::pair<std::string, std::string>(refusal, "text/plain");
      send_now(fd, fmt::format("HTTP/1.1 503 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: "
                               "close\r\n\r\n{}",
                               reason_phrase(503), type, body.size(), body));
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>(fd, peer, config_.limits);
    c->deadline = after(config_.keep_alive_timeout_s);
    reading_.push_back(std::move(c));
  }
}

bool HttpTransport::read_from(Connection& c) {
  read_chunk_.resize(kReadChunk);
  for (size_t total = 0; total < kReadPerWake;) {
    const ssize_t n = ::recv(c.fd, read_chunk_.data(), read_chunk_.size(), 0);
    if (n > 0) {
      total += static_cast<size_t>(n);
      if (!c.draining) c.buffer.append(read_chunk_.data(), static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      c.peer_closed = true;
      return true;
    }
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;  // else a reset
  }
  return true;
}

bool HttpTransport::advance(std::unique_ptr<Connection>& c) {
  if (c->draining) return true;
  const bool was_started = c->parser.started();
  const RequestParser::State state = c->parser.feed(c->buffer);
  if (!was_started && c->parser.started()) c->deadline = after(config_.request_timeout_s);
  if (state == RequestParser::State::kError) {
    reject(*c, c->parser.error_status(), c->parser.error_message());
    return true;
  }
  if (c->parser.head_complete() && !c->head_checked) {
    c->head_checked = true;
    if (config_.head_check) {
      if (const std::optional<Refusal> r = config_.head_check(c->parser.head())) {
        reject(*c, r->status, r->message, r->headers);
        return true;
      }
    }
  }
  count_buffered(*c);
  if (buffered_ > config_.max_buffered_bytes) {
    reject(*c, 503, fmt::format("the server holds {} bytes of requests being received, its limit", buffered_));
    count_buffered(*c);
    return true;
  }
  if (state == RequestParser::State::kNeedMore) {
    if (c->parser.head_complete() && c->parser.expects_continue() && !c->continue_sent) {
      c->continue_sent = true;
      if (!send_now(c->fd, "HTTP/1.1 100 Continue\r\n\r\n")) linger(*c);  // half an interim answer: give up
    }
    return true;
  }
  HttpRequest request = c->parser.take();
  c->continue_sent = c->head_checked = false;
  buffered_ -= c->counted, c->counted = 0;  // a handler's connection is not being read
  if (c->buffer.empty() && c->buffer.capacity() > kKeptBufferBytes) c->buffer.shrink_to_fit();
  {
    std::lock_guard lock(mu_);
    ++handlers_;
  }
  // The connection stays this thread's until its handler's thread exists.
  Connection* handed = c.get();
  try {
    std::thread([this, handed, r = std::move(request)]() mutable {
      run_handler(std::unique_ptr<Connection>(handed), std::move(r));
    }).detach();
  } catch (const std::system_error&) {  // out of threads: this request is refused, the rest go on
    {
      std::lock_guard lock(mu_);
      --handlers_;
    }
    reject(*c, 503, "the server cannot start a thread for the request now");
    return true;
  }
  c.release();
  return false;
}

void HttpTransport::run_handler(std::unique_ptr<Connection> c, HttpRequest request) {
  HttpExchange exchange(c->fd, std::move(request), c->peer, config_.send_timeout_s);
  auto fail = [&](std::string_view what) {                // a bug in one handler: the others keep being served
    if (exchange.responded()) return exchange.abandon();  // a started stream must not look finished
    auto [body, type] = config_.error_body ? config_.error_body(500, what)
                                           : std::pair<std::string, std::string>(std::string(what), "text/plain");
    exchange.respond(500, type, body);
  };
  try {
    handler_(exchange);
  } catch (const std::exception& e) {
    fail(e.what());
  } catch (...) {
    fail("the handler failed");
  }
  if (!exchange.responded()) fail("the handler sent no response");
  exchange.end_stream();
  // Back to the event thread (or, once stopped, to serve()'s last close): to read the next
  // request, or to linger before it is closed.
  if (exchange.reusable() && !c->peer_closed && !stopping_)
    c->deadline = after(config_.keep_alive_timeout_s);
  else
    linger(*c);
  std::lock_guard lock(mu_);
  returned_.push_back(std::move(c));
  if (--handlers_ == 0) handlers_done_.notify_all();
  wake();
}

Status HttpTransport::serve() {
  Status status;
  std::vector<pollfd> fds;
  while (!stopping_) {
    const bool accepting = Clock::now() >= accept_paused_until_;
    fds.assign({{wake_fd_, POLLIN, 0}, {accepting ? listen_fd_ : -1, POLLIN, 0}});
    for (const auto& c : reading_) fds.push_back({c->fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), kTickMs) < 0 && errno != EINTR) {
      status = error(ErrorKind::kIo, fmt::format("waiting on the server's sockets: {}", std::strerror(errno)));
      break;
    }
    if (stopping_) break;
    // Connections back from their handlers, whose buffers may already hold the next request.
    std::vector<std::unique_ptr<Connection>> back;
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
      std::lock_guard lock(mu_);
      back.swap(returned_);
    }
    std::vector<std::unique_ptr<Connection>> kept;
    kept.reserve(reading_.size() + back.size());
    const auto now = Clock::now();
    for (size_t i = 0; i < reading_.size(); ++i) {
      std::unique_ptr<Connection>& c = reading_[i];
      const short ev = fds[i + 2].revents;
      bool open = true;
      if (ev & (POLLIN | POLLHUP | POLLERR)) open = read_from(*c);
      if (open && !c->buffer.empty() && !advance(c)) continue;  // handed to a handler
      if (open && c->peer_closed) open = false;                 // gone with no whole request to answer
      if (open && now >= c->deadline) {
        if (c->parser.started() && !c->draining) {
          reject(*c, 408, fmt::format("the request was not received within {} s", config_.request_timeout_s));
          count_buffered(*c);
        } else {
          open = false;  // idle, or done draining
        }
      }
      if (!open) {
        buffered_ -= c->counted;
        close_connection(*c);
        continue;
      }
      kept.push_back(std::move(c));
    }
    for (auto& c : back) {
      if (!c->buffer.empty() && !advance(c)) continue;
      kept.push_back(std::move(c));
    }
    reading_.swap(kept);
    if (fds[1].revents & POLLIN) accept_all();
  }
  stopping_ = true;  // also after a failure: handlers close their connections
  ::close(listen_fd_);
  listen_fd_ = -1;
  for (auto& c : reading_) close_connection(*c);
  reading_.clear();
  buffered_ = 0;
  std::unique_lock lock(mu_);
  handlers_done_.wait(lock, [this] { return handlers_ == 0; });
  std::vector<std::unique_ptr<Connection>> left;
  left.swap(returned_);
  lock.unlock();
  for (auto& c : left) close_connection(*c);
  return status;
}

}  // namespace dsinfer::http
