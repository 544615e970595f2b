// Routing traces at the CPU engine's routing hook: the recorder writes the
// engine's own routing, token by token in sequence order, without changing
// any result; the replayer makes the engine use exactly the trace's experts
// and, replaying the engine's own routing, gives its logits bit for bit.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache/routing_trace.h"
#include "engine/cpu_engine.h"
#include "engine/routing_trace_hooks.h"
#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/architectures.h"

namespace moetier {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string DataPath(const std::string& name) {
  return std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + name;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/moetier_trace_hooks_", getpid(), "_",
                      name);
}

std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  std::string part;
  while (std::getline(in, part, ',')) ids.push_back(std::stoi(part));
  return ids;
}

struct Tiny {
  std::unique_ptr<GgufModel> gguf;
  Model model;
  std::vector<int32_t> ids;
  const ModelHparams& hp() const { return model.hparams; }
};

// tiny-f32: 4 layers, 8 experts, top-2, vocab 512.
const Tiny& TinyModel() {
  static const Tiny* tiny = [] {
    auto* t = new Tiny;
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf = GgufModel::Open(DataPath("tiny-f32.gguf"));
    EXPECT_TRUE(gguf.ok()) << gguf.status();
    t->gguf = *std::move(gguf);
    absl::StatusOr<Model> model = LoadModel(*t->gguf);
    EXPECT_TRUE(model.ok()) << model.status();
    t->model = *std::move(model);
    t->ids = ReadIds(DataPath("tiny-f32.ids"));
    return t;
  }();
  return *tiny;
}

