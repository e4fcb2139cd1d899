#!/usr/bin/env python3
"""Copies a GGUF file's header and metadata (tokenizer included) without its tensors: a few MB instead of ~100,
for tokenizer benchmarks on machines the model file cannot travel to (the device machine takes 64 MiB).

Invariants: the metadata bytes are copied unchanged; the tensor count is set to 0 and nothing follows the
key/value section but padding to the file's alignment (32 unless general.alignment says otherwise).

Usage: python3 scripts/bench/make_vocab_only_gguf.py models/SmolLM2-135M-Instruct.Q4_1.gguf OUT.gguf
"""
import struct
import sys

import gguf


def main(src, dst):
    reader = gguf.GGUFReader(src)
    fields = list(reader.fields.values())
    kv = [f for f in fields if not f.name.startswith("GGUF.")]  # GGUF.version/tensor_count/kv_count: the header
    kv_start = min(f.offset for f in kv)
    kv_end = max(f.offset + sum(p.nbytes for p in f.parts) for f in kv)
    with open(src, "rb") as f:
        raw = f.read(kv_end)
    header = bytearray(raw[:kv_start])
    struct.pack_into("<Q", header, 8, 0)  # magic u32, version u32, tensor_count u64, kv_count u64
    align = int(reader.fields["general.alignment"].parts[-1][0]) if "general.alignment" in reader.fields else 32
    out = bytes(header) + raw[kv_start:kv_end]
    out += b"\0" * (-len(out) % align)
    with open(dst, "wb") as f:
        f.write(out)
    check = gguf.GGUFReader(dst)
    assert len(check.tensors) == 0 and len(check.fields) == len(fields), "copy does not read back"
    print(f"{dst}: {len(out)} bytes, {len(kv)} metadata keys, no tensors")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
