#!/usr/bin/env bash
# The README's first command: install, build, fetch the real SmolLM2-135M-Instruct model and run it.
# (Until the training engine lands, the main job loads the model and runs a forward pass with a greedy
# continuation; it becomes a LoRA fine-tuning run with before/after answers.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/fetch-model.sh"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
"$root/build/swift" info --model "$model"
# Token ids of the ChatML prompt (system: "You are a helpful AI assistant named SmolLM, trained by Hugging
# Face"; user: "What is the capital of France?"), made with Hugging Face tokenizers from the GGUF's own
# vocabulary; swift.cpp's tokenizer arrives with the text layer.
ids=1,9690,198,2683,359,253,5356,5646,11173,3365,3511,308,34519,28,7018,411,407,19712,8182,2,198,1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198
"$root/build/swift" forward --model "$model" --ids "$ids" --top_k 5 --max_new_tokens 24
