#!/bin/sh
# make check: tests/gpu/layer_bench without a GPU, so that a mistake in it
# fails here and not in the GPU machine's few minutes: every cuBLAS and
# cuDNN function it calls resolves, and on the emu device LeNet's layers
# (f16 and int8, each compiled alone), its whole run (f32) and attention
# forward and backward (f16, tf32) go through the same code as on cuda,
# each with a time.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
bench=$b/tests/gpu/layer_bench
"$bench" symbols || exit 1
out=$("$bench" layers "$s/examples/lenet.dl" --backend=emu --batches=1 --modes=f16,int8 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || exit 1
# LeNet has 2 convolutions and 3 linear layers: 5 rows a mode, each timed.
rows=$(echo "$out" | grep -cE '^(conv|linear) .*[0-9] +[0-9.]+ +[0-9.]+ +[0-9.]+%')
if [ "$rows" != 10 ]; then
  echo "FAIL layer_bench: $rows timed layer rows, expected 10"
  exit 1
fi
out=$("$bench" model "$s/examples/lenet.dl" --backend=emu --batches=2 --modes=f32 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] && echo "$out" | grep -qE '^model f32 +N=2 +[0-9.]+ ms$' || exit 1
# attention forward and backward at one small shape, causal and not
# (f16, and f32 under --tf32)
out=$("$bench" attention --backend=emu --batches=1 --heads=2 --seqs=20 --dims=16 --modes=f16,tf32 2>&1)
rc=$?
echo "$out"
rows=$(echo "$out" | grep -cE '^attention (f16 |tf32) +N=1 H=2 S=20 d=16 causal=[01]  fwd +[0-9.]+ us .*  bwd +[0-9.]+ us')
[ $rc = 0 ] && [ "$rows" = 4 ] || { echo "FAIL layer_bench attention: $rows timed rows, expected 4"; exit 1; }
