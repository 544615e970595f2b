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

TOOL_CONVERSATIONS (tools in the system turn, tool calls, tool results,
reasoning) are compared for the templates in TOOL_TEMPLATES; for every other
template whose native style does not take tools, moetier must refuse each of
them with an error naming the style.

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
    "qwen3next": "qwen3",
    "qwen2moe": "qwen3",
    "qwen3vlmoe": "qwen3",
    "glm4moe": "qwen3",
    "ernie4_5-moe": "mistral-instruct",
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
    # Qwen1.5's chat models, the MoE among them: a default system turn of
    # their own words.
    "Qwen-Qwen1.5-0.5B-Chat.jinja": dict(QWEN3_TOKENS, pre_tokenizer="qwen2", style="qwen2"),
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


def call(name, arguments, call_id):
    """An OpenAI tool call, as chat clients send it (the templates take the
    "function" object apart themselves)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def calling(content, *calls, reasoning=None):
    message = {"role": "assistant", "content": content, "tool_calls": list(calls)}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def tool(content, call_id="call_1", name="get_weather"):
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def function_tool(name, description, properties, required=()):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(required)}}}


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

WEATHER = function_tool(
    "get_weather", "Get the current weather in a city.",
    {"city": {"type": "string", "description": "City name, e.g. \"Z\u00fcrich\""},
     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, required=["city"])
SEARCH = function_tool(
    "search", "Search the web\tand return\nresults.",
    {"query": {"type": "string"},
     "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
     "threshold": {"type": "number", "default": 0.5, "minimum": 1e-05},
     "strict": {"type": "boolean", "default": False},
     "filters": {"type": "object", "properties": {"tags": {"type": "array"}}}},
    required=["query"])
NOW = {"type": "function", "function": {"name": "now", "description": "The time (UTC)."}}

PARIS = call("get_weather", {"city": "Paris"}, "call_1")
TOKYO = call("get_weather", {"city": "Tokyo", "unit": "celsius"}, "call_2")
NESTED = call("search", {"query": "caf\u00e9 \"quoted\" \\ back", "limit": 10, "strict": True,
                         "threshold": 1e-05, "ratio": 0.1, "whole": 2.0, "none": None,
                         "filters": {"tags": ["a", "b"], "range": {"min": -3, "max": 2.5},
                                     "empty": {}, "nothing": []}},
              "call_3")
ASK = user("What's the weather in Paris?")
TOOL_CONVERSATIONS = {  # name -> (tools, messages)
    "tools_no_system": ([WEATHER], [ASK]),
    "tools_with_system": ([WEATHER, SEARCH, NOW], [system("You are terse."), ASK]),
    "tools_blank_system": ([WEATHER], [system("  \n"), ASK]),
    "call_without_content": ([WEATHER], [ASK, calling("", PARIS)]),
    "call_with_content": ([WEATHER], [ASK, calling("Let me check.", PARIS), tool("18C, sunny")]),
    "calls_in_one_turn": ([WEATHER, SEARCH], [
        user("Weather in Paris and Tokyo, and news?"),
        calling("", PARIS, TOKYO, NESTED), tool("18C", "call_1"), tool("25C", "call_2"),
        tool("[]", "call_3", "search")]),
    "result_then_answer": ([WEATHER], [ASK, calling("", PARIS), tool("18C, sunny"),
                                       assistant("It is 18C and sunny in Paris.")]),
    "results_then_next_query": ([WEATHER], [
        ASK, calling("", PARIS, TOKYO), tool("18C"), tool("25C", "call_2"),
        assistant("Paris 18C, Tokyo 25C."), user("Thanks! And tomorrow?")]),
    "reasoning_content_with_calls": ([WEATHER], [
        ASK, calling("", PARIS, reasoning="\nThe user wants the weather.\n"), tool("18C")]),
    "think_in_content_with_calls": ([WEATHER], [
        ASK, calling("<think>\nI need the weather.\n</think>\n\nChecking.", PARIS),
        tool("18C")]),
    "thinking_across_turns": ([WEATHER], [
        user("2+2?"), {"role": "assistant", "content": "4.", "reasoning_content": "add them"},
        ASK, calling("", PARIS, reasoning="look it up"), tool("18C"),
        assistant("<think>\nsummarise\n</think>\n\nIt is 18C.")]),
    "multi_step_tools": ([WEATHER, SEARCH], [
        ASK, calling("", PARIS, reasoning="first the weather"), tool("18C"),
        calling("Now the news.", NESTED, reasoning="then search"), tool("no news", "call_3")]),
    "nested_arguments": ([SEARCH], [user("Search"), calling("", NESTED), tool("ok", "call_3")]),
    "string_arguments": ([WEATHER], [ASK, calling("", call("get_weather", '{"city": "Paris"}',
                                                           "call_1")), tool("18C")]),
    "non_ascii_arguments": ([WEATHER], [
        user("Wetter in Z\u00fcrich?"),
        calling("", call("get_weather", {"city": "Z\u00fcrich", "note": "\u4e16\u754c \u2014 "
                         "\U0001F600\n", "ctl": "\x01\x7f"}, "c")),
        tool("12\u00b0C, bew\u00f6lkt", "c")]),
    "tool_response_as_user_text": ([WEATHER], [
        ASK, calling("", PARIS), user("<tool_response>\n18C\n</tool_response>")]),
    "empty_arguments": ([NOW], [user("Time?"), calling("", call("now", {}, "t")),
                                tool("12:00", "t", "now")]),
    "padded_tool_result": ([WEATHER], [ASK, calling("  ", PARIS), tool("  18C \n\n")]),
    "answer_after_call_no_reasoning": ([WEATHER], [
        ASK, calling("Checking.", PARIS), tool("18C"), assistant("Done."), user("Ok")]),
    "list_arguments": ([SEARCH], [user("Go"), calling("", call(
        "search", {"cities": ["Paris", "Tokyo"], "days": [1, 2, 3],
                   "matrix": [[1, 2.5], [True, None]], "query": "x"}, "s")),
        tool("done", "s", "search")]),
    "scalar_arguments": ([SEARCH], [user("Go"), calling("", call(
        "search", {"flag": False, "count": 0, "ratio": 0.1, "big": 12345678901234567890,
                   "neg": -3, "tiny": 2.5e-07, "huge": 1e22, "text": "multi\nline"}, "s"))]),
    "float_arguments": ([SEARCH], [user("Go"), calling("", call("search", {
        "edges": [1e16, 1e15, 0.0001, 1e-05, 5e-324, 1.7976931348623157e308, -0.0,
                  123456789.123, 0.30000000000000004], "one": 1e16, "small": 0.0001}, "s"))]),
    "tool_result_first": ([WEATHER], [tool("orphan result"), ASK]),
    "newline_content_with_calls": ([WEATHER], [ASK, calling("\n\n", PARIS), tool("18C")]),
    "empty_reasoning_keeps_think_in_content": ([WEATHER], [
        ASK, calling("<think>\nhidden\n</think>\nShown.", PARIS, reasoning=""), tool("18C")]),
    "tool_roles_without_tools": ([], [ASK, calling("", PARIS), tool("18C"), assistant("18C.")]),
}

# The templates TOOL_CONVERSATIONS are compared with. moetier-synth's
# qwen3moe template is a shortened Qwen3 template without tools, so the
# native qwen3 style (which renders the real one, Qwen-Qwen3-0.6B.jinja)
# is not compared with it there.
TOOL_TEMPLATES = {"synth:qwen35moe", "Qwen-Qwen3-0.6B.jinja", "Qwen3.5-4B.jinja"}
TOOL_STYLES = {"qwen3", "qwen3.5"}

OPTIONS = [  # (add_generation_prompt, enable_thinking)
    (True, True), (True, False), (False, True), (False, False),
]

# (template, conversation) -> why moetier's renderer differs. Templates are
# named "synth:ARCH" or by file name.
SHORTENED_QWEN3_TEMPLATE = (
    "moetier-synth's shortened Qwen3 template adds no think block to an assistant turn "
    "after the last user turn; the native qwen3 style renders the real Qwen3 template, "
    "which does")
KNOWN_DIFFERENCES = {
    ("synth:qwen3moe", "ends_with_assistant"): SHORTENED_QWEN3_TEMPLATE,
    ("synth:qwen3next", "ends_with_assistant"): SHORTENED_QWEN3_TEMPLATE,
    ("synth:qwen2moe", "ends_with_assistant"): SHORTENED_QWEN3_TEMPLATE,
    ("synth:qwen3vlmoe", "ends_with_assistant"): SHORTENED_QWEN3_TEMPLATE,
    ("synth:glm4moe", "ends_with_assistant"): SHORTENED_QWEN3_TEMPLATE,
}


def make_environment(jinja2, sandbox):
    """The environment transformers' apply_chat_template compiles templates in
    (trim_blocks, lstrip_blocks, loop controls, raise_exception, tojson with
    ensure_ascii=False), which llama.cpp's Jinja engine follows."""
    import jinja2.ext

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    # transformers' own tojson: json.dumps with ensure_ascii=False and Python's
    # default separators (", " and ": "), keys in their given order, not
    # Jinja's HTML-safe htmlsafe_json_dumps. llama.cpp's Jinja engine (minja)
    # prints the same for the templates here; moetier's PythonJsonDumps
    # (gguf/tokenizer/python_json.h) is the native counterpart.
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


