#!/bin/sh
# NumPy check of tests/usermodels (npcheck.py): pooling, data movement,
# reductions, broadcasting and GPT's causal mask computed independently.
# Skips (77) when no python3 with numpy exists.
set -u
dlcc="${top_builddir:-.}/dlcc"
src="${top_srcdir:-.}"
py=
for cand in "${PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$cand" ] || continue
  command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c 'import numpy' >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with numpy"
  exit 77
fi
exec "$py" "$src/tests/usermodels/npcheck.py" "$dlcc" "$src/tests/usermodels"
