// Quantities for people: byte counts with binary units.
#pragma once

#include <string>

namespace dsinfer {

/// "512 B", "11.3 KiB", "2.0 GiB".
std::string human_bytes(double bytes);

}  // namespace dsinfer
