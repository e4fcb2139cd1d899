#!/usr/bin/env python3
"""Tokenizer corpus: texts + the token ids Hugging Face produces for them, per tokenizer.

Writes tests/fixtures/tokenizer_corpus/{texts.json, qwen3.json, llama3.json, llama2.json, gpt2.json,
smollm2.json}; the C++ tests (tests/text/test_corpus_tokenization.cpp, tests/model/
test_real_tokenizer_corpus.cpp) require our encoder/decoder to reproduce every entry.

Invariants:
  - The texts are written once (texts.json); each tokenizer file holds, per text index, the ids of
    encode(text, add_special_tokens=False), and only what differs from the obvious for decode:
    "decode"[i] is present only where decode(ids, skip_special_tokens=False) != text,
    "decode_skip"[i] only where decode(ids, skip_special_tokens=True) != decode(ids, False).
  - The reference is the Hugging Face `tokenizers` library on the tokenizer's own file (tokenizer.json;
    for GPT-2 the encoder.json/vocab.bpe pair assembled as the gpt2 hub tokenizer.json is); for SmolLM2 it
    is the tokenizer transformers builds from the GGUF metadata. transformers' AutoTokenizer is run too and
    where it disagrees, its answer is recorded under "transformers" (not used by the tests).
  - Deterministic: the same inputs and library versions rewrite identical files.

Usage (repository root): python3 scripts/golden/make_tokenizer_corpus.py [--data ../shared/data]
    [--models models] [--out tests/fixtures/tokenizer_corpus]
"""
import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import sys
import tarfile
import tempfile
import unicodedata

import tokenizers
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

GSM8K_STRIDE = 25  # every 25th GSM8K train row: 299 rows
DECODE_ONLY_CASES = 24


# ---- texts --------------------------------------------------------------------------------------------------

def nfd(s):
    return unicodedata.normalize("NFD", s)


MULTILINGUAL = [
    ("zh", "今天天气很好，我们去公园散步吧。机器学习模型需要大量的数据来训练。"),
    ("zh-hant", "請問這本書多少錢？我想買兩本，謝謝！"),
    ("ja", "東京は日本の首都です。ひらがなとカタカナ、そして漢字を混ぜて書きます。ｶﾀｶﾅ（半角）もあります。"),
    ("ko", "안녕하세요, 저는 학생입니다. 한국어 문장을 토큰화해 봅시다."),
    ("ko-nfd", nfd("한국어 자모는 NFD에서 분해됩니다: 한글, 값, 읽다.")),
    ("ar", "مرحبا بالعالم. هذه جملة قصيرة باللغة العربية مع أرقام ١٢٣٤٥."),
    ("ar-harakat", "كَتَبَ الطَّالِبُ الدَّرْسَ فِي الْمَدْرَسَةِ."),
    ("he", "שלום עולם! זהו משפט קצר בעברית, עם מספרים 2024."),
    ("he-niqqud", "שָׁלוֹם וּבְרָכָה לְכֻלָּם"),
    ("hi", "नमस्ते दुनिया। मशीन लर्निंग एक रोचक विषय है। संख्याएँ: १२३४५"),
    ("hi-nukta", "क़लम और \u0958लम, ज़रूर और \u095bरूर"),  # U+0958/095B are composition exclusions
    ("th", "สวัสดีครับ ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ผมชอบกินข้าวผัด"),
    ("ru", "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА ёлка"),
    ("ru-nfd", nfd("Ещё йогурт: ё и й раскладываются в NFD.")),
    ("el", "Καλημέρα κόσμε! Η γλώσσα μας έχει τόνους: ά έ ή ί ό ύ ώ ΐ ΰ, και τελικό σίγμα: λόγος."),
    ("de", "Grüße aus München! Der Fußgänger überquert die Straße. GROẞBUCHSTABEN: ÄÖÜ äöüß."),
    ("de-nfd", nfd("Grüße aus Köln, schöne Äpfel und Übergrößen.")),
    ("vi", "Tiếng Việt có nhiều dấu: ả, ã, ạ, ằ, ẵ, ộ, ữ. Tôi yêu Hà Nội."),
    ("vi-nfd", nfd("Tiếng Việt có nhiều dấu: ả, ã, ạ, ằ, ẵ, ộ, ữ. Tôi yêu Hà Nội.")),
    ("latin-mix", "Ça coûte 12,50 € — très cher ! ¿Dónde está el baño? Zażółć gęślą jaźń. İstanbul'da ılık bir gün."),
    ("latin-nfd", "Cafe\u0301 re\u0301sume\u0301 nai\u0308ve, pin\u0303a, A\u030angstro\u0308m"),
    ("nfc-singletons", "\u212b \u2126 \u212a \u1e9b\u0323: Angstrom, Ohm and Kelvin signs; \ufb01nance keeps its ligature"),
    ("nfc-reorder", "q\u0307\u0323 a\u0302\u0323 a\u0323\u0302 o\u031b\u0301 \u1ea1\u0302"),
    ("hy-ka", "Բարեւ աշխարհ։ გამარჯობა მსოფლიო!"),
    ("ta-bn", "வணக்கம் உலகம். আমি বাংলায় গান গাই।"),
    ("am-km", "ሰላም ለዓለም። សួស្តី​ពិភពលោក"),
    ("mixed-scripts", "AI模型 (модель) は 𝐌𝐨𝐝𝐞𝐥 ≠ نموذج; 3×4=12 → ✓"),
]

