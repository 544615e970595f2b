#!/usr/bin/python3
"""Renders every chat template moetier knows with a real Jinja engine (Debian's
python3-jinja2, set up the way Hugging Face's apply_chat_template and
llama.cpp's server set it up) and compares the bytes with moetier's native
renderer, conversation by conversation.

Templates:
  - the ones moetier-synth writes into its GGUF files (--arch llama: Mixtral's,
    olmoe: Tulu's, qwen3moe, qwen35moe), with the special tokens read from
    the file by this script's own GGUF reader;
  - every *.jinja under --templates, with the special tokens of the model
    family the table TEMPLATE_FILES gives it.
The native side is the tokenizer_chat_render tool, which goes through
ChatTemplate::ForTokenizer as the daemon does.

What is compared is the prompt llama.cpp's server tokenizes: the Jinja
output, less a leading bos_token when the vocabulary adds bos itself and a
trailing eos_token when it adds eos (common/chat.cpp). Where the template
raises an exception, moetier must fail with the exception's message.

KNOWN_DIFFERENCES lists the (template, conversation) pairs where moetier's
native renderer is known to differ from the template; each is still rendered
and must still differ (a listed pair that starts to agree fails the check, so
the list stays true).

usage: check_chat_templates.py --render-tool PATH --synth PATH --templates DIR
Exit status 77 (the ctest skip code) when jinja2 is missing for this python3.
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The synthetic models whose templates are checked, and the native style each
# must be recognised as.
SYNTH_ARCHS = {
    "llama": "mistral-instruct",
    "olmoe": "tulu",
    "qwen3moe": "qwen3",
    "qwen35moe": "qwen3.5",
}

# Template files: the special tokens of the models that carry them, as
# llama.cpp reads them from such a model's GGUF, and the expected style.
QWEN3_TOKENS = {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
                "add_bos": False, "add_eos": False}
MISTRAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "add_bos": True, "add_eos": False}
TEMPLATE_FILES = {
    "Qwen-Qwen3-0.6B.jinja": dict(QWEN3_TOKENS, pre_tokenizer="qwen2", style="qwen3"),
    # Qwen3.5 has no bos token (no tokenizer.ggml.bos_token_id).
    "Qwen3.5-4B.jinja": {"bos_token": "", "eos_token": "<|im_end|>", "add_bos": False,
                         "add_eos": False, "pre_tokenizer": "qwen35", "style": "qwen3.5"},
    "Qwen3-Coder.jinja": dict(QWEN3_TOKENS, pre_tokenizer="qwen2", style="chatml"),
    "mistralai-Mistral-7B-Instruct-v0.1.jinja": dict(MISTRAL_TOKENS,
                                                     style="mistral-instruct-v0.1"),
    "mistral-common-v1.jinja": dict(MISTRAL_TOKENS, style="mistral-v1"),
    # OLMo 2's: its bos is <|endoftext|> (100257), which the vocabulary does not add.
    "tulu-bos.jinja": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                       "add_bos": False, "add_eos": False, "pre_tokenizer": "olmo",
                       "style": "tulu-bos"},
}


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def system(text):
    return {"role": "system", "content": text}


CONVERSATIONS = {
    "one_user_turn": [user("Hello world")],
    "system_and_user": [system("You are terse."), user("Hello world")],
    "multi_turn": [user("Hi"), assistant("Hello! How can I help?"), user("What is 2+2?")],
    "system_multi_turn": [system("You are terse."), user("Hi"), assistant("Hello."),
                          user("What is 2+2?")],
    "ends_with_assistant": [user("Hi"), assistant("Hello!")],
    "reasoning_in_history": [user("2+2?"), assistant("<think>\nadd them\n</think>\n\n4."),
                             user("And 3+3?")],
    "padded_content": [user("  Hello world \n")],
    "unicode": [user("Grüße, 世界! \u00e9\u0301")],
    # Text a template engine could mistake for its own: it must pass through.
    "markup_in_content": [user("{{ bos_token }} {% if x %}'quoted' \"double\" \\n\ttab"),
                          assistant("[INST] <|user|> </s> {# not a comment #}"),
                          user("}} %} #}")],
    "empty_content": [system(""), user(""), assistant(""), user("")],
    # Conversations the stricter templates refuse.
    "assistant_first": [assistant("Hi"), user("Hello")],
    "two_user_turns": [user("Hi"), user("Anyone?")],
    "late_system": [user("Hi"), system("Be brief.")],
}

OPTIONS = [  # (add_generation_prompt, enable_thinking)
    (True, True), (True, False), (False, True), (False, False),
]

# (template, conversation) -> why moetier's renderer differs. Templates are
# named "synth:ARCH" or by file name.
_QWEN3_LAST_TURN = ("an assistant turn after the last user turn gets an empty think block "
                    "in the real Qwen3 template; the native qwen3 style renders plain ChatML")
_QWEN35_LAST_TURN = "likewise for Qwen3.5 (think block on assistant turns after the last query)"
_REASONING = ("the template drops the <think> part of earlier assistant turns; the native "
              "ChatML styles keep the content as given")
_QWEN35_TRIM = "Qwen3.5 trims message content (|trim); the native qwen3.5 style does not"
_QWEN35_SYSTEM = ("Qwen3.5 raises 'System message must be at the beginning.'; the native style "
                  "renders the late system turn")
KNOWN_DIFFERENCES = {
    ("Qwen-Qwen3-0.6B.jinja", "ends_with_assistant"): _QWEN3_LAST_TURN,
    ("Qwen-Qwen3-0.6B.jinja", "reasoning_in_history"): _REASONING,
    ("synth:qwen3moe", "reasoning_in_history"): _REASONING,
    ("Qwen3.5-4B.jinja", "ends_with_assistant"): _QWEN35_LAST_TURN,
    ("synth:qwen35moe", "ends_with_assistant"): _QWEN35_LAST_TURN,
    ("Qwen3.5-4B.jinja", "reasoning_in_history"): _REASONING,
    ("synth:qwen35moe", "reasoning_in_history"): _REASONING,
    ("Qwen3.5-4B.jinja", "padded_content"): _QWEN35_TRIM,
    ("synth:qwen35moe", "padded_content"): _QWEN35_TRIM,
    ("Qwen3.5-4B.jinja", "late_system"): _QWEN35_SYSTEM,
    ("synth:qwen35moe", "late_system"): _QWEN35_SYSTEM,
}


def make_environment(jinja2, sandbox):
    """The environment transformers' apply_chat_template compiles templates in
    (trim_blocks, lstrip_blocks, loop controls, raise_exception, tojson with
    ensure_ascii=False), which llama.cpp's Jinja engine follows."""
    import jinja2.ext

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_jinja(env, template, tokens, messages, add_generation_prompt, enable_thinking):
    """(text, None) or (None, exception message), as llama.cpp's server would
    hand the text to its tokenizer."""
    try:
        text = env.from_string(template).render(
            messages=messages, bos_token=tokens["bos_token"], eos_token=tokens["eos_token"],
            add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking)
    except Exception as e:  # TemplateError from raise_exception, or the template's own
        return None, str(e)
    if tokens["add_bos"] and text.startswith(tokens["bos_token"]):
        text = text[len(tokens["bos_token"]):]
    if tokens["add_eos"] and tokens["eos_token"] and text.endswith(tokens["eos_token"]):
        text = text[:-len(tokens["eos_token"])]
    return text, None


