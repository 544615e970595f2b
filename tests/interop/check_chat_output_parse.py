#!/usr/bin/python3
"""The chat output parser as the inverse of the real chat templates: each
assistant turn (reasoning, content, tool calls) is rendered with a real Jinja
engine as the template writes it into a conversation, the part a model
generates is cut out (what follows the generation prompt), and the parser
must give back the same reasoning, content and calls, with no warnings,
whether the text arrives whole or in pieces of 1, 3 or 7 bytes.

usage: check_chat_output_parse.py --parse-tool PATH --templates DIR
Exit status 77 (the ctest skip code) when jinja2 is missing for this python3.
"""
import argparse
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from check_chat_templates import make_environment  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "zip": {"type": "string"}, "days": {"type": "integer"},
        "metric": {"type": "boolean"}, "options": {"type": "object"},
        "stops": {"type": "array"}}}}}]

TURNS = {
    "call after a sentence": {
        "reasoning": "The user wants Paris.\n\nThree days, metric units.",
        "content": "I'll look that up.",
        "calls": [{"name": "get_weather", "arguments": {
            "city": "Paris", "zip": "75001", "days": 3, "metric": True,
            "options": {"lang": "fr", "hourly": False}, "stops": ["Lyon", "Nice"]}}]},
    "two calls, no content": {
        "reasoning": "One call per city.",
        "content": "",
        "calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                  {"name": "get_weather", "arguments": {"city": "Saint-\u00c9tienne\nFrance"}}]},
    "multi-line value": {
        "reasoning": "A value over several lines.",
        "content": "Here:",
        "calls": [{"name": "get_weather", "arguments": {"city": "\nline one\n\nline <two>\n"}}]},
    "answer without tools": {
        "reasoning": "17 \u00d7 23 = 391.\n\nChecked twice.",
        "content": "It is **391**.\n\nSee the working above.",
        "calls": []},
}

# template file: (parser format, generation prompt the model continues after,
# whether the template writes reasoning)
TEMPLATES = {
    "Qwen-Qwen3-0.6B.jinja": ("qwen3", "<|im_start|>assistant\n", True),
    "Qwen3.5-4B.jinja": ("qwen3.5", "<|im_start|>assistant\n<think>\n", True),
    "Qwen3-Coder.jinja": ("qwen3.5", "<|im_start|>assistant\n", False),
}


def generated_text(env, template, prompt, turn):
    messages = [{"role": "user", "content": "What is the weather like?"},
                {"role": "assistant", "content": turn["content"],
                 "reasoning_content": turn["reasoning"],
                 "tool_calls": [{"type": "function", "function": c} for c in turn["calls"]]}]
    text = env.from_string(template).render(messages=messages, tools=TOOLS,
                                            add_generation_prompt=False)
    start = text.rindex("<|im_start|>assistant")
    end = text.rindex("<|im_end|>")
    turn_text = text[start:end]
    if not turn_text.startswith(prompt):
        raise AssertionError(f"turn does not start with the generation prompt: {turn_text!r}")
    return turn_text[len(prompt):]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--parse-tool", required=True)
    parser.add_argument("--templates", required=True)
    args = parser.parse_args()
    try:
        import jinja2
        import jinja2.sandbox as sandbox
    except ImportError:
        print("SKIPPED: jinja2 is missing (install python3-jinja2)")
        return 77
    env = make_environment(jinja2, sandbox)
    failures = 0
    checks = 0
    for file_name, (format_name, prompt, writes_reasoning) in TEMPLATES.items():
        template = (pathlib.Path(args.templates) / file_name).read_text()
        for turn_name, turn in TURNS.items():
            text = generated_text(env, template, prompt, turn)
            expected = {"reasoning": turn["reasoning"] if writes_reasoning else "",
                        "content": turn["content"],
                        "tool_calls": [{"name": c["name"], "arguments": c["arguments"]}
                                       for c in turn["calls"]],
                        "warnings": []}
            for piece_bytes in (0, 1, 3, 7):
                request = {"format": format_name, "starts_in_reasoning": prompt.endswith("<think>\n"),
                           "tools": TOOLS, "text": text, "piece_bytes": piece_bytes}
                result = subprocess.run([args.parse_tool], input=json.dumps(request),
                                        capture_output=True, text=True, check=True)
                got = json.loads(result.stdout)
                ids = [c.pop("id") for c in got["tool_calls"]]
                checks += 1
                if got != expected or len(set(ids)) != len(ids):
                    failures += 1
                    print(f"FAIL {file_name} / {turn_name} / pieces of {piece_bytes}:\n"
                          f"  text     {text!r}\n  got      {got}\n  expected {expected}")
    print(f"{checks - failures} of {checks} parses give back the rendered turn")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
