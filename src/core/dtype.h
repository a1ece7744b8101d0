// Element types of tensors and checkpoint entries, with their sizes and safetensors names.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsinfer {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP e4m3fn: max 448, no infinities
  kF8E5M2,
  kF8E8M0,  // unsigned power-of-two scale: 2^(byte-127)
  kF4E2M1,  // two codes per byte, low nibble = even index (spec §3.3); never a safetensors dtype
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
};

/// Bits per element (4 for kF4E2M1).
int dtype_bits(DType t);
/// Bytes needed for `n` elements, rounding packed 4-bit types up to whole bytes.
int64_t dtype_bytes(DType t, int64_t n);
/// The safetensors spelling ("BF16", "F8_E4M3", ...); "F4_E2M1" for the packed fp4 type.
std::string_view dtype_name(DType t);
/// Parses a safetensors dtype string; nullopt when unknown.
std::optional<DType> parse_safetensors_dtype(std::string_view name);

}  // namespace dsinfer
