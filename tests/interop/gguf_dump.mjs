// Dumps a GGUF file as seen by an independent parser (@huggingface/gguf), so
// tests can compare it with moetier's reader. Usage: node gguf_dump.mjs FILE
//
// Prints one JSON object: version, tensor_count, kv_count, metadata_keys (in
// file order), data_offset and, for every tensor, its name, dims (ne[0]
// first), ggml type id, absolute file offset, byte size and the SHA-256 of
// its bytes.
import { createHash } from "node:crypto";
import { openSync, readSync, closeSync } from "node:fs";
import { gguf } from "@huggingface/gguf";

// ggml type id -> [elements per block, bytes per block] (SPEC.md §2.2).
const BLOCK = new Map([
  [0, [1, 4]],      // F32
  [1, [1, 2]],      // F16
  [30, [1, 2]],     // BF16
  [2, [32, 18]],    // Q4_0
  [8, [32, 34]],    // Q8_0
  [12, [256, 144]], // Q4_K
  [13, [256, 176]], // Q5_K
  [14, [256, 210]], // Q6_K
  [39, [32, 17]],   // MXFP4
]);

// The parser adds these header fields to its metadata object.
const HEADER_FIELDS = new Set(["version", "tensor_count", "kv_count"]);

function tensorBytes(info) {
  const geometry = BLOCK.get(info.dtype);
  if (!geometry) {
    throw new Error(`tensor ${info.name}: type id ${info.dtype} is not in the block table`);
  }
  const [blockElems, blockBytes] = geometry;
  const ne = info.shape.map((d) => BigInt(d));
  if (ne.length === 0 || ne[0] % BigInt(blockElems) !== 0n) {
    throw new Error(`tensor ${info.name}: ne[0] is not a multiple of ${blockElems}`);
  }
  let size = (ne[0] / BigInt(blockElems)) * BigInt(blockBytes);
  for (let i = 1; i < ne.length; i++) size *= ne[i];
  return size;
}

function sha256OfRange(fd, start, length) {
  const hash = createHash("sha256");
  const chunk = Buffer.alloc(1 << 20);
  let done = 0n;
  while (done < length) {
    const want = Number(length - done < BigInt(chunk.length) ? length - done : BigInt(chunk.length));
    const got = readSync(fd, chunk, 0, want, Number(start + done));
    if (got <= 0) throw new Error(`short read at byte ${start + done}`);
    hash.update(chunk.subarray(0, got));
    done += BigInt(got);
  }
  return hash.digest("hex");
}

async function main() {
  const path = process.argv[2];
  if (!path) {
    console.error("usage: node gguf_dump.mjs FILE");
    process.exit(2);
  }
  const { metadata, tensorInfos, tensorDataOffset } = await gguf(path, { allowLocalFile: true });
  const fd = openSync(path, "r");
  try {
    const tensors = tensorInfos.map((info) => {
      const size = tensorBytes(info);
      const start = BigInt(tensorDataOffset) + BigInt(info.offset);
      return {
        name: info.name,
        dims: info.shape.map((d) => Number(d)),
        dtype: info.dtype,
        file_offset: Number(start),
        size: Number(size),
        sha256: sha256OfRange(fd, start, size),
      };
    });
    const out = {
      version: Number(metadata.version),
      tensor_count: Number(metadata.tensor_count),
      kv_count: Number(metadata.kv_count),
      metadata_keys: Object.keys(metadata).filter((k) => !HEADER_FIELDS.has(k)),
      data_offset: Number(tensorDataOffset),
      tensors,
    };
    process.stdout.write(JSON.stringify(out) + "\n");
  } finally {
    closeSync(fd);
  }
}

main().catch((err) => {
  console.error(`gguf_dump: ${err.message}`);
  process.exit(1);
});
