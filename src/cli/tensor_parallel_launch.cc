// `--tensor-parallel N` on generate, logits and serve outside mpirun: the same command started again
// as N ranks of one machine under mpirun (the ranks then run the code `mpirun -np N dsinfer ...`
// runs; each checks that the job has N ranks).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"

namespace dsinfer::cli {
namespace {

bool runs_on_several_ranks(std::string_view command) {
  return command == "generate" || command == "logits" || command == "serve";
}

// N of "--tensor-parallel N" or "--tensor-parallel=N" (0: absent or not a number; the parser reports it).
int requested_ranks(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    std::string_view a = argv[i];
    const char* value = nullptr;
    if (a == "--tensor-parallel" && i + 1 < argc) value = argv[i + 1];
    if (a.starts_with("--tensor-parallel=")) value = argv[i] + std::strlen("--tensor-parallel=");
    if (value) {
      char* end = nullptr;
      const long n = std::strtol(value, &end, 10);
      return end != value && *end == '\0' && n > 0 && n <= 4096 ? static_cast<int>(n) : 0;
    }
  }
  return 0;
}

bool has_flag(int argc, char** argv, std::string_view flag) {
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == flag || (a.starts_with(flag) && a.size() > flag.size() && a[flag.size()] == '=')) return true;
  }
  return false;
}

}  // namespace

int relaunch_as_ranks(int argc, char** argv) {
  if (argc < 2 || !runs_on_several_ranks(argv[1]) || job_rank().under_mpirun) return -1;
  const int ranks = requested_ranks(argc, argv);
  if (ranks < 2) return -1;
  char exe[4096];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return report_error(error(ErrorKind::kIo, "--tensor-parallel: cannot find this program's path"));
  exe[len] = '\0';
  // Every rank may use every core (mpirun binds each to one otherwise), and CPU ranks share them.
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(ranks), "--bind-to", "none", "--oversubscribe"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");  // as the user already is
  args.push_back(exe);
  args.push_back(argv[1]);                   // the command, then the default threads, then the rest as given
  if (!has_flag(argc, argv, "--threads")) {  // (right after the command: no option's missing value takes it)
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    args.push_back("--threads");
    args.push_back(std::to_string(std::max(1u, cores / static_cast<unsigned>(ranks))));
  }
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp("mpirun", cargs.data());
  return report_error(
      error(ErrorKind::kUnavailable, fmt::format("--tensor-parallel {}: cannot start mpirun ({}); install Open MPI "
                                                 "(scripts/setup.sh) or start the ranks with mpirun -np {}",
                                                 ranks, std::strerror(errno), ranks)));
}

}  // namespace dsinfer::cli
