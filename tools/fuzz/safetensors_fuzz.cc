// libFuzzer target for the safetensors header parser: any byte string must give either a valid
// file whose every tensor range is readable, or an error; never a crash or an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = dsinfer::SafetensorsFile::parse(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& e : file->entries()) {
    const auto bytes = file->data(e);
    if (!bytes.empty()) sink = sink ^ bytes.front() ^ bytes.back();  // ASan checks both ends
    (void)file->find(e.name);
  }
  return 0;
}
