#!/usr/bin/env python3
"""Runs moetier-bench-suite --quick --gpu-sweep-device cpu against a build directory and
checks what it wrote: the JSON has every expected key with positive figures, the
cache-size sweep (on the CPU worker's RAM slot cache, so it runs without a GPU) has every
configuration of moetier-bench-cache, and the SVG parses as XML and holds one hit-rate
series per policy, MIN included, without and with prefetch, and one sweep point per
configuration."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG_NS = "{http://www.w3.org/2000/svg}"


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def positive(value, what):
    check(isinstance(value, (int, float)) and value > 0, "%s is %r, expected > 0" % (what, value))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    out_json = os.path.join(args.work_dir, "results.json")
    out_svg = os.path.join(args.work_dir, "results.svg")
    cmd = [sys.executable, args.driver, "--quick", "--build-dir", args.build_dir,
           "--cache-dir", os.path.join(args.work_dir, "cache"), "--out-json", out_json,
           "--out-svg", out_svg, "--gpu-sweep-device", "cpu"]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, check=False)
    print(proc.stdout)
    check(proc.returncode == 0, "the driver exited with %d" % proc.returncode)

    with open(out_json, encoding="utf-8") as f:
        r = json.load(f)
    for key in ("schema", "created_utc", "quick", "machine", "git", "build", "benchmarks",
                "skipped"):
        check(key in r, "the JSON has no %r" % key)
    check(r["quick"] is True, "quick is not recorded")
    m = r["machine"]
    check(m["cpu_model"], "no CPU model")
    positive(m["logical_cpus"], "machine.logical_cpus")
    positive(m["ram_bytes"], "machine.ram_bytes")
    check(m["kernel"], "no kernel")
    check(isinstance(m["gpus"], list), "machine.gpus is not a list")
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.driver))))
    if os.path.isdir(os.path.join(source, ".git")) and shutil.which("git"):
        check(len(r["git"].get("commit") or "") == 40, "no git commit: %r" % r["git"])

    b = r["benchmarks"]
    cpu = b["cpu"]
    check(cpu["model"]["synthetic"] and cpu["model"]["preset"] == "tiny",
          "--quick did not use the tiny synthetic model: %r" % cpu["model"])
    positive(cpu["model"]["bytes"], "cpu.model.bytes")
    f = cpu["runs"][0]["figures"]
    check("--model" in cpu["runs"][0]["command"], "the cpu command line is not recorded")
    for key in ("ram_read_gbps", "decode_roofline_tok_s", "decode_roofline_ratio",
                "prompt_over_decode_roofline", "effective_decode_read_gbps"):
        positive(f[key], "cpu." + key)
    positive(f["decode_tok_s"]["median"], "cpu.decode_tok_s.median")
    positive(f["prompt_tok_s"]["median"], "cpu.prompt_tok_s.median")
    check(f["model_shape"]["layers"] == 2 and f["model_shape"]["experts"] == 8,
          "unexpected model shape %r" % f["model_shape"])

    s = b["store"]["figures"]
    for key in ("fill_gbps", "direct_read_gbps", "deep_direct_read_gbps"):
        positive(s[key], "store." + key)
    for key in ("acquire_release_ns", "acquire_release_contended_ns"):
        positive(s[key]["median"], "store.%s.median" % key)
        positive(s[key]["p99"], "store.%s.p99" % key)
        check(s[key]["not_resident"] == 0, "store.%s: experts not resident" % key)
    check("--synthetic-mib" in b["store"]["command"], "the store command line is not recorded")

    lab = b["policy_lab"]
    shapes = {"granite": (24, 32, 8), "generated": (48, 128, 8)}
    for key, shape in shapes.items():
        t = lab[key]
        for trace in t["traces"]:
            check((trace["layers"], trace["experts"], trace["top_k"]) == shape,
                  "%s trace shape %r" % (key, trace))
        check("min" in t["policies"] and "adaptive" in t["policies"],
              "%s policies %r" % (key, t["policies"]))
        sizes = sorted({row["slots_per_layer"] for row in t["rows"]})
        check(sizes[0] == shape[2] and sizes[-1] == shape[1], "%s sizes %r" % (key, sizes))
        for row in t["rows"]:
            positive(row["hit_rate"], "%s hit rate of %r" % (key, row))
            check(row["hit_rate"] <= 1, "%s hit rate above 1: %r" % (key, row))
        for row in t["rows"]:
            if row["policy"] == "min":
                continue
            best = [x for x in t["rows"] if x["policy"] == "min" and
                    x["slots_per_layer"] == row["slots_per_layer"] and
                    x["prefetch"] == row["prefetch"]][0]
            if not row["prefetch"]:
                check(row["hit_rate"] <= best["hit_rate"] + 1e-9,
                      "%s: %s beats MIN without prefetch: %r" % (key, row["policy"], row))
    check(len(lab["granite"]["traces"]) == 3, "expected the 3 granite decode traces")

    gpu = b["gpu_sweep"]
    check(gpu["status"] == "ok", "gpu_sweep status %r: %r" % (gpu["status"], gpu.get("reasons")))
    check(gpu["device"] == "cpu" and gpu["device_kind"] == "cpu" and "cpu" in gpu["label"],
          "the sweep is not labelled cpu: %r" % {k: gpu.get(k) for k in ("device", "label")})
    check(gpu["model"]["path"] == cpu["model"]["path"],
          "--quick sweep model %r is not the cpu part's" % gpu["model"])
    check("--device" in gpu["command"] and "--decode-tokens" in gpu["command"],
          "the sweep command line is not recorded or not --quick: %r" % gpu["command"])
    check(gpu["decode_tokens"] == 8 and gpu["runs"] == 1, "--quick token counts not used")
    positive(gpu["copy_ceiling_gbps"], "gpu_sweep.copy_ceiling_gbps")
    layers = gpu["model_shape"]["layers"]
    configs = [row["config"] for row in gpu["rows"]]
    check(configs == ["resident", "100%", "50%", "25%", "12.5%", "25%:cpu",
                      "static:%d" % (layers // 2), "static:%d" % layers],
          "sweep configurations %r" % configs)
    check(not any(x["part"] == "gpu-sweep" for x in r["skipped"]), "the sweep is listed skipped")
    rows = {row["config"]: row for row in gpu["rows"]}
    # The tiny model has 8 experts per layer, top-2: a 12.5% cache is one slot per layer,
    # fewer than a token needs, so moetier-bench-cache skips it and says why.
    check("top_k" in rows["12.5%"].get("skipped", ""), "12.5%% ran or lost its reason: %r"
          % rows["12.5%"])
    check(gpu["skipped_rows"] == [{"config": "12.5%", "reason": rows["12.5%"]["skipped"]}],
          "skipped rows %r" % gpu["skipped_rows"])
    for row in gpu["rows"]:
        if row["config"] == "12.5%":
            continue
        check("skipped" not in row, "the CPU sweep skipped %r" % row)
        positive(row["decode_tok_s"], "%s decode_tok_s" % row["config"])
        positive(row["prompt_tok_s"], "%s prompt_tok_s" % row["config"])
        positive(row["decode_over_resident"], "%s decode_over_resident" % row["config"])
        check(row["same_tokens_as_resident"],
              "%s: the cache changed the greedy tokens on the CPU" % row["config"])
        if row["kind"] != "resident":
            check(row["hits"] + row["misses"] > 0, "%s placed no expert" % row["config"])
            check(0 <= row["hit_rate"] <= 1, "%s hit rate %r" % (row["config"], row["hit_rate"]))
    check(rows["resident"]["decode_over_resident"] == 1.0, "resident ratio is not 1")
    check(rows["100%"]["hit_rate"] >= rows["25%"]["hit_rate"],
          "a 25%% cache hits more than a full one: %r" % rows)
    check(rows["25%:cpu"]["misses_on_host"] == rows["25%:cpu"]["misses"] > 0,
          "25%%:cpu did not compute its misses on the host: %r" % rows["25%:cpu"])

    root = ET.parse(out_svg).getroot()
    check(root.tag == SVG_NS + "svg", "the SVG root is %r" % root.tag)
    series = {(p.get("data-panel"), p.get("data-policy"), p.get("data-prefetch"))
              for p in root.iter(SVG_NS + "polyline") if p.get("data-kind") == "hit_rate"}
    for key in shapes:
        for policy in lab[key]["policies"]:
            for prefetch in ("off", "on"):
                check((key, policy, prefetch) in series,
                      "the SVG has no series %s/%s/prefetch %s" % (key, policy, prefetch))
    texts = " ".join(t.text or "" for t in root.iter(SVG_NS + "text"))
    check("cache slots per layer" in texts and "hit rate" in texts, "axis labels missing")
    check("--gpu-sweep-device cpu" in texts, "the sweep panel is not labelled cpu")
    for kind in ("decode_tok_s", "prompt_tok_s"):
        plotted = [e.get("data-config") for e in root.iter() if e.get("class") == "point" and
                   e.get("data-panel") == "cache_sweep" and e.get("data-kind") == kind]
        check(plotted == [c for c in configs[1:] if c != "12.5%"],
              "the sweep panel's %s points are %r" % (kind, plotted))
    check(any(t.get("class") == "skipped" and t.get("data-config") == "12.5%"
              for t in root.iter(SVG_NS + "text")), "the skipped 12.5% is not reported")
    if r["git"].get("commit"):
        check(r["git"]["commit"][:12] in texts, "the commit is not in the title")
    print("ok: %s and %s" % (out_json, out_svg))


if __name__ == "__main__":
    main()
