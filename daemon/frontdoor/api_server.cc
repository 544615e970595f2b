#include "frontdoor/api_server.h"

#include <grp.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_format.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "log/daemon_log.h"

namespace moetier {
namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(2);

// OK when nobody answers on `path` (the file is missing or stale and has
// been removed); an error when a live process serves it or it is not a socket.
absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot inspect %s: %s", path, std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s exists and is not a socket; remove it or choose another "
                        "api_socket_path",
                        path));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "another process already serves %s (is moetierd running?); stop it or choose another "
        "api_socket_path",
        path));
  }
  if (unlink(path.c_str()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot remove the stale socket %s: %s", path, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status MakeParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return absl::OkStatus();
  const std::string dir = path.substr(0, slash);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot create %s for the API socket: %s", dir, std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Why gRPC could not listen on HOST:PORT: it says only that it failed, so
// bind the address the way it does (SO_REUSEADDR, no SO_REUSEPORT) and
// report what the kernel says.
std::string TcpListenProblem(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      e != 0) {
    return gai_strerror(e);
  }
  std::string problem = "unknown reason";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      problem = errno == EADDRINUSE ? "address in use (another process listens on it)"
                                    : std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return problem;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options,
                                                             grpc::Service* service) {
  if (absl::Status s = MakeParentDirectory(options.socket_path); !s.ok()) return s;
  if (absl::Status s = ClaimSocketPath(options.socket_path); !s.ok()) return s;

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // Reflection finds descriptors in the generated pool; naming one keeps
  // the linker from dropping grpc.health.v1's.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which lets a second daemon share
  // the port silently; one listener per address.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort("unix:" + options.socket_path, grpc::InsecureServerCredentials());
  std::unique_ptr<ApiServer> server(new ApiServer());
  if (!options.listen_address.empty()) {
    builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(),
                             &server->tcp_port_);
  }
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(service);
  // The socket is created by BuildAndStart; the umask makes it no wider than
  // the configured mode from its first instant.
  const mode_t old_umask = umask(~options.socket_mode & 0777);
  server->server_ = builder.BuildAndStart();
  umask(old_umask);
  const bool tcp_failed = !options.listen_address.empty() && server->tcp_port_ == 0;
  if (server->server_ != nullptr && tcp_failed) server->server_->Shutdown();
  if (tcp_failed) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s (listen_address): %s", options.listen_address,
        TcpListenProblem(options.listen_address)));
  }
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrFormat("cannot serve the API on unix:%s", options.socket_path));
  }
  server->socket_path_ = options.socket_path;
  if (chmod(options.socket_path.c_str(), options.socket_mode) != 0) {
    LogWarning("cannot set mode %o on %s: %s", options.socket_mode, options.socket_path,
               std::strerror(errno));
  }
  if (!options.socket_group.empty()) {
    const group* g = getgrnam(options.socket_group.c_str());
    if (g == nullptr) {
      LogWarning("group '%s' does not exist; %s keeps the daemon's group (create the group "
                 "with `groupadd %s` to share the API with its members)",
                 options.socket_group, options.socket_path, options.socket_group);
    } else if (chown(options.socket_path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      LogWarning("cannot give %s to group '%s': %s", options.socket_path, options.socket_group,
                 std::strerror(errno));
    }
  }
  server->SetServing(false);
  return server;
}

ApiServer::~ApiServer() { Shutdown(); }

void ApiServer::SetServing(bool serving) {
  if (server_ == nullptr || shut_down_) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  health->SetServingStatus("moetier.v1.Moetier", serving);
}

void ApiServer::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->Shutdown();
  }
  server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server_->Wait();
  unlink(socket_path_.c_str());
}

}  // namespace moetier
