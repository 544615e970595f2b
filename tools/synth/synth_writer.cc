#include "base/check.h"
#include "synth/synth_writer.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <system_error>
#include <thread>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gguf/gguf_reader.h"
#include "gguf/writer/gguf_writer.h"
#include "synth/synth_random.h"
#include "gguf/tensor/quant_codec.h"

namespace moetier {
namespace {

// Elements generated and quantized per call: a float scratch of 256 KiB per
// thread stays in L2 and keeps QuantizeRow calls long.
constexpr int64_t kBatchElems = 65536;
// Below this many elements a chunk is not worth a second thread.
constexpr int64_t kParallelMinElems = 2 * kBatchElems;
constexpr uint64_t kGgufAlignment = kGgufDefaultAlignment;


uint64_t AlignUp(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

uint64_t StringBytes(std::string_view s) { return 8 + s.size(); }

uint64_t ScalarBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      break;
  }
  std::abort();
}

// Bytes of one value as GGUF encodes it (SPEC.md §1.3), type tag excluded.
uint64_t ValueBytes(const GgufValue& value) {
  if (value.type == GgufValueType::kString) return StringBytes(std::get<std::string>(value.data));
  if (value.type != GgufValueType::kArray) return ScalarBytes(value.type);
  const GgufArray& array = std::get<GgufArray>(value.data);
  uint64_t bytes = 4 + 8;
  if (array.element_type == GgufValueType::kString) {
    for (const std::string& s : std::get<std::vector<std::string>>(array.elements)) {
      bytes += StringBytes(s);
    }
  } else {
    bytes += ScalarBytes(array.element_type) * array.size();
  }
  return bytes;
}

uint64_t HeaderBytes(const std::vector<GgufKeyValue>& kvs, std::span<const SynthTensor> tensors) {
  uint64_t bytes = 4 + 4 + 8 + 8;
  for (const GgufKeyValue& kv : kvs) bytes += StringBytes(kv.key) + 4 + ValueBytes(kv.value);
  for (const SynthTensor& t : tensors) bytes += StringBytes(t.name) + 4 + 8 * t.ne.size() + 4 + 8;
  return AlignUp(bytes, kGgufAlignment);
}

std::vector<GgufKeyValue> ShardMetadata(const SynthPlan& plan, size_t shard) {
  std::vector<GgufKeyValue> kvs;
  if (shard == 0) kvs = plan.metadata;
  if (plan.split) {
    kvs.push_back({"split.no", GgufValue::Uint16(static_cast<uint16_t>(shard))});
    kvs.push_back({"split.count", GgufValue::Uint16(static_cast<uint16_t>(plan.shards.size()))});
    kvs.push_back(
        {"split.tensors.count", GgufValue::Int32(static_cast<int32_t>(plan.tensors.size()))});
  }
  return kvs;
}

// Contiguous tensor ranges [first, first + count) for each shard.
std::vector<std::pair<size_t, size_t>> ShardRanges(const std::vector<SynthTensor>& tensors,
                                                   const SynthOptions& options) {
  const size_t n = tensors.size();
  std::vector<std::pair<size_t, size_t>> ranges;
  if (options.split_max_tensors > 0) {
    const size_t per = static_cast<size_t>(options.split_max_tensors);
    for (size_t first = 0; first < n; first += per) ranges.push_back({first, std::min(per, n - first)});
    return ranges;
  }
  if (options.split_count <= 1) return {{0, n}};
  // Greedy by bytes: close a shard once it reaches its share of the total,
  // leaving at least one tensor for every shard still to come.
  const size_t shards = static_cast<size_t>(options.split_count);
  uint64_t total = 0;
  for (const SynthTensor& t : tensors) total += t.size_bytes();
  size_t next = 0;
  uint64_t cumulative = 0;
  for (size_t s = 0; s < shards; ++s) {
    const size_t first = next;
    const size_t must_leave = shards - s - 1;
    const uint64_t target = static_cast<uint64_t>(
        static_cast<long double>(total) * static_cast<long double>(s + 1) / static_cast<long double>(shards));
    while (next < n - must_leave && (next == first || cumulative < target || s + 1 == shards)) {
      cumulative += tensors[next].size_bytes();
      ++next;
    }
    ranges.push_back({first, next - first});
  }
  MOETIER_CHECK(next == n);
  return ranges;
}

std::string SplitPrefix(const std::string& out_path) {
  if (absl::EndsWith(out_path, ".gguf")) return out_path.substr(0, out_path.size() - 5);
  return out_path;
}

// One unit of work: a run of rows of one tensor.
struct WorkItem {
  size_t tensor = 0;
  int64_t first_row = 0;
  int64_t n_rows = 0;
  uint64_t bytes = 0;
};

// Encodes one work item into `dst` with up to `threads` threads, each taking
// a contiguous run of rows; row bytes land at fixed offsets, so the result
// does not depend on the split.
void EncodeItem(const SynthTensor& tensor, uint64_t seed, const WorkItem& item, int threads,
                uint8_t* dst, std::vector<std::vector<float>>& scratch) {
  const int64_t row_bytes = TensorRowBytes(tensor.type, tensor.ne[0]);
  int64_t parts = std::min<int64_t>(threads, item.n_rows);
  if (item.n_rows * tensor.ne[0] < kParallelMinElems) parts = 1;
  if (parts <= 1) {
    EncodeSynthRows(tensor, seed, item.first_row, item.n_rows, dst, scratch[0]);
    return;
  }
  const int64_t rows_per_part = (item.n_rows + parts - 1) / parts;
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<size_t>(parts - 1));
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t first = p * rows_per_part;
    const int64_t count = std::min(rows_per_part, item.n_rows - first);
    if (count <= 0) break;
    helpers.emplace_back([&tensor, seed, &item, first, count, row_bytes, dst, &scratch, p] {
      EncodeSynthRows(tensor, seed, item.first_row + first, count, dst + first * row_bytes,
                      scratch[static_cast<size_t>(p)]);
    });
  }
  EncodeSynthRows(tensor, seed, item.first_row, std::min(rows_per_part, item.n_rows), dst, scratch[0]);
  for (std::thread& t : helpers) t.join();
}

