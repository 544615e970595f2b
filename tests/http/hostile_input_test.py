"""moetierd's HTTP API against hostile and broken clients.

Malformed and ill-typed bodies must get a 400 whose error names the field,
an oversized body a 413, a wrong key a 401; a client that reads slowly
still gets its whole stream, and one that hangs up mid-stream gives its
sequence back at once. After all of it the daemon still serves and exits 0
on SIGTERM. Python's standard library only: what is sent is exactly what a
broken client would send.

    hostile_input_test.py --moetierd M --worker W --synth S [unittest args]
"""

import argparse
import json
import socket
import sys
import threading
import time
import unittest

from daemon_harness import Daemon, add_binary_arguments

API_KEY = "sk-hostile-test"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
BINARIES = None  # set by main()
USER_TURN = [{"role": "user", "content": "Tell me about the sea."}]


def raw_request(port, method, path, body=b"", headers=None, rcvbuf=None):
    """A connected socket that has sent one HTTP/1.1 request."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in {**AUTH, **(headers or {})}.items()]
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def read_all(sock):
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def split_response(raw):
    """(status, headers with lower-case names, body with chunking undone)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        decoded = b""
        while True:
            size_line, _, rest = body.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            assert rest[size:size + 2] == b"\r\n", "a chunk does not end in CRLF"
            decoded += rest[:size]
            body = rest[size + 2:]
        body = decoded
    return status, headers, body


