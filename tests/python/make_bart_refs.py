#!/usr/bin/env python3
"""Reference data for `qkv import --from hf` of BART and mBART models: BartForConditionalGeneration
and MBartForConditionalGeneration built by `transformers` itself from a config (nothing is
downloaded), with the special-id layouts the released models have:

  hf_bart   BART's choices: post-LN blocks, layernorm_embedding, learned positions (offset 2),
            scale_embedding false (bart-base), exact GELU, output tied to the shared table plus
            final_logits_bias; pad 1, BOS 0, EOS 2, decoder_start_token_id 2 (the EOS),
            forced_eos_token_id 2. Sources are <s> ids </s> (0 ... 2), as BART's tokenizer writes them,
            and the directory has a BartTokenizerFast (byte-level BPE trained here on
            make_t5_tokenizer_refs.TEXT, RobertaProcessing, <mask> with lstrip) whose size is the
            vocabulary.
  hf_mbart  mBART-50's choices: pre-LN blocks with a final layer_norm in each stack,
            scale_embedding true, decoder start 2 and forced_bos_token_id LANG_TGT (the target
            language code the first generated token must be); sources are LANG_SRC ids </s>,
            targets LANG_TGT ids </s>.

Both: d_model 64, 4 heads, ffn 96, 2 + 2 layers, 64 positions, vocabulary 200 (BART: the
tokenizer's); random weights
(torch.manual_seed), then Adam steps on fixed random id pairs, so that greedy outputs have varied
lengths and end with EOS. final_logits_bias is set to small random values (transformers keeps it a
zero buffer) so that the import's reading of it is tested.

Usage: /usr/bin/python3 tests/python/make_bart_refs.py --out DIR

Writes DIR/hf_bart/, DIR/hf_mbart/ (save_pretrained) and DIR/hf_bart_refs.json:
  <name>.source_ids, <name>.target_ids  id sequences as the models' tokenizers lay them out
  <name>.log_probs        per pair, the sum over target_ids of log p, teacher forced from the decoder
                          start (model(input_ids, labels=target_ids))
  <name>.greedy_ids       generate(num_beams=1, do_sample=False, max_new_tokens=new_tokens): the ids
                          after the decoder start (mBART's forced language code first), each ending
                          with EOS before the limit
  <name>.min_top2_margin  the smallest top-1 minus top-2 score over those greedy steps (> 1e-3)
  hf_bart.texts           lines of text whose greedy output ends before the limit and decodes to
                          valid UTF-8; .text_ids: tokenizer(text).input_ids; .text_greedy_ids:
                          generate(**tokenizer(text)) as above; .text_greedy: tokenizer.decode(ids,
                          skip_special_tokens=True)
"""

import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seq2seq_refs import greedy, log_probs, train  # noqa: E402

try:
    import transformers
    from tokenizers import ByteLevelBPETokenizer
    from transformers import (BartConfig, BartForConditionalGeneration, BartTokenizerFast, MBartConfig,
                              MBartForConditionalGeneration)
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_bart_refs.py: {e}: install transformers with scripts/install_deps.sh")

VOCAB = 200  # mBART's; BART's is its tokenizer's, set by main()
BOS, PAD, EOS = 0, 1, 2
TEXT = ["translate English to German: The house is wonderful.", "Das Haus ist wunderbar.",
        "The weather is nice today, isn't it?", "Grüße aus München: 3 Tassen Kaffee!",
        "Where is the train station?  Two  spaces.", "A <mask> in the middle.", "café naïve résumé",
        "We are going to the mountains in the summer.", "x", "Numbers 12345 and symbols #@%."]
LANG_SRC, LANG_TGT = 198, 199  # mBART's language codes: the last ids, as in mBART-50
NEW_TOKENS = 40
TRAIN_STEPS = 150


def id_pairs(seed, count, mbart, content):
    """Source / target id sequences of 3 .. 20 ids drawn from `content`, laid out as the model's
    tokenizer does: BART <s> ids </s> -> ids </s>; mBART LANG_SRC ids </s> -> LANG_TGT ids </s>."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(count):
        n = int(torch.randint(3, 21, (1,), generator=g))
        src = [content[i] for i in torch.randint(0, len(content), (n,), generator=g).tolist()]
        tgt = [content[len(content) - 1 - content.index(t)] if t % 3 else t for t in reversed(src)][: max(2, n - 2)]
        if mbart:
            pairs.append(([LANG_SRC] + src + [EOS], [LANG_TGT] + tgt + [EOS]))
        else:
            pairs.append(([BOS] + src + [EOS], tgt + [EOS]))
    return pairs


def make_tokenizer(out_dir):
    """BART's tokenizer: byte-level BPE (<s> <pad> </s> <unk> <mask> first, as BART's ids), saved as
    BartTokenizerFast does (tokenizer.json with RobertaProcessing, vocab.json, merges.txt)."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT * 3, vocab_size=320, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save_model(tmp)
        tokenizer = BartTokenizerFast(vocab_file=os.path.join(tmp, "vocab.json"),
                                      merges_file=os.path.join(tmp, "merges.txt"))
    tokenizer.save_pretrained(out_dir)
    return BartTokenizerFast.from_pretrained(out_dir)


