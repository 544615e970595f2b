#!/usr/bin/env python3
"""Unit tests of moetier-bench-suite: its output parsers on captured outputs of the
benchmark programs (data/), the cache-size sweep's detection and run, and the SVG plot.

A benchmark program whose output format changes makes these tests fail, so the
driver is updated with it instead of recording nothing or the wrong figure.
"""

import importlib.machinery
import importlib.util
import json
import os
import stat
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
DRIVER = os.environ.get("MOETIER_BENCH_SUITE") or os.path.join(
    HERE, "..", "..", "tools", "bench_suite", "moetier-bench-suite")
SVG_NS = "{http://www.w3.org/2000/svg}"


def load_driver():
    loader = importlib.machinery.SourceFileLoader("moetier_bench_suite", DRIVER)
    spec = importlib.util.spec_from_loader("moetier_bench_suite", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


suite = load_driver()


def sample(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def without_line(text, prefix):
    lines = text.splitlines(keepends=True)
    kept = [l for l in lines if not l.lstrip().startswith(prefix)]
    assert len(kept) == len(lines) - 1, "sample has no single line starting with %r" % prefix
    return "".join(kept)


class BenchCpuParserTest(unittest.TestCase):
    REQUIRED = ("2 layers, embd", "threads:", "RAM read bandwidth:", "weights read per decode",
                "KV cache read", "decode:", "prompt:", "roofline ratio", "per run, against",
                "effective decode read rate", "decode time by phase", "check: ok")

    def test_reads_every_figure(self):
        f = suite.parse_bench_cpu(sample("bench_cpu.txt"))
        self.assertEqual(f["model_shape"], {"layers": 2, "embd": 64, "experts": 8, "top_k": 2,
                                            "expert_ffn": 256, "heads": 4, "heads_kv": 2,
                                            "head_dim": 32, "vocab": 512})
        self.assertEqual((f["threads"], f["simd"], f["batch"]), (2, "avx512", 32))
        self.assertEqual(f["decode_tok_s"], {"median": 16039.52, "min": 1843.20, "max": 19104.20})
        self.assertEqual(f["prompt_tok_s"], {"median": 64216.0, "min": 9522.2, "max": 67761.0})
        self.assertEqual((f["decode_tokens"], f["context_tokens"], f["runs"]), (8, 16, 5))
        self.assertEqual(f["prompt_tokens"], 32)
        self.assertAlmostEqual(f["decode_roofline_ratio"], 0.137)
        self.assertAlmostEqual(f["decode_roofline_ratio_per_run"]["median"], 0.149)
        self.assertAlmostEqual(f["decode_roofline_ratio_per_run"]["min"], 0.016)
        self.assertEqual(f["effective_decode_read_gbps"], 3.07)
        self.assertEqual(f["routing"], "router")
        self.assertAlmostEqual(f["prompt_over_decode_roofline"],
                               64216.0 / f["decode_roofline_tok_s"])
        self.assertEqual(f["decode_phase_share"]["experts"], 0.80)
        self.assertEqual(f["decode_phase_share"]["attention projections"], 0.11)
        self.assertAlmostEqual(sum(f["decode_phase_share"].values()), 1.0, places=2)
        self.assertGreater(f["ram_read_gbps"], 0)

    def test_replayed_routing_is_labelled(self):
        f = suite.parse_bench_cpu(sample("bench_cpu_replay.txt"))
        self.assertEqual(f["routing"], "routing replayed from /tmp/bs/tiny-trace.txt")
        self.assertEqual(f["decode_tok_s"]["median"], 4978.55)
        self.assertEqual(len(f["decode_phase_share"]), 7)
        self.assertNotIn("[", "".join(f["decode_phase_share"]))

    def test_every_expected_line_is_required(self):
        text = sample("bench_cpu.txt")
        for prefix in self.REQUIRED:
            with self.subTest(line=prefix):
                with self.assertRaises(suite.MissingFigure) as e:
                    suite.parse_bench_cpu(without_line(text, prefix))
                # The error shows what the program printed.
                self.assertIn("check: ok (runs reproduced" if prefix != "check: ok" else
                              "threads: 2, simd: avx512", str(e.exception))

    def test_changed_format_fails(self):
        text = sample("bench_cpu.txt").replace("tok/s median (1843", "tok/s mean (1843")
        with self.assertRaises(suite.MissingFigure):
            suite.parse_bench_cpu(text)

    def test_zero_is_an_error(self):
        text = sample("bench_cpu.txt").replace("decode:  16039.52 tok/s", "decode:  0.00 tok/s")
        with self.assertRaisesRegex(suite.BenchError, "decode_tok_s is 0.0"):
            suite.parse_bench_cpu(text)


class BenchStoreParserTest(unittest.TestCase):
    REQUIRED = ("model:", "page cache dropped", "fill rate (median", "fill rate vs the same read",
                "timer overhead", "hit acquire+release: median",
                "hit acquire+release with a concurrent")

    def test_reads_every_figure(self):
        f = suite.parse_bench_store(sample("bench_store.txt"))
        self.assertEqual(f["model"]["layers"], 8)
        self.assertEqual(f["model"]["experts"], 2)
        self.assertEqual(f["runs"], 2)
        self.assertEqual(f["fill_gbps"], 0.656)
        self.assertEqual(f["io_backend"], "io_uring")
        self.assertEqual(f["direct_read_gbps"], 0.784)
        self.assertAlmostEqual(f["fill_over_direct_read"], 0.837)
        self.assertEqual(f["deep_direct_read_gbps"], 0.399)
        self.assertEqual(f["deep_read_chunks_in_flight"], 4)
        self.assertEqual(f["acquire_release_ns"],
                         {"median": 60.0, "p99": 110.0, "samples_per_run": 20000,
                          "not_resident": 0})
        self.assertEqual(f["acquire_release_contended_ns"]["p99"], 86.0)
        self.assertEqual(f["acquire_release_contended_ns"]["other_thread_ops"], 80306)
        self.assertEqual(f["timer_overhead_ns"], 30.0)
        self.assertTrue(f["memory_locked"])
        self.assertTrue(f["page_cache_dropped"])

    def test_every_expected_line_is_required(self):
        text = sample("bench_store.txt")
        for prefix in self.REQUIRED:
            with self.subTest(line=prefix):
                with self.assertRaises(suite.MissingFigure) as e:
                    suite.parse_bench_store(without_line(text, prefix))
                self.assertIn("moetier-bench-store", str(e.exception))

    def test_run_lines_are_required(self):
        text = "".join(l for l in sample("bench_store.txt").splitlines(keepends=True)
                       if not l.startswith("run "))
        with self.assertRaises(suite.MissingFigure):
            suite.parse_bench_store(text)

    def test_unlocked_memory_is_reported(self):
        text = sample("bench_store.txt").replace("0.02 GiB, memory locked)",
                                                 "0.02 GiB, memory NOT locked)", 1)
        self.assertFalse(suite.parse_bench_store(text)["memory_locked"])


class PolicyLabParserTest(unittest.TestCase):
    def test_reads_the_table(self):
        t = suite.parse_policy_lab_json(sample("policy_lab.json"))
        self.assertEqual(t["policies"], ["lru", "lfu", "lrfu", "reuse", "adaptive", "min"])
        self.assertEqual(t["traces"][0]["layers"], 24)
        self.assertEqual(t["traces"][0]["experts"], 32)
        self.assertEqual(len(t["rows"]), 3 * 2 * 6)  # sizes x prefetch x policies
        self.assertEqual(sorted({r["slots_per_layer"] for r in t["rows"]}), [8, 16, 32])
        lru = [r for r in t["rows"] if r["policy"] == "lru" and r["slots"] == "k"
               and not r["prefetch"]][0]
        self.assertEqual(lru["hit_rate"], 0.439616)
        self.assertEqual(lru["requests"], 12288)
        self.assertAlmostEqual(lru["copies_per_request"], 6886 / 12288)
        self.assertNotIn("per_layer_hit_rate", lru)
        for r in t["rows"]:
            if r["policy"] == "min":
                self.assertEqual(r["ratio_to_min"], 1.0)

    def test_missing_key_fails(self):
        data = json.loads(sample("policy_lab.json"))
        del data["results"][3]["hit_rate"]
        with self.assertRaisesRegex(suite.MissingFigure, "hit_rate"):
            suite.parse_policy_lab_json(json.dumps(data))

    def test_not_json_fails(self):
        with self.assertRaises(suite.MissingFigure):
            suite.parse_policy_lab_json("traces: 1 file(s)\n")

    def test_rates_out_of_range_fail(self):
        data = json.loads(sample("policy_lab.json"))
        data["results"][0]["hit_rate"] = 1.5
        with self.assertRaises(suite.BenchError):
            suite.parse_policy_lab_json(json.dumps(data))


def write_program(directory, name, help_text):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\ncat <<'EOF'\n%s\nEOF\n" % help_text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


CUDA_FIXTURE = "bench_cache_cuda_handwritten_fixture"  # format of the program, numbers made up
CPU_CAPTURE = "bench_cache_cpu"  # a real moetier-bench-cache --device cpu run


class BenchCacheParserTest(unittest.TestCase):
    def parse(self, base, json_text=None, output=None):
        return suite.parse_bench_cache(json_text if json_text is not None else
                                       sample(base + ".json"),
                                       output if output is not None else sample(base + ".txt"))

    def test_reads_min_on_the_served_sequence_where_a_row_has_it(self):
        data = json.loads(sample(CPU_CAPTURE + ".json"))
        row = data["rows"][1]
        row.update(min_hits=row["hits"] + 10, min_requests=row["hits"] + row["misses"],
                   min_hit_rate=0.8, ratio_to_min=0.9)
        f = self.parse(CPU_CAPTURE, json_text=json.dumps(data))
        self.assertEqual((f["rows"][1]["min_hit_rate"], f["rows"][1]["ratio_to_min"]), (0.8, 0.9))
        self.assertNotIn("ratio_to_min", f["rows"][0])
        del row["ratio_to_min"]
        with self.assertRaisesRegex(suite.MissingFigure, "ratio_to_min"):
            self.parse(CPU_CAPTURE, json_text=json.dumps(data))
        row.update(ratio_to_min=0.9, min_hit_rate=1.5)
        with self.assertRaisesRegex(suite.BenchError, "MIN hit rate"):
            self.parse(CPU_CAPTURE, json_text=json.dumps(data))

    def test_reads_every_row_of_a_cuda_run(self):
        f = self.parse(CUDA_FIXTURE)
        self.assertEqual((f["device"], f["device_kind"]), ("cuda:0", "cuda"))
        self.assertEqual(f["copy_ceiling_gbps"], 52.31)
        self.assertEqual(f["copy_ceiling_kind"], "pinned host-to-device copy")
        self.assertEqual(f["model_shape"], {"layers": 48, "experts": 128, "top_k": 8})
        self.assertEqual((f["decode_tokens"], f["context_tokens"], f["prompt_tokens"], f["runs"],
                          f["threads"]), (128, 16, 512, 3, 16))
        self.assertEqual([r["config"] for r in f["rows"]],
                         ["resident", "100%", "50%", "25%", "12.5%", "25%:cpu", "static:24",
                          "static:48"])
        self.assertEqual(f["resident"], {"decode_tok_s": 183.42, "prompt_tok_s": 6120.4})
        rows = {r["config"]: r for r in f["rows"]}
        self.assertEqual(rows["resident"]["decode_over_resident"], 1.0)
        self.assertIsNone(rows["resident"]["hit_rate"])
        r = rows["50%"]
        self.assertEqual((r["kind"], r["percent"], r["miss"], r["prefetch"]),
                         ("cache", 50.0, "auto", True))
        self.assertEqual(r["decode_over_resident"], round(122.61 / 183.42, 6))
        self.assertEqual(r["prompt_over_resident"], round(3120.7 / 6120.4, 6))
        self.assertAlmostEqual(r["hit_rate"], 134185 / (134185 + 13271), places=6)
        self.assertAlmostEqual(r["host_share"], 2100 / (134185 + 13271), places=6)
        self.assertAlmostEqual(r["host_miss_share"], 2100 / 13271, places=6)
        self.assertAlmostEqual(r["prefetch_accuracy"], 7400 / 9800, places=6)
        self.assertAlmostEqual(r["copy_gbps"], 48.02, places=4)  # as the table prints it
        self.assertAlmostEqual(r["copy_over_ceiling"], 48.02 / 52.31, places=4)
        self.assertEqual(r["pool_bytes"], 9399435264)
        self.assertTrue(r["same_tokens_as_resident"])
        self.assertFalse(rows["12.5%"]["same_tokens_as_resident"])
        self.assertIsNone(rows["100%"]["copy_gbps"])  # no fill, no rate
        self.assertIsNone(rows["100%"]["prefetch_accuracy"])
        self.assertEqual((rows["static:48"]["kind"], rows["static:48"]["host_layers"]),
                         ("static", 48))
        self.assertIsNone(rows["static:48"]["percent"])
        self.assertEqual(rows["static:48"]["host_share"], 1.0)
        # A skipped row keeps its reason and has no figures.
        skipped = rows["25%:cpu"]
        self.assertIn("built without", skipped["skipped"])
        self.assertNotIn("decode_tok_s", skipped)
        self.assertEqual(f["skipped_rows"], [{"config": "25%:cpu", "reason": skipped["skipped"]}])

    def test_reads_a_real_cpu_run(self):
        f = self.parse(CPU_CAPTURE)
        self.assertEqual((f["device"], f["device_kind"]), ("cpu", "cpu"))
        self.assertIn("--gpu-sweep-device cpu", f["label"])
        self.assertIn("memcpy", f["copy_ceiling_kind"])
        self.assertGreater(f["copy_ceiling_gbps"], 0)
        self.assertEqual(f["routing"], "the router's own choice")
        self.assertEqual(f["model_shape"], {"layers": 4, "experts": 8, "top_k": 2})
        rows = {r["config"]: r for r in f["rows"]}
        self.assertEqual(list(rows), ["resident", "100%", "50%", "25%", "12.5%", "25%:cpu",
                                      "static:2", "static:4"])
        self.assertEqual(rows["25%:cpu"]["miss"], "cpu")
        # 12.5% of 8 experts is one slot per layer, fewer than top-2: the program skips it.
        self.assertEqual([r["config"] for r in f["skipped_rows"]], ["12.5%"])
        self.assertIn("needs at least top_k = 2 slots per layer", rows["12.5%"]["skipped"])
        for r in f["rows"]:
            if "skipped" in r:
                continue
            self.assertGreater(r["decode_tok_s"], 0)
            self.assertGreater(r["prompt_tok_s"], 0)
            self.assertAlmostEqual(r["decode_over_resident"],
                                   r["decode_tok_s"] / f["resident"]["decode_tok_s"], places=5)
            if r["kind"] != "resident":
                self.assertGreaterEqual(r["hit_rate"], 0)
                self.assertLessEqual(r["hit_rate"], 1)
        # A smaller cache cannot hit more often.
        self.assertGreater(rows["100%"]["hit_rate"], rows["25%"]["hit_rate"])
        self.assertAlmostEqual(rows["50%"]["hit_rate"], 2129 / (2129 + 1027), places=6)
        self.assertAlmostEqual(rows["50%"]["prefetch_accuracy"], 787 / 963, places=6)
        self.assertAlmostEqual(rows["50%"]["copy_gbps"], 20.82, places=2)  # as the table prints
        self.assertEqual(rows["static:4"]["hit_rate"], 0.0)  # every expert on the host
        self.assertGreater(rows["25%:cpu"]["misses_on_host"], 0)
        self.assertEqual(rows["25%:cpu"]["host_miss_share"], 1.0)

    def test_the_table_must_list_the_same_run(self):
        text = sample(CUDA_FIXTURE + ".txt").replace("122.61    0.67", "125.61    0.67")
        with self.assertRaisesRegex(suite.BenchError, "not the same run"):
            self.parse(CUDA_FIXTURE, output=text)
        data = json.loads(sample(CUDA_FIXTURE + ".json"))
        data["rows"][1], data["rows"][2] = data["rows"][2], data["rows"][1]
        with self.assertRaisesRegex(suite.BenchError, "not the same run"):
            self.parse(CUDA_FIXTURE, json_text=json.dumps(data))

    def test_every_expected_line_is_required(self):
        text = sample(CUDA_FIXTURE + ".txt")
        for prefix in ("model:", "experts in host memory", "device:", "decode 128 tokens",
                       "experts: the router", "config ", "25%:cpu        skipped"):
            with self.subTest(line=prefix):
                with self.assertRaises(suite.MissingFigure) as e:
                    self.parse(CUDA_FIXTURE, output=without_line(text, prefix))
                self.assertIn("moetier-bench-cache", str(e.exception))

    def test_missing_key_fails(self):
        data = json.loads(sample(CUDA_FIXTURE + ".json"))
        del data["rows"][3]["misses_on_host"]
        with self.assertRaisesRegex(suite.MissingFigure, "misses_on_host"):
            self.parse(CUDA_FIXTURE, json_text=json.dumps(data))
        del data["copy_ceiling_bytes_per_s"]
        with self.assertRaisesRegex(suite.MissingFigure, "copy_ceiling_bytes_per_s"):
            self.parse(CUDA_FIXTURE, json_text=json.dumps(data))

    def test_bad_figures_fail(self):
        for key, value, error in (("decode_tok_s", 0, "decode_tok_s is 0"),
                                  ("hits", -3, "hits of row 50% is -3"),
                                  ("percent", 25, "percent 25")):
            with self.subTest(key=key):
                data = json.loads(sample(CUDA_FIXTURE + ".json"))
                data["rows"][2][key] = value
                with self.assertRaisesRegex(suite.BenchError, error):
                    self.parse(CUDA_FIXTURE, json_text=json.dumps(data))
        with self.assertRaises(suite.MissingFigure):
            self.parse(CUDA_FIXTURE, json_text="{\"model\": \"m\", \"rows\": [")

    def test_device_and_routing_of_stdout_and_json_must_agree(self):
        data = json.loads(sample(CUDA_FIXTURE + ".json"))
        data["device"] = "cuda:1"
        with self.assertRaisesRegex(suite.BenchError, "names device cuda:0"):
            self.parse(CUDA_FIXTURE, json_text=json.dumps(data))
        data = json.loads(sample(CUDA_FIXTURE + ".json"))
        data["routing"] = "routing replayed from /t.txt"
        with self.assertRaisesRegex(suite.BenchError, "experts came from"):
            self.parse(CUDA_FIXTURE, json_text=json.dumps(data))


def write_program(directory, name, help_text):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\ncat <<'EOF'\n%s\nEOF\n" % help_text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def write_bench_cache(directory, base, args_log):
    """A stand-in moetier-bench-cache: logs its arguments, prints BASE.txt and copies
    BASE.json to --json (BASE: a name in data/ or a path)."""
    base = os.path.join(DATA, base)
    path = os.path.join(directory, "moetier-bench-cache")
    with open(path, "w", encoding="utf-8") as f:
        f.write('#!/bin/sh\necho "$@" > %s\nwhile [ $# -gt 0 ]; do\n'
                '  if [ "$1" = --json ]; then cp %s "$2"; fi\n  shift\ndone\ncat %s\n'
                % (args_log, base + ".json", base + ".txt"))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class GpuSweepTest(unittest.TestCase):
    class Args:
        build_dir = "/nonexistent"
        gpu_sweep_device = "cuda:0"
        gpu_sweep_preset = None
        gpu_sweep_routing_trace = None
        model = __file__  # any existing file: no synthetic model is written
        quick = False
        threads = 0
        timeout = 60

    def args(self, **kw):
        a = self.Args()
        for k, v in kw.items():
            setattr(a, k, v)
        return a

    def test_skips_with_every_reason(self):
        r = suite.check_gpu_sweep(self.args(), {}, [], "no NVIDIA GPU: nvidia-smi is not installed",
                                  {"MOETIER_ENABLE_CUDA": "OFF"}, lambda s: None)
        self.assertEqual(r["status"], "skipped")
        self.assertEqual(r["rows"], [])
        self.assertEqual(len(r["reasons"]), 3)
        self.assertIn("nvidia-smi", r["reasons"][0])
        self.assertIn("MOETIER_ENABLE_CUDA=OFF", r["reasons"][1])
        self.assertIn("moetier-bench-cache is not built", r["reasons"][2])

    def test_reasons_of_a_build_without_nvcc_and_a_missing_device(self):
        reasons = suite.gpu_sweep_reasons(
            self.args(gpu_sweep_device="cuda:1"), {"moetier-bench-cache": "/x"},
            [{"name": "H100"}], None,
            {"MOETIER_ENABLE_CUDA": "ON", "CMAKE_CUDA_COMPILER": "CMAKE_CUDA_COMPILER-NOTFOUND"})
        self.assertEqual(len(reasons), 2)
        self.assertIn("no cuda:1: nvidia-smi lists 1 GPU(s)", reasons[0])
        self.assertIn("found no nvcc", reasons[1])
        self.assertFalse(any("--backend" in r for r in reasons))

    def test_nothing_missing_means_no_reason(self):
        self.assertEqual(suite.gpu_sweep_reasons(
            self.args(), {"moetier-bench-cache": "/x"}, [{"name": "H100"}], None,
            {"MOETIER_ENABLE_CUDA": "ON", "CMAKE_CUDA_COMPILER": "/usr/local/cuda/bin/nvcc"}), [])

    def test_cpu_device_needs_only_the_program(self):
        args = self.args(gpu_sweep_device="cpu")
        self.assertEqual(suite.gpu_sweep_reasons(args, {"moetier-bench-cache": "/x"}, [],
                                                 "no NVIDIA GPU", {"MOETIER_ENABLE_CUDA": "OFF"}),
                         [])
        reasons = suite.gpu_sweep_reasons(args, {}, [], "no NVIDIA GPU", {})
        self.assertEqual(len(reasons), 1)
        self.assertIn("moetier-bench-cache is not built", reasons[0])

    def test_runs_the_program_and_records_every_row(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "args")
            exe = write_bench_cache(d, CUDA_FIXTURE, log)
            r = suite.check_gpu_sweep(self.args(), {"moetier-bench-cache": exe},
                                      [{"name": "H200"}], None, {"MOETIER_ENABLE_CUDA": "ON"},
                                      lambda s: None)
            with open(log, encoding="utf-8") as f:
                argv = f.read().split()
        self.assertEqual(r["status"], "ok")
        self.assertEqual(r["reasons"], [])
        self.assertEqual(argv[:4], ["--model", __file__, "--device", "cuda:0"])
        self.assertEqual(argv[-2], "--json")
        self.assertNotIn("--decode-tokens", argv)
        self.assertEqual(r["command"][1:], argv)
        self.assertEqual(r["model"], {"path": __file__, "synthetic": False,
                                      "bytes": os.path.getsize(__file__)})
        self.assertEqual(len(r["rows"]), 8)
        self.assertEqual(r["skipped_rows"][0]["config"], "25%:cpu")
        self.assertEqual(r["rows"][2]["decode_tok_s"], 122.61)

    def test_quick_uses_small_token_counts(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "args")
            exe = write_bench_cache(d, CPU_CAPTURE, log)
            r = suite.check_gpu_sweep(self.args(gpu_sweep_device="cpu", quick=True, threads=2),
                                      {"moetier-bench-cache": exe}, [], "no NVIDIA GPU", {},
                                      lambda s: None)
            with open(log, encoding="utf-8") as f:
                argv = f.read().split()
        self.assertEqual(r["status"], "ok")
        self.assertEqual(r["device_kind"], "cpu")
        for flag, value in (("--device", "cpu"), ("--decode-tokens", "8"), ("--runs", "1"),
                            ("--threads", "2")):
            self.assertEqual(argv[argv.index(flag) + 1], value)
        self.assertNotIn("--routing-from-trace", argv)

    def test_no_json_file_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            exe = write_program(d, "moetier-bench-cache", sample(CUDA_FIXTURE + ".txt"))
            with self.assertRaisesRegex(suite.MissingFigure, "(?s)its --json file .*"
                                        "pinned host-to-device copy rate"):
                suite.check_gpu_sweep(self.args(), {"moetier-bench-cache": exe},
                                      [{"name": "H200"}], None, {}, lambda s: None)

    def test_routing_trace_is_passed_on(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "args")
            exe = write_bench_cache(d, CUDA_FIXTURE, log)
            suite.check_gpu_sweep(self.args(gpu_sweep_routing_trace="/t/gen.txt"),
                                  {"moetier-bench-cache": exe}, [{"name": "H200"}], None, {},
                                  lambda s: None)
            with open(log, encoding="utf-8") as f:
                argv = f.read().split()
        self.assertEqual(argv[argv.index("--routing-from-trace") + 1], "/t/gen.txt")

    def test_device_flag(self):
        self.assertEqual(suite.parse_args([]).gpu_sweep_device, "cuda:0")
        self.assertEqual(suite.parse_args(["--gpu-sweep-device", "cpu"]).gpu_sweep_device, "cpu")
        self.assertEqual(suite.parse_args(["--gpu-sweep-device", "cuda:3"]).gpu_sweep_device,
                         "cuda:3")
        with open(os.devnull, "w", encoding="utf-8") as null:
            saved, sys.stderr = sys.stderr, null
            try:
                with self.assertRaises(SystemExit):
                    suite.parse_args(["--gpu-sweep-device", "gpu0"])
            finally:
                sys.stderr = saved

    def test_every_row_skipped_is_a_skipped_sweep(self):
        data = json.loads(sample(CUDA_FIXTURE + ".json"))
        data["rows"] = [{"config": r["config"], "skipped": "no VRAM"} for r in data["rows"]]
        text = "".join(l if not l[:1].isalnum() or l.startswith(("model", "experts", "device",
                                                                "decode", "config", "running",
                                                                "hit%"))
                       else l.split()[0].ljust(14) + " skipped\n"
                       for l in sample(CUDA_FIXTURE + ".txt").splitlines(keepends=True))
        with tempfile.TemporaryDirectory() as d:
            for ext, body in ((".json", json.dumps(data)), (".txt", text)):
                with open(os.path.join(d, "all-skipped" + ext), "w", encoding="utf-8") as f:
                    f.write(body)
            exe = write_bench_cache(d, os.path.join(d, "all-skipped"), os.path.join(d, "args"))
            r = suite.check_gpu_sweep(self.args(), {"moetier-bench-cache": exe},
                                      [{"name": "H200"}], None, {}, lambda s: None)
        self.assertEqual(r["status"], "skipped")
        self.assertIn("skipped every configuration", r["reasons"][0])
        self.assertEqual(len(r["skipped_rows"]), 8)


class FindProgramsTest(unittest.TestCase):
    def test_finds_executables_and_ignores_cmake_files(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "CMakeFiles", "x"))
            os.makedirs(os.path.join(d, "tools", "policy_lab"))
            write_program(os.path.join(d, "CMakeFiles", "x"), "moetier-tracegen", "")
            lab = write_program(os.path.join(d, "tools", "policy_lab"), "moetier-policy-lab", "")
            found = suite.find_programs(d)
        self.assertEqual(found, {"moetier-policy-lab": lab})
        with self.assertRaisesRegex(suite.BenchError, "moetier-synth is not built"):
            suite.need(found, "moetier-synth", d)


def sweep_record(base):
    f = suite.parse_bench_cache(sample(base + ".json"), sample(base + ".txt"))
    return dict(status="ok", reasons=[], **f)


class SvgTest(unittest.TestCase):
    def results(self, gpu_sweep=None):
        granite = suite.parse_policy_lab_json(sample("policy_lab.json"))
        granite.update(title="granite", description="granite traces")
        return {
            "created_utc": "2026-01-02T03:04:05+00:00", "quick": False,
            "machine": {"cpu_model": "Test CPU <1>", "logical_cpus": 4, "ram_bytes": 8 << 30,
                        "gpus": []},
            "git": {"commit": "0123456789abcdef0123", "dirty": False},
            "benchmarks": {
                "cpu": {"model": {"path": "/m/tiny.gguf"},
                        "runs": [{"figures": suite.parse_bench_cpu(sample("bench_cpu.txt"))}]},
                "store": {"figures": suite.parse_bench_store(sample("bench_store.txt"))},
                "policy_lab": {"granite": granite},
                "gpu_sweep": gpu_sweep or {"status": "skipped", "device": "cuda:0",
                                           "reasons": ["no GPU & no engine"], "rows": []},
            },
        }

    def parse(self, text):
        root = ET.fromstring(text.encode("utf-8"))
        self.assertEqual(root.tag, SVG_NS + "svg")
        return root

    def sweep_points(self, root, kind):
        return [e for e in root.iter() if e.get("class") == "point" and
                e.get("data-panel") == "cache_sweep" and e.get("data-kind") == kind]

    def test_hit_rate_series_and_labels(self):
        root = self.parse(suite.render_svg(self.results()))
        series = root.findall(".//%spolyline[@class='series'][@data-kind='hit_rate']" % SVG_NS)
        got = {(s.get("data-panel"), s.get("data-policy"), s.get("data-prefetch")) for s in series}
        want = {("granite", p, pf) for p in ("lru", "lfu", "lrfu", "reuse", "adaptive", "min")
                for pf in ("on", "off")}
        self.assertEqual(got, want)
        for s in series:
            points = [tuple(map(float, p.split(","))) for p in s.get("points").split()]
            self.assertEqual(len(points), 3)
            self.assertEqual(points, sorted(points))  # left to right
        texts = [t.text or "" for t in root.iter(SVG_NS + "text")]
        self.assertIn("cache slots per layer (log2 scale)", texts)
        self.assertIn("hit rate (hits / routed experts)", texts)
        self.assertTrue(any("0123456789ab" in t and "Test CPU <1>" in t for t in texts))
        self.assertTrue(any(t.startswith("GPU sweep skipped: no GPU & no engine") for t in texts))
        self.assertEqual(self.sweep_points(root, "decode_tok_s"), [])
        # Log2 axis: 8, 16 and 32 slots are equally spaced.
        xs = [float(p.split(",")[0]) for p in series[0].get("points").split()]
        self.assertAlmostEqual(xs[1] - xs[0], xs[2] - xs[1], places=1)

    def test_ratio_to_min_panel(self):
        results = self.results()
        root = self.parse(suite.render_svg(results))
        series = root.findall(".//%spolyline[@class='series'][@data-kind='ratio_to_min']" % SVG_NS)
        got = {(s.get("data-panel"), s.get("data-policy"), s.get("data-prefetch")) for s in series}
        want = {("granite", p, pf) for p in ("lru", "lfu", "lrfu", "reuse", "adaptive", "min")
                for pf in ("on", "off")}
        self.assertEqual(got, want)
        goal = [e for e in root.iter(SVG_NS + "line") if e.get("class") == "goal"]
        self.assertEqual(len(goal), 1)
        goal_y = float(goal[0].get("y1"))
        rows = results["benchmarks"]["policy_lab"]["granite"]["rows"]
        for s in series:
            ys = [float(p.split(",")[1]) for p in s.get("points").split()]
            ratios = sorted((r["slots_per_layer"], r["ratio_to_min"]) for r in rows
                            if r["policy"] == s.get("data-policy")
                            and r["prefetch"] == (s.get("data-prefetch") == "on"))
            for y, (_, ratio) in zip(ys, ratios):
                # Above the goal line exactly when the ratio passes the goal (y grows down).
                self.assertEqual(y < goal_y, ratio > suite.MIN_RATIO_GOAL, (s.get("data-policy"),
                                                                            ratio))
            if s.get("data-policy") == "min":
                self.assertEqual(len(set(ys)), 1)  # MIN is 1 everywhere
        texts = [t.text or "" for t in root.iter(SVG_NS + "text")]
        self.assertIn("hits / MIN's hits", texts)

    def test_hit_rate_panel_is_unchanged_by_a_sweep(self):
        without = suite.render_svg(self.results())
        with_sweep = suite.render_svg(self.results(sweep_record(CUDA_FIXTURE)))
        granite = lambda text: [ET.tostring(e) for e in self.parse(text).iter()
                                if e.get("data-panel") == "granite"]
        self.assertEqual(granite(without), granite(with_sweep))
        self.assertTrue(granite(without))

    def test_sweep_panel_of_a_cuda_run(self):
        sweep = sweep_record(CUDA_FIXTURE)
        root = self.parse(suite.render_svg(self.results(sweep)))
        decode = self.sweep_points(root, "decode_tok_s")
        prompt = self.sweep_points(root, "prompt_tok_s")
        ran = [r["config"] for r in sweep["rows"] if "skipped" not in r and r["kind"] != "resident"]
        # One point per cache and static row that ran; the skipped row is not plotted.
        self.assertEqual([p.get("data-config") for p in decode], ran)
        self.assertEqual([p.get("data-config") for p in prompt], ran)
        self.assertNotIn("25%:cpu", ran)
        self.assertEqual({p.tag for p in decode if p.get("data-config").startswith("static")},
                         {SVG_NS + "rect"})
        self.assertEqual({p.tag for p in decode if p.get("data-config").endswith("%")},
                         {SVG_NS + "circle"})
        # x: log2 of the cache size, so 12.5, 25, 50 and 100% are equally spaced, small to large.
        xs = [float(p.get("cx")) for p in decode if p.tag == SVG_NS + "circle"]
        by_config = dict(zip([p.get("data-config") for p in decode if p.tag == SVG_NS + "circle"],
                             xs))
        steps = [by_config["25%"] - by_config["12.5%"], by_config["50%"] - by_config["25%"],
                 by_config["100%"] - by_config["50%"]]
        self.assertGreater(steps[0], 0)
        for step in steps[1:]:
            self.assertAlmostEqual(step, steps[0], delta=0.25)  # coordinates have 1 decimal
        # y: a faster row sits higher; the resident rates are reference lines above the rest.
        ys = {p.get("data-config"): float(p.get("cy")) for p in decode if p.tag == SVG_NS + "circle"}
        self.assertLess(ys["100%"], ys["50%"])
        self.assertLess(ys["50%"], ys["12.5%"])
        refs = {e.get("data-kind"): float(e.get("y1")) for e in root.iter(SVG_NS + "line")
                if e.get("class") == "reference"}
        self.assertEqual(set(refs), {"resident_decode_tok_s", "resident_prompt_tok_s"})
        self.assertLess(refs["resident_decode_tok_s"], ys["100%"])
        self.assertLess(refs["resident_prompt_tok_s"], refs["resident_decode_tok_s"])
        hits = self.sweep_points(root, "hit_rate")
        self.assertEqual(len(hits), len(ran))
        kinds = {s.get("data-kind") for s in root.iter(SVG_NS + "polyline")
                 if s.get("data-panel") == "cache_sweep"}
        self.assertEqual(kinds, {"decode_tok_s", "prompt_tok_s", "hit_rate"})
        texts = [t.text or "" for t in root.iter(SVG_NS + "text")]
        self.assertTrue(any(t.startswith("GPU expert-cache sweep (cuda:0)") for t in texts))
        self.assertIn("12.5%", texts)
        self.assertIn("100%", texts)
        self.assertIn("static:48", texts)
        self.assertIn("expert cache size, % of all experts' bytes (log2 scale)", texts)
        self.assertIn("copy ceiling: 52.31 GB/s", texts)
        # The skipped row is reported with its reason, beside the panel and in the summary.
        notes = [t for t in root.iter(SVG_NS + "text") if t.get("class") == "skipped"]
        self.assertTrue(notes)
        self.assertEqual({t.get("data-config") for t in notes}, {"25%:cpu"})
        self.assertTrue(any(t.startswith("sweep configurations not run: 25%:cpu (miss policy")
                            for t in texts))
        self.assertTrue(any(t.startswith("GPU sweep (cuda:0), experts: the router's own choice, "
                                         "copy ceiling 52.31 GB/s: resident decode 183 tok/s")
                            for t in texts))

    def test_sweep_panel_of_a_cpu_run_is_labelled_cpu(self):
        sweep = sweep_record(CPU_CAPTURE)
        root = self.parse(suite.render_svg(self.results(sweep)))
        texts = [t.text or "" for t in root.iter(SVG_NS + "text")]
        self.assertTrue(any(t.startswith("Cache sweep on the CPU (--gpu-sweep-device cpu")
                            for t in texts))
        self.assertFalse(any(t.startswith("GPU expert-cache sweep") for t in texts))
        self.assertTrue(any(t.startswith("cache sweep on the CPU") for t in texts))
        decode = self.sweep_points(root, "decode_tok_s")
        # Every row but resident and the skipped 12.5%.
        self.assertEqual([p.get("data-config") for p in decode],
                         ["100%", "50%", "25%", "25%:cpu", "static:2", "static:4"])
        self.assertEqual({t.get("data-config") for t in root.iter(SVG_NS + "text")
                          if t.get("class") == "skipped"}, {"12.5%"})
        # 25%:cpu (misses on the CPU) is a diamond beside the 25% point.
        diamond = [p for p in decode if p.get("data-config") == "25%:cpu"]
        self.assertEqual(len(diamond), 1)
        self.assertIn("rotate(45", diamond[0].get("transform"))
        self.assertIn("25%:cpu", texts)

    def test_many_skipped_rows_stay_beside_the_panel(self):
        # As with a CUDA engine that runs only with every expert resident.
        sweep = sweep_record(CUDA_FIXTURE)
        reason = ("the CUDA engine's VRAM expert cache is not built yet: run with every expert "
                  "resident (standalone) or on device cpu")
        sweep["rows"] = [sweep["rows"][0]] + [
            {"config": r["config"], "kind": r["kind"], "percent": r["percent"], "skipped": reason}
            for r in sweep["rows"][1:]]
        sweep["skipped_rows"] = [{"config": r["config"], "reason": reason}
                                 for r in sweep["rows"][1:]]
        root = self.parse(suite.render_svg(self.results(sweep)))
        self.assertEqual(self.sweep_points(root, "decode_tok_s"), [])
        self.assertEqual(len([e for e in root.iter(SVG_NS + "line")
                              if e.get("class") == "reference"]), 2)
        texts = list(root.iter(SVG_NS + "text"))
        notes = [t for t in texts if (t.get("class") or "").startswith("skipped")]
        self.assertIn("more not run (reasons below)", notes[-1].text)
        summary = [t for t in texts if (t.text or "").startswith("sweep configurations not run")]
        self.assertEqual(len(summary), 1)
        self.assertLess(max(float(t.get("y")) for t in notes), float(summary[0].get("y")) - 12)
        self.assertTrue(summary[0].text.startswith(
            "sweep configurations not run: 100%, 50%, 25%, 12.5%, 25%:cpu, static:24, static:48 "
            "(the CUDA engine's VRAM expert cache"))

    def test_no_panel_when_every_row_was_skipped(self):
        sweep = sweep_record(CUDA_FIXTURE)
        for r in sweep["rows"]:
            for key in list(r):
                if key not in ("config", "kind", "percent"):
                    del r[key]
            r["skipped"] = "no VRAM"
        sweep.update(status="skipped", reasons=["moetier-bench-cache skipped every configuration"])
        root = self.parse(suite.render_svg(self.results(sweep)))
        self.assertEqual(self.sweep_points(root, "decode_tok_s"), [])
        texts = [t.text or "" for t in root.iter(SVG_NS + "text")]
        self.assertTrue(any(t.startswith("GPU sweep skipped: moetier-bench-cache skipped every")
                            for t in texts))


if __name__ == "__main__":
    unittest.main(verbosity=2)
