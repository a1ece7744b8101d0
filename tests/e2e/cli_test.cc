// The dsinfer binary end to end: inspect on the Flash config and the fixtures, make-tiny, and the
// one-line errors and exit codes for bad input.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>

#include "cli/bench_serve_stats.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "poisoned_checkpoint.h"
#include "test_util.h"

namespace dsinfer {
namespace {

struct CliRun {
  int code;
  std::string out;  // stdout and stderr together
};

CliRun run(const std::string& args, const std::string& stdin_file = "/dev/null") {
  const std::string cmd = std::string(DSINFER_BINARY) + " " + args + " < " + stdin_file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// bench-serve's latency samples: a request whose output streamed no text has no first token (it
// counted a TTFT of zero before, and a TPOT over its whole time), and is counted apart.
TEST(BenchServeStats, ARequestThatStreamedNoTextHasNoTtft) {
  const StreamSample samples[] = {
      {.ok = true, .ttft = 0.5, .e2e = 2.5, .itl = {0.25, 0.75}, .prompt_tokens = 10, .output_tokens = 5, .error = ""},
      {.ok = true, .ttft = std::nullopt, .e2e = 3.0, .itl = {}, .prompt_tokens = 12, .output_tokens = 8, .error = ""},
      {.ok = false,
       .ttft = 0.1,
       .e2e = 0.2,
       .itl = {},
       .prompt_tokens = 0,
       .output_tokens = 0,
       .error = "HTTP 503: busy"}};
  const LatencySamples l = latency_samples(samples);
  EXPECT_EQ(l.ok, 2);
  EXPECT_EQ(l.without_text, 1);
  EXPECT_EQ(l.prompt_tokens, 22);
  EXPECT_EQ(l.output_tokens, 13);
  EXPECT_EQ(l.ttft, std::vector<double>{0.5});
  EXPECT_EQ(l.tpot, std::vector<double>{0.5});  // (2.5 - 0.5) / 4
  EXPECT_EQ(l.itl, (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(l.e2e, (std::vector<double>{2.5, 3.0}));
}

// bench-serve's reading of a stream, in pieces that cut events anywhere: the usage, the first event
// with text and the gaps after it; an error event (a request that failed after its 200 went out)
// is the request's failure, not a success.
TEST(BenchServeStats, AStreamsTextUsageAndErrorEvent) {
  const std::string body =
      "data: {\"choices\":[{\"text\":\"\"}]}\n\n"  // no text: not the first token
      "data: {\"choices\":[{\"text\":\"Hello\"}]}\n\n"
      "data: {\"choices\":[{\"text\":\" world\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n";
  StreamSample s;
  StreamReader reader(s);
  const double times[] = {0.25, 0.5, 1.0};
  const size_t cuts[] = {0, 50, 90, body.size()};
  for (int i = 0; i < 3; ++i) reader.feed(std::string_view(body).substr(cuts[i], cuts[i + 1] - cuts[i]), times[i]);
  reader.feed("data: [DONE]\n\n", 1.5);
  ASSERT_TRUE(s.ttft.has_value());
  EXPECT_EQ(s.prompt_tokens, 7);
  EXPECT_EQ(s.output_tokens, 3);
  EXPECT_TRUE(reader.error_event().empty());
  // The two text events arrive in the pieces that complete them (cut at bytes 50 and 90).
  EXPECT_EQ(*s.ttft, 0.5);
  EXPECT_EQ(s.itl, std::vector<double>{0.5});

  StreamSample failed;
  StreamReader broken(failed);
  broken.feed(
      "data: {\"choices\":[{\"text\":\"Hi\"}]}\n\ndata: {\"error\":{\"message\":\"the request was "
      "cancelled: the server is stopping\",\"code\":500}}\n\ndata: [DONE]\n\n",
      0.1);
  EXPECT_EQ(broken.error_event(), "the request was cancelled: the server is stopping");
}

// bench-serve's arrivals: all at once for an infinite rate; else a seeded Poisson process whose
// gaps average 1 / rate.
TEST(BenchServeStats, ArrivalTimesArePoissonAtTheRate) {
  EXPECT_EQ(arrival_times(3, std::numeric_limits<double>::infinity(), 1), (std::vector<double>{0, 0, 0}));
  const std::vector<double> at = arrival_times(20000, 8.0, 7);
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end()));
  EXPECT_GT(at.front(), 0.0);
  EXPECT_NEAR(at.back() / 20000.0, 1.0 / 8.0, 0.03 / 8.0);  // 20,000 gaps: the mean within 4 sigma
  double squares = 0;                                       // an exponential gap's variance is its mean squared
  for (size_t i = 1; i < at.size(); ++i) squares += (at[i] - at[i - 1]) * (at[i] - at[i - 1]);
  EXPECT_NEAR(squares / 19999.0, 2.0 / 64.0, 0.08 * 2.0 / 64.0);  // E[gap^2] = 2 / rate^2, within 5 sigma
  EXPECT_EQ(arrival_times(50, 8.0, 7), std::vector<double>(at.begin(), at.begin() + 50));  // seeded
}

TEST(Cli, InspectFlashConfigPrintsTheSpecSizes) {
  const CliRun r = run("inspect --config " + (testing::data_dir() / "configs/v41_flash_inference.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  // Spec §1.5: backbone 551.9 B, Engram 196.6 B, DSpark 14.2 B, vision 0.49 B, total 763.2 B.
  EXPECT_HAS(r.out, "backbone                551.9 B");
  EXPECT_HAS(r.out, "engram tables           196.6 B");
  EXPECT_HAS(r.out, "dspark                   14.2 B");
  EXPECT_HAS(r.out, "vision                   0.49 B");
  EXPECT_HAS(r.out, "total                   763.2 B");
  EXPECT_HAS(r.out, "compressed KV 720 B + index keys 170 B");  // §14.3: 890 B per token
  EXPECT_HAS(r.out, "     24      1  reindex       20         24  masked");
  const CliRun hf = run("inspect --config " + (testing::data_dir() / "configs/v41_flash_hf.json").string());
  ASSERT_EQ(hf.code, 0) << hf.out;
  EXPECT_HAS(hf.out, "total                   763.2 B");
}

// --tensor-parallel N: what each rank would hold, and a layout the config does not divide into
// refused with the tensor's name.
TEST(Cli, InspectTensorParallelPlansEachRank) {
  const std::string flash = "inspect --config " + (testing::data_dir() / "configs/v41_flash_hf.json").string();
  const CliRun eight = run(flash + " --tensor-parallel 8");
  ASSERT_EQ(eight.code, 0) << eight.out;
  EXPECT_HAS(eight.out, "tensor parallelism over 8 ranks");
  EXPECT_HAS(eight.out, "48 of 384 routed experts a rank");
  EXPECT_HAS(eight.out, "weights per rank: ");
  EXPECT_HAS(eight.out, "in host memory, once a machine");
  const CliRun bad = run(flash + " --tensor-parallel 128");
  EXPECT_NE(bad.code, 0);
  EXPECT_HAS(bad.out, "not a multiple of 128");
  EXPECT_NE(run(flash + " --tensor-parallel 0").code, 0);
}

// The release's context (max_position_embeddings 1,048,576), --max-model-len within it, the cache
// a sequence needs at it; more than the YaRN range is refused naming the flag and the range.
TEST(Cli, ContextFromTheConfigAndMaxModelLen) {
  const std::string hf = "inspect --config " + (testing::data_dir() / "configs/v41_flash_hf.json").string();
  const CliRun full = run(hf);
  ASSERT_EQ(full.code, 0) << full.out;
  EXPECT_HAS(full.out, "context: 1048576 positions (covered by the positions: 1048576)");
  EXPECT_HAS(full.out, "at the context (1048576 positions): 897.0 MiB per sequence");  // 894 B x 2^20 + rings
  EXPECT_HAS(full.out, "3.1 GiB per sequence at the context");
  const CliRun lower = run(hf + " --max-model-len 131072");
  ASSERT_EQ(lower.code, 0) << lower.out;
  EXPECT_HAS(lower.out, "context: 131072 positions (--max-model-len)");
  const CliRun over = run(hf + " --max-model-len 1048577");
  EXPECT_EQ(over.code, 2);
  EXPECT_HAS(over.out, "--max-model-len 1048577");
  EXPECT_HAS(over.out, "1 to 1048576 (max_position_embeddings = 1048576)");

  testing::TempDir dir;
  ASSERT_EQ(run("make-tiny --out " + dir.path().string()).code, 0);
  const std::string model = " --model " + dir.path().string();
  const CliRun short_context = run("generate" + model + " --prompt hi --max-tokens 100 --max-model-len 64");
  EXPECT_EQ(short_context.code, 2);
  EXPECT_HAS(short_context.out, "exceeds the context of 64 tokens");
  // YaRN from 1024 x 16 covers 16,384 positions: the tiny model may run at more than its 4,096.
  const CliRun raised = run("generate" + model + " --prompt hi --max-tokens 2 --max-model-len 16384 --temperature 0");
  EXPECT_EQ(raised.code, 0) << raised.out;
  EXPECT_HAS(run("generate" + model + " --prompt hi --max-tokens 20000 --max-model-len 16384").out,
             "exceeds the context of 16384 tokens");
  EXPECT_HAS(run("generate" + model + " --prompt hi --max-model-len 16385").out,
             "1 to 16384 (YaRN: original_seq_len 1024 x rope_factor 16)");
  // serve: a cache budget too small for one sequence at the context names both and what to change.
  const CliRun small = run("serve" + model + " --port 0 --cache-memory 0.001");
  EXPECT_EQ(small.code, 2);
  EXPECT_HAS(small.out, "--cache-memory 0.001 (GiB)");
  EXPECT_HAS(small.out, "one sequence at the context of 4096 positions");
  EXPECT_HAS(small.out, "raise --cache-memory or lower --max-model-len");
}

TEST(Cli, InspectFixturesAndTinyModel) {
  for (const char* fx : {"v41-tiny-a", "v41-tiny-b"}) {
    const CliRun r = run("inspect --model " + (testing::data_dir() / fx / "checkpoint").string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_HAS(r.out, "all as the config expects");
  }
  testing::TempDir dir;
  const CliRun made = run("make-tiny --out " + dir.path().string() + " --seed 5");
  ASSERT_EQ(made.code, 0) << made.out;
  EXPECT_HAS(made.out, "random");
  const CliRun r = run("inspect --model " + dir.path().string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_HAS(r.out, "dspark draft 2");
  EXPECT_HAS(r.out, "matches the config");
}

TEST(Cli, BadInputGivesOneLineErrorsAndExitCodes) {
  CliRun r = run("inspect --bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_HAS(r.out, "dsinfer: error: ");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  r = run("inspect");
  EXPECT_EQ(r.code, 2);
  r = run("inspect --model /nonexistent/model");
  EXPECT_EQ(r.code, 3);
  EXPECT_HAS(r.out, "/nonexistent/model: no such model folder");
  r = run("");
  EXPECT_EQ(r.code, 2);
  r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_HAS(r.out, "inspect");
  EXPECT_HAS(r.out, "make-tiny");

  // A truncated shard names the file.
  testing::TempDir dir;
  for (const auto& f : std::filesystem::directory_iterator(testing::data_dir() / "v41-tiny-a/checkpoint"))
    std::filesystem::copy_file(f.path(), dir.path() / f.path().filename());
  const auto shard = dir.path() / "model-00001-of-00001.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  r = run("inspect --model " + dir.path().string());
  EXPECT_EQ(r.code, 4);
  EXPECT_HAS(r.out, "model-00001-of-00001.safetensors");
  EXPECT_HAS(r.out, "run past the data section");

  // A config that does not fit the checkpoint lists the problems.
  std::filesystem::resize_file(shard, 0);
  std::filesystem::copy_file(testing::data_dir() / "v41-tiny-a/checkpoint/model-00001-of-00001.safetensors", shard,
                             std::filesystem::copy_options::overwrite_existing);
  auto config = read_json_file(testing::data_dir() / "v41-tiny-a/checkpoint/config.json");
  ASSERT_TRUE(config.ok());
  Json short_schedule = *config;
  short_schedule["n_layers"] = 2;
  std::ofstream(dir.path() / "config.json") << short_schedule.dump();
  r = run("inspect --model " + dir.path().string());
  EXPECT_EQ(r.code, 4);
  EXPECT_HAS(r.out, "field 'compress_ratios' has 7 entries; expected n_layers + n_mtp_layers = 2");
  // A config that leaves out required fields names them (it used to be filled with defaults and
  // reported as hundreds of mis-shaped tensors).
  std::ofstream(dir.path() / "config.json") << R"({"dim": 192, "n_layers": 2})";
  r = run("inspect --model " + dir.path().string());
  EXPECT_EQ(r.code, 4);
  EXPECT_HAS(r.out, "config.json: 39 required fields are missing: 'dtype', 'vocab_size', 'moe_inter_dim', ");
  Json no_dim = *config;
  no_dim.erase("dim");
  std::ofstream(dir.path() / "config.json") << no_dim.dump();
  for (const char* command : {"inspect --model ", "generate --prompt hi --max-tokens 2 --model "}) {
    r = run(command + dir.path().string());
    EXPECT_EQ(r.code, 4) << command;
    EXPECT_HAS(r.out, "config.json: field 'dim' is missing");
  }
}

// Copies the tiny-a fixture into `dir`.
void copy_fixture(const std::filesystem::path& dir) {
  for (const auto& f : std::filesystem::directory_iterator(testing::data_dir() / "v41-tiny-a/checkpoint"))
    std::filesystem::copy_file(f.path(), dir / f.path().filename());
}

// inspect passed folders that generate cannot load (probe C52, C56, C61): now both fail, with
// the same exit code and the same message.
TEST(Cli, InspectRefusesEveryTokenizerGenerateRefuses) {
  const auto tokenizer = read_json_file(testing::data_dir() / "v41-tiny-a/checkpoint/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok());
  Json bad_regex = *tokenizer, unknown_merge = *tokenizer, no_merges = *tokenizer;
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "((";
  unknown_merge["model"]["merges"].push_back("zzzq qqqz");
  no_merges["model"].erase("merges");
  const std::pair<const Json*, const char*> cases[] = {
      {nullptr, "tokenizer.json: cannot open"},
      {&bad_regex, "tokenizer.json: pre-tokenizer regex at 2: missing closing parenthesis"},
      {&unknown_merge, "tokenizer.json: merge 'zzzq qqqz' names a token not in the vocab"},
      {&no_merges, "tokenizer.json: missing list 'model.merges'"},
  };
  for (const auto& [json, needle] : cases) {
    testing::TempDir dir;
    copy_fixture(dir.path());
    if (json)
      std::ofstream(dir.path() / "tokenizer.json") << json->dump();
    else
      std::filesystem::remove(dir.path() / "tokenizer.json");
    const CliRun inspect = run("inspect --model " + dir.path().string());
    const CliRun generate = run("generate --prompt hi --max-tokens 2 --model " + dir.path().string());
    EXPECT_NE(inspect.code, 0) << needle;
    EXPECT_EQ(inspect.code, generate.code) << needle;
    EXPECT_HAS(inspect.out, needle);
    EXPECT_HAS(generate.out, needle);
    const auto first_line = [](const std::string& s) { return s.substr(0, s.find('\n')); };
    EXPECT_EQ(first_line(inspect.out), first_line(generate.out));
  }
}

// A checkpoint whose embedding is NaN loads; generate reports the non-finite logits as an error
// (nonzero exit) instead of printing a run of BOS tokens.
TEST(Cli, GenerateFailsOnNonFiniteLogits) {
  testing::TempDir dir;
  copy_fixture(dir.path());
  testing::fill_bf16_tensor_with_nan(dir.path(), "embed.weight");
  const CliRun r =
      run("generate --prompt hi --max-tokens 4 --temperature 0 --threads 1 --model " + dir.path().string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_HAS(r.out, "dsinfer: error: the logits are not finite at step 1");
  EXPECT_EQ(r.out.find("<｜begin▁of▁sentence｜>"), std::string::npos) << r.out;
  // The CLI's sampling flags go through the same bounds as the server's fields.
  const CliRun penalty = run("generate --prompt hi --max-tokens 4 --repetition-penalty 1e-45 --model " +
                             (testing::data_dir() / "v41-tiny-a/checkpoint").string());
  EXPECT_EQ(penalty.code, 2) << penalty.out;
  EXPECT_HAS(penalty.out, "'repetition_penalty' must be in [0.01, 100]");
}

// A shard path that is a folder: the error names the file type, not a stale errno.
TEST(Cli, ShardThatIsAFolder) {
  testing::TempDir dir;
  copy_fixture(dir.path());
  const auto shard = dir.path() / "model-00001-of-00001.safetensors";
  std::filesystem::remove(shard);
  std::filesystem::create_directory(shard);
  const CliRun r = run("inspect --model " + dir.path().string());
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_HAS(r.out, "model-00001-of-00001.safetensors: is a directory, not a regular file");
  EXPECT_EQ(r.out.find("Success"), std::string::npos) << r.out;
}

TEST(Cli, LogitsWritesTheGoldenLayout) {
  const auto fx = testing::data_dir() / "v41-tiny-a";
  testing::TempDir dir;
  std::ofstream(dir.path() / "prompts.json") << R"({"prompts": [[0, 218, 314, 192, 328, 466, 124, 264, 420, 185]]})";
  const std::string out = (dir.path() / "out.safetensors").string(), dbg = (dir.path() / "dbg.safetensors").string();
  const CliRun r = run("logits --model " + (fx / "checkpoint").string() + " --prompts " +
                       (dir.path() / "prompts.json").string() + " --steps 3 --out " + out + " --dump-debug " + dbg);
  ASSERT_EQ(r.code, 0) << r.out;
  auto o = SafetensorsFile::open(out);
  auto d = SafetensorsFile::open(dbg);
  ASSERT_TRUE(o.ok() && d.ok());
  EXPECT_EQ(o->find("logits")->shape, (std::vector<int64_t>{1, 4, 512}));
  EXPECT_EQ(o->find("tokens")->shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(d->find("step00.engram_hashes")->shape, (std::vector<int64_t>{1, 10, 2, 6}));
  EXPECT_EQ(d->find("step00.layer3.out")->shape, (std::vector<int64_t>{1, 10, 4, 192}));
  EXPECT_EQ(d->find("step01.layer3.ffn_pre")->shape, (std::vector<int64_t>{1, 1, 4}));
  EXPECT_EQ(d->find("step02.layer5.topk_idxs")->shape, (std::vector<int64_t>{1, 1, 6}));
  EXPECT_EQ(d->find("step00.layer0.gate_indices")->shape, (std::vector<int64_t>{10, 2}));
  EXPECT_EQ(d->find("step03.layer4.candidates")->shape, (std::vector<int64_t>{1, 1, 13}));  // position 12

  // Bad input: a prompt that is not a list of ids, and a token id outside the vocab.
  std::ofstream(dir.path() / "bad.json") << R"({"prompts": [["hello"]]})";
  CliRun bad = run("logits --model " + (fx / "checkpoint").string() + " --prompts " +
                   (dir.path() / "bad.json").string() + " --steps 1 --out " + out);
  EXPECT_EQ(bad.code, 2);
  EXPECT_HAS(bad.out, "token ids must be integers");
  std::ofstream(dir.path() / "big.json") << R"({"prompts": [[0, 9999]]})";
  bad = run("logits --model " + (fx / "checkpoint").string() + " --prompts " + (dir.path() / "big.json").string() +
            " --steps 1 --out " + out);
  EXPECT_EQ(bad.code, 2);
  EXPECT_HAS(bad.out, "token id 9999 outside the vocab of 512");

  // --prefill-chunk: the same file from pieces of 3 tokens; not with --dump-debug.
  const std::string chunked = (dir.path() / "chunked.safetensors").string();
  const std::string plain = (dir.path() / "plain.safetensors").string();
  const std::string args = "logits --model " + (fx / "checkpoint").string() + " --prompts " +
                           (dir.path() / "prompts.json").string() + " --steps 3 --out ";
  ASSERT_EQ(run(args + plain).code, 0);
  ASSERT_EQ(run(args + chunked + " --prefill-chunk 3").code, 0);
  EXPECT_EQ(testing::read_file(plain), testing::read_file(chunked));
  bad = run(args + chunked + " --prefill-chunk 3 --dump-debug " + dbg);
  EXPECT_EQ(bad.code, 2);
  EXPECT_HAS(bad.out, "a chunked prefill cannot replay or dump");
  bad = run(args + out + " --dspark");
  EXPECT_NE(bad.code, 0);
  EXPECT_HAS(bad.out, "no DSpark drafter");
}

TEST(Cli, LogitsWithTheDrafterWritesTheDSparkLayout) {
  const auto fx = testing::data_dir() / "v41-tiny-dspark";
  testing::TempDir dir;
  std::ofstream(dir.path() / "prompts.json")
      << R"({"prompts": [[5, 17, 200, 31, 8, 99, 150, 2, 64, 300, 12, 7, 45, 250, 180, 66, 21, 90]]})";
  const std::string out = (dir.path() / "out.safetensors").string(), dbg = (dir.path() / "dbg.safetensors").string();
  const CliRun r =
      run("logits --model " + (fx / "checkpoint").string() + " --prompts " + (dir.path() / "prompts.json").string() +
          " --steps 3 --dspark --out " + out + " --dump-debug " + dbg);
  ASSERT_EQ(r.code, 0) << r.out;
  auto o = SafetensorsFile::open(out);
  auto d = SafetensorsFile::open(dbg);
  ASSERT_TRUE(o.ok() && d.ok());
  EXPECT_EQ(o->find("spec_out")->shape, (std::vector<int64_t>{1, 3, 6}));
  EXPECT_EQ(o->find("spec_base")->shape, (std::vector<int64_t>{1, 3, 5, 384}));
  EXPECT_EQ(o->find("spec_confidence")->shape, (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(o->find("main_hidden_decode")->shape, (std::vector<int64_t>{1, 3, 384}));
  EXPECT_EQ(d->find("step00.spec.stage2.window_kv")->shape, (std::vector<int64_t>{1, 16, 64}));
  EXPECT_EQ(d->find("step00.spec.main_x")->shape, (std::vector<int64_t>{1, 16, 128}));  // the ring's 16 of 18
  EXPECT_EQ(d->find("step01.spec.stage1.gate_indices")->shape, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(d->find("step03.spec.head_logits")->shape, (std::vector<int64_t>{1, 5, 384}));
  EXPECT_EQ(d->find("step02.spec.head_x")->shape, (std::vector<int64_t>{1, 5, 128}));
  // Each call's anchor is the token the next forward takes: here the greedy token.
  std::vector<int32_t> tokens(4), spec(18);
  std::memcpy(tokens.data(), o->data(*o->find("tokens")).data(), 16);
  std::memcpy(spec.data(), o->data(*o->find("spec_out")).data(), 72);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(spec[k * 6], tokens[k + 1]) << "call " << k;
}

TEST(Cli, GenerateStreamsReproduciblyAndRejectsOverlongRequests) {
  testing::TempDir dir;
  ASSERT_EQ(run("make-tiny --out " + dir.path().string()).code, 0);
  const std::string base = "generate --model " + dir.path().string() + " --prompt 'Hello there' --max-tokens 12";
  const CliRun a = run(base + " --temperature 0.9 --seed 7"), b = run(base + " --temperature 0.9 --seed 7");
  ASSERT_EQ(a.code, 0) << a.out;
  // Same seed, same text (the timing line on stderr follows the text).
  EXPECT_EQ(a.out.substr(0, a.out.rfind("prompt ")), b.out.substr(0, b.out.rfind("prompt ")));
  EXPECT_HAS(a.out, "prompt 4 tokens");  // BOS + 3 (add_default_bos_token)
  const CliRun no_bos = run(base + " --temperature 0 --no-bos");
  EXPECT_EQ(no_bos.code, 0) << no_bos.out;
  EXPECT_HAS(no_bos.out, "prompt 3 tokens");
  // A BOS the prompt already starts with is not doubled.
  const CliRun own_bos = run("generate --model " + dir.path().string() +
                             " --prompt '<｜begin▁of▁sentence｜>Hello there' --max-tokens 2 --temperature 0");
  EXPECT_EQ(own_bos.code, 0) << own_bos.out;
  EXPECT_HAS(own_bos.out, "prompt 4 tokens");
  EXPECT_HAS(a.out, "generated 12 tokens");
  const CliRun greedy = run(base + " --temperature 0 --speculative off");
  EXPECT_EQ(greedy.code, 0) << greedy.out;
  EXPECT_EQ(greedy.out.find("verify steps"), std::string::npos) << greedy.out;
  // Speculative decoding (on by default): the same text, and the drafts it verified.
  const CliRun speculative = run(base + " --temperature 0 --draft-confidence 0");
  ASSERT_EQ(speculative.code, 0) << speculative.out;
  EXPECT_EQ(speculative.out.substr(0, speculative.out.rfind("prompt ")),
            greedy.out.substr(0, greedy.out.rfind("prompt ")));
  EXPECT_HAS(speculative.out, "verify steps");
  const CliRun bad_drafts = run(base + " --speculative 9");
  EXPECT_EQ(bad_drafts.code, 2);
  EXPECT_HAS(bad_drafts.out, "--speculative takes off or a count of drafts from 1 to 5, not '9'");
  const CliRun too_long = run("generate --model " + dir.path().string() + " --prompt hi --max-tokens 5000");
  EXPECT_EQ(too_long.code, 2);
  EXPECT_HAS(too_long.out, "exceeds the context of 4096 tokens");
  EXPECT_EQ(std::count(too_long.out.begin(), too_long.out.end(), '\n'), 1) << too_long.out;
  const CliRun bad = run("generate --model " + dir.path().string() + " --prompt hi --top-p 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_HAS(bad.out, "'top_p'");

  const CliRun bench =
      run("bench --model " + dir.path().string() + " --prompt-lengths 8 20 --batch-sizes 1 3 --decode-steps 2");
  ASSERT_EQ(bench.code, 0) << bench.out;
  EXPECT_HAS(bench.out, "prefill tok/s");
  EXPECT_HAS(bench.out, "tokens/step");  // speculative decoding, on by default
  EXPECT_EQ(std::count(bench.out.begin(), bench.out.end(), '\n'), 5) << bench.out;  // header + 2 x 2 rows
  const CliRun plain_bench =
      run("bench --model " + dir.path().string() + " --prompt-lengths 8 --decode-steps 2 --speculative off");
  ASSERT_EQ(plain_bench.code, 0) << plain_bench.out;
  EXPECT_EQ(plain_bench.out.find("tokens/step"), std::string::npos) << plain_bench.out;
  // Prompts cut from a text: as many rows; a text too short for the prompts is named.
  const std::filesystem::path text = dir.path() / "prompts.txt";
  std::ofstream(text) << "The jury said it did find that the city was well run, and that the election was fair. ";
  const CliRun text_bench = run("bench --model " + dir.path().string() + " --prompt-text " + text.string() +
                                " --prompt-lengths 8 --batch-sizes 2 --decode-steps 2");
  ASSERT_EQ(text_bench.code, 0) << text_bench.out;
  EXPECT_EQ(std::count(text_bench.out.begin(), text_bench.out.end(), '\n'), 2) << text_bench.out;
  const CliRun short_text = run("bench --model " + dir.path().string() + " --prompt-text " + text.string() +
                                " --prompt-lengths 64 --batch-sizes 2 --decode-steps 2");
  EXPECT_NE(short_text.code, 0);
  EXPECT_HAS(short_text.out, "prompts.txt: ");
  EXPECT_HAS(short_text.out, "tokens, fewer than 2 prompts of 64");
}

// A text file's perplexity: one line with the value, the tokens predicted and the window; the
// same text in shorter windows predicts as many tokens; a missing file is named.
TEST(Cli, PerplexityOfATextFile) {
  testing::TempDir dir;
  ASSERT_EQ(run("make-tiny --out " + dir.path().string()).code, 0);
  const std::string text = (dir.path() / "text.txt").string();
  {
    std::ofstream f(text);
    f << "Once upon a time there was a small cat who liked to sail to the moon and back.\n";
  }
  const std::string base = "perplexity --model " + dir.path().string() + " --text " + text;
  const CliRun whole = run(base), windows = run(base + " --context 8");
  ASSERT_EQ(whole.code, 0) << whole.out;
  ASSERT_EQ(windows.code, 0) << windows.out;
  EXPECT_HAS(whole.out, "windows of 4096 positions");
  EXPECT_HAS(windows.out, "windows of 8 positions");
  const auto tokens = [](const std::string& out) {
    return out.substr(out.find(" over "), out.find(" tokens") - out.find(" over "));
  };
  EXPECT_EQ(tokens(whole.out), tokens(windows.out)) << whole.out << windows.out;
  EXPECT_EQ(std::count(whole.out.begin(), whole.out.end(), '\n'), 1) << whole.out;
  const CliRun missing = run("perplexity --model " + dir.path().string() + " --text /nonexistent.txt");
  EXPECT_NE(missing.code, 0);
  EXPECT_HAS(missing.out, "/nonexistent.txt: cannot open");
}

TEST(Cli, ChatTurnsCommandsAndErrorsKeepTheSessionGoing) {
  testing::TempDir dir;
  ASSERT_EQ(run("make-tiny --out " + dir.path().string()).code, 0);
  const std::string model = " --model " + dir.path().string();
  std::ofstream(dir.path() / "turns.txt") << "Hello there\n/reset\nAnd again\n/bogus\n\n/exit\nnever read\n";
  const std::string turns = (dir.path() / "turns.txt").string();
  const CliRun chat = run("chat" + model + " --max-tokens 6 --seed 1", turns);
  ASSERT_EQ(chat.code, 0) << chat.out;
  EXPECT_HAS(chat.out, "[reasoning]");  // thinking mode by default; piped output gets headings
  EXPECT_HAS(chat.out, "(conversation cleared)");
  EXPECT_HAS(chat.out, "unknown command /bogus");
  EXPECT_EQ(chat.out.find("loading weights"), std::string::npos) << "no progress bar when piped";
  size_t turns_run = 0;
  for (size_t at = 0; (at = chat.out.find("generated 6 tokens", at)) != std::string::npos; ++at) ++turns_run;
  EXPECT_EQ(turns_run, 2u) << chat.out;
  // A turn that cannot run is reported and dropped; the session goes on to the next one.
  const CliRun too_long = run("chat" + model + " --max-tokens 5000", turns);
  EXPECT_EQ(too_long.code, 0) << too_long.out;
  EXPECT_HAS(too_long.out, "exceeds the context");
  EXPECT_HAS(too_long.out, "(the turn was dropped");
  const CliRun bad_effort = run("chat" + model + " --reasoning-effort huge", turns);
  EXPECT_EQ(bad_effort.code, 2);
  EXPECT_HAS(bad_effort.out, "reasoning effort 'huge'");
  // generate --chat renders the chat prompt (BOS, roles, the assistant prefix) around the text.
  const CliRun g = run("generate" + model + " --prompt 'Hello there' --chat --no-thinking --max-tokens 4 --seed 2");
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_EQ(g.out.find("[reasoning]"), std::string::npos) << g.out;
  EXPECT_HAS(g.out, "prompt 7 tokens");  // BOS, <｜User｜>, 3 text tokens, <｜Assistant｜>, </think>
  // The same commands on a checkpoint in the official layout with DeepSeek's tokenizer.
  const std::string fixture = " --model " + (testing::data_dir() / "v41-tiny-a/checkpoint").string();
  const CliRun official = run("chat" + fixture + " --max-tokens 3 --seed 1", turns);
  EXPECT_EQ(official.code, 0) << official.out;
  EXPECT_HAS(official.out, "generated 3 tokens");
}

TEST(Cli, TokenizeAndDetokenizeRoundTrip) {
  const std::string tok = (testing::data_dir() / "tokenizer/tokenizer.json").string();
  testing::TempDir dir;
  std::ofstream(dir.path() / "in.jsonl") << "{\"text\": \"Hello, world!\"}\n{\"text\": \"<｜User｜>2026\"}\n";
  const CliRun enc = run("tokenize --tokenizer " + tok + " --input " + (dir.path() / "in.jsonl").string());
  ASSERT_EQ(enc.code, 0) << enc.out;
  EXPECT_EQ(std::count(enc.out.begin(), enc.out.end(), '\n'), 2);
  std::ofstream(dir.path() / "ids.jsonl") << enc.out;
  const CliRun dec = run("detokenize --tokenizer " + tok + " --input " + (dir.path() / "ids.jsonl").string());
  ASSERT_EQ(dec.code, 0) << dec.out;
  EXPECT_EQ(dec.out, "{\"text\":\"Hello, world!\"}\n{\"text\":\"<｜User｜>2026\"}\n");
  const CliRun one = run("tokenize --tokenizer " + tok + " --text 'Hello, world!'");
  EXPECT_EQ(one.out, enc.out.substr(0, enc.out.find('\n') + 1));
  std::ofstream(dir.path() / "bad.jsonl") << "{\"ids\": [1, -5]}\n";
  const CliRun bad = run("detokenize --tokenizer " + tok + " --input " + (dir.path() / "bad.jsonl").string());
  EXPECT_EQ(bad.code, 2);
  EXPECT_HAS(bad.out, "bad.jsonl:1: -5 is not a token id");
}

// train-tokenizer: the merges asked for (words cut by the tokenizer's own pre-tokenizer: "'s" and
// "-b" pieces as encode cuts them), a tokenizer that tokenize and detokenize take back to the
// text, fewer merges where no pair is left, and named errors.
TEST(Cli, TrainTokenizerLearnsMergesThatRoundTrip) {
  testing::TempDir dir;
  const std::string text = (dir.path() / "text.txt").string(), out = (dir.path() / "tokenizer.json").string();
  std::ofstream(text) << "The river's stone-built bridge, the river's quiet light: the bridge over the river.\n";
  const CliRun trained = run("train-tokenizer --text " + text + " --merges 20 --out " + out);
  ASSERT_EQ(trained.code, 0) << trained.out;
  EXPECT_HAS(trained.out, "20 merges learned");
  const CliRun enc = run("tokenize --tokenizer " + out + " --text \"the river's bridge\"");
  ASSERT_EQ(enc.code, 0) << enc.out;
  const Json ids = *parse_json(enc.out, "ids");
  EXPECT_LT(ids["ids"].size(), 18u) << enc.out;  // fewer tokens than bytes: the merges apply
  std::ofstream(dir.path() / "ids.jsonl") << enc.out;
  const CliRun dec = run("detokenize --tokenizer " + out + " --input " + (dir.path() / "ids.jsonl").string());
  EXPECT_EQ(dec.out, "{\"text\":\"the river's bridge\"}\n");

  const CliRun all = run("train-tokenizer --text " + text + " --merges 100000 --out " + out);
  ASSERT_EQ(all.code, 0) << all.out;
  EXPECT_HAS(all.out, "(no pair left to merge)");
  const CliRun missing = run("train-tokenizer --text " + text + ".none --out " + out);
  EXPECT_NE(missing.code, 0);
  EXPECT_HAS(missing.out, "text.txt.none: cannot open");
  const CliRun zero = run("train-tokenizer --text " + text + " --merges 0 --out " + out);
  EXPECT_NE(zero.code, 0);
  EXPECT_HAS(zero.out, "--merges 0");
}

// render-chat and parse-completion: every public golden case of the official encoder and parser,
// one output line per case in order.
std::vector<Json> lines_of(const std::string& text) {
  std::vector<Json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(*parse_json(line, "output line"));
  return out;
}

TEST(Cli, RenderChatAndParseCompletionGiveEveryPublicCase) {
  const auto dir = testing::data_dir() / "chat-encoding";
  for (const auto& [command, file, key] : {std::tuple{"render-chat", "public.jsonl", "prompt"},
                                           std::tuple{"parse-completion", "parse-public.jsonl", "parsed"}}) {
    const CliRun r = run(std::string(command) + " --input " + (dir / file).string());
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<Json> got = lines_of(r.out);
    std::ifstream in(dir / file);
    size_t n = 0;
    for (std::string line; std::getline(in, line); ++n) {
      const Json want = *parse_json(line, file);
      ASSERT_LT(n, got.size()) << command;
      if (want[key].is_null()) {
        EXPECT_TRUE(got[n].contains("error")) << want["id"] << ": " << got[n].dump();
      } else {
        EXPECT_EQ(got[n][key], want[key]) << want["id"];
      }
    }
    EXPECT_EQ(got.size(), n) << command;
  }
}

}  // namespace
}  // namespace dsinfer
