#!/bin/sh
# make check: runs every fuzz target (tests/fuzz.mk builds them) for a
# bounded time from its seeds, failing on any crash, leak, timeout, UBSan
# report or broken check (tests/fuzz/run.sh; the input is left in
# tests/fuzz/artifacts/ of the build).  FUZZ_SECONDS sets the seconds per
# target: 15 by default, 5 in a sanitized build (CI's second pass, whose
# suite is slower; the targets are the same).  Skips when configure found
# no clang with libFuzzer.
if [ -n "${FUZZ_SKIP:-}" ]; then
  echo "fuzz: skipped: $FUZZ_SKIP"
  exit 77
fi
: "${top_builddir:?}" "${top_srcdir:?}"
if [ -n "${FUZZ_SANITIZED:-}" ]; then seconds=${FUZZ_SECONDS:-5}; else seconds=${FUZZ_SECONDS:-15}; fi
# A fresh start each time: bounded runs begin from the seeds alone.
rm -rf "$top_builddir/tests/fuzz/run"
FUZZ_NO_BUILD=1 exec sh "$top_srcdir/tests/fuzz/run.sh" "$top_builddir" "$seconds" $FUZZ_TARGETS
