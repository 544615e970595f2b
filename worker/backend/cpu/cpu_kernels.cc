#include "backend/cpu/cpu_kernels.h"

#if defined(MOETIER_CPU_X86_KERNELS)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/cpu/block_layouts.h"
#include "backend/cpu/cpu_check.h"
#include "backend/cpu/gemm_iq_grids.h"
#include "backend/cpu/kernel_table.h"
#include "gguf/tensor/iq_grid_blocks.h"

namespace moetier::cpu {
namespace {

#if defined(MOETIER_CPU_X86_KERNELS)
// What the processor and the operating system support, from CPUID and XCR0
// (compilers disagree on the feature names __builtin_cpu_supports knows).
struct X86Features {
  bool avx2 = false;    // AVX2 + FMA + F16C, with YMM state enabled
  bool avx512 = false;  // F, BW, VL, DQ, VNNI, with ZMM and mask state enabled
};

X86Features DetectX86() {
  X86Features f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1;
  const bool fma = (ecx >> 12) & 1;
  const bool f16c = (ecx >> 29) & 1;
  const bool avx = (ecx >> 28) & 1;
  if (!osxsave || !avx) return f;
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6) == 0x6;    // SSE and AVX state
  const bool zmm_state = (xcr0_lo & 0xE6) == 0xE6;  // plus opmask, ZMM_Hi256, Hi16_ZMM
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  const bool avx2 = (ebx >> 5) & 1;
  const bool avx512f = (ebx >> 16) & 1;
  const bool avx512dq = (ebx >> 17) & 1;
  const bool avx512bw = (ebx >> 30) & 1;
  const bool avx512vl = (ebx >> 31) & 1;
  const bool avx512vnni = (ecx >> 11) & 1;
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni;
  return f;
}

const X86Features& Features() {
  static const X86Features features = DetectX86();
  return features;
}
#endif

bool CpuHas(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return true;
#if defined(MOETIER_CPU_X86_KERNELS)
    case SimdLevel::kAvx2:
      return Features().avx2;
    case SimdLevel::kAvx512:
      return Features().avx512;
#else
    case SimdLevel::kAvx2:
    case SimdLevel::kAvx512:
      return false;
#endif
  }
  return false;
}

const KernelTable* TableFor(SimdLevel level) {
  switch (level) {
#if defined(MOETIER_CPU_X86_KERNELS)
    case SimdLevel::kAvx2:
      return &kAvx2Kernels;
    case SimdLevel::kAvx512:
      return &kAvx512Kernels;
#else
    case SimdLevel::kAvx2:
    case SimdLevel::kAvx512:
#endif
    case SimdLevel::kScalar:
      break;
  }
  return &kScalarKernels;
}

std::atomic<const KernelTable*> g_table{nullptr};
std::atomic<int> g_level{0};
std::once_flag g_init_once;

void InitFromEnvironment() {
  SimdLevel level = BestSupportedSimdLevel();
  if (const char* env = std::getenv("MOETIER_CPU_SIMD"); env != nullptr && env[0] != '\0') {
    absl::StatusOr<SimdLevel> wanted = ParseSimdLevel(env);
    if (!wanted.ok()) {
      std::fprintf(stderr, "moetier: MOETIER_CPU_SIMD: %s; using %s\n",
                   std::string(wanted.status().message()).c_str(),
                   std::string(SimdLevelName(level)).c_str());
    } else if (!CpuHas(*wanted)) {
      std::fprintf(stderr, "moetier: MOETIER_CPU_SIMD=%s is not supported by this CPU; using %s\n",
                   env, std::string(SimdLevelName(level)).c_str());
    } else {
      level = *wanted;
    }
  }
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  g_table.store(TableFor(level), std::memory_order_release);
}

const KernelTable& Table() {
  const KernelTable* table = g_table.load(std::memory_order_acquire);
  if (table == nullptr) [[unlikely]] {
    std::call_once(g_init_once, InitFromEnvironment);
    table = g_table.load(std::memory_order_acquire);
  }
  return *table;
}

size_t RoundUp(size_t n, size_t align) { return (n + align - 1) / align * align; }

// -1: not asked (the environment decides), else 0 or 1.
std::atomic<int> g_residual_plane_request{-1};

