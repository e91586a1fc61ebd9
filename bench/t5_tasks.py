#!/usr/bin/env python3
"""The tasks of the T5 text-to-text run on the Bible corpus (bench/t5_text_to_text.sh, issue 35):
every task written as text with a prefix, as T5 does, so that one encoder-decoder learns them all.

    python3 bench/t5_tasks.py prepare --corpus data/bible --classes data/bible_classes --out DIR
    python3 bench/t5_tasks.py evaluate --qkv build/qkv --tasks DIR --checkpoint RUN/last \
        --metrics RUN/metrics.jsonl [--task es_en ...] [--threads N]

Tasks (source -> target):
    es_en    "translate Spanish to English: <verse in Spanish>"  -> the English verse   (BLEU)
    en_es    "translate English to Spanish: <verse in English>"  -> the Spanish verse   (BLEU)
    classes  "book group: <verse in English>"                    -> its book's group,   (accuracy)
             one of law, history, wisdom, prophets, gospels, epistles, apocalypse
             (scripts/prepare_bible_classes.py)

prepare writes DIR/train.<task>.tsv (source<TAB>target), DIR/train.all.tsv (the three, interleaved
line by line so that every stretch of the file has each task), and DIR/dev.<task>.{src,tgt}:
translation dev is Mark (prepare_bible_corpus.py's dev book), classification dev the chapters
ending in 5 of every book (prepare_bible_classes.py's). So that no dev text is a training input of
another task, the classification training set leaves out Mark's verses (the translation dev book),
and the translation training set is prepare_bible_corpus.py's, which never has Mark; the English
of the classification dev chapters is still a translation target in training (the books other
than Mark and John), which a multi-task model sees and a single-task classifier does not: that is
part of what multi-task training gives.

evaluate translates each task's dev sources with the checkpoint (beam 4, length penalty 1 for the
translations; greedy for the labels), scores them (`qkv bleu`; exact-match accuracy), prints one
line per task and appends to the run's metrics.jsonl one record per task:
    {"event": "task_eval", "step": S, "task": "es_en", "split": "dev", "metric": "bleu",
     "value": 21.3, "sentences": 678, "checkpoint": "last"}
(qkv plot draws "step" and "validation" records and skips the others.)
"""

import argparse
import json
import os
import subprocess
import sys

