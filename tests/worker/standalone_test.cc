// Runs the moetier-worker binary the way outside checks do.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine_run.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gguf_edit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/architectures.h"
#include "reference/reference_engine.h"
#include "sampling/sampler.h"
#include "support/subprocess.h"
#include "vectors.h"

namespace moetier {
namespace {

using ::testing::AllOf;
using testing::EditableGguf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFloats;
using testing::ReadIds;
using testing::TempPath;
using testing::TestDataPath;

const char kWorker[] = MOETIER_BINARY_DIR "/worker/moetier-worker";

using Result = testing::ProgramResult;

Result RunWorker(const std::vector<std::string>& args) {
  return testing::RunProgram(kWorker, args);
}

// A one-line error message: exactly one newline, at the end.
::testing::AssertionResult IsOneLine(const std::string& text) {
  if (!text.empty() && text.back() == '\n' && text.find('\n') == text.size() - 1) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "not one line: \"" << text << "\"";
}

const std::string& TinyModel() {
  static const std::string path = TestDataPath("vectors/tiny-f32.gguf");
  return path;
}

TEST(WorkerStandaloneTest, LogitsOutMatchesTheLibrary) {
  const std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/tiny-f32.ids"));
  const std::string out = TempPath("logits.f32");
  const Result r = RunWorker({"--standalone", "--model", TinyModel(), "--backend", "reference",
                              "--tokens", absl::StrJoin(ids, ","), "--logits-out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  const std::vector<float> file = ReadFloats(out);
  std::remove(out.c_str());
  ASSERT_EQ(file.size(), ids.size() * 512u);  // exactly the rows, nothing else

  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(TinyModel());
  ASSERT_TRUE(gguf.ok());
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok());
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref = ReferenceEngine::Create(*model, 64);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(file, testing::RunNewSequence(**ref, ids));
}

TEST(WorkerStandaloneTest, LogitsInChunksEqualOneCall) {
  // Longer than the tool's internal chunk of 32 rows.
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % 512);
  const std::string out = TempPath("logits.f32");
  const Result r = RunWorker({"--standalone", "--model=" + TinyModel(), "--backend=reference",
                              "--tokens=" + absl::StrJoin(ids, ","), "--logits-out=" + out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> file = ReadFloats(out);
  std::remove(out.c_str());

  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(TinyModel());
  ASSERT_TRUE(gguf.ok());
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok());
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref = ReferenceEngine::Create(*model, 64);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(file, testing::RunNewSequence(**ref, ids));
}

TEST(WorkerStandaloneTest, TokenizeMatchesLlamaCpp) {
  // From tests/data/vectors/tiny-f32.tokenize.json.
  Result r = RunWorker({"--standalone", "--model", TinyModel(), "--tokenize", "Hello, world!"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "72,101,325,44,413,33\n");
  r = RunWorker({"--standalone", "--model", TinyModel(), "--tokenize",
                 "<|im_start|>user\nhello<|im_end|>\n"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "510,321,258,10,257,325,511,10\n");
}

// Greedy generation through the tool equals the library's greedy tokens.
TEST(WorkerStandaloneTest, GreedyGenerationMatchesTheLibrary) {
  const std::string prompt = "Hello, world!";
  const int n = 12;
  const Result r = RunWorker({"--standalone", "--model", TinyModel(), "--backend", "reference",
                              "--prompt", prompt, "-n", std::to_string(n), "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(TinyModel());
  ASSERT_TRUE(gguf.ok());
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok());
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromGgufMetadata((*gguf)->metadata());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref = ReferenceEngine::Create(*model, 64);
  ASSERT_TRUE(ref.ok());
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(prompt, true, true);
  ASSERT_TRUE(ids.ok());
  std::vector<float> logits(512);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = (*ref)->NewSequence();
  ASSERT_TRUE(seq.ok()) << seq.status();
  ASSERT_TRUE((*ref)->Forward(**seq, *ids, LogitRows::kLast, logits.data()).ok());
  std::vector<int32_t> generated;
  for (int i = 0; i < n; ++i) {
    const int32_t t =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tokenizer->IsEndOfGeneration(t)) break;
    generated.push_back(t);
    const int32_t one[1] = {t};
    ASSERT_TRUE((*ref)->Forward(**seq, one, LogitRows::kLast, logits.data()).ok());
  }
  absl::StatusOr<std::string> text = tokenizer->Detokenize(generated, false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(r.out, *text + "\n");
}

TEST(WorkerStandaloneTest, SameSeedSameText) {
  const std::vector<std::string> args = {
      "--standalone", "--model",     TinyModel(), "--backend", "reference",
      "--prompt",     "The year is", "-n",        "16",        "--temp",
      "1.2",          "--top-k",     "0",         "--top-p",   "1",
      "--min-p",      "0",           "--seed",    "7"};
  const Result a = RunWorker(args);
  const Result b = RunWorker(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
}

TEST(WorkerStandaloneTest, ChatModeRuns) {
  const Result r = RunWorker({"--standalone", "--model", TinyModel(), "--backend", "reference",
                              "--prompt", "hello", "--chat", "-n", "4", "--temp", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(WorkerStandaloneTest, HelpExplainsEveryFlag) {
  const Result r = RunWorker({"--help"});
  ASSERT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--standalone", "--model", "--tokens", "--logits-out", "--tokenize", "--prompt", "-n",
        "--chat", "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n",
        "--seed", "--backend", "--threads", "--ctx", "--ubatch-size", "--activations",
        "--huge-pages", "--expert-cache-mib", "--miss-policy", "--prefetch", "--cache-policy", "--n-cpu-moe", "--check-model", "--help"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

TEST(WorkerStandaloneTest, WithoutStandaloneNamesTheDaemon) {
  const Result r = RunWorker({"--model", TinyModel()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, HasSubstr("moetierd"));
}

TEST(WorkerStandaloneTest, UsageErrorsAreOneLine) {
  struct Case {
    std::vector<std::string> args;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      {{"--standalone", "--model", TinyModel(), "--bogus", "1"}, "--bogus"},
      {{"--standalone", "--model", TinyModel(), "--tokenize", "x", "--ctx", "many"}, "many"},
      {{"--standalone", "--model", TinyModel(), "--prompt", "x", "--temp", "hot"}, "--temp"},
      {{"--standalone", "--model", TinyModel(), "--tokens", "1,x", "--logits-out", "o"}, "'x'"},
      {{"--standalone", "--model", TinyModel(), "--tokens", "1,2"}, "--logits-out"},
      {{"--standalone", "--model", TinyModel()}, "--prompt"},
      {{"--standalone", "--tokenize", "x"}, "--model"},
      {{"--standalone", "--model", TinyModel(), "--backend", "gpu", "--tokenize", "x"}, "gpu"},
      {{"--standalone", "--model", TinyModel(), "--tokenize", "a", "--prompt", "b"}, "only one"},
      {{"--standalone", "--model", TinyModel(), "--huge-pages", "yes", "--tokenize", "x"}, "'yes'"},
      {{"--standalone", "--model", TinyModel(), "--expert-cache-mib", "lots", "--tokenize", "x"},
       "'lots'"},
      {{"--standalone", "--model", TinyModel(), "--expert-cache-mib", "150%", "--tokenize", "x"},
       "above 100%"},
      {{"--standalone", "--model", TinyModel(), "--miss-policy", "gpu", "--tokenize", "x"},
       "copy, cpu or auto"},
      {{"--standalone", "--model", TinyModel(), "--prefetch", "maybe", "--tokenize", "x"},
       "'maybe'"},
      {{"--standalone", "--model", TinyModel(), "--cache-policy", "fifo", "--tokenize", "x"},
       "fifo"},
      {{"--standalone", "--model", TinyModel(), "--n-cpu-moe", "-1", "--tokenize", "x"},
       "--n-cpu-moe"},
      {{"--standalone", "--model", TinyModel(), "--backend", "reference", "--expert-cache-mib",
        "50%", "--prompt", "x"},
       "reads every weight itself"},
      {{"--standalone", "--model", TinyModel(), "--backend", "reference", "--device", "cuda:0",
        "--prompt", "x"},
       "drop --device or the backend"},
      {{"--check-model", TinyModel(), "--standalone"}, "--check-model FILE takes no other flag"},
      {{"--check-model="}, "the path is empty"},
      {{"--standalone", "--model"}, "needs a value"},
      {{"--standalone", "stray"}, "stray"},
      // The sampling flags are checked here, once, before the model is read.
      {{"--standalone", "--model", TinyModel(), "--prompt", "x", "--top-p", "1.5"},
       "flag --top-p is 1.5; it must be in [0, 1]"},
      {{"--standalone", "--model", TinyModel(), "--prompt", "x", "--temp", "-1"},
       "flag --temp is -1; it must be finite and >= 0"},
      {{"--standalone", "--model", TinyModel(), "--prompt", "x", "--top-k", "-2"},
       "flag --top-k is -2; it must be >= 0"},
      {{"--standalone", "--model", TinyModel(), "--prompt", "x", "--min-p", "1.01"},
       "flag --min-p is 1.01; it must be in [0, 1]"},
      {{"--standalone", "--model", TinyModel(), "--prompt", "x", "--repeat-penalty", "0"},
       "flag --repeat-penalty is 0; it must be finite and > 0"},
      {{"--standalone", "--model", TinyModel(), "--prompt", "x", "--repeat-last-n", "2000000"},
       "flag --repeat-last-n is 2000000; it must be in 0..1048576"},
      // Even with a model that does not exist: the flags are refused first.
      {{"--standalone", "--model", TempPath("no-such-model.gguf"), "--prompt", "x", "--top-p",
        "-0.5"},
       "flag --top-p is -0.5"},
  };
  for (const Case& c : cases) {
    const Result r = RunWorker(c.args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(c.args, " ");
    EXPECT_TRUE(IsOneLine(r.err)) << absl::StrJoin(c.args, " ");
    EXPECT_THAT(r.err, HasSubstr(c.mentions)) << absl::StrJoin(c.args, " ");
  }
}

TEST(WorkerStandaloneTest, RuntimeErrorsAreOneLine) {
  const std::string missing = TempPath("no-such-model.gguf");
  Result r = RunWorker({"--standalone", "--model", missing, "--tokenize", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, HasSubstr("no-such-model.gguf"));

  r = RunWorker({"--standalone", "--model", TinyModel(), "--backend", "reference", "--tokens",
                 "1,512", "--logits-out", TempPath("never.f32")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, HasSubstr("512"));

  r = RunWorker({"--standalone", "--model", TinyModel(), "--backend", "reference", "--tokens",
                 "1,2", "--ctx", "1", "--logits-out", TempPath("never.f32")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, HasSubstr("context"));
}

class WorkerEditedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<EditableGguf> g = EditableGguf::Read(TinyModel());
    ASSERT_TRUE(g.ok()) << g.status();
    gguf_ = *std::move(g);
    path_ = TempPath("edited.gguf");
  }
  void TearDown() override { std::remove(path_.c_str()); }
  // blk.1.ffn_up_exps.weight becomes Q8_1, a type without a codec.
  void WriteWithUpExpertsUndecodable() {
    testing::EditableTensor* t = gguf_.Find("blk.1.ffn_up_exps.weight");
    ASSERT_NE(t, nullptr);
    t->type = TensorType::kQ8_1;  // 32 elements in 36 bytes, an activation type
    t->data.assign(32 * 8 * 2 * 36, 0);
    ASSERT_TRUE(gguf_.Write(path_).ok());
  }
  EditableGguf gguf_;
  std::string path_;
};

TEST_F(WorkerEditedModelTest, WrongArchitecture) {
  gguf_.Set("general.architecture", GgufValue::String("mixtral"));
  ASSERT_TRUE(gguf_.Write(path_).ok());
  const Result r = RunWorker({"--standalone", "--model", path_, "--backend", "reference",
                              "--tokens", "1,2", "--logits-out", TempPath("never.f32")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, AllOf(HasSubstr("mixtral"), HasSubstr("architecture")));
}

TEST_F(WorkerEditedModelTest, UnsupportedTensorType) {
  ASSERT_NO_FATAL_FAILURE(WriteWithUpExpertsUndecodable());
  const Result r = RunWorker({"--standalone", "--model", path_, "--tokenize", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, AllOf(HasSubstr("blk.1.ffn_up_exps.weight"), HasSubstr("Q8_1")));
}

TEST(WorkerStandaloneTest, CheckModelIsSilentForAServableFile) {
  for (const char* file : {"vectors/tiny-f32.gguf", "vectors/small-q4_k_m.gguf"}) {
    const Result r = RunWorker({"--check-model", TestDataPath(file)});
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.err;
    EXPECT_EQ(r.out, "") << file;
    EXPECT_EQ(r.err, "") << file;
  }
}

TEST_F(WorkerEditedModelTest, CheckModelRefusesUndecodableTypesWithStatusTwo) {
  ASSERT_NO_FATAL_FAILURE(WriteWithUpExpertsUndecodable());
  const Result r = RunWorker({"--check-model=" + path_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, AllOf(HasSubstr("moetier-worker: error: " + path_ + ": "),
                           HasSubstr("Q8_1 (1 tensor, e.g. 'blk.1.ffn_up_exps.weight')"),
                           HasSubstr("supported types: F32, F16"), HasSubstr("llama-quantize")));
}

TEST_F(WorkerEditedModelTest, CheckModelWithADeviceAsksThatDevicesEngine) {
  testing::EditableTensor* t = gguf_.Find("blk.1.ffn_up_exps.weight");
  ASSERT_NE(t, nullptr);
  t->type = TensorType::kQ4_1;  // the cpu engine computes it, the CUDA engine does not
  t->data.assign(32 * 8 * 2 * 20, 0);
  ASSERT_TRUE(gguf_.Write(path_).ok());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--check-model", path_},
        std::vector<std::string>{"--check-model", path_, "--device", "cpu"}}) {
    const Result r = RunWorker(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
  }
  Result r = RunWorker({"--check-model=" + path_, "--device=cuda:0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, HasSubstr(path_ + " on cuda:0: "));
  EXPECT_THAT(
      r.err, ::testing::AnyOf(HasSubstr("blk.1.ffn_up_exps.weight is Q4_1, which the CUDA backend"),
                              HasSubstr("built without CUDA")));
  r = RunWorker({"--check-model", path_, "--threads", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--check-model FILE takes no other flag than --device"));
}

TEST_F(WorkerEditedModelTest, CheckModelRefusesAnUnknownArchitectureWithStatusTwo) {
  gguf_.Set("general.architecture", GgufValue::String("qwen9moe"));
  ASSERT_TRUE(gguf_.Write(path_).ok());
  Result r = RunWorker({"--check-model", path_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, AllOf(HasSubstr("'qwen9moe'"), HasSubstr("qwen3moe ("), HasSubstr("olmoe (")));

  r = RunWorker({"--check-model", TempPath("no-such-model.gguf")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(IsOneLine(r.err));
  EXPECT_THAT(r.err, HasSubstr("no-such-model.gguf"));
}

// Generation stops at an end-of-generation token: make the token greedy
// decoding picks first the model's eos.
TEST_F(WorkerEditedModelTest, StopsAtEndOfGeneration) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(TinyModel());
  ASSERT_TRUE(gguf.ok());
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok());
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromGgufMetadata((*gguf)->metadata());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::unique_ptr<ReferenceEngine>> ref = ReferenceEngine::Create(*model, 64);
  ASSERT_TRUE(ref.ok());
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode("Hello, world!", true, true);
  ASSERT_TRUE(ids.ok());
  std::vector<float> logits(512);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = (*ref)->NewSequence();
  ASSERT_TRUE(seq.ok()) << seq.status();
  ASSERT_TRUE((*ref)->Forward(**seq, *ids, LogitRows::kLast, logits.data()).ok());
  const int32_t first =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  ASSERT_FALSE(tokenizer->IsEndOfGeneration(first));

  gguf_.Set("tokenizer.ggml.eos_token_id", GgufValue::Uint32(static_cast<uint32_t>(first)));
  ASSERT_TRUE(gguf_.Write(path_).ok());
  const Result r = RunWorker({"--standalone", "--model", path_, "--backend", "reference",
                              "--prompt", "Hello, world!", "-n", "10", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "\n");
  EXPECT_THAT(r.err, HasSubstr("generated: 0 tokens"));
  EXPECT_THAT(r.err, HasSubstr("end of generation"));
}

// The default backend is wired in and agrees with the reference.
TEST(WorkerStandaloneTest, CpuBackendIsTheDefault) {
  const std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/tiny-f32.ids"));
  const std::string cpu_out = TempPath("cpu.f32");
  const std::string ref_out = TempPath("ref.f32");
  Result r = RunWorker({"--standalone", "--model", TinyModel(), "--threads", "2", "--tokens",
                        absl::StrJoin(ids, ","), "--logits-out", cpu_out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunWorker({"--standalone", "--model", TinyModel(), "--backend", "reference", "--tokens",
                 absl::StrJoin(ids, ","), "--logits-out", ref_out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> cpu = ReadFloats(cpu_out);
  const std::vector<float> ref = ReadFloats(ref_out);
  std::remove(cpu_out.c_str());
  std::remove(ref_out.c_str());
  ASSERT_EQ(cpu.size(), ids.size() * 512u);
  ASSERT_EQ(ref.size(), cpu.size());
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    const testing::RowError e = testing::CompareRow(&cpu[pos * 512], &ref[pos * 512], 512);
    EXPECT_LE(e.max_abs, 1e-3 * e.range) << "position " << pos;
  }
}

double MeanKl(const std::vector<float>& actual, const std::vector<float>& expected, size_t n) {
  return testing::CompareLogits(actual, expected, n).mean_kl;
}

// The logits of `ids` from the standalone cpu worker, with `extra` flags.
std::vector<float> WorkerLogits(const std::string& model, const std::vector<int32_t>& ids,
                                const std::vector<std::string>& extra) {
  const std::string out = TempPath("ubatch.f32");
  std::vector<std::string> args = {"--standalone", "--model", model, "--threads", "2",
                                   "--tokens", absl::StrJoin(ids, ","), "--logits-out", out};
  args.insert(args.end(), extra.begin(), extra.end());
  const Result r = RunWorker(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<float> floats = ReadFloats(out);
  std::remove(out.c_str());
  return floats;
}

// The vector's ids, lengthened past one chunk of the delta rule (64
// positions) and two logits batches (32).
std::vector<int32_t> LongIds(const std::string& stem, int n_vocab) {
  std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/" + stem + ".ids"));
  while (ids.size() < 80) ids.push_back(static_cast<int32_t>((ids.size() * 37 + 11) % n_vocab));
  return ids;
}

// --ubatch-size 1 sends every position through the decode path (one token
// per forward call; for Gated DeltaNet layers the token recurrence instead
// of the chunked delta rule): on F32 weights the same logits as whole
// batches to float rounding; on quantized weights, where a rounding
// difference can move an 8-bit activation by one step, the same
// distributions far within the quantization's own error; the same greedy
// text either way.
TEST(WorkerStandaloneTest, UbatchSizeOneAgreesWithWholeBatches) {
  const std::string f32_model = TestDataPath("vectors/qwen35moe-tiny-f32.gguf");
  const std::vector<int32_t> f32_ids = LongIds("qwen35moe-tiny-f32", 512);
  const std::vector<float> batched = WorkerLogits(f32_model, f32_ids, {});
  ASSERT_EQ(batched.size(), f32_ids.size() * 512u);
  for (const char* ubatch : {"1", "7"}) {
    SCOPED_TRACE(absl::StrCat("--ubatch-size ", ubatch));
    const std::vector<float> split = WorkerLogits(f32_model, f32_ids, {"--ubatch-size", ubatch});
    ASSERT_EQ(split.size(), batched.size());
    EXPECT_NE(split, batched) << "another path rounds differently somewhere";
    for (size_t pos = 0; pos < f32_ids.size(); ++pos) {
      const testing::RowError e = testing::CompareRow(&split[pos * 512], &batched[pos * 512], 512);
      EXPECT_LE(e.max_abs, 1e-5 * e.range) << "position " << pos;
    }
  }

  const std::string q4_model = TestDataPath("vectors/qwen35moe-small-q4_k_m.gguf");
  const std::vector<int32_t> q4_ids = LongIds("qwen35moe-small-q4_k_m", 1024);
  const std::vector<float> q4_batched = WorkerLogits(q4_model, q4_ids, {});
  const std::vector<float> q4_one = WorkerLogits(q4_model, q4_ids, {"--ubatch-size=1"});
  ASSERT_EQ(q4_batched.size(), q4_ids.size() * 1024u);
  ASSERT_EQ(q4_one.size(), q4_batched.size());
  // The quantized engine's own mean KL from exact logits is about 1e-2.
  EXPECT_LE(MeanKl(q4_one, q4_batched, 1024), 1e-3);

  auto greedy = [&](const char* ubatch) {
    const Result r = RunWorker({"--standalone", "--model", q4_model, "--threads", "2", "--prompt",
                                "the cat sat on the mat and then the dog came by", "-n", "12",
                                "--temp", "0", "--ubatch-size", ubatch});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(greedy("1"), greedy("512"));
  const Result zero = RunWorker({"--standalone", "--model", q4_model, "--tokens", "1",
                                 "--logits-out", TempPath("x.f32"), "--ubatch-size", "0"});
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_THAT(zero.err, HasSubstr("--ubatch-size"));
}

// --activations q8x2 (the residual int8 plane) brings a quantized file's
// logits far closer to the exact ones than the default q8, which loses
// about what llama.cpp loses.
TEST(WorkerStandaloneTest, ResidualActivationsComeFarCloserToExactLogits) {
  const std::string model = TestDataPath("vectors/small-q4_k_m.gguf");
  const std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/small-q4_k_m.ids"));
  const std::vector<float> exact = ReadFloats(TestDataPath("vectors/small-q4_k_m.exact.f32"));
  const std::vector<float> q8 = WorkerLogits(model, ids, {});
  const std::vector<float> q8x2 = WorkerLogits(model, ids, {"--activations", "q8x2"});
  ASSERT_EQ(q8.size(), exact.size());
  ASSERT_EQ(q8x2.size(), exact.size());
  const double kl_q8 = MeanKl(q8, exact, 1024);
  const double kl_q8x2 = MeanKl(q8x2, exact, 1024);
  EXPECT_GT(kl_q8, 1e-4);
  EXPECT_LT(kl_q8x2, 1e-2 * kl_q8);
  const Result bad = RunWorker({"--standalone", "--model", model, "--tokens", "1",
                                "--logits-out", TempPath("x.f32"), "--activations", "q16"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--activations"));
}

// Without CUDA in the build, or without a GPU and driver, a CUDA device is
// a one-line runtime error that says so.
TEST(WorkerStandaloneTest, ACudaDeviceThatCannotWorkSaysWhy) {
  const std::string out = TempPath("cuda.f32");
  const Result r = RunWorker({"--standalone", "--model", TinyModel(), "--device", "cuda:0",
                              "--tokens", "1,2,3", "--logits-out", out});
  if (r.exit_code == 0) GTEST_SKIP() << "this machine runs CUDA; tests/cuda cover it";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("CUDA"));
}

TEST(WorkerStandaloneTest, ExpertCacheErrorsSayWhatToGive) {
  const std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/tiny-f32.ids"));
  const std::string out = TempPath("cache-error.f32");
  Result r = RunWorker({"--standalone", "--model", TinyModel(), "--miss-policy", "copy",
                        "--tokens", absl::StrJoin(ids, ","), "--logits-out", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--expert-cache-mib SIZE or --n-cpu-moe N"));
  r = RunWorker({"--standalone", "--model", TinyModel(), "--expert-cache-mib", "1%", "--tokens",
                 absl::StrJoin(ids, ","), "--logits-out", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(IsOneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("slots per layer"));
}

// The expert cache changes where experts are read from, never the numbers;
// the worker reports what the cache did.
TEST(WorkerStandaloneTest, ExpertCacheGivesIdenticalLogitsAndReportsItsCounters) {
  const std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/tiny-f32.ids"));
  std::vector<std::vector<float>> logits;
  for (const std::vector<std::string>& cache :
       {std::vector<std::string>{}, {"--expert-cache-mib", "50%", "--miss-policy", "copy"},
        {"--n-cpu-moe", "1"}}) {
    const std::string out = TempPath("cache.f32");
    std::vector<std::string> args = {"--standalone", "--model", TinyModel(), "--threads", "2",
                                     "--tokens", absl::StrJoin(ids, ","), "--logits-out", out};
    args.insert(args.end(), cache.begin(), cache.end());
    const Result r = RunWorker(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (!cache.empty()) {
      EXPECT_THAT(r.err, HasSubstr("misses"));
    }
    logits.push_back(ReadFloats(out));
    std::remove(out.c_str());
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(logits[0], logits[2]);
}

// Reading the weights from huge pages or from the file mapping changes
// nothing but speed.
TEST(WorkerStandaloneTest, HugePagesOnAndOffGiveIdenticalLogits) {
  const std::vector<int32_t> ids = ReadIds(TestDataPath("vectors/tiny-f32.ids"));
  std::vector<std::vector<float>> logits;
  for (const char* mode : {"off", "on"}) {
    const std::string out = TempPath(std::string("huge-") + mode + ".f32");
    const Result r = RunWorker({"--standalone", "--model", TinyModel(), "--threads", "2",
                                "--huge-pages", mode, "--tokens", absl::StrJoin(ids, ","),
                                "--logits-out", out});
    if (r.exit_code != 0 && std::string_view(mode) == "on" &&
        r.err.find("transparent huge pages") != std::string::npos) {
      GTEST_SKIP() << r.err;
    }
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
    logits.push_back(ReadFloats(out));
    std::remove(out.c_str());
  }
  ASSERT_EQ(logits[0].size(), ids.size() * 512u);
  EXPECT_EQ(logits[0], logits[1]);
}

}  // namespace
}  // namespace moetier
