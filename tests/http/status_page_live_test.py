#!/usr/bin/env python3
"""The status page of a real daemon while it generates: headless Chromium
loads GET / from moetierd itself, and the page shows the model's experts x
layers, a live queue with the running request and a decode rate, and keeps
polling. (status_page_browser_test.py covers the page's settings on a fake
status; this is the same page on the real /api/status.)

usage: status_page_live_test.py --moetierd PATH --worker PATH --synth PATH
Exits 77 (skipped) when chromium is not installed."""
import argparse
import os
import shutil
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import daemon_harness  # noqa: E402
from status_page_browser_test import dump_dom  # noqa: E402

# moetier-synth's qwen3moe "small" preset.
LAYERS, EXPERTS = 4, 32


def generate_until(daemon, stop):
    """Back-to-back streamed completions, so one is always running."""
    while not stop.is_set():
        status, _, body = daemon.request("POST", "/v1/completions", {
            "prompt": "Once upon a time", "max_tokens": 2000, "temperature": 1.0, "seed": 7})
        if status != 200:
            raise AssertionError(f"a completion failed: {status} {body!r}")


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("SKIP: chromium is not installed")
        return 77
    parser = argparse.ArgumentParser()
    daemon_harness.add_binary_arguments(parser)
    args = parser.parse_args()
    with daemon_harness.Daemon(args.moetierd, args.worker, args.synth, preset="small") as daemon:
        # One finished request first, so the worker has a decode rate.
        status, _, _ = daemon.request("POST", "/v1/completions",
                                   {"prompt": "hello", "max_tokens": 16, "temperature": 0})
        assert status == 200, status
        stop = threading.Event()
        generator = threading.Thread(target=generate_until, args=(daemon, stop), daemon=True)
        generator.start()
        try:
            page = dump_dom(chromium, f"{daemon.url}/")
        finally:
            stop.set()
        heatmap = page.by_id["heatmap"]
        assert heatmap.get("data-layers") == str(LAYERS), heatmap
        assert heatmap.get("data-experts") == str(EXPERTS), heatmap
        updates = int(page.body.get("data-updates", "0"))
        assert updates > 1, f"the page applied {updates} status updates; it should poll"
        tokens = page.by_id["tokens-per-s"]["text"].strip()
        assert float(tokens) > 0, f"tok/s not filled: {tokens!r}"
        active = page.by_id["queue-active"]["text"].strip()
        assert active.startswith("1 /"), f"the running request is not shown: {active!r}"
        assert "cpu" in page.by_id["workers"]["text"]
        generator.join(timeout=60)
        print(f"ok: {updates} updates, {tokens} tok/s, active {active}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
