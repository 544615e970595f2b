#include "cli/command_line.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moetier::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<CommandLine> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "moetier");
  return ParseCommandLine(args);
}

// Errors are one line that names the offending flag or argument.
void ExpectError(std::vector<std::string> args, const std::string& fragment) {
  absl::StatusOr<CommandLine> cl = Parse(args);
  ASSERT_FALSE(cl.ok()) << "parsed: " << args.back();
  const std::string message(cl.status().message());
  EXPECT_THAT(message, HasSubstr(fragment));
  EXPECT_THAT(message, Not(HasSubstr("\n")));
}

TEST(CommandLineTest, GenerateTakesPromptWordsAndSamplingFlags) {
  absl::StatusOr<CommandLine> cl = Parse({"generate",
                                          "--temp",
                                          "0.5",
                                          "--top-k=7",
                                          "--top-p",
                                          "0.9",
                                          "--min-p",
                                          "0.1",
                                          "--repeat-penalty",
                                          "1.1",
                                          "--repeat-last-n",
                                          "32",
                                          "--seed",
                                          "99",
                                          "-n",
                                          "12",
                                          "--stats",
                                          "Once",
                                          "upon",
                                          "a",
                                          "time"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kGenerate);
  const v1::GenerateRequest& r = cl->generate.request;
  EXPECT_EQ(r.prompt(), "Once upon a time");
  EXPECT_TRUE(cl->generate.prompt_given);
  EXPECT_EQ(r.max_new_tokens(), 12);
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.5f);
  EXPECT_EQ(r.sampling().top_k(), 7);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.9f);
  EXPECT_FLOAT_EQ(r.sampling().min_p(), 0.1f);
  EXPECT_FLOAT_EQ(r.sampling().repetition_penalty(), 1.1f);
  EXPECT_EQ(r.sampling().repeat_last_n(), 32);
  ASSERT_TRUE(r.sampling().has_seed());
  EXPECT_EQ(r.sampling().seed(), 99u);
  EXPECT_TRUE(cl->generate.stats);
}

