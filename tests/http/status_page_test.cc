// The status page's routes: the embedded page and its settings, the Status
// as JSON, and POST /api/budget's answers to good, bad and refused requests.
#include "http/status_page.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "fake_status.h"
#include "gtest/gtest.h"

namespace moetier {
namespace {

using http_test::FakeStatus;
using nlohmann::json;

// A server on 127.0.0.1 at a free port, stopped when the fixture goes.
class PageServer {
 public:
  explicit PageServer(StatusPageOptions options) {
    RegisterStatusPage(server_, std::move(options));
    port_ = server_.bind_to_any_port("127.0.0.1");
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the listener runs would be lost and join() would hang.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~PageServer() {
    server_.stop();
    listener_.join();
  }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread listener_;
};

StatusPageOptions Options(bool with_budget) {
  StatusPageOptions options;
  options.status_source = [] { return FakeStatus(0); };
  if (with_budget) {
    options.set_budget =
        [](const v1::SetBudgetRequest& request) -> absl::StatusOr<v1::SetBudgetResponse> {
      if (request.device() == "cpu") {
        return absl::FailedPreconditionError("the cpu worker has no expert cache");
      }
      if (request.device() != "cuda:0") {
        return absl::NotFoundError("no worker on " + request.device());
      }
      if (request.expert_cache_mib() == 0) return absl::InvalidArgumentError("0 MiB is no cache");
      v1::SetBudgetResponse response;
      response.set_expert_cache_mib(request.expert_cache_mib() / 3 * 3);
      response.set_expert_cache_bytes(response.expert_cache_mib() << 20);
      return response;
    };
  }
  return options;
}

json ErrorOf(const httplib::Result& result) {
  const json body = json::parse(result->body, nullptr, false);
  EXPECT_TRUE(body.contains("error")) << result->body;
  EXPECT_TRUE(body["error"]["message"].is_string());
  EXPECT_TRUE(body["error"]["type"].is_string());
  EXPECT_TRUE(body["error"]["code"].is_string());
  return body["error"];
}

TEST(StatusPageTest, PageIsOneSelfContainedHtmlFileWithItsSettings) {
  const std::string plain = RenderStatusPageHtml(false, false);
  EXPECT_NE(plain.find("<canvas id=\"heatmap\""), std::string::npos);
  EXPECT_NE(plain.find(R"({"apiKeysConfigured":false,"budgetEditable":false})"), std::string::npos);
  EXPECT_EQ(plain.find("__MOETIER_PAGE_SETTINGS__"), std::string::npos);
  // No external assets: nothing is loaded from another URL.
  EXPECT_EQ(plain.find("src=\"http"), std::string::npos);
  EXPECT_EQ(plain.find("<link"), std::string::npos);
  const std::string keyed = RenderStatusPageHtml(true, true);
  EXPECT_NE(keyed.find(R"({"apiKeysConfigured":true,"budgetEditable":true})"), std::string::npos);
}

TEST(StatusPageTest, RootServesThePage) {
  PageServer server(Options(true));
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("\"budgetEditable\":true"), std::string::npos);
  EXPECT_NE(page->body.find("id=\"tokens-per-s\""), std::string::npos);
}

TEST(StatusPageTest, ApiStatusIsTheStatusAsJsonWithZeroFieldsPrinted) {
  PageServer server(Options(false));
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result result = client.Get("/api/status");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  const json status = json::parse(result->body, nullptr, false);
  ASSERT_FALSE(status.is_discarded()) << result->body;
  EXPECT_EQ(status["nLayer"], 24);
  EXPECT_EQ(status["nExpert"], 64);
  ASSERT_EQ(status["layers"].size(), 24u);
  EXPECT_EQ(status["layers"][0]["tier"].size(), 64u);
  EXPECT_EQ(status["workers"][1]["device"], "cuda:0");
  // Zero-valued fields are present, not omitted.
  EXPECT_EQ(status["workers"][0]["restarts"], 0);
  EXPECT_EQ(status["queue"]["queuedRequests"], 0);
}

TEST(StatusPageTest, BudgetChangeAnswersTheNewSize) {
  PageServer server(Options(true));
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result result = client.Post(
      "/api/budget", R"({"device": "cuda:0", "expert_cache_mib": 4097})", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200) << result->body;
  const json body = json::parse(result->body, nullptr, false);
  EXPECT_EQ(body["expertCacheMib"], "4095");  // uint64 is a string in proto3 JSON
  EXPECT_EQ(body["expertCacheBytes"], std::to_string(uint64_t{4095} << 20));
}

TEST(StatusPageTest, BudgetErrorsAreOpenAiStyle) {
  PageServer server(Options(true));
  httplib::Client client("127.0.0.1", server.port());
  struct Case {
    const char* body;
    int http_status;
    const char* code;
  };
  for (const Case& c :
       {Case{"not json", 400, "invalid_argument"}, Case{"[1, 2]", 400, "invalid_argument"},
        Case{R"({"expert_cache_mib": 10})", 400, "invalid_argument"},
        Case{R"({"device": "cuda:0", "expert_cache_mib": -5})", 400, "invalid_argument"},
        Case{R"({"device": "cuda:0", "expert_cache_mib": 1.5})", 400, "invalid_argument"},
        Case{R"({"device": "cuda:0", "expert_cache_mib": "10"})", 400, "invalid_argument"},
        Case{R"({"device": "cuda:0", "expert_cache_mib": 0})", 400, "invalid_argument"},
        Case{R"({"device": "cuda:7", "expert_cache_mib": 64})", 404, "not_found"},
        Case{R"({"device": "cpu", "expert_cache_mib": 64})", 409, "failed_precondition"}}) {
    const httplib::Result result = client.Post("/api/budget", c.body, "application/json");
    ASSERT_TRUE(result) << c.body;
    EXPECT_EQ(result->status, c.http_status) << c.body;
    EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(ErrorOf(result)["code"], c.code) << c.body;
  }
}

TEST(StatusPageTest, BudgetIsForbiddenWithoutASetter) {
  PageServer server(Options(false));
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result result = client.Post(
      "/api/budget", R"({"device": "cuda:0", "expert_cache_mib": 64})", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 403);
  const json error = ErrorOf(result);
  EXPECT_EQ(error["type"], "permission_error");
  EXPECT_EQ(error["code"], "budget_change_disabled");
}

TEST(StatusPageTest, MissingStatusSourceIsUnavailableNotACrash) {
  PageServer server(StatusPageOptions{});
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result result = client.Get("/api/status");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 503);
  EXPECT_EQ(ErrorOf(result)["code"], "unavailable");
}

}  // namespace
}  // namespace moetier