std::unique_ptr<CpuEngine> MakeEngine(int max_batch, RoutingObserver* observer = nullptr,
                                        RoutingOverride* override = nullptr) {
  CpuEngineConfig config;
  config.max_ctx = 64;
  config.n_threads = 2;
  config.max_batch = max_batch;
  config.routing_observer = observer;
  config.routing_override = override;
  absl::StatusOr<std::unique_ptr<CpuEngine>> engine =
      CpuEngine::Create(TinyModel().model, config);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

// All logits rows of `ids`, in one Forward call (batched by the engine's
// max_batch) or one token per call (decoding).
std::vector<float> RunTokens(ForwardEngine& engine, const std::vector<int32_t>& ids,
                             bool one_by_one) {
  const size_t n_vocab = static_cast<size_t>(engine.n_vocab());
  std::vector<float> logits(ids.size() * n_vocab);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine.NewSequence();
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return logits;
  if (!one_by_one) {
    const absl::Status s = engine.Forward(**seq, ids, LogitRows::kAll, logits.data());
    EXPECT_TRUE(s.ok()) << s;
    return logits;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t one[1] = {ids[i]};
    const absl::Status s =
        engine.Forward(**seq, one, LogitRows::kAll, logits.data() + i * n_vocab);
    EXPECT_TRUE(s.ok()) << s;
  }
  return logits;
}

// Per (position, layer), the experts and weights the engine's hooks saw;
// forwards to another observer (the recorder) as well.
class Capture final : public RoutingObserver, public RoutingOverride {
 public:
  explicit Capture(RoutingObserver* next = nullptr) : next_(next) {}

  // As an observer: the routing the engine uses.
  absl::Status OnRouting(const RoutingBatch& b) override {
    for (int t = 0; t < b.n_tokens; ++t) {
      std::vector<int32_t>& ids = Slot(used_ids, b.pos0 + t, b.layer, b.n_layer);
      std::vector<float>& w = Slot(used_weights, b.pos0 + t, b.layer, b.n_layer);
      ids.assign(b.experts.begin() + t * b.top_k, b.experts.begin() + (t + 1) * b.top_k);
      w.assign(b.weights.begin() + t * b.top_k, b.weights.begin() + (t + 1) * b.top_k);
    }
    return next_ != nullptr ? next_->OnRouting(b) : absl::OkStatus();
  }
  // As an override that changes nothing: the router's own choice.
  absl::Status Override(const RoutingBatch& b, std::span<int32_t> experts) override {
    for (int t = 0; t < b.n_tokens; ++t) {
      Slot(router_ids, b.pos0 + t, b.layer, b.n_layer)
          .assign(experts.begin() + t * b.top_k, experts.begin() + (t + 1) * b.top_k);
    }
    return absl::OkStatus();
  }

  // [position][layer]
  std::vector<std::vector<std::vector<int32_t>>> used_ids, router_ids;
  std::vector<std::vector<std::vector<float>>> used_weights;

 private:
  template <typename T>
  static std::vector<T>& Slot(std::vector<std::vector<std::vector<T>>>& v, int pos, int layer,
                              int n_layer) {
    if (v.size() <= static_cast<size_t>(pos)) v.resize(pos + 1);
    if (v[pos].size() < static_cast<size_t>(n_layer)) v[pos].resize(n_layer);
    return v[pos][layer];
  }

  RoutingObserver* next_;
};

RoutingTrace ReadTrace(const std::string& path) {
  absl::StatusOr<RoutingTrace> trace = ReadRoutingTrace(path);
  EXPECT_TRUE(trace.ok()) << trace.status();
  return trace.ok() ? *std::move(trace) : RoutingTrace{};
}

// Records `ids` through an engine of `max_batch`, one call or token by
// token, and checks the file against what the engine's hooks saw.
RoutingTrace RecordAndCheck(const std::string& name, int max_batch, bool one_by_one) {
  const Tiny& tiny = TinyModel();
  const ModelHparams& hp = tiny.hp();
  const std::string path = TempPath(name);
  absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
      RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  EXPECT_TRUE(recorder.ok()) << recorder.status();
  if (!recorder.ok()) return {};
  Capture capture(recorder->get());
  std::unique_ptr<CpuEngine> engine = MakeEngine(max_batch, &capture, &capture);
  RunTokens(*engine, tiny.ids, one_by_one);
  EXPECT_TRUE((*recorder)->Close().ok());
  EXPECT_EQ((*recorder)->tokens_written(), tiny.ids.size());
  RoutingTrace trace = ReadTrace(path);
  std::remove(path.c_str());

  EXPECT_EQ(trace.n_layer, static_cast<uint32_t>(hp.n_layer));
  EXPECT_EQ(trace.n_expert, static_cast<uint32_t>(hp.n_expert));
  EXPECT_EQ(trace.top_k, static_cast<uint32_t>(hp.n_expert_used));
  EXPECT_TRUE(trace.has_weights());
  EXPECT_EQ(trace.n_token(), tiny.ids.size());
  if (trace.n_token() != tiny.ids.size()) return trace;
  for (size_t t = 0; t < trace.n_token(); ++t) {
    for (int l = 0; l < hp.n_layer; ++l) {
      const absl::Span<const uint32_t> ids = trace.Experts(t, l);
      const absl::Span<const float> weights = trace.Weights(t, l);
      const std::vector<int32_t>& router = capture.router_ids[t][l];
      const std::vector<float>& used = capture.used_weights[t][l];
      float sum = 0.0f;
      for (int j = 0; j < hp.n_expert_used; ++j) {
        // The file holds the router's own choice in its order, and the
        // weights the engine mixed with (printed exactly).
        EXPECT_EQ(static_cast<int32_t>(ids[j]), router[j]) << "token " << t << " layer " << l;
        EXPECT_EQ(weights[j], used[j]) << "token " << t << " layer " << l;
        if (j > 0) {
          EXPECT_GE(weights[j - 1], weights[j]);  // highest score first
        }
        sum += weights[j];
      }
      EXPECT_NEAR(sum, 1.0f, 1e-6f);
    }
  }
  return trace;
}

TEST(RoutingTraceRecorderTest, PromptBatchesRecordTheEnginesRoutingInTokenOrder) {
  // 24 tokens in batches of 5: four full batches and a partial one.
  const RoutingTrace batched = RecordAndCheck("batched.trace", 5, false);
  const RoutingTrace whole = RecordAndCheck("whole.trace", 256, false);
  EXPECT_EQ(batched.experts, whole.experts);
  EXPECT_EQ(batched.weights, whole.weights);
}

TEST(RoutingTraceRecorderTest, DecodingRecordsTheSameAsAPrompt) {
  const RoutingTrace decoded = RecordAndCheck("decoded.trace", 256, true);
  const RoutingTrace whole = RecordAndCheck("whole2.trace", 256, false);
  EXPECT_EQ(decoded.experts, whole.experts);
  EXPECT_EQ(decoded.weights, whole.weights);
  // A tiny random model still routes to more than one pair of experts.
  std::vector<bool> seen(TinyModel().hp().n_expert, false);
  for (uint32_t e : whole.experts) seen[e] = true;
  EXPECT_GE(std::count(seen.begin(), seen.end(), true), 4);
}

TEST(RoutingTraceRecorderTest, SuccessiveCallsAppendToTheOneFile) {
  const Tiny& tiny = TinyModel();
  const ModelHparams& hp = tiny.hp();
  const std::string path = TempPath("appended.trace");
  absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
      RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(recorder.ok()) << recorder.status();
  std::unique_ptr<CpuEngine> engine = MakeEngine(7, recorder->get());
  RunTokens(*engine, tiny.ids, false);  // one request
  RunTokens(*engine, tiny.ids, true);   // another, from position 0 again
  ASSERT_TRUE((*recorder)->Close().ok());
  const RoutingTrace trace = ReadTrace(path);
  std::remove(path.c_str());
  ASSERT_EQ(trace.n_token(), 2 * tiny.ids.size());
  const size_t half = trace.experts.size() / 2;
  EXPECT_TRUE(std::equal(trace.experts.begin(), trace.experts.begin() + half,
                         trace.experts.begin() + half));
}

// A worker may be killed at any time; what it recorded so far must be on disk.
TEST(RoutingTraceRecorderTest, EveryForwardCallReachesTheFileBeforeClose) {
  const Tiny& tiny = TinyModel();
  const ModelHparams& hp = tiny.hp();
  const std::string path = TempPath("flushed.trace");
  absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
      RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(recorder.ok()) << recorder.status();
  std::unique_ptr<CpuEngine> engine = MakeEngine(7, recorder->get());
  RunTokens(*engine, tiny.ids, true);
  const RoutingTrace before_close = ReadTrace(path);  // the recorder is still open
  EXPECT_EQ(before_close.n_token(), tiny.ids.size());
  ASSERT_TRUE((*recorder)->Close().ok());
  std::remove(path.c_str());
}

TEST(RoutingTraceRecorderTest, RecordingLeavesLogitsBitIdentical) {
  const Tiny& tiny = TinyModel();
  const ModelHparams& hp = tiny.hp();
  for (const bool one_by_one : {false, true}) {
    std::unique_ptr<CpuEngine> plain = MakeEngine(5);
    const std::vector<float> expected = RunTokens(*plain, tiny.ids, one_by_one);
    const std::string path = TempPath("logits.trace");
    absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
        RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
    ASSERT_TRUE(recorder.ok()) << recorder.status();
    std::unique_ptr<CpuEngine> recording = MakeEngine(5, recorder->get());
    EXPECT_EQ(RunTokens(*recording, tiny.ids, one_by_one), expected);
    std::remove(path.c_str());
  }
}

// glm4moe's first layer is dense: it never routes, the trace holds
// experts 0..k-1 with weight 0 for it, and replaying the trace on the same
// model gives the same logits.
TEST(RoutingTraceRecorderTest, ALayerWithoutExpertsHoldsAPlaceholder) {
  absl::StatusOr<std::unique_ptr<GgufModel>> gguf =
      GgufModel::Open(DataPath("glm4moe-tiny-f32.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<Model> model = LoadModel(**gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelHparams& hp = model->hparams;
  const std::vector<bool> routed = RoutedLayers(model->weights);
  ASSERT_EQ(routed, (std::vector<bool>{false, true, true}));
  const std::vector<int32_t> ids = ReadIds(DataPath("glm4moe-tiny-f32.ids"));
  auto engine = [&](RoutingObserver* observer, RoutingOverride* override) {
    CpuEngineConfig config;
    config.max_ctx = 64;
    config.n_threads = 2;
    config.max_batch = 5;
    config.routing_observer = observer;
    config.routing_override = override;
    absl::StatusOr<std::unique_ptr<CpuEngine>> e = CpuEngine::Create(*model, config);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  };
  const std::string path = TempPath("dense-first.trace");
  std::vector<float> expected;
  {
    absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
        RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used, routed);
    ASSERT_TRUE(recorder.ok()) << recorder.status();
    std::unique_ptr<CpuEngine> recording = engine(recorder->get(), nullptr);
    ASSERT_NE(recording, nullptr);
    expected = RunTokens(*recording, ids, false);
    ASSERT_TRUE((*recorder)->Close().ok());
  }
  const RoutingTrace trace = ReadTrace(path);
  ASSERT_EQ(trace.n_token(), ids.size());
  for (size_t t = 0; t < trace.n_token(); ++t) {
    EXPECT_THAT(trace.Experts(t, 0), ::testing::ElementsAre(0u, 1u)) << "token " << t;
    EXPECT_THAT(trace.Weights(t, 0), ::testing::ElementsAre(0.0f, 0.0f)) << "token " << t;
  }
  absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> replayer =
      RoutingTraceReplayer::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(replayer.ok()) << replayer.status();
  std::unique_ptr<CpuEngine> replaying = engine(nullptr, replayer->get());
  ASSERT_NE(replaying, nullptr);
  EXPECT_EQ(RunTokens(*replaying, ids, true), expected);
  std::remove(path.c_str());

  // Without the flags the recorder expects layer 0 first and refuses layer 1.
  absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> unaware =
      RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(unaware.ok()) << unaware.status();
  std::unique_ptr<CpuEngine> failing = engine(unaware->get(), nullptr);
  ASSERT_NE(failing, nullptr);
  absl::StatusOr<std::unique_ptr<Sequence>> seq = failing->NewSequence();
  ASSERT_TRUE(seq.ok());
  EXPECT_FALSE(failing->Forward(**seq, ids, LogitRows::kNone, nullptr).ok());
  std::remove(path.c_str());
}

TEST(RoutingTraceReplayerTest, ReplayingTheSameTextIsBitIdentical) {
  const Tiny& tiny = TinyModel();
  const ModelHparams& hp = tiny.hp();
  const std::string path = TempPath("same.trace");
  {
    absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
        RoutingTraceRecorder::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
    ASSERT_TRUE(recorder.ok()) << recorder.status();
    std::unique_ptr<CpuEngine> engine = MakeEngine(256, recorder->get());
    RunTokens(*engine, tiny.ids, false);
    ASSERT_TRUE((*recorder)->Close().ok());
  }
  std::unique_ptr<CpuEngine> plain = MakeEngine(256);
  for (const bool one_by_one : {false, true}) {
    const std::vector<float> expected = RunTokens(*plain, tiny.ids, one_by_one);
    // Batches of 3 walk the trace across batch boundaries.
    absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> replayer =
        RoutingTraceReplayer::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
    ASSERT_TRUE(replayer.ok()) << replayer.status();
    std::unique_ptr<CpuEngine> replaying = MakeEngine(3, nullptr, replayer->get());
    EXPECT_EQ(RunTokens(*replaying, tiny.ids, one_by_one), expected);
    // The whole trace was used once: the next token is its first again.
    EXPECT_EQ((*replayer)->next_token(), 0u);
  }
  std::remove(path.c_str());
}

// A trace of `n_token` tokens whose experts are a fixed pattern unlike the
// router's.
RoutingTrace PatternTrace(size_t n_token) {
  const ModelHparams& hp = TinyModel().hp();
  RoutingTrace trace;
  trace.name = "pattern";
  trace.n_layer = hp.n_layer;
  trace.n_expert = hp.n_expert;
  trace.top_k = hp.n_expert_used;
  for (size_t t = 0; t < n_token; ++t) {
    for (int l = 0; l < hp.n_layer; ++l) {
      for (int j = 0; j < hp.n_expert_used; ++j) {
        trace.experts.push_back(static_cast<uint32_t>((t * 3 + l * 5 + j * 2) % hp.n_expert));
      }
    }
  }
  return trace;
}

TEST(RoutingTraceReplayerTest, ADifferentTraceRoutesExactlyToItsExpertsCyclically) {
  const Tiny& tiny = TinyModel();
  const ModelHparams& hp = tiny.hp();
  const RoutingTrace pattern = PatternTrace(5);  // shorter than the 24 tokens: cycles
  const std::string path = TempPath("pattern.trace");
  ASSERT_TRUE(WriteRoutingTrace(path, pattern).ok());
  absl::StatusOr<RoutingTraceHooks> hooks = OpenRoutingTraceHooks(
      TempPath("observed.trace"), path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(hooks.ok()) << hooks.status();
  EXPECT_EQ(hooks->ReplayLabel(),
            "routing replayed from " + path + ", prefetch predicted from it at accuracy 0.80");
  Capture capture(hooks->recorder.get());
  std::unique_ptr<CpuEngine> engine = MakeEngine(4, &capture, hooks->replayer.get());
  const std::vector<float> replayed = RunTokens(*engine, tiny.ids, false);
  ASSERT_TRUE(hooks->recorder->Close().ok());
  const RoutingTrace observed = ReadTrace(TempPath("observed.trace"));
  std::remove(TempPath("observed.trace").c_str());
  std::remove(path.c_str());

  ASSERT_EQ(observed.n_token(), tiny.ids.size());
  for (size_t t = 0; t < observed.n_token(); ++t) {
    for (int l = 0; l < hp.n_layer; ++l) {
      const absl::Span<const uint32_t> want = pattern.Experts(t % pattern.n_token(), l);
      const absl::Span<const uint32_t> got = observed.Experts(t, l);
      EXPECT_EQ(std::vector<uint32_t>(got.begin(), got.end()),
                std::vector<uint32_t>(want.begin(), want.end()))
          << "token " << t << " layer " << l;
      float sum = 0.0f;
      for (float w : observed.Weights(t, l)) {
        EXPECT_GT(w, 0.0f);
        sum += w;
      }
      EXPECT_NEAR(sum, 1.0f, 1e-6f);
    }
  }
  std::unique_ptr<CpuEngine> plain = MakeEngine(4);
  EXPECT_NE(RunTokens(*plain, tiny.ids, false), replayed);
}

TEST(RoutingTraceReplayerTest, WeightsAreTheRoutersProbabilitiesOfTheTracesExperts) {
  // The router's own top-2 in the opposite order: the same two
  // probabilities, renormalized by the same sum, so in layer 0 (whose input
  // the order cannot have changed) each token's weights are the router's
  // swapped, exactly. Later layers see a residual stream summed in the
  // other order, so only nearly the same probabilities.
  const Tiny& tiny = TinyModel();
  const ModelHparams& hp = tiny.hp();
  ASSERT_EQ(hp.n_expert_used, 2);
  Capture normal;
  std::unique_ptr<CpuEngine> plain = MakeEngine(256, &normal);
  RunTokens(*plain, tiny.ids, false);
  RoutingTrace reversed;
  reversed.name = "reversed";
  reversed.n_layer = hp.n_layer;
  reversed.n_expert = hp.n_expert;
  reversed.top_k = 2;
  for (size_t t = 0; t < tiny.ids.size(); ++t) {
    for (int l = 0; l < hp.n_layer; ++l) {
      reversed.experts.push_back(normal.used_ids[t][l][1]);
      reversed.experts.push_back(normal.used_ids[t][l][0]);
    }
  }
  absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> replayer =
      RoutingTraceReplayer::FromTrace(reversed, hp.n_layer, hp.n_expert, 2);
  ASSERT_TRUE(replayer.ok()) << replayer.status();
  Capture swapped;
  std::unique_ptr<CpuEngine> engine = MakeEngine(256, &swapped, replayer->get());
  RunTokens(*engine, tiny.ids, false);
  for (size_t t = 0; t < tiny.ids.size(); ++t) {
    for (int l = 0; l < hp.n_layer; ++l) {
      EXPECT_EQ(swapped.used_ids[t][l][0], normal.used_ids[t][l][1]);
      EXPECT_EQ(swapped.used_ids[t][l][1], normal.used_ids[t][l][0]);
      if (l == 0) {
        EXPECT_EQ(swapped.used_weights[t][l][0], normal.used_weights[t][l][1]) << "token " << t;
        EXPECT_EQ(swapped.used_weights[t][l][1], normal.used_weights[t][l][0]) << "token " << t;
      } else {
        EXPECT_NEAR(swapped.used_weights[t][l][0], normal.used_weights[t][l][1], 1e-4f);
        EXPECT_NEAR(swapped.used_weights[t][l][1], normal.used_weights[t][l][0], 1e-4f);
      }
    }
  }
}

absl::Status ReplayText(const std::string& name, const std::string& text) {
  const ModelHparams& hp = TinyModel().hp();
  const std::string path = TempPath(name);
  {
    std::ofstream out(path);
    out << text;
  }
  absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> replayer =
      RoutingTraceReplayer::Create(path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  std::remove(path.c_str());
  return replayer.status();
}

// The prefetch's stand-in for the next layer's router: the trace's own
// experts of that layer, each right with the chosen probability.
TEST(RoutingTraceReplayerTest, PredictsTheNextLayerFromTheTraceAtTheChosenAccuracy) {
  RoutingTrace trace;
  trace.name = "random";
  trace.n_layer = 3;
  trace.n_expert = 64;
  trace.top_k = 4;
  uint32_t state = 99;
  for (int t = 0; t < 400; ++t) {
    for (int l = 0; l < 3; ++l) {
      std::vector<uint32_t> ids;
      while (ids.size() < 4) {
        state = state * 1664525u + 1013904223u;
        const uint32_t e = (state >> 12) % 64;
        if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
      }
      trace.experts.insert(trace.experts.end(), ids.begin(), ids.end());
    }
  }
  absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> made =
      RoutingTraceReplayer::FromTrace(trace, 3, 64, 4);
  ASSERT_TRUE(made.ok()) << made.status();
  RoutingTraceReplayer& replayer = **made;
  EXPECT_EQ(replayer.prefetch_accuracy(), RoutingTraceReplayer::kDefaultPrefetchAccuracy);
  // Fraction of the predicted experts of layer 1 that the trace's layer 1
  // holds, over the whole trace in batches of 2 tokens.
  auto overlap = [&](double accuracy) {
    replayer.SetPrefetchAccuracy(accuracy, 7);
    replayer.Rewind();
    std::vector<int32_t> routed(8), guess(8);
    size_t right = 0, all = 0;
    for (int pos = 0; pos < 400; pos += 2) {
      for (int l = 0; l < 3; ++l) {
        const RoutingBatch batch{.layer = l, .n_layer = 3, .n_expert = 64, .top_k = 4,
                                 .pos0 = pos, .n_tokens = 2, .experts = {}, .weights = {}};
        if (l == 1) {
          EXPECT_TRUE(replayer.PredictNext(batch, guess));
          for (int t = 0; t < 2; ++t) {
            const absl::Span<const uint32_t> truth = trace.Experts(pos + t, 1);
            for (int j = 0; j < 4; ++j) {
              const int32_t e = guess[t * 4 + j];
              EXPECT_TRUE(e >= 0 && e < 64);
              // Distinct within a token.
              EXPECT_EQ(std::count(guess.begin() + t * 4, guess.begin() + t * 4 + 4, e), 1);
              right += std::find(truth.begin(), truth.end(), static_cast<uint32_t>(e)) !=
                       truth.end();
              ++all;
            }
          }
        }
        EXPECT_TRUE(replayer.Override(batch, routed).ok());
      }
    }
    return static_cast<double>(right) / static_cast<double>(all);
  };
  EXPECT_EQ(overlap(1.0), 1.0);
  EXPECT_EQ(overlap(0.0), 0.0);
  EXPECT_NEAR(overlap(0.5), 0.5, 0.06);
  EXPECT_NEAR(overlap(0.8), 0.8, 0.05);
  // A batch of another shape is left to the engine's router.
  std::vector<int32_t> wrong_size(3);
  const RoutingBatch batch{.layer = 1, .n_layer = 3, .n_expert = 64, .top_k = 4,
                           .pos0 = 0, .n_tokens = 2, .experts = {}, .weights = {}};
  EXPECT_FALSE(replayer.PredictNext(batch, wrong_size));
}

TEST(RoutingTraceReplayerTest, TracesThatDoNotFitTheModelAreRejectedClearly) {
  // Three layers for a four-layer model.
  absl::Status s = ReplayText("layers.trace", "0,1;2,3;4,5\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("layers.trace"), HasSubstr("3 layers"),
                                 HasSubstr("the model has 4")));
  // Expert 9 of a model with experts 0..7 (headerless: the ids decide).
  s = ReplayText("id.trace", "0,1;2,3;4,5;6,7\n0,1;2,9;4,5;6,7\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("id.trace"), HasSubstr("token 1"),
                                 HasSubstr("layer 1"), HasSubstr("expert 9"),
                                 HasSubstr("experts 0..7")));
  // The same with a header declaring a larger model.
  s = ReplayText("header.trace",
                 "moetier-trace v1 layers=4 experts=16 top_k=2 weights=0\n0,1;2,3;4,5;6,12\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("expert 12"), HasSubstr("experts 0..7")));
  // Fitting ids, but recorded from a model with more experts.
  s = ReplayText("count.trace",
                 "moetier-trace v1 layers=4 experts=16 top_k=2 weights=0\n0,1;2,3;4,5;6,7\n");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("16 experts"), HasSubstr("this model has 8")));
  // Top-3 for a top-2 model.
  s = ReplayText("topk.trace", "0,1,2;2,3,4;4,5,6;6,7,0\n");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("3 experts per layer"), HasSubstr("the model to 2")));
  // Nothing to replay.
  s = ReplayText("empty.trace", "moetier-trace v1 layers=4 experts=8 top_k=2 weights=0\n");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("empty.trace"));
  // Duplicate experts in a field: the reader's check, naming file and line.
  s = ReplayText("dup.trace", "0,0;2,3;4,5;6,7\n");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("dup.trace"));
  // No such file.
  const ModelHparams& hp = TinyModel().hp();
  absl::StatusOr<std::unique_ptr<RoutingTraceReplayer>> missing = RoutingTraceReplayer::Create(
      TempPath("no-such.trace"), hp.n_layer, hp.n_expert, hp.n_expert_used);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such.trace"));
}

