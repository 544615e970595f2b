// The HTTP/1.1 listener of the front door (cpp-httplib): binds
// http_listen_address, checks the API key of every request but /health (and
// the status page's own HTML, which holds no data), bounds request bodies
// and answers every failure (404, 413, a throwing handler) in the JSON error
// shape of the path's API. What it serves is registered by the caller.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "http/api_keys.h"
#include "stats/request_metrics.h"

namespace httplib {
class Server;
}

namespace moetier {

struct HttpServerOptions {
  std::string listen_address;  // HOST:PORT; port 0 picks a free one
  ApiKeys api_keys;            // empty: no key needed
  size_t max_body_bytes = 4 << 20;
  // Threads serving connections; a streamed generation holds one for its
  // whole length, so this bounds the streams served at once (the rest wait
  // for a thread, then meet the scheduler's queue limit).
  int threads = 32;
  // How long a write may block on a client that does not read, before the
  // client is taken as gone (its generation is then cancelled).
  int write_timeout_s = 30;
  int read_timeout_s = 30;
  // Counts the refusals made here (a missing key, a body over the limit);
  // may be null.
  RequestMetrics* metrics = nullptr;
};

class HttpServer {
 public:
  // `server_stopping` turns true when Shutdown begins: a handler that runs
  // long (a streamed generation) polls it and ends, so Shutdown can join.
  using RouteInstaller =
      std::function<void(httplib::Server& server, std::function<bool()> server_stopping)>;

  // INVALID_ARGUMENT for a malformed listen address; UNAVAILABLE when the
  // address cannot be bound. `install_routes` runs before the first request.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           const RouteInstaller& install_routes);
  ~HttpServer();  // Shutdown()

  // Stops accepting, tells handlers to end (running streams end at their
  // next token) and joins. Idempotent.
  void Shutdown();

  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::shared_ptr<std::atomic<bool>> stopping_ = std::make_shared<std::atomic<bool>>(false);
  int port_ = 0;
};

// Splits "HOST:PORT" ("[::1]:8080" for IPv6). INVALID_ARGUMENT otherwise.
absl::Status ParseListenAddress(const std::string& address, std::string* host, int* port);

}  // namespace moetier
