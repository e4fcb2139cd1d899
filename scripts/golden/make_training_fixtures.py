#!/usr/bin/env python3
"""Golden fixtures for TRAINING: loss, every gradient and 5-step training curves of LoRA (PEFT) and full
fine-tuning, computed by transformers + PEFT + torch in fp32 on the CPU, for the tiny models of the forward
fixtures (tests/fixtures/golden/<arch>/, made by make_tiny_models.py; reused, not copied).

For every case in CASES this writes tests/fixtures/training/<case>/:
  expected.safetensors   the batches, loss + gradients at the initial parameters, the training curves and the
                         final trainable parameters, with __metadata__ (hyper-parameters, versions, measured noise)
  adapter_init/          LoRA cases: the initial adapter exactly as PEFT's save_pretrained writes it
                         (adapter_config.json, adapter_model.safetensors): the C++ side starts from these weights
  adapter_final/         LoRA cases: the adapter after the 5 steps of run "accum1" (PEFT save_pretrained)
The layout, every tensor name, the loss normalisation, the optimizer and schedule formulas are documented in
scripts/golden/README.md ("Training fixtures"); the C++ tests are written against that description.

Checks made while generating (the script fails if one does not hold):
  - the packed batch (one row, position_ids restarting per sequence, no attention mask: transformers' packed-sequence
    path) gives the same losses / gradients / curves / final parameters as the same sequences as padded rows
    with an attention mask;
  - the manual loop (what the fixture defines) equals transformers' own Trainer (same optimizer, schedule, clipping,
    gradient accumulation with num_items_in_batch) on the same micro-batches;
  - fp32 vs fp64 of the same runs is recorded (the fp32 noise that sizes C++ tolerances);
  - every trainable tensor has a non-zero gradient (except lora_A when lora_B is zero: then exactly zero);
  - gradient clipping triggers in some steps and not in others of every run.

Run from the repository root:  python3 scripts/golden/make_training_fixtures.py   (see scripts/golden/README.md)
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile

# PEFT stores target_modules as a Python set and writes it to adapter_config.json in set order, which depends on
# the string hash seed: fix it (re-exec once) so reruns write identical files.
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import save_safetensors  # noqa: E402  (deterministic writer: sorted header, name order)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN_REL = os.path.join("tests", "fixtures", "golden")      # base models, relative to ROOT
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "training")

IGNORE = -100
STEPS = 5
WARMUP = 2
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.1
LR = {"lora": 1e-3, "full": 1e-4}
# Runs: name -> micro-batches per optimizer step. "accum1" uses batches 0..4 (one per step), "accum3" batches 0..14
# (step s: 3s, 3s+1, 3s+2).
RUNS = {"accum1": 1, "accum3": 3}
NUM_BATCHES = STEPS * max(RUNS.values())
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# Per base model (a directory of tests/fixtures/golden/): the seed of its micro-batches, shared by all its cases.
ARCHS = {
    "llama_gqa_llama3": dict(data_seed=3001),
    "qwen2_tied_1kv": dict(data_seed=3002),
    "qwen3_qknorm": dict(data_seed=3003),
    "mistral_sliding_window": dict(data_seed=3004),
}

# tuner "lora": r, alpha, rslora, target ("all-linear" as given to PEFT, or the explicit suffix list ms-swift
# writes), b_std (0: PEFT's default init, lora_B = 0; > 0: lora_B ~ N(0, b_std) set after creation).
CASES = [
    dict(name="llama_gqa_llama3_lora", base="llama_gqa_llama3", tuner="lora", r=8, alpha=16, rslora=False,
         target="all-linear", b_std=0.0, seed=4001,
         description="LoRA r=8 alpha=16 (scaling 2) on all linear layers, PEFT default init (lora_B = 0: lora_A "
                     "gradients are exactly zero until lora_B moves)"),
    dict(name="llama_gqa_llama3_lora_randb", base="llama_gqa_llama3", tuner="lora", r=8, alpha=16, rslora=False,
         target="all-linear", b_std=0.05, seed=4002,
         description="LoRA r=8 alpha=16 (scaling 2), lora_B ~ N(0, 0.05) so every gradient is non-trivial"),
    dict(name="llama_gqa_llama3_full", base="llama_gqa_llama3", tuner="full", seed=4003,
         description="full fine-tuning, untied LM head"),
    dict(name="qwen2_tied_1kv_lora_randb", base="qwen2_tied_1kv", tuner="lora", r=4, alpha=16, rslora=False,
         target="all-linear", b_std=0.05, seed=4004,
         description="LoRA r=4 alpha=16 (scaling 4), lora_B ~ N(0, 0.05); q/k/v biases frozen"),
    dict(name="qwen2_tied_1kv_full", base="qwen2_tied_1kv", tuner="full", seed=4005,
         description="full fine-tuning with TIED embeddings: one parameter model.embed_tokens.weight, its gradient "
                     "is the sum of the embedding and LM-head uses; q/k/v biases trained without weight decay"),
    dict(name="qwen3_qknorm_lora_randb", base="qwen3_qknorm", tuner="lora", r=8, alpha=32, rslora=False,
         target="all-linear", b_std=0.05, seed=4006,
         description="LoRA r=8 alpha=32 (scaling 4, ms-swift's defaults), lora_B ~ N(0, 0.05), 3 layers"),
    dict(name="qwen3_qknorm_lora_rslora", base="qwen3_qknorm", tuner="lora", r=4, alpha=8, rslora=True,
         target="all-linear", b_std=0.05, seed=4007,
         description="rsLoRA r=4 alpha=8: scaling alpha/sqrt(r) = 4 (plain LoRA would give 2), "
                     "lora_B ~ N(0, 0.05)"),
    dict(name="qwen3_qknorm_full", base="qwen3_qknorm", tuner="full", seed=4008,
         description="full fine-tuning, q_norm/k_norm trained without weight decay"),
    dict(name="mistral_sliding_window_lora_randb", base="mistral_sliding_window", tuner="lora", r=8, alpha=32,
         rslora=False, target=ALL_LINEAR, b_std=0.05, seed=4010,
         description="LoRA r=8 alpha=32 (scaling 4), target_modules given as the explicit suffix list "
                     "(q_proj ... down_proj, as ms-swift resolves all-linear), lora_B ~ N(0, 0.05); sliding window 5"),
    # DoRA, modules_to_save, padding_idx (cases added with the DoRA / modules_to_save work).
    dict(name="llama_gqa_llama3_dora_randb", base="llama_gqa_llama3", tuner="lora", r=8, alpha=16, rslora=False,
         target="all-linear", b_std=0.05, seed=4011, dora=True,
         description="DoRA r=8 alpha=16 (scaling 2): magnitude = ||W||_row at creation (lora_B = 0), then lora_B ~ "
                     "N(0, 0.05), so the magnitude / weight-norm ratio differs from 1 and every DoRA term matters"),
    dict(name="qwen2_tied_1kv_dora", base="qwen2_tied_1kv", tuner="lora", r=4, alpha=16, rslora=False,
         target="all-linear", b_std=0.0, seed=4012, dora=True,
         description="DoRA r=4 alpha=16 (scaling 4), PEFT default init (lora_B = 0: g = 1 at the start, lora_A "
                     "gradients exactly zero, magnitude gradients not); q/k/v biases frozen (DoRA leaves the bias out "
                     "of the rescaled part)"),
    dict(name="qwen2_tied_1kv_lora_mts", base="qwen2_tied_1kv", tuner="lora", r=4, alpha=16, rslora=False,
         target="all-linear", b_std=0.05, seed=4013, modules_to_save=["embed_tokens", "lm_head"],
         description="LoRA r=4 + modules_to_save embed_tokens and lm_head on a TIED model: PEFT trains two "
                     "independent copies (ensure_weight_tying false), saved as base_model.model.model.embed_tokens."
                     "weight and base_model.model.lm_head.weight"),
    dict(name="llama_gqa_llama3_dora_mts_embed", base="llama_gqa_llama3", tuner="lora", r=4, alpha=8, rslora=False,
         target="all-linear", b_std=0.05, seed=4014, dora=True, modules_to_save=["embed_tokens"], pad_token_id="auto",
         description="DoRA r=4 + modules_to_save embed_tokens only (the untied LM head stays frozen), with "
                     "pad_token_id set to an id of batch 00: the copy keeps nn.Embedding's padding_idx"),
    dict(name="qwen2_tied_1kv_full_pad", base="qwen2_tied_1kv", tuner="full", seed=4015, pad_token_id="auto",
         description="full fine-tuning, tied embeddings, config pad_token_id = an id that occurs in batch 00: "
                     "nn.Embedding(padding_idx) gives its row no lookup gradient, the tied LM head still does"),
]

# Tolerances of the generator's own consistency checks (fp32 on both sides, different batch shapes / code paths).
PACKED_VS_PADDED_TOL = 2e-5     # losses, grad norms (relative) and final parameters (absolute)
TRAINER_VS_MANUAL_TOL = 2e-5


# ---------------------------------------------------------------------------------------------- data

def make_batches(arch, vocab):
    """NUM_BATCHES micro-batches of 2-3 sequences each; every sequence is (ids, labels) with labels = ids on the
    tokens that carry loss and IGNORE elsewhere, shaped like a chat loss mask: a masked prompt first (>= 1 token, so
    labels[0] is always IGNORE), then an answer, sometimes a second masked user turn and a second answer. Batch 3
    holds one sequence with no loss token at all (a prompt-only sample)."""
    gen = torch.Generator().manual_seed(ARCHS[arch]["data_seed"])

    def rint(lo, hi):  # inclusive
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    batches = []
    for b in range(NUM_BATCHES):
        seqs = []
        for s in range(rint(2, 3)):
            n = rint(5, 21)
            ids = torch.randint(0, vocab, (n,), generator=gen).tolist()
            mask = [False] * n
            if not (b == 3 and s == 1):
                p1 = rint(1, max(1, n // 3))
                if n >= 12 and rint(0, 1):
                    a1 = rint(p1 + 1, p1 + (n - p1) // 3)
                    p2 = rint(a1 + 1, a1 + 2)
                    spans = [(p1, a1), (p2, n)]
                else:
                    spans = [(p1, n)]
                for lo, hi in spans:
                    for i in range(lo, hi):
                        mask[i] = True
            labels = [t if m else IGNORE for t, m in zip(ids, mask)]
            seqs.append((ids, labels))
        batches.append(seqs)
    return batches


def targets_of(labels):
    """Per-sequence shifted labels: target[t] = labels[t + 1], IGNORE at the last token."""
    return labels[1:] + [IGNORE]


def count_tokens(seqs):
    return sum(sum(1 for t in targets_of(lab) if t != IGNORE) for _, lab in seqs)


def packed_inputs(seqs):
    """One row: the sequences concatenated, position_ids restarting at 0 per sequence, NO attention mask, so that
    transformers builds a block-diagonal causal mask from the position resets (masking_utils.
    find_packed_sequence_indices). labels[0] of every sequence is IGNORE, so transformers' shift over the whole row
    never makes one sequence predict the next one's first token."""
    ids = [t for s, _ in seqs for t in s]
    pos = [p for s, _ in seqs for p in range(len(s))]
    lab = [t for _, l in seqs for t in l]
    return dict(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos]), labels=torch.tensor([lab]))


