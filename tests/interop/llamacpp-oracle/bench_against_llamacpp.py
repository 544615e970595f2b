#!/usr/bin/env python3
"""Decode and prompt speed of the moetier CPU engine against llama.cpp's, in one run.

Each round runs moetier-bench-cpu and then llamacpp_bench.mjs on the same file
with the same threads, token counts, batch and KV cache type; the machine's
drift then touches both alike. Prints every round's medians and, at the end,
the median over rounds of each side and of the per-round ratio
moetier / llama.cpp.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

import node_llama
RATE = re.compile(r"^(decode|prompt):\s+([0-9.]+) tok/s median")
PHASES = ("decode", "prompt")


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, metavar="FILE", help="GGUF model both engines run")
    p.add_argument("--build", default="build", metavar="DIR",
                   help="moetier build folder (default: build); moetier-bench-cpu is taken "
                   "from BUILD/worker/bench")
    p.add_argument("--threads", type=int, metavar="N", default=os.cpu_count(),
                   help="threads for both engines (default: all cores)")
    p.add_argument("--rounds", type=int, metavar="N", default=3,
                   help="rounds of one moetier and one llama.cpp measurement (default 3)")
    p.add_argument("--runs", type=int, metavar="N", default=5,
                   help="timed runs per measurement within a round, at least 5 (default 5)")
    p.add_argument("--context", type=int, metavar="N", default=16,
                   help="tokens in the cache when decoding starts (default 16)")
    p.add_argument("--decode-tokens", type=int, metavar="N", default=32,
                   help="tokens generated per decode run (default 32)")
    p.add_argument("--prompt-tokens", type=int, metavar="N", default=256,
                   help="tokens per prompt run (default 256)")
    p.add_argument("--batch", type=int, metavar="N", default=256,
                   help="prompt tokens per forward pass (default 256)")
    p.add_argument("--cache-type", default="f16", choices=["f32", "f16", "q8_0", "q4_0"],
                   metavar="T",
                   help="KV cache type of keys and values on both sides: f32, f16, q8_0 or q4_0 "
                   "(default f16, llama.cpp's)")
    p.add_argument("--huge-pages", action="store_true",
                   help="moetier copies its weights into transparent huge pages first "
                   "(llama.cpp reads its file mapping either way)")
    a = p.parse_args()
    for name in ("threads", "rounds", "context", "decode_tokens", "prompt_tokens", "batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.runs < 5:
        p.error("--runs must be at least 5 (moetier-bench-cpu's minimum)")
    if not os.path.isfile(a.model):
        p.error(f"--model: no such file: {a.model}")
    return a


class BenchError(Exception):
    pass


def parse_rates(label, output):
    """The decode and prompt medians (tok/s) from one program's output."""
    rates = {}
    for line in output.splitlines():
        m = RATE.match(line)
        if m:
            if m.group(1) in rates:
                raise BenchError(f"{label} printed two {m.group(1)} medians")
            rates[m.group(1)] = float(m.group(2))
    missing = [phase for phase in PHASES if phase not in rates]
    if missing:
        raise BenchError(f"{label} printed no {' or '.join(missing)} median")
    if any(rate <= 0 for rate in rates.values()):
        raise BenchError(f"{label} printed a rate that is not positive: {rates}")
    return rates


def run_and_parse(label, cmd):
    """Runs one measurement; returns its rates and its whole output."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise BenchError(f"{label} failed (exit {proc.returncode}): {' '.join(cmd)}")
    try:
        return parse_rates(label, proc.stdout), proc.stdout
    except BenchError:
        sys.stderr.write(proc.stdout)
        raise


def round_line(number, ours, theirs):
    return "round {}: {}".format(number, "; ".join(
        f"{phase} moetier {ours[phase]:.2f} / llama.cpp {theirs[phase]:.2f} tok/s = "
        f"{ours[phase] / theirs[phase]:.2f}x" for phase in PHASES))


def summary_lines(rows):
    """rows: one (moetier rates, llama.cpp rates) pair per round."""
    lines = []
    for phase in PHASES:
        ours = statistics.median(o[phase] for o, _ in rows)
        theirs = statistics.median(t[phase] for _, t in rows)
        ratio = statistics.median(o[phase] / t[phase] for o, t in rows)
        lines.append(f"{phase}: moetier {ours:.2f} tok/s, llama.cpp {theirs:.2f} tok/s (medians "
                     f"over {len(rows)} rounds); moetier / llama.cpp {ratio:.2f}x (median of the "
                     "rounds' ratios)")
    return lines


def main():
    a = parse_args()
    bench_cpu = os.path.join(a.build, "worker", "bench", "moetier-bench-cpu")
    if not os.access(bench_cpu, os.X_OK):
        sys.exit(f"bench_against_llamacpp: {bench_cpu} not found; build moetier first "
                 "(or pass --build)")
    node_llama.ensure_installed()
    common = ["--threads", str(a.threads), "--runs", str(a.runs), "--context", str(a.context),
              "--decode-tokens", str(a.decode_tokens), "--prompt-tokens", str(a.prompt_tokens),
              "--batch", str(a.batch)]
    moetier_cmd = [bench_cpu, "--model", a.model, *common, "--cache-type-k", a.cache_type,
                   "--cache-type-v", a.cache_type] + (["--huge-pages"] if a.huge_pages else [])
    llamacpp_cmd = node_llama.node_command("llamacpp_bench.mjs", "--model", a.model, *common,
                                           "--cache-type", a.cache_type)

    print(f"model {a.model}: {a.threads} threads, KV {a.cache_type}, decode {a.decode_tokens} "
          f"tokens after {a.context}, prompt {a.prompt_tokens} tokens in batches of {a.batch}, "
          f"{a.rounds} rounds of {a.runs} runs each", flush=True)
    rows = []
    try:
        for r in range(1, a.rounds + 1):
            ours, _ = run_and_parse("moetier-bench-cpu", moetier_cmd)
            theirs, output = run_and_parse("llamacpp_bench.mjs", llamacpp_cmd)
            if r == 1:  # the settings llama.cpp ran with (threads, flash attention, ...)
                print("\n".join(l for l in output.splitlines() if l.startswith("llama.cpp:")))
            rows.append((ours, theirs))
            print(round_line(r, ours, theirs), flush=True)
    except BenchError as e:
        sys.exit(f"bench_against_llamacpp: {e}")
    print("\n".join(summary_lines(rows)))


if __name__ == "__main__":
    main()
