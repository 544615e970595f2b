#include "http/generation_route.h"

#include <httplib.h>

#include <chrono>

namespace moetier {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RequestOutcome OutcomeOfStatus(int status) {
  if (status < 400) return RequestOutcome::kOk;
  if (status == 401) return RequestOutcome::kUnauthorized;
  if (status == 429 || status == 503) return RequestOutcome::kRejected;
  if (status == 499) return RequestOutcome::kCancelled;
  return status < 500 ? RequestOutcome::kInvalid : RequestOutcome::kError;
}

void RespondError(const HttpModel& model, const HttpError& error, ErrorShape shape,
                  httplib::Response& response) {
  WriteError(error, shape, &response);
  if (model.metrics != nullptr) model.metrics->RecordRequest("http", OutcomeOfStatus(error.status), 0);
}

void ServeGeneration(const HttpModel& model, const std::function<bool()>& server_stopping,
                     const GenerationRequest& request, bool chat, ErrorShape shape,
                     const GenerationResponder& responder, httplib::Response& response) {
  const auto start = std::chrono::steady_clock::now();
  std::variant<std::unique_ptr<PreparedGeneration>, HttpError> prepared =
      PrepareGeneration(model, request, chat);
  if (HttpError* error = std::get_if<HttpError>(&prepared)) {
    RespondError(model, *error, shape, response);
    return;
  }
  std::shared_ptr<PreparedGeneration> generation =
      std::move(std::get<std::unique_ptr<PreparedGeneration>>(prepared));
  RequestMetrics* metrics = model.metrics;
  if (!request.stream) {
    std::unique_ptr<ResponseEvents> collector = responder.collector();
    const RequestOutcome outcome = generation->Run(*collector, server_stopping);
    if (metrics != nullptr) metrics->RecordRequest("http", outcome, SecondsSince(start));
    if (outcome == RequestOutcome::kCancelled) {
      HttpError error;
      error.status = 503;
      error.message = "moetierd is shutting down";
      WriteError(error, shape, &response);
      return;
    }
    responder.respond(*collector, response);
    return;
  }
  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Accel-Buffering", "no");
  auto streamer_factory = responder.streamer;
  response.set_chunked_content_provider(
      "text/event-stream",
      [generation, streamer_factory, server_stopping, metrics, start](size_t,
                                                                      httplib::DataSink& sink) {
        std::unique_ptr<ResponseEvents> streamer = streamer_factory(
            [&sink](std::string_view data) { return sink.write(data.data(), data.size()); });
        const RequestOutcome outcome = generation->Run(
            *streamer, [&sink, &server_stopping] { return server_stopping() || !sink.is_writable(); });
        if (metrics != nullptr) metrics->RecordRequest("http", outcome, SecondsSince(start));
        sink.done();
        return true;
      },
      // Runs when the response is over; a client gone before the first
      // byte leaves `generation` unrun, and dropping it cancels the job.
      [generation](bool) mutable { generation.reset(); });
}

}  // namespace moetier
