// JSON helpers and atomic file writes.
#include "io/json.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace dsinfer {

namespace {

// Counts the nesting depth and stops the parse at the first level past the limit; builds nothing.
struct DepthCounter : nlohmann::json_sax<Json> {
  int depth = 0, max_depth = 0;
  bool too_deep = false;
  std::string parse_error_message;

  bool open() {
    if (++depth > kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    max_depth = std::max(max_depth, depth);
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    parse_error_message = e.what();
    return false;
  }
};

template <typename J>
Result<J> parse_bounded(std::string_view text, std::string_view what, ErrorKind kind) {
  DSINFER_RETURN_IF_ERROR(check_json_depth(text, what, kind).status());
  try {
    return J::parse(text.begin(), text.end());
  } catch (const typename J::exception& e) {
    return error(kind, fmt::format("{}: invalid JSON: {}", what, e.what()));
  }
}

}  // namespace

Result<int> check_json_depth(std::string_view text, std::string_view what, ErrorKind kind) {
  // nlohmann reads a NUL as the end of its input, which would hide whatever follows it; a raw NUL
  // is never valid JSON (inside strings it is written \u0000).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return error(kind, fmt::format("{}: invalid JSON: a NUL byte at offset {}", what, nul));
  DepthCounter counter;
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &counter);
  } catch (const Json::exception& e) {
    counter.parse_error_message = e.what();
  }
  if (counter.too_deep) return error(kind, fmt::format("{}: JSON nested deeper than {} levels", what, kMaxJsonDepth));
  if (!ok) return error(kind, fmt::format("{}: invalid JSON: {}", what, counter.parse_error_message));
  return counter.max_depth;
}

Result<Json> parse_json(std::string_view text, std::string_view what) {
  return parse_bounded<Json>(text, what, ErrorKind::kCorruptFile);
}

Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view what) {
  return parse_bounded<OrderedJson>(text, what, ErrorKind::kInvalidArgument);
}

Result<std::string> read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const ErrorKind kind = std::filesystem::exists(path) ? ErrorKind::kIo : ErrorKind::kNotFound;
    return error(kind, fmt::format("{}: cannot open", path.string()));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<Json> read_json_file(const std::filesystem::path& path) {
  DSINFER_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  return parse_json(text, path.string());
}

std::string_view json_type_name(const Json& j) {
  return j.type_name();
}
std::string_view json_type_name(const OrderedJson& j) {
  return j.type_name();
}

std::string python_json_dumps(const OrderedJson& j) {
  // An explicit stack of the open containers, each with its next member: no recursion.
  struct Open {
    const OrderedJson* container;
    OrderedJson::const_iterator next;
  };
  std::vector<Open> stack;
  std::string out;
  const auto write = [&](const OrderedJson& v) {
    if (v.is_object() || v.is_array()) {
      out += v.is_object() ? '{' : '[';
      stack.push_back({&v, v.cbegin()});
    } else {
      out += v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    }
  };
  write(j);
  while (!stack.empty()) {
    Open& top = stack.back();
    if (top.next == top.container->cend()) {
      out += top.container->is_object() ? '}' : ']';
      stack.pop_back();
      continue;
    }
    if (top.next != top.container->cbegin()) out += ", ";
    if (top.container->is_object()) out += OrderedJson(top.next.key()).dump() + ": ";
    const OrderedJson& member = *top.next;
    ++top.next;  // before write(), which may grow the stack and move `top`
    write(member);
  }
  return out;
}

}  // namespace dsinfer
