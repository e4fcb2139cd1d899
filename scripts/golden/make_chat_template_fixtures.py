#!/usr/bin/env python3
"""Chat-template fixtures: conversations rendered by Hugging Face transformers with the models' real Jinja
templates, as text and (where the tokenizer is here) as token ids.

Writes tests/fixtures/chat_templates/conversations.json (the conversations, written once), one <template>.json
per built-in template of src/text/chat_template.h (with the real template text, for ChatTemplate::detect), and
detect_unsupported.json (real templates no built-in implements, which detect must refuse); tests/text/test_chat_template*.cpp and
tests/model/test_real_chat_template.cpp require render_text() / encode_chat() to reproduce every case.

Invariants:
  - The reference is transformers' own renderer: tokenizer.apply_chat_template(messages, chat_template=...,
    tokenize=False / True, add_generation_prompt=False / True) where a tokenizer exists, else
    transformers.utils.chat_template_utils.render_jinja_template with the model's bos/eos token strings (what
    apply_chat_template passes). ids are checked to equal tokenizer(text, add_special_tokens=False).
  - Every dict in tool_calls is rebuilt with sorted keys before rendering: swift.cpp holds them in nlohmann::json
    (ChatMessage::tool_calls), whose objects iterate in key order, so `tojson` of a dict compares equal only
    then. Tool definitions keep their order (TemplateOptions::tools is an nlohmann::ordered_json).
  - Deterministic: the same inputs and library versions rewrite identical files.

Templates and their sources (../shared/data unless said otherwise):
  qwen2_5   chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja; ids with the Qwen3 tokenizer (same vocab and merges;
            Qwen3 adds <tool_response>, </tool_response>, <think>, </think> as added tokens 151665-151668, so
            the ids of tool turns differ from real Qwen2.5 there)
  qwen3     chat-templates/Qwen-Qwen3-0.6B.jinja (= tokenizers.tar.xz qwen3/tokenizer_config.json); Qwen3 tokenizer
  llama3    tokenizers.tar.xz llama3/tokenizer_config.json: the first Llama-3-Instruct revision, which appends the
            assistant header unconditionally; rendered with Meta's later fix ({% if add_generation_prompt %}),
            checked to agree with the shipped one when add_generation_prompt is true; Llama-3 tokenizer
  llama3_1  chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja ("Today Date: 26 Jul 2024" unless
            date_string is given); Llama-3 tokenizer
  llama3_2  chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja (today's date via strftime_now, so the
            fixture passes date_string); Llama-3 tokenizer
  llama2    Llama-2-chat's template (meta-llama/Llama-2-7b-chat-hf tokenizer_config.json, written below: the
            llama2/ config of the archive has none); ids with the archive's llama2/ tokenizer.json, whose
            vocabulary is in fact Mistral-7B v0.1's (e.g. '▁the' = 272, Llama-2 has 278): a SentencePiece-BPE
            check of the text -> ids path, not Llama-2's real ids
  mistral   chat-templates/mistralai-Mistral-Nemo-Instruct-2407.jinja; text only (Tekken tokenizer not here)
  chatml    SmolLM2-135M-Instruct's GGUF tokenizer.chat_template; ids with the tokenizer transformers builds from
            that GGUF (models/SmolLM2-135M-Instruct.Q4_1.gguf; `scripts/fetch-model.sh`)
  phi3      chat-templates/microsoft-Phi-3.5-mini-instruct.jinja; text only (eos '<|endoftext|>')
  gemma     chat-templates/google-gemma-2-2b-it.jinja; text only. Gemma-2 raises on a system message; swift.cpp
            merges it into the first user turn (system + "\\n\\n" + user content, then the template's trim),
            and so does this script before rendering.

Usage (repository root): python3 scripts/golden/make_chat_template_fixtures.py [--data ../shared/data]
    [--models models] [--out tests/fixtures/chat_templates]
"""
import argparse
import json
import os
import platform
import sys
import tarfile
import tempfile

import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}")

LLAMA3_GEN_PROMPT = "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a time zone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}


def call(name, arguments, wrapped=True):
    fn = {"name": name, "arguments": arguments}
    return {"type": "function", "function": fn} if wrapped else fn