def padded_inputs(seqs):
    """One row per sequence, right-padded to the longest with token 0, attention_mask 0 and label IGNORE on pads."""
    width = max(len(s) for s, _ in seqs)
    ids, pos, lab, att = [], [], [], []
    for s, l in seqs:
        pad = width - len(s)
        ids.append(s + [0] * pad)
        pos.append(list(range(width)))
        lab.append(l + [IGNORE] * pad)
        att.append([1] * len(s) + [0] * pad)
    return dict(input_ids=torch.tensor(ids), position_ids=torch.tensor(pos), labels=torch.tensor(lab),
                attention_mask=torch.tensor(att))


def batch_tensors(k, seqs):
    """The packed micro-batch as stored in the fixture (all I32)."""
    ids = [t for s, _ in seqs for t in s]
    cu = [0]
    for s, _ in seqs:
        cu.append(cu[-1] + len(s))
    return {
        f"batch.{k:02d}.input_ids": torch.tensor(ids, dtype=torch.int32),
        f"batch.{k:02d}.positions": torch.tensor([p for s, _ in seqs for p in range(len(s))], dtype=torch.int32),
        f"batch.{k:02d}.cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        f"batch.{k:02d}.labels": torch.tensor([t for _, l in seqs for t in l], dtype=torch.int32),
        f"batch.{k:02d}.targets": torch.tensor([t for _, l in seqs for t in targets_of(l)], dtype=torch.int32),
    }


