#!/usr/bin/env python3
"""Unit tests of moetier-bench-suite: its output parsers on captured outputs of the
benchmark programs (data/), the GPU-sweep detection and the SVG plot.

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


class GpuSweepTest(unittest.TestCase):
    class Args:
        build_dir = "/nonexistent"

    def test_skips_without_a_gpu_and_without_a_cuda_engine(self):
        with tempfile.TemporaryDirectory() as d:
            worker = write_program(d, "moetier-worker",
                                   "  --backend NAME       cpu (default) or reference (the plain")
            r = suite.check_gpu_sweep(self.Args(), {"moetier-worker": worker}, [],
                                      "no NVIDIA GPU: nvidia-smi is not installed",
                                      {"MOETIER_ENABLE_CUDA": "OFF"}, lambda s: None)
        self.assertEqual(r["status"], "skipped")
        self.assertEqual(r["points"], [])
        self.assertEqual(len(r["reasons"]), 3)
        self.assertIn("nvidia-smi", r["reasons"][0])
        self.assertIn("MOETIER_ENABLE_CUDA=OFF", r["reasons"][1])
        self.assertIn("no CUDA forward engine", r["reasons"][2])

    def test_never_invents_figures_even_with_everything_present(self):
        with tempfile.TemporaryDirectory() as d:
            worker = write_program(d, "moetier-worker", "  --backend NAME  cpu, reference or cuda")
            r = suite.check_gpu_sweep(self.Args(), {"moetier-worker": worker},
                                      [{"name": "H100"}], None, {"MOETIER_ENABLE_CUDA": "ON"},
                                      lambda s: None)
        self.assertEqual(r["status"], "skipped")
        self.assertEqual(r["points"], [])
        self.assertIn("does not yet know", r["reasons"][0])

    def test_missing_worker_is_a_reason(self):
        r = suite.check_gpu_sweep(self.Args(), {}, [{"name": "H100"}], None, {}, lambda s: None)
        self.assertIn("moetier-worker is not built", r["reasons"][0])


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


class SvgTest(unittest.TestCase):
    def results(self, gpu_points):
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
                "gpu_sweep": {"status": "ran" if gpu_points else "skipped",
                              "reasons": [] if gpu_points else ["no GPU & no engine"],
                              "points": gpu_points},
            },
        }

    def parse(self, text):
        root = ET.fromstring(text.encode("utf-8"))
        self.assertEqual(root.tag, SVG_NS + "svg")
        return root

    def test_hit_rate_series_and_labels(self):
        root = self.parse(suite.render_svg(self.results([])))
        series = root.findall(".//%spolyline[@class='series']" % SVG_NS)
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
        self.assertFalse(any(s.get("data-kind") == "tok_s" for s in series))
        # Log2 axis: 8, 16 and 32 slots are equally spaced.
        xs = [float(p.split(",")[0]) for p in series[0].get("points").split()]
        self.assertAlmostEqual(xs[1] - xs[0], xs[2] - xs[1], places=1)

    def test_tok_s_panel_when_a_sweep_ran(self):
        points = [{"slots_per_layer": 8, "tok_s": 20.0, "hit_rate": 0.4},
                  {"slots_per_layer": 32, "tok_s": 45.0, "hit_rate": 0.8}]
        root = self.parse(suite.render_svg(self.results(points)))
        kinds = {s.get("data-kind") for s in root.iter(SVG_NS + "polyline")
                 if s.get("data-panel") == "gpu_sweep"}
        self.assertEqual(kinds, {"tok_s", "hit_rate"})
        texts = [t.text or "" for t in root.iter(SVG_NS + "text")]
        self.assertIn("decode tok/s", texts)


if __name__ == "__main__":
    unittest.main(verbosity=2)