# Conversations. "needs" names the features a template must support to render it: tools (a tools list),
# tool_calls (assistant tool calls), tool_role (role "tool"), multi_tool_calls (several calls in one message),
# thinking (qwen3 reasoning), system_mid (a system message after the first).
CONVERSATIONS = [
    {"name": "single_turn", "needs": [], "messages": [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi there! How can I help you today?"}]},
    {"name": "single_turn_system", "needs": [], "messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."}]},
    {"name": "multi_turn", "needs": [], "messages": [
        {"role": "user", "content": "Name a prime number."},
        {"role": "assistant", "content": "7 is prime."},
        {"role": "user", "content": "And an even one?"},
        {"role": "assistant", "content": "2 is the only even prime."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "You're welcome!"}]},
    {"name": "multi_turn_system", "needs": [], "messages": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Good morning"},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "Good night"},
        {"role": "assistant", "content": "Bonne nuit"}]},
    {"name": "prompt_only", "needs": [], "messages": [
        {"role": "user", "content": "Write a haiku about the sea."}]},
    {"name": "prompt_only_system", "needs": [], "messages": [
        {"role": "system", "content": "You write poems."},
        {"role": "user", "content": "Write a haiku about the sea."}]},
    {"name": "history_then_prompt", "needs": [], "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of Italy?"},
        {"role": "assistant", "content": "Rome."},
        {"role": "user", "content": "And of Spain?"}]},
    {"name": "unicode_emoji", "needs": [], "messages": [
        {"role": "system", "content": "Réponds en français. 日本語も可。"},
        {"role": "user", "content": "Ça va ? 你好 👋🏽 naïve café — ﬁ ligature, Ω≈ç√"},
        {"role": "assistant", "content": "Très bien ! 🎉👨‍👩‍👧 日本語もOK。"}]},
    {"name": "whitespace_edges", "needs": [], "messages": [
        {"role": "user", "content": "  padded question with spaces\t \n"},
        {"role": "assistant", "content": "\n\nAnswer after blank lines.\n\n  "},
        {"role": "user", "content": "\u3000ideographic space\u00a0and nbsp\u3000"},
        {"role": "assistant", "content": " leading space only"}]},
    {"name": "empty_content", "needs": [], "messages": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "Nothing was asked."},
        {"role": "user", "content": "Say nothing."},
        {"role": "assistant", "content": ""}]},
    {"name": "special_text_in_content", "needs": [], "messages": [
        {"role": "user", "content": "What does [INST] or <tag> mean? Use {braces} and \"quotes\"."},
        {"role": "assistant", "content": "Markup: [INST], <tag>, {braces}, \"quotes\" and a\\backslash."}]},
    {"name": "system_mid", "needs": ["system_mid"], "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "From now on, answer in capitals."},
        {"role": "user", "content": "Ok?"},
        {"role": "assistant", "content": "OK."}]},
    # ---- tools --------------------------------------------------------------------------------------------
    {"name": "tool_call_round_trip", "needs": ["tools", "tool_calls", "tool_role"], "tools": [WEATHER_TOOL],
     "messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"})]},
        {"role": "tool", "content": "{\"temperature\": 18, \"condition\": \"cloudy\"}"},
        {"role": "assistant", "content": "It is 18 °C and cloudy in Paris."}]},
    {"name": "tool_call_with_system", "needs": ["tools", "tool_calls", "tool_role"], "tools": [WEATHER_TOOL, TIME_TOOL],
     "messages": [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Time in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_time", {"tz": "Asia/Tokyo"})]},
        {"role": "tool", "content": "14:05\n\"JST\" — é\t\\"},
        {"role": "assistant", "content": "It is 14:05 in Tokyo."}]},
    {"name": "tool_call_then_prompt", "needs": ["tools", "tool_calls", "tool_role"], "tools": [WEATHER_TOOL],
     "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Oslo"})]},
        {"role": "tool", "content": "{\"temperature\": -3}"}]},
    {"name": "parallel_tool_calls", "needs": ["tools", "tool_calls", "tool_role", "multi_tool_calls"],
     "tools": [WEATHER_TOOL, TIME_TOOL], "messages": [
        {"role": "user", "content": "Weather and time in Rome?"},
        {"role": "assistant", "content": "Let me check both.", "tool_calls": [
            call("get_weather", {"city": "Rome"}), call("get_time", {"tz": "Europe/Rome"}, wrapped=False)]},
        {"role": "tool", "content": "{\"temperature\": 24}"},
        {"role": "tool", "content": "09:30"},
        {"role": "assistant", "content": "24 °C, and it is 09:30."}]},
    {"name": "tool_calls_without_tools", "needs": ["tool_calls", "tool_role"], "messages": [
        {"role": "user", "content": "Check Berlin."},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {
            "city": "Berlin", "unit": "celsius", "days": 3, "detailed": True, "threshold": 0.5, "scale": 1e-05,
            "big": 1e16, "tags": ["a", "ü"], "extra": None, "nested": {"k": [], "m": {}}})]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "Sunny in Berlin."}]},
    {"name": "tool_call_string_arguments", "needs": ["tool_calls", "tool_role"], "messages": [
        {"role": "user", "content": "Check Lima."},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", "{\"unit\": \"celsius\", \"city\": \"Lima\"}")]},
        {"role": "tool", "content": "foggy"},
        {"role": "assistant", "content": "Foggy in Lima."}]},
    # ---- qwen3 thinking -------------------------------------------------------------------------------------
    {"name": "think_reasoning_field", "needs": ["thinking"], "messages": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No, 91 = 7 × 13."}]},
    {"name": "think_in_content_multi_turn", "needs": ["thinking"], "messages": [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n5"},
        {"role": "user", "content": "Times 4?"},
        {"role": "assistant", "content": "<think>\n5 * 4 = 20\n</think>\n\n20"}]},
    {"name": "think_absent_last", "needs": ["thinking"], "messages": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi!"}]},
    {"name": "think_multi_step_tool", "needs": ["thinking", "tools", "tool_calls", "tool_role"], "tools": [WEATHER_TOOL],
     "messages": [
        {"role": "user", "content": "Weather in Cairo?"},
        {"role": "assistant", "reasoning_content": "I should call the tool.", "content": "",
         "tool_calls": [call("get_weather", {"city": "Cairo"})]},
        {"role": "tool", "content": "{\"temperature\": 31}"},
        {"role": "assistant", "content": "<think>\nThe tool says 31.\n</think>\n\nIt is 31 °C in Cairo."}]},
    {"name": "think_unbalanced", "needs": ["thinking"], "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "\n\npartial reasoning\n</think>\n\nfirst</think>answer\n"}]},
    {"name": "think_prompt", "needs": ["thinking"], "messages": [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nFirst answer"},
        {"role": "user", "content": "Second question"}]},
]

# template -> what it renders beyond plain user/assistant/system-first conversations
TEMPLATES = {
    "qwen2_5": {"jinja": "chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja", "tokenizer": "qwen3",
                "supports": ["tools", "tool_calls", "tool_role", "multi_tool_calls", "system_mid"]},
    "qwen3": {"jinja": "chat-templates/Qwen-Qwen3-0.6B.jinja", "tokenizer": "qwen3",
              "supports": ["tools", "tool_calls", "tool_role", "multi_tool_calls", "system_mid", "thinking"],
              "variants": [{"enable_thinking": False}]},
    "llama3": {"jinja": "llama3-config", "tokenizer": "llama3", "supports": ["system_mid"]},
    "llama3_1": {"jinja": "chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja", "tokenizer": "llama3",
                 "supports": ["tools", "tool_calls", "tool_role", "system_mid"]},
    "llama3_2": {"jinja": "chat-templates/meta-llama-Llama-3.2-3B-Instruct.jinja", "tokenizer": "llama3",
                 "supports": ["tools", "tool_calls", "tool_role", "system_mid"],
                 "kwargs": {"date_string": "02 Jan 2025"}},
    "llama2": {"jinja": "llama2-chat", "tokenizer": "llama2", "supports": []},
    "mistral": {"jinja": "chat-templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", "tokenizer": None,
                "bos": "<s>", "eos": "</s>", "supports": []},
    "chatml": {"jinja": "gguf", "tokenizer": "smollm2", "supports": ["system_mid"]},
    "phi3": {"jinja": "chat-templates/microsoft-Phi-3.5-mini-instruct.jinja", "tokenizer": None,
             "bos": "<s>", "eos": "<|endoftext|>", "supports": ["system_mid"]},
    "gemma": {"jinja": "chat-templates/google-gemma-2-2b-it.jinja", "tokenizer": None,
              "bos": "<bos>", "eos": "<eos>", "supports": [], "merge_system": True},
}


UNSUPPORTED_TEMPLATES = ["chat-templates/Qwen-QwQ-32B.jinja", "chat-templates/HuggingFaceTB-SmolLM3-3B.jinja",
                         "chat-templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"]


def sorted_keys(x):
    if isinstance(x, dict):
        return {k: sorted_keys(x[k]) for k in sorted(x)}
    if isinstance(x, list):
        return [sorted_keys(v) for v in x]
    return x


def hf_messages(conv, merge_system):
    msgs = []
    for m in conv["messages"]:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = sorted_keys(m["tool_calls"])
        msgs.append(m)
    if merge_system and msgs and msgs[0]["role"] == "system":
        system = msgs.pop(0)["content"]
        msgs[0] = dict(msgs[0], content=system + "\n\n" + msgs[0]["content"])
    return msgs


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(root, "..", "shared", "data"))
    ap.add_argument("--models", default=os.path.join(root, "models"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "chat_templates"))
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="chat_templates_")
    with tarfile.open(os.path.join(args.data, "tokenizers.tar.xz")) as tar:
        tar.extractall(tmp, filter="data")
    tokenizers = {name: AutoTokenizer.from_pretrained(os.path.join(tmp, name)) for name in ("qwen3", "llama3", "llama2")}
    gguf_name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tokenizers["smollm2"] = AutoTokenizer.from_pretrained(args.models, gguf_file=gguf_name)

    def jinja_text(spec):
        if spec == "llama3-config":
            shipped = tokenizers["llama3"].chat_template
            assert shipped.count(LLAMA3_GEN_PROMPT) == 1, "unexpected llama3 config template"
            return shipped.replace(LLAMA3_GEN_PROMPT, "{% if add_generation_prompt %}" + LLAMA3_GEN_PROMPT + "{% endif %}"), shipped
        if spec == "llama2-chat":
            return LLAMA2_CHAT_TEMPLATE, None
        if spec == "gguf":
            return tokenizers["smollm2"].chat_template, None
        with open(os.path.join(args.data, spec), encoding="utf-8") as f:
            return f.read(), None

    os.makedirs(args.out, exist_ok=True)
    conv_out = {"generator": "scripts/golden/make_chat_template_fixtures.py",
                "conversations": [{k: v for k, v in c.items() if k != "needs"} | {"needs": c["needs"]}
                                  for c in CONVERSATIONS]}
    for c in conv_out["conversations"]:
        for m in c["messages"]:
            if "tool_calls" in m:
                m["tool_calls"] = sorted_keys(m["tool_calls"])
    write_json(os.path.join(args.out, "conversations.json"), conv_out)

    versions = {"transformers": transformers.__version__, "python": platform.python_version()}
    # Real templates that no built-in implements: ChatTemplate::detect must refuse them.
    unsupported = []
    for path in UNSUPPORTED_TEMPLATES:
        with open(os.path.join(args.data, path), encoding="utf-8") as f:
            unsupported.append({"source": path, "chat_template": f.read()})
    write_json(os.path.join(args.out, "detect_unsupported.json"), {"templates": unsupported})
    for name, spec in TEMPLATES.items():
        template, shipped = jinja_text(spec["jinja"])
        tok = tokenizers.get(spec["tokenizer"]) if spec["tokenizer"] else None
        cases = []
        for conv in CONVERSATIONS:
            if not set(conv["needs"]) <= set(spec["supports"]):
                continue
            msgs = hf_messages(conv, spec.get("merge_system", False))
            tools = conv.get("tools")
            variants = [{}] + (spec.get("variants", []) if "thinking" in conv["needs"] or conv["name"] == "prompt_only" else [])
            for variant in variants:
                for agp in (False, True):
                    kwargs = dict(spec.get("kwargs", {}), **variant)
                    if tok is not None:
                        text = tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=False,
                                                       add_generation_prompt=agp, **kwargs)
                        ids = tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=True,
                                                      add_generation_prompt=agp, return_dict=False, **kwargs)
                        if hasattr(ids, "keys"):
                            ids = ids["input_ids"]
                        ids = list(ids)
                        direct = tok(text, add_special_tokens=False)["input_ids"]
                        assert ids == direct, f"{name}/{conv['name']}: apply_chat_template ids != tokenizer(text)"
                        if shipped is not None and agp:
                            assert text == tok.apply_chat_template(msgs, chat_template=shipped, tokenize=False,
                                                                   add_generation_prompt=True), "llama3 fix changed text"
                    else:
                        text = render_jinja_template([msgs], tools=tools, chat_template=template,
                                                     add_generation_prompt=agp, bos_token=spec["bos"],
                                                     eos_token=spec["eos"], **kwargs)[0][0]
                        ids = None
                    case = {"conversation": conv["name"], "add_generation_prompt": agp}
                    if kwargs:
                        case["options"] = kwargs
                    case["text"] = text
                    if ids is not None:
                        case["ids"] = ids
                    cases.append(case)
        out = {"template": name, "source": spec["jinja"], "tokenizer": spec["tokenizer"], "versions": versions,
               "chat_template": shipped if shipped is not None else template, "cases": cases}
        write_json(os.path.join(args.out, f"{name}.json"), out)
        print(f"{name}: {len(cases)} cases, {sum(1 for c in cases if 'ids' in c)} with ids")


def write_json(path, obj):
    # Top level indented; each case, conversation and message on one line, so diffs stay readable and small.
    def dump(x):
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))
    lines = ["{"]
    items = list(obj.items())
    for i, (k, v) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            lines.append(f" {dump(k)}: [")
            lines += [f"  {dump(e)}" + ("," if j + 1 < len(v) else "") for j, e in enumerate(v)]
            lines.append(" ]" + comma)
        else:
            lines.append(f" {dump(k)}: {dump(v)}{comma}")
    lines.append("}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