# ---------------------------------------------------------------------------------------------- models

def load_base(base, dtype, pad_token_id=None):
    # Loaded through the path relative to the repository root (the cwd), so PEFT writes that relative path as
    # base_model_name_or_path in adapter_config.json (machine independent). pad_token_id overrides config.json before
    # the model is built (transformers passes it to nn.Embedding as padding_idx).
    extra = {} if pad_token_id is None else {"pad_token_id": pad_token_id}
    model = AutoModelForCausalLM.from_pretrained(os.path.join(GOLDEN_REL, base), dtype=dtype,
                                                 attn_implementation="eager", **extra)
    model.config.use_cache = False  # with a cache object transformers disables its packed-sequence mask
    return model


def build(case, dtype=torch.float32, adapter_dir=None):
    """The case's trainable model and its trainable parameters [(fixture name, parameter)], in a fixed order.
    LoRA: from adapter_dir when given (the saved initial adapter), otherwise created with the case's seed."""
    model = load_base(case["base"], dtype, case.get("pad"))
    if case["tuner"] == "full":
        model.train()
        named = [(n, p) for n, p in model.named_parameters()]  # tied weights appear once (embed_tokens)
        return model, named
    if adapter_dir is not None:
        model = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
        model = model.to(dtype)
    else:
        config = LoraConfig(r=case["r"], lora_alpha=case["alpha"], use_rslora=case["rslora"], lora_dropout=0.0,
                            target_modules=case["target"], bias="none", task_type="CAUSAL_LM",
                            use_dora=case.get("dora", False), modules_to_save=case.get("modules_to_save"))
        torch.manual_seed(case["seed"])  # lora_A: kaiming_uniform_(a=sqrt(5)) from the global generator
        model = get_peft_model(model, config)
        if case["b_std"] > 0:
            gen = torch.Generator().manual_seed(case["seed"] + 1)
            with torch.no_grad():
                for n, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
                    if ".lora_B." in n:
                        p.copy_(case["b_std"] * torch.randn(p.shape, generator=gen, dtype=torch.float32))
    model.train()
    named = [(peft_saved_name(n), p) for n, p in model.named_parameters() if p.requires_grad]
    return model, named


