#!/usr/bin/env python3
"""Reference data for tests/model/bert_agreement_test.cpp: BERT built by `transformers` itself
(BertForMaskedLM and BertForSequenceClassification from a BertConfig; nothing is downloaded).

Usage: /usr/bin/python3 tests/python/make_bert_refs.py --out DIR     (CTest runs it as a fixture)

The model: BertConfig(vocab_size 200, hidden_size 64, 2 layers, 4 heads, intermediate_size 128,
max_position_embeddings 32, type_vocab_size 2, layer_norm_eps 1e-12, pad_token_id 0, GELU (erf),
dropout 0 so that training steps are deterministic), torch.manual_seed(30), then re-drawn with
weights large enough that every part matters (BERT's N(0, 0.02) start makes the blocks nearly the
identity): embeddings N(0, 0.5^2) (the padding row kept at 0), matrices N(0, 1/in), biases
N(0, 0.1^2), norms 1 + N(0, 0.1^2) / N(0, 0.1^2).

The batch: 3 rows of 12 ids, [CLS]=1 ... [SEP]=2, rows 2 and 3 right-padded (pad 0) after 9 and 5
tokens; token types 0, with 1 on the second half of row 1; attention_mask 1 on real tokens.

Writes (deterministic):
  DIR/hf_bert_mlm/, DIR/hf_bert_cls/   save_pretrained(safe_serialization=True) of each model
  DIR/hf_bert_mlm_refs.safetensors, DIR/hf_bert_cls_refs.safetensors:
      ids, type_ids, mask           i32 (3, 12)
      labels                        i32: MLM (3, 12), -100 except 8 chosen real positions;
                                    classification (3,) labels in [0, 3)
      hidden                        (3, 12, 64) last hidden state (padding rows too)
      logits                        MLM (3, 12, 200); classification (3, 3)
      pooled                        (3, 64) classification model's pooler output
      loss                          (1) the model's loss (mean over labels not -100)
      grad.<name>                   every parameter's gradient, named as in the file without "bert."
      losses                        (10) losses of 10 AdamW steps on the batch (the first = loss)
      after10.<name>                every parameter after those steps
  AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on dim >= 2 (the matrices and
  embeddings, a tied matrix once), 0 on the rest (torch.optim.AdamW, foreach=False).
"""

import argparse
import os
import sys

import torch

try:
    from safetensors.torch import save_file
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_bert_refs.py: {e}: install transformers with scripts/install_deps.sh")

STEPS = 10
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
WEIGHT_DECAY = 0.01


def config(**extra):
    return BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=32, type_vocab_size=2,
                      layer_norm_eps=1e-12, pad_token_id=0, hidden_act="gelu", hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, **extra)


def redraw(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embeddings" in name and name.endswith(".weight") and "LayerNorm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
                if "word_embeddings" in name:
                    p[0].zero_()  # the padding row, as BERT's initialisation leaves it
            elif "LayerNorm" in name and name.endswith(".weight"):
                p.copy_(1 + torch.randn(p.shape, generator=g) * 0.1)
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def batch():
    g = torch.Generator().manual_seed(31)
    lengths = [12, 9, 5]
    ids = torch.zeros(3, 12, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, 0] = 1
        ids[b, 1:n - 1] = torch.randint(3, 200, (n - 2,), generator=g)
        ids[b, n - 1] = 2
    mask = (ids != 0).long()
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    labels = torch.full_like(ids, -100)
    for b, t in [(0, 1), (0, 4), (0, 7), (0, 10), (1, 2), (1, 5), (1, 7), (2, 3)]:
        labels[b, t] = int(torch.randint(3, 200, (1,), generator=g))
    return ids, types, mask, labels


def strip(name):
    return name[len("bert."):] if name.startswith("bert.") else name


def train(model, inputs, labels):
    """Loss, gradients, then STEPS AdamW steps on the same batch."""
    params = dict(model.named_parameters())  # tied matrices once
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], foreach=False, **ADAMW)
    out = {}
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        if step == 0:
            out["loss"] = loss.detach().reshape(1)
            for name, p in params.items():
                out["grad." + strip(name)] = p.grad.detach().clone()
        losses.append(float(loss))
        opt.step()
    out["losses"] = torch.tensor(losses)
    for name, p in params.items():
        out["after10." + strip(name)] = p.detach().clone()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ids, types, mask, mlm_labels = batch()
    inputs = dict(input_ids=ids, token_type_ids=types, attention_mask=mask)
    common = {"ids": ids.int(), "type_ids": types.int(), "mask": mask.int()}

    torch.manual_seed(30)
    mlm = BertForMaskedLM(config())
    redraw(mlm, 32)
    mlm.save_pretrained(os.path.join(args.out, "hf_bert_mlm"), safe_serialization=True)
    with torch.no_grad():
        out = mlm(**inputs, output_hidden_states=True)
        refs = dict(common, labels=mlm_labels.int(), hidden=out.hidden_states[-1][:].contiguous(),
                    logits=out.logits.contiguous())
    refs.update(train(mlm, inputs, mlm_labels))
    save_file({k: v.contiguous() for k, v in refs.items()}, os.path.join(args.out, "hf_bert_mlm_refs.safetensors"))

    torch.manual_seed(33)
    cls = BertForSequenceClassification(config(num_labels=3, id2label={0: "law", 1: "history", 2: "wisdom"},
                                               label2id={"law": 0, "history": 1, "wisdom": 2}))
    redraw(cls, 34)
    cls.save_pretrained(os.path.join(args.out, "hf_bert_cls"), safe_serialization=True)
    cls_labels = torch.tensor([2, 0, 1])
    with torch.no_grad():
        out = cls(**inputs, output_hidden_states=True)
        refs = dict(common, labels=cls_labels.int(), hidden=out.hidden_states[-1].contiguous(),
                    logits=out.logits.contiguous(),
                    pooled=cls.bert(**inputs).pooler_output.contiguous())
    refs.update(train(cls, inputs, cls_labels))
    save_file({k: v.contiguous() for k, v in refs.items()}, os.path.join(args.out, "hf_bert_cls_refs.safetensors"))
    print(f"make_bert_refs: wrote hf_bert_mlm and hf_bert_cls under {args.out}")


if __name__ == "__main__":
    main()
