#!/usr/bin/python3
"""Compares moetier's hand-written pre-tokenizer scanners with the regexes
they stand for, run by Python's `regex` module (Debian's python3-regex), on
random text.

The regexes are llama.cpp's (src/llama-vocab.cpp), which write Hugging
Face's case-insensitive group (?i:'s|'t|...) as (?:'[sS]|'[tT]|...): under
full case folding (?i:'s) also takes an apostrophe before U+017F (long s),
which llama.cpp's scanners, and moetier's, leave alone. As in llama.cpp's
unicode_regex_split, text that no alternative matches becomes a piece of
its own (only the GPT-2 pattern, which has no final \\s+, leaves any).

For gpt-4o (tiktoken's o200k pattern) llama.cpp rewrites the letter classes
as ((?=\\p{L})[^a-z]) and ((?=\\p{L})[^A-Z]) for its std::regex, which sees
every letter beyond ASCII as one placeholder byte: the same pattern reads
the same way here on the real text. That form is the oracle. Where it
differs from tokenizer.json's (non-ASCII letters of a case, marks), the
original is also run, on text without such characters, where the two must
agree, and on KNOWN_DIFFERENCES, where they must still differ.

The texts mix ASCII, runs of digits from several scripts, letters, marks,
whitespace and punctuation beyond ASCII, contractions, and codepoints drawn
from the whole range. Codepoints whose classes (\\p{L}, \\p{N}, \\p{M}, \\s)
differ between the `regex` module's Unicode tables and moetier's are left
out and counted: such a difference is a Unicode version, not a scanner bug.
The texts are valid UTF-8; the unit tests cover invalid bytes.

The native side is the tokenizer_pre_tokenize tool.

usage: check_pre_tokenizers.py --tool PATH [--texts N] [--seed S]
Exit status 77 (the ctest skip code) when `regex` is missing for this python3.
"""
import argparse
import random
import subprocess
import sys

try:
    import regex
except ImportError:
    print("SKIPPED: the regex module is missing for this python3 (install python3-regex)")
    sys.exit(77)

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

