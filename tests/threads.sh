#!/bin/sh
# make check: the host-thread contract under ThreadSanitizer
# (tests/threads.c): one model.so, 8 threads each with its own model on
# emu, every run bit-identical to one thread's, no race reported.
# Skips where the compiler has no TSan, and in the sanitized build
# (configure says so in TSAN_SKIP: a model.so built with ASan cannot
# load into a TSan process; the normal pass runs it).  THREADS_RUNS sets
# the runs per thread: 25 here, as a run under TSan costs about 0.15 s of
# a CI core; the issue's 8 x 1,000 is `make check TESTS=tests/threads.sh
# THREADS_RUNS=1000` (20 minutes and 4 GB on two cores).
set -u
: "${top_builddir:?}" "${top_srcdir:?}"
if [ -n "${TSAN_SKIP:-}" ]; then echo "threads: skipped: $TSAN_SKIP"; exit 77; fi
b=$top_builddir
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DLCC_CACHE_DIR="$tmp/cache"
[ -n "${DLCC_EMU_HEADER:-}" ] || DLCC_EMU_HEADER="$top_srcdir/runtime/emu/dlcc_emu.h" && export DLCC_EMU_HEADER
"$b/dlcc" "$top_srcdir/tests/threads.dl" -o "$tmp/threads.so" || { echo "FAIL: dlcc -o threads.so"; exit 1; }
# The model.so finds libdlcrt.so.0 by its soname: the TSan build's first.
LD_LIBRARY_PATH="$b/tests/tsan${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$top_srcdir/tests/tsan.supp ${TSAN_OPTIONS:-}" \
  "$b/tests/tsan/threads" "$tmp/threads.so" 8 "${THREADS_RUNS:-25}"
