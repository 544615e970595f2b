// node llamacpp_logits.mjs MODEL.gguf IDS_FILE OUT.f32 [--cache-type T] [--flash-attention]
//
// llama.cpp's logits for one sequence (IDS_FILE: comma-separated token ids,
// positions 0..n-1), written as raw little-endian float32, one row of n_vocab
// per position: the layout of moetier-worker --logits-out and of the
// test vectors' M.llamacpp.f32. CPU only, flash attention off, F32 keys and
// values, the whole sequence in one batch, as the shared vectors were made.
// --cache-type stores keys and values as f16, q8_0 or q4_0 instead (with
// --flash-attention, which llama.cpp needs for quantized values), to see
// what a KV cache type costs llama.cpp itself.
// Uses node-llama-cpp's prebuilt binaries; it never downloads or compiles.
import fs from "node:fs";
import path from "node:path";
import { getCpuLlama, kvCacheTypes } from "./cpu_llama.mjs";

const usage = "usage: node llamacpp_logits.mjs MODEL.gguf IDS_FILE OUT.f32 " +
              "[--cache-type f32|f16|q8_0|q4_0] [--flash-attention]";
const [modelPath, idsPath, outPath, ...flags] = process.argv.slice(2);
if (!modelPath || !idsPath || !outPath) {
  console.error(usage);
  process.exit(2);
}
let kvType = "F32";
let flashAttention = false;
for (let i = 0; i < flags.length; ++i) {
  if (flags[i] === "--flash-attention") {
    flashAttention = true;
  } else if (flags[i] === "--cache-type") {
    const name = flags[++i];
    if (!(name in kvCacheTypes)) {
      console.error(`llamacpp_logits: --cache-type ${JSON.stringify(name)} is not one of ` +
                    `${Object.keys(kvCacheTypes).join(", ")}\n${usage}`);
      process.exit(2);
    }
    kvType = kvCacheTypes[name];
  } else {
    console.error(`llamacpp_logits: bad argument ${JSON.stringify(flags[i])}\n${usage}`);
    process.exit(2);
  }
}
const ids = fs.readFileSync(idsPath, "utf8").split(/[,\s]+/).filter((s) => s !== "").map((s) => {
  const id = Number(s);
  if (!Number.isInteger(id) || id < 0) throw new Error(`${idsPath}: bad token id ${JSON.stringify(s)}`);
  return id;
});
if (ids.length === 0) throw new Error(`${idsPath}: no token ids`);

const llama = await getCpuLlama();
const model = await llama.loadModel({ modelPath: path.resolve(modelPath), gpuLayers: 0 });
const context = await model.createContext({
  // A sequence keeps one cell free: filling its last one would first shift
  // the context (erase its oldest tokens) and re-evaluate, which changes the
  // last position's logits.
  contextSize: ids.length + 1,
  batchSize: ids.length,
  sequences: 1,
  flashAttention,
  experimentalKvCacheKeyType: kvType,
  experimentalKvCacheValueType: kvType,
});
if (context.flashAttention !== flashAttention) {
  throw new Error(`flash attention could not be turned ${flashAttention ? "on" : "off"}`);
}

// Greedy sampling with no penalties leaves llama_get_logits_ith's values as they are.
const results = await context.getSequence().controlledEvaluate(
  ids.map((id) => [id, { generateNext: { logits: true } }]));
let nVocab = 0;
let out;
results.forEach((result, pos) => {
  const logits = result?.next?.logits;
  if (logits == null) throw new Error(`no logits at position ${pos}`);
  if (pos === 0) {
    nVocab = logits.size;
    out = new Float32Array(ids.length * nVocab).fill(NaN);
  }
  if (logits.size !== nVocab) throw new Error(`position ${pos}: ${logits.size} logits, not ${nVocab}`);
  for (const [token, value] of logits) out[pos * nVocab + token] = value;
});
if (out.some(Number.isNaN)) throw new Error("a position lacks some vocabulary entries");
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) throw new Error("needs a little-endian host");
fs.writeFileSync(outPath, Buffer.from(out.buffer));
console.error(`${outPath}: ${ids.length} positions x ${nVocab} logits`);
await context.dispose();
await model.dispose();
await llama.dispose();
