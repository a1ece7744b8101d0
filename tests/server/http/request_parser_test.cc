// The HTTP/1.x request reader: whole requests from any split of the bytes, pipelined requests in
// order, and every malformed or over-limit request refused with the status that names it (the
// reliability probe's rows: a chunked body over the limit, a header flood, conflicting
// Content-Length, a smuggling shape, a bad chunk size, HTTP/0.9 and the HTTP/2 preface).
#include "server/http/request_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsinfer::http {
namespace {

struct Outcome {
  std::vector<HttpRequest> requests;
  int error = 0;  // the status of a refusal
  std::string message;
  std::string left;  // bytes not used
};

// Feeds `bytes` in pieces of `step` bytes (0: all at once), taking every request that completes.
Outcome parse(const std::string& bytes, size_t step = 0, HttpLimits limits = {}) {
  RequestParser p(limits);
  Outcome o;
  std::string buffer;
  for (size_t at = 0; at < bytes.size() || !buffer.empty();) {
    const size_t n = step == 0 ? bytes.size() - at : std::min(step, bytes.size() - at);
    buffer.append(bytes, at, n);
    at += n;
    RequestParser::State s;
    while ((s = p.feed(buffer)) == RequestParser::State::kComplete) o.requests.push_back(p.take());
    if (s == RequestParser::State::kError) {
      o.error = p.error_status(), o.message = p.error_message();
      break;
    }
    if (n == 0) break;  // nothing more to give
  }
  o.left = buffer;
  return o;
}

int status_of(const std::string& bytes, HttpLimits limits = {}) {
  return parse(bytes, 0, limits).error;
}

TEST(RequestParser, ReadsARequestWithItsHeadersInOrder) {
  const Outcome o = parse("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  two words \r\n\r\n");
  ASSERT_EQ(o.requests.size(), 1u);
  const HttpRequest& r = o.requests[0];
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1");
  EXPECT_EQ(r.minor_version, 1);
  ASSERT_EQ(r.headers.size(), 2u);
  EXPECT_EQ(r.headers[1].first, "x-thing");
  EXPECT_EQ(r.headers[1].second, "two words");
  EXPECT_TRUE(r.keep_alive());
}

TEST(RequestParser, AnySplitOfTheBytesGivesTheSameRequests) {
  const std::string two =
      "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
      "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nT: x\r\n\r\n";
  for (size_t step : {0, 1, 2, 3, 7, 64}) {
    const Outcome o = parse(two, step);
    ASSERT_EQ(o.requests.size(), 2u) << "step " << step << ": " << o.message;
    EXPECT_EQ(o.requests[0].path, "/a");
    EXPECT_EQ(o.requests[0].body, "hello");
    EXPECT_EQ(o.requests[1].path, "/b");
    EXPECT_EQ(o.requests[1].body, "abcde");
    EXPECT_EQ(o.requests[1].header("t"), nullptr) << "trailers are dropped, never merged into the headers";
    EXPECT_TRUE(o.left.empty());
  }
}

TEST(RequestParser, TenPipelinedRequestsComeOutInOrder) {
  std::string bytes;
  for (int i = 0; i < 10; ++i) bytes += "GET /r" + std::to_string(i) + " HTTP/1.1\r\nHost: h\r\n\r\n";
  const Outcome o = parse(bytes);
  ASSERT_EQ(o.requests.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(o.requests[i].path, "/r" + std::to_string(i));
}

TEST(RequestParser, BareLineFeedsAndBlankLinesBeforeARequestAreAccepted) {
  const Outcome o = parse("\r\n\nGET / HTTP/1.0\n\n");
  ASSERT_EQ(o.requests.size(), 1u) << o.message;
  EXPECT_EQ(o.requests[0].minor_version, 0);
  EXPECT_FALSE(o.requests[0].keep_alive());
}

TEST(RequestParser, AnAbsoluteFormTargetGivesItsPath) {
  const Outcome o = parse("GET http://example.com:8000/health?q HTTP/1.1\r\nHost: example.com\r\n\r\n");
  ASSERT_EQ(o.requests.size(), 1u);
  EXPECT_EQ(o.requests[0].path, "/health");
  EXPECT_EQ(o.requests[0].query, "q");
}

TEST(RequestParser, BodiesOverTheLimitAreRefusedBeforeTheyAreRead) {
  HttpLimits small;
  small.max_body_bytes = 100;
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n", small), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n", small), 413);
  // chunked: refused at the chunk size that crosses the limit, whatever the sizes before it
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n", small), 413);
  std::string pieces = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 11; ++i) pieces += "a\r\n0123456789\r\n";
  const Outcome o = parse(pieces, 0, small);
  EXPECT_EQ(o.error, 413);
  EXPECT_NE(o.message.find("100-byte limit"), std::string::npos) << o.message;
  const Outcome fits =
      parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'x'), 0, small);
  EXPECT_EQ(fits.requests.size(), 1u);
}

TEST(RequestParser, HeaderFloodsAndLongLinesAreRefused) {
  HttpLimits limits;
  std::string flood = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (size_t i = 0; i < limits.max_headers; ++i) flood += "X: y\r\n";
  EXPECT_EQ(status_of(flood + "\r\n"), 431);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(limits.max_header_bytes, 'a') + "\r\n\r\n"),
            431);
  EXPECT_EQ(status_of("GET /" + std::string(limits.max_request_line_bytes, 'a') + " HTTP/1.1\r\n\r\n"), 414);
  // refused once the limit is passed, without waiting for the line's end
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(limits.max_header_bytes, 'a')), 431);
}

