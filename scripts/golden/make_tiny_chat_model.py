#!/usr/bin/env python3
"""A tiny chat model with a real tokenizer, for command-line tests that run `swift sft` / `swift infer` end to end
(streaming, the tokenized cache, tools reaching the template) in well under a second. Not a golden fixture: its
weights are random and nothing is compared with transformers; the point is a complete model directory.

Writes tests/fixtures/tiny_chat/ (Python standard library only, deterministic):
  tokenizer.json   byte-level BPE (GPT-2's byte-to-unicode alphabet, 256 byte tokens, a few merges) plus the
                   added tokens <|endoftext|> 256, <|im_start|> 257, <|im_end|> 258
  config.json      llama: vocab 259, hidden 16, 1 layer, 2 heads, 1 kv head, tied embeddings, eos <|im_end|>
  model.safetensors  F32 weights, normal(0, 0.02) from random.Random(0), norms 1
The chat template is detected as chatml (llama with <|im_start|>/<|im_end|>); tests pass --template for others.
"""
import json
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "tiny_chat")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_json():
    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    added = []
    for i, tok in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]):
        added.append({"id": 256 + i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    H, I, L, NH, NKV, D, V = 16, 32, 1, 2, 1, 8, 259
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": H,
        "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
        "head_dim": D, "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 256, "eos_token_id": 258, "torch_dtype": "float32",
    }
    rng = random.Random(0)
    tensors = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    for l in range(L):
        p = f"model.layers.{l}."
        tensors.update({p + "self_attn.q_proj.weight": [NH * D, H], p + "self_attn.k_proj.weight": [NKV * D, H],
                        p + "self_attn.v_proj.weight": [NKV * D, H], p + "self_attn.o_proj.weight": [H, NH * D],
                        p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
                        p + "mlp.down_proj.weight": [H, I], p + "input_layernorm.weight": [H],
                        p + "post_attention_layernorm.weight": [H]})
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        shape = tensors[name]
        count = 1
        for s in shape:
            count *= s
        values = [1.0] * count if name.endswith("norm.weight") else [rng.gauss(0.0, 0.02) for _ in range(count)]
        blob = struct.pack(f"<{count}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(os.path.join(OUT, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f, ensure_ascii=False)
        f.write("\n")
    # Datasets of the command-line tests: chat rows, and rows with a `tools` column.
    with open(os.path.join(OUT, "chat.jsonl"), "w") as f:
        for i in range(12):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                             {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."}]}) + "\n")
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                             "parameters": {"type": "object",
                                                            "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}
    with open(os.path.join(OUT, "tools.jsonl"), "w") as f:
        for city in ["Paris", "Oslo"]:
            f.write(json.dumps({"tools": [tool], "messages": [{"role": "user", "content": f"Weather in {city}?"}]}) + "\n")


if __name__ == "__main__":
    main()
