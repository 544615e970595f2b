#include "cache/routing_trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cache/expert_cache_policy.h"
#include "policy_lab/belady_policy.h"
#include "policy_lab/replay.h"

namespace moetier {
namespace {

const std::string kGranite = std::string(MOETIER_TEST_DATA_DIR) + "/traces/granite-3.0-1b-a400m/";

RoutingTrace MustRead(const std::string& path) {
  absl::StatusOr<RoutingTrace> t = ReadRoutingTrace(path);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : RoutingTrace{};
}

TEST(RoutingTrace, ReadsTheSharedGraniteTraces) {
  // README: 3 prompts, 112 prefill + 192 decode tokens, 24 layers, 32
  // experts, top-8; prompts of 39, 44 and 29 tokens, 64 decode steps each.
  const std::map<std::string, size_t> want = {
      {"english_prose.prefill.txt", 39}, {"code.prefill.txt", 44}, {"math.prefill.txt", 29},
      {"english_prose.decode.txt", 64},  {"code.decode.txt", 64},  {"math.decode.txt", 64}};
  size_t prefill = 0, decode = 0;
  for (const auto& [file, tokens] : want) {
    const RoutingTrace t = MustRead(kGranite + file);
    EXPECT_EQ(t.n_token(), tokens) << file;
    EXPECT_EQ(t.n_layer, 24u) << file;
    EXPECT_EQ(t.n_expert, 32u) << file;
    EXPECT_EQ(t.top_k, 8u) << file;
    EXPECT_FALSE(t.has_weights());
    EXPECT_TRUE(t.Validate().ok()) << t.Validate();
    (file.find("prefill") != std::string::npos ? prefill : decode) += t.n_token();
  }
  EXPECT_EQ(prefill, 112u);
  EXPECT_EQ(decode, 192u);
  // First line of code.decode.txt, layer 0, in router order.
  const RoutingTrace code = MustRead(kGranite + "code.decode.txt");
  const absl::Span<const uint32_t> first = code.Experts(0, 0);
  EXPECT_EQ(std::vector<uint32_t>(first.begin(), first.end()),
            (std::vector<uint32_t>{13, 28, 0, 17, 9, 14, 31, 21}));
}

TEST(RoutingTrace, CountsAgreeWithTheSharedFrequencyTable) {
  // expert_freq.decode.csv: layer_idx,expert,count,share over the 3 decode traces.
  std::vector<uint64_t> counted(24 * 32, 0);
  for (const char* f : {"code.decode.txt", "english_prose.decode.txt", "math.decode.txt"}) {
    const RoutingTrace t = MustRead(kGranite + f);
    for (size_t tok = 0; tok < t.n_token(); ++tok) {
      for (uint32_t l = 0; l < 24; ++l) {
        for (const uint32_t e : t.Experts(tok, l)) ++counted[l * 32 + e];
      }
    }
  }
  std::ifstream csv(kGranite + "expert_freq.decode.csv");
  ASSERT_TRUE(csv);
  std::string line;
  std::getline(csv, line);  // header
  size_t rows = 0;
  while (std::getline(csv, line)) {
    unsigned layer = 0, expert = 0, count = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%u,%u,%u", &layer, &expert, &count), 3) << line;
    ASSERT_LT(layer * 32 + expert, counted.size());
    EXPECT_EQ(counted[layer * 32 + expert], count) << "layer " << layer << " expert " << expert;
    ++rows;
  }
  EXPECT_GT(rows, 0u);
}

TEST(RoutingTrace, ReplayMatchesTheSharedReferenceFigures) {
  // README reference (decode traces, per-layer caches starting empty, mean
  // over layers): MIN 0.419 / 0.820 / 0.942 at 8 / 16 / 32 slots; LRU equals
  // MIN at 8 and 32.
  std::vector<RoutingTrace> traces;
  for (const char* f : {"code.decode.txt", "english_prose.decode.txt", "math.decode.txt"}) {
    traces.push_back(MustRead(kGranite + f));
  }
  const std::map<uint32_t, double> want_min = {{8, 0.419}, {16, 0.820}, {32, 0.942}};
  for (const auto& [slots, want] : want_min) {
    LayerTally min_total, lru_total;
    for (const RoutingTrace& t : traces) {
      const ExpertCacheShape shape = ExpertCacheShape::Uniform(24, 32, 8, slots);
      auto min = MakeBeladyPolicy(shape, t);
      min_total.Add(ReplayTrace(t, *min, PrefetchModel{}).Total());
      auto lru = MakeExpertCachePolicy(ExpertPolicyKind::kLru, shape);
      ASSERT_TRUE(lru.ok());
      lru_total.Add(ReplayTrace(t, **lru, PrefetchModel{}).Total());
    }
    EXPECT_NEAR(min_total.hit_rate(), want, 0.0006) << slots << " slots";
    if (slots != 16) {
      EXPECT_EQ(lru_total.hits, min_total.hits) << slots << " slots";
    } else {
      EXPECT_NEAR(lru_total.hit_rate(), 0.719, 0.003);
    }
  }
}

TEST(RoutingTrace, FormatParseRoundTripWithWeights) {
  RoutingTrace t;
  t.name = "rt";
  t.n_layer = 2;
  t.n_expert = 300;
  t.top_k = 3;
  t.experts = {299, 0, 7, 1, 2, 3, 10, 20, 30, 4, 5, 6};
  t.weights = {0.5f, 0.3f, 0.2f, 0.123456789f, 1e-7f, 0.6f, 0.4f, 0.4f, 0.2f, 1, 0, 0};
  const std::string text = FormatRoutingTrace(t);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "moetier-trace v1 layers=2 experts=300 top_k=3 weights=1");
  absl::StatusOr<RoutingTrace> back = ParseRoutingTrace(text, "rt");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->n_layer, 2u);
  EXPECT_EQ(back->n_expert, 300u);
  EXPECT_EQ(back->top_k, 3u);
  EXPECT_EQ(back->experts, t.experts);
  EXPECT_EQ(back->weights, t.weights);  // %.9g round-trips a float exactly
}

