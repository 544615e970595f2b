// A stand-in for moetier-worker's daemon mode, for the supervisor tests.
// It joins the daemon like a worker (worker_channel.h), attaches to the
// store, checks magic, version and fingerprint, acquires every expert (hit
// or miss path) and compares its bytes with the model file read on its own,
// compares every dense tensor, reports, then heartbeats. Files in the
// report folder steer it: crash-N (crash once), crash-always-N (crash after
// every start), hang-N (stop heartbeating), never-connect-N (do not join),
// kill-in-miss-N (request expert 1 of layer 1 on attach, then SIGKILL
// itself while that miss is still in flight).
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/strings/str_format.h"
#include "gguf/gguf_reader.h"
#include "gguf/model_fingerprint.h"
#include "store/store_client.h"
#include "store/worker_channel.h"

namespace {

using moetier::GgufModel;
using moetier::GgufTensorInfo;
namespace store = moetier::store;

std::atomic<bool> g_terminate{false};

struct Flags {
  std::string socket;
  uint32_t index = 0;
  std::string device;
  std::string model;
  std::string report_dir = ".";
  int heartbeat_ms = 20;
  bool hold_pin = false;
};

std::optional<std::string> Value(std::string_view arg, std::string_view name) {
  if (arg.size() > name.size() && arg.substr(0, name.size()) == name && arg[name.size()] == '=') {
    return std::string(arg.substr(name.size() + 1));
  }
  return std::nullopt;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (auto v = Value(a, store::kWorkerFlagControlSocket)) f.socket = *v;
    if (auto v = Value(a, store::kWorkerFlagWorkerIndex)) f.index = std::stoul(*v);
    if (auto v = Value(a, store::kWorkerFlagDevice)) f.device = *v;
    if (auto v = Value(a, store::kWorkerFlagModel)) f.model = *v;
    if (auto v = Value(a, "--fake-report-dir")) f.report_dir = *v;
    if (auto v = Value(a, "--fake-heartbeat-ms")) f.heartbeat_ms = std::stoi(*v);
    if (a == "--fake-hold-pin") f.hold_pin = true;
  }
  return f;
}