def render_jinja(env, template, tokens, messages, tools, add_generation_prompt, enable_thinking):
    """(text, None) or (None, exception message), as llama.cpp's server would
    hand the text to its tokenizer. Tools are passed only when there are
    some, as apply_chat_template does (tools=None otherwise)."""
    extra = {"tools": tools} if tools else {}
    try:
        text = env.from_string(template).render(
            messages=messages, bos_token=tokens["bos_token"], eos_token=tokens["eos_token"],
            add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking,
            **extra)
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


def cases(source):
    """(conversation, messages, tools, add_generation_prompt, enable_thinking, what): what is
    "compare" (with the template) or "refuse" (tools the native style does not take)."""
    convs = [(name, messages, [], "compare") for name, messages in CONVERSATIONS.items()]
    if source["name"] in TOOL_TEMPLATES:
        convs += [(name, m, t, "compare") for name, (t, m) in TOOL_CONVERSATIONS.items()]
    elif source["style"] not in TOOL_STYLES:
        convs += [(name, m, t, "refuse") for name, (t, m) in TOOL_CONVERSATIONS.items()]
    for conv_name, messages, tools, what in convs:
        for add_generation_prompt, enable_thinking in OPTIONS:
            yield (conv_name, messages, tools, add_generation_prompt, enable_thinking, what)


def render_native(tool, source):
    request = dict(source["request"])
    request["cases"] = [{"messages": m, "tools": tools, "add_generation_prompt": g,
                         "enable_thinking": t} for _, m, tools, g, t, _ in cases(source)]
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
    for (conv_name, messages, tools, gen, think, what), got in zip(cases(source),
                                                                 native["results"]):
        label = (f"{name} / {conv_name} (add_generation_prompt={gen}, "
                 f"enable_thinking={think})")
        if what == "refuse":
            if not ("error" in got and source["style"] in got["error"]
                    and "tool" in got["error"]):
                failures.append(f"{label}: the {source['style']} style takes no tools; moetier "
                                f"must refuse them naming the style, gives {got!r}")
            continue
        want, want_error = render_jinja(env, source["template"], source["tokens"], messages,
                                        tools, gen, think)
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
            n_compared += len(list(cases(source)))
    for line in failures:
        print(f"FAIL: {line}")
    print(f"{len(sources)} templates, {n_compared} rendered conversations: "
          f"{n_compared - len(failures)} as the template renders them (or refused where the "
          f"style takes no tools){'' if failures else ', known differences excepted'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