// Read once, before any buffer is sized from ActRowBytes: switching later
// would change the row layout under existing buffers.
bool ReadResidualPlaneSetting() {
  const int requested = g_residual_plane_request.load();
  if (requested >= 0) return requested == 1;
  const char* env = std::getenv("MOETIER_CPU_ACTIVATIONS");
  if (env == nullptr || env[0] == '\0' || std::string_view(env) == "q8") return false;
  if (std::string_view(env) == "q8x2") return true;
  std::fprintf(stderr, "moetier: MOETIER_CPU_ACTIVATIONS=%s is not q8 or q8x2; using q8\n", env);
  return false;
}

bool ResidualPlane() {
  static const bool residual = ReadResidualPlaneSetting();
  return residual;
}

// Bytes of one quantized plane of k activations (block_layouts.h).
size_t PlaneBytes(ActFormat format, size_t k) {
  switch (format) {
    case ActFormat::kF32:
      return RoundUp(k * sizeof(float), kActRowAlign);
    case ActFormat::kQ8_0:
      return RoundUp(3 * k, kActRowAlign);  // qs, d8, nsum8
    case ActFormat::kQ8_K:
      return RoundUp(k + k / 8 + k / 64, kActRowAlign);  // qs, bsums, d
  }
  return 0;
}

// x minus what the plane at `row` decodes to, for the residual plane.
void Residual(ActFormat format, const float* x, int64_t k, const uint8_t* row, float* r) {
  const int8_t* qs = reinterpret_cast<const int8_t*>(row);
  if (format == ActFormat::kQ8_0) {
    const float* d8 = reinterpret_cast<const float*>(row + k);
    for (int64_t j = 0; j < k; ++j) {
      r[j] = x[j] - d8[j / kQK8_0 * kActRepeat] * static_cast<float>(qs[j]);
    }
  } else {
    const float* d = reinterpret_cast<const float*>(row + k + k / 8);
    for (int64_t j = 0; j < k; ++j) r[j] = x[j] - d[j / kQK_K] * static_cast<float>(qs[j]);
  }
}

}  // namespace

std::string_view SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

absl::StatusOr<SimdLevel> ParseSimdLevel(std::string_view name) {
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (name == SimdLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown SIMD level \"", std::string(name),
                                                 "\"; expected scalar, avx2 or avx512"));
}

bool SimdLevelSupported(SimdLevel level) { return CpuHas(level); }

SimdLevel BestSupportedSimdLevel() {
  if (CpuHas(SimdLevel::kAvx512)) return SimdLevel::kAvx512;
  if (CpuHas(SimdLevel::kAvx2)) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

SimdLevel ActiveSimdLevel() {
  Table();
  return static_cast<SimdLevel>(g_level.load(std::memory_order_relaxed));
}

absl::Status SetSimdLevel(SimdLevel level) {
  if (!CpuHas(level)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this CPU does not support the ", std::string(SimdLevelName(level)), " kernels"));
  }
  Table();  // consume the environment first so it cannot override this later
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  g_table.store(TableFor(level), std::memory_order_release);
  return absl::OkStatus();
}

bool SupportsWeightType(TensorType type) {
  switch (type) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kMXFP4:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kIQ4_XS:
      return true;
    default:
      return IsIqGridType(type);
  }
}

ActFormat ActFormatFor(TensorType weight_type) {
  switch (weight_type) {
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kMXFP4:
      return ActFormat::kQ8_0;
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_XS:
      return ActFormat::kQ8_K;
    default:
      if (IsIqGridType(weight_type)) return ActFormat::kQ8_K;
      MOETIER_CPU_CHECK(SupportsWeightType(weight_type), "weight type without CPU kernels");
      return ActFormat::kF32;
  }
}

int64_t WeightBlockElems(TensorType weight_type) {
  switch (ActFormatFor(weight_type)) {
    case ActFormat::kF32:
      return 1;
    case ActFormat::kQ8_0:
      return kQK8_0;
    case ActFormat::kQ8_K:
      return kQK_K;
  }
  return 1;
}

size_t ActRowBytes(TensorType weight_type, int64_t k) {
  MOETIER_CPU_CHECK(k > 0 && k % WeightBlockElems(weight_type) == 0,
                    "k is not a whole number of blocks");
  const ActFormat format = ActFormatFor(weight_type);
  const size_t plane = PlaneBytes(format, static_cast<size_t>(k));
  return format == ActFormat::kF32 || !ResidualPlane() ? plane : 2 * plane;
}

bool ActivationsHaveResidualPlane() { return ResidualPlane(); }

