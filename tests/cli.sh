#!/bin/sh
# The dlcc command line: options, exit codes, messages, and that what
# --emit=ir writes reads back in.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
src="${top_srcdir:-.}"

expect_sub 0 "" "$dlcc" --help
grep -q "usage: dlcc" "$tmp/out" || fail "--help prints no usage"
expect_sub 0 "" "$dlcc" --version
grep -q "^dlcc [0-9]" "$tmp/out" || fail "--version prints no version"
expect_sub 1 "no input file" "$dlcc"
expect_sub 1 "unknown option '--frobnicate'" "$dlcc" --frobnicate x.dl
expect_sub 1 "cannot read '$tmp/missing.dl': No such file or directory" "$dlcc" "$tmp/missing.dl"
expect_sub 1 "cannot read '$tmp': it is a directory" "$dlcc" "$tmp"
expect_sub 1 "-D expects NAME=INTEGER, got 'N=abc'" "$dlcc" -D N=abc "$src/examples/mlp.dl"
expect_sub 1 "unknown --emit kind 'llvm'" "$dlcc" --emit=llvm "$src/examples/mlp.dl"

# A model with an error: exit 1, located message, no output file left behind.
printf 'model m(x: f32[2, 3]) -> f32[2, 3] {\n  return relu(y)\n}\n' >"$tmp/bad.dl"
expect_sub 1 "bad.dl:2:15: error:" "$dlcc" "$tmp/bad.dl" --emit=ir -o "$tmp/bad.ir"
[ -e "$tmp/bad.ir" ] && fail "a failed compile left $tmp/bad.ir behind"

# The summary, -D, and the IR written by --emit=ir reads back unchanged.
expect_sub 0 "" "$dlcc" "$src/examples/mlp.dl"
grep -q "model mlp:" "$tmp/out" || fail "no summary line: $(cat "$tmp/out")"
expect_sub 0 "" "$dlcc" -D N=3 "$src/examples/mlp.dl" --emit=ir -o "$tmp/mlp.ir"
grep -q "input {name=\"x\"} : f32\[3, 784\]" "$tmp/mlp.ir" || fail "-D N=3 did not reach the input type"
expect_sub 0 "" "$dlcc" "$tmp/mlp.ir" --emit=ir -o "$tmp/mlp2.ir"
cmp -s "$tmp/mlp.ir" "$tmp/mlp2.ir" || fail "IR read back from --emit=ir prints differently"
expect_sub 0 "" "$dlcc" "$src/examples/resnet18.dl" --emit=dot -o "$tmp/r.dot"
head -1 "$tmp/r.dot" | grep -q "^digraph" || fail "--emit=dot does not start with digraph"

# --emit=plan ends each step with its FLOPs and minimum bytes, --stats sums
# them (docs/cost.md): the MLP's three GEMMs and its bias-gelu kernels.
expect 0 "   1347644 cost: FLOPs per run" "$dlcc" -D N=1 "$src/examples/mlp.dl" --emit=plan --stats -o "$tmp/mlp.plan"
grep -q "  ; linear %3  \[802.8 kFLOP 1.6 MB\]$" "$tmp/mlp.plan" || fail "--emit=plan: no cost on the first GEMM"
grep -q "  ; gelu %4 #k0  \[5.1 kFLOP 6.1 kB\]$" "$tmp/mlp.plan" || fail "--emit=plan: no cost on the bias-gelu kernel"

# The LSTM example at -O2 (N=4, T=32, 2 layers, H=512): per layer the
# fill of h_0 and the grid barrier's words, the input projection and one
# persistent kernel for all timesteps (docs/kernels.md), with the
# embedding and the head; the embedding's gather and both layers' fills
# share one launch (independent kernels, docs/kernels.md): 6 steps (8
# with a launch each).  With --no-persistent-rnn the state fills, the
# input projection and one fused step kernel per timestep, 68 steps (72
# with a launch each, 136 when each timestep was a cuBLAS GEMM and a cell
# kernel) apart; chained (docs/kernels.md), each launch runs 4 timesteps
# with a grid barrier between them: 21 steps, 16 launches of step kernels.
expect_sub 0 "" "$dlcc" "$src/examples/lstm.dl" -O2 --emit=plan -o "$tmp/lstm.plan"
grep -q "^steps 6$" "$tmp/lstm.plan" || fail "lstm.dl: $(grep '^steps' "$tmp/lstm.plan"), 6 wanted"
[ "$(grep -c ' launch lstm_persist_' "$tmp/lstm.plan")" = 2 ] || fail "lstm.dl: not one persistent kernel per layer"
grep -q "^  kernel [0-9]* lstm_persist_[0-9]* barriers cooperative$" "$tmp/lstm.plan" ||
  fail "lstm.dl: the persistent kernel is not cooperative in the plan"
expect_sub 0 "" "$dlcc" "$src/examples/lstm.dl" -O2 --no-persistent-rnn --no-chain-launches --emit=plan \
  -o "$tmp/lstm-steps.plan"
grep -q "^steps 68$" "$tmp/lstm-steps.plan" || fail "lstm.dl --no-persistent-rnn: $(grep '^steps' "$tmp/lstm-steps.plan"), 68 wanted"
[ "$(grep -c ' launch lstm_step_' "$tmp/lstm-steps.plan")" = 64 ] ||
  fail "lstm.dl --no-persistent-rnn: not one step kernel per timestep and layer"