uint64_t ExistingFileBytes(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(size);
}

void RemoveFiles(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
}

absl::Status WriteShard(const SynthPlan& plan, size_t shard_index, const SynthOptions& options,
                        uint64_t& done_bytes, const SynthProgressFn& progress) {
  const SynthShardPlan& shard = plan.shards[shard_index];
  GgufWriter writer;
  for (GgufKeyValue& kv : ShardMetadata(plan, shard_index)) {
    if (absl::Status s = writer.AddKeyValue(std::move(kv.key), std::move(kv.value)); !s.ok()) return s;
  }
  for (size_t i = 0; i < shard.tensor_count; ++i) {
    const SynthTensor& t = plan.tensors[shard.first_tensor + i];
    if (absl::Status s = writer.AddTensor(t.name, t.type, t.ne); !s.ok()) return s;
    MOETIER_CHECK(writer.TensorSizeBytes(i) == t.size_bytes());
  }
  if (absl::Status s = writer.Open(shard.path); !s.ok()) return s;

  std::vector<WorkItem> items;
  uint64_t max_item_bytes = 0;
  const int64_t chunk_elems = std::max<int64_t>(1, options.chunk_elems);
  for (size_t i = 0; i < shard.tensor_count; ++i) {
    const size_t index = shard.first_tensor + i;
    const SynthTensor& t = plan.tensors[index];
    const int64_t rows = t.rows();
    const int64_t chunk_rows = std::max<int64_t>(1, chunk_elems / t.ne[0]);
    const uint64_t row_bytes = static_cast<uint64_t>(TensorRowBytes(t.type, t.ne[0]));
    for (int64_t r = 0; r < rows; r += chunk_rows) {
      WorkItem item{index, r, std::min(chunk_rows, rows - r), 0};
      item.bytes = row_bytes * static_cast<uint64_t>(item.n_rows);
      max_item_bytes = std::max(max_item_bytes, item.bytes);
      items.push_back(item);
    }
  }

  // Double buffering: item k is computed into one buffer while item k-1 is
  // appended from the other.
  const int threads = std::clamp(options.threads, 1, kSynthMaxThreads);
  std::vector<uint8_t> buffers[2] = {std::vector<uint8_t>(max_item_bytes),
                                     std::vector<uint8_t>(max_item_bytes)};
  std::vector<std::vector<float>> scratch(static_cast<size_t>(threads));
  absl::Status status;
  for (size_t k = 0; k <= items.size() && status.ok(); ++k) {
    std::thread producer;
    if (k < items.size()) {
      const WorkItem& item = items[k];
      producer = std::thread([&plan, &options, &item, threads, &buffers, &scratch, k] {
        EncodeItem(plan.tensors[item.tensor], options.seed, item, threads, buffers[k % 2].data(),
                   scratch);
      });
    }
    if (k > 0) {
      const WorkItem& prev = items[k - 1];
      status = writer.AppendTensorData(std::span<const uint8_t>(buffers[(k - 1) % 2].data(), prev.bytes));
      done_bytes += prev.bytes;
      if (status.ok() && progress) progress(done_bytes, plan.tensor_bytes);
    }
    if (producer.joinable()) producer.join();
  }
  if (!status.ok()) return status;
  if (absl::Status s = writer.Finish(); !s.ok()) return s;

  const uint64_t actual = ExistingFileBytes(shard.path);
  if (actual != shard.file_bytes) {
    return absl::InternalError(absl::StrCat("wrote ", actual, " bytes to ", shard.path,
                                            " but planned ", shard.file_bytes));
  }
  return absl::OkStatus();
}

