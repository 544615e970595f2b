"""What the Python scripts here share: the llama.cpp side, run through the
Node.js scripts of this folder and node-llama-cpp's prebuilt binaries."""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def ensure_installed():
    """Installs node-llama-cpp (package.json's pinned version) here if missing."""
    if os.path.isdir(os.path.join(HERE, "node_modules", "node-llama-cpp")):
        return
    print("installing node-llama-cpp and its prebuilt llama.cpp (about 700 MB) into "
          f"{HERE}/node_modules", flush=True)
    subprocess.run(["npm", "install", "--prefix", HERE, "--ignore-scripts", "--no-audit",
                    "--no-fund"], check=True)


def node_command(script, *args):
    """The command line that runs one of this folder's .mjs scripts."""
    return ["node", os.path.join(HERE, script), *args]
