#!/usr/bin/env bash
# llmc_prepare.sh: makes .anchors/llm.c, the folder a GPU call carries so that the llmc stage
# of scripts/gpu/gpu_check.sh (scripts/gpu/gpu_check_llmc.sh) can build and time llm.c
# (Karpathy's train_gpt2.cu, MIT) beside train_gpt on the same machine, model, B x T and data.
# Run it here, before the call: the lent machine has no package registry and `../shared`
# does not travel with the working tree.
#
#   bash scripts/gpu/llmc_prepare.sh [--input TEXT] [--anchor DIR] [--train-gpt BIN] [--no-cudnn]
#
#   --input TEXT      the text to tokenise (default: tinyshakespeare.txt or
#                     data/tinyshakespeare.txt, as README.md fetches it; else this workplace's
#                     copy in ../shared/data)
#   --anchor DIR      llm.c's sources (default ../shared/anchors/llm.c)
#   --train-gpt BIN   a built train_gpt, any build (default ./train_gpt, else build/gpu-sm90/)
#   --no-cudnn        leave out the cudnn-frontend headers (the stage then skips the cuDNN build)
#
# What lands in .anchors/llm.c (git ignores .anchors; made as .anchors/llm.c.new, moved into
# place once complete, so a failed run keeps the last good folder):
#   - llm.c's sources, copied as they are (train_gpt2.cu, Makefile, LICENSE, llmc/), and
#     SOURCES.sha256 naming each file's hash, so a reader can check they are unmodified. (CUDA
#     13 needs one compatibility header, scripts/gpu/llmc_cuda13.h, which the build
#     force-includes; the sources themselves are not patched.)
#   - data/: GPT-2 token shards of the text in llm.c's shard format and gpt2_tokenizer.bin,
#     both written by `train_gpt prepare text --tokenizer gpt2 --split paragraphs` (as llm.c's
#     tinyshakespeare script splits it), then checked here against llm.c's llmc/dataloader.h
#     (magic 20240520, version 1, token count, file size 1024 + 2 x count, at least
#     B x T + 1 = 8193 tokens a shard for B 8 x T 1024) and llmc/tokenizer.h (magic 20240328);
#     gpt2_tokenizer.bin is also copied beside train_gpt2.cu, where llm.c opens it.
#   - cudnn-frontend/include: the header-only cudnn-frontend (the nvidia-cudnn-frontend
#     wheel's include/, pinned below, by `pip download`), for llm.c's USE_CUDNN=1 build, at the
#     path llm.c's Makefile looks for; left out, with a line, where pip cannot fetch it or
#     .deps/include already holds cudnn_frontend.h.
# Last, the sizes of .anchors, .deps and .prebuilt against the device tool's 64 MiB carry
# limit (the tracked tree travels too).
set -euo pipefail
cd "$(dirname "$0")/../.."

ANCHOR=../shared/anchors/llm.c
INPUT=""
TG=""
CUDNN=1
FINAL=.anchors/llm.c
NEW=.anchors/llm.c.new  # made here, moved into place once complete: a failure keeps the old one
DEST=$NEW
FRONTEND_VERSION=1.32.0  # the version whose headers llm.c's cudnn_att.cpp was compiled with here
while [ $# -gt 0 ]; do
  case $1 in
    --input) INPUT=$2; shift 2 ;;
    --anchor) ANCHOR=$2; shift 2 ;;
    --train-gpt) TG=$2; shift 2 ;;
    --no-cudnn) CUDNN=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "llmc_prepare: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "llmc_prepare: $*" >&2; exit 1; }

[ -f "$ANCHOR/train_gpt2.cu" ] && [ -f "$ANCHOR/Makefile" ] && [ -d "$ANCHOR/llmc" ] ||
  die "no llm.c sources at $ANCHOR (train_gpt2.cu, Makefile, llmc/): name them with --anchor"
trap 'rm -rf "$NEW"' EXIT
if [ -z "$INPUT" ]; then
  for f in tinyshakespeare.txt data/tinyshakespeare.txt ../shared/data/tinyshakespeare.txt; do
    [ -f "$f" ] && { INPUT=$f; break; }
  done
  [ -n "$INPUT" ] || die "no tinyshakespeare.txt here or in data/ (README.md, 'Training on your own text', fetches it); or name a text with --input"
fi
if [ -z "$TG" ]; then
  for f in ./train_gpt build/gpu-sm90/train_gpt; do [ -x "$f" ] && { TG=$f; break; }; done
  [ -n "$TG" ] || die "no train_gpt built (make), or name one with --train-gpt"
fi
[ -f data/gpt2/vocab.json ] && [ -f data/gpt2/merges.txt ] ||
  die "no GPT-2 vocabulary in data/gpt2 (scripts/setup.sh --gpt2)"