std::string FormatGiB(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

void EncodeSynthRows(const SynthTensor& tensor, uint64_t seed, int64_t first_row, int64_t n_rows,
                     uint8_t* dst, std::vector<float>& scratch) {
  const int64_t ne0 = tensor.ne[0];
  const int64_t row_bytes = TensorRowBytes(tensor.type, ne0);
  const int64_t batch_rows = std::max<int64_t>(1, kBatchElems / ne0);
  const uint64_t key = SynthStreamKey(seed, tensor.name);
  if (scratch.size() < static_cast<size_t>(std::min(batch_rows, n_rows) * ne0)) {
    scratch.resize(static_cast<size_t>(std::min(batch_rows, n_rows) * ne0));
  }
  for (int64_t r = 0; r < n_rows; r += batch_rows) {
    const int64_t rows = std::min(batch_rows, n_rows - r);
    const int64_t n = rows * ne0;
    const uint64_t first_index = static_cast<uint64_t>((first_row + r) * ne0);
    switch (tensor.distribution) {
      case SynthDistribution::kNormal:
        SynthFill(key, first_index, n, tensor.mean, tensor.stddev, scratch.data());
        break;
      case SynthDistribution::kNegativeExpUniform:
        SynthFillNegativeExpUniform(key, first_index, n, tensor.mean, tensor.stddev, scratch.data());
        break;
      case SynthDistribution::kExpUniform:
        SynthFillExpUniform(key, first_index, n, tensor.mean, tensor.stddev, scratch.data());
        break;
    }
    uint8_t* out = dst + r * row_bytes;
    if (tensor.type == TensorType::kF32) {
      std::memcpy(out, scratch.data(), static_cast<size_t>(n) * sizeof(float));
    } else {
      // Rows are contiguous and ne0 is a whole number of blocks, so one call
      // encodes the whole batch.
      QuantizeRow(tensor.type, scratch.data(), out, n);
    }
  }
}

absl::StatusOr<SynthPlan> PlanSynthModel(const SynthOptions& options) {
  if (absl::Status s = ValidateSynthShape(options.shape); !s.ok()) return s;
  if (absl::Status s = ValidateSynthQuant(options.shape.arch, options.quant); !s.ok()) return s;
  if (options.out_path.empty()) return absl::InvalidArgumentError("--out is required");
  if (options.split_max_tensors > 0 && options.split_count > 0) {
    return absl::InvalidArgumentError("--split-max-tensors and --split-count exclude each other");
  }
  if (options.split_max_tensors < 0 || options.split_count < 0) {
    return absl::InvalidArgumentError("--split-max-tensors and --split-count must be positive");
  }
  if (options.threads < 1 || options.threads > kSynthMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads ", options.threads, " is out of range [1, ", kSynthMaxThreads, "]"));
  }

  SynthPlan plan;
  plan.tensors = PlanSynthTensors(options.shape, options.quant);
  if (options.matrix_type.has_value()) {
    const TensorTypeInfo& info = GetTensorTypeInfo(*options.matrix_type);
    if (!info.has_codec || info.block_elems == 1) {
      return absl::InvalidArgumentError(absl::StrCat("--matrix-type ", std::string(info.name),
                                                     " is not a quantized type moetier encodes"));
    }
    int retyped = 0;
    for (SynthTensor& t : plan.tensors) {
      if (GetTensorTypeInfo(t.type).block_elems > 1 && t.ne[0] % info.block_elems == 0) {
        t.type = *options.matrix_type;
        ++retyped;
      }
    }
    if (retyped == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--matrix-type ", std::string(info.name),
          " changed no tensor: it replaces the quantized types of a --quant mix (not f32), in "
          "rows that are multiples of ",
          info.block_elems));
    }
  }
  std::vector<bool> rule_used(options.tensor_types.size(), false);
  std::vector<bool> rule_matched(options.tensor_types.size(), false);
  for (SynthTensor& t : plan.tensors) {
    for (size_t r = 0; r < options.tensor_types.size(); ++r) {
      if (t.name.find(options.tensor_types[r].name_part) != std::string::npos) {
        rule_matched[r] = true;
      }
    }
    for (size_t r = 0; r < options.tensor_types.size(); ++r) {
      const SynthOptions::TensorTypeRule& rule = options.tensor_types[r];
      if (t.name.find(rule.name_part) == std::string::npos) continue;
      const TensorTypeInfo& info = GetTensorTypeInfo(rule.type);
      const std::string flag =
          absl::StrCat("--tensor-type ", rule.name_part, "=", std::string(info.name));
      if (!info.has_codec) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": moetier cannot encode ", std::string(info.name)));
      }
      if (t.ne[0] % info.block_elems != 0) {
        return absl::InvalidArgumentError(absl::StrCat(flag, ": ", t.name, " has rows of ", t.ne[0],
                                                       " values, not whole blocks of ",
                                                       info.block_elems));
      }
      t.type = rule.type;
      rule_used[r] = true;
      break;
    }
  }
  for (size_t r = 0; r < options.tensor_types.size(); ++r) {
    if (rule_used[r]) continue;
    const std::string& part = options.tensor_types[r].name_part;
    return absl::InvalidArgumentError(
        rule_matched[r]
            ? absl::StrCat("--tensor-type ", part, "=...: every tensor whose name contains '", part,
                           "' was already set by an earlier rule (the first match wins)")
            : absl::StrCat("--tensor-type ", part, "=...: no tensor name contains '", part, "'"));
  }
  const std::string name = options.name.empty()
                               ? absl::StrCat("moetier synthetic ", std::string(SynthArchName(options.shape.arch)),
                                              " ", options.shape.n_layer,
                                              "x", options.shape.n_expert, " seed ", options.seed)
                               : options.name;
  absl::StatusOr<std::vector<GgufKeyValue>> metadata =
      BuildSynthMetadata(options.shape, options.quant, name);
  if (!metadata.ok()) return metadata.status();
  plan.metadata = *std::move(metadata);

  if (options.split_count > static_cast<int64_t>(plan.tensors.size())) {
    return absl::InvalidArgumentError(absl::StrCat("--split-count ", options.split_count,
                                                   " exceeds the model's ", plan.tensors.size(),
                                                   " tensors"));
  }
  plan.split = options.split_max_tensors > 0 || options.split_count > 0;
  const std::vector<std::pair<size_t, size_t>> ranges = ShardRanges(plan.tensors, options);
  if (static_cast<int64_t>(ranges.size()) > kSynthMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("the split would make ", ranges.size(),
                                                   " files; at most ", kSynthMaxShards,
                                                   " are allowed (raise --split-max-tensors)"));
  }
  std::map<TensorType, uint64_t> by_type;
  for (const SynthTensor& t : plan.tensors) {
    plan.tensor_bytes += t.size_bytes();
    by_type[t.type] += t.size_bytes();
  }
  plan.bytes_by_type.assign(by_type.begin(), by_type.end());

  const std::string prefix = SplitPrefix(options.out_path);
  for (size_t s = 0; s < ranges.size(); ++s) {
    SynthShardPlan shard;
    shard.path = plan.split ? GgufSplitPath(prefix, static_cast<uint32_t>(s),
                                            static_cast<uint32_t>(ranges.size()))
                            : options.out_path;
    shard.first_tensor = ranges[s].first;
    shard.tensor_count = ranges[s].second;
    plan.shards.push_back(std::move(shard));
  }
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    SynthShardPlan& shard = plan.shards[s];
    const std::span<const SynthTensor> tensors(plan.tensors.data() + shard.first_tensor,
                                               shard.tensor_count);
    shard.file_bytes = HeaderBytes(ShardMetadata(plan, s), tensors);
    for (const SynthTensor& t : tensors) shard.file_bytes += AlignUp(t.size_bytes(), kGgufAlignment);
    plan.total_file_bytes += shard.file_bytes;
  }
  return plan;
}

