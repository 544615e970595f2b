#!/usr/bin/python3
"""`moetier run` as a person uses it: a chat in a tmux pane on a small model.

Starts `moetier run MODEL` (the real moetierd and moetier-worker of this build)
in a detached tmux session, types two turns and waits for each answer (the
next ">>> " prompt), /clear, then a turn with a large max_tokens that Ctrl-C
stops half way: the chat must survive and prompt again. /bye must end it with
status 0, after the private daemon is stopped and its directory removed.

The model is moetier-synth's small preset cut to 8 layers (59 MB, written in
half a second): the tiny preset decodes some 14000 tokens/s and would finish
any answer before Ctrl-C arrives, this one some 400/s on one thread, and
greedy it writes all 8000 tokens without an end-of-generation token.

Exit status 77 (skipped) when tmux is not installed or the programs are not
built.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIPPED = 77
PROMPT = ">>>"


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(SKIPPED)


class Pane:
    """One tmux server of our own (its own socket, no user config)."""

    def __init__(self, socket):
        self.socket = socket

    def tmux(self, *args, check=True):
        return subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *args],
                              check=check, capture_output=True, text=True)

    def start(self, command):
        # remain-on-exit keeps the pane after the program ends, so its exit
        # status and last lines can still be read.
        self.tmux("start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";",
                  "new-session", "-d", "-s", "chat", "-x", "200", "-y", "50", command)

    def text(self):
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "chat").stdout

    def type_line(self, line):
        self.tmux("send-keys", "-t", "chat", "-l", line)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "chat", *keys)

    def dead_status(self):
        """The exit status once the pane's program has ended, else None."""
        for _ in range(2):
            out = self.tmux("display-message", "-p", "-t", "chat",
                            "#{pid} #{pane_dead} #{pane_dead_status}", check=False).stdout.split()
            if len(out) == 3 and out[1] == "1":
                return int(out[2])
            if len(out) != 2 or out[1] != "1":
                return None
            # tmux 3.3a sometimes closes an ended pane's terminal but never
            # reaps its program, as if the SIGCHLD were lost: the pane is dead
            # with no status, and stays so. Another SIGCHLD makes it look.
            os.kill(int(out[0]), signal.SIGCHLD)
            time.sleep(0.1)
        return None

    def kill(self):
        self.tmux("kill-server", check=False)


def prompts(text):
    return sum(1 for line in text.splitlines() if line.rstrip() == PROMPT or
               line.startswith(PROMPT + " "))


def waiting_at_prompt(text, count):
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return prompts(text) == count and bool(lines) and lines[-1] == PROMPT


def wait_for(pane, what, predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        text = pane.text()
        if predicate(text):
            return text
        if pane.dead_status() is not None or time.monotonic() > deadline:
            sys.exit(f"FAILED: waiting for {what}; the pane shows:\n{text}{daemon_log_tail()}")
        time.sleep(0.1)


DAEMON_LOG = None  # the private daemon's log, once its directory is known


def daemon_log_tail(lines=40):
    if DAEMON_LOG is None or not os.path.exists(DAEMON_LOG):
        return ""
    with open(DAEMON_LOG, errors="replace") as log:
        tail = log.read().splitlines()[-lines:]
    return "\nthe end of the daemon's log:\n" + "\n".join(tail)


def check(condition, what, text):
    if not condition:
        sys.exit(f"FAILED: {what}; the pane shows:\n{text}{daemon_log_tail()}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        skip("tmux is not installed (deploy/setup.sh installs it)")
    programs = {name: os.path.join(args.build_dir, path) for name, path in {
        "moetier": "client/moetier", "moetierd": "daemon/moetierd",
        "worker": "worker/moetier-worker", "synth": "tools/synth/moetier-synth"}.items()}
    for path in programs.values():
        if not os.access(path, os.X_OK):
            skip(f"{path} is not built")

    work = tempfile.mkdtemp(prefix="moetier-tmux-", dir="/tmp")
    pane = Pane(os.path.join(work, "tmux.sock"))
    try:
        model = os.path.join(work, "small.gguf")
        subprocess.run([programs["synth"], "--preset", "small", "--layers", "8", "--ctx", "16384",
                        "--quant", "q8_0", "--seed", "3", "--out", model, "--quiet"], check=True)
        pane.start(" ".join([
            programs["moetier"], "run", "--moetierd", programs["moetierd"], "--worker",
            programs["worker"], "-t", "1", "-c", "16384", "--temp", "0", "-n", "24", model]))

        text = wait_for(pane, "the first prompt", lambda t: waiting_at_prompt(t, 1), 120)
        check("/help for the commands" in text, "the banner", text)
        run_dir = re.search(r"sockets and log in (\S+)", text)
        check(run_dir is not None, "the daemon's directory in the start-up lines", text)
        global DAEMON_LOG
        DAEMON_LOG = os.path.join(run_dir.group(1), "moetierd.log")

        pane.type_line("Hello, who are you?")
        text = wait_for(pane, "the first answer", lambda t: waiting_at_prompt(t, 2), 60)
        pane.type_line("Tell me more.")
        text = wait_for(pane, "the second answer", lambda t: waiting_at_prompt(t, 3), 60)
        counts = re.findall(r"^\[(\d+) tokens?, [0-9.]+ tok/s\]$", text, re.MULTILINE)
        check(len(counts) == 2 and all(int(n) > 0 for n in counts),
              "a token count after each answer", text)

        pane.type_line("/clear")
        text = wait_for(pane, "/clear", lambda t: waiting_at_prompt(t, 4), 10)
        check("(conversation forgotten)" in text, "/clear's answer", text)
        pane.type_line("/set max_tokens 8000")
        text = wait_for(pane, "/set", lambda t: waiting_at_prompt(t, 5), 10)
        check("(max_tokens 8000)" in text, "/set's answer", text)

        pane.type_line("Write a very long story.")
        started = time.monotonic()
        # Text after the question (the answer streaming), before Ctrl-C.
        wait_for(pane, "the long answer to start",
                 lambda t: re.search(r"Write a very long story\.\n?.*\S", t.split(PROMPT)[-1],
                                     re.DOTALL) is not None and time.monotonic() - started > 1, 60)
        pane.keys("C-c")
        text = wait_for(pane, "the prompt after Ctrl-C", lambda t: waiting_at_prompt(t, 6), 30)
        check(re.search(r"^\[\d+ tokens?(, [0-9.]+ tok/s)?; stopped\]$", text, re.MULTILINE),
              "the stopped answer's count", text)
        check(pane.dead_status() is None, "the chat still running after Ctrl-C", text)

        pane.type_line("/bye")
        deadline = time.monotonic() + 60
        while pane.dead_status() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        text = pane.text()
        check(pane.dead_status() == 0, "exit status 0 after /bye", text)
        check("moetier run: stopping moetierd" in text, "the daemon stopped", text)
        check(not os.path.exists(run_dir.group(1)), "the daemon's directory removed", text)
        print("OK: two turns, /clear, /set, Ctrl-C mid-answer, /bye")
    finally:
        pane.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
