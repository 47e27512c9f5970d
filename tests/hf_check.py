#!/usr/bin/env python3
"""hf_check.py: checks a `train_gpt export` directory with the real Hugging Face client.

usage: hf_check.py EXPORT_DIR PROMPT LOGITS_FILE GREEDY_FILE NEW_TOKENS

Run by tests/io/test_hf.cpp. It loads EXPORT_DIR with transformers'
GPT2LMHeadModel.from_pretrained (CPU, fp32) and checks that
  - safetensors reads the file and its metadata says format "pt";
  - lm_head is tied to wte;
  - the logits of PROMPT (its bytes are the token ids: byte-level vocabulary) match
    LOGITS_FILE, which `train_gpt sample --logits` wrote (fp32, len(PROMPT) x vocab_size):
    prints "max_abs_diff X" and fails above 1e-4;
  - greedy generation of NEW_TOKENS tokens after PROMPT prints what GREEDY_FILE holds, the
    output of `train_gpt sample --temperature 0 --tokens NEW_TOKENS` (prompt included).
Exits 0 when all hold, 1 otherwise (the reason on stderr).
"""
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from transformers import GPT2LMHeadModel

TOLERANCE = 1e-4


def fail(msg):
    print("hf_check: " + msg, file=sys.stderr)
    sys.exit(1)


def printable(ids):
    """The bytes `train_gpt sample` prints for these ids with its byte tokenizer: ids past
    255 print as nothing, control bytes and bytes past 0x7e as \\xNN (train_gpt keeps valid
    UTF-8 sequences whole; the toy model here writes ASCII)."""
    out = b""
    for i in ids:
        if i > 255:
            continue
        if 0x20 <= i < 0x7F or i in (9, 10):
            out += bytes([i])
        else:
            out += b"\\x%02x" % i
    return out


def main():
    if len(sys.argv) != 6:
        fail(__doc__.splitlines()[2])
    export_dir, prompt, logits_file, greedy_file, new_tokens = sys.argv[1:]
    with safe_open(os.path.join(export_dir, "model.safetensors"), framework="pt") as f:
        if f.metadata().get("format") != "pt":
            fail("metadata %r lacks format pt" % f.metadata())
    model = GPT2LMHeadModel.from_pretrained(export_dir).eval()
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        fail("lm_head is not tied to wte")

    ids = list(prompt.encode())
    vocab = model.config.vocab_size
    ours = np.fromfile(logits_file, dtype="<f4")
    if ours.size != len(ids) * vocab:
        fail("%s holds %d floats, expected %d x %d" % (logits_file, ours.size, len(ids), vocab))
    ours = ours.reshape(len(ids), vocab)
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0].numpy()
    diff = float(np.max(np.abs(theirs - ours)))
    print("max_abs_diff %.3g (logits of %d positions x %d ids, largest |logit| %.3g)"
          % (diff, len(ids), vocab, float(np.max(np.abs(ours)))))
    if not diff <= TOLERANCE:
        fail("logits differ by %g > %g" % (diff, TOLERANCE))

    with open(greedy_file, "rb") as f:
        want = f.read().rstrip(b"\n")
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)),
                             max_new_tokens=int(new_tokens), do_sample=False, pad_token_id=0)
    got = printable(out[0].tolist())
    print("greedy: " + got.decode(errors="replace"))
    if got != want:
        fail("greedy generation %r differs from train_gpt's %r" % (got, want))


if __name__ == "__main__":
    main()