absl::Status CheckFreeSpace(const std::string& directory, uint64_t needed_bytes,
                            uint64_t reclaimable_bytes) {
  struct statvfs fs;
  if (statvfs(directory.c_str(), &fs) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot query free space of '", directory,
                                                      "': ", std::strerror(errno)));
  }
  const uint64_t available = static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
  if (available + reclaimable_bytes < needed_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not enough disk space in '", directory, "': the model needs ", needed_bytes, " bytes (",
        FormatGiB(needed_bytes), "), ", available + reclaimable_bytes, " bytes (",
        FormatGiB(available + reclaimable_bytes), ") are available"));
  }
  return absl::OkStatus();
}

absl::Status WriteSynthModel(const SynthPlan& plan, const SynthOptions& options,
                             const SynthProgressFn& progress) {
  MOETIER_CHECK(!plan.shards.empty());
  std::filesystem::path dir = std::filesystem::path(plan.shards[0].path).parent_path();
  if (dir.empty()) dir = ".";
  uint64_t reclaimable = 0;
  for (const SynthShardPlan& shard : plan.shards) reclaimable += ExistingFileBytes(shard.path);
  if (absl::Status s = CheckFreeSpace(dir.string(), plan.total_file_bytes, reclaimable); !s.ok()) {
    return s;
  }

  std::vector<std::string> written;
  uint64_t done_bytes = 0;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    written.push_back(plan.shards[s].path);
    if (absl::Status status = WriteShard(plan, s, options, done_bytes, progress); !status.ok()) {
      RemoveFiles(written);
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace moetier
