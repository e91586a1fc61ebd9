#!/usr/bin/env python3
"""Reference data for `qkv import --from hf` of Marian (OPUS-MT) translation models: MarianMTModel
built by `transformers` itself from a MarianConfig, with MarianTokenizer's files made here (two
SentencePiece models trained on a fixed text, a joint vocab.json); nothing is downloaded.

Usage: /usr/bin/python3 tests/python/make_marian_refs.py --out DIR

The special-id layout is OPUS-MT's: "</s>" 0, "<unk>" 1, the pieces, a language code ">>fra<<",
"<pad>" last; pad = decoder start, EOS 0, bad_words_ids [[pad]], forced_eos_token_id 0. The model:
d_model 64, 2 + 2 layers, 4 heads, ffn 128, swish, 64 positions, scaled embeddings, one table
shared by the encoder, the decoder and the output layer; torch.manual_seed(30), a final_logits_bias
drawn N(0, 0.1^2) (zeros in a new model, so that its import is tested), then 150 Adam steps on 8 of
the fixed pairs (see train()).

Writes (deterministic):
  DIR/hf_marian/            save_pretrained of the model (config.json, model.safetensors,
                            generation_config.json) and of the tokenizer (source.spm, target.spm,
                            vocab.json, tokenizer_config.json, special_tokens_map.json)
  DIR/hf_marian_untied/     the same with tie_word_embeddings false (its own lm_head.weight)
  DIR/hf_marian_refs.json
      sources, targets      texts; source_ids / target_ids: tokenizer(sources) /
                            tokenizer(text_target=targets) input ids (EOS appended)
      log_probs             per pair, sum over the target ids (EOS included) of log p, teacher forced
                            from decoder_start (model(input_ids, labels=target_ids)); untied_log_probs
                            the same of hf_marian_untied
      new_tokens            N = 40
      greedy_ids            model.generate(source, num_beams=1, do_sample=False, max_new_tokens=N) per
                            source: the ids after the decoder start, EOS kept (the last one is forced
                            EOS when the output reaches N)
      greedy_texts          tokenizer.decode(greedy_ids, skip_special_tokens=True)
      min_top2_margin       the smallest top-1 minus top-2 score over those greedy steps (asserted > 1e-3)
      roundtrip_lines       varied lines; roundtrip_ids: tokenizer(line) ids, roundtrip_decoded:
                            tokenizer.decode(ids, skip_special_tokens=True) (source side: the
                            target model decodes with target.spm, and both spm share the text)
"""

import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seq2seq_refs import greedy, log_probs  # noqa: E402

try:
    import sentencepiece as spm
    import transformers
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_marian_refs.py: {e}: install transformers and python3-sentencepiece with scripts/install_deps.sh")

NEW_TOKENS = 40
TRAIN_STEPS = 150
CODE = ">>fra<<"

SOURCE_TEXT = [
    "En el principio creó Dios los cielos y la tierra.",
    "Y la tierra estaba desordenada y vacía, y las tinieblas estaban sobre la faz del abismo.",
    "Y dijo Dios: Sea la luz; y fue la luz.",
    "Y vio Dios que la luz era buena; y separó Dios la luz de las tinieblas.",
    "Y llamó Dios a la luz Día, y a las tinieblas llamó Noche.",
    "Y fue la tarde y la mañana un día.",
    "Luego dijo Dios: Haya expansión en medio de las aguas.",
    "E hizo Dios la expansión, y separó las aguas.",
] * 3
TARGET_TEXT = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "And God said, Let there be light: and there was light.",
    "And God saw the light, that it was good: and God divided the light from the darkness.",
    "And God called the light Day, and the darkness he called Night.",
    "And the evening and the morning were the first day.",
    "And God said, Let there be a firmament in the midst of the waters.",
    "And God made the firmament, and divided the waters.",
] * 3

# Tokenizer round trips: spaces, punctuation, digits, accents, characters the models never saw,
# a language code, text NFKC changes.
ROUNDTRIP = [
    "Y dijo Dios: Sea la luz.",
    "  leading and   repeated   spaces  ",
    "numbers 12345 and 3.14, (brackets) [x] {y} \"quotes\" 'single'",
    "Ünïcödé àccents ñ ç ß and CJK 天地 and emoji 🙂",
    ">>fra<< Y fue la tarde",
    "ﬁ ligature and full-width ＡＢＣ",
    "tab\tinside",
    "",
    "a",
    "don't won't it's ... !? ;",
]


