// The HTTP transport over loopback with the reliability probe's attacks as bounded tests: slow
// clients that drip headers (slowloris) and silent ones hold no thread and get 408 at the
// deadline while others are answered at once; a cap per client address; pipelined requests
// answered in order; a chunked body over the limit refused before it is read; a header flood;
// 100 Continue; keep-alive, HEAD, HTTP/1.0 and streamed responses.
#include "server/http/http_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "server/http/raw_client.h"

namespace dsinfer::http {
namespace {

using testing::count_of;
using testing::RawClient;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Whether `s` holds a whole response with a Content-Length (the first one's head and body).
bool has_whole_response(const std::string& s) {
  const size_t head = s.find("\r\n\r\n");
  if (head == std::string::npos) return false;
  const size_t cl = s.substr(0, head).find("Content-Length: ");
  if (cl == std::string::npos) return false;
  return s.size() >= head + 4 + std::strtoul(s.c_str() + cl + 16, nullptr, 10);
}

class HttpTransportTest : public ::testing::Test {
 protected:
  void start(TransportConfig config) {
    config.port = 0;
    config.head_check = [](const HttpRequest& r) -> std::optional<Refusal> {
      if (r.path == "/forbidden") return Refusal{401, "no key", {{"WWW-Authenticate", "Bearer"}}};
      return std::nullopt;
    };
    config.error_body = [](int status, std::string_view message) {
      return std::pair<std::string, std::string>(fmt::format("{} {}", status, message), "text/plain");
    };
    transport_ = std::make_unique<HttpTransport>(config, [](HttpExchange& ex) {
      const HttpRequest& r = ex.request();
      if (r.path == "/stream") {
        ex.start_stream(200, "text/event-stream");
        for (int i = 0; i < 3; ++i) ex.write(fmt::format("piece {}\n", i));
        return ex.end_stream();
      }
      if (r.path == "/throw-mid-stream") {
        ex.start_stream(200, "text/plain");
        ex.write("partial");
        throw std::runtime_error("a bug");
      }
      if (r.path == "/slow") std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (r.path == "/long") std::this_thread::sleep_for(std::chrono::milliseconds(400));
      ex.respond(200, "text/plain", r.method + " " + r.path + " " + r.body);
    });
    auto port = transport_->bind();
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    serving_ = std::thread([this] { EXPECT_TRUE(transport_->serve().ok()); });
  }
  void TearDown() override {
    if (transport_) transport_->stop();
    if (serving_.joinable()) serving_.join();
  }
  // A GET on a fresh connection: the whole response, read within `seconds`.
  std::string get(const std::string& path, double seconds = 5) {
    RawClient c(port_);
    c.send(fmt::format("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", path));
    return c.read_until(has_whole_response, seconds);
  }

  std::unique_ptr<HttpTransport> transport_;
  std::thread serving_;
  int port_ = 0;
};

TEST_F(HttpTransportTest, SlowAndSilentClientsHoldNoThreadAndMeetTheDeadline) {
  TransportConfig config;
  config.request_timeout_s = 3.0, config.keep_alive_timeout_s = 3.0;
  config.max_connections_per_client = 0;
  start(config);
  // 200 connections: 100 drip a header line every 100 ms, 100 send nothing (more than the 128
  // threads that the server once had for connections).
  std::vector<std::unique_ptr<RawClient>> slow, silent;
  for (int i = 0; i < 100; ++i) {
    slow.push_back(std::make_unique<RawClient>(port_));
    silent.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(slow.back()->connected() && silent.back()->connected());
    slow.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n");
  }
  const auto t0 = Clock::now();
  double fresh_s = 0;
  for (int round = 0; round < 5; ++round) {
    for (auto& c : slow) c->send(fmt::format("X-{}: a\r\n", round));
    const auto t = Clock::now();
    const std::string r = get("/fresh", 2);
    fresh_s = std::max(fresh_s, seconds_since(t));
    ASSERT_EQ(r.substr(0, 12), "HTTP/1.1 200") << r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LT(fresh_s, 1.5) << "a fresh request waited behind the slow clients";
  // The drippers pass the 3 s deadline for a whole request: 408, then closed.
  for (auto& c : slow) {
    const std::string r = c->read_all(6);
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 408") << r;
    EXPECT_TRUE(c->closed_by_server());
  }
  EXPECT_LT(seconds_since(t0), 8.0);
  // The silent ones are closed at the keep-alive deadline without a word.
  for (auto& c : silent) {
    EXPECT_EQ(c->read_all(6), "");
    EXPECT_TRUE(c->closed_by_server());
  }
}

TEST_F(HttpTransportTest, ConnectionsPerClientAreCapped) {
  TransportConfig config;
  config.max_connections_per_client = 4;
  start(config);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<RawClient>(port_));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // accepted before the fifth comes
  RawClient fifth(port_);
  const std::string r = fifth.read_all(3);
  EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 503") << r;
  EXPECT_NE(r.find("4 connections are open from this address"), std::string::npos) << r;
  held.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // closed ones are counted out
  EXPECT_EQ(get("/again").substr(0, 12), "HTTP/1.1 200");
}

TEST_F(HttpTransportTest, PipelinedRequestsAreAnsweredInOrder) {
  start({});
  RawClient c(port_);
  std::string ten;
  for (int i = 0; i < 10; ++i)
    ten += fmt::format("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{}", std::to_string(i).size(), i);
  ASSERT_TRUE(c.send(ten));
  const std::string r = c.read_until(
      [](const std::string& s) { return count_of(s, "HTTP/1.1 200") == 10 && s.ends_with("POST /slow 9"); });
  EXPECT_EQ(count_of(r, "HTTP/1.1 200"), 10u) << r;
  size_t at = 0;
  for (int i = 0; i < 10; ++i) {
    const size_t found = r.find(fmt::format("POST /slow {}", i), at);
    ASSERT_NE(found, std::string::npos) << "answer " << i << " missing or out of order";
    at = found;
  }
}

TEST_F(HttpTransportTest, AChunkedBodyOverTheLimitIsRefusedBeforeItIsRead) {
  TransportConfig config;
  config.limits.max_body_bytes = 1 << 16;
  start(config);
  RawClient c(port_);
  c.send("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const auto t = Clock::now();
  std::string r;
  for (int i = 0; i < 64 && r.empty(); ++i) {  // up to 4 MiB in 64 KiB chunks, stopping at the answer
    if (!c.send(fmt::format("{:x}\r\n{}\r\n", 1 << 16, std::string(1 << 16, 'a')))) break;
    r = c.read_until([](const std::string& s) { return !s.empty(); }, 0.01);
  }
  r = c.read_until(has_whole_response, 2);
  EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 413") << r;
  EXPECT_NE(r.find("65536-byte limit"), std::string::npos);
  EXPECT_NE(r.find("Connection: close"), std::string::npos);
  EXPECT_LT(seconds_since(t), 2.0);
}

TEST_F(HttpTransportTest, HeaderFloodsAndMalformedRequestsGetTheirStatus) {
  start({});
  RawClient flood(port_);
  flood.send("GET /health HTTP/1.1\r\nHost: x\r\n");
  for (int i = 0; i < 1000 && !flood.closed_by_server(); ++i) flood.send(fmt::format("X-{}: y\r\n", i));
  std::string r = flood.read_all(3);
  EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 431") << r;
  EXPECT_NE(r.find("more than 100 header fields"), std::string::npos);
  RawClient twice(port_);
  twice.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 1\r\n\r\nab");
  EXPECT_EQ(twice.read_all(3).substr(0, 12), "HTTP/1.1 400");
  RawClient h2(port_);
  h2.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  EXPECT_EQ(h2.read_all(3).substr(0, 12), "HTTP/1.1 505");
}

TEST_F(HttpTransportTest, KeepAliveHeadHttp10ContinueAndStreams) {
  start({});
  RawClient c(port_);
  c.send("GET /one HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(c.read_until([](const std::string& s) { return s.ends_with("GET /one "); }).find("Connection: keep-alive"),
            std::string::npos);
  c.send("HEAD /two HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string both = c.read_until([](const std::string& s) { return count_of(s, "HTTP/1.1 200") == 2; });
  EXPECT_EQ(count_of(both, "HTTP/1.1 200"), 2u) << "the connection carried a second request";
  EXPECT_TRUE(both.ends_with("Content-Length: 10\r\nConnection: keep-alive\r\n\r\n")) << "HEAD: a head, no body";

  RawClient old(port_);
  old.send("GET /old HTTP/1.0\r\n\r\n");
  const std::string r10 = old.read_all(3);
  EXPECT_TRUE(r10.ends_with("GET /old ")) << r10;
  EXPECT_TRUE(old.closed_by_server()) << "HTTP/1.0 without keep-alive closes";

  RawClient cont(port_);
  cont.send("POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  EXPECT_EQ(cont.read_until([](const std::string& s) { return s.size() >= 25; }, 2), "HTTP/1.1 100 Continue\r\n\r\n");
  cont.send("body");
  EXPECT_TRUE(
      cont.read_until([](const std::string& s) { return s.ends_with("POST /c body"); }).ends_with("POST /c body"));

  RawClient s(port_);
  s.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string chunked = s.read_until([](const std::string& x) { return x.ends_with("0\r\n\r\n"); });
  EXPECT_NE(chunked.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(chunked.find("8\r\npiece 0\n\r\n8\r\npiece 1\n\r\n8\r\npiece 2\n\r\n0\r\n\r\n"), std::string::npos)
      << chunked;
}

TEST_F(HttpTransportTest, StopReturnsWithConnectionsOpen) {
  start({});
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(std::make_unique<RawClient>(port_));
  RawClient half(port_);
  half.send("GET /health HTTP/1.1\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t = Clock::now();
  transport_->stop();
  serving_.join();
  EXPECT_LT(seconds_since(t), 1.0);
}

TEST_F(HttpTransportTest, AHeadRefusalComesBeforeTheBodyAndBefore100Continue) {
  start({});
  RawClient c(port_);
  c.send("POST /forbidden HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 8000000\r\n\r\n");
  const std::string r = c.read_all(3);
  EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 401") << r;
  EXPECT_EQ(r.find("100 Continue"), std::string::npos);
  EXPECT_NE(r.find("WWW-Authenticate: Bearer"), std::string::npos);
}

TEST_F(HttpTransportTest, RequestBytesHeldByAllConnectionsAreBounded) {
  TransportConfig config;
  config.max_buffered_bytes = 1 << 20;
  start(config);
  // Three clients each start a 600 KB body: the third passes the 1 MiB the server holds.
  std::vector<std::unique_ptr<RawClient>> clients;
  std::string answers;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<RawClient>(port_));
    clients.back()->send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 700000\r\n\r\n" + std::string(600000, 'a'));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const std::string third = clients[2]->read_all(3);
  EXPECT_EQ(third.substr(0, 12), "HTTP/1.1 503") << third;
  EXPECT_NE(third.find("bytes of requests being received"), std::string::npos);
  clients[0]->send(std::string(100000, 'b'));  // the first may finish
  EXPECT_NE(clients[0]->read_until(has_whole_response).find("HTTP/1.1 200"), std::string::npos);
}

TEST_F(HttpTransportTest, AllConnectionsAreCapped) {
  TransportConfig config;
  config.max_connections = 3, config.max_connections_per_client = 0;
  start(config);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawClient>(port_));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  RawClient fourth(port_);
  const std::string r = fourth.read_all(3);
  EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 503") << r;
  EXPECT_NE(r.find("3 connections open, its limit"), std::string::npos);
  EXPECT_TRUE(fourth.closed_by_server());
}

TEST_F(HttpTransportTest, ARequestFollowedByTheClientsCloseIsAnswered) {
  start({});
  for (int i = 0; i < 20; ++i) {
    RawClient c(port_);
    c.send("GET /fin HTTP/1.1\r\nHost: x\r\n\r\n");
    ::shutdown(c.fd(), SHUT_WR);  // the FIN right behind the request, as `nc -N` sends it
    const std::string r = c.read_all(3);
    EXPECT_TRUE(r.ends_with("GET /fin ")) << "try " << i << ": " << r;
  }
}

TEST_F(HttpTransportTest, AHandlerThatThrowsMidStreamLeavesNoFinishedLookingStream) {
  start({});
  RawClient c(port_);
  c.send("GET /throw-mid-stream HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string r = c.read_all(3);
  EXPECT_NE(r.find("7\r\npartial\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.find("0\r\n\r\n"), std::string::npos) << "no terminating chunk";
  EXPECT_TRUE(c.closed_by_server());
  EXPECT_EQ(get("/after").substr(0, 12), "HTTP/1.1 200");  // and the server serves on
}

TEST_F(HttpTransportTest, StopWaitsForARunningHandler) {
  start({});
  RawClient c(port_);
  c.send("GET /long HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  transport_->stop();
  serving_.join();
  EXPECT_TRUE(c.read_all(3).ends_with("GET /long ")) << "the running request was answered";
}

}  // namespace
}  // namespace dsinfer::http