TEST(RoutingTrace, WriterStreamsTokensThatTheReaderReads) {
  const std::string path = std::string(MOETIER_BINARY_DIR) + "/cache_trace_writer_test.txt";
  RoutingTraceWriter w;
  ASSERT_TRUE(w.Open(path, 2, 16, 2, /*with_weights=*/false).ok());
  ASSERT_TRUE(w.AppendToken(std::vector<uint32_t>{1, 2, 3, 4}, {}).ok());
  ASSERT_TRUE(w.AppendToken(std::vector<uint32_t>{15, 0, 4, 3}, {}).ok());
  // Wrong sizes and ids are refused, not written.
  EXPECT_FALSE(w.AppendToken(std::vector<uint32_t>{1, 2, 3}, {}).ok());
  EXPECT_FALSE(w.AppendToken(std::vector<uint32_t>{1, 2, 3, 16}, {}).ok());
  EXPECT_FALSE(
      w.AppendToken(std::vector<uint32_t>{1, 2, 3, 4}, std::vector<float>{1, 1, 1, 1}).ok());
  ASSERT_TRUE(w.Close().ok());
  const RoutingTrace t = MustRead(path);
  EXPECT_EQ(t.n_token(), 2u);
  EXPECT_EQ(t.n_expert, 16u);
  EXPECT_EQ(t.experts, (std::vector<uint32_t>{1, 2, 3, 4, 15, 0, 4, 3}));
  std::remove(path.c_str());
}

TEST(RoutingTrace, ExpertCountHintAndComments) {
  const std::string text = "# a comment\n\n1,2;3,4\r\n  5,6 ; 7,0\n";
  absl::StatusOr<RoutingTrace> t = ParseRoutingTrace(text, "x");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->n_expert, 8u);  // largest id + 1
  EXPECT_EQ(t->n_token(), 2u);
  t = ParseRoutingTrace(text, "x", 32);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->n_expert, 32u);
  t = ParseRoutingTrace(text, "x", 6);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("x:4: layer 0: expert id 6 is not below the expert count 6"),
            absl::string_view::npos)
      << t.status();
}

