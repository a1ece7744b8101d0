// Which config.json fields must be given. The reference's ModelArgs has a default for every field,
// but most are the shape of a small test model: a config without `dim` loaded as dim 1024 and was
// then reported as hundreds of mis-shaped tensors. A field is optional only where its default is
// what the official release relies on (absent from the V4.1-Flash config) or where a switch turns
// its whole feature off (vision, DSpark, Engram parameters with that feature off).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/json.h"
#include "io/model_config.h"

namespace dsinfer {

/// kInvalidConfig "<what>: field 'dim' is missing" (or "fields 'a', 'b' are missing") for the
/// required fields among `fields` that `given` (inference-style keys) lacks; `c` is the parsed
/// config, read for the switches. `spelled_as` names a field the way the file would (HF names).
Status check_required_fields(const Json& given, const ModelConfig& c, const std::vector<std::string>& fields,
                             std::string_view what, const std::map<std::string, std::string, std::less<>>& spelled_as);

}  // namespace dsinfer
