"""What the reference scripts of imported translation models share (make_marian_refs.py,
make_t5_refs.py): teacher-forced log-probabilities and greedy generation with transformers."""

import torch


def log_probs(model, source_ids, target_ids):
    """Per pair, the sum over the target ids (EOS included) of log p, teacher forced from the
    decoder start (model(input_ids, labels=target_ids)), in double precision."""
    out = []
    with torch.no_grad():
        for s, t in zip(source_ids, target_ids):
            logits = model(input_ids=torch.tensor([s]), labels=torch.tensor([t])).logits[0]
            lp = torch.log_softmax(logits.double(), dim=-1)
            out.append(float(sum(lp[i, tok] for i, tok in enumerate(t))))
    return out


def greedy(model, source, new_tokens):
    """generate(num_beams=1) of one source: the ids after the decoder start, and the smallest
    top-1 minus top-2 score over its steps but the last (a tie there would make the reference
    depend on rounding)."""
    out = model.generate(torch.tensor([source]), num_beams=1, do_sample=False, max_new_tokens=new_tokens,
                         synced_gpus=False, output_scores=True, return_dict_in_generate=True)
    ids = out.sequences[0, 1:].tolist()
    margin = min(float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores[:-1]) \
        if len(out.scores) > 1 else float("inf")
    return ids, margin


def train(model, pairs, pad, seed, steps, lr=3e-3):
    """`steps` Adam steps on (source ids, target ids) pairs, one padded batch (labels -100 past each
    target), so that a random model's outputs have varied lengths and end with EOS; eval mode after."""
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    width_s = max(len(s) for s, _ in pairs)
    width_t = max(len(t) for _, t in pairs)
    src = torch.tensor([s + [pad] * (width_s - len(s)) for s, _ in pairs])
    labels = torch.tensor([t + [-100] * (width_t - len(t)) for _, t in pairs])
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(input_ids=src, attention_mask=(src != pad).long(), labels=labels).loss.backward()
        optimizer.step()
    model.eval()
