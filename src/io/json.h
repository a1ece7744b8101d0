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
/// Keeps object keys in their written order: for text that is rendered back into a prompt (tool
/// schemas and arguments), where the order is part of what the model reads.
using OrderedJson = nlohmann::ordered_json;

/// Parses `text`; errors name `what` (usually a file path) and the parser's position.
Result<Json> parse_json(std::string_view text, std::string_view what);
Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view what);
/// Reads and parses a whole JSON file.
Result<Json> read_json_file(const std::filesystem::path& path);

/// A short name of a JSON value's type for messages ("string", "array", ...).
std::string_view json_type_name(const Json& j);
std::string_view json_type_name(const OrderedJson& j);

/// JSON text as Python's json.dumps writes it (", " and ": " separators, UTF-8 kept): the
/// spelling the model saw in training for schemas and tool arguments.
std::string python_json_dumps(const OrderedJson& j);

}  // namespace dsinfer
