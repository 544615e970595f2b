#!/usr/bin/python3
"""`moetier serve` as a person tries the HTTP API with it.

Starts `moetier serve --port 0` (the real moetierd and moetier-worker of this
build) on moetier-synth's tiny model, reads the base URL it prints, lists the
models and asks for a chat completion of 4 tokens, then sends SIGINT: it must
exit 0 within 30 s with its private directory removed. Then `--port` on a port
this test holds must fail with an error naming the address.

Exit status 77 (skipped) when the programs are not built.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIPPED = 77
START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 30


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(SKIPPED)


def fail(what, err_path=None):
    tail = ""
    if err_path is not None and os.path.exists(err_path):
        with open(err_path, errors="replace") as err:
            tail = "\nits stderr:\n" + err.read()
    sys.exit(f"FAILED: {what}{tail}")


def http(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return response.status, json.loads(response.read())


def wait_for_url(process, out_path, err_path):
    """The base URL from the first line `moetier serve` prints."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(out_path) as out:
            text = out.read()
        found = re.search(r'^moetier serve: OpenAI-compatible API at (http://\S+)/v1 '
                          r'\(model "([^"]+)"\)$', text, re.MULTILINE)
        if found and "Ctrl-C stops it." in text:
            return found.group(1), found.group(2), text
        if process.poll() is not None:
            fail(f"moetier serve exited with {process.returncode} before serving", err_path)
        time.sleep(0.1)
    fail(f"no URL printed within {START_TIMEOUT_S} s", err_path)


def serve(programs, model, work, *flags):
    out_path = os.path.join(work, "serve.out")
    err_path = os.path.join(work, "serve.err")
    env = dict(os.environ, TMPDIR=work)
    with open(out_path, "w") as out, open(err_path, "w") as err:
        process = subprocess.Popen(
            [programs["moetier"], "serve", "--moetierd", programs["moetierd"], "--worker",
             programs["worker"], "-t", "1", *flags, model], stdout=out, stderr=err, env=env)
    return process, out_path, err_path


def check_serves_until_sigint(programs, model, work):
    process, out_path, err_path = serve(programs, model, work, "--port", "0")
    try:
        base, model_id, text = wait_for_url(process, out_path, err_path)
        if model_id != "tiny":
            fail(f"the model named {model_id!r}, not 'tiny'", err_path)
        if f"status page {base}/ , metrics {base}/metrics" not in text:
            fail(f"no status page and metrics line in:\n{text}", err_path)
        run_dir = re.search(r"sockets and log in (\S+)", open(err_path).read())
        if run_dir is None or not os.path.isdir(run_dir.group(1)):
            fail("the daemon's directory not named on stderr", err_path)

        status, models = http(base + "/v1/models")
        if status != 200 or [m["id"] for m in models["data"]] != ["tiny"]:
            fail(f"/v1/models answered {status}: {models}", err_path)
        status, reply = http(base + "/v1/chat/completions", {
            "model": "tiny", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Hello"}]})
        if status != 200 or reply["usage"]["completion_tokens"] != 4:
            fail(f"/v1/chat/completions answered {status}: {reply}", err_path)

        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            fail(f"still running {STOP_TIMEOUT_S} s after SIGINT", err_path)
        if code != 0:
            fail(f"exit status {code} after SIGINT, not 0", err_path)
        if os.path.exists(run_dir.group(1)):
            fail(f"{run_dir.group(1)} still there after the stop", err_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def check_port_in_use(programs, model, work):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        process, _, err_path = serve(programs, model, work, "--port", str(port))
        try:
            code = process.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            fail(f"still running with port {port} in use", err_path)
        err = open(err_path).read()
        if code == 0:
            fail(f"exit status 0 with port {port} in use", err_path)
        if not re.search(rf"^moetier serve: .*cannot start the HTTP API: .*127\.0\.0\.1:{port}",
                         err, re.MULTILINE):
            fail(f"no error naming 127.0.0.1:{port}", err_path)
    finally:
        holder.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    programs = {name: os.path.join(args.build_dir, path) for name, path in {
        "moetier": "client/moetier", "moetierd": "daemon/moetierd",
        "worker": "worker/moetier-worker", "synth": "tools/synth/moetier-synth"}.items()}
    for path in programs.values():
        if not os.access(path, os.X_OK):
            skip(f"{path} is not built")

    work = tempfile.mkdtemp(prefix="moetier-serve-", dir="/tmp")
    try:
        model = os.path.join(work, "tiny.gguf")
        subprocess.run([programs["synth"], "--preset", "tiny", "--out", model, "--quiet"],
                       check=True)
        check_serves_until_sigint(programs, model, work)
        check_port_in_use(programs, model, work)
        print("OK: URL printed, /v1/models, a 4-token chat completion, SIGINT -> 0 and cleaned "
              "up; a port in use named in the error")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