absl::Status SetActivationsResidualPlane(bool on) {
  g_residual_plane_request.store(on ? 1 : 0);
  if (ResidualPlane() != on) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the CPU activation format is already %s; it is fixed when the first engine is made",
        ResidualPlane() ? "q8x2" : "q8"));
  }
  return absl::OkStatus();
}

void QuantizeActRows(TensorType weight_type, const float* x, int64_t x_stride, int64_t k,
                     int64_t n_rows, void* dst) {
  const size_t row_bytes = ActRowBytes(weight_type, k);
  uint8_t* out = static_cast<uint8_t*>(dst);
  const ActFormat format = ActFormatFor(weight_type);
  const KernelTable& t = Table();
  const QuantizeActFn quantize = format == ActFormat::kQ8_0 ? t.quantize_q8_0 : t.quantize_q8_k;
  const size_t plane = PlaneBytes(format, static_cast<size_t>(k));
  thread_local std::vector<float> residual;
  for (int64_t m = 0; m < n_rows; ++m) {
    const float* xm = x + m * x_stride;
    uint8_t* row = out + m * row_bytes;
    if (format == ActFormat::kF32) {
      std::copy(xm, xm + k, reinterpret_cast<float*>(row));
      continue;
    }
    quantize(xm, k, row);
    if (row_bytes == plane) continue;
    // The second plane quantizes what the first one missed, with its own
    // scales, so the pair carries about 15 bits per value.
    residual.resize(static_cast<size_t>(k));
    Residual(format, xm, k, row, residual.data());
    quantize(residual.data(), k, row + plane);
  }
}

namespace {

// A tile of weight rows small enough to stay in L1/L2 while every group of
// activation rows passes over it: the rows come from memory once.
int64_t RowTile(size_t w_row_bytes) {
  constexpr size_t kRowTileBytes = 16 * 1024;
  return std::max<int64_t>(1,
                           static_cast<int64_t>(kRowTileBytes / std::max<size_t>(1, w_row_bytes)));
}

// Both planes of an activation row are handed to the kernel as two
// activation rows, so each weight block is unpacked once for both; the two
// dot products are added in float.
void MatMulTwoPlanes(GemmTileFn fn, int64_t k, const uint8_t* w, size_t w_row_bytes, int64_t r0,
                     int64_t r1, const uint8_t* act, size_t act_row_bytes, size_t plane,
                     int64_t n_act, float* out, int64_t ldo) {
  constexpr int64_t kMaxTileRows = 256;
  // Planes of consecutive rows are evenly spaced when rows are packed, so
  // a kernel call takes kMaxActTile / 2 activation rows; otherwise one.
  const int64_t per_call = act_row_bytes == 2 * plane ? kMaxActTile / 2 : 1;
  const int64_t row_tile = std::min(RowTile(w_row_bytes), kMaxTileRows);
  float parts[kMaxActTile * kMaxTileRows];
  for (int64_t r = r0; r < r1; r += row_tile) {
    const int64_t nr = std::min(row_tile, r1 - r);
    for (int64_t m = 0; m < n_act; m += per_call) {
      const int64_t na = std::min(per_call, n_act - m);
      fn(k, w + r * w_row_bytes, w_row_bytes, nr, act + m * act_row_bytes, plane,
         static_cast<int>(2 * na), parts, nr);
      for (int64_t i = 0; i < na; ++i) {
        const float* coarse = parts + 2 * i * nr;
        const float* fine = coarse + nr;
        float* o = out + (m + i) * ldo + r;
        for (int64_t j = 0; j < nr; ++j) o[j] = coarse[j] + fine[j];
      }
    }
  }
}

}  // namespace

