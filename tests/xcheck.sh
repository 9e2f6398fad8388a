#!/bin/sh
# The numpy cross-check: `dlcc run` on a ResNet block, an LSTM and a
# transformer layer against the same models written in NumPy
# (tests/xcheck/xcheck.py).  Skips (77) when no python3 with numpy exists.
set -u
dlcc="${top_builddir:-.}/dlcc"
src="${top_srcdir:-.}"

# The first python3 that has numpy: a pyenv or venv python3 may shadow
# the system's, which is where Debian's python3-numpy lives.
py=
for cand in "${PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$cand" ] || continue
  command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c 'import numpy' >/dev/null 2>&1; then py=$cand; break; fi
done
if [ -z "$py" ]; then
  if command -v python3 >/dev/null 2>&1; then
    echo "SKIP: no python3 here has numpy (apt-get install python3-numpy)"
  else
    echo "SKIP: python3 is not installed"
  fi
  exit 77
fi

exec "$py" "$src/tests/xcheck/xcheck.py" "$dlcc" "$src/tests/xcheck"
