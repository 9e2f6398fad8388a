#!/bin/sh
# `dlcc train --plan-parallel` (driver/plan_parallel.c): on an encoder
# layer every split of 8 GPUs is listed, rows add up and come fastest
# first, the attention and MLP regions tensor parallel splits are found
# (passes/tensor_par.c's own), two nodes make the data-parallel
# all-reduce dearer than one, a T the layers do not divide is refused
# with the pass's reason, --data gives the same shapes as the model, a
# training command line takes the flag as it is, and each bad request's
# message.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
t="${top_srcdir:-.}/tests/train"

# The table's rows of $tmp/out, "split step sum" a line: the split as
# DxTxS, the step, and compute + dp + tp + p2p + bubble.
rows() {
  awk '/^  [0-9]+ x [0-9]+ x [0-9]+  / && NF >= 14 {
    printf "%sx%sx%s %s %.3f\n", $1, $3, $5, $12, $7 + $8 + $9 + $10 + $11 }' "$tmp/out"
}

expect 0 "" "$dlcc" train "$t/attn.dl" --plan-parallel --batch=64 --loss=mse
head -1 "$tmp/out" | grep -q 'not measured$' || fail "the first line does not say it is an estimate: $(head -1 "$tmp/out")"
grep -q '^  tensor parallel over 2 ranks splits 2 regions of linears (4 all-reduces a step)$' "$tmp/out" ||
  fail "the attention and MLP regions were not found: $(cat "$tmp/out")"
rows >"$tmp/rows"
[ "$(wc -l <"$tmp/rows")" -eq 10 ] || fail "expected 10 splits of 8 GPUs, got: $(cat "$tmp/rows")"
awk '{ d = $2 - $3; if (d < -0.002 || d > 0.002) bad++ } END { exit bad > 0 }' "$tmp/rows" ||
  fail "a row's parts do not add up to its step: $(cat "$tmp/rows")"
sort -s -k2,2g "$tmp/rows" | cmp -s - "$tmp/rows" || fail "the rows are not fastest first: $(cat "$tmp/rows")"
best=$(head -1 "$tmp/rows" | cut -d' ' -f1 | sed 's/x/ x /g')
grep -q "^choose: $best (data x tensor x pipeline)$" "$tmp/out" || fail "the choice is not the fastest row: $(tail -1 "$tmp/out")"
ok

# Two nodes of four: 8-way data parallel crosses InfiniBand.
dp8() { awk '$1 == 8 && $3 == 1 && $5 == 1 { print $8 }' "$tmp/out"; }
one=$(dp8)
expect 0 "" "$dlcc" train "$t/attn.dl" --plan-parallel --batch=64 --loss=mse --gpus=4 --nodes=2
two=$(dp8)
awk -v a="$one" -v b="$two" 'BEGIN { exit !(b > a) }' || fail "two nodes' all-reduce ($two ms) is not dearer than one's ($one ms)"

# A CNN whose one linear has 3 outputs: nothing splits, every T > 1
# refused with the pass's reason.
expect 0 "" "$dlcc" train "$t/cnnbn.dl" --plan-parallel --batch=64 --loss=cross_entropy --gpus=4
grep -q '^  tensor parallel over 2 ranks splits nothing: fc.weight: fc.weight has 3 output rows, not a multiple of 2$' \
  "$tmp/out" || fail "a CNN's tensor split: $(cat "$tmp/out")"
[ "$(grep -c 'not possible: fc.weight: fc.weight has 3 output rows, not a multiple of [24]$' "$tmp/out")" -eq 3 ] ||
  fail "T = 2, 4 not all refused: $(cat "$tmp/out")"

# --data binds the shapes as the model's free dims do; the training
# command's other flags change nothing.
expect 0 "" "$dlcc" train "$t/tiny.dl" --plan-parallel --batch=8 --loss=cross_entropy --gpus=2
cp "$tmp/out" "$tmp/plain"
expect 0 "" "$dlcc" train "$t/tiny.dl" --data "$t/data" --batch 8 --loss=cross_entropy --epochs 3 --lr=0.1 \
  --save "$tmp/never.safetensors" --shuffle=false --plan-parallel --gpus=2
