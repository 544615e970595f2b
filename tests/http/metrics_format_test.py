#!/usr/bin/env python3
"""GET /metrics read by Prometheus' own Python parser, plus the rules that
parser is lenient about: HELP and TYPE for every family, moetier_ names,
_total counters, no duplicate series, well-formed histograms.

usage: metrics_format_test.py STATUS_PAGE_TEST_SERVER
Exits 77 (skipped) when python3-prometheus-client is not installed."""
import os
import re
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from page_server import running_page_server  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIP: python3-prometheus-client is not installed")
    sys.exit(77)

NAME = re.compile(r"^moetier_[a-z0-9_]+$")
REQUIRED = {
    "moetier_requests": "counter",
    "moetier_generated_tokens": "counter",
    "moetier_prompt_tokens": "counter",
    "moetier_time_to_first_token_seconds": "histogram",
    "moetier_inter_token_latency_seconds": "histogram",
    "moetier_request_duration_seconds": "histogram",
    "moetier_queue_waiting_requests": "gauge",
    "moetier_queue_active_sequences": "gauge",
    "moetier_tier_resident_experts": "gauge",
    "moetier_tier_resident_bytes": "gauge",
    "moetier_tier_hits": "counter",
    "moetier_tier_misses": "counter",
    "moetier_disk_read_bytes": "counter",
    "moetier_evictions": "counter",
    "moetier_worker_decode_tokens_per_second": "gauge",
    "moetier_worker_cache_hit_ratio": "gauge",
    "moetier_worker_prefetch_issued": "counter",
    "moetier_worker_prefetch_used": "counter",
    "moetier_worker_prefetch_wasted": "counter",
    "moetier_worker_copied_bytes": "counter",
    "moetier_worker_copy_bytes_per_second": "gauge",
    "moetier_worker_restarts": "counter",
    "moetier_worker_state": "gauge",
}


def check_declarations(text):
    helped, typed = set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split(" ")[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in typed, f"{name} declared twice"
            typed[name] = kind
    assert helped == set(typed), f"HELP without TYPE or back: {helped ^ set(typed)}"
    for name, kind in typed.items():
        assert NAME.match(name), f"bad metric name {name}"
        if kind == "counter":
            assert name.endswith("_total"), f"counter {name} does not end in _total"
    return typed


def check_families(families):
    kinds = {f.name: f.type for f in families}
    for name, kind in REQUIRED.items():
        assert kinds.get(name) == kind, f"{name}: expected a {kind}, got {kinds.get(name)}"
    seen = set()
    for family in families:
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, f"duplicate series {key}"
            seen.add(key)
        if family.type == "histogram":
            buckets = [s for s in family.samples if s.name.endswith("_bucket")]
            bounds = [float(s.labels["le"]) for s in buckets]
            counts = [s.value for s in buckets]
            assert bounds == sorted(bounds) and bounds[-1] == float("inf"), family.name
            assert counts == sorted(counts), f"{family.name}: buckets are not cumulative"
            count = [s.value for s in family.samples if s.name.endswith("_count")]
            assert count == [counts[-1]], f"{family.name}: +Inf bucket != count"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def main():
    with running_page_server(sys.argv[1]) as port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            content_type = response.headers["Content-Type"]
            text = response.read().decode("utf-8")
    assert content_type == "text/plain; version=0.0.4; charset=utf-8", content_type
    check_declarations(text)
    values = check_families(list(text_string_to_metric_families(text)))
    ok = ("moetier_requests_total", (("outcome", "ok"), ("transport", "http")))
    assert values[ok] == 1, values.get(ok)
    assert values[("moetier_generated_tokens_total", ())] == 128
    gpu = {"device": "cuda:0", "worker": "1"}
    assert values[("moetier_worker_restarts_total", tuple(sorted(gpu.items())))] == 1
    ready = tuple(sorted({**gpu, "state": "ready"}.items()))
    assert values[("moetier_worker_state", ready)] == 1
    print(f"ok: {len(values)} series in {len(text)} bytes parse as Prometheus text 0.0.4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
