#!/bin/sh
# dlcc on inputs that overflowed its stack, with the stack a small-stack
# thread would have (ulimit -s 1024): located errors and exit 1, or a
# compile, never a signal.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
small() { (ulimit -s 1024 && exec "$@"); }

# The 10,001-term sums of the report that found it.
{ printf 'let A = 1'; i=0; while [ $i -lt 10000 ]; do printf '+1'; i=$((i + 1)); done
  printf '\nmodel m(x: f32[4]) -> f32[4] {\n  return x\n}\n'; } >"$tmp/let.dl"
expect_sub 1 "let.dl:1:408: error: expression nests deeper than 200" small "$dlcc" "$tmp/let.dl"
{ printf 'model m(x: f32[4]) -> f32[4] {\n  return x'; i=0; while [ $i -lt 10000 ]; do printf '+x'; i=$((i + 1)); done
  printf '\n}\n'; } >"$tmp/ret.dl"
expect_sub 1 "ret.dl:2:409: error: expression nests deeper than 200" small "$dlcc" "$tmp/ret.dl"

# A chain of 20,000 nodes in IR text through every pass and codegen, and
# printed back as IR, DOT and CUDA.
{ printf 'graph g {\n  %%0 = input {name="x"} : f32[4]\n'; i=1
  while [ $i -le 20000 ]; do printf '  %%%d = relu %%%d : f32[4]\n' $i $((i - 1)); i=$((i + 1)); done
  printf '  return %%20000 as "y"\n}\n'; } >"$tmp/chain.ir"
for emit in ir dot cuda plan; do
  expect_sub 0 "" small "$dlcc" "$tmp/chain.ir" --emit=$emit -o "$tmp/out.$emit"
done
sed '/= relu/s/$/ #k0/' "$tmp/chain.ir" >"$tmp/group.ir"
expect_sub 1 "verifier: relu %20000: fusion group k0 has 20000 members, more than 256" \
  small "$dlcc" "$tmp/group.ir" -O0 --emit=plan

finish limits_cli
