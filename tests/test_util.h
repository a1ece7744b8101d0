// Helpers shared by the unit tests: deterministic random data and the test-data folder.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/float_formats.h"

namespace dsinfer::testing {

/// tests/data, baked in by CMake so tests run from any working directory.
/// tests/data of the source tree; DSINFER_TEST_DATA overrides it (a build run on another machine).
inline std::filesystem::path data_dir() {
  const char* dir = std::getenv("DSINFER_TEST_DATA");
  return dir && *dir ? dir : DSINFER_TEST_DATA_DIR;
}

/// The repository's models folder (the trained demo model), beside tests/data.
inline std::filesystem::path models_dir() {
  return data_dir().parent_path().parent_path() / "models";
}

/// The whole content of a file ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// bf16 values ~ N(0, sigma), with a sprinkle of exact zeros and large outliers.
inline std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const int p = pick(rng);
    const float f = p == 0 ? 0.0f : p == 1 ? normal(rng) * 1000.0f : normal(rng);
    x = f32_to_bf16(f);
  }
  return v;
}

/// A fresh, empty temporary folder removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("dsinfer_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace dsinfer::testing
