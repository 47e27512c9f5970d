"""tiktoken's ids for the GPT-2 tokenizer test (tests/data/test_bpe.cpp).

Builds tiktoken's "gpt2" encoding offline, from the ranks in VOCAB_DIR (vocab.json and
merges.txt, OpenAI's encoder.json and vocab.bpe) and tiktoken's own GPT-2 pattern, then
encodes each document of DOCS.json (a JSON array of strings) as ordinary text.

usage: bpe_oracle.py VOCAB_DIR DOCS.json OUT.json
"""
import json
import sys

from tiktoken import Encoding
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str


def main() -> None:
    vocab_dir, docs_path, out_path = sys.argv[1:4]
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=f"{vocab_dir}/merges.txt", encoder_json_file=f"{vocab_dir}/vocab.json"
    )
    enc = Encoding(
        "gpt2-offline",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
    )
    with open(docs_path, encoding="utf-8") as f:
        docs = json.load(f)
    with open(out_path, "w") as f:
        json.dump([enc.encode_ordinary(d) for d in docs], f)


if __name__ == "__main__":
    main()
