#include "server/http/request_parser.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

namespace dsinfer::http {
namespace {

constexpr size_t kMaxChunkSizeLine = 1024;  // the hex size and any chunk extensions
constexpr size_t kMaxMethodBytes = 32;
constexpr int kMaxBlankLines = 8;

// RFC 9110 tchar: the characters of a method or a header name.
bool is_token_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated elements of every value of header `name`, trimmed.
std::vector<std::string> list_values(const HttpRequest& r, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& [n, v] : r.headers) {
    if (n != name) continue;
    std::string_view rest = v;
    for (;;) {
      const size_t comma = rest.find(',');
      out.emplace_back(trim(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

RequestParser::State RequestParser::fail(int status, std::string message) {
  phase_ = Phase::kError;
  error_status_ = status;
  error_message_ = std::move(message);
  return State::kError;
}

bool RequestParser::next_line(const std::string& buffer, size_t limit, int too_long_status, std::string_view* line,
                              bool crlf) {
  const size_t window = std::min(buffer.size() - pos_, limit + 1);
  // Only the bytes not searched at an earlier feed: a line dripped a byte at a time costs linear work.
  const size_t from = std::min(scanned_, window);
  const size_t found = std::string_view(buffer).substr(pos_ + from, window - from).find('\n');
  if (found == std::string_view::npos) {
    scanned_ = window;
    if (buffer.size() - pos_ > limit) {
      fail(too_long_status, too_long_status == 414 ? fmt::format("the request line is over {} bytes", limit)
                            : too_long_status == 431
                                ? fmt::format("the request's header fields are over {} bytes", limits_.max_header_bytes)
                                : fmt::format("a chunk-size line is over {} bytes", limit));
    }
    return false;
  }
  scanned_ = 0;
  const size_t lf = from + found;
  std::string_view l(buffer.data() + pos_, lf);
  if (!l.empty() && l.back() == '\r') {
    l.remove_suffix(1);
  } else if (crlf) {
    fail(400, "a line of the chunked body ends in a bare LF, not CRLF");
    return false;
  }
  *line = l;
  pos_ += lf + 1;
  return true;
}

RequestParser::State RequestParser::request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "the request line is not 'METHOD target HTTP/1.x'");
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (!is_token(method) || method.size() > kMaxMethodBytes) return fail(400, "the request method is not a token");
  if (version == "HTTP/1.1" || version == "HTTP/1.0") {
    request_.minor_version = version.back() - '0';
  } else if (version.size() == 8 && version.starts_with("HTTP/") && version[6] == '.') {
    return fail(505, fmt::format("{} is not supported (HTTP/1.0 and HTTP/1.1 are)", version));
  } else {
    return fail(400, "the request line does not end in an HTTP version");
  }
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) { return c <= ' ' || c >= 0x7f; }))
    return fail(400, "the request target is empty or has characters that are not printable ASCII");
  std::string_view path = target;
  if (lower(target.substr(0, 7)) == "http://" || lower(target.substr(0, 8)) == "https://") {
    // absolute-form (what a client sends to a proxy): the path starts after the authority
    const size_t slash = target.find('/', target.find("//") + 2);
    path = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  } else if (target != "*" && target.front() != '/') {
    return fail(400, "the request target is not a path");
  }
  const size_t q = path.find('?');
  request_.method = method;
  request_.path = path.substr(0, q);
  request_.query = q == std::string_view::npos ? std::string_view() : path.substr(q + 1);
  have_request_line_ = true;
  return State::kNeedMore;
}

std::string RequestParser::field_problem(std::string_view line) const {
  if (line.front() == ' ' || line.front() == '\t') return "a folded header line (obsolete line folding)";
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
    return "a header line is not 'name: value' (a name of token characters, no space before ':')";
  const std::string_view value = trim(line.substr(colon + 1));
  if (std::any_of(value.begin(), value.end(),
                  [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f; }))
    return fmt::format("header '{}' has a control character", line.substr(0, colon));
  return {};
}

RequestParser::State RequestParser::header_line(std::string_view line) {
  if (line.empty()) return head_done();
  if (std::string problem = field_problem(line); !problem.empty()) return fail(400, std::move(problem));
  if (request_.headers.size() >= limits_.max_headers)
    return fail(431, fmt::format("the request has more than {} header fields", limits_.max_headers));
  const size_t colon = line.find(':');
  request_.headers.emplace_back(lower(line.substr(0, colon)), trim(line.substr(colon + 1)));
  return State::kNeedMore;
}

RequestParser::State RequestParser::head_done() {
  phase_ = Phase::kComplete;
  const std::vector<std::string> hosts = list_values(request_, "host");
  if (request_.minor_version == 1 && hosts.size() != 1)
    return fail(400, hosts.empty() ? "an HTTP/1.1 request without a Host header" : "more than one Host header");
  if (const std::string* expect = request_.header("expect")) {
    if (lower(*expect) != "100-continue") return fail(417, fmt::format("Expect: '{}' is not supported", *expect));
    expects_continue_ = request_.minor_version == 1;
  }
  const std::vector<std::string> codings = list_values(request_, "transfer-encoding");
  const std::vector<std::string> lengths = list_values(request_, "content-length");
  if (!codings.empty()) {
    if (!lengths.empty())
      return fail(400, "both Content-Length and Transfer-Encoding (the body's length is ambiguous)");
    if (request_.minor_version == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (codings.size() != 1 || lower(codings[0]) != "chunked")
      return fail(501, "the only transfer coding supported is 'chunked'");
    phase_ = Phase::kChunkSize;
    return State::kNeedMore;
  }
  if (lengths.empty()) return State::kComplete;
  for (const std::string& l : lengths) {
    if (l.empty() || !std::all_of(l.begin(), l.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fail(400, fmt::format("Content-Length '{}' is not a number", l));
    if (l != lengths[0]) return fail(400, "conflicting Content-Length values");
  }
  uint64_t n = 0;
  for (const char c : lengths[0]) {
    n = n * 10 + static_cast<uint64_t>(c - '0');
    if (n > limits_.max_body_bytes)
      return fail(413, fmt::format("the request body is over the {}-byte limit", limits_.max_body_bytes));
  }
  remaining_ = n;
  phase_ = n > 0 ? Phase::kBody : Phase::kComplete;
  return n > 0 ? State::kNeedMore : State::kComplete;
}

RequestParser::State RequestParser::chunk_size_line(std::string_view line) {
  framing_bytes_ += line.size() + 2;
  if (framing_bytes_ > limits_.max_header_bytes + limits_.max_body_bytes / 8)
    return fail(413, fmt::format("the chunked body's framing is over {} bytes",
                                 limits_.max_header_bytes + limits_.max_body_bytes / 8));
  uint64_t size = 0;
  size_t i = 0;
  for (; i < line.size() && hex_digit(line[i]) >= 0; ++i) {
    if (i == 15) return fail(400, "a chunk size has more than 15 hex digits");
    size = size * 16 + static_cast<uint64_t>(hex_digit(line[i]));
  }
  const std::string_view rest = trim(line.substr(i));
  if (i == 0 || (!rest.empty() && rest.front() != ';')) return fail(400, "a chunk size is not a hex number");
  // Extensions are dropped, but they may not hide framing: printable ASCII and tabs only.
  if (std::any_of(rest.begin(), rest.end(),
                  [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c >= 0x7f; }))
    return fail(400, "a chunk extension has a control character");
  if (size > limits_.max_body_bytes - request_.body.size())
    return fail(413, fmt::format("the request body is over the {}-byte limit", limits_.max_body_bytes));
  remaining_ = size;
  phase_ = size > 0 ? Phase::kChunkData : Phase::kTrailers;
  return State::kNeedMore;
}

RequestParser::State RequestParser::feed(std::string& buffer) {
  pos_ = 0;
  State state = phase_ == Phase::kError ? State::kError : State::kNeedMore;
  while (state == State::kNeedMore) {
    std::string_view line;
    if (phase_ == Phase::kHead || phase_ == Phase::kTrailers) {
      const size_t budget = limits_.max_header_bytes - std::min(head_bytes_, limits_.max_header_bytes);
      const bool first = phase_ == Phase::kHead && !have_request_line_;
      const size_t before = pos_;
      const bool trailer = phase_ == Phase::kTrailers;
      if (!next_line(buffer, first ? std::min(budget, limits_.max_request_line_bytes) : budget, first ? 414 : 431,
                     &line, trailer)) {
        if (phase_ == Phase::kError) state = State::kError;
        // A request begins with its first byte that is not part of a blank line.
        if (first && std::string_view(buffer).substr(pos_).find_first_not_of("\r\n") != std::string_view::npos)
          started_ = true;
        break;
      }
      head_bytes_ += pos_ - before;
      if (first) {
        if (!line.empty()) {
          started_ = true;
          state = request_line(line);
        } else if (++blank_lines_ > kMaxBlankLines) {  // a few blank lines between requests are allowed
          state = fail(400, "blank lines instead of a request line");
        }
      } else if (!trailer) {
        state = header_line(line);
      } else if (line.empty()) {
        phase_ = Phase::kComplete;  // trailer fields are read and dropped, never merged into the headers
        state = State::kComplete;
      } else if (std::string problem = field_problem(line); !problem.empty()) {
        state = fail(400, "trailer: " + problem);
      }
    } else if (phase_ == Phase::kBody || phase_ == Phase::kChunkData) {
      const size_t n = std::min(remaining_, buffer.size() - pos_);
      request_.body.append(buffer, pos_, n);
      pos_ += n, remaining_ -= n;
      if (remaining_ > 0) break;
      if (phase_ == Phase::kChunkData) {
        phase_ = Phase::kChunkEnd;
      } else {
        phase_ = Phase::kComplete;
        state = State::kComplete;
      }
    } else if (phase_ == Phase::kChunkSize) {
      if (!next_line(buffer, kMaxChunkSizeLine, 400, &line, true)) {
        if (phase_ == Phase::kError) state = State::kError;
        break;
      }
      state = chunk_size_line(line);
    } else if (phase_ == Phase::kChunkEnd) {
      const std::string_view rest = std::string_view(buffer).substr(pos_);
      if (rest.empty() || (rest.front() == '\r' && rest.size() < 2)) break;
      if (rest.starts_with("\r\n")) {
        pos_ += 2;
      } else {
        state = fail(400, "chunk data is not followed by CRLF");
        break;
      }
      phase_ = Phase::kChunkSize;
    } else {
      state = phase_ == Phase::kComplete ? State::kComplete : State::kError;
    }
  }
  buffer.erase(0, pos_);
  return state;
}

HttpRequest RequestParser::take() {
  HttpRequest r = std::move(request_);
  *this = RequestParser(limits_);
  return r;
}

}  // namespace dsinfer::http