def sse_events(body):
    """The data of each server-sent event; the last one must be [DONE]."""
    events = [e for e in body.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events[:3]
    data = [e[len("data: "):] for e in events]
    assert data and data[-1] == "[DONE]", f"the stream does not end in [DONE]: {data[-2:]}"
    return [json.loads(d) for d in data[:-1]]


class HostileInputTest(unittest.TestCase):
    daemon = None

    @classmethod
    def setUpClass(cls):
        # One sequence at a time and one waiting, so a sequence that is not
        # given back shows as a refused request.
        cls.daemon = Daemon(*BINARIES, api_keys=[API_KEY],
                            flags=["--max-active-sequences=1", "--max-queued-requests=1",
                                   "--http-max-body-bytes=1048576"]).start()

    @classmethod
    def tearDownClass(cls):
        try:
            status, _, body = cls.chat({"messages": USER_TURN, "max_tokens": 3})
            if status != 200:
                cls.daemon.fail(f"after the hostile clients a normal request got {status}: {body}")
        finally:
            cls.daemon.stop()

    def setUp(self):
        if not self.daemon.alive():
            self.fail("moetierd is not running")

    def tearDown(self):
        if not self.daemon.alive():
            self.daemon.fail("moetierd died during the test")

    @classmethod
    def chat(cls, body, headers=None, timeout=30):
        return cls.daemon.request("POST", "/v1/chat/completions", body,
                                  {**AUTH, **(headers or {})}, timeout)

    def expect_error(self, status, body, field, path="/v1/chat/completions", words=()):
        """POSTs `body`; checks the status and that the error names `field`."""
        got, _, payload = self.daemon.request("POST", path, body, AUTH)
        self.assertEqual(got, status, payload)
        error = json.loads(payload)["error"]
        self.assertEqual(error["type"], "invalid_request_error")
        self.assertIn(field, error["message"])
        if error.get("param") is not None:
            self.assertEqual(error["param"], field)
        for word in words:
            self.assertIn(word, error["message"])
        return error

    def test_truncated_json(self):
        got, _, payload = self.daemon.request(
            "POST", "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "hel', AUTH)
        self.assertEqual(got, 400)
        self.assertIn("not valid JSON", json.loads(payload)["error"]["message"])

    def test_number_too_large_for_a_double(self):
        got, _, payload = self.daemon.request(
            "POST", "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e400}', AUTH)
        self.assertEqual(got, 400, payload)
        self.assertIn("1e400", json.loads(payload)["error"]["message"])

    def test_deeply_nested_body(self):
        depth = 100000
        body = b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
        got, _, payload = self.daemon.request("POST", "/v1/chat/completions", body, AUTH)
        self.assertEqual(got, 400, payload)
        self.assertEqual(json.loads(payload)["error"]["param"], "messages[0]")

    def test_body_not_an_object(self):
        got, _, payload = self.daemon.request("POST", "/v1/chat/completions", b"[1, 2]", AUTH)
        self.assertEqual(got, 400)
        self.assertIn("JSON object", json.loads(payload)["error"]["message"])

    def test_wrong_types(self):
        self.expect_error(400, {"messages": "hello"}, "messages", words=["array"])
        self.expect_error(400, {"messages": USER_TURN, "max_tokens": "ten"}, "max_tokens",
                          words=["integer"])
        self.expect_error(400, {"messages": USER_TURN, "temperature": -1}, "temperature")
        self.expect_error(400, {"messages": USER_TURN, "stream": "yes"}, "stream")
        self.expect_error(400, {"messages": [{"role": "user", "content": 5}]},
                          "messages[0].content")
        self.expect_error(400, {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
                          "messages[0].content[0].text")
        self.expect_error(400, {"messages": USER_TURN, "stream_options": {"include_usage": 1}},
                          "stream_options.include_usage")
        self.expect_error(400, {"prompt": {"text": "x"}}, "prompt", path="/v1/completions")

    def test_max_tokens_far_too_large(self):
        error = self.expect_error(400, {"messages": USER_TURN, "max_tokens": 10**9}, "max_tokens")
        self.assertEqual(error["param"], "max_tokens")
        error = self.expect_error(400, {"messages": USER_TURN, "max_completion_tokens": 10**9},
                                  "max_completion_tokens")
        self.assertEqual(error["param"], "max_completion_tokens")
        self.expect_error(400, {"messages": USER_TURN, "max_tokens": 10**30}, "max_tokens")
        self.expect_error(400, {"prompt": "x", "max_tokens": 10**9}, "max_tokens",
                          path="/v1/completions")

    def test_unknown_role(self):
        error = self.expect_error(400, {"messages": [{"role": "wizard", "content": "x"}]},
                                  "messages[0].role", words=["wizard"])
        self.assertEqual(error["param"], "messages[0].role")

    def test_tool_parameters_not_an_object(self):
        tools = [{"type": "function", "function": {"name": "f", "parameters": "{not json"}}]
        self.expect_error(400, {"messages": USER_TURN, "tools": tools},
                          "tools[0].function.parameters", words=["object"])

    def test_hundred_megabyte_body_gets_413(self):
        announced = 100 << 20
        sock = socket.create_connection(("127.0.0.1", self.daemon.port), timeout=30)
        head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {announced}\r\n\r\n")
        sock.sendall(head.encode())
        block = b" " * (1 << 20)
        sent = 0
        try:
            while sent < announced:
                sock.sendall(block)
                sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon answered and closed before the whole body came
        try:
            raw = read_all(sock)
        except ConnectionResetError:
            raw = b""
        sock.close()
        self.assertTrue(raw.startswith(b"HTTP/1.1 413"),
                        f"after {sent} bytes sent: {raw[:200]!r}")
        status, _, body = split_response(raw)
        self.assertEqual(status, 413)
        self.assertIn("http_max_body_bytes", json.loads(body)["error"]["message"])
        got, _, _ = self.daemon.request("GET", "/health")
        self.assertEqual(got, 200)

    def test_slow_reader_gets_the_whole_stream(self):
        # More than the socket buffers hold, so the daemon waits on the reader.
        tokens = 1500
        body = json.dumps({"messages": USER_TURN, "max_tokens": tokens, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}}).encode()
        sock = raw_request(self.daemon.port, "POST", "/v1/chat/completions", body, rcvbuf=4096)
        raw = b""
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            raw += sock.recv(64)
            time.sleep(0.1)
        raw += read_all(sock)
        sock.close()
        status, _, payload = split_response(raw)
        self.assertEqual(status, 200)
        chunks = sse_events(payload)
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], tokens)
        finishes = [c["finish_reason"] for ch in chunks for c in ch["choices"] if c["finish_reason"]]
        self.assertEqual(finishes, ["length"])

    def start_two_short_requests(self):
        """Two short requests sent together: (threads, statuses as they come)."""
        statuses = []

        def one():
            statuses.append(self.chat({"messages": USER_TURN, "max_tokens": 2})[0])

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        return threads, statuses

    def two_short_requests_at_once(self):
        threads, statuses = self.start_two_short_requests()
        for t in threads:
            t.join()
        return sorted(statuses)

    def open_long_stream(self):
        body = json.dumps({"messages": USER_TURN, "max_tokens": 4000, "temperature": 0,
                           "stream": True}).encode()
        sock = raw_request(self.daemon.port, "POST", "/v1/chat/completions", body)
        first = sock.recv(4096)
        self.assertTrue(first.startswith(b"HTTP/1.1 200"), first[:100])
        return sock

    def wait_until_idle(self):
        deadline = time.monotonic() + 20
        while self.two_short_requests_at_once() != [200, 200]:
            self.assertLess(time.monotonic(), deadline, "the daemon did not become idle")
            time.sleep(0.1)

    def test_client_gone_mid_stream_frees_its_sequence(self):
        self.wait_until_idle()
        # A long stream its client does not read holds the one sequence: of
        # two more requests one is refused and one waits...
        sock = self.open_long_stream()
        threads, statuses = self.start_two_short_requests()
        deadline = time.monotonic() + 10
        while not statuses and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(statuses, [429])
        # ...until that client hangs up, which gives the sequence back.
        hung_up = time.monotonic()
        sock.close()
        for t in threads:
            t.join()
        self.assertEqual(sorted(statuses), [200, 429])
        self.assertLess(time.monotonic() - hung_up, 5)
        # Hung up right after the first bytes: both are served.
        sock = self.open_long_stream()
        sock.close()
        start = time.monotonic()
        statuses = self.two_short_requests_at_once()
        while statuses != [200, 200] and time.monotonic() - start < 0.3:
            time.sleep(0.02)
            statuses = self.two_short_requests_at_once()
        self.assertEqual(statuses, [200, 200], "the dropped stream still holds its sequence")
        status, _, body = self.daemon.request("GET", "/metrics", headers=AUTH)
        self.assertEqual(status, 200)
        for line in body.decode().splitlines():
            if line.startswith(("moetier_queue_active_sequences", "moetier_queue_waiting_requests")):
                self.assertEqual(float(line.split()[-1]), 0, line)

    def test_wrong_key_is_401(self):
        for headers in ({"Authorization": "Bearer sk-wrong"}, {"Authorization": "Basic abc"}, {}):
            got, response_headers, payload = self.daemon.request(
                "POST", "/v1/chat/completions", {"messages": USER_TURN}, headers)
            self.assertEqual(got, 401, headers)
            self.assertIn("API key", json.loads(payload)["error"]["message"])
            self.assertEqual(response_headers.get("www-authenticate"), "Bearer")
        got, _, _ = self.daemon.request("GET", "/v1/models", headers={"Authorization": "Bearer "})
        self.assertEqual(got, 401)

    def test_health_needs_no_key(self):
        got, _, payload = self.daemon.request("GET", "/health")
        self.assertEqual(got, 200)
        self.assertEqual(json.loads(payload)["status"], "ok")

    def test_unknown_route_is_a_json_404(self):
        got, _, payload = self.daemon.request("GET", "/v1/nothing", headers=AUTH)
        self.assertEqual(got, 404)
        self.assertIn("/v1/nothing", json.loads(payload)["error"]["message"])


def main():
    global BINARIES
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_binary_arguments(parser)
    args, rest = parser.parse_known_args()
    BINARIES = (args.moetierd, args.worker, args.synth)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