void Report(const Flags& f, const std::string& name, const std::string& text) {
  const std::string path = f.report_dir + "/" + name;
  {
    std::ofstream out(path + ".tmp");
    out << text << "\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());  // readers never see half a report
}

bool Exists(const Flags& f, const std::string& name) {
  return std::filesystem::exists(f.report_dir + "/" + name + "-" + std::to_string(f.index));
}

[[noreturn]] void Crash() {
  rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
  std::abort();
}

bool Equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// Expert e's rows [row0, row0 + rows) of a {K, N, n_expert} tensor (SPEC §1.7).
std::span<const uint8_t> ExpertRows(const GgufModel& model, const GgufTensorInfo& t, uint32_t e,
                                    int64_t row0, int64_t rows) {
  const uint64_t row_bytes = t.row_bytes();
  return model.TensorData(t).subspan(
      (uint64_t{e} * static_cast<uint64_t>(t.ne[1]) + static_cast<uint64_t>(row0)) * row_bytes,
      static_cast<uint64_t>(rows) * row_bytes);
}

std::string Verify(const GgufModel& model, store::StoreClient& client, uint32_t* experts) {
  for (uint32_t l = 0; l < client.n_layer(); ++l) {
    if (client.layer(l).expert_bytes == 0) continue;
    const std::string b = absl::StrFormat("blk.%d.", l);
    const GgufTensorInfo* fused = model.FindTensor(b + "ffn_gate_up_exps.weight");
    const GgufTensorInfo* gate = model.FindTensor(b + "ffn_gate_exps.weight");
    const GgufTensorInfo* up = model.FindTensor(b + "ffn_up_exps.weight");
    const GgufTensorInfo* down = model.FindTensor(b + "ffn_down_exps.weight");
    for (uint32_t e = 0; e < client.n_expert(); ++e) {
      absl::StatusOr<store::ExpertPin> pin = client.Acquire(l, e, 10000);
      if (!pin.ok()) return absl::StrFormat("acquire %d/%d: %s", l, e, pin.status().message());
      const int64_t n_ff = pin->desc().gate.rows;
      const bool same =
          fused != nullptr
              ? Equal(pin->gate(), ExpertRows(model, *fused, e, 0, n_ff)) &&
                    Equal(pin->up(), ExpertRows(model, *fused, e, n_ff, n_ff))
              : Equal(pin->gate(), ExpertRows(model, *gate, e, 0, gate->ne[1])) &&
                    Equal(pin->up(), ExpertRows(model, *up, e, 0, up->ne[1]));
      if (!same || !Equal(pin->down(), ExpertRows(model, *down, e, 0, down->ne[1]))) {
        return absl::StrFormat("expert %d of layer %d differs from the file", e, l);
      }
      ++*experts;
      client.Heartbeat();
    }
  }
  for (const store::DenseTensorEntry& t : client.dense_tensors()) {
    const GgufTensorInfo* info = model.FindTensor(t.name);
    if (info == nullptr || !Equal(client.DenseData(t), model.TensorData(*info))) {
      return absl::StrFormat("dense tensor %s differs from the file", t.name);
    }
  }
  return "";
}

int Run(const Flags& f) {
  if (Exists(f, "never-connect")) {
    while (!g_terminate.load()) pause();
    return 0;
  }
  absl::StatusOr<store::DaemonAdmission> admission =
      store::JoinDaemon(f.socket, f.index, f.device, 5000);
  if (!admission.ok()) {
    Report(f, absl::StrFormat("worker-%d-%d.error", f.index, getpid()),
           std::string(admission.status().message()));
    return 3;
  }
  absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::Open(f.model);
  if (!model.ok()) {
    Report(f, absl::StrFormat("worker-%d-%d.error", f.index, getpid()),
           std::string(model.status().message()));
    return 4;
  }
  store::AttachOptions options;
  options.worker_index = f.index;
  options.expected_fingerprint = store::ModelFingerprint(**model);
  absl::StatusOr<std::unique_ptr<store::StoreClient>> client =
      store::StoreClient::Attach(admission->segment_fd, options);
  close(admission->segment_fd);
  if (!client.ok()) {
    Report(f, absl::StrFormat("worker-%d-%d.error", f.index, getpid()),
           std::string(client.status().message()));
    return 5;
  }
  if (admission->welcome.model_fingerprint != options.expected_fingerprint) {
    Report(f, absl::StrFormat("worker-%d-%d.error", f.index, getpid()), "welcome fingerprint");
    return 6;
  }
  if (Exists(f, "kill-in-miss")) {
    std::filesystem::remove(f.report_dir + "/kill-in-miss-" + std::to_string(f.index));
    store::StoreClient* c = client->get();
    std::thread([c] { (void)c->Acquire(1, 1, 10000); }).detach();
    usleep(200 * 1000);
    raise(SIGKILL);
  }
  uint32_t experts = 0;
  const std::string problem = Verify(**model, **client, &experts);
  if (!problem.empty()) {
    Report(f, absl::StrFormat("worker-%d-%d.error", f.index, getpid()), problem);
    return 7;
  }
  const store::WorkerStatusPage& page = (*client)->status_page();
  Report(f, absl::StrFormat("worker-%d-%d.ok", f.index, getpid()),
         absl::StrFormat("ok epoch=%d experts=%d hits=%d misses=%d", page.epoch, experts,
                         page.ram_hits, page.ram_misses));
  std::optional<store::ExpertPin> held;
  if (f.hold_pin) {
    absl::StatusOr<store::ExpertPin> pin = (*client)->Acquire(0, 0, 10000);
    if (pin.ok()) held = std::move(*pin);
  }
  while (!g_terminate.load()) {
    (*client)->Heartbeat();
    if (Exists(f, "crash")) {
      std::filesystem::remove(f.report_dir + "/crash-" + std::to_string(f.index));
      Crash();
    }
    if (Exists(f, "crash-always")) Crash();
    if (Exists(f, "hang")) {
      std::filesystem::remove(f.report_dir + "/hang-" + std::to_string(f.index));
      while (true) pause();  // no more heartbeats; only SIGKILL ends this
    }
    pollfd pfd{admission->control_fd, POLLIN, 0};
    if (poll(&pfd, 1, f.heartbeat_ms) > 0) {
      char byte;
      if (recv(admission->control_fd, &byte, 1, MSG_DONTWAIT) == 0) break;  // daemon gone
    }
  }
  held.reset();
  Report(f, absl::StrFormat("worker-%d-%d.stopped", f.index, getpid()), "stopped");
  close(admission->control_fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction action {};
  action.sa_handler = [](int) { g_terminate.store(true); };
  sigaction(SIGTERM, &action, nullptr);
  // The daemon's start-up check: the fake serves any model.
  for (int i = 1; i < argc; ++i) {
    if (Value(argv[i], store::kWorkerFlagCheckModel)) return 0;
  }
  return Run(ParseFlags(argc, argv));
}
