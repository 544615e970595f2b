// What the llama.cpp scripts here share: node-llama-cpp's prebuilt CPU
// build, loaded without ever downloading or compiling, and the names of the
// KV cache types both moetier and llama.cpp store.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

// moetier's --cache-type names and llama.cpp's.
export const kvCacheTypes = { f32: "F32", f16: "F16", q8_0: "Q8_0", q4_0: "Q4_0" };

// maxThreads 0 leaves llama.cpp's default (every core).
// MOETIER_LLAMACPP_LOG=debug shows llama.cpp's own reasons, e.g. the tensor
// whose shape it refuses when a model does not load.
export function getCpuLlama({ maxThreads = 0 } = {}) {
  return getLlama({
    gpu: false,
    build: "never",
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    logLevel: process.env.MOETIER_LLAMACPP_LOG === "debug" ? LlamaLogLevel.debug : LlamaLogLevel.warn,
    ...(maxThreads > 0 ? { maxThreads } : {}),
  });
}
