#!/usr/bin/env python3
"""hf_tokenizer_check.py: a `train_gpt export` of a GPT-2-tokenized model, with its tokenizer.

usage: hf_tokenizer_check.py EXPORT_DIR PROMPT GREEDY_FILE NEW_TOKENS

Run by tests/io/test_hf.cpp. Loads EXPORT_DIR with AutoTokenizer.from_pretrained and
GPT2LMHeadModel.from_pretrained (CPU, fp32), encodes PROMPT with that tokenizer, generates
NEW_TOKENS tokens greedily, and checks that the text is what GREEDY_FILE holds: the output of
`train_gpt sample --temperature 0 --tokens NEW_TOKENS --prompt PROMPT` (prompt included),
written as train_gpt prints text (valid UTF-8 kept, other bytes and control characters but
newline and tab as \\xNN, a newline at the end). Exits 0 when it holds, 1 otherwise.
"""
import sys

from transformers import AutoTokenizer, GPT2LMHeadModel


def gpt2_byte_decoder():
    """GPT-2's printable character -> byte map (the inverse of its bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def printable(data: bytes) -> str:
    """train_gpt's printable(): valid UTF-8 sequences kept, everything else \\xNN."""
    out, i = [], 0
    while i < len(data):
        c = data[i]
        n = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 0
        ok = n > 0 and i + n <= len(data) and all(data[i + k] >> 6 == 2 for k in range(1, n))
        if ok and n == 1 and ((c < 0x20 and c not in (9, 10)) or c == 0x7F):
            ok = False
        if ok:
            out.append(data[i : i + n].decode("utf-8", errors="surrogateescape"))
            i += n
        else:
            out.append("\\x%02x" % c)
            i += 1
    return "".join(out)


def main():
    if len(sys.argv) != 5:
        print(__doc__.splitlines()[2], file=sys.stderr)
        sys.exit(2)
    export_dir, prompt, greedy_file, new_tokens = sys.argv[1:]
    tok = AutoTokenizer.from_pretrained(export_dir)
    model = GPT2LMHeadModel.from_pretrained(export_dir).eval()
    enc = tok(prompt, return_tensors="pt")
    ids = enc.input_ids
    out = model.generate(
        **enc, max_new_tokens=int(new_tokens), do_sample=False, pad_token_id=tok.eos_token_id
    )[0].tolist()
    dec = gpt2_byte_decoder()
    data = b"".join(
        t.encode() if t == "<|endoftext|>" else bytes(dec[ch] for ch in t)
        for t in tok.convert_ids_to_tokens(out)
    )
    got = printable(data) + "\n"
    with open(greedy_file, encoding="utf-8", errors="surrogateescape") as f:
        want = f.read()
    print("prompt ids %s; generated %r" % (ids[0].tolist(), got))
    if got != want:
        print("hf_tokenizer_check: transformers generated %r, train_gpt %r" % (got, want),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
