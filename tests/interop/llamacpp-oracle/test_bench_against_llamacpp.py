#!/usr/bin/env python3
"""The parts of bench_against_llamacpp.py that do not run a model."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_against_llamacpp as bench  # noqa: E402

MOETIER_OUTPUT = """model: full.gguf
KV cache: keys f16, values f16, 98304 bytes per token of context
decode:  15.46 tok/s median (14.90..15.80), 32 tokens after 16 of context, 5 runs
prompt:  54.3 tok/s median (53.0..55.1), 256 tokens, 5 runs
roofline ratio (decode tok/s / (bandwidth / bytes per token)): 55.0% (median decode / best bandwidth)
"""

LLAMACPP_OUTPUT = """llama.cpp: model full.gguf, 2 threads, KV F16, flash attention on, batch 256
decode:  11.51 tok/s median (11.20..11.70), 32 tokens after 16 of context, 5 runs
prompt:  24.3 tok/s median (24.0..24.9), 256 tokens, 5 runs
"""


class ParseRatesTest(unittest.TestCase):
    def test_reads_both_programs_medians(self):
        self.assertEqual(bench.parse_rates("moetier", MOETIER_OUTPUT),
                         {"decode": 15.46, "prompt": 54.3})
        self.assertEqual(bench.parse_rates("llama.cpp", LLAMACPP_OUTPUT),
                         {"decode": 11.51, "prompt": 24.3})

    def test_missing_phase_is_named(self):
        without_prompt = "\n".join(l for l in LLAMACPP_OUTPUT.splitlines()
                                   if not l.startswith("prompt:"))
        with self.assertRaisesRegex(bench.BenchError, "llama.cpp printed no prompt median"):
            bench.parse_rates("llama.cpp", without_prompt)
        with self.assertRaisesRegex(bench.BenchError, "no decode or prompt median"):
            bench.parse_rates("moetier", "moetier-bench-cpu: bandwidth check failed\n")

    def test_repeated_or_zero_rates_are_refused(self):
        with self.assertRaisesRegex(bench.BenchError, "two decode medians"):
            bench.parse_rates("x", MOETIER_OUTPUT + MOETIER_OUTPUT)
        with self.assertRaisesRegex(bench.BenchError, "not positive"):
            bench.parse_rates("x", MOETIER_OUTPUT.replace("15.46 tok/s", "0.00 tok/s"))


class SummaryTest(unittest.TestCase):
    def test_ratio_is_the_median_of_each_rounds_ratio(self):
        # Ratios per round: decode 2.0, 1.0, 3.0 -> 2.0; the medians of the
        # sides alone (20 and 10) would say 2.0 too, prompt tells them apart:
        # ratios 4.0, 1.0, 1.5 -> 1.5, medians 40 / 20 = 2.0.
        rows = [({"decode": 20.0, "prompt": 40.0}, {"decode": 10.0, "prompt": 10.0}),
                ({"decode": 10.0, "prompt": 20.0}, {"decode": 10.0, "prompt": 20.0}),
                ({"decode": 30.0, "prompt": 60.0}, {"decode": 10.0, "prompt": 40.0})]
        decode, prompt = bench.summary_lines(rows)
        self.assertIn("moetier 20.00 tok/s, llama.cpp 10.00 tok/s", decode)
        self.assertIn("2.00x", decode)
        self.assertIn("moetier 40.00 tok/s, llama.cpp 20.00 tok/s", prompt)
        self.assertIn("moetier / llama.cpp 1.50x", prompt)
        self.assertIn("over 3 rounds", prompt)

    def test_round_line_gives_each_phase_ratio(self):
        line = bench.round_line(2, {"decode": 15.0, "prompt": 50.0},
                                {"decode": 10.0, "prompt": 25.0})
        self.assertEqual(line, "round 2: decode moetier 15.00 / llama.cpp 10.00 tok/s = 1.50x; "
                         "prompt moetier 50.00 / llama.cpp 25.00 tok/s = 2.00x")


if __name__ == "__main__":
    unittest.main()