expect_sub 0 "" "$dlcc" "$src/examples/lstm.dl" -O2 --no-persistent-rnn --emit=plan -o "$tmp/lstm-chain.plan"
# CG_CHAIN_MAX_PHASES (6) timesteps a launch: 32 a layer in 5 and a 2
six=lstm_step__lstm_step__lstm_step__lstm_step__lstm_step__lstm_step_
grep -q "^steps 16$" "$tmp/lstm-chain.plan" && [ "$(grep -c " launch $six" "$tmp/lstm-chain.plan")" = 10 ] &&
  grep -q "^  kernel [0-9]* $six[0-9]* barriers cooperative=stride$" "$tmp/lstm-chain.plan" ||
  fail "lstm.dl --no-persistent-rnn: not 6 timesteps a chained launch: $(grep '^steps' "$tmp/lstm-chain.plan")"

# --grad (docs/training.md): a training step's gradients and the dropout
# counter's update as outputs, IR that reads back, a run, and a model
# whose output is no loss refused at the op that computes it.
printf 'model m(x: f32[2, 3]) -> f32[] {\n  return mean(dropout(relu(linear(x, 4) as fc)))\n}\n' >"$tmp/loss.dl"
expect_sub 0 "" "$dlcc" "$tmp/loss.dl" --grad --emit=ir -o "$tmp/loss.ir"
grep -q 'as "output", %[0-9]* as "fc.weight.grad", %[0-9]* as "fc.bias.grad", %[0-9]* as "dlcc.step" updates "dlcc.step"$' \
  "$tmp/loss.ir" || fail "--grad: outputs are not loss, gradients, update: $(grep return "$tmp/loss.ir")"
expect_sub 0 "" "$dlcc" "$tmp/loss.ir" --emit=ir -o "$tmp/loss2.ir"
cmp -s "$tmp/loss.ir" "$tmp/loss2.ir" || fail "the IR of a training step prints differently read back"
expect_sub 0 "" "$dlcc" run "$tmp/loss.dl" --grad --backend=ref
grep -q "^fc.weight.grad: f32\[4, 3\]" "$tmp/out" || fail "dlcc run --grad: $(cat "$tmp/out")"
expect_sub 1 "mlp.dl:8:10: error: the loss must be one float value to differentiate, but output 'probs' is f32[8, 10]" \
  "$dlcc" "$src/examples/mlp.dl" --grad

# Convolutions on the tensor cores (docs/tensorcores.md): f16 ones by
# default, with the tile the plan chose; --no-tensor-cores keeps the FMA
# kernel; f32 only with --tf32, which dlcc run takes too.
printf 'graph c {\n  %%x = input {name="x"} : f32[1, 16, 6, 6]\n  %%w = input {name="w"} : f32[32, 16, 3, 3]\n  %%y = conv2d %%x, %%w {pad=[1, 1, 1, 1]} : f32[1, 32, 6, 6]\n  return %%y as "y"\n}\n' >"$tmp/conv.ir"
expect_sub 0 "" "$dlcc" "$tmp/conv.ir" --precision=f16 --emit=plan -o "$tmp/f16.plan"
grep -q "implicit gemm, tensor cores f16 [0-9]*x[0-9]*x32, [234] stages" "$tmp/f16.plan" || fail "f16: no tensor-core tile in the plan"
expect_sub 0 "" "$dlcc" "$tmp/conv.ir" --precision=f16 --no-tensor-cores --emit=plan -o "$tmp/fma.plan"
grep -q "tensor cores" "$tmp/fma.plan" && fail "--no-tensor-cores: a tensor-core kernel"
expect_sub 0 "" "$dlcc" "$tmp/conv.ir" --emit=cuda -o "$tmp/f32.cu"
grep -q "dl_mma_tf32(&" "$tmp/f32.cu" && fail "f32 on tf32 without --tf32"
expect_sub 0 "" "$dlcc" "$tmp/conv.ir" --tf32 --emit=cuda -o "$tmp/tf32.cu"
grep -q "dl_mma_tf32(&" "$tmp/tf32.cu" || fail "--tf32: no tf32 mma"
expect_sub 0 "" "$dlcc" run "$tmp/conv.ir" --tf32 --backend=emu
grep -q "^y: f32\[1, 32, 6, 6\]" "$tmp/out" || fail "dlcc run --tf32: $(cat "$tmp/out")"
# --tf32 is PyTorch's allow_tf32 for matrix products too: the MLP's
# linears are cuBLAS GEMMs marked tf32 (CUBLAS_COMPUTE_32F_FAST_TF32),
# none without the flag.
expect_sub 0 "" "$dlcc" "$src/examples/mlp.dl" --emit=plan -o "$tmp/mlp.plan"
grep -q "gemm f32 tf32" "$tmp/mlp.plan" && fail "a tf32 gemm without --tf32"
expect_sub 0 "" "$dlcc" "$src/examples/mlp.dl" --tf32 --emit=plan -o "$tmp/mlp.plan"
[ "$(grep -c "gemm f32 tf32 m=" "$tmp/mlp.plan")" -eq 3 ] || fail "--tf32: $(grep gemm "$tmp/mlp.plan")"

finish
