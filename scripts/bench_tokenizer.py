#!/usr/bin/env python3
"""Encoding throughput of train_gpt's GPT-2 tokenizer beside tiktoken's, on one text, in one
interleaved run (the numbers in docs/benchmarks.md come from it).

usage: scripts/bench_tokenizer.py TEXT [--repeats 5] [--python build/hf-venv/bin/python]

Both encode the same documents (TEXT split at blank lines, as `prepare text --tokenizer gpt2
--split paragraphs` splits it) as ordinary text. train_gpt's figure is the tokenizing rate
`prepare` prints (reading, checking and writing excluded); tiktoken's is encode_ordinary
over the documents (one thread) and encode_ordinary_batch (all threads), timed in a python
process that has loaded the ranks before the clock starts. The runs alternate, repeats
times; the table has each side's median MB/s and the ratio of the medians.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

TIKTOKEN = r'''
import sys, time
from tiktoken import Encoding
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str
vocab, path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
ranks = data_gym_to_mergeable_bpe_ranks(vocab + "/merges.txt", vocab + "/vocab.json")
enc = Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
               special_tokens={"<|endoftext|>": 50256})
text = open(path, encoding="utf-8").read()
docs, at = [], 0
while at < len(text):
    sep = text.find("\n\n", at)
    end = len(text) if sep < 0 else sep + 2
    docs.append(text[at:end]); at = end
t0 = time.perf_counter()
if threads == 1:
    for d in docs: enc.encode_ordinary(d)
else:
    enc.encode_ordinary_batch(docs, num_threads=threads)
print(len(text.encode()) / (time.perf_counter() - t0) / 1e6)
'''


def ours(binary, text, threads, out):
    r = subprocess.run([binary, "prepare", "text", "--input", text, "--tokenizer", "gpt2",
                        "--split", "paragraphs", "--out", out, "--threads", str(threads)],
                       capture_output=True, text=True, check=True)
    return float(re.findall(r"([0-9.]+) MB/s", r.stderr)[-1])


def theirs(python, text, threads):
    r = subprocess.run([python, "-c", TIKTOKEN, "data/gpt2", text, str(threads)],
                       capture_output=True, text=True, check=True)
    return float(r.stdout.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("text")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--python", default="build/hf-venv/bin/python")
    ap.add_argument("--binary", default="./train_gpt")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    rows = {(who, t): [] for who in ("train_gpt", "tiktoken") for t in (1, cores)}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(a.repeats):
            for t in (1, cores):
                rows[("train_gpt", t)].append(ours(a.binary, a.text, t, out))
                rows[("tiktoken", t)].append(theirs(a.python, a.text, t))
    size = os.path.getsize(a.text) / 1e6
    print(f"GPT-2 encoding of {a.text} ({size:.1f} MB), median of {a.repeats} interleaved runs\n")
    print("| threads | train_gpt MB/s | tiktoken 0.14 MB/s | ratio |\n|---:|---:|---:|---:|")
    for t in (1, cores):
        m, n = statistics.median(rows[("train_gpt", t)]), statistics.median(rows[("tiktoken", t)])
        print(f"| {t} | {m:.1f} | {n:.1f} | {m / n:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
