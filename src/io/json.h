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

/// The deepest nesting of arrays and objects that any JSON the project reads may have (request
/// bodies, tool-call arguments, the CLI's files, config.json, tokenizer.json, safetensors headers):
/// `[[1]]` is 2 levels, a scalar 0. nlohmann's dump() and copy constructor recurse once per level,
/// so an unbounded depth from a client would overflow a thread's stack; 128 is far more than any
/// schema, config or tokenizer needs.
inline constexpr int kMaxJsonDepth = 128;

/// Nesting depth of `text` if it is at most `kMaxJsonDepth`, checked in one pass that builds
/// nothing (a SAX count, iterative at any depth); an error "JSON nested deeper than 128 levels"
/// otherwise, or "invalid JSON" with the parser's message. Errors name `what`.
Result<int> check_json_depth(std::string_view text, std::string_view what,
                             ErrorKind kind = ErrorKind::kInvalidArgument);

/// Parses `text`, refusing JSON nested deeper than `kMaxJsonDepth` (check_json_depth); errors
/// name `what` (usually a file path) and the parser's position. Every JSON text the project reads
/// goes through these two (or read_json_file).
Result<Json> parse_json(std::string_view text, std::string_view what);
Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view what);
/// Reads and parses a whole JSON file (parse_json).
Result<Json> read_json_file(const std::filesystem::path& path);
/// A file's whole content; kNotFound (no such file) or kIo (it cannot be opened) naming it.
Result<std::string> read_text_file(const std::filesystem::path& path);

/// A short name of a JSON value's type for messages ("string", "array", ...).
std::string_view json_type_name(const Json& j);
std::string_view json_type_name(const OrderedJson& j);

/// JSON text as Python's json.dumps writes it (", " and ": " separators, UTF-8 kept): the
/// spelling the model saw in training for schemas and tool arguments. Iterative (an explicit stack):
/// any depth is safe.
std::string python_json_dumps(const OrderedJson& j);

}  // namespace dsinfer
