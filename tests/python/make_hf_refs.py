#!/usr/bin/env python3
"""Reference data for `qkv import --from hf` / `qkv export --to hf`: a Hugging Face GPT-2 built by
`transformers` itself (GPT2LMHeadModel from a GPT2Config; nothing is downloaded).

Usage: /usr/bin/python3 tests/python/make_hf_refs.py --out DIR

The model: GPT2Config(vocab_size 300, n_embd 64, n_head 4, n_layer 2, n_positions 64, n_inner null,
activation "gelu_new", layer_norm_epsilon 1e-5, bos/eos = the tokenizer's <|endoftext|>, tied
lm_head), torch.manual_seed(20), then re-drawn with larger weights so that greedy decisions have
margins far above float32 noise (GPT-2's N(0, 0.02) start gives nearly flat logits): embeddings
N(0, 0.3^2), Conv1D weights N(0, 1/in), biases N(0, 0.1^2), norms 1 + N(0, 0.1^2) / N(0, 0.1^2).

Writes (deterministic):
  DIR/hf_gpt2/              save_pretrained(safe_serialization=True): config.json, model.safetensors
                            (keys "transformer.*", lm_head omitted: tied), generation_config.json,
                            plus tokenizer.json: a byte-level BPE (256 bytes + <|endoftext|> + 43
                            merges = 300 tokens) trained with `tokenizers` on a fixed text
  DIR/hf_gpt2_f16/          the same model in float16 (model.half().save_pretrained), no tokenizer
  DIR/hf_gpt2_refs.json
      prompts               20 prompts (token id lists, lengths 1..40)
      new_tokens            N = 12
      continuations         model.generate(prompt, do_sample=False, max_new_tokens=N): the new ids (N, or
                            fewer ending with eos_token_id: generate stops there and keeps it)
      min_top2_margin       the smallest top-1 minus top-2 logit over all those greedy steps
                            (asserted > 1e-3: float rounding cannot flip an argmax on the C++ side)
  DIR/hf_gpt2_logits.safetensors   (float32)
      logits.<i>            (T_i, 300) model(prompt_i).logits[0] of the float32 model
      f16_logits.<i>        (T_i, 300) logits of the float16 weights widened to float32 (the model
                            `qkv import` builds from hf_gpt2_f16), computed in float32

Usage for the export check: check_hf_export.py (CTest) loads a directory written by `qkv export`.
"""

import argparse
import json
import os
import random
import sys

import torch

try:
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_hf_refs.py: {e}: install transformers with scripts/install_deps.sh")

VOCAB = 300
NEW_TOKENS = 12
PROMPTS = 20
SPECIAL = "<|endoftext|>"

TEXT = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "And God said, Let there be light: and there was light.",
    "And God saw the light, that it was good: and God divided the light from the darkness.",
    "And God called the light Day, and the darkness he called Night.",
    "And the evening and the morning were the first day.",
] * 4


def train_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT, trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.save(path)
    return tok.token_to_id(SPECIAL)


def redraw(model):
    g = torch.Generator().manual_seed(21)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("wte.weight") or name.endswith("wpe.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif name.endswith(".weight") and p.dim() == 2:  # Conv1D (in, out)
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[0] ** 0.5)
            elif "ln_" in name and name.endswith(".weight"):
                p.copy_(1 + torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def greedy(model, prompt):
    """model.generate's greedy continuation, and the smallest top-2 gap of its steps."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS,
                         pad_token_id=0, synced_gpus=False,
                         output_scores=True, return_dict_in_generate=True)
    new = out.sequences[0, len(prompt):].tolist()
    margin = min(float((s[0].topk(2).values[0] - s[0].topk(2).values[1])) for s in out.scores)
    return new, margin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    hf_dir = os.path.join(args.out, "hf_gpt2")
    f16_dir = os.path.join(args.out, "hf_gpt2_f16")
    os.makedirs(hf_dir, exist_ok=True)
    eot = train_tokenizer(os.path.join(hf_dir, "tokenizer.json"))

    torch.manual_seed(20)
    config = GPT2Config(vocab_size=VOCAB, n_embd=64, n_head=4, n_layer=2, n_positions=64, n_inner=None,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=eot,
                        eos_token_id=eot, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    model = GPT2LMHeadModel(config)
    redraw(model)
    model.eval()
    model.save_pretrained(hf_dir, safe_serialization=True)

    f16 = GPT2LMHeadModel(config)
    f16.load_state_dict(model.state_dict())
    f16 = f16.half()
    f16.save_pretrained(f16_dir, safe_serialization=True)
    widened = GPT2LMHeadModel(config)  # the f16 weights, computed in float32 (what qkv imports)
    widened.load_state_dict({k: v.float() for k, v in f16.state_dict().items()})
    widened.eval()

    rng = random.Random(22)
    lengths = [1, 2, 3, 5, 8, 13, 21, 34, 40, 4, 6, 7, 9, 10, 11, 12, 15, 17, 19, 25]
    prompts, continuations, margins = [], [], []
    tensors = {}
    with torch.no_grad():
        for length in lengths:
            while True:  # skip (deterministically) a prompt whose greedy steps hold a near tie
                prompt = [rng.randrange(VOCAB) for _ in range(length)]
                new, margin = greedy(model, prompt)
                if margin > 1e-3:
                    break
            i = len(prompts)
            prompts.append(prompt)
            continuations.append(new)
            margins.append(margin)
            ids = torch.tensor([prompt])
            tensors[f"logits.{i}"] = model(ids).logits[0].contiguous()
            tensors[f"f16_logits.{i}"] = widened(ids).logits[0].contiguous()
    assert len(prompts) == PROMPTS
    save_file(tensors, os.path.join(args.out, "hf_gpt2_logits.safetensors"))
    refs = {"transformers_version": transformers.__version__, "prompts": prompts, "new_tokens": NEW_TOKENS,
            "continuations": continuations, "min_top2_margin": min(margins)}
    with open(os.path.join(args.out, "hf_gpt2_refs.json"), "w") as f:
        json.dump(refs, f)
    print(f"make_hf_refs.py: transformers {transformers.__version__}, {PROMPTS} prompts, min top-2 margin "
          f"{min(margins):.4f}, wrote {hf_dir}, {f16_dir}")


if __name__ == "__main__":
    main()
