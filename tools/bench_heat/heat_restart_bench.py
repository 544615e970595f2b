#!/usr/bin/python3
"""The hit rate of the first tokens after a restart, with and without the
heat profile, on a routing trace replay.

One synthetic qwen3moe model (moetier-synth) and routing traces from
moetier-tracegen that share --model-seed (the same experts are hot, as with
one model serving one kind of work) but differ in --seed (other sequences).
A moetierd with a CPU worker replays the "profile" trace for --train-tokens
tokens (the worker's --routing-from-trace) and stops, which saves the heat
profile. Then, for every evaluation seed, two fresh daemons replay that
seed's trace for --tokens tokens: one starting from a copy of the saved
profile, one from an empty state directory. Both have a worker expert cache
of --cache of the experts (its slots are host RAM on the CPU worker; the
GPU worker's are VRAM, with the same cache logic) and, with --ram, a RAM
store of that fraction of the experts, so the store is a cache too.

Prints, per seed and as medians, the worker cache's and the RAM store's hit
rates of those first tokens, and the warm start's hit rate as a ratio of the
cold start's. The routing is the trace's, not the synthetic weights', so
the figures say what the cache does with that routing, nothing about the
model's text.

usage: heat_restart_bench.py --build DIR [--tokens 256] [--train-tokens 2048]
                             [--layers 8] [--experts 64] [--top-k 8]
                             [--cache 25%] [--ram 50%] [--seeds 2,3,4]
A benchmark, not a test.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


class Daemon:
    """One moetierd with one CPU worker in its own directory."""

    def __init__(self, args, work, model, state_dir, trace, warm_start, ram_budget):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="d-", dir=work)
        self.socket = os.path.join(self.dir, "a.sock")
        cmd = [args.moetierd, f"--model_path={model}", "--devices=cpu",
               "--allow_unlocked_memory=true", f"--api_socket_path={self.socket}",
               "--api_socket_group=", f"--worker_socket_path={self.dir}/w.sock",
               f"--worker_executable_path={args.worker}", f"--state_directory={state_dir}",
               "--heat_profile_save_interval_s=0", f"--warm_start={str(warm_start).lower()}",
               "--worker_extra_args=--threads=2",
               f"--worker_extra_args=--routing-from-trace={trace}",
               f"--worker_extra_args=--expert-cache-mib={args.cache}",
               # Copy every miss into the cache (the CPU worker's auto policy
               # would compute them on the host and leave the cache cold).
               "--worker_extra_args=--miss-policy=copy",
               "--worker_extra_args=--prefetch=off"]
        if ram_budget:
            cmd.append(f"--ram_budget_bytes={ram_budget}")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"moetierd exited: see {self.dir}/log")
            if os.path.exists(self.socket):
                status = self.status(check=False)
                workers = status.get("workers", []) if status else []
                if workers and workers[0].get("state") == "ready":
                    return
            time.sleep(0.2)
        sys.exit(f"moetierd never got ready: see {self.dir}/log")

    def client(self, *words, check=True):
        cmd = [self.args.client, f"--socket={self.socket}", *words]
        return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)

    def status(self, check=True):
        out = self.client("status", "--json", check=check)
        if out.returncode != 0:
            return None
        return json.loads(out.stdout)

    def generate(self, tokens):
        self.client("generate", "--prompt-tokens", "1", "--ignore-eos", "-n", str(tokens),
                    "--temp", "0")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait(timeout=60) != 0:
            sys.exit(f"moetierd did not stop cleanly: see {self.dir}/log")
        self.log.close()


def counters(tier):
    hits, misses = int(tier.get("hits", 0)), int(tier.get("misses", 0))
    return hits / (hits + misses) if hits + misses else float("nan")


def ratio(a, b):
    return a / b if b else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", required=True, help="the CMake build folder")
    p.add_argument("--tokens", type=int, default=256, help="tokens measured after a restart")
    p.add_argument("--train-tokens", type=int, default=2048,
                   help="tokens replayed before the profile is saved")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--expert-ffn", type=int, default=64, help="moetier-synth --expert-ffn")
    p.add_argument("--model-seed", type=int, default=7,
                   help="tracegen --model-seed shared by every trace (which experts are hot)")
    p.add_argument("--cache", default="25%", help="the worker's --expert-cache-mib")
    p.add_argument("--ram", default="50%",
                   help="RAM store size as a share of the experts ('' or 100%%: all of them)")
    p.add_argument("--seeds", default="2,3,4", help="tracegen --seed of the evaluation traces")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    args = p.parse_args()
    b = args.build
    args.moetierd = os.path.join(b, "daemon", "moetierd")
    args.worker = os.path.join(b, "worker", "moetier-worker")
    args.client = os.path.join(b, "client", "moetier")
    synth = os.path.join(b, "tools", "synth", "moetier-synth")
    tracegen = os.path.join(b, "tools", "tracegen", "moetier-tracegen")
    for tool in (args.moetierd, args.worker, args.client, synth, tracegen):
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: build the project in {b} first")

    work = tempfile.mkdtemp(prefix="moetier-bench-heat-")
    try:
        model = os.path.join(work, "model.gguf")
        run([synth, "--arch", "qwen3moe", "--preset", "tiny", "--layers", str(args.layers),
             "--experts", str(args.experts), "--experts-used", str(args.top_k),
             "--expert-ffn", str(args.expert_ffn), "--quant", "q8_0", "--out", model])

        def trace(seed, tokens):
            path = os.path.join(work, f"seed{seed}.trace")
            run([tracegen, "--layers", str(args.layers), "--experts", str(args.experts),
                 "--top-k", str(args.top_k), "--tokens", str(tokens + 8),
                 "--model-seed", str(args.model_seed), "--seed", str(seed), "--out", path])
            return path

        profile_trace = trace(1, args.train_tokens)
        # The RAM budget: the fully resident segment less the experts left out.
        ram_budget = 0
        share = args.ram.rstrip("%")
        if share and float(share) < 100:
            probe = Daemon(args, work, model, os.path.join(work, "probe"), profile_trace,
                           False, 0)
            s = probe.status()
            probe.stop()
            left_out = int(s["expert_bytes_total"]) * (1 - float(share) / 100)
            ram_budget = int(int(s["ram_budget_bytes"]) - left_out)

        saved = os.path.join(work, "saved")
        d = Daemon(args, work, model, saved, profile_trace, True, ram_budget)
        d.generate(args.train_tokens)
        d.stop()
        print(f"profile: {args.train_tokens} tokens of tracegen --model-seed {args.model_seed} "
              f"--seed 1 ({args.layers} layers x {args.experts} experts, top-{args.top_k}); "
              f"worker cache {args.cache}, RAM store "
              f"{args.ram if ram_budget else '100%'} of the experts")
        print(f"\nfirst {args.tokens} tokens after a restart, hit rates:")
        print(f"{'seed':>6} {'cache cold':>11} {'cache warm':>11} {'ratio':>7} "
              f"{'RAM cold':>9} {'RAM warm':>9}")
        rows = []
        for seed in [int(x) for x in args.seeds.split(",") if x]:
            eval_trace = trace(seed, args.tokens)
            result = {}
            for warm in (False, True):
                state = os.path.join(work, f"state-{seed}-{'warm' if warm else 'cold'}")
                if warm:
                    shutil.copytree(saved, state)
                daemon = Daemon(args, work, model, state, eval_trace, True, ram_budget)
                if warm and not daemon.status().get("heat_profile", "").startswith("loaded"):
                    sys.exit(f"the warm daemon did not load the profile: see {daemon.dir}/log")
                daemon.generate(args.tokens)
                s = daemon.status()
                daemon.stop()
                result[warm] = (counters(s["workers"][0]["vram"]), counters(s["ram"]))
            (cc, rc), (cw, rw) = result[False], result[True]
            rows.append((cc, cw, rc, rw))
            print(f"{seed:>6} {cc:>11.3f} {cw:>11.3f} {ratio(cw, cc):>7.3f} {rc:>9.3f} "
                  f"{rw:>9.3f}")
        med = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(f"{'median':>6} {med[0]:>11.3f} {med[1]:>11.3f} {ratio(med[1], med[0]):>7.3f} "
              f"{med[2]:>9.3f} {med[3]:>9.3f}")
    finally:
        if args.keep:
            print(f"work folder: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
