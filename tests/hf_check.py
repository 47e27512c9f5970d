#!/usr/bin/env python3
"""hf_check.py: checks a `train_gpt export` directory with the real Hugging Face client.

usage: hf_check.py EXPORT_DIR PROMPT LOGITS_FILE GREEDY_TEXT

Run by tests/test_hf.cpp. It loads EXPORT_DIR with transformers'
GPT2LMHeadModel.from_pretrained (CPU, fp32) and checks that
  - safetensors reads the file and its metadata says format "pt";
  - lm_head is tied to wte;
  - the logits of PROMPT (its bytes are the token ids: byte-level vocabulary) match
    LOGITS_FILE, which `train_gpt sample --logits` wrote (fp32, len(PROMPT) x vocab_size):
    prints "max_abs_diff X" and fails above 1e-4;
  - greedy generation from PROMPT gives GREEDY_TEXT (`train_gpt sample --temperature 0`).
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


def main():
    if len(sys.argv) != 5:
        fail("usage: hf_check.py EXPORT_DIR PROMPT LOGITS_FILE GREEDY_TEXT")
    export_dir, prompt, logits_file, greedy_text = sys.argv[1:]
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

    want = list(greedy_text.encode())
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)),
                             max_new_tokens=len(want) - len(ids), do_sample=False,
                             pad_token_id=0)
    # train_gpt's byte tokenizer prints ids beyond 255 as nothing; so do we.
    got = [i for i in out[0].tolist() if i < 256]
    print("greedy: " + bytes(got).decode(errors="replace"))
    if got != want:
        fail("greedy generation %r differs from train_gpt's %r" % (bytes(got), bytes(want)))


if __name__ == "__main__":
    main()
