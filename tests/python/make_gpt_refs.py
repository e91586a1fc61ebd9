#!/usr/bin/env python3
"""Model-level reference data for the decoder-only (GPT-2 style) model: tests/python/gpt_model.py.

Usage: /usr/bin/python3 tests/python/make_gpt_refs.py --out DIR

Two models (MODELS below), both V 53, D 32, H 4, L 2, d_ff 64, max_seq_length 24, dropout 0,
pad_id -1 (none), bos_id 1, eos_id 2:
  gpt_small     learned positions, tanh GELU, lm_head tied to the token embedding, eps 1e-5
  gpt_variant   sinusoidal positions, erf GELU, untied lm_head, eps 1e-6

Writes, for each <name> (all float tensors float32, ids int32; deterministic, byte-identical
across runs):

  DIR/<name>/config.json        the decoder-only config (architecture "decoder-only")
  DIR/<name>/model.safetensors  the parameters, under the model's full state_dict() keys: a tied
                                model holds the shared matrix under both token_embedding.weight and
                                lm_head.weight (equal values); a sinusoidal model holds the
                                positional_encoding.pe buffer (1, 24, 32)
  DIR/<name>_batch.safetensors
      ids (3, 17) int32        random ids in [0, 53), no padding
      logits (3, 16, 53)       model(ids[:, :-1]) at the initial parameters
      loss ()                  F.cross_entropy(logits.view(-1, V), ids[:, 1:].reshape(-1)) (mean over
                               all 48 labels, no ignore index)
      grad.<param> ...         d loss / d param at the initial parameters, for every parameter name
                               of state_dict(); tied: the shared matrix's gradient (embedding lookup +
                               output projection, summed) under BOTH token_embedding.weight and
                               lm_head.weight (identical tensors)
      after10.<param> ...      every parameter (same names; tied: both) after 10 training steps on
                               this batch: zero_grad; logits = model(ids[:, :-1]); loss; backward;
                               AdamW step with two groups: every parameter with dim() >= 2 (the
                               matrices, embeddings included; a tied matrix once) weight_decay 0.1,
                               1-D ones (biases, norms) 0; lr 1e-3, betas (0.9, 0.95), eps 1e-8
                               (torch.optim.AdamW, foreach=False)
      losses (10,)             the loss of each of those steps (losses[0] == loss)
  DIR/<name>_greedy.json       greedy generation at the initial parameters:
      prompts                  5 prompts of lengths 1, 3, 6, 2, 5 (ids in [0, 53))
      continuations            for each, 8 new tokens: the argmax of the last position's logits
                               of model(prompt + tokens so far), the full model on the growing
                               sequence (no cache), eos not treated specially
      first_logits             for each prompt, the logits (53) of its first new token
      step_logits              for each prompt, the logits (8, 53) of each new token
                               (step_logits[i][0] == first_logits[i])
      min_top2_margin          the smallest gap between the largest and second-largest logit over
                               all those steps (asserted > 1e-2, so that float rounding cannot flip
                               an argmax on the C++ side)

Initialisation (the checkpoint carries the weights, so only the ranges matter): embeddings N(0, 0.2),
every Linear weight N(0, 1/in_features) (unit-variance pre-activations: FFN inputs of std ~1, where
the tanh and erf GELUs differ by far more than the tolerance, and attention that is far from
uniform), Linear biases N(0, 0.1^2), norms weight 1 + N(0, 0.2^2) and bias N(0, 0.2^2) (so that
their effect and their gradients show). Logits then have a std of about 1.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_model  # noqa: E402
import safetensors_io  # noqa: E402

BASE = {
    "format_version": 1,
    "architecture": "decoder-only",
    "vocab_size": 53,
    "d_model": 32,
    "num_heads": 4,
    "num_layers": 2,
    "d_ff": 64,
    "max_seq_length": 24,
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "activation": "gelu_tanh",
    "positions": "learned",
    "layer_norm_eps": 1e-5,
    "tie_output_embedding": True,
    "pad_id": -1,
    "bos_id": 1,
    "eos_id": 2,
}
# name -> (config changes, model seed)
MODELS = {
    "gpt_small": ({}, 10),
    "gpt_variant": ({"positions": "sinusoidal", "activation": "gelu", "tie_output_embedding": False,
                     "layer_norm_eps": 1e-6}, 11),
}
DATA_SEED = 2024
PROMPT_SEED = 4250
BATCH, LENGTH = 3, 17
PROMPT_LENGTHS = [1, 3, 6, 2, 5]
NEW_TOKENS = 8
STEPS = 10
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8}
WEIGHT_DECAY = 0.1
MIN_MARGIN = 1e-2


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy().copy()


def init_parameters(model):
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, 0.2)
            elif isinstance(module, nn.LayerNorm):
                module.weight.copy_(1.0 + 0.2 * torch.randn_like(module.weight))
                module.bias.normal_(0.0, 0.2)
            elif isinstance(module, nn.Linear):
                if module.weight is model.token_embedding.weight:
                    continue  # tied lm_head: the embedding's values
                module.weight.normal_(0.0, module.in_features ** -0.5)
                if module.bias is not None:
                    module.bias.normal_(0.0, 0.1)


def train_refs(model, ids, V):
    """Initial logits/loss/grads, then STEPS AdamW steps on the same batch. Returns a tensor dict."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], foreach=False, **ADAMW)
    model.train()  # dropout 0: the same as eval
    named = gpt_model.named_parameters_qkv(model)
    out = {"ids": ids.to(torch.int32).numpy()}
    losses = []
    for step in range(STEPS):
        optimizer.zero_grad()
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
        loss.backward()
        if step == 0:
            out["logits"] = f32(logits)
            out["loss"] = f32(loss)
            for name, p in named:
                out["grad." + name] = f32(p.grad)
        optimizer.step()
        losses.append(loss.item())
    for name, p in named:
        out["after10." + name] = f32(p)
    out["losses"] = np.array(losses, dtype=np.float32)
    return out