void MatMul(TensorType weight_type, int64_t k, const void* w, size_t w_row_bytes, int64_t r0,
            int64_t r1, const void* act, size_t act_row_bytes, int64_t n_act, float* out,
            int64_t ldo) {
  MOETIER_CPU_CHECK(r0 >= 0 && r0 <= r1 && n_act >= 0, "bad row range");
  MOETIER_CPU_CHECK(
      reinterpret_cast<uintptr_t>(act) % kActRowAlign == 0 && act_row_bytes % kActRowAlign == 0,
      "activation rows must be 64-byte aligned");
  if (r0 == r1 || n_act == 0) return;
  const KernelTable& t = Table();
  GemmTileFn fn = nullptr;
  switch (weight_type) {
    case TensorType::kF32:
      fn = t.gemm_f32;
      break;
    case TensorType::kF16:
      fn = t.gemm_f16;
      break;
    case TensorType::kBF16:
      fn = t.gemm_bf16;
      break;
    case TensorType::kQ8_0:
      fn = t.gemm_q8_0;
      break;
    case TensorType::kQ4_0:
      fn = t.gemm_q4_0;
      break;
    case TensorType::kQ4_K:
      fn = t.gemm_q4_k;
      break;
    case TensorType::kQ5_K:
      fn = t.gemm_q5_k;
      break;
    case TensorType::kQ6_K:
      fn = t.gemm_q6_k;
      break;
    case TensorType::kQ4_1:
      fn = t.gemm_q4_1;
      break;
    case TensorType::kQ5_0:
      fn = t.gemm_q5_0;
      break;
    case TensorType::kQ5_1:
      fn = t.gemm_q5_1;
      break;
    case TensorType::kIQ4_NL:
      fn = t.gemm_iq4_nl;
      break;
    case TensorType::kMXFP4:
      fn = t.gemm_mxfp4;
      break;
    case TensorType::kQ2_K:
      fn = t.gemm_q2_k;
      break;
    case TensorType::kQ3_K:
      fn = t.gemm_q3_k;
      break;
    case TensorType::kIQ4_XS:
      fn = t.gemm_iq4_xs;
      break;
    default:
      MOETIER_CPU_CHECK(iq_grids::TableIndex(weight_type) >= 0, "weight type without CPU kernels");
      fn = t.gemm_iq_grid[iq_grids::TableIndex(weight_type)];
  }
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* ab = static_cast<const uint8_t*>(act);
  const ActFormat format = ActFormatFor(weight_type);
  const size_t plane = PlaneBytes(format, static_cast<size_t>(k));
  if (format != ActFormat::kF32 && ResidualPlane()) {
    MatMulTwoPlanes(fn, k, wb, w_row_bytes, r0, r1, ab, act_row_bytes, plane, n_act, out, ldo);
    return;
  }
  // The i-quant grid kernels take every row at once: their blocks cost more
  // to decode than to multiply, so each is decoded once for the whole batch.
  if (n_act <= kMaxActTile || iq_grids::TableIndex(weight_type) >= 0) {
    fn(k, wb + r0 * w_row_bytes, w_row_bytes, r1 - r0, ab, act_row_bytes, static_cast<int>(n_act),
       out + r0, ldo);
    return;
  }
  const int64_t row_tile = RowTile(w_row_bytes);
  for (int64_t r = r0; r < r1; r += row_tile) {
    const int64_t nr = std::min(row_tile, r1 - r);
    for (int64_t m = 0; m < n_act; m += kMaxActTile) {
      const int na = static_cast<int>(std::min<int64_t>(kMaxActTile, n_act - m));
      fn(k, wb + r * w_row_bytes, w_row_bytes, nr, ab + m * act_row_bytes, act_row_bytes, na,
         out + m * ldo + r, ldo);
    }
  }
}

float DotF32(const float* a, const float* b, int64_t n) { return Table().dot_f32(a, b, n); }
void AxpyF32(float a, const float* x, float* y, int64_t n) { Table().axpy_f32(a, x, y, n); }
void ScaleF32(float a, float* y, int64_t n) { Table().scale_f32(a, y, n); }
float SumF32(const float* x, int64_t n) { return Table().sum_f32(x, n); }
void AttendF32(const float* q, int n_q, const float* k, const float* v, int64_t kv_stride,
               int64_t n_kv, int head_dim, float scale, float* scores, float* out,
               const float* sinks) {
  Table().attend_f32(q, n_q, k, v, kv_stride, n_kv, head_dim, scale, scores, out, sinks);
}

void SoftmaxF32(float* x, int64_t n) { Table().softmax_f32(x, n); }

void AccumulateKvValues(TensorType type, const uint8_t* rows, int64_t row_stride, int64_t n_rows,
                        const float* weights, int64_t w_stride, int n_q, int head_dim,
                        float* out) {
  MOETIER_CPU_CHECK(head_dim <= kMaxKvHeadDim, "KV head larger than kMaxKvHeadDim");
  MOETIER_CPU_CHECK(type == TensorType::kF32 || type == TensorType::kF16 ||
                        ((type == TensorType::kQ8_0 || type == TensorType::kQ4_0) &&
                         head_dim % 32 == 0),
                    "unsupported KV value type or head size");
  Table().accumulate_kv_values(type, rows, row_stride, n_rows, weights, w_stride, n_q, head_dim,
                               out);
}

}  // namespace moetier::cpu
