#!/usr/bin/python3
"""What streaming through HTTP costs against gRPC, measured in one run.

Starts one moetierd (CPU worker, a synthetic qwen3moe model) with both front
doors, then alternates greedy generations of the same prompt: one over gRPC
(Generate, python3-grpcio with a protoc descriptor set, as docs/api/generate.py
does) and one over HTTP (POST /v1/completions with "stream": true, Python's
http.client). Each run's decode rate is what its client saw: (tokens - 1) /
(time of the last token - time of the first), so prefill is left out.
Prints every run, the medians and HTTP's rate as a ratio of gRPC's; the goal
is a ratio of at least 0.98 (HTTP adds no more than 2 %).

usage: bench_frontdoor.py --moetierd PATH --worker PATH --synth PATH --protoc PATH
                          [--preset small] [--tokens 256] [--runs 7]
A benchmark, not a test: the machine's noise is in the figures.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "http"))
sys.path.insert(0, os.path.join(REPO, "docs", "api"))

import grpc  # noqa: E402
import daemon_harness  # noqa: E402
import generate as grpc_api  # noqa: E402

PROMPT = "The quick brown fox"


def rate(times, tokens):
    """Tokens after the first over the time from the first piece to the last.
    (A token whose bytes end mid-character sends no piece of its own, so the
    count comes from the stats, not from the pieces.)"""
    if len(times) < 2 or times[-1] <= times[0]:
        return float("nan")
    return (tokens - 1) / (times[-1] - times[0])


def grpc_run(stub, classes, tokens):
    request = classes["moetier.v1.GenerateRequest"](prompt=PROMPT, max_new_tokens=tokens)
    times, tokens = [], 0
    for reply in stub(request):
        if reply.text:
            times.append(time.perf_counter())
        if reply.HasField("final_stats"):
            tokens = reply.final_stats.generated_tokens
    return times, tokens


def http_run(port, tokens):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    times, tokens = [], 0
    while True:
        line = response.readline()
        if not line:
            break
        if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
            event = json.loads(line[6:])
            if event["choices"] and event["choices"][0]["text"]:
                times.append(time.perf_counter())
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    conn.close()
    return times, tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--moetierd", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--synth", required=True)
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--preset", default="small", help="moetier-synth preset (default small)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per generation")
    parser.add_argument("--runs", type=int, default=7, help="generations per front door")
    args = parser.parse_args()

    with daemon_harness.Daemon(args.moetierd, args.worker, args.synth,
                               preset=args.preset) as daemon:
        work = os.path.dirname(daemon._log_path)
        descriptors = os.path.join(work, "moetier.pb")
        subprocess.run([args.protoc, "--include_imports", f"--descriptor_set_out={descriptors}",
                        "-I", os.path.join(REPO, "proto"),
                        os.path.join(REPO, "proto", "moetier", "v1", "moetier.proto")],
                       check=True)
        classes = grpc_api.message_classes(descriptors)
        channel = grpc.insecure_channel(f"unix:{work}/a.sock")
        stub = grpc_api.method(channel, "/moetier.v1.Moetier/Generate",
                               classes["moetier.v1.GenerateRequest"],
                               classes["moetier.v1.GenerateResponse"], streaming=True)
        grpc_run(stub, classes, 8)  # warm-up: the worker's first request
        http_run(daemon.port, 8)
        grpc_rates, http_rates = [], []
        print(f"{'run':>4} {'grpc tok/s':>11} {'http tok/s':>11} {'tokens':>7}")
        for run in range(args.runs):
            g_times, g_tokens = grpc_run(stub, classes, args.tokens)
            h_times, h_tokens = http_run(daemon.port, args.tokens)
            grpc_rates.append(rate(g_times, g_tokens))
            http_rates.append(rate(h_times, h_tokens))
            print(f"{run:>4} {grpc_rates[-1]:>11.1f} {http_rates[-1]:>11.1f} "
                  f"{g_tokens:>4}/{h_tokens:<4}")
        g_median = statistics.median(grpc_rates)
        h_median = statistics.median(http_rates)
        print(f"median: gRPC {g_median:.1f} tok/s, HTTP {h_median:.1f} tok/s, "
              f"HTTP/gRPC = {h_median / g_median:.3f} (goal >= 0.98)")


if __name__ == "__main__":
    main()
