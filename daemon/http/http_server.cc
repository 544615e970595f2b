#include "http/http_server.h"

#include <httplib.h>

#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "http/api_error.h"
#include "log/daemon_log.h"

namespace moetier {
namespace {

// Paths served without a key: the health probe, and the status page's HTML
// (it holds no data; its data calls carry the key the user types in).
bool IsOpenPath(const std::string& method, const std::string& path) {
  return path == "/health" || (method == "GET" && path == "/");
}

}  // namespace

absl::Status ParseListenAddress(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "http_listen_address '%s' is not HOST:PORT (e.g. 127.0.0.1:8080)", address));
  }
  std::string h = address.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']' || h.size() < 3) {
      return absl::InvalidArgumentError(
          absl::StrFormat("http_listen_address '%s': unbalanced [ ] around the host", address));
    }
    h = h.substr(1, h.size() - 2);
  }
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("http_listen_address '%s': the port is not 0..65535", address));
  }
  *host = std::move(h);
  *port = p;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    HttpServerOptions options, const RouteInstaller& install_routes) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseListenAddress(options.listen_address, &host, &port); !s.ok()) {
    return s;
  }
  std::unique_ptr<HttpServer> self(new HttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *self->server_;
  const int threads = std::max(options.threads, 1);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_payload_max_length(options.max_body_bytes);
  server.set_read_timeout(options.read_timeout_s, 0);
  server.set_write_timeout(options.write_timeout_s, 0);

  auto keys = std::make_shared<ApiKeys>(std::move(options.api_keys));
  RequestMetrics* metrics = options.metrics;
  server.set_pre_routing_handler(
      [keys, metrics](const httplib::Request& request, httplib::Response& response) {
        if (keys->empty() || IsOpenPath(request.method, request.path)) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        // Anthropic's SDK sends its key as x-api-key; OpenAI's as a bearer token.
        const bool accepted =
            keys->Accepts(request.get_header_value("Authorization")) ||
            (request.has_header("x-api-key") &&
             keys->Accepts("Bearer " + request.get_header_value("x-api-key")));
        if (accepted) return httplib::Server::HandlerResponse::Unhandled;
        HttpError error;
        error.status = 401;
        error.message = request.has_header("Authorization") || request.has_header("x-api-key")
                            ? "the API key is not valid"
                            : "this server needs an API key: send Authorization: Bearer <key>";
        WriteError(error, ErrorShapeForPath(request.path), &response);
        response.set_header("WWW-Authenticate", "Bearer");
        if (metrics != nullptr) metrics->RecordRequest("http", RequestOutcome::kUnauthorized, 0);
        return httplib::Server::HandlerResponse::Handled;
      });
  const size_t max_body = options.max_body_bytes;
  // Runs for every status >= 400; fills only the bodies httplib left empty
  // (its own 404 and 413), never a handler's own error.
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body, metrics](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    HttpError error;
    error.status = response.status;
    if (response.status == 404) {
      error.message = absl::StrFormat("no route %s %s", request.method, request.path);
    } else if (response.status == 413) {
      error.message = absl::StrFormat(
          "the request body is larger than the limit http_max_body_bytes=%d", max_body);
      if (metrics != nullptr) metrics->RecordRequest("http", RequestOutcome::kInvalid, 0);
    } else if (response.status == 405) {
      error.message = absl::StrFormat("%s is not allowed on %s", request.method, request.path);
    } else {
      error.message = absl::StrFormat("HTTP %d", response.status);
    }
    WriteError(error, ErrorShapeForPath(request.path), &response);
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler(
      [](const httplib::Request& request, httplib::Response& response, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogWarning("HTTP %s %s failed: %s", request.method, request.path, what);
        HttpError error;
        error.status = 500;
        error.message = "internal error: " + what;
        WriteError(error, ErrorShapeForPath(request.path), &response);
      });
  install_routes(server, [stopping = self->stopping_] { return stopping->load(); });

  if (port == 0) {
    port = server.bind_to_any_port(host);
    if (port < 0) {
      return absl::UnavailableError(
          absl::StrFormat("cannot bind HTTP on %s (any port)", host));
    }
  } else if (!server.bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot bind HTTP on %s: the address is in use or not this machine's",
        options.listen_address));
  }
  self->port_ = port;
  self->thread_ = std::thread([srv = self->server_.get()] { srv->listen_after_bind(); });
  return self;
}

void HttpServer::Shutdown() {
  if (stopping_->exchange(true)) return;
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

HttpServer::~HttpServer() { Shutdown(); }

}  // namespace moetier
