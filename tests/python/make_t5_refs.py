#!/usr/bin/env python3
"""Reference data for `qkv import --from hf` of T5 models: T5ForConditionalGeneration built by
`transformers` itself from a T5Config (nothing is downloaded), in the two layouts people have:

  hf_t5      v1.0 (t5-small's choices): feed_forward_proj "relu", the output layer tied to the
             shared table (the decoder output scaled by d_model^-0.5 first)
  hf_t5_v11  v1.1 (flan-t5's choices): "gated-gelu" (wi_0, wi_1, wo), lm_head of its own, and 6 heads
             of d_kv 16, whose width 96 is not d_model (as flan-t5-small's 6 heads of 64 in 512)

Both: d_model 64, d_kv 16, 4 heads (v1.0), d_ff 96, 2 + 2 layers, 16 relative-position buckets with max
distance 20 (so that sequences of ~20 tokens reach the logarithmic and the last buckets), T5's ids
(pad = decoder start 0, EOS 1), and a T5Tokenizer (spiece.model of make_t5_tokenizer_refs.py's
train_spm, 10 extra ids) whose size is the vocabulary. Random weights (torch.manual_seed), then 120
Adam steps on fixed random id pairs, so that greedy outputs have varied lengths and end with EOS.

Usage: /usr/bin/python3 tests/python/make_t5_refs.py --out DIR

Writes DIR/hf_t5/, DIR/hf_t5_v11/ (save_pretrained) and DIR/hf_t5_refs.json:
  source_ids, target_ids  id sequences (each ending with EOS 1, as T5's tokenizer appends it)
  <name>.log_probs        per pair, the sum over target_ids of log p, teacher forced from the decoder
                          start (model(input_ids, labels=target_ids))
  <name>.greedy_ids       generate(num_beams=1, do_sample=False, max_new_tokens=new_tokens): the ids
                          after the decoder start
  <name>.min_top2_margin  the smallest top-1 minus top-2 score over those greedy steps (> 1e-3)
  texts                   lines of text; <name>.text_greedy_ids: generate(**tokenizer(text)) as above,
                          <name>.text_greedy: tokenizer.decode(ids, skip_special_tokens=True)
  buckets                 T5Attention._relative_position_bucket for offsets -300 .. 300, for
                          (bidirectional, num_buckets, max_distance) in the listed settings
"""

import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_t5_tokenizer_refs as tokenizer_refs  # noqa: E402  (its SentencePiece model)
from seq2seq_refs import greedy, log_probs  # noqa: E402

try:
    import transformers
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer
    from transformers.models.t5.modeling_t5 import T5Attention
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_t5_refs.py: {e}: install transformers with scripts/install_deps.sh")

VOCAB = 0  # len(tokenizer), set by main()
TEXTS = tokenizer_refs.TEXT[:6] + ["Grüße aus München.", "summarize: rain"]
NEW_TOKENS = 30
TRAIN_STEPS = 120
BUCKET_SETTINGS = [(True, 32, 128), (False, 32, 128), (True, 16, 20), (False, 16, 20), (True, 8, 10)]


def id_pairs(seed, count):
    """Source / target id sequences of lengths 3 .. 22 over ids 2 .. VOCAB - 1, EOS appended."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(count):
        n = int(torch.randint(3, 23, (1,), generator=g))
        src = torch.randint(2, VOCAB, (n,), generator=g).tolist()
        tgt = [VOCAB + 1 - t if t % 3 else t for t in reversed(src)][: max(2, n - 2)]  # ids stay in 2 .. VOCAB - 1
        pairs.append((src + [1], tgt + [1]))
    return pairs


def train(model, pairs, seed):
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    width_s = max(len(s) for s, _ in pairs)
    width_t = max(len(t) for _, t in pairs)
    src = torch.tensor([s + [0] * (width_s - len(s)) for s, _ in pairs])
    labels = torch.tensor([t + [-100] * (width_t - len(t)) for _, t in pairs])
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        model(input_ids=src, attention_mask=(src != 0).long(), labels=labels).loss.backward()
        optimizer.step()
    model.eval()


def make_model(v11, seed, pairs):
    config = T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_decoder_layers=2,
                      num_heads=6 if v11 else 4,
                      relative_attention_num_buckets=16, relative_attention_max_distance=20, dropout_rate=0.1,
                      layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu" if v11 else "relu",
                      tie_word_embeddings=not v11, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config)
    train(model, pairs, seed + 1)
    return model


def buckets():
    offsets = torch.arange(-300, 301)
    return [{"bidirectional": b, "num_buckets": n, "max_distance": m,
             "buckets": T5Attention._relative_position_bucket(offsets, bidirectional=b, num_buckets=n,
                                                               max_distance=m).tolist()}
            for b, n, m in BUCKET_SETTINGS]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    global VOCAB
    tokenizer_dirs = [os.path.join(args.out, name) for name in ("hf_t5", "hf_t5_v11")]
    with tempfile.TemporaryDirectory() as tmp:
        spm_path = tokenizer_refs.train_spm(tmp)
        for d in tokenizer_dirs:
            T5Tokenizer(vocab_file=spm_path, extra_ids=tokenizer_refs.EXTRA_IDS).save_pretrained(d)
    tokenizer = T5Tokenizer.from_pretrained(tokenizer_dirs[0])
    VOCAB = len(tokenizer)
    train_pairs = id_pairs(5, 12)
    test_pairs = train_pairs[:6] + id_pairs(6, 4)
    refs = {"transformers_version": transformers.__version__, "new_tokens": NEW_TOKENS,
            "source_ids": [s for s, _ in test_pairs], "target_ids": [t for _, t in test_pairs],
            "buckets": buckets(), "vocab_size": VOCAB, "texts": TEXTS}
    for name, v11, seed in (("hf_t5", False, 50), ("hf_t5_v11", True, 60)):
        model = make_model(v11, seed, train_pairs)
        model.save_pretrained(os.path.join(args.out, name), safe_serialization=True)
        greedy_ids, margins = [], []
        with torch.no_grad():
            for s, _ in test_pairs:
                ids, margin = greedy(model, s, NEW_TOKENS)
                greedy_ids.append(ids)
                margins.append(margin)
        assert min(margins) > 1e-3, (name, min(margins))
        text_ids = [greedy(model, tokenizer(t).input_ids, NEW_TOKENS) for t in TEXTS]
        margins += [m for _, m in text_ids]
        assert min(margins) > 1e-3, (name, min(margins))
        refs[name] = {"log_probs": log_probs(model, [s for s, _ in test_pairs], [t for _, t in test_pairs]), "greedy_ids": greedy_ids,
                      "min_top2_margin": min(margins), "text_greedy_ids": [ids for ids, _ in text_ids],
                      "text_greedy": [tokenizer.decode(ids, skip_special_tokens=True) for ids, _ in text_ids]}
    with open(os.path.join(args.out, "hf_t5_refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, indent=1)
    print(f"make_t5_refs.py: transformers {transformers.__version__}, {len(test_pairs)} pairs, greedy lengths "
          f"{[len(g) for g in refs['hf_t5']['greedy_ids']]} / {[len(g) for g in refs['hf_t5_v11']['greedy_ids']]}, "
          f"min top-2 margins {refs['hf_t5']['min_top2_margin']:.4f} / {refs['hf_t5_v11']['min_top2_margin']:.4f}")


if __name__ == "__main__":
    main()
