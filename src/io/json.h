// Thin helpers over nlohmann::json (the one JSON library of the project): parsing without
// exceptions and typed field access that reports the offending field by name.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsinfer {

using Json = nlohmann::json;

/// Parses `text`; errors name `what` (usually a file path) and the parser's position.
Result<Json> parse_json(std::string_view text, std::string_view what);
/// Reads and parses a whole JSON file.
Result<Json> read_json_file(const std::filesystem::path& path);

/// A short name of a JSON value's type for messages ("string", "array", ...).
std::string_view json_type_name(const Json& j);

}  // namespace dsinfer
