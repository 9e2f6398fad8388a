#!/bin/sh
# `dlcc run` on a model whose input is too large to draw at random: the
# 2 TiB input that once exited 1 with no message, and a 16 GiB one under
# a memory cap (ulimit -v), each named with its size and why.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"

printf 'model big(x: f32[512, 1024, 1024, 1024]) -> f32[512, 1024, 1024, 1024] {\n  return relu(x)\n}\n' \
  >"$tmp/big.dl"
expect_sub 1 "dlcc: error: input 'x' is 2.0 TiB (f32[512, 1024, 1024, 1024]): more than this" \
  "$dlcc" run "$tmp/big.dl" --backend=ref

# AddressSanitizer reserves terabytes of address space: no cap under it.
if grep -q '^SAN_CFLAGS = .*sanitize' "${top_builddir:-.}/Makefile" 2>/dev/null; then
  echo "files_cli.sh: the ulimit -v case is skipped in a sanitized build"
else
  printf 'model big(x: f32[4, 1024, 1024, 1024]) -> f32[4, 1024, 1024, 1024] {\n  return relu(x)\n}\n' \
    >"$tmp/big16.dl"
  expect 1 "dlcc: error: input 'x' is 16.0 GiB (f32[4, 1024, 1024, 1024]): more than this process may allocate (1.0 GiB under ulimit -v)" \
    sh -c 'ulimit -v 1048576 && exec "$@"' sh "$dlcc" run "$tmp/big16.dl" --backend=ref
fi
finish files_cli.sh
