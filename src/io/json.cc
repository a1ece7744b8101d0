// JSON helpers and atomic file writes.
#include "io/json.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace dsinfer {

Result<Json> parse_json(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return error(ErrorKind::kCorruptFile, fmt::format("{}: invalid JSON: {}", what, e.what()));
  }
}

Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view what) {
  try {
    return OrderedJson::parse(text.begin(), text.end());
  } catch (const OrderedJson::parse_error& e) {
    return error(ErrorKind::kInvalidArgument, fmt::format("{}: invalid JSON: {}", what, e.what()));
  }
}

Result<Json> read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const ErrorKind kind = std::filesystem::exists(path) ? ErrorKind::kIo : ErrorKind::kNotFound;
    return error(kind, fmt::format("{}: cannot open", path.string()));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_json(ss.str(), path.string());
}

std::string_view json_type_name(const Json& j) {
  return j.type_name();
}
std::string_view json_type_name(const OrderedJson& j) {
  return j.type_name();
}

std::string python_json_dumps(const OrderedJson& j) {
  std::string out;
  if (j.is_object()) {
    out += '{';
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it != j.begin()) out += ", ";
      out += OrderedJson(it.key()).dump() + ": " + python_json_dumps(it.value());
    }
    return out + '}';
  }
  if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + python_json_dumps(j[i]);
    return out + ']';
  }
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace dsinfer
