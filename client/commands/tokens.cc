#include "commands/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <istream>
#include <iterator>
#include <ostream>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "connection/interrupt.h"
#include "moetier/v1/moetier.grpc.pb.h"
#include "render/format.h"

namespace moetier::client {
namespace {

// Writes `bytes` to `path` (created or truncated), all or nothing reported.
absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot create %s: %s", path, std::strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      close(fd);
      return absl::UnavailableError(
          absl::StrFormat("cannot write %s: %s", path, std::strerror(error)));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot write %s: %s", path, std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

int RunScore(const ScoreOptions& options, const CommandContext& ctx) {
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  v1::ScoreRequest request;
  request.mutable_token_ids()->Assign(options.token_ids.begin(), options.token_ids.end());
  v1::ScoreResponse response;
  grpc::Status status;
  {
    CancelOnInterrupt cancel(&call);
    status = stub->Score(&call, request, &response);
  }
  if (!status.ok()) return ReportRpcError(ctx, "score", "Score", status);

  // The file must be exactly n_tokens rows of n_vocab floats; anything else
  // from the daemon is refused rather than written.
  const uint64_t n_tokens = options.token_ids.size();
  const uint64_t expected = n_tokens * static_cast<uint64_t>(response.n_vocab()) * sizeof(float);
  if (response.n_vocab() <= 0 || response.logits_f32le().size() != expected) {
    PrintError(
        ctx, "score",
        absl::StrFormat("the daemon sent %d bytes of logits with n_vocab %d for %d tokens; "
                        "expected %d tokens x n_vocab x 4 bytes",
                        response.logits_f32le().size(), response.n_vocab(), n_tokens, n_tokens));
    return kExitError;
  }
  if (absl::Status s = WriteFile(options.logits_out, response.logits_f32le()); !s.ok()) {
    PrintError(ctx, "score", std::string(s.message()));
    return kExitError;
  }
  *ctx.err << absl::StrFormat("wrote %d x %d float32 logits (%s) to %s", n_tokens,
                              response.n_vocab(), FormatBytes(expected), options.logits_out)
           << std::endl;
  return kExitOk;
}

int RunTokenize(const TokenizeOptions& options, const CommandContext& ctx) {
  v1::TokenizeRequest request;
  if (options.text_given) {
    request.set_text(options.text);
  } else {
    if (ctx.in_is_terminal) {
      PrintError(ctx, "tokenize", "no text; give it as words, with --text TEXT, or on stdin");
      return kExitUsage;
    }
    request.set_text(std::string(std::istreambuf_iterator<char>(*ctx.in), {}));
  }
  request.set_parse_special_tokens(options.special);
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  v1::TokenizeResponse response;
  grpc::Status status;
  {
    CancelOnInterrupt cancel(&call);
    status = stub->Tokenize(&call, request, &response);
  }
  if (!status.ok()) return ReportRpcError(ctx, "tokenize", "Tokenize", status);
  *ctx.out << absl::StrJoin(response.token_ids(), ",") << '\n';
  ctx.out->flush();
  return kExitOk;
}

int RunDetokenize(const DetokenizeOptions& options, const CommandContext& ctx) {
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Assign(options.token_ids.begin(), options.token_ids.end());
  request.set_render_special_tokens(options.special);
  auto stub = v1::Moetier::NewStub(ctx.channel);
  grpc::ClientContext call;
  ApplyDeadline(&call, ctx.timeout_ms);
  v1::DetokenizeResponse response;
  grpc::Status status;
  {
    CancelOnInterrupt cancel(&call);
    status = stub->Detokenize(&call, request, &response);
  }
  if (!status.ok()) return ReportRpcError(ctx, "detokenize", "Detokenize", status);
  *ctx.out << response.text() << '\n';
  ctx.out->flush();
  return kExitOk;
}

}  // namespace moetier::client
