#!/usr/bin/python3
"""moetierd's API from a client that is not ours: docs/api/generate.py
(Debian's python3-grpcio with a protoc descriptor set, as the README shows)
generates through a real daemon and worker, and server reflection describes
both moetier.v1.Moetier and grpc.health.v1.Health.

usage: python_api_test.py MOETIERD PROTOC REPO_ROOT MODEL.gguf
Exits 77 (skipped) without python3-grpcio or python3-protobuf.
"""
import os
import subprocess
import sys
import tempfile
import time

SKIP = 77
try:
    import grpc
    from google.protobuf import descriptor_pb2
except ImportError as e:
    print(f"SKIP: {e} (install python3-grpcio and python3-protobuf)")
    sys.exit(SKIP)

REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def string_field(number, text):
    data = text.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def fields(data):
    """(number, value) of each field: bytes for length-delimited, int for varints."""
    i = 0
    while i < len(data):
        tag, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            tag |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        number, wire = tag >> 3, tag & 7
        value, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if wire == 2:
            yield number, data[i:i + value]
            i += value
        elif wire == 0:
            yield number, value
        else:
            raise ValueError(f"unexpected wire type {wire}")


def reflect(channel, request):
    call = channel.stream_stream(REFLECTION, request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    (reply,) = list(call(iter([request]), timeout=10))
    return dict(fields(reply))


def check(condition, what):
    if not condition:
        print(f"FAIL: {what}")
        sys.exit(1)


def main():
    moetierd, protoc, repo, model = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        descriptors = os.path.join(tmp, "moetier.pb")
        subprocess.run([protoc, "--include_imports", f"--descriptor_set_out={descriptors}",
                        "-I", os.path.join(repo, "proto"),
                        os.path.join(repo, "proto/moetier/v1/moetier.proto"),
                        os.path.join(repo, "proto/grpc/health/v1/health.proto")], check=True)
        api = os.path.join(tmp, "api.sock")
        log = open(os.path.join(tmp, "moetierd.log"), "w+")
        env = dict(os.environ)
        env.pop("JOURNAL_STREAM", None)
        daemon = subprocess.Popen(
            [moetierd, f"--model-path={model}", "--devices=cpu", f"--api-socket-path={api}",
             f"--worker-socket-path={os.path.join(tmp, 'w.sock')}", "--allow-unlocked-memory"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.time() + 60
            while "is ready" not in open(log.name).read():
                check(daemon.poll() is None and time.time() < deadline,
                      "moetierd got no ready worker:\n" + open(log.name).read())
                time.sleep(0.1)
            # Health turns SERVING at the daemon's next main-loop tick (200 ms)
            # after a worker is ready.
            time.sleep(0.5)
            run = subprocess.run(
                [sys.executable, os.path.join(repo, "docs/api/generate.py"), "--descriptors",
                 descriptors, "--socket", api, "--max-new-tokens", "8", "Hello"],
                capture_output=True, text=True, timeout=120)
            print(run.stderr, end="")
            check(run.returncode == 0, f"generate.py exited {run.returncode}")
            check("health: SERVING" in run.stderr, "health is not SERVING")
            check("8 tokens" in run.stderr, "the stats do not say 8 tokens")
            check(run.stdout.strip() != "", "no text came back")

            channel = grpc.insecure_channel(f"unix:{api}")
            listed = reflect(channel, string_field(7, ""))  # list_services
            names = [dict(fields(service)).get(1, b"").decode()
                     for number, service in fields(listed[6]) if number == 1]
            print("reflection lists:", ", ".join(names))
            for service in ("moetier.v1.Moetier", "grpc.health.v1.Health"):
                check(service in names, f"reflection does not list {service}")
                reply = reflect(channel, string_field(4, service))  # file_containing_symbol
                check(4 in reply, f"reflection has no descriptor for {service}: {reply.get(7)}")
                files = [descriptor_pb2.FileDescriptorProto.FromString(f)
                         for number, f in fields(reply[4]) if number == 1]
                described = [f"{f.package}.{s.name}" for f in files for s in f.service]
                check(service in described, f"the descriptor of {service} lacks it: {described}")
            print("PASS")
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)


if __name__ == "__main__":
    main()
