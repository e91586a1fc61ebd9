#!/usr/bin/env python3
"""Model-level reference data: seed 000's Transformer (tests/python/seed_transformer.py).

Usage: /usr/bin/python3 tests/python/make_model_refs.py --out DIR

Writes (all float tensors float32, ids int32; deterministic, byte-identical across runs):

  DIR/model_small/config.json         src_vocab_size 37, tgt_vocab_size 41, d_model 32,
                                      num_heads 4, num_layers 2, d_ff 64, max_seq_length 16,
                                      dropout 0.0, pad_id 0
  DIR/model_small/model.safetensors   initial parameters (torch.manual_seed(0), default
                                      PyTorch init), named as the seed's state_dict minus
                                      the positional_encoding.pe buffer
  DIR/model_small_batch.safetensors
      src (3, 9) int32      ids in [1, 37); row 1 ends with 3 pads (0)
      tgt (3, 8) int32      ids in [1, 41); row 2 ends with 2 pads (0)
      logits (3, 7, 41)     model(src, tgt[:, :-1]) at the initial parameters
      loss ()               CrossEntropyLoss(ignore_index=0)(logits.view(-1, V), tgt[:, 1:].view(-1))
      grad.<param> ...      d loss / d param at the initial parameters
      after10.<param> ...   parameters after 10 seed training steps on this same batch:
                            zero_grad; out = model(src, tgt[:, :-1]); loss; backward;
                            Adam(lr=1e-4, betas=(0.9, 0.98), eps=1e-9).step()
      losses (10,)          the loss of each of those 10 steps (losses[0] == loss)
  DIR/model_small_score/src.txt, tgt.txt
                            5 lines of space-separated ids, varying lengths, no padding
  DIR/model_small_score/expected.json
      mean_loss   mean cross-entropy over all label tokens when the 5 pairs are batched
                  together, src and tgt right-padded with 0 to the batch max length,
                  input = tgt[:, :-1], label = tgt[:, 1:] (pads ignored), model_small's
                  initial parameters
      per_line    per pair, the sum of log-probabilities of its label tokens (same batch)
      tokens_per_line, num_tokens   label-token counts

  DIR/model_variants/config.json, model.safetensors
                                      model_small's sizes with the options of seed 003 and GPT-2
                                      (VARIANT_OPTIONS: pre-LN, seed 003's LayerNorm with eps 1e-6,
                                      tanh GELU, dropout 0.1 and ffn_dropout 0.1), built by
                                      seed_variants.py; its norms get random weights and biases
  DIR/model_variants_batch.safetensors
                                      as model_small_batch, computed in eval mode (RNGs differ,
                                      so dropout cannot be compared: eval turns it off on both sides)

Note on logits at pad positions: with the seed's generate_mask a pad *query* row of the
decoder self-attention is fully masked (-1e9 everywhere), so its softmax is uniform over
all T key positions, future ones included. Logits at those positions therefore follow
that rule; they do not affect the loss or the gradients.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402
import seed_transformer as st  # noqa: E402
import seed_variants  # noqa: E402

SMALL = {
    "src_vocab_size": 37,
    "tgt_vocab_size": 41,
    "d_model": 32,
    "num_heads": 4,
    "num_layers": 2,
    "d_ff": 64,
    "max_seq_length": 16,
    "dropout": 0.0,
}
# The options that seed 000 does not have, all at once (config.json fields, see seed_variants.py).
VARIANT_OPTIONS = {
    "norm": "pre",
    "layer_norm": "seed003",
    "layer_norm_eps": 1e-6,
    "activation": "gelu_tanh",
    "dropout": 0.1,
    "ffn_dropout": 0.1,
}
MODEL_SEED = 0
VARIANT_MODEL_SEED = 3
DATA_SEED = 1234
SCORE_SEED = 4321
ADAM_STEPS = 10
SCORE_SRC_LENGTHS = [5, 9, 3, 12, 7]
SCORE_TGT_LENGTHS = [6, 4, 10, 2, 8]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy().copy()


def make_batch(gen):
    B, S, T = 3, 9, 8
    src = torch.randint(1, SMALL["src_vocab_size"], (B, S), generator=gen)
    tgt = torch.randint(1, SMALL["tgt_vocab_size"], (B, T), generator=gen)
    src[1, S - 3:] = 0  # one src row with 3 pads at the end
    tgt[2, T - 2:] = 0  # one tgt row with 2 pads at the end
    return src, tgt


def seed_loss(criterion, output, tgt, V):
    return criterion(output.contiguous().view(-1, V), tgt[:, 1:].contiguous().view(-1))


def train_refs(model, src, tgt, train_mode=True):
    """Initial logits/loss/grads, then ADAM_STEPS seed training steps. Returns a tensor dict.
    With dropout 0, train() and eval() compute the same thing; otherwise train_mode=False."""
    V = SMALL["tgt_vocab_size"]
    criterion = nn.CrossEntropyLoss(ignore_index=0)
    optimizer = optim.Adam(model.parameters(), lr=0.0001, betas=(0.9, 0.98), eps=1e-9)
    model.train(train_mode)

    out = {"src": src.to(torch.int32).numpy(), "tgt": tgt.to(torch.int32).numpy()}
    losses = []
    for step in range(ADAM_STEPS):
        optimizer.zero_grad()
        output = model(src, tgt[:, :-1])
        loss = seed_loss(criterion, output, tgt, V)
        loss.backward()
        if step == 0:
            out["logits"] = f32(output)
            out["loss"] = f32(loss)
            for name, p in model.named_parameters():
                out["grad." + name] = f32(p.grad)
        optimizer.step()
        losses.append(loss.item())
    for name, p in model.named_parameters():
        out["after10." + name] = f32(p)
    out["losses"] = np.array(losses, dtype=np.float32)
    return out


def make_score_pairs(gen):
    pairs = []
    for ls, lt in zip(SCORE_SRC_LENGTHS, SCORE_TGT_LENGTHS):
        s = torch.randint(1, SMALL["src_vocab_size"], (ls,), generator=gen).tolist()
        t = torch.randint(1, SMALL["tgt_vocab_size"], (lt,), generator=gen).tolist()
        pairs.append((s, t))
    return pairs


def pad_batch(rows):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.long)


def label_log_probs(model, src, tgt):
    """(B, T-1) log-probability of each label tgt[:, 1:], and the (B, T-1) non-pad mask."""
    logits = model(src, tgt[:, :-1])
    logp = torch.log_softmax(logits, dim=-1)
    labels = tgt[:, 1:]
    picked = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return logits, picked, labels != 0


def score_refs(model, pairs):
    V = SMALL["tgt_vocab_size"]
    model.eval()
    with torch.no_grad():
        src = pad_batch([s for s, _ in pairs])
        tgt = pad_batch([t for _, t in pairs])
        logits, picked, keep = label_log_probs(model, src, tgt)
        mean_loss = nn.CrossEntropyLoss(ignore_index=0)(
            logits.contiguous().view(-1, V), tgt[:, 1:].contiguous().view(-1))
        per_line = torch.where(keep, picked, torch.zeros_like(picked)).sum(dim=1)
        # The seed's masks make padded positions invisible to non-pad ones: each pair
        # scored alone gives the same sums (up to float rounding).
        for i, (s, t) in enumerate(pairs):
            _, alone, _ = label_log_probs(model, torch.tensor([s]), torch.tensor([t]))
            assert abs(alone.sum().item() - per_line[i].item()) < 1e-4, (i, alone.sum(), per_line[i])
        check = -per_line.sum() / keep.sum()
        assert abs(check.item() - mean_loss.item()) < 1e-5, (check, mean_loss)
    return {
        "mean_loss": float(np.float32(mean_loss.item())),
        "per_line": [float(np.float32(x)) for x in per_line.tolist()],
        "tokens_per_line": [len(t) - 1 for _, t in pairs],
        "num_tokens": int(keep.sum().item()),
        "checkpoint": "../model_small",
        "note": "batched with right padding 0 to the batch max length; input tgt[:-1], "
                "label tgt[1:]; mean_loss = CrossEntropyLoss(ignore_index=0); "
                "per_line = sum of label log-probabilities",
    }


def write_variant_refs(out_dir, src, tgt):
    """model_variants/ and model_variants_batch.safetensors; returns the paths written."""
    config = dict(st.config_of(SMALL), **VARIANT_OPTIONS)
    torch.manual_seed(VARIANT_MODEL_SEED)
    model = seed_variants.variant_transformer_from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # away from weight 1, bias 0, so their gradients and effect show
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
            elif "fc1.weight" in name:
                # FFN pre-activations of std ~1 instead of ~0.3, where the tanh GELU differs from the
                # erf one: with erf GELU, qkv's gradients would then be ~8e-4 off, 8x the tolerance.
                p.mul_(3.0)
    model_dir = os.path.join(out_dir, "model_variants")
    os.makedirs(model_dir, exist_ok=True)
    write_json(os.path.join(model_dir, "config.json"), config)
    safetensors_io.save(os.path.join(model_dir, "model.safetensors"),
                        {k: f32(v) for k, v in st.qkv_state_dict(model).items()},
                        metadata={"format": "pt", "source": "tests/python/make_model_refs.py"})
    refs = train_refs(model, src, tgt, train_mode=False)
    batch_path = os.path.join(out_dir, "model_variants_batch.safetensors")
    safetensors_io.save(batch_path, refs, metadata={
        "format": "pt",
        "source": "tests/python/make_model_refs.py",
        "checkpoint": "model_variants",
        "mode": "eval",
        "optimizer": "Adam(lr=1e-4, betas=(0.9, 0.98), eps=1e-9)",
        "steps": str(ADAM_STEPS),
    })
    print(f"variants: loss {refs['loss'].item():.6f}, losses after {ADAM_STEPS} Adam steps "
          f"{refs['losses'][0]:.6f} -> {refs['losses'][-1]:.6f}")
    return [os.path.join(model_dir, "config.json"), os.path.join(model_dir, "model.safetensors"), batch_path]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args()

    torch.set_num_threads(1)  # fixed reduction order -> byte-identical output
    torch.use_deterministic_algorithms(True)

    model_dir = os.path.join(args.out, "model_small")
    score_dir = os.path.join(args.out, "model_small_score")
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(score_dir, exist_ok=True)
    written = []

    torch.manual_seed(MODEL_SEED)
    model = st.Transformer(**SMALL)
    initial = {k: f32(v) for k, v in st.qkv_state_dict(model).items()}

    write_json(os.path.join(model_dir, "config.json"), st.config_of(SMALL))
    written.append(os.path.join(model_dir, "config.json"))
    safetensors_io.save(os.path.join(model_dir, "model.safetensors"), initial,
                        metadata={"format": "pt", "source": "tests/python/make_model_refs.py"})
    written.append(os.path.join(model_dir, "model.safetensors"))

    # Score set, at the initial parameters (before training mutates the model).
    pairs = make_score_pairs(torch.Generator().manual_seed(SCORE_SEED))
    with open(os.path.join(score_dir, "src.txt"), "w", encoding="utf-8") as f:
        f.writelines(" ".join(map(str, s)) + "\n" for s, _ in pairs)
    with open(os.path.join(score_dir, "tgt.txt"), "w", encoding="utf-8") as f:
        f.writelines(" ".join(map(str, t)) + "\n" for _, t in pairs)
    expected = score_refs(model, pairs)
    write_json(os.path.join(score_dir, "expected.json"), expected)
    written += [os.path.join(score_dir, n) for n in ("src.txt", "tgt.txt", "expected.json")]

    # Training batch: forward/backward references and 10 Adam steps.
    src, tgt = make_batch(torch.Generator().manual_seed(DATA_SEED))
    refs = train_refs(model, src, tgt)
    batch_path = os.path.join(args.out, "model_small_batch.safetensors")
    safetensors_io.save(batch_path, refs, metadata={
        "format": "pt",
        "source": "tests/python/make_model_refs.py",
        "checkpoint": "model_small",
        "optimizer": "Adam(lr=1e-4, betas=(0.9, 0.98), eps=1e-9)",
        "steps": str(ADAM_STEPS),
    })
    written.append(batch_path)
    written += write_variant_refs(args.out, src, tgt)

    n_params = sum(1 for _ in model.parameters())
    print(f"model_small: {n_params} parameter tensors, "
          f"{sum(v.size for v in initial.values())} values")
    print(f"batch: loss {refs['loss'].item():.6f}, losses after {ADAM_STEPS} Adam steps "
          f"{refs['losses'][0]:.6f} -> {refs['losses'][-1]:.6f}")
    print(f"score: mean_loss {expected['mean_loss']:.6f} over {expected['num_tokens']} tokens")
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