PREFIX = {
    "es_en": "translate Spanish to English: ",
    "en_es": "translate English to Spanish: ",
    "classes": "book group: ",
}
METRIC = {"es_en": "bleu", "en_es": "bleu", "classes": "accuracy"}
TRANSLATION_DEV_BOOK = "Mark"


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write_lines(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            if "\t" in row[0] or "\t" in row[1] or "\n" in row[0] + row[1]:
                raise ValueError(f"{path}: a tab or newline inside {row!r}")
            f.write("\t".join(row) + "\n")
    os.replace(tmp, path)


def translation_pairs(corpus, split):
    es, en = read_lines(os.path.join(corpus, f"{split}.es")), read_lines(os.path.join(corpus, f"{split}.en"))
    if len(es) != len(en):
        sys.exit(f"t5_tasks.py: {corpus}/{split}.es has {len(es)} lines, {split}.en {len(en)}")
    return list(zip(es, en))


def class_pairs(classes, split, leave_out_book=None):
    rows = read_lines(os.path.join(classes, f"{split}.tsv"))
    refs = read_lines(os.path.join(classes, f"{split}.ids"))
    if len(rows) != len(refs):
        sys.exit(f"t5_tasks.py: {classes}/{split}.tsv and {split}.ids differ in length")
    pairs = []
    for row, ref in zip(rows, refs):
        label, _, verse = row.partition("\t")
        if ref.rpartition(" ")[0] != leave_out_book:
            pairs.append((verse, label))
    return pairs


def interleave(*lists):
    """Line i of each list in turn, the longer lists' tails at the end."""
    out = []
    for i in range(max(len(x) for x in lists)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def prepare(args):
    os.makedirs(args.out, exist_ok=True)
    train_tr, dev_tr = translation_pairs(args.corpus, "train"), translation_pairs(args.corpus, "dev")
    tasks = {
        "es_en": ([(PREFIX["es_en"] + es, en) for es, en in train_tr], [(PREFIX["es_en"] + es, en) for es, en in dev_tr]),
        "en_es": ([(PREFIX["en_es"] + en, es) for es, en in train_tr], [(PREFIX["en_es"] + en, es) for es, en in dev_tr]),
        "classes": ([(PREFIX["classes"] + v, l) for v, l in class_pairs(args.classes, "train", TRANSLATION_DEV_BOOK)],
                    [(PREFIX["classes"] + v, l) for v, l in class_pairs(args.classes, "dev")]),
    }
    for name, (train, dev) in tasks.items():
        write_lines(os.path.join(args.out, f"train.{name}.tsv"), train)
        with open(os.path.join(args.out, f"dev.{name}.src"), "w", encoding="utf-8") as f:
            f.writelines(s + "\n" for s, _ in dev)
        with open(os.path.join(args.out, f"dev.{name}.tgt"), "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for _, t in dev)
        print(f"{name}: {len(train)} training pairs, {len(dev)} dev")
    write_lines(os.path.join(args.out, "train.all.tsv"), interleave(*(t for t, _ in tasks.values())))


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def majority(labels):
    """The commonest label and the accuracy, in percent, of answering it every time."""
    counts = {}
    for label in labels:
        counts[label.strip()] = counts.get(label.strip(), 0) + 1
    label = max(sorted(counts), key=counts.get)
    return label, 100.0 * counts[label] / len(labels)


def evaluate(args):
    with open(os.path.join(args.checkpoint, "train_state.json")) as f:
        step = json.load(f)["step"]
    for task in args.task:
        src, tgt = (os.path.join(args.tasks, f"dev.{task}.{side}") for side in ("src", "tgt"))
        beam = "1" if METRIC[task] == "accuracy" else "4"
        hyp = run([args.qkv, "translate", "--checkpoint", args.checkpoint, "--input", src, "--beam-size", beam,
                   "--length-penalty", "1.0", "--threads", str(args.threads), "--quiet"])
        hyps, refs = hyp.splitlines(), read_lines(tgt)
        if len(hyps) != len(refs):
            sys.exit(f"t5_tasks.py: {len(hyps)} outputs for {len(refs)} lines of {src}")
        if METRIC[task] == "bleu":
            value = json.loads(run([args.qkv, "bleu", "--json", tgt], input=hyp))["score"]
        else:
            value = 100.0 * sum(h.strip() == r.strip() for h, r in zip(hyps, refs)) / len(refs)
        record = {"event": "task_eval", "step": step, "task": task, "split": "dev", "metric": METRIC[task],
                  "value": round(value, 2), "sentences": len(refs), "checkpoint": os.path.basename(args.checkpoint)}
        baseline = ""
        if METRIC[task] == "accuracy":  # what always answering the commonest label scores
            label, share = majority(refs)
            record["majority_label"], record["majority_accuracy"] = label, round(share, 2)
            baseline = f"; always '{label}': {share:.2f}"
        with open(args.metrics, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{task:8s} dev {METRIC[task]:8s} {value:6.2f}  ({len(refs)} lines, step {step}{baseline})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--corpus", required=True)
    p.add_argument("--classes", required=True)
    p.add_argument("--out", required=True)
    e = sub.add_parser("evaluate")
    e.add_argument("--qkv", required=True)
    e.add_argument("--tasks", required=True, help="prepare's --out")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--metrics", required=True)
    e.add_argument("--task", action="append", choices=sorted(PREFIX), help="repeatable (default: all)")
    e.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    if args.command == "prepare":
        prepare(args)
    else:
        args.task = args.task or list(PREFIX)
        evaluate(args)


if __name__ == "__main__":
    main()
