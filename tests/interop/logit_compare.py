"""Compares two logit files (raw little-endian float32, one row of n_vocab per position)."""
import numpy as np


def read_logits(path, n_vocab):
    raw = np.fromfile(path, dtype="<f4")
    if n_vocab <= 0 or raw.size % n_vocab:
        raise ValueError(f"{path}: {raw.size} floats is not a whole number of rows of {n_vocab}")
    return raw.astype(np.float64).reshape(-1, n_vocab)


def _log_softmax(x):
    shifted = x - np.max(x, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def compare(ours, other):
    """Per position: max |ours - other| / (max(other) - min(other)), and
    KL(softmax(ours) || softmax(other)). Returns (rel, kl), two arrays."""
    if ours.shape != other.shape:
        raise ValueError(f"shape mismatch: {ours.shape} vs {other.shape}")
    span = np.max(other, axis=-1) - np.min(other, axis=-1)
    rel = np.max(np.abs(ours - other), axis=-1) / np.where(span > 0, span, 1.0)
    lp, lq = _log_softmax(ours), _log_softmax(other)
    kl = np.sum(np.exp(lp) * (lp - lq), axis=-1)
    return rel, kl


def report(rel, kl, tolerance, label="", out=print):
    """Prints one line per position and a summary; returns True when every
    position is within `tolerance` of its row range (NaN counts as a failure)."""
    prefix = f"{label}: " if label else ""
    for i, (r, k) in enumerate(zip(rel, kl)):
        flag = "" if r <= tolerance else "  <-- over tolerance"
        out(f"{prefix}pos {i:3d}  max|diff|/range {r:.3e}  KL {k:.3e}{flag}")
    ok = bool(np.all(rel <= tolerance))
    out(f"{prefix}worst max|diff|/range {np.max(rel):.3e} (pos {int(np.argmax(rel))}), "
        f"mean KL {np.mean(kl):.3e}, tolerance {tolerance:g}: {'ok' if ok else 'FAILED'}")
    return ok
