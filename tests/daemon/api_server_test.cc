// The front door's server plumbing: socket claiming and permissions.
#include "frontdoor/api_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "moetier/v1/moetier.grpc.pb.h"

namespace moetier {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/moetier_api_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A socket file nobody listens on, as a crashed daemon leaves behind.
void MakeStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
}

TEST(ApiServerTest, ServesOnAUnixSocketWithTheConfiguredModeAndRemovesIt) {
  TempDir dir;
  v1::Moetier::Service service;
  ApiServerOptions options;
  options.socket_path = dir.File("sub/api.sock");  // the directory is created
  options.socket_mode = 0660;
  absl::StatusOr<std::unique_ptr<ApiServer>> server = ApiServer::Start(options, &service);
  ASSERT_TRUE(server.ok()) << server.status();
  struct stat st {};
  ASSERT_EQ(stat(options.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  // An unimplemented method answers over the socket: the server is live.
  auto channel = grpc::CreateChannel("unix:" + options.socket_path,
                                     grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::Moetier::Stub> stub = v1::Moetier::NewStub(channel);
  grpc::ClientContext context;
  v1::TokenizeResponse response;
  EXPECT_EQ(stub->Tokenize(&context, v1::TokenizeRequest(), &response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  (*server)->Shutdown();
  EXPECT_FALSE(std::filesystem::exists(options.socket_path));
}

TEST(ApiServerTest, ReplacesAStaleSocketButNotALiveOne) {
  TempDir dir;
  v1::Moetier::Service service;
  ApiServerOptions options;
  options.socket_path = dir.File("api.sock");
  MakeStaleSocket(options.socket_path);
  absl::StatusOr<std::unique_ptr<ApiServer>> first = ApiServer::Start(options, &service);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<ApiServer>> second = ApiServer::Start(options, &service);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("already serves"), absl::string_view::npos);
  EXPECT_TRUE(std::filesystem::exists(options.socket_path)) << "the live socket was removed";
}

TEST(ApiServerTest, RefusesAPathThatIsNotASocket) {
  TempDir dir;
  v1::Moetier::Service service;
  ApiServerOptions options;
  options.socket_path = dir.File("api.sock");
  std::ofstream(options.socket_path) << "precious";
  absl::StatusOr<std::unique_ptr<ApiServer>> server = ApiServer::Start(options, &service);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("not a socket"), absl::string_view::npos);
  std::ifstream in(options.socket_path);
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "precious");
}

TEST(ApiServerTest, ListensOnTcpOnlyWhenAsked) {
  TempDir dir;
  v1::Moetier::Service service;
  ApiServerOptions options;
  options.socket_path = dir.File("api.sock");
  absl::StatusOr<std::unique_ptr<ApiServer>> unix_only = ApiServer::Start(options, &service);
  ASSERT_TRUE(unix_only.ok());
  EXPECT_EQ((*unix_only)->tcp_port(), 0);
  (*unix_only)->Shutdown();
  options.listen_address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<ApiServer>> tcp = ApiServer::Start(options, &service);
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  EXPECT_GT((*tcp)->tcp_port(), 0);
}

}  // namespace
}  // namespace moetier
