// The greedy pick of a row of logits, shared by the sampler and the CPU backend's greedy_pick op.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace dsinfer {

/// The first index holding the row's largest value; none when the row is empty or a value is a
/// NaN or an infinity.
std::optional<int32_t> first_maximum(std::span<const float> row);

}  // namespace dsinfer
