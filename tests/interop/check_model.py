#!/usr/bin/env python3
"""Checks a GGUF file of any size against an independent parser.

Runs the independent parser (@huggingface/gguf, through gguf_dump.mjs) and
moetier's reader (moetier-inspect --tensors) on the same file, then compares
every tensor's name, dims, type, offset and size, and the SHA-256 of its bytes
read at the offsets each side reports. Single-file models only.

usage: check_model.py --inspect BUILD/tools/inspect/moetier-inspect FILE.gguf
"""
import argparse
import hashlib
import json
import pathlib
import subprocess
import sys

TYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30,
            "MXFP4": 39}


def sha256_of_range(path, offset, size):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        left = size
        while left:
            chunk = f.read(min(left, 1 << 24))
            if not chunk:
                raise SystemExit(f"{path}: short read at byte {offset + size - left}")
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def ours(inspect, path):
    out = subprocess.run([inspect, "--tensors", path], check=True, capture_output=True, text=True).stdout
    lines = out.split("tensors (name type dims shard offset bytes):\n", 1)[1].splitlines()
    tensors = []
    for line in lines:
        name, type_name, dims, _shard, offset, size = line.split()
        tensors.append({"name": name, "dtype": TYPE_IDS[type_name], "dims": [int(d) for d in dims.split("x")],
                        "file_offset": int(offset), "size": int(size)})
    return tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inspect", required=True, help="path of the moetier-inspect binary")
    parser.add_argument("file")
    args = parser.parse_args()
    dump = pathlib.Path(__file__).with_name("gguf_dump.mjs")
    theirs = json.loads(subprocess.run(["node", str(dump), args.file], check=True, capture_output=True,
                                       text=True).stdout)["tensors"]
    mine = ours(args.inspect, args.file)
    if len(mine) != len(theirs):
        sys.exit(f"tensor count differs: moetier {len(mine)}, independent parser {len(theirs)}")
    for m, t in zip(mine, theirs):
        for key in ("name", "dtype", "dims", "file_offset", "size"):
            if m[key] != t[key]:
                sys.exit(f"{m['name']}: {key} differs: moetier {m[key]}, independent parser {t[key]}")
        if sha256_of_range(args.file, m["file_offset"], m["size"]) != t["sha256"]:
            sys.exit(f"{m['name']}: bytes differ")
    print(f"{args.file}: {len(mine)} tensors agree (name, type, dims, offset, size, SHA-256 of bytes)")


if __name__ == "__main__":
    main()
