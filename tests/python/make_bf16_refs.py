#!/usr/bin/env python3
"""Reference data for qkv's bf16 mixed precision (`--precision bf16`, src/qkv/ops/precision.h):
PyTorch's CPU autocast, torch.autocast("cpu", dtype=torch.bfloat16), of the same computations.

Usage: /usr/bin/python3 tests/python/make_bf16_refs.py --out DIR

Writes (float tensors float32, ids int32; deterministic):

  DIR/linear_bf16.safetensors   one linear layer, x (37, 70), w (45, 70), b (45), dy (37, 45) drawn
                                N(0, 1); under autocast y = F.linear(x, w, b) and the gradients of
                                sum(y * dy): ac.y, ac.dx, ac.dw, ac.db (autocast returns y in bf16,
                                widened here; its gradients flow back to the float32 leaves; dx
                                and dw as autocast sums them in float32 on CPUs with AVX512-BF16:
                                float32_summed_gradient)
  DIR/gpt_bf16/                 the decoder-only model of make_gpt_refs.py's gpt_small (same config,
                                seed and initialisation): config.json, model.safetensors
  DIR/gpt_bf16_batch.safetensors
      ids (3, 17)               as make_gpt_refs.py's batch
      f32.logits, f32.loss, f32.grad.<param>, f32.losses (10,), f32.after10.<param>
                                float32, as make_gpt_refs.py (the logits of ids[:, :-1], the mean
                                cross-entropy, every gradient, 10 AdamW steps on the batch)
      ac.logits, ac.loss, ac.grad.<param>, ac.losses, ac.after10.<param>
                                the same under autocast (forward and loss inside the autocast
                                region, backward and the optimizer outside it, as PyTorch's
                                autocast recipe has it); parameters, gradients and AdamW state
                                float32

The C++ side (tests/model/bf16_agreement_test.cpp) runs qkv in bf16 precision and checks that it is
as close to float32 as autocast is, and close to autocast itself.
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_model  # noqa: E402
import make_gpt_refs as g  # noqa: E402
import safetensors_io  # noqa: E402

LINEAR_SEED = 77


def linear_refs(out_dir):
    gen = torch.Generator().manual_seed(LINEAR_SEED)
    x = torch.randn(37, 70, generator=gen)
    w = torch.randn(45, 70, generator=gen)
    b = torch.randn(45, generator=gen)
    dy = torch.randn(37, 45, generator=gen)
    xs, ws, bs = (t.clone().requires_grad_(True) for t in (x, w, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(xs, ws, bs)
    assert y.dtype == torch.bfloat16, y.dtype
    (y.float() * dy).sum().backward()
    dx, dw = float32_summed_gradient(xs.grad, dy, w, "dx"), float32_summed_gradient(ws.grad, dy.t(), x, "dw")
    out = {"x": g.f32(x), "w": g.f32(w), "b": g.f32(b), "dy": g.f32(dy), "ac.y": g.f32(y),
           "ac.dx": g.f32(dx), "ac.dw": g.f32(dw), "ac.db": g.f32(bs.grad)}
    path = os.path.join(out_dir, "linear_bf16.safetensors")
    safetensors_io.save(path, out, metadata={"format": "pt", "source": "tests/python/make_bf16_refs.py"})
    return path


def float32_summed_gradient(autocast_grad, a, b, name):
    """autocast's gradient a @ b where its bf16 products sum in float32, as they do on CPUs with
    AVX512-BF16 or AMX (the operands rounded to bf16, the result rounded to bf16 and widened). On a
    CPU without them (AVX-512 hidden, AVX2 only), torch 1.13's bf16 GEMM of the backward sums in bf16
    and errs by several roundings (measured: 3.993 where the float32 sum gives 4.0625): there the
    emulation stands in for autocast, and a note says so. Where torch does sum in float32, its
    result is the emulation's or a neighbouring bf16 value (the float32 sums of the two differ in
    order): within 2.5 of `step`, half a bf16 spacing at most."""
    emulated = (a.bfloat16().double() @ b.bfloat16().double()).bfloat16().float()
    step = 2.0 ** -8 * emulated.abs() + 4 * a.shape[1] * 1.2e-7
    apart = ((autocast_grad - emulated).abs() / step).max().item()
    if apart <= 2.5:
        return autocast_grad
    print(f"make_bf16_refs.py: this CPU's torch sums autocast's {name} in bf16 ({apart:.1f} roundings from the "
          f"float32 sum): writing the float32-summed product instead")
    return emulated


def train_refs(model, ids, V, autocast):
    """g.train_refs with the forward and loss under autocast when asked."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": g.WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], foreach=False, **g.ADAMW)
    model.train()
    named = gpt_model.named_parameters_qkv(model)
    prefix = "ac." if autocast else "f32."
    out, losses = {}, []
    for step in range(g.STEPS):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, V).float(), ids[:, 1:].reshape(-1))
        loss.backward()
        if step == 0:
            out[prefix + "logits"] = g.f32(logits)
            out[prefix + "loss"] = g.f32(loss)
            for name, p in named:
                out[prefix + "grad." + name] = g.f32(p.grad)
        optimizer.step()
        losses.append(loss.item())
    for name, p in named:
        out[prefix + "after10." + name] = g.f32(p)
    out[prefix + "losses"] = np.array(losses, dtype=np.float32)
    return out


def gpt_refs(out_dir):
    changes, seed = g.MODELS["gpt_small"]
    config = dict(g.BASE, **changes)
    V = config["vocab_size"]
    model_dir = os.path.join(out_dir, "gpt_bf16")
    os.makedirs(model_dir, exist_ok=True)
    ids = torch.randint(0, V, (g.BATCH, g.LENGTH), generator=torch.Generator().manual_seed(g.DATA_SEED))
    refs = {"ids": ids.to(torch.int32).numpy()}
    for autocast in (False, True):
        torch.manual_seed(seed)
        model = gpt_model.gpt_from_config(config)
        g.init_parameters(model)
        if not autocast:
            g.write_json(os.path.join(model_dir, "config.json"), config)
            safetensors_io.save(os.path.join(model_dir, "model.safetensors"),
                                {k: g.f32(v) for k, v in model.state_dict().items()},
                                metadata={"format": "pt", "source": "tests/python/make_bf16_refs.py"})
        refs.update(train_refs(model, ids, V, autocast))
    path = os.path.join(out_dir, "gpt_bf16_batch.safetensors")
    safetensors_io.save(path, refs, metadata={"format": "pt", "source": "tests/python/make_bf16_refs.py"})
    rel = np.abs(refs["ac.logits"] - refs["f32.logits"]).max() / np.abs(refs["f32.logits"]).max()
    print(f"gpt_bf16: loss float32 {refs['f32.loss'].item():.6f}, autocast {refs['ac.loss'].item():.6f}; "
          f"autocast logits max error {rel:.3g} of the largest; losses after {g.STEPS} steps "
          f"{refs['f32.losses'][-1]:.6f} / {refs['ac.losses'][-1]:.6f}")
    return [model_dir, path]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    for path in [linear_refs(args.out)] + gpt_refs(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
