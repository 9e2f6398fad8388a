#!/bin/sh
# dlcc --loss=NAME (passes/loss.c): the loss appended before --grad, its
# target input and outputs, and the loss flags' messages.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"

printf 'model m(x: f32[4, 6]) -> y: f32[4, 3] {\n  return linear(relu(linear(x, 8) as fc1), 3) as fc2\n}\n' >"$tmp/m.dl"
expect 0 "" "$dlcc" "$tmp/m.dl" --loss=cross_entropy --label-smoothing=0.1 --ignore-index=1 --grad --emit=ir -o "$tmp/m.ir"
grep -q '^  %1 = input {name="target"} : i64\[4\] *; loss cross_entropy:0:0$' "$tmp/m.ir" ||
  fail "--loss: no target input after x: $(cat "$tmp/m.ir")"
grep -q ' as "loss", %[0-9]* as "y", %[0-9]* as "fc1.weight.grad", ' "$tmp/m.ir" || fail "--loss: outputs: $(tail -2 "$tmp/m.ir")"
grep -q 'const {value=1} : i64\[\]' "$tmp/m.ir" || fail "--ignore-index=1 did not reach the graph"
# What --emit=ir wrote (locations of line 0 too) reads back unchanged.
expect 0 "" "$dlcc" "$tmp/m.ir" --emit=ir -o "$tmp/m2.ir"
cmp -s "$tmp/m.ir" "$tmp/m2.ir" || fail "--loss: the IR reads back differently"
expect 0 "" "$dlcc" "$tmp/m.dl" --loss=smooth_l1 --smooth-l1-beta=0.5 --loss-output=0 --grad --emit=ir -o "$tmp/s.ir"
grep -q 'input {name="target"} : f32\[4, 3\]' "$tmp/s.ir" || fail "--loss=smooth_l1: the target is not like y"

expect 1 "dlcc: error: unknown loss 'hinge' (expected cross_entropy, nll, mse, l1, smooth_l1, bce_with_logits, huber, bce or kl_div)" \
  "$dlcc" "$tmp/m.dl" --loss=hinge
expect 1 "dlcc: error: --label-smoothing expects a number from 0 to 1, got '1.5'" \
  "$dlcc" "$tmp/m.dl" --loss=cross_entropy --label-smoothing=1.5
expect 1 "dlcc: error: --label-smoothing is for --loss=cross_entropy, not --loss=mse" \
  "$dlcc" "$tmp/m.dl" --loss=mse --label-smoothing=0.1
expect 1 "dlcc: error: --ignore-index is for --loss=NAME" "$dlcc" "$tmp/m.dl" --ignore-index=3
expect 1 "dlcc: error: --reduction=batchmean is for --loss=kl_div, not --loss=mse" \
  "$dlcc" "$tmp/m.dl" --loss=mse --reduction=batchmean
expect 1 "dlcc: error: --log-target is for --loss=kl_div, not --loss=bce" "$dlcc" "$tmp/m.dl" --loss=bce --log-target
expect 1 "dlcc: error: --reduction expects mean, sum or batchmean, got 'avg'" "$dlcc" "$tmp/m.dl" --loss=mse --reduction=avg
expect 0 "" "$dlcc" "$tmp/m.dl" --loss=kl_div --reduction=batchmean --log-target --grad --emit=ir -o "$tmp/k.ir"
grep -q 'input {name="target"} : f32\[4, 3\]' "$tmp/k.ir" || fail "--loss=kl_div: the target is not like y"
grep -q ' exp ' "$tmp/k.ir" || fail "--log-target did not reach the graph (no exp of the target)"
expect 1 "dlcc: error: --smooth-l1-beta expects a number of 0 or more, got '-1'" \
  "$dlcc" "$tmp/m.dl" --loss=smooth_l1 --smooth-l1-beta=-1
expect 1 "dlcc: error: --loss takes its value after '=': --loss=NAME" "$dlcc" "$tmp/m.dl" --loss cross_entropy
expect 1 "loss nll: error: the loss reads output 1, but the model has 1 output" \
  "$dlcc" "$tmp/m.dl" --loss=nll --loss-output=1
# A loss left unreduced is no loss to differentiate.
printf 'model m(x: f32[4, 6], t: f32[4, 3]) -> f32[4, 3] {\n  return mse_loss(linear(x, 3) as fc, t, reduction="none")\n}\n' >"$tmp/n.dl"
expect 1 "$tmp/n.dl:2:10: error: the loss must be one float value to differentiate, but output 'output' is f32[4, 3] (reduce it, e.g. with a mean)" \
  "$dlcc" "$tmp/n.dl" --grad

finish loss_cli