TEST(CommandLineTest, GenerateDefaultsMatchTheWorker) {
  absl::StatusOr<CommandLine> cl = Parse({"generate", "--max-new-tokens", "3", "hi"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const v1::SamplingParams& s = cl->generate.request.sampling();
  EXPECT_FLOAT_EQ(s.temperature(), 0.8f);
  EXPECT_EQ(s.top_k(), 40);
  EXPECT_FLOAT_EQ(s.top_p(), 0.95f);
  EXPECT_FLOAT_EQ(s.min_p(), 0.05f);
  EXPECT_EQ(s.repeat_last_n(), 64);
  EXPECT_FALSE(s.has_seed());
  EXPECT_EQ(cl->generate.request.max_new_tokens(), 3);
}

TEST(CommandLineTest, GeneratePromptSources) {
  absl::StatusOr<CommandLine> cl = Parse({"generate"});
  ASSERT_TRUE(cl.ok());
  EXPECT_FALSE(cl->generate.prompt_given);
  cl = Parse({"generate", "-"});
  ASSERT_TRUE(cl.ok());
  EXPECT_FALSE(cl->generate.prompt_given);
  EXPECT_EQ(cl->generate.request.prompt(), "");
  cl = Parse({"generate", "--prompt", "-"});
  ASSERT_TRUE(cl.ok());
  EXPECT_FALSE(cl->generate.prompt_given);
  EXPECT_EQ(cl->generate.request.prompt(), "");
  cl = Parse({"generate", "--prompt-tokens", "1, 2,3", "--special", "--ignore-eos"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->generate.request.ignore_end_of_generation());
  EXPECT_THAT(cl->generate.request.prompt_token_ids(), ::testing::ElementsAre(1, 2, 3));
  EXPECT_TRUE(cl->generate.request.parse_special_tokens());
  cl = Parse({"generate", "--", "-starts with a dash"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->generate.request.prompt(), "-starts with a dash");
}

TEST(CommandLineTest, ChatOneShotAndInteractive) {
  absl::StatusOr<CommandLine> cl =
      Parse({"chat", "--system", "be brief", "--message", "hello", "--think", "-n", "5"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kChat);
  EXPECT_EQ(cl->chat.system, "be brief");
  ASSERT_TRUE(cl->chat.message.has_value());
  EXPECT_EQ(*cl->chat.message, "hello");
  EXPECT_TRUE(cl->chat.request.enable_thinking());
  EXPECT_EQ(cl->chat.request.max_new_tokens(), 5);
  cl = Parse({"chat", "how", "are", "you"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(*cl->chat.message, "how are you");
  cl = Parse({"chat"});
  ASSERT_TRUE(cl.ok());
  EXPECT_FALSE(cl->chat.message.has_value());
}

TEST(CommandLineTest, ScoreNeedsTokensAndAnOutputFile) {
  absl::StatusOr<CommandLine> cl = Parse({"score", "--tokens", "5,6,7", "--logits-out", "x.f32"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kScore);
  EXPECT_THAT(cl->score.token_ids, ::testing::ElementsAre(5, 6, 7));
  EXPECT_EQ(cl->score.logits_out, "x.f32");
  cl = Parse({"score", "--logits-out=y", "8", "9"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->score.token_ids, ::testing::ElementsAre(8, 9));
  ExpectError({"score", "--tokens", "1"}, "--logits-out");
  ExpectError({"score", "--logits-out", "f"}, "--tokens");
  ExpectError({"score", "--tokens", "1,x", "--logits-out", "f"}, "'x' is not a token id");
  ExpectError({"score", "--tokens", "-3", "--logits-out", "f"}, "'-3' is not a token id");
}

TEST(CommandLineTest, TokenizeAndDetokenize) {
  absl::StatusOr<CommandLine> cl = Parse({"tokenize", "--special", "hello", "world"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kTokenize);
  EXPECT_EQ(cl->tokenize.text, "hello world");
  EXPECT_TRUE(cl->tokenize.text_given);
  EXPECT_TRUE(cl->tokenize.special);
  cl = Parse({"tokenize"});
  ASSERT_TRUE(cl.ok());
  EXPECT_FALSE(cl->tokenize.text_given);
  cl = Parse({"tokenize", "--text", ""});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->tokenize.text_given);
  cl = Parse({"detokenize", "1,2", "3"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kDetokenize);
  EXPECT_THAT(cl->detokenize.token_ids, ::testing::ElementsAre(1, 2, 3));
  ExpectError({"detokenize"}, "needs token ids");
}

TEST(CommandLineTest, StatusFlags) {
  absl::StatusOr<CommandLine> cl =
      Parse({"status", "--watch", "--interval-ms", "250", "--json", "--count", "3"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kStatus);
  EXPECT_TRUE(cl->status.watch);
  EXPECT_EQ(cl->status.interval_ms, 250u);
  EXPECT_TRUE(cl->status.json);
  EXPECT_EQ(cl->status.count, 3);
  ExpectError({"status", "--interval-ms", "10"}, "10 is outside 50..3600000");
  ExpectError({"status", "--count", "2"}, "--count goes only with --watch");
  ExpectError({"status", "extra"}, "status takes no arguments");
}

TEST(CommandLineTest, BenchFlags) {
  absl::StatusOr<CommandLine> cl =
      Parse({"bench", "--runs", "5", "--warmup", "0", "--prefill-tokens", "64", "--decode-tokens",
             "8", "--decode-prompt-tokens", "4"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kBench);
  EXPECT_EQ(cl->bench.runs, 5);
  EXPECT_EQ(cl->bench.warmup, 0);
  EXPECT_EQ(cl->bench.prefill_tokens, 64);
  EXPECT_EQ(cl->bench.decode_tokens, 8);
  EXPECT_EQ(cl->bench.decode_prompt_tokens, 4);
  ExpectError({"bench", "--runs", "0"}, "--runs: 0 is outside 1..1000");
}

TEST(CommandLineTest, BudgetNeedsDeviceAndSize) {
  absl::StatusOr<CommandLine> cl =
      Parse({"budget", "--device", "cuda:1", "--expert-cache-mib", "4096"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kBudget);
  EXPECT_EQ(cl->budget.device, "cuda:1");
  EXPECT_EQ(cl->budget.expert_cache_mib, 4096);
  ExpectError({"budget", "--expert-cache-mib", "1"}, "budget needs --device DEV");
  ExpectError({"budget", "--device", "cuda:0"}, "budget needs --expert-cache-mib MIB");
  ExpectError({"budget", "--device", "cuda:0", "--expert-cache-mib", "-2"}, "-2 is outside");
}

TEST(CommandLineTest, ServeTakesTheModelAndTheHttpFlags) {
  absl::StatusOr<CommandLine> cl = Parse({"serve", "m.gguf", "--port", "0", "--host", "::1",
                                          "--api-keys-file", "keys", "-t", "2", "-c", "512"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kServe);
  EXPECT_TRUE(cl->run.serve.enabled);
  EXPECT_EQ(cl->run.model_path, "m.gguf");
  EXPECT_EQ(cl->run.serve.port, 0);
  EXPECT_EQ(cl->run.serve.host, "::1");
  EXPECT_EQ(cl->run.serve.api_keys_file, "keys");
  EXPECT_EQ(cl->run.threads, 2);
  EXPECT_EQ(cl->run.ctx_tokens, 512);

  cl = Parse({"serve"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->run.serve.host, "127.0.0.1");
  EXPECT_EQ(cl->run.serve.port, 8080);
  EXPECT_TRUE(cl->run.model_path.empty());

  ExpectError({"serve", "m.gguf", "hello"}, "serve takes the model only, got 'hello'");
  ExpectError({"serve", "--port", "65536"}, "--port");
  ExpectError({"serve", "--host", "[::1]"}, "--host '[::1]' is not a host name or address");
  ExpectError({"serve", "--temp", "0"}, "unknown flag '--temp'");
}

TEST(CommandLineTest, RunServeIsServe) {
  absl::StatusOr<CommandLine> cl = Parse({"run", "--serve", "m.gguf", "--port", "9000"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kRun);
  EXPECT_TRUE(cl->run.serve.enabled);
  EXPECT_EQ(cl->run.model_path, "m.gguf");
  EXPECT_EQ(cl->run.serve.port, 9000);
  EXPECT_FALSE(cl->run.one_shot);
  ExpectError({"run", "--serve", "m.gguf", "a", "prompt"}, "serve takes the model only");
  ExpectError({"run", "--serve", "--system", "Be brief."}, "serve takes them from the requests");

  cl = Parse({"run", "m.gguf"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_FALSE(cl->run.serve.enabled);
}

TEST(CommandLineTest, RunTakesGenerateFlagsAfterDashes) {
  absl::StatusOr<CommandLine> cl =
      Parse({"run", "--model", "m.gguf", "--daemon-arg=--ram_budget_bytes=1GiB", "--daemon-arg",
             "--io_backend=pread", "--start-timeout-s", "9", "--", "--temp", "0", "-n", "4",
             "hello", "there"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->command, Command::kRun);
  EXPECT_EQ(cl->run.model_path, "m.gguf");
  EXPECT_THAT(cl->run.daemon_args,
              ::testing::ElementsAre("--ram_budget_bytes=1GiB", "--io_backend=pread"));
  EXPECT_EQ(cl->run.start_timeout_s, 9);
  EXPECT_EQ(cl->run.generate.request.prompt(), "hello there");
  EXPECT_TRUE(cl->run.generate.prompt_given);
  EXPECT_EQ(cl->run.generate.request.max_new_tokens(), 4);
  EXPECT_FLOAT_EQ(cl->run.generate.request.sampling().temperature(), 0.0f);
  EXPECT_TRUE(cl->run.one_shot);
  ExpectError({"run", "--", "--bogus"}, "after '--' (generate flags): unknown flag '--bogus'");
}

TEST(CommandLineTest, RunWithoutAPromptChats) {
  absl::StatusOr<CommandLine> cl = Parse({"run"});
  ASSERT_TRUE(cl.ok());
  EXPECT_FALSE(cl->run.one_shot);
  EXPECT_EQ(cl->run.model_path, "");
  EXPECT_EQ(cl->run.generate.request.max_new_tokens(), 0);
  cl = Parse({"run", "q.gguf", "--system", "be brief", "--think", "--temp", "0.3"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_FALSE(cl->run.one_shot);
  EXPECT_EQ(cl->run.model_path, "q.gguf");
  EXPECT_TRUE(cl->run.model_from_word);
  EXPECT_EQ(cl->run.system, "be brief");
  EXPECT_TRUE(cl->run.think);
  EXPECT_FLOAT_EQ(cl->run.generate.request.sampling().temperature(), 0.3f);
  ExpectError({"run", "--ignore-eos"}, "--ignore-eos and --special go with a prompt");
  ExpectError({"run", "m.gguf", "hi", "--system", "x"}, "--system and --think are for the chat");
}

// The model is the first word (as `ollama run MODEL`); the words after it
// are the prompt.
TEST(CommandLineTest, RunTakesTheModelAsTheFirstWord) {
  absl::StatusOr<CommandLine> cl = Parse({"run", "q.gguf", "Once", "upon"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->run.model_path, "q.gguf");
  EXPECT_EQ(cl->run.generate.request.prompt(), "Once upon");
  EXPECT_TRUE(cl->run.one_shot);
  // With --model, every word is the prompt.
  cl = Parse({"run", "--model", "q.gguf", "Once", "upon"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->run.model_path, "q.gguf");
  EXPECT_FALSE(cl->run.model_from_word);
  EXPECT_EQ(cl->run.generate.request.prompt(), "Once upon");
  // '-' reads the prompt from stdin, once.
  cl = Parse({"run", "q.gguf", "-"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->run.one_shot);
  EXPECT_FALSE(cl->run.generate.prompt_given);
  EXPECT_EQ(cl->run.generate.request.prompt(), "");
  ExpectError({"run", "q.gguf", "a", "--prompt", "b"}, "give the prompt once");
}

TEST(CommandLineTest, RunTakesLlamaCppSpellings) {
  absl::StatusOr<CommandLine> cl = Parse(
      {"run", "-m", "q.gguf", "-c", "2048", "-t", "6", "-n", "16", "--temp", "0", "-p", "Hello"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->run.model_path, "q.gguf");
  EXPECT_EQ(cl->run.ctx_tokens, 2048);
  EXPECT_EQ(cl->run.threads, 6);
  EXPECT_EQ(cl->run.generate.request.max_new_tokens(), 16);
  EXPECT_FLOAT_EQ(cl->run.generate.request.sampling().temperature(), 0.0f);
  EXPECT_EQ(cl->run.generate.request.prompt(), "Hello");
  EXPECT_TRUE(cl->run.one_shot);
  cl = Parse({"run", "--ctx-size=512", "--threads", "2", "--ctx", "1024"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->run.ctx_tokens, 1024);
  EXPECT_EQ(cl->run.threads, 2);
  ExpectError({"run", "-c", "0"}, "flag -c: 0 is outside");
  ExpectError({"run", "-t", "x"}, "flag -t: 'x' is not an integer");
  // llama.cpp's rope flags, for the worker as typed.
  cl = Parse({"serve", "--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32768"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->run.rope_scaling, "yarn");
  EXPECT_EQ(cl->run.rope_scale, "4");
  EXPECT_EQ(cl->run.yarn_orig_ctx, 32768);
  ExpectError({"run", "--rope-scaling", "dynamic"}, "'dynamic' is not none, linear or yarn");
  ExpectError({"run", "--rope-scale", "0"}, "'0' is not a factor");
  ExpectError({"run", "--yarn-orig-ctx", "0"}, "flag --yarn-orig-ctx: 0 is outside");
  // The help documents one spelling and names the others.
  const std::string usage = Usage(Command::kRun);
  EXPECT_THAT(usage, HasSubstr("  --model FILE"));
  EXPECT_THAT(usage, HasSubstr("(also -m)"));
  EXPECT_THAT(usage, HasSubstr("(also -c, --ctx-size)"));
  EXPECT_THAT(usage, HasSubstr("(also -t)"));
  EXPECT_THAT(usage, HasSubstr("(also -p)"));
  EXPECT_THAT(usage, Not(HasSubstr("  -m")));
  // Only run has them.
  ExpectError({"generate", "-p", "x"}, "unknown flag '-p'");
}

TEST(CommandLineTest, GlobalFlagsBeforeOrAfterTheCommand) {
  absl::StatusOr<CommandLine> cl = Parse(
      {"--socket", "/tmp/a.sock", "status", "--timeout-ms", "500", "--no-color", "--width", "0"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->global.socket_path, "/tmp/a.sock");
  EXPECT_EQ(cl->global.timeout_ms, 500);
  EXPECT_EQ(cl->global.color, ColorMode::kNever);
  EXPECT_EQ(cl->global.width, 0);
  cl = Parse({"status", "--address", "127.0.0.1:50051", "--color=always"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->global.address, "127.0.0.1:50051");
  EXPECT_EQ(cl->global.color, ColorMode::kAlways);
  ExpectError({"status", "--socket", "/a", "--address", "h:1"}, "--socket or --address");
  ExpectError({"status", "--address", "nohost"}, "'nohost' is not HOST:PORT");
  ExpectError({"status", "--address", "h:99999"}, "no port number");
  ExpectError({"status", "--color", "blue"}, "'blue' is not auto, always or never");
}

TEST(CommandLineTest, BadInputIsOneLineNamingTheProblem) {
  ExpectError({}, "no command given");
  ExpectError({"frobnicate"}, "unknown command 'frobnicate'");
  ExpectError({"generate", "--bogus"}, "generate: unknown flag '--bogus'");
  ExpectError({"generate", "--temp"}, "flag --temp needs a value");
  ExpectError({"generate", "--temp", "hot"}, "flag --temp: 'hot' is not a finite number");
  ExpectError({"generate", "-n", "-5"}, "flag -n: -5 is outside");
  ExpectError({"generate", "--seed", "x"}, "flag --seed: 'x' is not a non-negative integer");
  ExpectError({"generate", "--stats=yes"}, "flag --stats takes no value");
  ExpectError({"generate", "--prompt", "a", "b"}, "give the prompt once");
  ExpectError({"generate", "--prompt-tokens", "1", "--prompt", "x"}, "not both");
  ExpectError({"chat", "--message", "a", "b"}, "give the message once");
  ExpectError({"status", "--timeout-ms", "-1"}, "--timeout-ms: -1 is outside");
}

TEST(CommandLineTest, SamplingValuesGoToTheDaemonAsTyped) {
  // Their ranges are the front door's to check (tests/daemon), for every
  // client alike; the flags only parse numbers.
  absl::StatusOr<CommandLine> cl =
      Parse({"generate", "--temp", "-1", "--top-p", "2", "--top-k", "-3", "x"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const v1::SamplingParams& s = cl->generate.request.sampling();
  EXPECT_EQ(s.temperature(), -1.0f);
  EXPECT_EQ(s.top_p(), 2.0f);
  EXPECT_EQ(s.top_k(), -3);
}

TEST(CommandLineTest, HelpForTheToolAndEachCommand) {
  absl::StatusOr<CommandLine> cl = Parse({"--help"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->help);
  EXPECT_EQ(cl->command, Command::kNone);
  cl = Parse({"generate", "--temp", "x", "--help"});
  EXPECT_FALSE(cl.ok());  // flags are checked in order
  cl = Parse({"generate", "-h"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->help);
  EXPECT_EQ(cl->command, Command::kGenerate);
  cl = Parse({"help", "bench"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->command, Command::kHelp);
  EXPECT_EQ(cl->help_topic, Command::kBench);
  ExpectError({"help", "nope"}, "unknown command 'nope'");
  cl = Parse({"--version"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->version);
}

// Every flag a command accepts appears in its --help, and nothing longer
// than a terminal line.
TEST(CommandLineTest, UsageListsEveryFlag) {
  const std::vector<std::pair<Command, std::vector<std::string>>> flags = {
      {Command::kGenerate,
       {"--prompt", "--prompt-tokens", "--special", "-n, --max-new-tokens", "--temp", "--top-k",
        "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n", "--seed", "--stats",
        "--ignore-eos"}},
      {Command::kChat, {"--message", "--system", "--think", "--temp", "--stats"}},
      {Command::kScore, {"--tokens", "--logits-out"}},
      {Command::kTokenize, {"--text", "--special"}},
      {Command::kDetokenize, {"--tokens", "--special"}},
      {Command::kStatus, {"--watch", "--interval-ms", "--count", "--json"}},
      {Command::kBench,
       {"--runs", "--warmup", "--prefill-tokens", "--decode-tokens", "--decode-prompt-tokens"}},
      {Command::kBudget, {"--device", "--expert-cache-mib"}},
      {Command::kRun,
       {"--model", "--moetierd", "--worker", "--synth", "--daemon-arg", "--start-timeout-s",
        "--ctx", "--threads", "--prompt", "-n, --max-new-tokens", "--temp", "--top-k", "--top-p",
        "--min-p", "--seed", "--stats", "--system", "--think", "--ignore-eos", "--serve",
        "--host", "--port", "--api-keys-file"}},
      {Command::kServe,
       {"--model", "--moetierd", "--worker", "--synth", "--daemon-arg", "--start-timeout-s",
        "--ctx", "--threads", "--host", "--port", "--api-keys-file"}},
  };
  for (const auto& [command, names] : flags) {
    const std::string usage = Usage(command);
    EXPECT_THAT(usage, HasSubstr(std::string("usage: moetier ") + CommandName(command)));
    for (const std::string& name : names) EXPECT_THAT(usage, HasSubstr("  " + name)) << name;
    for (const char* global : {"--socket", "--address", "--timeout-ms", "--color", "--no-color",
                               "--width", "-h, --help"}) {
      EXPECT_THAT(usage, HasSubstr(global));
    }
    for (const absl::string_view line : absl::StrSplit(usage, '\n')) {
      EXPECT_LE(line.size(), 80u) << line;
    }
  }
  const std::string overview = Usage(Command::kNone);
  for (const char* name : {"generate", "chat", "score", "tokenize", "detokenize", "status", "bench",
                           "budget", "run"}) {
    EXPECT_THAT(overview, HasSubstr(std::string("\n  ") + name + " "));
  }
  EXPECT_THAT(overview, HasSubstr("/run/moetier/moetier.sock"));
  for (const absl::string_view line : absl::StrSplit(overview, '\n')) {
    EXPECT_LE(line.size(), 80u) << line;
  }
}

}  // namespace
}  // namespace moetier::client
