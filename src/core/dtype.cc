// DType tables.
#include "core/dtype.h"

#include <array>
#include <utility>

namespace dsinfer {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
};

// Order matches the enum so lookups by value are an index.
constexpr std::array<DTypeInfo, 17> kInfos = {{
    {DType::kF64, "F64", 64},
    {DType::kF32, "F32", 32},
    {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},
    {DType::kF8E4M3, "F8_E4M3", 8},
    {DType::kF8E5M2, "F8_E5M2", 8},
    {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kF4E2M1, "F4_E2M1", 4},
    {DType::kI64, "I64", 64},
    {DType::kI32, "I32", 32},
    {DType::kI16, "I16", 16},
    {DType::kI8, "I8", 8},
    {DType::kU64, "U64", 64},
    {DType::kU32, "U32", 32},
    {DType::kU16, "U16", 16},
    {DType::kU8, "U8", 8},
    {DType::kBool, "BOOL", 8},
}};

constexpr bool infos_in_enum_order() {
  for (size_t i = 0; i < kInfos.size(); ++i)
    if (static_cast<size_t>(kInfos[i].type) != i) return false;
  return true;
}
static_assert(infos_in_enum_order());

}  // namespace

int dtype_bits(DType t) {
  return kInfos[static_cast<size_t>(t)].bits;
}

int64_t dtype_bytes(DType t, int64_t n) {
  return (n * dtype_bits(t) + 7) / 8;
}

std::string_view dtype_name(DType t) {
  return kInfos[static_cast<size_t>(t)].name;
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const DTypeInfo& info : kInfos)
    if (info.name == name && info.type != DType::kF4E2M1) return info.type;
  return std::nullopt;
}

}  // namespace dsinfer