# tokenizer.ggml.pre name -> llama.cpp's regex for it.
PATTERNS = {
    "qwen2": _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen35": _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
    + r"|\s+(?!\S)|\s+",
    "gpt-2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    "llama3": _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt-4o": r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
    + _CONTRACTIONS
    + r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
    + _CONTRACTIONS
    + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

# tokenizer.json's patterns where llama.cpp runs a rewritten one.
ORIGINAL_PATTERNS = {
    "gpt-4o": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
# Characters on which llama.cpp's form of an ORIGINAL_PATTERNS entry reads
# differently: letters beyond ASCII that have a case, and marks.
_REWRITE_DIFFERS = regex.compile(r"[[^\x00-\x7f]&&[\p{Lu}\p{Ll}\p{Lt}\p{M}]]", regex.V1)
# Texts on which llama.cpp and tokenizer.json split differently, with
# llama.cpp's pieces, which moetier must give.
KNOWN_DIFFERENCES = {
    "gpt-4o": [
        ("ПриветМир", ["ПриветМир"]),  # tokenizer.json: "Привет", "Мир"
        ("приВЕТ", ["приВЕТ"]),  # "при", "ВЕТ"
        ("ÉT", ["É", "T"]),  # "ÉT"
        ("aÀB", ["aÀ", "B"]),  # "a", "ÀB"
        ("cafe\u0301 ok", ["cafe", "\u0301", " ok"]),  # "café", " ok"
        ("A\u0301B", ["A", "\u0301B"]),  # "Á", "B"
    ],
}

# Digits (Nd), letter numbers (Nl) and other numbers (No) of several scripts.
DIGITS = list("0123456789") + list("٠٣٩०७０９²³¹½ⅫⅣ①")
# Characters that take different branches of the patterns.
SPECIALS = list(
    "éßÆıİſǅΩωЖж你好年，。、あア한اʰ"  # letters (Lu, Ll, Lt, Lo, Lm) and CJK punctuation
    "\u0301\u0308\u0903\u20dd"  # marks (Mn, Mc, Me)
    "\u00a0\u0085\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # \s beyond ASCII
    "\u200b\ufeff\u180e\u001c\u001f"  # not \s, though some look like it
    "—–…“”‘’«»¡¿€£¥©®°±×÷§¶•"  # punctuation and symbols
    "🙂🎉👍\U0001f1fa\U0001f1f8\ue000\U000f0000\ufffd\uffff"  # emoji, private use, noncharacters
) + ["'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "'"]
ASCII = [chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n", "\r", "\v", "\f", "\r\n", " ", " "]


def regex_classes(ch):
    classes = ""
    if regex.match(r"\p{L}", ch):
        classes += "L"
    if regex.match(r"\p{N}", ch):
        classes += "N"
    if regex.match(r"\p{M}", ch):
        classes += "M"
    if regex.match(r"\s", ch):
        classes += "S"
    return classes or "-"


def run_tool(tool, args, lines):
    result = subprocess.run(
        [tool] + args, input="".join(line + "\n" for line in lines), capture_output=True, text=True
    )
    if result.returncode != 0:
        sys.exit(f"{tool} {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    out = result.stdout.split("\n")
    if len(out) != len(lines) + 1 or out[-1] != "":
        sys.exit(f"{tool} {' '.join(args)}: {len(out) - 1} answers for {len(lines)} questions")
    return out[:-1]


def agreeing(tool, chars):
    """The characters of `chars` whose classes moetier and `regex` agree on."""
    single = sorted({c for c in chars if len(c) == 1})
    native = run_tool(tool, ["--classes"], [f"{ord(c):x}" for c in single])
    differ = {c for c, classes in zip(single, native) if classes != regex_classes(c)}
    return [c for c in chars if not set(c) & differ], differ


def random_text(rng, alphabet, random_codepoints):
    parts = []
    for _ in range(rng.randrange(0, 48)):
        draw = rng.random()
        if draw < 0.2:
            parts.extend(rng.choice(DIGITS) for _ in range(rng.randrange(1, 9)))
        elif draw < 0.6:
            parts.append(rng.choice(ASCII))
        elif draw < 0.9:
            parts.append(rng.choice(alphabet))
        else:
            parts.append(rng.choice(random_codepoints))
    return "".join(parts)


def regex_pieces(pattern, text):
    pieces = []
    end = 0
    for match in pattern.finditer(text):
        if match.start() > end:
            pieces.append(text[end : match.start()])
        pieces.append(match.group())
        end = match.end()
    if end < len(text):
        pieces.append(text[end:])
    return pieces


def native_pieces(text, lengths):
    data = text.encode("utf-8")
    pieces = []
    offset = 0
    for length in map(int, lengths.split()):
        pieces.append(data[offset : offset + length].decode("utf-8", errors="backslashreplace"))
        offset += length
    if offset != len(data):
        pieces.append(f"<{len(data) - offset} bytes not covered>")
    return pieces


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", required=True, help="the tokenizer_pre_tokenize binary")
    parser.add_argument("--texts", type=int, default=4000, help="random texts per pattern")
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    drawn = []
    while len(drawn) < 400:
        cp = rng.randrange(0, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF:
            drawn.append(chr(cp))
    alphabet, differ_fixed = agreeing(args.tool, DIGITS + SPECIALS + ASCII)
    if set(alphabet) != set(DIGITS + SPECIALS + ASCII):
        sys.exit(
            "moetier and the regex module disagree on the classes of chosen characters: "
            + ", ".join(f"U+{ord(c):04X}" for c in sorted(differ_fixed))
        )
    random_codepoints, differ_random = agreeing(args.tool, drawn)
    print(
        f"{len(random_codepoints)} random codepoints, {len(differ_random)} left out "
        "(the regex module's Unicode tables and moetier's disagree on their classes): "
        + ", ".join(f"U+{ord(c):04X}" for c in sorted(differ_random))
    )

    failed = False
    for name, source in PATTERNS.items():
        texts = [random_text(rng, SPECIALS, random_codepoints) for _ in range(args.texts)]
        failed |= not compare(args.tool, name, source, texts, name)

    for name, source in ORIGINAL_PATTERNS.items():
        specials = [c for c in SPECIALS if not _REWRITE_DIFFERS.search(c)]
        codepoints = [c for c in random_codepoints if not _REWRITE_DIFFERS.search(c)]
        texts = [random_text(rng, specials, codepoints) for _ in range(args.texts)]
        label = f"{name} (tokenizer.json's pattern, no marks or cased letters beyond ASCII)"
        failed |= not compare(args.tool, name, source, texts, label)

        rewritten, original = regex.compile(PATTERNS[name]), regex.compile(source)
        known = KNOWN_DIFFERENCES.get(name, [])
        answers = run_tool(args.tool, [name], [t.encode("utf-8").hex() for t, _ in known])
        for (text, pieces), lengths in zip(known, answers):
            got = native_pieces(text, lengths)
            if got != pieces or regex_pieces(rewritten, text) != pieces:
                print(
                    f"  {name}: {text!r}: llama.cpp's form {regex_pieces(rewritten, text)!r}, "
                    f"moetier {got!r}, listed {pieces!r}"
                )
                failed = True
            if regex_pieces(original, text) == pieces:
                print(f"  {name}: {text!r} no longer differs from tokenizer.json's pattern")
                failed = True
        print(f"{name}: {len(known)} known differences from tokenizer.json's pattern checked")
    return 1 if failed else 0


def compare(tool, name, source, texts, label):
    """Whether the scanner `name` splits every text as regex `source` does."""
    pattern = regex.compile(source)
    answers = run_tool(tool, [name], [t.encode("utf-8").hex() for t in texts])
    mismatches = []
    digit_runs = 0
    for text, lengths in zip(texts, answers):
        expected = regex_pieces(pattern, text)
        digit_runs += any(len(p) > 1 and regex.fullmatch(r"\p{N}+", p) for p in expected)
        got = native_pieces(text, lengths)
        if got != expected:
            mismatches.append((text, expected, got))
    print(
        f"{label}: {len(texts) - len(mismatches)}/{len(texts)} texts agree "
        f"({digit_runs} with a multi-digit piece)"
    )
    for text, expected, got in mismatches[:5]:
        print(f"  text     {text!r}\n  regex    {expected!r}\n  moetier  {got!r}")
    return not mismatches


if __name__ == "__main__":
    sys.exit(main())