cmp -s "$tmp/out" "$tmp/plain" || fail "--data or the training flags changed the estimate"
[ ! -e "$tmp/never.safetensors" ] || fail "--plan-parallel trained and saved"

# A batch that no data-parallel group divides, and micro-batches that do not divide.
expect 0 "" "$dlcc" train "$t/tiny.dl" --plan-parallel --batch=3 --loss=cross_entropy --gpus=2
grep -q '^  2 x 1 x 1: not possible: the batch does not divide among the data-parallel groups$' "$tmp/out" ||
  fail "batch 3 on 2 ranks: $(cat "$tmp/out")"
expect 0 "" "$dlcc" train "$t/tiny.dl" --plan-parallel --batch=8 --loss=cross_entropy --gpus=2 --micro-batches=3
grep -q '^  1 x 1 x 2: not possible: the micro-batches do not divide a group.s batch$' "$tmp/out" ||
  fail "3 micro-batches of 8: $(cat "$tmp/out")"

# Bad requests.
expect 1 "dlcc: error: train --plan-parallel needs --batch=B (see dlcc train --plan-parallel --help)" \
  "$dlcc" train "$t/tiny.dl" --plan-parallel --loss=cross_entropy
expect 1 "dlcc: error: train --plan-parallel needs --loss (see dlcc train --plan-parallel --help)" \
  "$dlcc" train "$t/tiny.dl" --plan-parallel --batch=8
expect 1 "dlcc: error: --gpu=h300 is not in the device table (h200, h100, a100)" \
  "$dlcc" train "$t/tiny.dl" --plan-parallel --batch=8 --loss=mse --gpu=h300
expect 1 "dlcc: error: --gpus expects GPUs per node, 1 to 1024, got '0'" \
  "$dlcc" train "$t/tiny.dl" --plan-parallel --batch=8 --loss=mse --gpus=0
expect 1 "dlcc: error: unknown option '--frobnicate' for train --plan-parallel (see dlcc train --plan-parallel --help)" \
  "$dlcc" train "$t/tiny.dl" --plan-parallel --batch=8 --loss=mse --frobnicate
expect_sub 1 "mlp.dl:3:11: error: dim 0 of input 'x' is not a name, so --plan-parallel cannot set the batch there" \
  "$dlcc" train "${top_srcdir:-.}/tests/bench/train/mlp.dl" --plan-parallel --batch=8 --loss=mse
# An ONNX model: its inputs' shapes at each batch from --data's samples
# (its batch dim free); without --data, a clear error.
O="${top_srcdir:-.}/tests/pipeinf/mlp3.onnx"
expect 0 "" "$dlcc" train "$O" --plan-parallel --batch=8 --loss=cross_entropy --gpus=2 --data "$t/data"
grep -qx "  tensor parallel over 2 ranks splits 1 region of linears (2 all-reduces a step)" "$tmp/out" &&
  grep -q "^choose: " "$tmp/out" && ok || fail "--plan-parallel of an ONNX model: $(cat "$tmp/out")"
expect 1 "dlcc: error: --plan-parallel of an ONNX model needs --data: its samples give the inputs' shapes at each batch" \
  "$dlcc" train "$O" --plan-parallel --batch=8 --loss=cross_entropy --gpus=2
expect 1 "dlcc: error: --plan-parallel varies the batch, and IR text fixes its shapes: give the model in the language (a name as dim 0 of its inputs) or as ONNX (dim 0 free)" \
  "$dlcc" train "$t/part.ir" --plan-parallel --batch=8 --loss=mse --gpus=2
expect 0 "" "$dlcc" train --plan-parallel --help
grep -q '^usage: dlcc train MODEL --plan-parallel' "$tmp/out" || fail "--help: $(cat "$tmp/out")"

finish scaleout_cli