def token_text(gguf, token_id):
    """A special token's text as llama.cpp's token_to_piece(special=true)
    gives it, for the control / user-defined / unknown tokens bos and eos are."""
    tokens = gguf.get("tokenizer.ggml.tokens")
    types = gguf.get("tokenizer.ggml.token_type")
    if types is not None and types[token_id] not in (2, 3, 4):
        raise RuntimeError(f"token {token_id} ({tokens[token_id]!r}) is not a special token")
    return tokens[token_id]


def synth_source(synth, arch, work):
    import gguf_file

    path = os.path.join(work, f"{arch}.gguf")
    proc = subprocess.run([synth, "--arch", arch, "--preset", "tiny", "--quant", "f32",
                           "--out", path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"moetier-synth --arch {arch} failed:\n{proc.stdout}{proc.stderr}")
    f = gguf_file.GGUFFile(path)
    spm = f.get("tokenizer.ggml.model") == "llama"
    bos = f.get("tokenizer.ggml.bos_token_id")
    eos = f.get("tokenizer.ggml.eos_token_id")
    # Without a bos key llama.cpp picks a default id (SentencePiece 1; BPE 11,
    # an ordinary token); moetier has none. No synthetic template uses
    # bos_token without the key, so the two agree here.
    tokens = {
        "bos_token": token_text(f, bos) if bos is not None else "",
        "eos_token": token_text(f, eos) if eos is not None else "",
        "add_bos": bool(f.get("tokenizer.ggml.add_bos_token", spm)),
        "add_eos": bool(f.get("tokenizer.ggml.add_eos_token", False)),
    }
    return {"name": f"synth:{arch}", "template": f.get("tokenizer.chat_template"),
            "tokens": tokens, "request": {"gguf": path}, "style": SYNTH_ARCHS[arch]}


def file_source(path):
    info = dict(TEMPLATE_FILES[path.name])
    style = info.pop("style")
    template = path.read_text(encoding="utf-8")
    tokens = {k: info[k] for k in ("bos_token", "eos_token", "add_bos", "add_eos")}
    request = dict(info, template=template)
    return {"name": path.name, "template": template, "tokens": tokens, "request": request,
            "style": style}


def cases():
    for conv_name, messages in CONVERSATIONS.items():
        for add_generation_prompt, enable_thinking in OPTIONS:
            yield (conv_name, messages, add_generation_prompt, enable_thinking)


def render_native(tool, source):
    request = dict(source["request"])
    request["cases"] = [{"messages": m, "add_generation_prompt": g, "enable_thinking": t}
                        for _, m, g, t in cases()]
    proc = subprocess.run([tool], input=json.dumps(request), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} failed on {source['name']}:\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout)


