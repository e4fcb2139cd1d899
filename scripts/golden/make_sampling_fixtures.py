#!/usr/bin/env python3
"""Fixture for serve/sampling: transformers' logits processors (RepetitionPenalty, Temperature, TopK, TopP, in
generate()'s order) applied to random logits rows; writes tests/fixtures/sampling_processors.json.
Run from the repository root: python3 scripts/golden/make_sampling_fixtures.py"""
import json
import os

import torch
import transformers
from transformers.generation.logits_process import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = [
    dict(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.3),
    dict(temperature=0.7, top_k=5, top_p=1.0, repetition_penalty=1.0),
    dict(temperature=1.0, top_k=0, top_p=0.8, repetition_penalty=1.0),
    dict(temperature=0.6, top_k=20, top_p=0.9, repetition_penalty=1.1),
    dict(temperature=1.5, top_k=1, top_p=0.5, repetition_penalty=1.05),
]


def main():
    g = torch.Generator().manual_seed(3)
    out = {"transformers": transformers.__version__, "cases": []}
    for i, c in enumerate(CASES):
        logits = (torch.randn(1, 53, generator=g) * 3).float()
        context = torch.randint(0, 53, (1, 9), generator=g)
        procs = LogitsProcessorList()
        if c["repetition_penalty"] != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(c["repetition_penalty"]))
        if c["temperature"] != 1.0:
            procs.append(TemperatureLogitsWarper(c["temperature"]))
        if c["top_k"] > 0:
            procs.append(TopKLogitsWarper(c["top_k"]))
        if c["top_p"] < 1.0:
            procs.append(TopPLogitsWarper(c["top_p"]))
        processed = procs(context, logits.clone())[0]
        out["cases"].append(dict(params=c, logits=logits[0].tolist(), context=context[0].tolist(),
                                 processed=[None if v == float("-inf") else v for v in processed.tolist()],
                                 logprobs=torch.log_softmax(logits[0], -1).tolist()))
    with open(os.path.join(ROOT, "tests", "fixtures", "sampling_processors.json"), "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
