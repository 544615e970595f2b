// The HTTP API end to end in one process: StartHttpApi in front of a real
// scheduler whose one worker is the test, answering with the tokens of a
// scripted text. So the whole path runs on text a real Qwen3 / Qwen3.6
// model writes (the tiny test models' own output is noise): the chat
// template renders the tools into the prompt the worker receives, and the
// worker's tokens come back as reasoning_content, content and tool_calls,
// whole and streamed, in the OpenAI and the Anthropic shapes.
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/control_channel.h"
#include "gguf/gguf_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/http_api.h"

namespace moetier {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kWaitMs = 5000;

// Answers the next generate request with the tokens of `text`, then Done.
class ScriptedWorker {
 public:
  ScriptedWorker(RequestScheduler& scheduler, const Tokenizer& tokenizer)
      : tokenizer_(tokenizer) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    fd_ = fds[1];
    scheduler.AddWorker(AdmittedWorker{0, "cpu", 4242, 1, fds[0]});
    control_v1::WorkerReply ready;
    ready.mutable_ready()->set_n_vocab(tokenizer.vocab_size());
    ready.mutable_ready()->set_max_ctx(8192);
    ready.mutable_ready()->set_backend("cpu");
    Send(ready);
  }
  ~ScriptedWorker() {
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }

  // Runs in the background; prompt() is the decoded prompt once joined.
  void AnswerNext(std::string text) {
    if (thread_.joinable()) thread_.join();
    thread_ = std::thread([this, text = std::move(text)] { Answer(text); });
  }
  std::string prompt() {
    if (thread_.joinable()) thread_.join();
    return prompt_;
  }
  bool cancelled() {
    if (thread_.joinable()) thread_.join();
    return cancelled_;
  }

 private:
  void Send(const control_v1::WorkerReply& reply) {
    ASSERT_TRUE(control::SendControlMessage(fd_, reply).ok());
  }
  void Answer(const std::string& text) {
    control_v1::WorkerRequest request;
    do {
      ASSERT_TRUE(control::ReceiveControlMessage(fd_, &request, kWaitMs).ok());
    } while (!request.has_generate());
    const auto& ids = request.generate().prompt_token_ids();
    prompt_ = *tokenizer_.Detokenize(std::vector<int32_t>(ids.begin(), ids.end()), true);
    absl::StatusOr<std::vector<int32_t>> tokens = tokenizer_.Encode(text, true, false);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    for (int32_t id : *tokens) {
      control_v1::WorkerReply token;
      token.set_id(request.id());
      token.mutable_token()->set_token_id(id);
      Send(token);
    }
    // A stop string makes the daemon cancel: it waits for this Done.
    control_v1::WorkerRequest cancel;
    cancelled_ = control::ReceiveControlMessage(fd_, &cancel, 200).ok() && cancel.has_cancel();
    control_v1::WorkerReply done;
    done.set_id(request.id());
    done.mutable_done()->set_stop_reason(cancelled_ ? control_v1::STOP_CANCELLED
                                                    : control_v1::STOP_END_OF_GENERATION);
    done.mutable_done()->set_prompt_tokens(ids.size());
    done.mutable_done()->set_generated_tokens(static_cast<int32_t>(tokens->size()));
    Send(done);
  }

  const Tokenizer& tokenizer_;
  int fd_ = -1;
  std::thread thread_;
  std::string prompt_;
  bool cancelled_ = false;
};

const Json kWeatherTool = Json::parse(R"({"type": "function", "function": {
  "name": "get_weather", "description": "Current weather of a city.",
  "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}})");

// Output as Qwen3-30B-A3B writes it: its own think block, a sentence, a call.
constexpr char kQwen3Output[] =
    "<think>\nThe user asks for the weather in Paris. I should call get_weather.\n</think>\n\n"
    "I will look it up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>";
// Qwen3.6: the prompt opened the think block; XML call.
constexpr char kQwen35Output[] =
    "The user wants Paris weather for 3 days.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
    "</tool_call>";

class HttpApiTest : public ::testing::Test {
 protected:
  // The vector files carry a ChatML template; the Qwen styles are chosen
  // here, as ForTokenizer picks them for real Qwen files.
  void Start(const std::string& model_file, ChatTemplateStyle style, ApiKeys keys = {}) {
    absl::StatusOr<std::unique_ptr<GgufModel>> gguf =
        GgufModel::Open(std::string(MOETIER_TEST_DATA_DIR) + "/vectors/" + model_file);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    tokenizer_ = std::make_unique<Tokenizer>(*Tokenizer::FromGgufMetadata((*gguf)->metadata()));
    chat_template_ = std::make_unique<ChatTemplate>(style);
    worker_ = std::make_unique<ScriptedWorker>(scheduler_, *tokenizer_);
    model_.model_id = "test-model";
    model_.tokenizer = tokenizer_.get();
    model_.chat_template = chat_template_.get();
    model_.scheduler = &scheduler_;
    model_.metrics = &metrics_;
    model_.not_serving_reason = [this] { return serving_ ? std::string() : "no worker is ready"; };
    HttpServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.api_keys = std::move(keys);
    options.max_body_bytes = 64 << 10;
    HttpPagesSource pages;
    pages.status = [] { return v1::Status(); };
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        StartHttpApi(std::move(options), model_, std::move(pages));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    worker_.reset();
    scheduler_.Shutdown();
  }