def peft_saved_name(name):
    """PEFT parameter name -> the name PEFT saves (adapter name 'default' dropped; DoRA's magnitude saved without
    '.default.weight'; a modules_to_save copy saved under its module's own name)."""
    name = name.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")
    name = name.replace(".lora_magnitude_vector.default.weight", ".lora_magnitude_vector")
    return name.replace(".modules_to_save.default.", ".")


def decay_names(model, named):
    """transformers.Trainer's weight-decay split (Trainer.get_decay_parameter_names): no decay for parameters whose
    name matches bias / layernorm / rmsnorm / norm, or inside nn.LayerNorm modules."""
    trainer = transformers.Trainer.__new__(transformers.Trainer)
    decay = set(trainer.get_decay_parameter_names(model))
    ids = {id(p) for n, p in model.named_parameters() if n in decay}
    return {n for n, p in named if id(p) in ids}


def make_optimizer(model, named, lr):
    decay = decay_names(model, named)
    groups = [{"params": [p for n, p in named if n in decay], "weight_decay": WEIGHT_DECAY},
              {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    opt = torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, foreach=False)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=WARMUP, num_training_steps=STEPS)
    return opt, sched, decay


def forward_loss(model, seqs, form, num_items):
    """transformers' own loss (labels + num_items_in_batch: sum of CE over valid targets / num_items). In fp64 the
    same loss is computed here instead, because transformers' ForCausalLMLoss upcasts logits to fp32 only, which
    would round the fp64 reference to fp32 at the logits."""
    inputs = packed_inputs(seqs) if form == "packed" else padded_inputs(seqs)
    if next(model.parameters()).dtype != torch.float64:
        return model(**inputs, use_cache=False, num_items_in_batch=torch.tensor(num_items)).loss
    labels = inputs.pop("labels")
    logits = model(**inputs, use_cache=False).logits
    shifted = torch.nn.functional.pad(labels, (0, 1), value=IGNORE)[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                                           ignore_index=IGNORE, reduction="sum")
    return ce / num_items


# ---------------------------------------------------------------------------------------------- runs

def gradients(case, batches, form, dtype=torch.float32, adapter_dir=None):
    """Loss (mean over the valid targets of batch 0) and the gradient of every trainable parameter."""
    model, named = build(case, dtype, adapter_dir)
    n = count_tokens(batches[0])
    loss = forward_loss(model, batches[0], form, n)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in named}
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())))
    return float(loss.detach()), n, grads, norm


def train(case, batches, accum, form, max_norm, dtype=torch.float32, adapter_dir=None, save_dir=None):
    """The reference loop (what transformers.Trainer does with gradient_accumulation_steps=accum): per step, the
    loss of each micro-batch is sum(CE over its valid targets) / N where N counts the valid targets of ALL the
    step's micro-batches; backward of each; clip_grad_norm_(max_norm); AdamW step; scheduler step; zero grads."""
    model, named = build(case, dtype, adapter_dir)
    params = [p for _, p in named]
    opt, sched, _ = make_optimizer(model, named, LR[case["tuner"]])
    rec = dict(loss=[], grad_norm=[], lr=[], num_tokens=[])
    for step in range(STEPS):
        mbs = batches[step * accum:(step + 1) * accum]
        n = sum(count_tokens(mb) for mb in mbs)
        lr = opt.param_groups[0]["lr"]
        total = torch.zeros((), dtype=dtype)
        for mb in mbs:
            loss = forward_loss(model, mb, form, n)
            loss.backward()
            total += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        rec["loss"].append(float(total))
        rec["grad_norm"].append(float(norm))
        rec["lr"].append(lr)
        rec["num_tokens"].append(n)
    with torch.no_grad():
        rec["final_loss"] = float(forward_loss(model, batches[0], form, count_tokens(batches[0])))
    rec["final"] = {name: p.detach().clone() for name, p in named}
    if save_dir is not None:
        save_adapter(model, save_dir)
    return rec