TEST(RoutingTrace, MalformedInputNamesFileAndLine) {
  struct Case {
    const char* text;
    const char* error;  // must appear in the message
  };
  const Case cases[] = {
      {"1,2;3,4\n1,2\n", "f.txt:2: 1 layers (';'-separated fields), expected 2"},
      {"1,2;3,4\n1,2;3\n", "f.txt:2: layer 1 lists 1 experts, expected 2"},
      {"1,2;3,x\n", "f.txt:1: layer 1: 'x' is not an expert id"},
      {"1,2;3,-4\n", "f.txt:1: layer 1: '-4' is not an expert id"},
      {"1,2;3,\n", "f.txt:1: layer 1: '' is not an expert id"},
      {"1,1;3,4\n", "f.txt:1: layer 0: expert 1 is listed twice"},
      {"1,2;3,99999999999\n", "is not an expert id"},
      {"1:0.5,2;3,4\n", "f.txt:1: layer 0: '1:0.5' has a weight, but the file declares none"},
      {"", "f.txt: no tokens"},
      {"# only a comment\n", "f.txt: no tokens"},
      {"moetier-trace v2 layers=1 experts=4 top_k=1 weights=0\n0\n", "f.txt:1: header must start"},
      {"moetier-trace v1 layers=1 experts=4 top_k=1\n0\n",
       "needs layers=, experts=, top_k= and weights="},
      {"moetier-trace v1 layers=1 experts=4 top_k=5 weights=0\n",
       "f.txt:1: header counts out of range"},
      {"moetier-trace v1 layers=1 experts=4 top_k=1 weights=0 color=3\n",
       "unknown header field 'color=3'"},
      {"moetier-trace v1 layers=1 experts=4 top_k=1 weights=0\n4\n",
       "f.txt:2: layer 0: expert id 4 is not below"},
      {"moetier-trace v1 layers=1 experts=4 top_k=2 weights=1\n0:0.5,1\n",
       "f.txt:2: layer 0: '1' needs id:weight"},
      {"moetier-trace v1 layers=1 experts=4 top_k=1 weights=1\n0:nan\n",
       "needs id:weight with a finite weight"},
      {"moetier-trace v1 layers=1 experts=4 top_k=1 weights=1\n0:1e99\n", "finite weight"},
      {"0\nmoetier-trace v1 layers=1 experts=4 top_k=1 weights=0\n",
       "f.txt:2: header must be the first line"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RoutingTrace> t = ParseRoutingTrace(c.text, "f.txt");
    ASSERT_FALSE(t.ok()) << "accepted: " << c.text;
    EXPECT_NE(t.status().message().find(c.error), absl::string_view::npos)
        << "input: " << c.text << "\nmessage: " << t.status().message();
  }
  EXPECT_FALSE(ReadRoutingTrace("/nonexistent/dir/trace.txt").ok());
}

TEST(RoutingTrace, RandomCorruptionsAreRejectedCleanlyOrParseToValidTraces) {
  // Fuzz-ish: flip, insert and delete characters of a valid file with
  // separators and digits over-represented. The reader must never crash and
  // must either reject with "f:LINE" or return a trace that validates.
  const std::string base =
      "moetier-trace v1 layers=2 experts=8 top_k=2 weights=1\n"
      "1:0.6,2:0.4;3:0.7,4:0.3\n"
      "5:0.5,6:0.5;7:0.9,0:0.1\n";
  const std::string alphabet = "0123456789,;:.\n -#ex";
  uint64_t state = 12345;
  auto next = [&state]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(next() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = next() % (s.size() + 1);
      const char c = alphabet[next() % alphabet.size()];
      switch (next() % 3) {
        case 0:
          if (at < s.size()) s[at] = c;
          break;
        case 1:
          s.insert(s.begin() + static_cast<ptrdiff_t>(at), c);
          break;
        default:
          if (at < s.size()) s.erase(at, 1);
      }
    }
    absl::StatusOr<RoutingTrace> t = ParseRoutingTrace(s, "f");
    if (t.ok()) {
      ++accepted;
      EXPECT_TRUE(t->Validate().ok()) << s;
    } else {
      EXPECT_EQ(t.status().message().substr(0, 1), "f") << s;
    }
  }
  EXPECT_GT(accepted, 0);  // some edits (e.g. in weights) stay valid
}

}  // namespace
}  // namespace moetier
