"""Starts status_page_test_server and yields the port it listens on."""
import contextlib
import subprocess


@contextlib.contextmanager
def running_page_server(binary, *args):
    server = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"{binary} printed {line!r} instead of its port")
        yield int(line)
    finally:
        server.terminate()
        server.wait(timeout=10)
