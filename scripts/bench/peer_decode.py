#!/usr/bin/env python3
"""The peer of bench_decode: Hugging Face transformers generate() on the same shapes (development only).

Random weights of the architecture in config.json (bf16, sdpa attention, transformers' own init), batch 1, a random
prompt, greedy decoding with the KV cache (do_sample=False, min_new_tokens = max_new_tokens so every run generates
the same count). Times as bench_decode counts them: prefill = from the call to the first new token (a stopping
criterion that synchronises the device runs after each new token), decode = the remaining new_tokens - 1 tokens.
Medians over the timed runs; prints one JSON line with bench_decode's fields.

  python3 scripts/bench/peer_decode.py --config bench/configs/qwen2.5-7b.json [--prompt 512] [--new-tokens 128]
      [--runs 3 --warmup 1]
"""
import argparse
import json
import statistics
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, StoppingCriteria, StoppingCriteriaList

    with open(args.config) as fh:
        cfg = AutoConfig.for_model(**json.load(fh))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    gen = torch.Generator(device="cuda").manual_seed(7)
    ids = torch.randint(0, cfg.vocab_size, (1, args.prompt), device="cuda", generator=gen)
    mask = torch.ones_like(ids)

    class TokenClock(StoppingCriteria):
        """Records when each new token exists (after a device synchronisation); never stops generation."""

        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores, **kwargs):
            torch.cuda.synchronize()
            self.times.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    prefill, decode = [], []
    out = None
    for run in range(args.warmup + args.runs):
        if run == args.warmup:
            torch.cuda.reset_peak_memory_stats()
        clock = TokenClock()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=args.new_tokens,
                                 min_new_tokens=args.new_tokens, use_cache=True, pad_token_id=0,
                                 stopping_criteria=StoppingCriteriaList([clock]))
        torch.cuda.synchronize()
        t_end = time.perf_counter()
        assert out.shape[1] == args.prompt + args.new_tokens, out.shape
        if len(clock.times) == args.new_tokens:
            p, d = clock.times[0] - t0, clock.times[-1] - clock.times[0]
        else:  # the criterion was not called once per token: time the prefill alone, decode = the rest
            print(f"stopping criterion called {len(clock.times)} times for {args.new_tokens} tokens; timing the "
                  "prefill as a separate forward", file=sys.stderr)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask, use_cache=True)
            torch.cuda.synchronize()
            p = time.perf_counter() - t1
            d = (t_end - t0) - p
        print(f"run {run}: prefill {p:.4f} s, decode {d:.4f} s ({(args.new_tokens - 1) / d:.1f} tokens/s)"
              + (" (warm-up)" if run < args.warmup else ""), flush=True, file=sys.stderr)
        if run >= args.warmup:
            prefill.append(p)
            decode.append(d)
    p, d = statistics.median(prefill), statistics.median(decode)
    print(json.dumps({
        "impl": f"transformers {transformers.__version__} generate (torch {torch.__version__})",
        "config": args.config, "device": "cuda:0", "dtype": "bfloat16", "prompt": args.prompt,
        "new_tokens": args.new_tokens, "prefill_s": round(p, 4), "prefill_tokens_per_s": round(args.prompt / p, 1),
        "decode_tokens_per_s": round((args.new_tokens - 1) / d, 1),
        "ms_per_token": round(1e3 * d / (args.new_tokens - 1), 3), "total_s": round(p + d, 4),
        "e2e_tokens_per_s": round(args.new_tokens / (p + d), 1),
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "first_ids": out[0, args.prompt:args.prompt + 8].tolist()}), flush=True)


if __name__ == "__main__":
    main()