def make_model(mbart, seed, pairs, vocab):
    sizes = dict(vocab_size=vocab, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=64,
                 dropout=0.1, activation_function="gelu", pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                 decoder_start_token_id=EOS, forced_eos_token_id=EOS)
    torch.manual_seed(seed)
    if mbart:
        model = MBartForConditionalGeneration(MBartConfig(scale_embedding=True, forced_bos_token_id=LANG_TGT, **sizes))
    else:
        model = BartForConditionalGeneration(BartConfig(scale_embedding=False, **sizes))
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.1)
    train(model, pairs, PAD, seed + 1, TRAIN_STEPS)
    return model


def text_refs(model, tokenizer):
    """Text in, text out: the texts whose greedy output ends before the limit (a forced EOS at the
    limit counts one token fewer than qkv's) and decodes to valid UTF-8."""
    out = {"texts": [], "text_ids": [], "text_greedy_ids": [], "text_greedy": []}
    margins = []
    with torch.no_grad():
        for text in TEXT:
            source = tokenizer(text).input_ids
            ids, margin = greedy(model, source, NEW_TOKENS)
            decoded = tokenizer.decode(ids, skip_special_tokens=True)
            if ids[-1] != EOS or len(ids) >= NEW_TOKENS or "\ufffd" in decoded:
                continue
            margins.append(margin)
            out["texts"].append(text)
            out["text_ids"].append(source)
            out["text_greedy_ids"].append(ids)
            out["text_greedy"].append(decoded)
    assert len(out["texts"]) >= 4 and min(margins) > 1e-3, (len(out["texts"]), margins)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    refs = {"transformers_version": transformers.__version__, "new_tokens": NEW_TOKENS}
    tokenizer = make_tokenizer(os.path.join(args.out, "hf_bart"))
    # Content ids: those that decode to text on their own (no byte of a split character), so that
    # decoded outputs are valid UTF-8 whichever ids follow each other.
    bart_content = [i for i in range(5, len(tokenizer)) if "\ufffd" not in tokenizer.decode([i])]
    for name, mbart, seed in (("hf_bart", False, 70), ("hf_mbart", True, 80)):
        vocab = VOCAB if mbart else len(tokenizer)
        content = list(range(4, 198)) if mbart else bart_content
        train_pairs = id_pairs(seed + 5, 12, mbart, content)
        test_pairs = train_pairs[:6] + id_pairs(seed + 6, 4, mbart, content)
        model = make_model(mbart, seed, train_pairs, vocab)
        model.save_pretrained(os.path.join(args.out, name), safe_serialization=True)
        greedy_ids, margins = [], []
        with torch.no_grad():
            for s, _ in test_pairs:
                ids, margin = greedy(model, s, NEW_TOKENS)
                assert ids[-1] == EOS and len(ids) < NEW_TOKENS, (name, ids)  # ended by the model, not the limit
                greedy_ids.append(ids)
                margins.append(margin)
        assert min(margins) > 1e-3, (name, min(margins))
        refs[name] = {"source_ids": [s for s, _ in test_pairs], "target_ids": [t for _, t in test_pairs],
                      "log_probs": log_probs(model, [s for s, _ in test_pairs], [t for _, t in test_pairs]),
                      "greedy_ids": greedy_ids, "min_top2_margin": min(margins), "vocab_size": vocab}
        if not mbart:
            refs[name].update(text_refs(model, tokenizer))
    with open(os.path.join(args.out, "hf_bart_refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, indent=1)
    print(f"make_bart_refs.py: transformers {transformers.__version__}, greedy lengths "
          f"{[len(g) for g in refs['hf_bart']['greedy_ids']]} / {[len(g) for g in refs['hf_mbart']['greedy_ids']]}, "
          f"min top-2 margins {refs['hf_bart']['min_top2_margin']:.4f} / {refs['hf_mbart']['min_top2_margin']:.4f}")


if __name__ == "__main__":
    main()
