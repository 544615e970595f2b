#include "commands/serve_command.h"

#include "gtest/gtest.h"

namespace moetier::client {
namespace {

TEST(ServeCommandTest, ReadsThePortOfTheHttpLine) {
  EXPECT_EQ(HttpPortFromLog("2026-12-02 16:29:12.141 I moetierd[7] serving the HTTP API on "
                            "127.0.0.1:0 (port 41905)\n"),
            41905);
  EXPECT_EQ(HttpPortFromLog("x I moetierd[7] serving the HTTP API on [::1]:8080 (port 8080), API "
                            "keys required\nlater line\n"),
            8080);
  // A restarted listener's later line wins; one without a port number is no answer.
  EXPECT_EQ(HttpPortFromLog("serving the HTTP API on a:0 (port 1000)\n"
                            "serving the HTTP API on a:0 (port 2000)"),
            2000);
  EXPECT_EQ(HttpPortFromLog("serving the API on unix:/tmp/s and 127.0.0.1:9 (port 9)\n"),
            std::nullopt);
  EXPECT_EQ(HttpPortFromLog("serving the HTTP API on a:0 (port x)\n"), std::nullopt);
  EXPECT_EQ(HttpPortFromLog("serving the HTTP API on a:0 (port 70000)\n"), std::nullopt);
  EXPECT_EQ(HttpPortFromLog(""), std::nullopt);
}

TEST(ServeCommandTest, BracketsIpv6Hosts) {
  EXPECT_EQ(HostAndPort("127.0.0.1", 8080), "127.0.0.1:8080");
  EXPECT_EQ(HostAndPort("localhost", 0), "localhost:0");
  EXPECT_EQ(HostAndPort("::1", 9000), "[::1]:9000");
}

TEST(ServeCommandTest, NamesTheModelAsTheDaemonDoes) {
  EXPECT_EQ(ServedModelId("/models/Qwen3-30B-A3B-Q4_K_M.gguf"), "Qwen3-30B-A3B-Q4_K_M");
  EXPECT_EQ(ServedModelId("big-00001-of-00003.gguf"), "big");
  EXPECT_EQ(ServedModelId("dir/plain"), "plain");
  EXPECT_EQ(ServedModelId("dir/.gguf"), ".gguf");
  EXPECT_EQ(ServedModelId("dir/"), "model");
}

}  // namespace
}  // namespace moetier::client
