#!/usr/bin/env bash
# Tokenizer throughput, ours vs Hugging Face tokenizers, in one go on this machine: GSM8K train (7,473 rows,
# question + "\n" + answer), add_special_tokens=false, for qwen3, llama3, llama2, gpt2 and SmolLM2 (GGUF).
#   scripts/bench/bench_tokenizer.sh [--threads N] [--reps R] [--only "qwen3 gpt2"]
# Environment: SWIFT_BUILD_DIR (default build/), SWIFT_SHARED_DATA (default ../shared/data), PYTHON,
# SWIFT_SMOLLM2_GGUF (default models/SmolLM2-135M-Instruct.Q4_1.gguf; a vocab-only GGUF of it does as well).
#
# Ours: build/bench/bench_tokenizer (std::thread over rows). HF: scripts/bench/bench_tokenizer_hf.py,
# encode_batch with TOKENIZERS_PARALLELISM=false (1 thread) and with RAYON_NUM_THREADS=N (N threads).
# Prints tokens/s side by side with the ratio ours/HF, and the number of rows whose ids differ (must be 0).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="${SWIFT_BUILD_DIR:-$root/build}"
shared="${SWIFT_SHARED_DATA:-$root/../shared/data}"
python="${PYTHON:-python3}"
threads=$(nproc)
reps=3
only="qwen3 llama3 llama2 gpt2 smollm2"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "usage: $0 [--threads N] [--reps R] [--only \"qwen3 gpt2\"]" >&2; exit 2 ;;
  esac
done

data="$shared/datasets/gsm8k/train.jsonl"
gguf="${SWIFT_SMOLLM2_GGUF:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -s "$data" ] || { echo "missing $data (set SWIFT_SHARED_DATA)" >&2; exit 1; }
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target bench_tokenizer >/dev/null
bench="$build/bench/bench_tokenizer"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$shared/tokenizers.tar.xz" -C "$work"

field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }  # field NAME "RESULT ..." -> value

echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')); threads=$threads reps=$reps"
echo "HF: $("$python" -c 'import tokenizers; print("tokenizers", tokenizers.__version__)')"
rows_out=()
for name in $only; do
  case "$name" in
    gpt2) src=(--gpt2 "$work/gpt2/encoder.json" "$work/gpt2/vocab.bpe") ;;
    smollm2) [ -s "$gguf" ] || "$root/scripts/fetch-model.sh"; src=(--tokenizer "$gguf") ;;
    *) src=(--tokenizer "$work/$name") ;;
  esac
  ours=$("$bench" --name "$name" "${src[@]}" --data "$data" --threads "$threads" --reps "$reps" \
         --ids_out "$work/$name.ours" | tee /dev/stderr | grep '^RESULT')
  hf1=$(TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 "$python" "$root/scripts/bench/bench_tokenizer_hf.py" \
        --name "$name" "${src[@]}" --data "$data" --reps "$reps" --ids_out "$work/$name.hf" 2>/dev/null | grep '^RESULT')
  hfn=$(TOKENIZERS_PARALLELISM=true RAYON_NUM_THREADS="$threads" "$python" "$root/scripts/bench/bench_tokenizer_hf.py" \
        --name "$name" "${src[@]}" --data "$data" --reps "$reps" 2>/dev/null | grep '^RESULT')
  differ=$(paste -d '\t' "$work/$name.ours" "$work/$name.hf" | awk -F '\t' '$1 != $2' | wc -l)
  rows_out+=("$name $(field tokens "$ours") $(field tokens "$hf1") $(field load_s "$ours") $(field load_s "$hf1") \
$(field t1_s "$ours") $(field t_s "$hf1") $(field tn_s "$ours") $(field t_s "$hfn") $differ \
$(field cold_s "$ours") $(field cold_s "$hf1")")
done

echo
echo "million tokens/s (GSM8K train, add_special_tokens=false; cold = first pass after loading, warm = best of $reps after it)"
printf '%s\n' "${rows_out[@]}" | awk -v n="$threads" '
  # fields: name tokens hf_tokens load load_hf t1 t1_hf tn tn_hf differing cold cold_hf
  BEGIN {
    printf "%-8s %8s | %13s | %-21s | %-21s | %-21s | %s\n", "", "tokens", "load s", \
           "1 thread, cold", "1 thread, warm", n " threads, warm", "rows"
    printf "%-8s %8s | %6s %6s | %6s %6s %7s | %6s %6s %7s | %6s %6s %7s | %s\n", "", "(ours)", "ours", "HF", \
           "ours", "HF", "ratio", "ours", "HF", "ratio", "ours", "HF", "ratio", "differing"
  }
  # million tokens per second, ours and HF, and the ratio ours / HF
  function cell(ours_s, hf_s) { return sprintf("%6.2f %6.2f %6.1fx", $2 / ours_s / 1e6, $3 / hf_s / 1e6, ($2 / ours_s) / ($3 / hf_s)) }
  { printf "%-8s %8d | %6.3f %6.3f | %s | %s | %s | %d%s\n", $1, $2, $4, $5, cell($11, $12), cell($6, $7), \
           cell($8, $9), $10, ($2 == $3 ? "" : " (token counts differ)") }'
