// The NCCL communicator on one GPU rank (issue 20: several GPU ranks need a machine with several
// GPUs): a sum of one rank's buffer is the buffer (the rank fold of one part), a gather copies it,
// and the golden fixtures run through it, their selections replayed, give the same logits bit for
// bit as with the local communicator (so within golden_cuda_test's bound of the reference).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/nccl_communicator.h"
#include "core/float_formats.h"
#include "io/json.h"
#include "model/model.h"
#include "ops/device_array.h"
#include "test_util.h"
#include "testing/golden_run.h"

namespace dsinfer {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<NcclCommunicator> one_rank(const CudaBackend& backend) {
  auto c = NcclCommunicator::create(
      backend, 0, 1, [](std::span<uint8_t>) { return Status{}; }, 60s);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(NcclCommunicator, OneRanksSumIsItsBufferAndItsGatherACopy) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CudaBackend backend;
  auto comm = one_rank(backend);
  ASSERT_TRUE(comm);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_TRUE(comm->enqueues_on_device());
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = std::ldexp(static_cast<float>(i) - 500.5f, -3);
  DeviceArray<float> x(backend, std::span<const float>(host)), out = DeviceArray<float>::uninitialized(backend, 1000);
  ASSERT_TRUE(comm->all_reduce_sum(x.view(DType::kF32, {1000})).ok());
  ASSERT_TRUE(comm->all_gather(x.view(DType::kF32, {1000}), out.view(DType::kF32, {1000})).ok());
  std::vector<float> back(1000), gathered(1000);
  backend.copy_to_host(back.data(), x.data(), 4000);
  backend.copy_to_host(gathered.data(), out.data(), 4000);
  EXPECT_EQ(back, host);
  EXPECT_EQ(gathered, host);
  std::vector<uint16_t> hb(777);
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = f32_to_bf16(static_cast<float>(i) * 0.37f - 100.0f);
  DeviceArray<uint16_t> xb(backend, std::span<const uint16_t>(hb));
  ASSERT_TRUE(comm->all_reduce_sum(xb.view(DType::kBF16, {777})).ok());
  std::vector<uint16_t> bb(777);
  backend.copy_to_host(bb.data(), xb.data(), 777 * 2);
  EXPECT_EQ(bb, hb);
}

TEST(NcclCommunicator, GoldensThroughOneRankEqualTheLocalCommunicators) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"v41-tiny-a", "v41-tiny-b"}) {
    const std::filesystem::path dir = testing::data_dir() / name;
    auto golden = SafetensorsFile::open(dir / "golden.safetensors");
    auto debug = SafetensorsFile::open(dir / "golden_debug.safetensors");
    auto meta = read_json_file(dir / "golden.json");
    ASSERT_TRUE(golden.ok() && debug.ok() && meta.ok());
    std::vector<std::vector<int32_t>> prompts;
    for (const Json& p : (*meta)["prompts"]) prompts.push_back(p.get<std::vector<int32_t>>());
    GoldenRunOptions o;
    o.steps = static_cast<int>(golden->find("logits")->shape[1] - 1);
    o.force_tokens = &*golden;
    o.replay = &*debug;
    std::vector<float> logits[2];
    for (int nccl = 0; nccl < 2; ++nccl) {
      CudaBackend backend;
      LocalCommunicator local;
      std::unique_ptr<NcclCommunicator> comm = nccl ? one_rank(backend) : nullptr;
      ASSERT_TRUE(!nccl || comm);
      Communicator& c = nccl ? static_cast<Communicator&>(*comm) : local;
      auto model = Model::load(dir / "checkpoint", backend, c);
      ASSERT_TRUE(model.ok()) << model.status().to_string();
      auto run = run_golden_experiment(**model, prompts, o);
      ASSERT_TRUE(run.ok()) << run.status().to_string();
      logits[nccl] = std::move(run->logits);
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0) << name;
    std::printf("%s through NCCL (1 rank): %zu logits, bit-equal to the local communicator's\n", name,
                logits[1].size());
  }
}

}  // namespace
}  // namespace dsinfer
