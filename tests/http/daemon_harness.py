"""A moetierd serving HTTP on a free loopback port, for the HTTP API tests.

Writes a tiny synthetic model with the build's moetier-synth, starts the
daemon with the given flags, waits for GET /health to answer 200, and on
stop sends SIGTERM and checks that the daemon exits 0. Whenever something
goes wrong the tail of the daemon's log is printed, since that is where the
reason is.

As a program it runs a command against a daemon:
    daemon_harness.py --moetierd M --worker W --synth S [--api-key K]
        [--daemon-flag=--max-active-sequences=4 ...] -- node test.mjs
with MOETIER_HTTP_URL, MOETIER_HTTP_PORT and MOETIER_API_KEY in the
command's environment; its exit status is the command's (77 passes through
as a skip), or 1 when the daemon misbehaves.
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

LOG_TAIL_LINES = 60
START_TIMEOUT_S = 40
STOP_TIMEOUT_S = 20


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaemonError(Exception):
    pass


class Daemon:
    """One moetierd with HTTP. Use as a context manager, or start()/stop()."""

    def __init__(self, moetierd, worker, synth, flags=(), api_keys=(), preset="tiny"):
        self.moetierd = moetierd
        self.worker = worker
        self.synth = synth
        self.flags = list(flags)
        self.api_keys = list(api_keys)
        self.preset = preset
        self.port = None
        self.process = None
        self._dir = None
        self._log = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self._dir = tempfile.TemporaryDirectory(prefix="moetier-http-")
        work = self._dir.name
        model = os.path.join(work, "tiny.gguf")
        synth = subprocess.run(
            [self.synth, "--arch", "qwen3moe", "--preset", self.preset, "--out", model],
            capture_output=True, text=True, timeout=60)
        if synth.returncode != 0:
            raise DaemonError(f"moetier-synth failed ({synth.returncode}):\n{synth.stderr}")
        self.port = free_port()
        args = [
            self.moetierd, f"--model-path={model}", "--devices=cpu",
            f"--worker-executable-path={self.worker}",
            f"--worker-socket-path={work}/w.sock", f"--api-socket-path={work}/a.sock",
            "--api-socket-group=", f"--http-listen-address=127.0.0.1:{self.port}",
        ]
        if self.api_keys:
            keys_path = os.path.join(work, "api_keys")
            with open(keys_path, "w") as f:
                f.write("# keys of the test clients\n" + "\n".join(self.api_keys) + "\n")
            os.chmod(keys_path, 0o600)
            args.append(f"--api-keys-file={keys_path}")
        args += self.flags
        self._log_path = os.path.join(work, "moetierd.log")
        self._log = open(self._log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        self._wait_healthy()
        return self

    def _wait_healthy(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        last = "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.fail(f"moetierd exited with {self.process.returncode} before /health was 200")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/health")
                response = conn.getresponse()
                body = response.read()
                conn.close()
                if response.status == 200:
                    return
                last = f"{response.status} {body[:200]!r}"
            except OSError as e:
                last = str(e)
            time.sleep(0.1)
        self.fail(f"/health was not 200 within {START_TIMEOUT_S} s (last: {last})")

    def log_tail(self):
        if self._log is None:
            return ""
        self._log.flush()
        with open(self._log_path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def print_log_tail(self):
        print(f"--- last lines of the moetierd log ---\n{self.log_tail()}\n---", file=sys.stderr,
              flush=True)

    def fail(self, message):
        self.print_log_tail()
        self._kill()
        raise DaemonError(message)

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def stop(self):
        """SIGTERM; raises DaemonError unless the daemon exits 0 in time."""
        if self.process is None:
            return
        if self.process.poll() is not None:
            self.fail(f"moetierd had already exited with {self.process.returncode}")
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.fail(f"moetierd did not exit within {STOP_TIMEOUT_S} s of SIGTERM")
        if code != 0:
            self.fail(f"moetierd exited with {code} on SIGTERM, not 0")
        self._cleanup()

    def _kill(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._cleanup()

    def _cleanup(self):
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            if self.process is not None:
                self.print_log_tail()
            self._kill()
            return False
        self.stop()
        return False

    # Small HTTP helpers for the Python tests.
    def request(self, method, path, body=None, headers=None, timeout=30):
        """(status, headers dict with lower-case names, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body
            all_headers = dict(headers or {})
            if isinstance(body, (dict, list)):
                data = json.dumps(body).encode()
                all_headers.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=data, headers=all_headers)
            response = conn.getresponse()
            payload = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, payload
        finally:
            conn.close()


def add_binary_arguments(parser):
    parser.add_argument("--moetierd", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--synth", required=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_binary_arguments(parser)
    parser.add_argument("--api-key", action="append", default=[],
                        help="serve with this API key (repeatable); the first is given to the command")
    parser.add_argument("--daemon-flag", action="append", default=[],
                        help="one more moetierd flag, e.g. --daemon-flag=--max-active-sequences=4")
    parser.add_argument("--timeout", type=float, default=50,
                        help="seconds the command may run")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    try:
        with Daemon(args.moetierd, args.worker, args.synth, args.daemon_flag,
                    args.api_key) as daemon:
            env = dict(os.environ, MOETIER_HTTP_URL=daemon.url, MOETIER_HTTP_PORT=str(daemon.port),
                       MOETIER_API_KEY=args.api_key[0] if args.api_key else "unused")
            try:
                code = subprocess.run(command, env=env, timeout=args.timeout).returncode
            except subprocess.TimeoutExpired:
                daemon.fail(f"{' '.join(command)} did not finish within {args.timeout} s")
            if code != 0:
                if code != 77:
                    daemon.print_log_tail()
                daemon._kill()
                return code
    except DaemonError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