  httplib::Result Post(const std::string& path, const Json& body) {
    return client_->Post(path.c_str(), body.dump(), "application/json");
  }
  // The events of a server-sent stream, [DONE] as a string.
  static std::vector<Json> Events(const std::string& body) {
    std::vector<Json> events;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      const size_t end = body.find("\n\n", at);
      const std::string data = body.substr(at + 6, end - at - 6);
      events.push_back(data == "[DONE]" ? Json("[DONE]") : Json::parse(data));
      at = end;
    }
    return events;
  }

  RequestScheduler scheduler_{SchedulerLimits{4, 1}};
  RequestMetrics metrics_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<ScriptedWorker> worker_;
  HttpModel model_;
  bool serving_ = true;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

Json WeatherChat() {
  return {{"model", "test-model"},
          {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
          {"tools", {kWeatherTool}},
          {"temperature", 0}};
}

TEST_F(HttpApiTest, Qwen3ToolCallsComeBackAsToolCallsWithReasoningApart) {
  Start("tiny-f32.gguf", ChatTemplateStyle::kQwen3);
  worker_->AnswerNext(kQwen3Output);
  httplib::Result res = Post("/v1/chat/completions", WeatherChat());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  // The tools reached the prompt as the template renders them.
  EXPECT_THAT(worker_->prompt(), HasSubstr("<tools>\n{\"type\": \"function\", \"function\": "
                                           "{\"name\": \"get_weather\""));
  const Json body = Json::parse(res->body);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["reasoning_content"],
            "The user asks for the weather in Paris. I should call get_weather.");
  EXPECT_EQ(choice["message"]["content"], "I will look it up.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_THAT(call["id"].get<std::string>(), HasSubstr("call_"));
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(body["usage"]["completion_tokens"].get<int>() + body["usage"]["prompt_tokens"].get<int>(),
            body["usage"]["total_tokens"].get<int>());
}

TEST_F(HttpApiTest, StreamedToolCallsNeverLeakMarkupIntoContent) {
  Start("tiny-f32.gguf", ChatTemplateStyle::kQwen3);
  worker_->AnswerNext(kQwen3Output);
  Json request = WeatherChat();
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  httplib::Result res = Post("/v1/chat/completions", request);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<Json> events = Events(res->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content, reasoning, arguments, name, finish;
  bool usage_seen = false;
  for (const Json& e : events) {
    if (e.is_string()) continue;
    if (e["choices"].empty()) {
      usage_seen = e["usage"]["completion_tokens"].get<int>() > 0;
      continue;
    }
    const Json& delta = e["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("tool_calls")) {
      for (const Json& c : delta["tool_calls"]) {
        EXPECT_EQ(c["index"], 0);
        if (c["function"].contains("name")) name = c["function"]["name"];
        arguments += c["function"]["arguments"].get<std::string>();
      }
    }
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "I will look it up.");
  EXPECT_THAT(content + reasoning, Not(HasSubstr("<tool_call>")));
  EXPECT_THAT(reasoning, HasSubstr("I should call get_weather."));
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(Json::parse(arguments), Json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_TRUE(usage_seen);
}

TEST_F(HttpApiTest, Qwen35XmlCallsAreTypedByTheToolSchema) {
  Start("qwen35moe-tiny-f32.gguf", ChatTemplateStyle::kQwen35);
  worker_->AnswerNext(kQwen35Output);
  httplib::Result res = Post("/v1/chat/completions", WeatherChat());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_THAT(worker_->prompt(), HasSubstr("<tools>"));
  const Json body = Json::parse(res->body);
  const Json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "The user wants Paris weather for 3 days.");
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(Json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris", "days": 3})"));
}

TEST_F(HttpApiTest, AToolResultTurnRendersAndAMalformedCallIsContent) {
  Start("tiny-f32.gguf", ChatTemplateStyle::kQwen3);
  worker_->AnswerNext("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n</tool_call>");
  Json request = WeatherChat();
  request["messages"].push_back(
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}});
  request["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny, 21 C"}});
  httplib::Result res = Post("/v1/chat/completions", request);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_THAT(worker_->prompt(), HasSubstr("<tool_response>\nsunny, 21 C\n</tool_response>"));
  const Json body = Json::parse(res->body);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_THAT(choice["message"]["content"].get<std::string>(), HasSubstr("<tool_call>"));
}

