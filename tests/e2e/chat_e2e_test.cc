// Text and chat requests through the real daemon on the files moetier-synth
// writes, in the test's temporary directory, for llama (Mixtral:
// SentencePiece, Mixtral-8x7B-Instruct-v0.1's [INST] template), olmoe
// (GPT-2 BPE, the Tulu template) and qwen35moe (Qwen3.5's template, whose
// generation prompt opens a think block):
//  - Tokenize gives the ids the model's tokenizer, read here from the file,
//    gives (and moetier-worker --standalone --tokenize); Detokenize gives
//    the text back;
//  - Generate with a text prompt at temperature 0 counts the tokenized
//    prompt (bos included) and gives the standalone worker's text;
//  - Chat renders the prompt the real template renders (worked out by hand
//    below, with llama.cpp's server's handling of the template's bos): the
//    local renderer gives that text, prompt_tokens is its token count, and
//    the answer is what Generate gives for its ids.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "daemon_harness.h"
#include "gguf/gguf_reader.h"
#include "gguf/tokenizer/chat_template.h"
#include "gguf/tokenizer/tokenizer.h"
#include "gguf/tokenizer/unicode.h"
#include "gtest/gtest.h"

extern char** environ;

namespace moetier::e2e {
namespace {

constexpr int kNewTokens = 8;

// Runs argv and returns its standard output; the exit status must be 0.
std::string Capture(std::vector<std::string> argv) {
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe failed";
    return "";
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while (rc == 0 && (n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fds[0]);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0];
    return "";
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << argv[0] << " " << (argv.size() > 1 ? argv[1] : "") << " failed";
  return out;
}

std::string WriteSynthModel(const std::string& arch) {
  const std::string path = ::testing::TempDir() + "/chat-e2e-" + arch + "-" +
                           std::to_string(getpid()) + ".gguf";
  Capture({MOETIER_SYNTH, "--arch", arch, "--preset", "tiny", "--quant", "f32", "--out", path});
  return path;
}

std::vector<int32_t> StandaloneTokenize(const std::string& model, const std::string& text) {
  std::string line = Capture({MOETIER_WORKER, "--standalone", "--model", model, "--tokenize", text});
  while (!line.empty() && line.back() == '\n') line.pop_back();
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(line, ',', absl::SkipEmpty())) {
    int32_t id = 0;
    EXPECT_TRUE(absl::SimpleAtoi(part, &id)) << line;
    ids.push_back(id);
  }
  return ids;
}

// The standalone worker's greedy text for a prompt (tokenized as the daemon
// tokenizes a chat prompt: specials parsed, bos added), or for `--chat`, with
// the bytes that are not UTF-8 replaced as the daemon replaces them.
std::string StandaloneGenerate(const std::string& model, const std::string& prompt, bool chat) {
  std::vector<std::string> argv = {MOETIER_WORKER, "--standalone", "--model", model, "--backend",
                                   "cpu", "--threads", "2", "--prompt", prompt, "--temp", "0",
                                   "-n", std::to_string(kNewTokens)};
  if (chat) argv.push_back("--chat");
  std::string text = Capture(argv);
  if (!text.empty() && text.back() == '\n') text.pop_back();  // the worker ends with a newline
  return SanitizeUtf8(text);
}

std::vector<int32_t> Tokenize(v1::Moetier::Stub& stub, const std::string& text) {
  grpc::ClientContext context;
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_parse_special_tokens(true);
  v1::TokenizeResponse response;
  const grpc::Status s = stub.Tokenize(&context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return {response.token_ids().begin(), response.token_ids().end()};
}

std::string Detokenize(v1::Moetier::Stub& stub, const std::vector<int32_t>& ids) {
  grpc::ClientContext context;
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Add(ids.begin(), ids.end());
  v1::DetokenizeResponse response;
  const grpc::Status s = stub.Detokenize(&context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return response.text();
}

using Turns = std::vector<std::pair<std::string, std::string>>;

Generation RunChat(v1::Moetier::Stub& stub, const v1::ChatRequest& request);

Generation Chat(v1::Moetier::Stub& stub, const Turns& turns, bool enable_thinking) {
  v1::ChatRequest request;
  request.set_enable_thinking(enable_thinking);
  for (const auto& [role, content] : turns) {
    v1::ChatMessage* m = request.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  request.set_max_new_tokens(kNewTokens);
  return RunChat(stub, request);
}

Generation RunChat(v1::Moetier::Stub& stub, const v1::ChatRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Chat(&context, request);
  Generation g;
  v1::GenerateResponse piece;
  while (reader->Read(&piece)) {
    g.text += piece.text();
    g.token_ids.insert(g.token_ids.end(), piece.token_ids().begin(), piece.token_ids().end());
    if (piece.has_final_stats()) g.stats = piece.final_stats();
  }
  g.status = reader->Finish();
  return g;
}

struct ChatCase {
  Turns turns;
  // What the model's real template renders (its Jinja by hand, not moetier's
  // code), less the bos_token llama.cpp's server drops when the vocabulary
  // adds bos itself.
  std::string rendered;
  bool enable_thinking = true;  // the API's default is off
};

struct ArchCase {
  const char* arch;
  int32_t bos_id;  // -1: the vocabulary adds none
  std::vector<ChatCase> chats;
  Turns refused;  // a conversation the template raises on; empty: none
  const char* refusal;
};

const ArchCase kCases[] = {
    // Mixtral-8x7B-Instruct-v0.1: "{{ bos_token }}" then "[INST] " + user +
    // " [/INST]" and assistant + eos_token, alternating, no system role.
    {"llama",
     1,
     {{{{"user", "Hello world"}}, "[INST] Hello world [/INST]"},
      {{{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "How are you?"}},
       "[INST] Hi [/INST]Hello!</s>[INST] How are you? [/INST]"}},
     {{"system", "Be brief."}, {"user", "Hi"}},
     "Conversation roles must alternate user/assistant/user/assistant/..."},
    // Tulu: "<|user|>\n" + user + "\n", "<|assistant|>\n" + assistant +
    // eos_token (+ "\n" unless last), "<|assistant|>\n" to finish.
    {"olmoe",
     -1,
     {{{{"user", "Hello world"}}, "<|user|>\nHello world\n<|assistant|>\n"},
      {{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "How are you?"}},
       "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello!<|endoftext|>\n<|user|>\nHow "
       "are you?\n<|assistant|>\n"}},
     {},
     ""},
    // Qwen3.5: ChatML, and the generation prompt opens a think block.
    {"qwen35moe",
     -1,
     {{{{"user", "Hello world"}}, "<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n<think>\n"},
      {{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "How are you?"}},
       "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
       "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
       "<|im_start|>assistant\n<think>\n"},
      // Thinking off: an empty think block.
      {{{"user", "Hello world"}},
       "<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
       false}},
     {},
     ""},
};

// The model's tokenizer and chat template, read here from the file as the
// daemon reads them.
struct LocalTokenizer {
  static std::unique_ptr<LocalTokenizer> Load(const std::string& model) {
    absl::StatusOr<std::unique_ptr<GgufModel>> file = GgufModel::Open(model);
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return nullptr;
    absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromGgufMetadata((*file)->metadata());
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    if (!tokenizer.ok()) return nullptr;
    absl::StatusOr<ChatTemplate> chat = ChatTemplate::ForTokenizer(*tokenizer);
    EXPECT_TRUE(chat.ok()) << chat.status();
    if (!chat.ok()) return nullptr;
    return std::unique_ptr<LocalTokenizer>(
        new LocalTokenizer{std::move(*tokenizer), std::move(*chat)});
  }

  std::string Render(const Turns& turns, bool enable_thinking) const {
    std::vector<ChatMessage> messages;
    for (const auto& [role, content] : turns) messages.push_back({role, content});
    absl::StatusOr<std::string> text = chat.Render(messages, ChatRenderOptions{.enable_thinking = enable_thinking});
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }

  // As the daemon tokenizes a rendered chat prompt: specials parsed, bos
  // added where the vocabulary adds it.
  std::vector<int32_t> Encode(const std::string& text) const {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, true, true);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  Tokenizer tokenizer;
  ChatTemplate chat;
};

size_t Occurrences(std::string_view text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class ChatE2eTest : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ChatE2eTest, TextAndChatAgreeWithTheLocalTokenizerAndTheTemplate) {
  const ArchCase& c = GetParam();
  const std::string model = WriteSynthModel(c.arch);
  const std::unique_ptr<LocalTokenizer> local = LocalTokenizer::Load(model);
  ASSERT_NE(local, nullptr);
  DaemonSetup setup;
  setup.model_path = model;
  std::string error;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;
  v1::Moetier::Stub& stub = daemon->stub();

  // (a) Tokenize / Detokenize.
  for (const std::string text : {"Hello world", "The quick brown fox jumps over 13 lazy dogs",
                                 "Gr\xC3\xBC\xC3\x9F" "e\nzweite Zeile"}) {
    SCOPED_TRACE(text);
    const std::vector<int32_t> ids = Tokenize(stub, text);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids, local->Encode(text));
    EXPECT_EQ(ids, StandaloneTokenize(model, text));
    if (c.bos_id >= 0) {
      EXPECT_EQ(ids.front(), c.bos_id);
      EXPECT_EQ(std::count(ids.begin(), ids.end(), c.bos_id), 1);
      // The text after bos comes back exactly; with bos first the space
      // SentencePiece put before the text stays (llama.cpp's detokenize
      // takes the leading space off the first token only).
      EXPECT_EQ(Detokenize(stub, {ids.begin() + 1, ids.end()}), text);
      EXPECT_EQ(Detokenize(stub, ids), " " + text);
    } else {
      EXPECT_EQ(Detokenize(stub, ids), text);
    }
  }

  // (b) Generate with a text prompt.
  {
    const std::string prompt = "Hello world";
    v1::GenerateRequest request;
    request.set_prompt(prompt);
    request.set_max_new_tokens(kNewTokens);
    const Generation g = Generate(stub, request);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message() << "\n" << daemon->Log();
    EXPECT_EQ(g.stats.prompt_tokens(), static_cast<int32_t>(local->Encode(prompt).size()));
    EXPECT_EQ(g.stats.prompt_tokens(),
              static_cast<int32_t>(StandaloneTokenize(model, prompt).size()));
    EXPECT_GT(g.stats.generated_tokens(), 0);
    EXPECT_EQ(static_cast<int32_t>(g.token_ids.size()), g.stats.generated_tokens());
    EXPECT_EQ(g.text, StandaloneGenerate(model, prompt, /*chat=*/false));
  }

  // (c) Chat.
  const int32_t eos_id = local->tokenizer.eos_id();
  const std::string eos_text(local->tokenizer.TokenPiece(eos_id, true));
  for (const ChatCase& chat : c.chats) {
    SCOPED_TRACE(chat.rendered);
    EXPECT_EQ(local->Render(chat.turns, chat.enable_thinking), chat.rendered);
    const std::vector<int32_t> ids = local->Encode(chat.rendered);
    EXPECT_EQ(ids, Tokenize(stub, chat.rendered));
    if (c.bos_id >= 0) {
      EXPECT_EQ(ids.front(), c.bos_id);
      EXPECT_EQ(std::count(ids.begin(), ids.end(), c.bos_id), 1) << "one bos, not two";
    }
    EXPECT_EQ(static_cast<size_t>(std::count(ids.begin(), ids.end(), eos_id)),
              Occurrences(chat.rendered, eos_text))
        << "each " << eos_text << " in the prompt is the eos token";

    const Generation g = Chat(stub, chat.turns, chat.enable_thinking);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message() << "\n" << daemon->Log();
    EXPECT_EQ(g.stats.prompt_tokens(), static_cast<int32_t>(ids.size()));
    EXPECT_FALSE(g.token_ids.empty());
    EXPECT_EQ(static_cast<int32_t>(g.token_ids.size()), g.stats.generated_tokens());
    // The same prompt as ids gives the same answer: the daemon prompted the
    // model with these ids.
    v1::GenerateRequest by_ids;
    by_ids.mutable_prompt_token_ids()->Add(ids.begin(), ids.end());
    by_ids.set_max_new_tokens(kNewTokens);
    const Generation g_ids = Generate(stub, by_ids);
    ASSERT_TRUE(g_ids.status.ok()) << g_ids.status.error_message();
    EXPECT_EQ(g.token_ids, g_ids.token_ids);
    EXPECT_EQ(g.text, g_ids.text);
    EXPECT_EQ(g.text, StandaloneGenerate(model, chat.rendered, /*chat=*/false));
    if (chat.turns.size() == 1 && chat.enable_thinking) {
      // The standalone worker's --chat renders one user turn the same way.
      EXPECT_EQ(g.text, StandaloneGenerate(model, chat.turns[0].second, /*chat=*/true));
    }
  }
  if (!c.refused.empty()) {
    const Generation g = Chat(stub, c.refused, true);
    EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(g.status.error_message().find(c.refusal), std::string::npos)
        << g.status.error_message();
  }
  std::remove(model.c_str());
}

// gRPC Chat takes tools and tool turns: the prompt the daemon computes is
// the template's rendering of them (its length is the worker's
// prompt_tokens), and a tool that is not JSON is refused by name.
TEST(ChatToolsE2eTest, GrpcChatRendersToolsAndToolTurnsThroughTheTemplate) {
  const std::string model = WriteSynthModel("qwen3moe");
  const std::unique_ptr<LocalTokenizer> local = LocalTokenizer::Load(model);
  ASSERT_NE(local, nullptr);
  DaemonSetup setup;
  setup.model_path = model;
  std::string error;
  std::unique_ptr<RunningDaemon> daemon = RunningDaemon::Start(setup, &error);
  ASSERT_NE(daemon, nullptr) << error;

  const std::string tool =
      R"({"type": "function", "function": {"name": "get_weather", "parameters": )"
      R"({"type": "object", "properties": {"city": {"type": "string"}}}}})";
  v1::ChatRequest request;
  request.set_enable_thinking(true);
  request.set_max_new_tokens(kNewTokens);
  request.add_tools_json(tool);
  v1::ChatMessage* user = request.add_messages();
  user->set_role("user");
  user->set_content("Weather in Paris?");
  v1::ChatMessage* call = request.add_messages();
  call->set_role("assistant");
  v1::ToolCall* tool_call = call->add_tool_calls();
  tool_call->set_id("call_1");
  tool_call->set_name("get_weather");
  tool_call->set_arguments_json(R"({"city": "Paris"})");
  v1::ChatMessage* result = request.add_messages();
  result->set_role("tool");
  result->set_tool_call_id("call_1");
  result->set_content("sunny");

  std::vector<ChatMessage> messages = {{"user", "Weather in Paris?"}, {"assistant", ""}, {"tool", "sunny"}};
  messages[1].tool_calls.push_back({"call_1", "get_weather", nlohmann::ordered_json::parse(R"({"city": "Paris"})")});
  ChatRenderOptions options;
  options.tools.push_back(nlohmann::ordered_json::parse(tool));
  absl::StatusOr<std::string> rendered = local->chat.Render(messages, options);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  ASSERT_NE(rendered->find("<tools>"), std::string::npos);
  ASSERT_NE(rendered->find("<tool_response>\nsunny\n</tool_response>"), std::string::npos);

  const Generation g = RunChat(daemon->stub(), request);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message() << "\n" << daemon->Log();
  EXPECT_EQ(g.stats.prompt_tokens(), static_cast<int32_t>(local->Encode(*rendered).size()));

  request.set_tools_json(0, "{not json");
  const Generation refused = RunChat(daemon->stub(), request);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.status.error_message(), "tools_json[0] is not a JSON object");
  std::remove(model.c_str());
}

INSTANTIATE_TEST_SUITE_P(Synth, ChatE2eTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ArchCase>& param) {
                           return std::string(param.param.arch);
                         });

}  // namespace
}  // namespace moetier::e2e
