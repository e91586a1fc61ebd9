#!/usr/bin/env python3
"""Reference data for the search every family shares (src/qkv/decoding/beam.h, constraints.h) on the
seq2seq models qkv imports from Hugging Face: small Marian, BART, mBART, M2M100 and T5 models built by
`transformers` from a config (nothing is downloaded), with the special-id layouts of the released
models, and what their `generate` gives with greedy and beam search and the token rules.

Usage: /usr/bin/python3 tests/python/make_seq2seq_search_refs.py --out DIR

The models (d_model 32, 4 heads, ffn 64, 2 + 2 layers, vocabulary 40):
  search_marian  MarianMTModel: EOS 0, pad = decoder start = the last id, bad_words_ids [[pad]],
                 forced_eos_token_id 0, sinusoidal positions, scaled embeddings, swish.
  search_bart    BartForConditionalGeneration: BOS 0, pad 1, EOS 2, decoder start 2 (the EOS),
                 forced_eos_token_id 2; sources <s> ids </s>.
  search_mbart   MBartForConditionalGeneration (pre-LN): as BART, forced_bos_token_id LANG_TGT (the
                 last id: the target language every output starts with); sources LANG_SRC ids </s>.
  search_m2m100  M2M100ForConditionalGeneration (sinusoidal positions after the pad, ReLU): ids as
                 BART's, sources LANG_SRC ids </s>, trained on targets LANG_TGT ids </s> but without
                 a forced_bos_token_id (M2M100's generate takes it per call): the model chooses its
                 first token, unless a case forces one.
  search_t5      T5ForConditionalGeneration (v1.1: gated GELU, untied lm_head): pad = decoder
                 start 0, EOS 1.
Each is trained TRAIN_STEPS Adam steps on 32 random pairs (target: each source id moved to the next
content id) and searched on other sources: an untrained model repeats one token without end, a
briefly trained one ends with EOS after a few tokens, with alternatives close enough that the rules
and the beams change outputs, and far enough apart that rounding does not (min_top2_margin).

Conventions the options below choose, because qkv's seq2seq search has them (docs/cli.md, Search):
  - early_stopping=True: a sentence is done once num_beams hypotheses ended with EOS, and an EOS
    ranked below num_beams among the 2 num_beams candidates is dropped: the rule of fairseq and
    CTranslate2 that beam.h implements (transformers' default early_stopping=False goes on searching
    while a live beam could still beat the kept ones).
  - Only sources whose every hypothesis in every case ends with EOS before max_new_tokens are kept:
    at the limit transformers forces EOS with score 0 (forced_eos_token_id) or cuts the hypothesis
    (T5), where qkv's translation ends every live beam with EOS at its log-probability.
  - T5 gets bad_words_ids [[pad]] (Marian has it in its config): qkv never chooses the pad, which
    would read as padding when the pair is scored.
  - qkv keeps the first num_beams hypotheses that end (fairseq); transformers lets a later EOS of the
    step that completes them replace the worst when it scores better (BeamHypotheses.add). Every
    hypothesis offered is recorded in order (EndedInOrder), and where the first num_beams differ
    from what transformers kept, they are stored as first_k: the hypotheses qkv must find.
  - generate runs with num_return_sequences = num_beams, so that every kept hypothesis is seen;
    the first num_return_sequences are stored.

Writes (deterministic):
  DIR/search_<model>/           save_pretrained(safe_serialization=True) (config.json,
                                model.safetensors, generation_config.json)
  DIR/hf_seq2seq_search_refs.json
      <model>.sources           SOURCES sources (token ids with the model's layout, EOS last),
                                searched as one padded batch
      <model>.eos_id, pad_id
      <model>.min_top2_margin   the smallest top-1 minus top-2 score over the greedy cases' steps
                                (asserted > 1e-4)
      <model>.first_k_cases     how many beam searches first_k changed (the test needs some in all)
      <model>.cases             a list; each with
        name, options           the generate() keywords (max_new_tokens, num_beams, early_stopping,
                                length_penalty, num_return_sequences, repetition_penalty,
                                no_repeat_ngram_size, min_length, min_new_tokens,
                                forced_bos_token_id, do_sample=False)
        outputs                 per source, num_return_sequences hypotheses best first: the ids
                                after the decoder start, without the final EOS
        scores                  per source and hypothesis: sequences_scores (beam search only)
        first_k                 per source: null, or {outputs, scores} of the first num_beams ended
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seq2seq_refs import train  # noqa: E402

try:
    import transformers
    from transformers import (BartConfig, BartForConditionalGeneration, M2M100Config, M2M100ForConditionalGeneration,
                              MarianConfig, MarianMTModel, MBartConfig, MBartForConditionalGeneration, T5Config,
                              T5ForConditionalGeneration)
    from transformers.generation import beam_search
    from transformers.models.m2m_100 import modeling_m2m_100
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_seq2seq_search_refs.py: {e}: install transformers with scripts/install_deps.sh")

# As make_m2m100_refs.py: M2M100's layers ask whether FSDP manages them, and Debian's torch cannot
# import torch.distributed.fsdp under Python 3.11. Nothing here is sharded.
modeling_m2m_100.is_fsdp_managed_module = lambda module: False

VOCAB = 40
TRAIN_PAIRS = 32
TRAIN_STEPS = 60
CANDIDATE_SOURCES = 16  # drawn; the first SOURCES that end before the limit in every case are kept
SOURCES = 10
MAX_NEW = 24
MARIAN_PAD = VOCAB - 1
LANG_SRC, LANG_TGT = VOCAB - 2, VOCAB - 1  # mBART's language codes: the last ids, as in mBART-50

BEAM = dict(do_sample=False, num_beams=4, early_stopping=True, max_new_tokens=MAX_NEW)
GREEDY = dict(do_sample=False, num_beams=1, max_new_tokens=MAX_NEW)
CASES = [
    ("greedy", dict(GREEDY)),
    ("beam4_nbest4", dict(BEAM, length_penalty=1.0, num_return_sequences=4)),
    ("beam4_nbest2_lp0", dict(BEAM, length_penalty=0.0, num_return_sequences=2)),
    ("beam4_nbest3_lp2", dict(BEAM, length_penalty=2.0, num_return_sequences=3)),
    ("beam4_repetition", dict(BEAM, repetition_penalty=1.8, num_return_sequences=2)),
    ("greedy_repetition", dict(GREEDY, repetition_penalty=2.0)),
    ("beam4_no_repeat_2", dict(BEAM, no_repeat_ngram_size=2, num_return_sequences=2)),
    ("greedy_no_repeat_2", dict(GREEDY, no_repeat_ngram_size=2)),
    ("beam4_min_length_7", dict(BEAM, min_length=7, num_return_sequences=2)),
    ("greedy_min_length_7", dict(GREEDY, min_length=7)),
    ("beam4_min_new_5", dict(BEAM, min_new_tokens=5, num_return_sequences=2)),
    ("greedy_min_new_5", dict(GREEDY, min_new_tokens=5)),
    ("beam4_forced_bos", dict(BEAM, forced_bos_token_id=5, num_return_sequences=2)),
    ("greedy_forced_bos", dict(GREEDY, forced_bos_token_id=5)),
    ("beam3_all_rules", dict(BEAM, num_beams=3, repetition_penalty=1.3, no_repeat_ngram_size=3, min_length=4,
                             length_penalty=1.5, num_return_sequences=3)),
]

SIZES = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
             dropout=0.1, attention_dropout=0.0, activation_dropout=0.0)
BART_IDS = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2)


class Family:
    """A model and its layout: special ids, and how its tokenizer lays out sources and targets."""

    def __init__(self, model, eos, pad, source_prefix=(), target_prefix=()):
        self.model, self.eos, self.pad = model, eos, pad
        self.source_prefix, self.target_prefix = list(source_prefix), list(target_prefix)

    def source(self, ids):
        return self.source_prefix + ids + [self.eos]

    def target(self, ids):
        return self.target_prefix + ids + [self.eos]


def marian():
    config = MarianConfig(**SIZES, decoder_vocab_size=VOCAB, activation_function="swish", scale_embedding=True,
                          share_encoder_decoder_embeddings=True, pad_token_id=MARIAN_PAD, eos_token_id=0,
                          decoder_start_token_id=MARIAN_PAD, forced_eos_token_id=0, bad_words_ids=[[MARIAN_PAD]])
    return Family(MarianMTModel(config), 0, MARIAN_PAD)


def bart():
    config = BartConfig(**SIZES, activation_function="gelu", scale_embedding=False, **BART_IDS)
    return Family(BartForConditionalGeneration(config), 2, 1, source_prefix=[0])


def mbart():
    config = MBartConfig(**SIZES, activation_function="gelu", scale_embedding=True, forced_bos_token_id=LANG_TGT,
                         **BART_IDS)
    return Family(MBartForConditionalGeneration(config), 2, 1, source_prefix=[LANG_SRC], target_prefix=[LANG_TGT])


def m2m100():
    config = M2M100Config(**SIZES, activation_function="relu", scale_embedding=True, **BART_IDS)
    return Family(M2M100ForConditionalGeneration(config), 2, 1, source_prefix=[LANG_SRC], target_prefix=[LANG_TGT])


def t5():
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                      relative_attention_num_buckets=16, relative_attention_max_distance=20, dropout_rate=0.1,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0)
    return Family(T5ForConditionalGeneration(config), 1, 0)


MODELS = [("search_marian", marian), ("search_bart", bart), ("search_mbart", mbart), ("search_m2m100", m2m100),
          ("search_t5", t5)]
SPECIAL = {0, 1, 2, MARIAN_PAD, LANG_SRC, LANG_TGT}
CONTENT = [i for i in range(VOCAB) if i not in SPECIAL]


def draw_ids(g, count):
    """`count` id lists of 1 .. 9 content ids."""
    out = []
    for _ in range(count):
        n = int(torch.randint(1, 10, (1,), generator=g))
        out.append([CONTENT[i] for i in torch.randint(0, len(CONTENT), (n,), generator=g).tolist()])
    return out


def shifted(ids):
    """The training target of `ids`: each moved to the next content id."""
    return [CONTENT[(CONTENT.index(i) + 1) % len(CONTENT)] for i in ids]


class EndedInOrder:
    """Records, per sentence of a generate call, every hypothesis beam search offers to its kept set
    (BeamHypotheses.add), in order, with the score add gives it: the first num_beams of them are
    what qkv keeps."""

    def __init__(self):
        self.sentences = []  # per sentence (BeamHypotheses are made in batch order): [(tokens, score)]
        self.original_init, self.original_add = beam_search.BeamHypotheses.__init__, beam_search.BeamHypotheses.add

    def __enter__(self):
        recorder = self

        def init(hyps, *args, **kwargs):
            recorder.original_init(hyps, *args, **kwargs)
            hyps.offered = []
            recorder.sentences.append(hyps.offered)

        def add(hyps, hyp, sum_logprobs, beam_indices=None, generated_len=None):
            length = generated_len if generated_len is not None else hyp.shape[-1]
            hyps.offered.append((hyp.tolist()[1:], sum_logprobs / length ** hyps.length_penalty))
            return recorder.original_add(hyps, hyp, sum_logprobs, beam_indices=beam_indices,
                                         generated_len=generated_len)

        beam_search.BeamHypotheses.__init__, beam_search.BeamHypotheses.add = init, add
        return self

    def __exit__(self, *exc):
        beam_search.BeamHypotheses.__init__, beam_search.BeamHypotheses.add = self.original_init, self.original_add


def search(family, sources, options):
    """generate of the sources as one padded batch. Per source: its hypotheses (ids after the decoder
    start, without the final EOS; None when one did not end with EOS before the limit), their
    sequences_scores (beam search), the first-K rule's hypotheses where they differ (else None), and
    the smallest top-1 minus top-2 score of its greedy steps."""
    beams = options.get("num_beams", 1)
    extra = dict(num_return_sequences=beams) if beams > 1 else {}
    if isinstance(family.model, T5ForConditionalGeneration):
        extra["bad_words_ids"] = [[family.pad]]
    width = max(len(s) for s in sources)
    ids = torch.tensor([s + [family.pad] * (width - len(s)) for s in sources])
    with EndedInOrder() as ended:
        out = family.model.generate(ids, attention_mask=(ids != family.pad).long(), synced_gpus=False,
                                    output_scores=True, return_dict_in_generate=True, **dict(options, **extra))
    n = options.get("num_return_sequences", 1)
    results = []
    for b in range(len(sources)):
        outputs = [end_at_eos(seq[1:], family) for seq in out.sequences[b * beams:(b + 1) * beams].tolist()]
        if beams == 1:
            top2 = [s[b].topk(2).values for s in out.scores[:len(outputs[0] or []) + 1]]
            results.append((outputs, [], None, min(float(v[0] - v[1]) for v in top2)))
            continue
        scores = out.sequences_scores[b * beams:(b + 1) * beams].tolist()
        kept = sorted(ended.sentences[b][:beams], key=lambda h: -h[1])  # stable: ties keep their order
        if any(len(h[0]) >= MAX_NEW - 1 for h in kept):  # ended at the limit
            outputs = [None]
        first_k = None
        if [h[0] for h in kept][:n] != outputs[:n]:
            first_k = {"outputs": [h[0] for h in kept][:n], "scores": [h[1] for h in kept][:n]}
        results.append((outputs[:n], scores[:n], first_k, float("inf")))
    return results


def end_at_eos(new, family):
    """The ids before the first EOS; None when there is none before the limit (a forced EOS at the
    limit included) or a pad is among them."""
    if family.eos not in new or new.index(family.eos) >= MAX_NEW - 1 or family.pad in new[:new.index(family.eos)]:
        return None
    return new[:new.index(family.eos)]


def model_refs(name, build, seed, out_dir):
    torch.manual_seed(seed)
    family = build()
    g = torch.Generator().manual_seed(seed + 1)
    pairs = [(family.source(ids), family.target(shifted(ids))) for ids in draw_ids(g, TRAIN_PAIRS)]
    train(family.model, pairs, family.pad, seed + 2, TRAIN_STEPS, lr=5e-3)
    family.model.save_pretrained(os.path.join(out_dir, name), safe_serialization=True)
    candidates = [family.source(ids) for ids in draw_ids(g, CANDIDATE_SOURCES)]
    with torch.no_grad():
        found = [(case, options, search(family, candidates, options)) for case, options in CASES]
    usable = [i for i in range(len(candidates))
              if all(None not in results[i][0] for _, _, results in found)][:SOURCES]
    assert len(usable) == SOURCES, f"{name}: {len(usable)} sources end before the limit in every case"
    cases = [{"name": case, "options": options, "outputs": [results[i][0] for i in usable],
              "scores": [results[i][1] for i in usable], "first_k": [results[i][2] for i in usable]}
             for case, options, results in found]
    margin = min(results[i][3] for _, _, results in found for i in usable)
    assert margin > 1e-4, f"{name}: greedy's top two scores are {margin} apart: a tie"
    first_k_cases = sum(f is not None for c in cases for f in c["first_k"])
    return {"eos_id": family.eos, "pad_id": family.pad, "sources": [candidates[i] for i in usable],
            "min_top2_margin": margin, "first_k_cases": first_k_cases, "cases": cases}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    refs = {"transformers_version": transformers.__version__, "max_new_tokens": MAX_NEW}
    summary = []
    for k, (name, build) in enumerate(MODELS):
        refs[name] = model_refs(name, build, 50 + 10 * k, args.out)
        lengths = [len(h) for c in refs[name]["cases"] for hyps in c["outputs"] for h in hyps]
        summary.append(f"{name}: lengths {min(lengths)}..{max(lengths)}, margin {refs[name]['min_top2_margin']:.4f}, "
                       f"{refs[name]['first_k_cases']} first_k")
    with open(os.path.join(args.out, "hf_seq2seq_search_refs.json"), "w") as f:
        json.dump(refs, f)
    print(f"make_seq2seq_search_refs.py: transformers {transformers.__version__}, {len(CASES)} cases x "
          f"{SOURCES} sources; {'; '.join(summary)}")


if __name__ == "__main__":
    main()