TEST(RoutingTraceHooksTest, RecordingAndReplayingOneFileIsRefused) {
  const ModelHparams& hp = TinyModel().hp();
  const std::string path = TempPath("both.trace");
  absl::StatusOr<RoutingTraceHooks> hooks =
      OpenRoutingTraceHooks(path, path, hp.n_layer, hp.n_expert, hp.n_expert_used);
  EXPECT_EQ(hooks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hooks.status().message(), HasSubstr("both"));
  // Neither flag: no hooks at all.
  hooks = OpenRoutingTraceHooks("", "", hp.n_layer, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(hooks.ok());
  EXPECT_EQ(hooks->recorder, nullptr);
  EXPECT_EQ(hooks->replayer, nullptr);
  EXPECT_EQ(hooks->ReplayLabel(), "");
}

TEST(RoutingTraceHooksTest, ARecorderOfAnotherShapeFailsTheForwardCall) {
  const ModelHparams& hp = TinyModel().hp();
  const std::string path = TempPath("shape.trace");
  absl::StatusOr<std::unique_ptr<RoutingTraceRecorder>> recorder =
      RoutingTraceRecorder::Create(path, hp.n_layer + 1, hp.n_expert, hp.n_expert_used);
  ASSERT_TRUE(recorder.ok());
  std::unique_ptr<CpuEngine> engine = MakeEngine(8, recorder->get());
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  const int32_t one[1] = {5};
  absl::StatusOr<std::unique_ptr<Sequence>> seq = engine->NewSequence();
  ASSERT_TRUE(seq.ok()) << seq.status();
  const absl::Status s = engine->Forward(**seq, one, LogitRows::kLast, logits.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("made for 5 layers"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moetier