def trainer_run(case, batches, accum, max_norm, adapter_dir):
    """The same run through transformers.Trainer (packed micro-batches, sequential order): losses, grad norms,
    learning rates as logged, and the final trainable parameters."""
    model, named = build(case, torch.float32, adapter_dir)

    class Batches(torch.utils.data.Dataset):
        def __len__(self):
            return STEPS * accum

        def __getitem__(self, i):
            return packed_inputs(batches[i])

    class SequentialTrainer(transformers.Trainer):
        def _get_train_sampler(self, *args, **kwargs):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    with tempfile.TemporaryDirectory() as tmp:
        args = transformers.TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=1, gradient_accumulation_steps=accum,
            learning_rate=LR[case["tuner"]], weight_decay=WEIGHT_DECAY, adam_beta1=BETAS[0], adam_beta2=BETAS[1],
            adam_epsilon=EPS, max_grad_norm=max_norm, lr_scheduler_type="cosine", warmup_steps=WARMUP,
            max_steps=STEPS, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
            optim="adamw_torch", dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=True,
            seed=case["seed"])
        trainer = SequentialTrainer(model=model, args=args, train_dataset=Batches(),
                                    data_collator=lambda items: items[0])
        trainer.train()
        logs = [h for h in trainer.state.log_history if "loss" in h and "grad_norm" in h]
    assert len(logs) == STEPS, logs
    return dict(loss=[h["loss"] for h in logs], grad_norm=[float(h["grad_norm"]) for h in logs],
                lr=[h["learning_rate"] for h in logs], final={n: p.detach().clone() for n, p in named})


def save_adapter(model, out_dir):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    readme = os.path.join(out_dir, "README.md")  # PEFT's model card: not part of the adapter format
    if os.path.exists(readme):
        os.remove(readme)


# ---------------------------------------------------------------------------------------------- helpers

def max_abs_dict(a, b):
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def delta_rel_l2(actual, expected, init):
    """|| (actual - init) - (expected - init) || / || expected - init || over all trainable parameters together."""
    num = sum(float(((actual[k].double() - expected[k].double()) ** 2).sum()) for k in init)
    den = sum(float(((expected[k].double() - init[k].double()) ** 2).sum()) for k in init)
    return math.sqrt(num / den)


