#!/usr/bin/env python3
"""The status page in headless Chromium: the heatmap has the model's
dimensions, tok/s and the queue are filled, the page updates itself, the
key field and budget form follow the server's settings; and a screenshot.

usage: status_page_browser_test.py STATUS_PAGE_TEST_SERVER OUTPUT_DIR
Exits 77 (skipped) when chromium is not installed."""
import html.parser
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from page_server import running_page_server  # noqa: E402

FAKE_LAYERS, FAKE_EXPERTS = 24, 64  # tests/http/fake_status.h


class Elements(html.parser.HTMLParser):
    """Attributes and text of every element with an id."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
            "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.by_id, self.body, self._open = {}, {}, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body = attrs
        if "id" in attrs:
            attrs["text"] = ""
            self.by_id[attrs["id"]] = attrs
        if tag not in self.VOID:
            self._open.append((tag, attrs if "id" in attrs else None))

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, element in self._open:
            if element is not None:
                element["text"] += data


def chromium_args(binary):
    return [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--virtual-time-budget=4000", "--window-size=1280,900"]


def dump_dom(chromium, url):
    result = subprocess.run(chromium_args(chromium) + ["--dump-dom", url], capture_output=True,
                            text=True, timeout=120, check=True)
    parser = Elements()
    parser.feed(result.stdout)
    return parser


def check_live_page(chromium, port):
    page = dump_dom(chromium, f"http://127.0.0.1:{port}/")
    heatmap = page.by_id["heatmap"]
    assert heatmap.get("data-layers") == str(FAKE_LAYERS), heatmap
    assert heatmap.get("data-experts") == str(FAKE_EXPERTS), heatmap
    assert heatmap.get("data-cells") == str(FAKE_LAYERS * FAKE_EXPERTS), heatmap
    assert int(heatmap["width"]) >= FAKE_EXPERTS and int(heatmap["height"]) >= FAKE_LAYERS
    tokens = page.by_id["tokens-per-s"]["text"].strip()
    assert float(tokens) > 0, f"tok/s not filled: {tokens!r}"
    assert page.by_id["queue-waiting"]["text"].strip().endswith("/ 64")
    assert page.by_id["queue-active"]["text"].strip().endswith("/ 4")
    assert "cuda:0" in page.by_id["workers"]["text"] and "cpu" in page.by_id["workers"]["text"]
    assert page.by_id["model"]["text"] == "qwen3-30b-a3b-q4_k_m.gguf"
    assert "%" in page.by_id["hit-rate-vram"]["text"]
    updates = int(page.body.get("data-updates", "0"))
    assert updates > 1, f"the page applied {updates} status updates; it should poll"
    assert "hidden" not in page.by_id["budget-form"], "budget form hidden though set_budget exists"
    assert "hidden" in page.by_id["api-key-form"], "key field shown though no keys are configured"
    return updates


def check_keyed_page_without_budget(chromium, server):
    """A fresh tab has no key: the server refuses /api/status and the page
    asks for one instead of showing stale or empty numbers."""
    with running_page_server(server, "--api-keys-configured", "--no-budget",
                             "--require-key=sk-test") as port:
        page = dump_dom(chromium, f"http://127.0.0.1:{port}/")
    assert "hidden" not in page.by_id["api-key-form"], "no key field though keys are configured"
    assert "hidden" in page.by_id["budget-form"], "budget form shown without set_budget"
    assert "API key" in page.by_id["banner"]["text"], page.by_id["banner"]
    assert page.body.get("data-updates") == "0", "the page applied a status it was refused"
    assert page.by_id["connection"]["text"] == "not authorised", page.by_id["connection"]


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("SKIP: chromium is not installed")
        return 77
    server, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    screenshot = os.path.join(out_dir, "status-page.png")
    with running_page_server(server) as port:
        updates = check_live_page(chromium, port)
        if os.path.exists(screenshot):
            os.remove(screenshot)
        subprocess.run(chromium_args(chromium) + [f"--screenshot={screenshot}",
                                                  f"http://127.0.0.1:{port}/"],
                       capture_output=True, timeout=120, check=True)
    assert os.path.getsize(screenshot) > 10_000, "the screenshot is (nearly) empty"
    check_keyed_page_without_budget(chromium, server)
    print(f"ok: {updates} live updates; screenshot: {screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