def train_spm(lines, prefix, vocab_size):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    spm.SentencePieceTrainer.train(input=path, model_prefix=prefix, vocab_size=vocab_size, model_type="unigram", hard_vocab_limit=False,
                                   character_coverage=1.0, num_threads=1, seed_sentencepiece_size=100000,
                                   minloglevel=2)
    os.unlink(path)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def build_vocab(sources, targets):
    """OPUS-MT's joint vocab.json layout: </s> 0, <unk> 1, every piece of both models, a language
    code, <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for sp in (sources, targets):
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece in ("<unk>", "<s>", "</s>") or piece in vocab:
                continue
            vocab[piece] = len(vocab)
    vocab[CODE] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def train(model, tokenizer, seed):
    """A few hundred Adam steps on the fixed pairs, so that greedy outputs are translations of
    varied lengths that end with EOS (a random post-norm model repeats one token). The
    final_logits_bias is drawn first (zeros in a new model), so that its import is tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=g) * 0.1)
    batch = tokenizer(SOURCE_TEXT[:8], text_target=TARGET_TEXT[:8], padding=True, return_tensors="pt")
    batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()


def make_model(vocab, tokenizer, tied, seed):
    pad = vocab["<pad>"]
    config = MarianConfig(vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=64, encoder_layers=2,
                          decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                          encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                          activation_function="swish", dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
                          scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=tied,
                          pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
                          bad_words_ids=[[pad]], num_beams=4, max_length=64)
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    train(model, tokenizer, seed + 1)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    hf_dir = os.path.join(args.out, "hf_marian")
    untied_dir = os.path.join(args.out, "hf_marian_untied")
    os.makedirs(hf_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src_sp = train_spm(SOURCE_TEXT, os.path.join(tmp, "source"), 120)
        tgt_sp = train_spm(TARGET_TEXT, os.path.join(tmp, "target"), 120)
        vocab = build_vocab(src_sp, tgt_sp)
        with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        tokenizer = MarianTokenizer(os.path.join(tmp, "source.model"), os.path.join(tmp, "target.model"),
                                    os.path.join(tmp, "vocab.json"))
        for d in (hf_dir, untied_dir):
            tokenizer.save_pretrained(d)
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)  # as a user loads it

    model = make_model(vocab, tokenizer, True, 30)
    model.save_pretrained(hf_dir, safe_serialization=True)
    untied = make_model(vocab, tokenizer, False, 40)
    untied.save_pretrained(untied_dir, safe_serialization=True)

    sources = sorted(set(SOURCE_TEXT))[:6] + ["Y la luz.", "Dios", "las aguas de la tierra y los cielos."]
    targets = sorted(set(TARGET_TEXT))[:6] + ["And light.", "God", "the waters of the earth and the heaven."]
    source_ids = [tokenizer(s).input_ids for s in sources]
    target_ids = [tokenizer(text_target=t).input_ids for t in targets]
    greedy_ids, margins = [], []
    with torch.no_grad():
        for s in source_ids:
            ids, margin = greedy(model, s, NEW_TOKENS)
            greedy_ids.append(ids)
            margins.append(margin)
    assert min(margins) > 1e-3, min(margins)
    roundtrip_ids = [tokenizer(line).input_ids for line in ROUNDTRIP]
    refs = {
        "transformers_version": transformers.__version__,
        "sources": sources, "targets": targets, "source_ids": source_ids, "target_ids": target_ids,
        "log_probs": log_probs(model, source_ids, target_ids),
        "untied_log_probs": log_probs(untied, source_ids, target_ids),
        "new_tokens": NEW_TOKENS, "greedy_ids": greedy_ids,
        "greedy_texts": [tokenizer.decode(ids, skip_special_tokens=True) for ids in greedy_ids],
        "min_top2_margin": min(margins),
        "roundtrip_lines": ROUNDTRIP, "roundtrip_ids": roundtrip_ids,
        "roundtrip_decoded": [tokenizer.decode(ids, skip_special_tokens=True) for ids in roundtrip_ids],
        "vocab_size": len(vocab), "pad_id": vocab["<pad>"],
    }
    with open(os.path.join(args.out, "hf_marian_refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, ensure_ascii=False, indent=1)
    print(f"make_marian_refs.py: transformers {transformers.__version__}, vocabulary {len(vocab)}, "
          f"{len(sources)} pairs, min top-2 margin {min(margins):.4f}, wrote {hf_dir}, {untied_dir}")


if __name__ == "__main__":
    main()
