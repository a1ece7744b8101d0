// The model loading the commands share: the backend from --device, the weights with a progress bar.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "core/check.h"
#ifdef DSINFER_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#endif
#ifdef DSINFER_WITH_NCCL
#include "backends/cuda/nccl_communicator.h"
#endif
#ifdef DSINFER_WITH_MPI
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_step_channel.h"
#endif

namespace dsinfer::cli {
namespace {

// Reading every weight page at load only pays when the weights stay in memory afterwards.
bool fits_in_memory(const std::filesystem::path& dir) {
  std::error_code ec;
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") bytes += e.file_size(ec);
  const auto available =
      static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return bytes < available / 10 * 8;
}

// The backends' switches from the environment, read here and nowhere in the library:
// DSINFER_CPU_ISA caps the CPU's instruction set; DSINFER_CUDA_GRAPH, DSINFER_CUDA_ROUTED_TOKENS,
// DSINFER_CUDA_GEMV_ROWS, DSINFER_CUDA_LINEAR, DSINFER_CUDA_PDL and DSINFER_CUDA_SIDE set the CUDA
// backend's options (backends/cuda/options.h).
CpuBackendOptions cpu_options() {
  CpuBackendOptions o;
  if (const char* isa = std::getenv("DSINFER_CPU_ISA")) o.isa_cap = cpu::isa_by_name(isa);
  return o;
}

Result<std::unique_ptr<Backend>> make_backend(const BackendFlags& flags) {
  if (flags.device == "cpu")
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(flags.threads, cpu_options()));
#ifdef DSINFER_WITH_CUDA
  if (cuda::device_count() == 0)
    return error(ErrorKind::kUnsupported, "--device cuda: no CUDA device is visible on this machine");
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(CudaBackendOptions::from_switches(std::getenv)));
#else
  return error(ErrorKind::kUnsupported,
               "--device cuda: this build has no CUDA backend (configure with -DDSINFER_CUDA=ON)");
#endif
}

// A GPU rank under mpirun meets the others in NCCL. One rank today: its id needs no sharing (several
// GPU ranks are refused before, as the model's GPU kernels take a whole model).
Result<std::unique_ptr<Communicator>> nccl_communicator(Backend& backend, const JobRank& job,
                                                        std::chrono::milliseconds timeout) {
#ifdef DSINFER_WITH_NCCL
  DSINFER_CHECK(job.size == 1, "one GPU rank");
  DSINFER_ASSIGN_OR_RETURN(
      std::unique_ptr<NcclCommunicator> comm,
      NcclCommunicator::create(
          static_cast<CudaBackend&>(backend), 0, 1, [](std::span<uint8_t>) { return Status{}; }, timeout));
  return std::unique_ptr<Communicator>(std::move(comm));
#else
  (void)backend, (void)job, (void)timeout;
  return error(ErrorKind::kUnsupported,
               "--device cuda under mpirun: this build has no NCCL communicator (configure with -DDSINFER_NCCL=ON)");
#endif
}

}  // namespace

void add_backend_flags(CLI::App* cmd, BackendFlags& flags) {
  cmd->add_option("--device", flags.device, "Where the model runs: cpu or cuda (GPU 0)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--threads", flags.threads, "CPU threads (default: all)");
  cmd->add_option("--collective-timeout", flags.collective_timeout_s,
                  "Seconds a rank waits for the others (under mpirun) before the job ends with an error")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--tensor-parallel", flags.tensor_parallel,
                  "Ranks to run on (generate, logits, serve): started under mpirun on this machine")
      ->check(CLI::Range(1, 4096));
  add_max_model_len_flag(cmd, flags.max_model_len);
}

void add_max_model_len_flag(CLI::App* cmd, int64_t& max_model_len) {
  cmd->add_option("--max-model-len", max_model_len,
                  "Context in positions (default: the config's; at most what the model's RoPE/YaRN covers)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
}

Result<ModelConfig> load_config_at_context(const std::filesystem::path& source, int64_t max_model_len) {
  DSINFER_ASSIGN_OR_RETURN(ModelConfig c, load_model_config(source));
  if (max_model_len > 0)
    if (Status s = c.set_context(max_model_len); !s.ok())
      return Status(s.kind(), fmt::format("--max-model-len {}: {}", max_model_len, s.message()));
  return c;
}

JobRank job_rank() {
  // Open MPI's launcher sets these in every rank's environment.
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!rank || !size) return {};
  return {std::atoi(rank), std::max(1, std::atoi(size)), true};
}

Result<LoadedModel> load_model(const std::string& dir, const BackendFlags& flags, const char* command,
                               bool several_ranks) {
  LoadedModel m;
  const JobRank job = job_rank();
  if (flags.tensor_parallel > 0 && flags.tensor_parallel != job.size)
    return error(
        ErrorKind::kInvalidArgument,
        job.under_mpirun
            ? fmt::format("--tensor-parallel {}, but mpirun started {} ranks", flags.tensor_parallel, job.size)
            : fmt::format("--tensor-parallel {}: `dsinfer {}` runs on one rank", flags.tensor_parallel, command));
  if (job.size > 1 && !several_ranks)
    return error(ErrorKind::kUnsupported,
                 fmt::format("`dsinfer {}` runs on one rank today, not under mpirun with {} ranks (`generate`, "
                             "`logits` and `serve` run on several)",
                             command, job.size));
  if (flags.max_model_len > 0) DSINFER_RETURN_IF_ERROR(load_config_at_context(dir, flags.max_model_len).status());
  DSINFER_ASSIGN_OR_RETURN(m.backend, make_backend(flags));
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.collective_timeout_s * 1000));
  if (flags.device == "cuda" && job.size > 1)
    return error(ErrorKind::kUnsupported,
                 fmt::format("--device cuda under mpirun with {} ranks: several GPU ranks are not built yet (one GPU "
                             "rank runs over NCCL; several ranks run with --device cpu)",
                             job.size));
  if (flags.device == "cuda" && job.under_mpirun) {
    DSINFER_ASSIGN_OR_RETURN(m.comm, nccl_communicator(*m.backend, job, timeout));
  } else if (job.size > 1) {
#ifdef DSINFER_WITH_MPI
    DSINFER_ASSIGN_OR_RETURN(m.comm, MpiCommunicator::create(timeout));
    DSINFER_ASSIGN_OR_RETURN(m.steps, MpiStepChannel::create(timeout));
#else
    return error(
        ErrorKind::kUnsupported,
        fmt::format("started with {} ranks, but this build has no MPI (configure with -DDSINFER_MPI=ON)", job.size));
#endif
  } else {
    m.comm = std::make_unique<LocalCommunicator>();
  }
  ProgressBar read_bar("loading weights"), upload_bar("copying weights to the GPU");
  LoadOptions options;
  options.prefault = fits_in_memory(dir);
  options.progress = [&read_bar](uint64_t done, uint64_t total) { read_bar.update(done, total); };
  options.upload_progress = [&upload_bar](uint64_t done, uint64_t total) { upload_bar.update(done, total); };
  options.max_model_len = flags.max_model_len;
  DSINFER_ASSIGN_OR_RETURN(m.model, Model::load(dir, *m.backend, *m.comm, options));
  return m;
}

Result<Tokenizer> load_tokenizer(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    return error(ErrorKind::kNotFound, fmt::format("{}: no such model folder or config file", dir));
  return Tokenizer::load(std::filesystem::path(dir) / "tokenizer.json");
}

}  // namespace dsinfer::cli