CODE = [
    ("python", "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
               "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\n"
               "if __name__ == \"__main__\":\n\tprint(fibonacci(10))  # tab-indented\n"),
    ("python-tabs", "class Node:\n\tdef __init__(self, value):\n\t\tself.value = value\n\t\tself.next = None\n\n"
                    "\tdef __repr__(self):\n\t\treturn f\"Node({self.value!r})\"\n"),
    ("cpp", "#include <vector>\n\ntemplate <typename T>\nT sum(const std::vector<T>& xs) {\n  T total{};\n"
            "  for (const auto& x : xs) total += x;  // accumulate\n  return total;\n}\n\n"
            "int main() { return sum<int>({1, 2, 3}) == 6 ? 0 : 1; }\n"),
    ("json", "{\n  \"name\": \"swift.cpp\",\n  \"version\": [0, 1, 0],\n  \"nested\": {\"a\": null, \"b\": true, "
             "\"c\": -1.5e-3},\n  \"unicode\": \"\\u00e9\\n\",\n  \"list\": [\n    {\"id\": 1},\n    {\"id\": 2}\n  ]\n}\n"),
    ("shell", "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n    wc -l \"$f\" | awk '{print $1}'\ndone\n"
              "echo \"${HOME:-/root}\" 2>&1 >/dev/null\n"),
    ("html-md", "<div class=\"x\">\n  <p>Hello &amp; welcome!</p>\n</div>\n\n| col | val |\n|-----|----:|\n| a   |  1  |\n\n"
                "**bold** _it_ `code` [link](https://example.com/path?q=1&r=2#frag)\n"),
    ("latex-sql", "$$\\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}$$\nSELECT id, COUNT(*) FROM t WHERE x >= 10 "
                  "GROUP BY id;\n"),
    ("paths", "C:\\Users\\admin\\Documents\\file.txt /usr/local/lib/libswift.so user.name+tag@example.co.uk "
              "192.168.0.1:8080"),
    ("diff", "--- a/src/main.cpp\n+++ b/src/main.cpp\n@@ -1,3 +1,4 @@\n #include <cstdio>\n+#include <string>\n"
             " int main() {\n-  return 0;\n+  return 1;\n }\n"),
    ("regex", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"),
]

EMOJI = [
    ("emoji-basic", "I love it 👍 😀😃😄😁😆 🎉🎉🎉"),
    ("emoji-skin", "👍🏽 👋🏿 🧑🏻‍💻 waving 👋🏼hello"),
    ("emoji-zwj", "Family: 👨‍👩‍👧‍👦, couple: 👩‍❤️‍👨, rainbow flag: 🏳️‍🌈, pirate: 🏴‍☠️"),
    ("emoji-flags", "Flags 🇯🇵🇺🇸🇩🇪🇫🇷 and Scotland 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"),
    ("emoji-keycap", "Keycaps #️⃣ 1️⃣ 2️⃣ *️⃣ and hearts ❤️ ❤ ♥️"),
    ("emoji-glued", "hello🌍world🚀launch123🔥"),
    ("emoji-run", "😀" * 40),
]

WHITESPACE = [
    ("ws-empty", ""),
    ("ws-space", " "),
    ("ws-spaces", "     "),
    ("ws-leading", "   leading spaces"),
    ("ws-trailing", "trailing spaces   "),
    ("ws-both", "  both  "),
    ("ws-inner", "a  b   c    d     e"),
    ("ws-tabs", "\tone tab\n\t\ttwo tabs\n\t \t mixed"),
    ("ws-crlf", "line one\r\nline two\r\n\r\nline four\r\n"),
    ("ws-cr", "carriage\rreturn\r"),
    ("ws-space-nl", "a \nb  \n  c \n\n d"),
    ("ws-nl-only", "\n"),
    ("ws-nl-space-nl", "\n \n \n"),
    ("ws-vt-ff", "vertical\x0btab and form\x0cfeed"),
    ("ws-unicode", "nbsp\u00a0here, em\u2003space, ideographic\u3000space, thin\u2009space, nel\u0085line, "
                   "ls\u2028ps\u2029end"),
]
WHITESPACE += [(f"ws-newlines-{k}", "x" + "\n" * k + "y") for k in range(1, 21)]
WHITESPACE += [(f"ws-newlines-only-{k}", "\n" * k) for k in (2, 3, 7, 20)]
WHITESPACE += [(f"ws-spaces-{k}", "a" + " " * k + "b") for k in (2, 3, 4, 8, 16, 17)]

NUMBERS = [
    ("num-long", "1234567890123456789012345678901234567890"),
    ("num-decimals", "3.14159265358979 -0.000001 1e-10 6.022e23 2.5E+3 .5 5."),
    ("num-grouped", "1,234,567.89 and 1.234.567,89 and 1 234 567 and $1,000,000.00 (100%)"),
    ("num-misc", "0x1F3A 0b1011 0o755 2024-11-29T14:39:00Z +1 (555) 123-4567 v1.2.3-rc.4"),
    ("num-unicode", "fullwidth １２３４５, roman Ⅻ ⅷ, super x² y³, fractions ½ ¾, arabic ٣٤٥, bengali ৩৪৫, thai ๑๒๓"),
    ("num-run", "7" * 301),
    ("num-mixed", "abc123def4567ghi89 a1b2c3 1a2b3c 12ab34"),
]

SPECIAL_IN_TEXT = [
    ("sp-chatml", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"),
    ("sp-im-glued", "Hello<|im_start|>world"),
    ("sp-im-spaced", "Hello <|im_start|> world"),
    ("sp-im-adjacent", "<|im_start|><|im_end|><|im_start|>"),
    ("sp-im-partial", "<|im_start <|im_start| im_start|> <|IM_START|> <<|im_start|>> |<|im_end|>|"),
    ("sp-eot", "The end.<|endoftext|>The beginning."),
    ("sp-eot-spaced", "The end. <|endoftext|> The beginning. <|endoftext|>"),
    ("sp-eot-only", "<|endoftext|>"),
    ("sp-s", "<s>Hello world</s>"),
    ("sp-s-spaced", "<s> Hello world </s> and then <s>  again"),
    ("sp-s-mid", "a</s>b <s>c</s>s <unk> d"),
    ("sp-s-glued", "<s><s></s></s>"),
    ("sp-bot", "<|begin_of_text|>Hi there"),
    ("sp-bot-mid", "x <|begin_of_text|> y<|begin_of_text|>z"),
    ("sp-llama3-chat", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("sp-llama3-reserved", "reserved <|reserved_special_token_0|> and <|reserved_special_token_247|>!"),
    ("sp-think", "<think>\nLet me think about it.\n</think>\n\nThe answer is 42."),
    ("sp-tool", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
    ("sp-fim", "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n<|fim_middle|>return a + b"),
    ("sp-smollm", "<repo_name>swift<file_sep>main.cpp\n<filename>x.py<gh_stars>10"),
    ("sp-inst", "[INST] Hello [/INST] Hi</s>[INST] again [/INST]"),
]

RARE = [
    ("rare-fffd", "replacement \ufffd char \ufffd\ufffd"),
    ("rare-pua", "private use \ue000\uf8ff and \U000f0000\U0010fffd plane 15/16"),
    ("rare-lone-mark", "\u0301 starts with a combining mark; also after space \u0308 and \u0301\u0302\u0303"),
    ("rare-zero-width", "zero\u200bwidth\u200cnon\u200djoiner\u2060word\ufeffbom"),
    ("rare-controls", "nul\x00 bell\x07 esc\x1b[31mred\x1b[0m del\x7f unit\x1f"),
    ("rare-nonchar", "noncharacters \ufffe \uffff \U0001fffe"),
    ("rare-astral", "𝐀𝐁𝐂 𝕳𝖊𝖑𝖑𝖔 \U00020000\U0002a6d6 𓀀 🜁"),
    ("rare-zalgo", "Z\u0324\u0354\u0367\u0311\u0313a\u0356\u032d\u0308\u0307l\u036e\u0312\u036bg\u030c\u0317\u035a"
                   "o\u0319\u0314\u036e\u0307\u0350\u0307"),
    ("rare-bidi", "abc \u202eevil\u202c \u200fRTL\u200e mark"),
    ("rare-variation", "\u2764\ufe0f \u2764\ufe0e \u845b\U000e0100 text"),
]

MISC = [
    ("contractions", "I'm, you're, he's, they've, we'll, I'd, can't, DON'T, She'S, it’s, 's 's's ''"),
    ("punctuation", "Wait... what?!?! (yes) [no] {maybe} <tag/> — – - ‘quoted’ “double” «guillemets» …"),
    ("long-word", "Pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious" * 3),
    ("long-a", "a" * 1000),
    ("long-ab", "ab" * 300),
    ("sentence", "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! the quick brown fox?"),
    ("case", "camelCaseWord snake_case_word SCREAMING_CASE kebab-case-word PascalCase"),
    ("repeat-punct", "!!!!!!!!!! ?????? ...... ------ ====== ****** ______"),
]


def gsm8k_rows(path):
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(f"gsm8k/{i:04d}", rows[i]["question"] + "\n" + rows[i]["answer"]) for i in range(0, len(rows), GSM8K_STRIDE)]


def build_entries(data_dir):
    groups = [("multilingual", MULTILINGUAL), ("code", CODE), ("emoji", EMOJI), ("whitespace", WHITESPACE),
              ("numbers", NUMBERS), ("special", SPECIAL_IN_TEXT), ("rare", RARE), ("misc", MISC)]
    entries = []
    for group, items in groups:
        for name, text in items:
            entries.append({"name": f"{group}/{name}", "text": text,
                            "with_special": group in ("special", "whitespace", "rare") or name in ("zh", "python")})
    gsm = gsm8k_rows(os.path.join(data_dir, "datasets/gsm8k/train.jsonl"))
    for k, (name, text) in enumerate(gsm):
        entries.append({"name": name, "text": text, "with_special": k < 10})
    names = [e["name"] for e in entries]
    assert len(set(names)) == len(names), "duplicate entry names"
    return entries


# ---- tokenizers ---------------------------------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


class Subject:
    """One tokenizer: the reference (`tokenizers` object or a transformers tokenizer) and transformers' view."""

    def __init__(self, name, source, files, reference, hf):
        self.name, self.source, self.files, self.reference, self.hf = name, source, files, reference, hf

    def encode(self, text, special):
        if isinstance(self.reference, Tokenizer):
            return self.reference.encode(text, add_special_tokens=special).ids
        return self.reference(text, add_special_tokens=special)["input_ids"]

    def decode(self, ids, skip):
        return self.reference.decode(ids, skip_special_tokens=skip)

    def vocab_size(self):
        if isinstance(self.reference, Tokenizer):
            return self.reference.get_vocab_size(with_added_tokens=True)
        return len(self.reference)


def gpt2_reference(encoder_json, vocab_bpe):
    # The gpt2 hub tokenizer.json: byte-level BPE, GPT-2 regex, <|endoftext|> (50256) as a special added token.
    tok = Tokenizer(models.BPE.from_file(encoder_json, vocab_bpe))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    return tok


def load_subjects(tok_dir, models_dir, tmp):
    from transformers import AutoTokenizer
    subjects = []
    for name in ("qwen3", "llama3", "llama2"):
        d = os.path.join(tok_dir, name)
        files = {f: sha256(os.path.join(d, f)) for f in ("tokenizer.json", "tokenizer_config.json")}
        subjects.append(Subject(name, f"tokenizers.tar.xz:{name}/tokenizer.json", files,
                                Tokenizer.from_file(os.path.join(d, "tokenizer.json")), AutoTokenizer.from_pretrained(d)))
    d = os.path.join(tok_dir, "gpt2")
    hf_dir = os.path.join(tmp, "gpt2-hf")
    os.makedirs(hf_dir)
    shutil.copy(os.path.join(d, "encoder.json"), os.path.join(hf_dir, "vocab.json"))
    shutil.copy(os.path.join(d, "vocab.bpe"), os.path.join(hf_dir, "merges.txt"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                   "unk_token": "<|endoftext|>"}, f)
    subjects.append(Subject("gpt2", "tokenizers.tar.xz:gpt2/encoder.json + gpt2/vocab.bpe",
                            {f: sha256(os.path.join(d, f)) for f in ("encoder.json", "vocab.bpe")},
                            gpt2_reference(os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")),
                            AutoTokenizer.from_pretrained(hf_dir)))
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    if os.path.exists(os.path.join(models_dir, gguf)):
        hf = AutoTokenizer.from_pretrained(models_dir, gguf_file=gguf)
        subjects.append(Subject("smollm2", f"models/{gguf} (transformers AutoTokenizer from the GGUF metadata)",
                                {gguf: sha256(os.path.join(models_dir, gguf))}, hf, hf))
    else:
        print(f"warning: {models_dir}/{gguf} missing (scripts/fetch-model.sh); smollm2.json not regenerated")
    return subjects


# ---- expected values ----------------------------------------------------------------------------------------

def decode_only_cases(subject, entries, rng):
    """Id sequences no encoder produces: random ids (special ones included) and texts cut mid-character."""
    cases = []
    n = subject.vocab_size()
    for _ in range(DECODE_ONLY_CASES - 6):
        cases.append([rng.randrange(n) for _ in range(rng.randint(1, 24))])
    specials = sorted(set(subject.encode("<|endoftext|><|im_start|><s></s><|begin_of_text|>", False)))
    cases.append(specials[:6] + [rng.randrange(n) for _ in range(4)] + specials[:2])
    for text in ("日本語🎉", "😀😃 ü", "한국어", "नमस्ते"):  # drop the first / last token: partial UTF-8
        ids = subject.encode(text, False)
        cases.append(ids[1:] if len(cases) % 2 else ids[:-1])
    cases.append([])
    return [{"ids": ids, "decode": subject.decode(ids, False), "decode_skip": subject.decode(ids, True)} for ids in cases]


def expected_for(subject, entries):
    out = {"ids": [], "decode": {}, "decode_skip": {}, "with_special": {}}
    tf = {"class": type(subject.hf).__name__, "encode": {}, "encode_special": {}, "decode": {}}
    for i, e in enumerate(entries):
        text, key = e["text"], str(i)
        ids = subject.encode(text, False)
        out["ids"].append(ids)
        dec, dec_skip = subject.decode(ids, False), subject.decode(ids, True)
        if dec != text:
            out["decode"][key] = dec
        if dec_skip != dec:
            out["decode_skip"][key] = dec_skip
        hf_ids = subject.hf(text, add_special_tokens=False)["input_ids"]
        if hf_ids != ids:
            tf["encode"][key] = hf_ids
        if subject.hf.decode(ids) != dec:
            tf["decode"][key] = subject.hf.decode(ids)
        if e["with_special"]:
            ids_s = subject.encode(text, True)
            out["with_special"][key] = {"ids": ids_s, "decode": subject.decode(ids_s, False),
                                        "decode_skip": subject.decode(ids_s, True)}
            hf_s = subject.hf(text, add_special_tokens=True)["input_ids"]
            if hf_s != ids_s:
                tf["encode_special"][key] = hf_s
    rng = random.Random(f"tokenizer-corpus/{subject.name}")
    out["decode_only"] = decode_only_cases(subject, entries, rng)
    out["transformers"] = tf
    return out


# ---- writing ------------------------------------------------------------------------------------------------

def escape_invisible(s):
    """JSON string literal: UTF-8 as is, except characters a reader cannot see (controls, format, unassigned,
    private use, surrogates, separators other than ' '), which are written as \\uXXXX escapes."""
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif cat[0] == "C" or (cat[0] == "Z" and ch != " ") or ch in "\ufffd":
            cp = ord(ch)
            if cp > 0xFFFF:
                cp -= 0x10000
                out.append(f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}")
            else:
                out.append(f"\\u{cp:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def dumps(value):
    if isinstance(value, str):
        return escape_invisible(value)
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def write_json(path, header, blocks):
    """header: small dict written first; blocks: (key, list-or-dict) written one element per line."""
    lines = ["{"]
    items = [(k, dumps(v)) for k, v in header.items()]
    for k, v in blocks:
        if isinstance(v, list):
            body = ",\n".join("  " + dumps(x) for x in v)
            items.append((k, "[\n" + body + "\n]" if v else "[]"))
        else:
            body = ",\n".join(f"  {dumps(str(a))}: {dumps(b)}" for a, b in v.items())
            items.append((k, "{\n" + body + "\n}" if v else "{}"))
    lines.append(",\n".join(f"{dumps(k)}: {v}" for k, v in items))
    lines.append("}\n")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines))
    json.load(open(path, encoding="utf-8"))  # round-trip check


def versions():
    return {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
            "python": platform.python_version()}


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(root, "../shared/data"))
    ap.add_argument("--models", default=os.path.join(root, "models"))
    ap.add_argument("--out", default=os.path.join(root, "tests/fixtures/tokenizer_corpus"))
    args = ap.parse_args()

    entries = build_entries(args.data)
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, "texts.json"),
               {"what": "tokenizer corpus texts; made by scripts/golden/make_tokenizer_corpus.py",
                "gsm8k": f"datasets/gsm8k/train.jsonl rows 0, {GSM8K_STRIDE}, {2 * GSM8K_STRIDE}, ...: "
                         "question + \"\\n\" + answer (MIT, openai/grade-school-math)"},
               [("entries", entries)])
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(os.path.join(args.data, "tokenizers.tar.xz")) as tar:
            tar.extractall(tmp, filter="data")
        for subject in load_subjects(tmp, args.models, tmp):
            exp = expected_for(subject, entries)
            tf = exp.pop("transformers")
            header = {"tokenizer": subject.name, "source": subject.source, "sha256": subject.files,
                      "versions": versions(), "entries": len(entries),
                      "transformers_class": tf.pop("class")}
            write_json(os.path.join(args.out, f"{subject.name}.json"), header,
                       [("ids", exp["ids"]), ("decode", exp["decode"]), ("decode_skip", exp["decode_skip"]),
                        ("with_special", exp["with_special"]), ("decode_only", exp["decode_only"]),
                        ("transformers_encode", tf["encode"]), ("transformers_encode_special", tf["encode_special"]),
                        ("transformers_decode", tf["decode"])])
            tokens = sum(len(x) for x in exp["ids"])
            print(f"{subject.name:8s} {len(entries)} texts, {tokens} tokens; decode != text: {len(exp['decode'])}; "
                  f"transformers {versions()['transformers']} differs: encode {len(tf['encode'])}, "
                  f"encode+special {len(tf['encode_special'])}, decode {len(tf['decode'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
