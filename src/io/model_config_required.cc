#include "io/model_config_required.h"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dsinfer {
namespace {

// Absent from the official V4.1-Flash config (model-spec §1.2: its values fall back to these
// defaults), or from the HF release config: defaults the release itself relies on.
const std::set<std::string, std::less<>>& always_optional() {
  static const std::set<std::string, std::less<>> s = {
      "max_batch_size", "max_seq_len",  "temperature",         "gate_temp",
      "norm_topk_prob", "expert_dtype", "vision_max_wh_ratio",
  };
  return s;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// A feature's parameters, needed only while its switch (itself required) turns it on.
bool needed_by_feature(std::string_view field, const ModelConfig& c) {
  if (field == "vision_n_layers" || field == "dspark_block_size" || field == "engram_layer_ids") return true;
  if (starts_with(field, "vision_") || field == "image_token_id") return c.vision_enabled();
  if (starts_with(field, "dspark_")) return c.dspark_block_size > 0;
  if (starts_with(field, "engram_")) return !c.engram_layer_ids.empty();
  return true;
}

}  // namespace

Status check_required_fields(const Json& given, const ModelConfig& c, const std::vector<std::string>& fields,
                             std::string_view what, const std::map<std::string, std::string, std::less<>>& spelled_as) {
  std::vector<std::string> missing;
  for (const std::string& field : fields) {
    if (given.contains(field) || always_optional().count(field) || !needed_by_feature(field, c)) continue;
    const auto alias = spelled_as.find(field);
    missing.push_back(alias == spelled_as.end() ? fmt::format("'{}'", field)
                                                : fmt::format("'{}' ({})", field, alias->second));
  }
  if (missing.empty()) return {};
  if (missing.size() == 1)
    return error(ErrorKind::kInvalidConfig, fmt::format("{}: field {} is missing", what, missing[0]));
  return error(ErrorKind::kInvalidConfig,
               fmt::format("{}: {} required fields are missing: {}", what, missing.size(), fmt::join(missing, ", ")));
}

}  // namespace dsinfer