def rel(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def fmt(x):
    return f"{x:.3e}"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def choose_max_norm(case, batches, accum, adapter_dir):
    """A max_grad_norm for the run such that clipping triggers in some steps and not in others. The pre-clip norms
    of these random tiny models are 1.5-11, so ms-swift's default 1.0 would clip every step: take a value with two
    significant digits between two neighbouring norms of the unclipped run (middle ones first), and keep it if the
    clipped run still mixes clipped and unclipped steps with every norm at least 1% away from the threshold (fp32
    noise cannot flip a branch)."""
    norms = sorted(train(case, batches, accum, "packed", math.inf, adapter_dir=adapter_dir)["grad_norm"])
    for i in (1, 2, 0, 3):
        candidate = float(f"{(norms[i] + norms[i + 1]) / 2:.2g}")
        clipped_norms = train(case, batches, accum, "packed", candidate, adapter_dir=adapter_dir)["grad_norm"]
        clipped = [g > candidate for g in clipped_norms]
        margin = min(abs(g - candidate) / candidate for g in clipped_norms)
        if any(clipped) and not all(clipped) and margin > 0.01:
            return candidate
    raise AssertionError(f"{case['name']}: no max_grad_norm gives clipped and unclipped steps (norms {norms})")


def initial_params(case, adapter_dir):
    _, named = build(case, adapter_dir=adapter_dir)
    return {n: p.detach().clone() for n, p in named}


# ---------------------------------------------------------------------------------------------- one case

def make_case(case, out_root):
    name, base, tuner = case["name"], case["base"], case["tuner"]
    case_dir = os.path.join(out_root, name)
    if os.path.isdir(case_dir):
        shutil.rmtree(case_dir)
    os.makedirs(case_dir)
    base_dir = os.path.join(GOLDEN_REL, base)
    with open(os.path.join(base_dir, "config.json")) as f:
        base_config = json.load(f)
    batches = make_batches(base, base_config["vocab_size"])
    if case.get("pad_token_id") == "auto":
        # The most frequent non-zero id of batch 00 (smallest on ties): it occurs in the gradient batch.
        ids = [t for seq, _ in batches[0] for t in seq if t != 0]
        case["pad"] = min(set(ids), key=lambda t: (-ids.count(t), t))

    adapter_init = None
    if tuner == "lora":
        model, named = build(case)
        adapter_init = os.path.join(case_dir, "adapter_init")
        save_adapter(model, adapter_init)
        saved = set(get_peft_model_state_dict(model).keys())
        assert saved == {n for n, _ in named}, f"{name}: PEFT saved names differ from the mapped parameter names"
        scaling = {m.scaling["default"] for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)}
        expected_scaling = case["alpha"] / (math.sqrt(case["r"]) if case["rslora"] else case["r"])
        assert scaling == {expected_scaling}, (scaling, expected_scaling)
        targeted = sorted({n.split(".")[-1] for n, m in model.named_modules()
                           if isinstance(m, peft.tuners.lora.LoraLayer)})
        assert targeted == sorted(ALL_LINEAR), f"{name}: targeted {targeted}"
        if case.get("dora"):
            assert sum(".lora_magnitude_vector" in n for n, _ in named) == len(named) // 3, f"{name}: DoRA magnitudes"
        for module in case.get("modules_to_save") or []:
            assert any(n.endswith(module + ".weight") and ".lora_" not in n for n, _ in named), f"{name}: {module}"
        del model

    # Everything below starts from the saved adapter (LoRA) or the saved base model (full): exactly what is on disk.
    loss, n0, grads, gnorm = gradients(case, batches, "packed", adapter_dir=adapter_init)
    loss_p, n0_p, grads_p, _ = gradients(case, batches, "padded", adapter_dir=adapter_init)
    loss64, _, grads64, _ = gradients(case, batches, "packed", torch.float64, adapter_init)
    assert n0 == n0_p and abs(loss - loss_p) < PACKED_VS_PADDED_TOL * abs(loss), (loss, loss_p)
    grad_padded_diff = max_abs_dict(grads, grads_p)
    assert grad_padded_diff < PACKED_VS_PADDED_TOL, f"{name}: packed vs padded gradients {grad_padded_diff}"
    grad_fp64_diff = max_abs_dict(grads, grads64)
    grad_fp64_rel = max(float((grads[k].double() - grads64[k]).norm() / grads64[k].norm().clamp_min(1e-30))
                        for k in grads)
    zero = sorted(k for k, g in grads.items() if not bool(g.abs().max() > 0))
    if tuner == "lora" and case["b_std"] == 0:
        assert zero == sorted(k for k in grads if ".lora_A." in k), f"{name}: zero gradients {zero}"
    else:
        assert not zero, f"{name}: parameters with zero gradient {zero}"

    pad_row_change = None
    if case.get("pad") is not None:
        # The feature is exercised: without padding_idx the pad row's gradient differs by far more than the C++
        # tolerance (tied: only the LM-head part remains; untied: the row becomes exactly zero).
        _, _, grads_nopad, _ = gradients(dict(case, pad=None), batches, "packed", adapter_dir=adapter_init)
        embed = [k for k in grads if k.endswith("embed_tokens.weight")]
        assert len(embed) == 1, embed
        row = case["pad"]
        pad_row_change = float((grads[embed[0]][row] - grads_nopad[embed[0]][row]).abs().max())
        assert pad_row_change > 1e-3, f"{name}: padding_idx changes the pad row by {pad_row_change} only"
        if not base_config.get("tie_word_embeddings") or tuner == "lora":
            assert not bool(grads[embed[0]][row].abs().max() > 0), f"{name}: untied pad row must get no gradient"

    init = initial_params(case, adapter_init)
    runs, checks, max_norms = {}, {}, {}
    for run, accum in RUNS.items():
        max_norm = max_norms[run] = choose_max_norm(case, batches, accum, adapter_init)
        final_dir = os.path.join(case_dir, "adapter_final") if (tuner == "lora" and run == "accum1") else None
        packed = train(case, batches, accum, "packed", max_norm, adapter_dir=adapter_init, save_dir=final_dir)
        padded = train(case, batches, accum, "padded", max_norm, adapter_dir=adapter_init)
        fp64 = train(case, batches, accum, "packed", max_norm, torch.float64, adapter_init)
        via_trainer = trainer_run(case, batches, accum, max_norm, adapter_init)
        assert packed["num_tokens"] == padded["num_tokens"]
        c = dict(
            padded_loss_rel=rel(padded["loss"], packed["loss"]),
            padded_grad_norm_rel=rel(padded["grad_norm"], packed["grad_norm"]),
            padded_final_max_abs=max_abs_dict(padded["final"], packed["final"]),
            trainer_loss_rel=rel(via_trainer["loss"], packed["loss"]),
            trainer_grad_norm_rel=rel(via_trainer["grad_norm"], packed["grad_norm"]),
            trainer_lr_max_abs=max(abs(a - b) for a, b in zip(via_trainer["lr"], packed["lr"])),
            trainer_final_max_abs=max_abs_dict(via_trainer["final"], packed["final"]),
            fp64_loss_rel=rel(packed["loss"], fp64["loss"]),
            fp64_grad_norm_rel=rel(packed["grad_norm"], fp64["grad_norm"]),
            fp64_final_loss_rel=rel([packed["final_loss"]], [fp64["final_loss"]]),
            fp64_final_max_abs=max_abs_dict(packed["final"], fp64["final"]),
            fp64_final_delta_rel_l2=delta_rel_l2(packed["final"], fp64["final"], init),
            padded_final_delta_rel_l2=delta_rel_l2(padded["final"], packed["final"], init),
            final_delta_max_abs=max(float((packed["final"][k].double() - p.double()).abs().max())
                                    for k, p in init.items()),
        )
        for key in ("padded_loss_rel", "padded_grad_norm_rel", "padded_final_max_abs"):
            assert c[key] < PACKED_VS_PADDED_TOL, f"{name} {run}: packed vs padded {key} = {c[key]}"
        for key in ("trainer_loss_rel", "trainer_grad_norm_rel", "trainer_lr_max_abs", "trainer_final_max_abs"):
            assert c[key] < TRAINER_VS_MANUAL_TOL, f"{name} {run}: Trainer vs manual loop {key} = {c[key]}"
        clipped = [g > max_norm for g in packed["grad_norm"]]
        assert any(clipped) and not all(clipped), f"{name} {run}: clipping pattern {clipped} {packed['grad_norm']}"
        runs[run] = dict(packed=packed, padded=padded)
        checks[run] = c

    # ---- write expected.safetensors
    tensors = {}
    for k, seqs in enumerate(batches):
        tensors.update(batch_tensors(k, seqs))
    tensors["grad_batch.loss"] = torch.tensor([loss], dtype=torch.float32)
    tensors["grad_batch.num_tokens"] = torch.tensor([n0], dtype=torch.int32)
    tensors["grad_batch.grad_norm"] = torch.tensor([gnorm], dtype=torch.float32)
    for k, g in grads.items():
        tensors[f"grad.{k}"] = g.to(torch.float32).contiguous()
    for run in RUNS:
        for form in ("packed", "padded"):
            r = runs[run][form]
            tensors[f"run.{run}.{form}.loss"] = torch.tensor(r["loss"], dtype=torch.float32)
            tensors[f"run.{run}.{form}.grad_norm"] = torch.tensor(r["grad_norm"], dtype=torch.float32)
            tensors[f"run.{run}.{form}.final_loss"] = torch.tensor([r["final_loss"]], dtype=torch.float32)
        r = runs[run]["packed"]
        tensors[f"run.{run}.lr"] = torch.tensor(r["lr"], dtype=torch.float32)
        tensors[f"run.{run}.num_tokens"] = torch.tensor(r["num_tokens"], dtype=torch.int32)
        tensors[f"run.{run}.clipped"] = torch.tensor([int(g > max_norms[run]) for g in r["grad_norm"]],
                                                     dtype=torch.int32)
        tensors[f"run.{run}.max_grad_norm"] = torch.tensor([max_norms[run]], dtype=torch.float32)
        if tuner == "lora" and run == "accum1":
            # Stored once: adapter_final/adapter_model.safetensors holds exactly these tensors.
            saved = load_file(os.path.join(case_dir, "adapter_final", "adapter_model.safetensors"))
            assert saved.keys() == r["final"].keys() and all(torch.equal(saved[k], r["final"][k]) for k in saved)
            continue
        for k, p in r["final"].items():
            tensors[f"final.{run}.{k}"] = p.to(torch.float32).contiguous()

    if tuner == "lora" and (case.get("dora") or case.get("modules_to_save")):
        # Inference with the trained adapter (PeftModel.from_pretrained, eval mode): logits of batch 00, packed.
        infer = peft.PeftModel.from_pretrained(load_base(base, torch.float32, case.get("pad")),
                                               os.path.join(case_dir, "adapter_final"))
        infer.eval()
        with torch.no_grad():
            inputs = packed_inputs(batches[0])
            inputs.pop("labels")
            tensors["infer.logits"] = infer(**inputs, use_cache=False).logits[0].to(torch.float32).contiguous()
        del infer

    model, named = build(case, adapter_dir=adapter_init)
    no_decay = sorted(n for n, _ in named if n not in decay_names(model, named))
    del model
    lr = LR[tuner]
    metadata = {
        "case": name,
        "description": case["description"],
        "arch": base_config["model_type"],
        "tuner": tuner,
        "base_model": base_dir.replace(os.sep, "/"),
        "base_model_sha256": sha256(os.path.join(base_dir, "model.safetensors")),
        "base_config_sha256": sha256(os.path.join(base_dir, "config.json")),
        "num_batches": str(NUM_BATCHES),
        "runs": json.dumps(RUNS),
        "steps": str(STEPS),
        "optimizer": "torch.optim.AdamW(foreach=False)",
        "lr": repr(lr),
        "betas": json.dumps(list(BETAS)),
        "eps": repr(EPS),
        "weight_decay": repr(WEIGHT_DECAY),
        "no_weight_decay": json.dumps(no_decay),
        "schedule": f"cosine with warmup: warmup_steps={WARMUP}, num_training_steps={STEPS}, num_cycles=0.5",
        "lr_per_step": json.dumps(runs["accum1"]["packed"]["lr"]),
        "max_grad_norm": json.dumps(max_norms),
        "clip_eps": "1e-6",
        "trainable_tensors": str(len(grads)),
        "trainable_numel": str(sum(g.numel() for g in grads.values())),
        "grad_batch_loss_repr": repr(loss),
        "grad_fp32_vs_fp64_max_abs": fmt(grad_fp64_diff),
        "grad_fp32_vs_fp64_max_rel_l2": fmt(grad_fp64_rel),
        "grad_packed_vs_padded_max_abs": fmt(grad_padded_diff),
        "grad_abs_max": fmt(max(float(g.abs().max()) for g in grads.values())),
        "grad_batch_loss_fp32_vs_fp64_rel": fmt(abs(loss - loss64) / abs(loss64)),
        "reference": "transformers + PEFT, fp32, CPU, eager attention, packed batches (one row, position_ids "
                     "restarting, no attention mask); see scripts/golden/README.md",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "peft_version": peft.__version__,
    }
    for run, c in checks.items():
        for key, value in c.items():
            metadata[f"{run}.{key}"] = fmt(value)
    if tuner == "lora":
        metadata.update({
            "lora_r": str(case["r"]), "lora_alpha": str(case["alpha"]), "use_rslora": str(case["rslora"]).lower(),
            "lora_scaling": repr(case["alpha"] / (math.sqrt(case["r"]) if case["rslora"] else case["r"])),
            "lora_dropout": "0.0", "target_modules": json.dumps(case["target"]),
            "lora_B_init": "zeros (PEFT default)" if case["b_std"] == 0 else f"normal(0, {case['b_std']})",
        })
        if case.get("dora"):
            metadata["use_dora"] = "true"
        if case.get("modules_to_save"):
            metadata["modules_to_save"] = json.dumps(case["modules_to_save"])
    if case.get("pad") is not None:
        metadata["pad_token_id"] = str(case["pad"])
        metadata["pad_row_grad_change"] = fmt(pad_row_change)
    save_safetensors(tensors, os.path.join(case_dir, "expected.safetensors"), metadata)

    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(case_dir) for f in fs)
    a1, a3 = runs["accum1"]["packed"], runs["accum3"]["packed"]
    print(f"{name:36s} loss0={loss:.4f} N0={n0:2d} |g|={gnorm:.3f} max_norm={list(max_norms.values())} "
          f"accum1 loss={[round(x, 4) for x in a1['loss']]} gn={[round(x, 3) for x in a1['grad_norm']]} "
          f"accum3 gn={[round(x, 3) for x in a3['grad_norm']]} fp64 final={checks['accum1']['fp64_final_max_abs']:.1e}"
          f"/{checks['accum3']['fp64_final_max_abs']:.1e} trainer={checks['accum3']['trainer_final_max_abs']:.1e} "
          f"{size / 1024:.0f} KiB")
    return size


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=OUT_DIR, help="output root (default: tests/fixtures/training)")
    parser.add_argument("--only", nargs="*", help="case names to (re)generate; default all")
    args = parser.parse_args()

    os.chdir(ROOT)
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # reproducible summation order
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for case in CASES:
        if args.only and case["name"] not in args.only:
            continue
        total += make_case(case, args.out)
    print(f"total {total / 1024:.0f} KiB in {args.out}")


if __name__ == "__main__":
    main()
