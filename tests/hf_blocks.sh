#!/bin/sh
# The Hugging Face transformer examples (examples/gpt2_block.dl, ...)
# against NumPy's version of each HF module's math, from the same random
# weights under HF's state_dict names, on the ref and emu backends
# (tests/hf_blocks.py). Skipped (77) without /usr/bin/python3 and NumPy.
set -u
py=/usr/bin/python3
[ -x "$py" ] && "$py" -c "import numpy" 2>/dev/null || exit 77
dlcc="${top_builddir:-.}/dlcc"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
rc=0
for m in gpt2_block llama_block bert_layer; do
  "$py" "${top_srcdir:-.}/tests/hf_blocks.py" "$m" "$dlcc" "$tmp/$m" || rc=1
done
exit $rc