# 1. llm.c's sources, as they are.
rm -rf "$DEST"
mkdir -p "$DEST"
cp -r "$ANCHOR"/train_gpt2.cu "$ANCHOR"/Makefile "$ANCHOR"/llmc "$DEST"/
[ -f "$ANCHOR/LICENSE" ] && cp "$ANCHOR/LICENSE" "$DEST/"
chmod -R u+w "$DEST"  # the anchor may be read-only: so that the next run can remove the copy
( cd "$DEST" && find . -type f ! -name SOURCES.sha256 | sort | xargs sha256sum >SOURCES.sha256 )
echo "llmc_prepare: llm.c's sources from $ANCHOR ($(wc -l <"$DEST/SOURCES.sha256") files, hashes in $DEST/SOURCES.sha256)"

# 2. The data: GPT-2 token shards in llm.c's format, and its tokenizer file.
name=$(basename "${INPUT%.*}")
"$TG" prepare text --input "$INPUT" --tokenizer gpt2 --split paragraphs --out "$DEST/data" \
  --name "$name" >"$DEST/data.log" 2>&1 || { cat "$DEST/data.log" >&2; die "train_gpt prepare text failed"; }
cp "$DEST/data/gpt2_tokenizer.bin" "$DEST/gpt2_tokenizer.bin"

# The header words of a file, little-endian int32 (od reads the machine's order: x86 here).
words() { od -An -t d4 -N $((4 * $2)) "$1" | xargs; }
check_shard() {  # llm.c's dataloader_load_shard_ and dataloader_init checks, and B x T + 1
  local f=$1 w magic version ntok size
  read -ra w <<<"$(words "$f" 3)"
  magic=${w[0]} version=${w[1]} ntok=${w[2]}
  size=$(stat -c %s "$f")
  [ "$magic" = 20240520 ] || die "$f: magic $magic, llm.c's dataloader.h wants 20240520"
  [ "$version" = 1 ] || die "$f: version $version, llm.c's dataloader.h wants 1 (uint16 tokens)"
  [ "$size" = $((1024 + 2 * ntok)) ] || die "$f: $size bytes, llm.c expects 1024 + 2 x $ntok"
  [ "$ntok" -ge 8193 ] || die "$f: $ntok tokens, llm.c needs B x T + 1 = 8193 a shard at B 8 x T 1024"
  echo "llmc_prepare: $f: magic $magic, version $version, $ntok tokens, $size bytes: llm.c's format"
}
shopt -s nullglob
shards=("$DEST"/data/"$name"_train_*.bin "$DEST"/data/"$name"_val_*.bin)
[ ${#shards[@]} -ge 2 ] || die "no train and val shards in $DEST/data"
for f in "${shards[@]}"; do check_shard "$f"; done
read -ra w <<<"$(words "$DEST/gpt2_tokenizer.bin" 3)"
[ "${w[0]}" = 20240328 ] && [ "${w[1]}" = 2 ] && [ "${w[2]}" = 50257 ] ||
  die "gpt2_tokenizer.bin: header ${w[*]}, llm.c's tokenizer.h wants 20240328, version 2, 50257 tokens"
echo "llmc_prepare: gpt2_tokenizer.bin: magic 20240328, version 2, 50257 tokens: llm.c's format"

# 3. cudnn-frontend's headers for the USE_CUDNN=1 build (llm.c's Makefile looks for
# cudnn-frontend/include beside itself).
if [ "$CUDNN" = 0 ]; then
  echo "llmc_prepare: cudnn-frontend left out (--no-cudnn): the stage skips llm.c's cuDNN build"
elif [ -f .deps/include/cudnn_frontend.h ]; then
  echo "llmc_prepare: cudnn-frontend: .deps/include has it (the stage links it there)"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp" "$NEW"' EXIT
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --dest "$tmp" "nvidia-cudnn-frontend==$FRONTEND_VERSION" \
    >"$tmp/pip.log" 2>&1 && python3 - "$tmp" "$DEST/cudnn-frontend" <<'PY'
import glob, os, sys, zipfile
whl = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    z.extractall(sys.argv[2], names)
print(f"llmc_prepare: cudnn-frontend {os.path.basename(whl)}: {len(names)} headers")
PY
  then :
  else
    tail -3 "$tmp/pip.log" >&2
    rm -rf "$DEST/cudnn-frontend"
    echo "llmc_prepare: cudnn-frontend not fetched (pip): the stage will skip llm.c's cuDNN build"
  fi
fi

rm -rf "$FINAL"
mv "$NEW" "$FINAL"
DEST=$FINAL

# 4. What travels, against the 64 MiB the device tool carries (tracked files count too).
mib() { du -sm "$1" 2>/dev/null | cut -f1; }
total=0
for d in .anchors .deps .prebuilt; do
  s=$( [ -e "$d" ] && du -sk "$d" | cut -f1 || echo 0)
  total=$((total + s))
  echo "llmc_prepare: $d: $((s / 1024)) MiB ($s KiB)"
done
tracked=$(git ls-files -z 2>/dev/null | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
echo "llmc_prepare: carried folders $((total / 1024)) MiB, tracked files ${tracked:-?} KiB; the limit is 64 MiB in all"
[ $((total + ${tracked:-0})) -lt $((64 * 1024)) ] || echo "llmc_prepare: WARNING: over the 64 MiB carry limit" >&2
echo "llmc_prepare: done; carry .anchors (with .deps and .prebuilt)"