def greedy_refs(model, prompts):
    model.eval()
    continuations, step_logits, margin = [], [], float("inf")
    with torch.no_grad():
        for prompt in prompts:
            seq, logits_of_steps = list(prompt), []
            for _ in range(NEW_TOKENS):
                last = model(torch.tensor([seq]))[0, -1]
                top2 = torch.topk(last, 2).values
                margin = min(margin, (top2[0] - top2[1]).item())
                logits_of_steps.append([float(x) for x in f32(last)])
                seq.append(int(torch.argmax(last).item()))
            continuations.append(seq[len(prompt):])
            step_logits.append(logits_of_steps)
    assert margin > MIN_MARGIN, f"an argmax is nearly tied (margin {margin}): pick other seeds"
    return {
        "max_new_tokens": NEW_TOKENS,
        "prompts": [list(p) for p in prompts],
        "continuations": continuations,
        "first_logits": [s[0] for s in step_logits],
        "step_logits": step_logits,
        "min_top2_margin": float(np.float32(margin)),
        "note": "greedy: argmax of the last logits of the full model run on prompt + tokens so far "
                "(no cache), each prompt alone; eos not treated specially",
    }


def write_model_refs(out_dir, name, changes, seed):
    config = dict(BASE, **changes)
    V = config["vocab_size"]
    torch.manual_seed(seed)
    model = gpt_model.gpt_from_config(config)
    init_parameters(model)

    model_dir = os.path.join(out_dir, name)
    os.makedirs(model_dir, exist_ok=True)
    written = [os.path.join(model_dir, "config.json"), os.path.join(model_dir, "model.safetensors")]
    write_json(written[0], config)
    safetensors_io.save(written[1], {k: f32(v) for k, v in model.state_dict().items()},
                        metadata={"format": "pt", "source": "tests/python/make_gpt_refs.py"})

    # Generation first: training changes the parameters.
    prompt_gen = torch.Generator().manual_seed(PROMPT_SEED)
    prompts = [torch.randint(0, V, (n,), generator=prompt_gen).tolist() for n in PROMPT_LENGTHS]
    greedy = dict({"checkpoint": name}, **greedy_refs(model, prompts))
    written.append(os.path.join(out_dir, name + "_greedy.json"))
    write_json(written[-1], greedy)

    ids = torch.randint(0, V, (BATCH, LENGTH), generator=torch.Generator().manual_seed(DATA_SEED))
    refs = train_refs(model, ids, V)
    written.append(os.path.join(out_dir, name + "_batch.safetensors"))
    safetensors_io.save(written[-1], refs, metadata={
        "format": "pt",
        "source": "tests/python/make_gpt_refs.py",
        "checkpoint": name,
        "optimizer": f"AdamW(lr={ADAMW['lr']}, betas={ADAMW['betas']}, eps={ADAMW['eps']}, "
                     f"weight_decay={WEIGHT_DECAY} on dim >= 2, 0 on 1-D)",
        "steps": str(STEPS),
    })
    print(f"{name}: loss {refs['loss'].item():.6f}, losses after {STEPS} AdamW steps "
          f"{refs['losses'][0]:.6f} -> {refs['losses'][-1]:.6f}; logits std {refs['logits'].std():.3f}; "
          f"greedy min top-2 margin {greedy['min_top2_margin']:.4f}")
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args()

    torch.set_num_threads(1)  # fixed reduction order -> byte-identical output
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    written = []
    for name, (changes, seed) in MODELS.items():
        written += write_model_refs(args.out, name, changes, seed)
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