TEST_F(HttpApiTest, AStopStringEndsTheAnswerBeforeIt) {
  Start("tiny-f32.gguf", ChatTemplateStyle::kQwen3);
  worker_->AnswerNext("alpha beta STOP gamma delta");
  Json request = {{"prompt", "say"}, {"stop", {"STOP"}}, {"temperature", 0}};
  httplib::Result res = Post("/v1/completions", request);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json body = Json::parse(res->body);
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "alpha beta ");
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_TRUE(worker_->cancelled());
}

TEST_F(HttpApiTest, AnthropicMessagesGetToolUseBlocks) {
  Start("tiny-f32.gguf", ChatTemplateStyle::kQwen3);
  worker_->AnswerNext("I will look it up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Paris\"}}\n</tool_call>");
  Json request = {{"model", "test-model"},
                  {"max_tokens", 64},
                  {"system", "Be brief."},
                  {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                  {"tools",
                   {{{"name", "get_weather"},
                     {"description", "Current weather of a city."},
                     {"input_schema", kWeatherTool["function"]["parameters"]}}}}};
  httplib::Result res = Post("/v1/messages", request);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  // Thinking is off unless asked for: the prompt holds the empty think block.
  EXPECT_THAT(worker_->prompt(), HasSubstr("<think>\n\n</think>\n\n"));
  EXPECT_THAT(worker_->prompt(), HasSubstr("Be brief."));
  const Json body = Json::parse(res->body);
  EXPECT_EQ(body["stop_reason"], "tool_use");
  ASSERT_EQ(body["content"].size(), 2u);
  EXPECT_EQ(body["content"][0]["type"], "text");
  EXPECT_EQ(body["content"][0]["text"], "I will look it up.");
  EXPECT_EQ(body["content"][1]["type"], "tool_use");
  EXPECT_EQ(body["content"][1]["name"], "get_weather");
  EXPECT_EQ(body["content"][1]["input"], Json::parse(R"({"city": "Paris"})"));
}

TEST_F(HttpApiTest, RefusalsAnswerWithTheStatusAndShapeEachClientExpects) {
  Start("tiny-f32.gguf", ChatTemplateStyle::kQwen3, ApiKeys({"sekrit"}));
  httplib::Result res = Post("/v1/chat/completions", WeatherChat());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(Json::parse(res->body)["error"]["type"], "authentication_error");
  res = client_->Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  client_->set_bearer_token_auth("sekrit");
  res = client_->Post("/v1/chat/completions", "{\"messages\": [", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(Json::parse(res->body)["error"]["message"].get<std::string>(),
              HasSubstr("not valid JSON"));
  res = Post("/v1/chat/completions", {{"messages", "hi"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Json::parse(res->body)["error"]["param"], "messages");
  Json bad_tool = WeatherChat();
  bad_tool["tools"][0]["function"]["parameters"] = "{not json";
  res = Post("/v1/chat/completions", bad_tool);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(res->body, HasSubstr("tools[0].function.parameters must be an object"));
  res = client_->Post("/v1/chat/completions", std::string(100 << 10, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_THAT(res->body, HasSubstr("http_max_body_bytes"));
  // Anthropic's shape on its route.
  res = Post("/v1/messages", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Json::parse(res->body)["type"], "error");
  EXPECT_EQ(Json::parse(res->body)["error"]["message"], "max_tokens is missing");
  // Longer than the worker's context (8192): never fits, so no retry.
  res = Post("/v1/completions", {{"prompt", std::vector<int>(9000, 1)}, {"max_tokens", 1}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "context_length_exceeded");
  EXPECT_THAT(res->body, HasSubstr("the prompt is 9000 tokens"));
  EXPECT_TRUE(res->get_header_value("Retry-After").empty());

  serving_ = false;
  res = Post("/v1/chat/completions", WeatherChat());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_FALSE(res->get_header_value("Retry-After").empty());
  res = client_->Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(Json::parse(res->body)["reason"], "no worker is ready");

  // Each refusal counted by its outcome.
  const RequestMetricsSnapshot counts = metrics_.Snapshot();
  EXPECT_EQ(counts.requests.at({"http", "unauthorized"}), 1u);
  EXPECT_EQ(counts.requests.at({"http", "invalid"}), 6u);
  EXPECT_EQ(counts.requests.at({"http", "rejected"}), 1u);
}

}  // namespace
}  // namespace moetier
