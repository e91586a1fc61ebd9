#!/usr/bin/env python3
"""Reference data for the search every family shares (src/qkv/decoding/beam.h, constraints.h) on a
causal LM: a random Hugging Face GPT-2 built by `transformers` (GPT2LMHeadModel from a GPT2Config;
nothing is downloaded) and what its `generate` gives with beam search and the token rules.

Usage: /usr/bin/python3 tests/python/make_gpt_search_refs.py --out DIR

The model: GPT2Config(vocab_size 48, n_embd 32, n_head 4, n_layer 2, n_positions 64, gelu_new,
bos = eos = 47, tied lm_head), redrawn with larger weights (embeddings N(0, 0.5^2), Conv1D N(0, 1/in))
so that the top scores of every step are far apart, and EOS's embedding scaled by 2.5 so that beams
end with EOS within a few tokens, not only at the limit. A small vocabulary: EOS is among the
candidates often.

Writes (deterministic):
  DIR/hf_gpt2_search/         save_pretrained(safe_serialization=True) (config.json, model.safetensors)
  DIR/hf_gpt2_search_refs.json
      prompts                 8 prompts (token ids, lengths 1..9), each searched alone (no padding)
      cases                   a list; each with
        name, options         the generate() keywords beyond input_ids (max_new_tokens, num_beams,
                              early_stopping=True, length_penalty, num_return_sequences,
                              repetition_penalty, no_repeat_ngram_size, min_new_tokens, do_sample=False)
        outputs               per prompt, num_return_sequences hypotheses best first: the new ids
                              without the prompt, the final EOS and the padding after it
        ended_with_eos        per prompt and hypothesis: whether it ended with EOS
        scores                per prompt and hypothesis: sequences_scores (beam search only)
      eos_endings             how many beam hypotheses over all cases ended with EOS (asserted > 0)
"""

import argparse
import json
import os
import sys

import torch

try:
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # pragma: no cover
    sys.exit(f"make_gpt_search_refs.py: {e}: install transformers with scripts/install_deps.sh")

VOCAB = 48
EOS = 47
PROMPT_LENGTHS = [1, 3, 5, 2, 9, 4, 7, 6]

BEAM = dict(do_sample=False, num_beams=4, early_stopping=True)
CASES = [
    ("beam4", dict(BEAM, max_new_tokens=10, length_penalty=1.0, num_return_sequences=1)),
    ("beam4_nbest3_lp06", dict(BEAM, max_new_tokens=10, length_penalty=0.6, num_return_sequences=3)),
    ("beam4_lp0", dict(BEAM, max_new_tokens=6, length_penalty=0.0, num_return_sequences=2)),
    ("beam4_repetition", dict(BEAM, max_new_tokens=10, repetition_penalty=1.8, num_return_sequences=1)),
    ("beam4_no_repeat_2", dict(BEAM, max_new_tokens=12, no_repeat_ngram_size=2, num_return_sequences=2)),
    ("beam4_min_new_5", dict(BEAM, max_new_tokens=10, min_new_tokens=5, num_return_sequences=2)),
    ("beam3_all_rules", dict(BEAM, num_beams=3, max_new_tokens=12, repetition_penalty=1.3, no_repeat_ngram_size=3,
                             min_new_tokens=3, length_penalty=1.5, num_return_sequences=3)),
    ("greedy_repetition", dict(do_sample=False, num_beams=1, max_new_tokens=12, repetition_penalty=2.0)),
    ("greedy_no_repeat_2", dict(do_sample=False, num_beams=1, max_new_tokens=12, no_repeat_ngram_size=2)),
    ("greedy_min_new_6", dict(do_sample=False, num_beams=1, max_new_tokens=12, min_new_tokens=6)),
]


def redraw(model):
    g = torch.Generator().manual_seed(31)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("wte.weight") or name.endswith("wpe.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith(".weight") and p.dim() == 2:  # Conv1D (in, out)
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[0] ** 0.5)
            elif "ln_" in name and name.endswith(".weight"):
                p.copy_(1 + torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        model.transformer.wte.weight[EOS] *= 2.5


def search(model, prompt, options):
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), pad_token_id=EOS, synced_gpus=False, output_scores=True,
                         return_dict_in_generate=True, **options)
    outputs, ended, scores = [], [], []
    for i, seq in enumerate(out.sequences.tolist()):
        new = seq[len(prompt):]
        eos = EOS in new
        if eos:
            new = new[:new.index(EOS)]
        outputs.append(new)
        ended.append(eos)
        if options.get("num_beams", 1) > 1:
            scores.append(float(out.sequences_scores[i]))
    return outputs, ended, scores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    hf_dir = os.path.join(args.out, "hf_gpt2_search")
    os.makedirs(hf_dir, exist_ok=True)
    torch.manual_seed(30)
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_head=4, n_layer=2, n_positions=64, n_inner=None,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=EOS,
                        eos_token_id=EOS)
    model = GPT2LMHeadModel(config)
    redraw(model)
    model.eval()
    model.save_pretrained(hf_dir, safe_serialization=True)

    g = torch.Generator().manual_seed(32)
    prompts = [torch.randint(0, EOS, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    cases, eos_endings = [], 0
    with torch.no_grad():
        for name, options in CASES:
            results = [search(model, p, options) for p in prompts]
            cases.append({"name": name, "options": options, "outputs": [r[0] for r in results],
                          "ended_with_eos": [r[1] for r in results], "scores": [r[2] for r in results]})
            if options.get("num_beams", 1) > 1:
                eos_endings += sum(sum(r[1]) for r in results)
    assert eos_endings > 0, "no beam hypothesis ended with EOS: the EOS rule would go untested"
    refs = {"transformers_version": transformers.__version__, "eos_id": EOS, "prompts": prompts, "cases": cases,
            "eos_endings": eos_endings}
    with open(os.path.join(args.out, "hf_gpt2_search_refs.json"), "w") as f:
        json.dump(refs, f)
    print(f"make_gpt_search_refs.py: transformers {transformers.__version__}, {len(CASES)} cases x {len(prompts)} "
          f"prompts, {eos_endings} beam hypotheses ended with EOS; wrote {hf_dir}")


if __name__ == "__main__":
    main()
