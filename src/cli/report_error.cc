// Error reporting and exit codes of the CLI (the table lives in docs/errors.md), and the model
// loading the commands share.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/progress_bar.h"

namespace dsinfer::cli {

int report_error(const Status& status) {
  std::fprintf(stderr, "dsinfer: error: %s\n", status.message().c_str());
  switch (status.kind()) {
    case ErrorKind::kInvalidArgument:
      return 2;
    case ErrorKind::kNotFound:
      return 3;
    case ErrorKind::kCorruptFile:
    case ErrorKind::kInvalidConfig:
      return 4;
    case ErrorKind::kResourceExhausted:
      return 5;
    case ErrorKind::kUnsupported:
      return 6;
    case ErrorKind::kIo:
    case ErrorKind::kInternal:
      return 1;
  }
  return 1;
}

int usage_error(std::string_view message) {
  std::fprintf(stderr, "dsinfer: error: %.*s\n", static_cast<int>(message.size()), message.data());
  return 2;
}

namespace {

// Reading every weight page at load only pays when the weights stay in memory afterwards.
bool fits_in_memory(const std::filesystem::path& dir) {
  std::error_code ec;
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") bytes += e.file_size(ec);
  const auto available = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return bytes < available / 10 * 8;
}

}  // namespace

Result<CpuModel> load_cpu_model(const std::string& dir, int threads) {
  CpuModel m;
  m.backend = std::make_unique<CpuBackend>(threads);
  m.comm = std::make_unique<LocalCommunicator>();
  ProgressBar bar("loading weights");
  LoadOptions options;
  options.prefault = fits_in_memory(dir);
  options.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
  DSINFER_ASSIGN_OR_RETURN(m.model, Model::load(dir, *m.backend, *m.comm, options));
  return m;
}

}  // namespace dsinfer::cli
