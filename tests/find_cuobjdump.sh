# Sourced by the SASS tests (sass_check.sh, tc_sass.sh): sets cuobjdump
# to $CUOBJDUMP, the one on PATH, or the one of python3's nvidia package
# (PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm put both in
# site-packages/nvidia/cu13/bin), puts its folder first on PATH (for
# nvdisasm), or exits 77 saying how to get it.  $find_cuobjdump_for
# names the test (dash's `.` takes no arguments, so not $1).
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$cuobjdump" ] && command -v python3 >/dev/null; then
  for d in $(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do
    [ -x "$d/cu13/bin/cuobjdump" ] && cuobjdump=$d/cu13/bin/cuobjdump && break
  done
fi
if [ -z "$cuobjdump" ] || [ ! -x "$cuobjdump" ]; then
  echo "${find_cuobjdump_for:-SASS test}: no cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or set CUOBJDUMP): skipped"
  exit 77
fi
PATH=$(dirname "$cuobjdump"):$PATH
export PATH