TEST(RequestParser, AmbiguousFramingIsRefused) {
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\n";
  EXPECT_EQ(status_of(head + "Content-Length: 10\r\nContent-Length: 5\r\n\r\n"), 400);
  EXPECT_EQ(status_of(head + "Content-Length: 5, 6\r\n\r\n"), 400);
  EXPECT_EQ(status_of(head + "Content-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(status_of(head + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of(head + "Transfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of(head + "Content-Length : 5\r\n\r\nhello"), 400);  // space before the colon
  EXPECT_EQ(status_of(head + "X: a\r\n  folded\r\n\r\n"), 400);
  EXPECT_EQ(status_of(head + "X: a\x01z\r\n\r\n"), 400);
  const Outcome same = parse(head + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello");
  ASSERT_EQ(same.requests.size(), 1u) << "equal values are one length";
  EXPECT_EQ(same.requests[0].body, "hello");
}

TEST(RequestParser, MalformedRequestLinesAndChunksAreRefused) {
  EXPECT_EQ(status_of("GET /\r\n\r\n"), 400);  // HTTP/0.9
  EXPECT_EQ(status_of("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTP/3.0\r\nHost: h\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("G(T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET nopath HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n\r\n"), 400);  // no Host
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
  const std::string chunked = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(status_of(chunked + "zz\r\n"), 400);
  EXPECT_EQ(status_of(chunked + "3\r\nabcX\r\n"), 400);
  EXPECT_EQ(status_of(chunked + "1000000000000000\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: h\r\nExpect: something\r\n\r\n"), 417);
}

TEST(RequestParser, SaysWhenTheClientWaitsForContinue) {
  RequestParser p({});
  std::string buffer = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(p.feed(buffer), RequestParser::State::kNeedMore);
  EXPECT_TRUE(p.head_complete());
  EXPECT_TRUE(p.expects_continue());
  buffer = "hi";
  ASSERT_EQ(p.feed(buffer), RequestParser::State::kComplete);
  EXPECT_EQ(p.take().body, "hi");
  EXPECT_FALSE(p.started());
}

TEST(RequestParser, ChunkedFramingIsStrict) {
  const std::string chunked = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(status_of(chunked + "5;\nhello\r\n0\r\n\r\n"), 400);        // a bare LF ends a size line
  EXPECT_EQ(status_of(chunked + "5\r\nhello\n0\r\n\r\n"), 400);         // and the data
  EXPECT_EQ(status_of(chunked + "5;a\rb\r\nhello\r\n0\r\n\r\n"), 400);  // a CR inside an extension
  EXPECT_EQ(status_of(chunked + "5\r\nhello\r\n0\r\nT: a\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(status_of(chunked + "5\r\nhello\r\n0\r\nT : a\r\n\r\n"), 400);
  EXPECT_EQ(status_of(chunked + "5\r\nhello\r\n0\r\n\n"), 400);
  const Outcome ok = parse(chunked + "5;name=\"v\"\r\nhello\r\n0\r\n\r\n");
  ASSERT_EQ(ok.requests.size(), 1u) << ok.message;
  EXPECT_EQ(ok.requests[0].body, "hello");
  // Framing is bounded too: one-byte chunks with long extensions cannot bring gigabytes.
  HttpLimits small;
  small.max_body_bytes = 1 << 10, small.max_header_bytes = 1 << 10;
  std::string many = chunked;
  for (int i = 0; i < 1000; ++i) many += "1;" + std::string(100, 'e') + "\r\nx\r\n";
  EXPECT_EQ(parse(many, 0, small).error, 413);
}

TEST(RequestParser, BlankLinesBetweenRequestsStartNothing) {
  RequestParser p({});
  std::string buffer = "\r\n\r\n";
  EXPECT_EQ(p.feed(buffer), RequestParser::State::kNeedMore);
  EXPECT_FALSE(p.started()) << "a CRLF after a body keeps the connection idle";
  buffer = "G";
  EXPECT_EQ(p.feed(buffer), RequestParser::State::kNeedMore);
  EXPECT_TRUE(p.started());
  std::string blanks(40, '\n');
  EXPECT_EQ(status_of(blanks + "GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
}

TEST(RequestParser, ADrippedLineIsSearchedOnce) {
  // 60 KB of one header line a byte at a time: linear work, and the request still completes.
  RequestParser p({});
  std::string buffer = "GET / HTTP/1.1\r\nHost: h\r\nX: ";
  ASSERT_EQ(p.feed(buffer), RequestParser::State::kNeedMore);
  for (int i = 0; i < 60000; ++i) {
    buffer += 'a';
    ASSERT_EQ(p.feed(buffer), RequestParser::State::kNeedMore);
  }
  buffer += "\r\n\r\n";
  ASSERT_EQ(p.feed(buffer), RequestParser::State::kComplete);
  EXPECT_EQ(p.take().header("x")->size(), 60000u);
}

}  // namespace
}  // namespace dsinfer::http