def check_source(env, tool, source):
    """Returns a list of failure lines for one template."""
    native = render_native(tool, source)
    name = source["name"]
    if "detect_error" in native:
        return [f"{name}: moetier does not recognise it: {native['detect_error']}"]
    failures = []
    if native["style"] != source["style"]:
        failures.append(f"{name}: recognised as {native['style']}, expected {source['style']}")
    differing = set()
    for (conv_name, messages, gen, think), got in zip(cases(), native["results"]):
        want, want_error = render_jinja(env, source["template"], source["tokens"], messages, gen,
                                        think)
        label = (f"{name} / {conv_name} (add_generation_prompt={gen}, "
                 f"enable_thinking={think})")
        if want_error is not None:
            ok = "error" in got and want_error in got["error"]
            detail = f"the template raises {want_error!r}; moetier gives {got!r}"
        else:
            ok = got.get("text") == want
            detail = f"\n    jinja:   {want!r}\n    moetier: {got!r}"
        if ok:
            continue
        if (name, conv_name) in KNOWN_DIFFERENCES:
            differing.add(conv_name)
            continue
        failures.append(f"{label}: {detail}")
    for (known_name, conv_name), why in KNOWN_DIFFERENCES.items():
        if known_name == name and conv_name not in differing:
            failures.append(f"{name} / {conv_name} is listed as a known difference ({why}) but "
                            f"now agrees with the template: take it off KNOWN_DIFFERENCES")
    for conv_name in sorted(differing):
        print(f"known difference: {name} / {conv_name}: {KNOWN_DIFFERENCES[(name, conv_name)]}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render-tool", required=True)
    parser.add_argument("--synth", required=True)
    parser.add_argument("--templates", required=True, type=pathlib.Path)
    args = parser.parse_args()
    try:
        import jinja2
        import jinja2.sandbox as sandbox
    except ImportError:
        print(f"SKIPPED: {sys.executable} has no jinja2 (install python3-jinja2)")
        return 77
    env = make_environment(jinja2, sandbox)

    files = sorted(args.templates.glob("*.jinja"))
    unlisted = [p.name for p in files if p.name not in TEMPLATE_FILES]
    missing = [n for n in TEMPLATE_FILES if not (args.templates / n).exists()]
    if unlisted or missing:
        print(f"FAIL: template files without an entry in TEMPLATE_FILES: {unlisted}; "
              f"entries without a file: {missing}")
        return 1
    failures = []
    n_compared = 0
    with tempfile.TemporaryDirectory(prefix="moetier-chat-") as work:
        sources = [synth_source(args.synth, arch, work) for arch in SYNTH_ARCHS]
        sources += [file_source(p) for p in files]
        for source in sources:
            failures += check_source(env, args.render_tool, source)
            n_compared += len(list(cases()))
    for line in failures:
        print(f"FAIL: {line}")
    print(f"{len(sources)} templates x {len(list(cases()))} conversations: "
          f"{n_compared - len(failures)} of {n_compared} as the template renders them"
          f"{'' if failures else ' (known differences excepted)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
