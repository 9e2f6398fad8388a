#!/bin/sh
# `dlcc train` (driver/train.c) on a tiny MLP and 22 samples
# (tests/train/, written by make_data.py): the loss goes down, emu equals
# ref step by step (also for the LeNet and LSTM of examples/train/), --resume continues bit for bit, --save loads back
# (into dlcc run, and strictly into a torch module when torch imports),
# the jsonl log and the schedule's rates, and each bad data folder's
# message naming its file.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
t="${top_srcdir:-.}/tests/train"
A="$t/tiny.dl --batch 8 --loss=cross_entropy --optimizer=adamw --lr=0.05"

# The losses of a jsonl log, one a line.
losses() { sed 's/.*"loss": \([^,]*\),.*/\1/' "$1"; }

# Trains, and the mean loss per epoch falls; emu's step losses equal ref's.
expect 0 "" "$dlcc" train $A --data "$t/data" --val "$t/val" --epochs 4 --backend=ref --log "$tmp/ref.jsonl"
cp "$tmp/out" "$tmp/ref.out"
first=$(sed -n 's/^epoch 1: train loss \([0-9.]*\).*/\1/p' "$tmp/ref.out")
last=$(sed -n 's/^epoch 4: train loss \([0-9.]*\).*/\1/p' "$tmp/ref.out")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a * 0.9) }' || fail "the loss did not fall: $first -> $last"
grep -q '^epoch 4: val loss [0-9.]*, val accuracy [0-9.]*%$' "$tmp/ref.out" || fail "no validation line: $(cat "$tmp/ref.out")"
[ "$(wc -l <"$tmp/ref.jsonl")" -eq $((4 * 3 + 4)) ] || fail "the log has $(wc -l <"$tmp/ref.jsonl") lines, expected 16"
expect 0 "" "$dlcc" train $A --data "$t/data" --val "$t/val" --epochs 4 --backend=emu --log "$tmp/emu.jsonl"
grep '"step"' "$tmp/ref.jsonl" >"$tmp/ref.steps"
grep '"step"' "$tmp/emu.jsonl" >"$tmp/emu.steps"
losses "$tmp/ref.steps" >"$tmp/ref.l"
losses "$tmp/emu.steps" >"$tmp/emu.l"
paste "$tmp/ref.l" "$tmp/emu.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1) + 1e-6) bad++ }
  END { exit bad > 0 || NR != 12 }' || fail "emu's step losses differ from ref's: $(paste "$tmp/ref.l" "$tmp/emu.l")"

# Gradient accumulation (--micro-batches without --pipeline): each batch
# as 4 micro-batches of 2 and one optimizer step, the last partial batch
# of 6 as micro-batches that divide it: the whole batch's losses to
# rounding, on ref and emu.
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 2 --backend=ref --shuffle=false --log "$tmp/whole.jsonl"
for b in ref emu; do
  expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 2 --backend=$b --shuffle=false --micro-batches=4 \
    --log "$tmp/acc.$b.jsonl"
  grep -q '^gradient accumulation: 4 micro-batches of 2, one optimizer step a batch$' "$tmp/out" ||
    fail "no accumulation line on $b: $(cat "$tmp/out")"
  paste "$tmp/whole.jsonl" "$tmp/acc.$b.jsonl" | grep '"step"' |
    sed 's/.*"loss": \([^,]*\),.*"loss": \([^,]*\),.*/\1 \2/' |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1) + 1e-6) bad++ } END { exit bad > 0 || NR != 6 }' ||
    fail "--micro-batches=4 on $b: $(paste "$tmp/whole.jsonl" "$tmp/acc.$b.jsonl")"
done
expect 1 "dlcc: error: --batch=8 does not divide into 3 micro-batches: give a multiple of 3" \
  "$dlcc" train $A --data "$t/data" --micro-batches=3
expect 1 "dlcc: error: --deferred-bn is for micro-batches: give --micro-batches=M (or --pipeline=S) too" \
  "$dlcc" train $A --data "$t/data" --deferred-bn

# Targets as i32 class indices or one-hot probabilities: the same losses
# as i64 indices (and no accuracy for probabilities).
for kind in i32 prob; do
  rm -rf "$tmp/$kind"; mkdir "$tmp/$kind"
  cp "$t/data/x.npy" "$tmp/$kind/"; cp "$t/alt/target_$kind.npy" "$tmp/$kind/target.npy"
  expect 0 "" "$dlcc" train $A --data "$tmp/$kind" --val "$tmp/$kind" --epochs 2 --backend=ref --shuffle=false \
    --log "$tmp/$kind.jsonl"
  grep '"step"' "$tmp/$kind.jsonl" | losses /dev/stdin >"$tmp/$kind.l"
done
expect 0 "" "$dlcc" train $A --data "$t/data" --val "$t/data" --epochs 2 --backend=ref --shuffle=false --log "$tmp/i64.jsonl"
grep '"step"' "$tmp/i64.jsonl" | losses /dev/stdin >"$tmp/i64.l"
cmp -s "$tmp/i64.l" "$tmp/i32.l" || fail "i32 targets: $(paste "$tmp/i64.l" "$tmp/i32.l")"
paste "$tmp/i64.l" "$tmp/prob.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6) bad++ } END { exit bad > 0 || NR != 6 }' ||
  fail "probability targets: $(paste "$tmp/i64.l" "$tmp/prob.l")"
grep -q '"val_n": 22}$' "$tmp/prob.jsonl" || fail "probabilities have an accuracy: $(cat "$tmp/prob.jsonl")"

# kl_div's batchmean divides by the samples, in the step and in the
# validation alike: one step of the whole set at lr 0 gives both the
# same loss (an element-wise divisor would give a third of it).
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 22 --loss=kl_div --reduction=batchmean --lr=0 --data "$tmp/prob" \
  --val "$tmp/prob" --backend=ref --log "$tmp/kl.jsonl"
step=$(grep '"step"' "$tmp/kl.jsonl" | losses /dev/stdin)
val=$(sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p' "$tmp/kl.jsonl")
awk -v a="$step" -v b="$val" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != 0 && d <= 1e-6 * (a < 0 ? -a : a)) }' ||
  fail "kl_div batchmean: step loss $step, validation loss $val"

# The training examples (examples/train/) a step and a partial batch on
# each backend: the same losses; and seqsign with a GRU (gru_bptt).
for m in lenet8 seqsign seqsign_gru; do
  dl="${top_srcdir:-.}/examples/train/$m.dl" data="$t/$m"
  [ "$m" = seqsign_gru ] && dl="$t/seqsign_gru.dl" data="$t/seqsign"
  for b in ref emu; do
    expect 0 "" "$dlcc" train "$dl" --data "$data" --batch 4 --loss=cross_entropy \
      --optimizer=adam --lr=0.01 --backend=$b --log "$tmp/$m.$b.jsonl"
    losses "$tmp/$m.$b.jsonl" >"$tmp/$m.$b.l"
  done
  paste "$tmp/$m.ref.l" "$tmp/$m.emu.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1 + 1e-6) bad++ }
    END { exit bad > 0 || NR != 2 }' || fail "$m: emu's step losses differ from ref's: $(paste "$tmp/$m.ref.l" "$tmp/$m.emu.l")"
done

# The log: one object per step with epoch, step, loss and lr (the last
# partial batch of 6 is a step of its own); a validation object per epoch.
head -1 "$tmp/ref.jsonl" | grep -q '^{"epoch": 1, "step": 1, "loss": [0-9.e-]*, "seconds": [0-9.]*, "lr": 0.05}$' ||
  fail "log line: $(head -1 "$tmp/ref.jsonl")"
sed -n 4p "$tmp/ref.jsonl" | grep -q '^{"epoch": 1, "val_loss": [0-9.e-]*, "val_accuracy": [0-9.e-]*}$' ||
  fail "validation log line: $(sed -n 4p "$tmp/ref.jsonl")"

# A run that diverges still logs JSON: a loss that is not finite is null.
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --optimizer=sgd --lr=1e30 --data "$t/data" \
  --epochs 1 --backend=ref --log "$tmp/nan.jsonl"
sed -n 3p "$tmp/nan.jsonl" | grep -q '^{"epoch": 1, "step": 3, "loss": null, "seconds": [0-9.]*, "lr": 1e+30}$' ||
  fail "a diverged run's log: $(cat "$tmp/nan.jsonl")"

# Schedules, per step: StepLR halves every 2 steps, LinearLR warms up
# from 1/3, and --drop-last leaves 2 steps an epoch.
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 2 --backend=ref --drop-last --schedule=step:2:0.5 \
  --log "$tmp/step.jsonl"
[ "$(sed 's/.*"lr": \([^}]*\)}/\1/' "$tmp/step.jsonl" | tr '\n' ' ')" = "0.05 0.05 0.025 0.025 " ] ||
  fail "StepLR: $(cat "$tmp/step.jsonl")"
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 1 --backend=ref --schedule=warmup:2 --log "$tmp/warm.jsonl"
[ "$(sed 's/.*"lr": \([^}]*\)}/\1/' "$tmp/warm.jsonl" | tr '\n' ' ')" = "0.0166666667 0.0333333333 0.05 " ] ||
  fail "LinearLR warmup: $(cat "$tmp/warm.jsonl")"

# MultiStepLR over both epochs (3 steps each): x0.1 at steps 2 and 4.
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 2 --backend=ref --schedule=multistep:2/4:0.1 \
  --log "$tmp/multi.jsonl"
[ "$(grep '"step"' "$tmp/multi.jsonl" | sed 's/.*"lr": \([^}]*\)}/\1/' | tr '\n' ' ')" = \
  "0.05 0.05 0.005 0.005 0.0005 0.0005 " ] || fail "MultiStepLR: $(cat "$tmp/multi.jsonl")"

# RMSprop (centered, with momentum), Adagrad, Adam with amsgrad,
# Adamax, Adadelta, RAdam and NAdam from the flags: emu's losses ref's,
# torch.optim's default rate for the kind, and the checkpoint holding
# each state under PyTorch's key; resumed, RMSprop's 2 epochs are one
# run's, bit for bit.
for o in "rmsprop --centered --momentum=0.9 --alpha=0.9:grad_avg" "adagrad --lr-decay=0.1 --initial-accumulator-value=0.1:sum" \
  "adam --amsgrad --maximize=false:max_exp_avg_sq" "adamax --betas=0.8,0.99:exp_inf" "adadelta --rho=0.8:acc_delta" \
  "radam --weight-decay=0.1 --decoupled-weight-decay:exp_avg_sq" "nadam --momentum-decay=0.01:exp_avg"; do
  flags=${o%:*} key=${o##*:} name=${o%% *}
  for b in ref emu; do
    expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --optimizer=$flags --data "$t/data" \
      --epochs 2 --backend=$b --log "$tmp/$name.$b.jsonl" --save "$tmp/$name.$b.safetensors"
    losses "$tmp/$name.$b.jsonl" | grep -v epoch >"$tmp/$name.$b.l"
  done
  paste "$tmp/$name.ref.l" "$tmp/$name.emu.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1 + 1e-6) bad++ }
    END { exit bad > 0 || NR != 6 }' || fail "$name: emu's step losses differ from ref's: $(paste "$tmp/$name.ref.l" "$tmp/$name.emu.l")"
  case $name in adam | radam) want_lr=0.001 ;; adamax | nadam) want_lr=0.002 ;; adadelta) want_lr=1 ;; *) want_lr=0.01 ;; esac
  grep -q "\"step\": 1, .*\"lr\": $want_lr}" "$tmp/$name.ref.jsonl" || fail "$name's default rate: $(head -1 "$tmp/$name.ref.jsonl")"
  head -c 3000 "$tmp/$name.ref.ckpt.safetensors" | grep -q "\"dlcc.optim.fc2.bias.$key\"" ||
    fail "$name: the checkpoint lacks dlcc.optim.fc2.bias.$key"
done
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --optimizer=rmsprop --centered --momentum=0.9 \
  --alpha=0.9 --data "$t/data" --epochs 1 --backend=emu --save "$tmp/rms1.safetensors"
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --optimizer=rmsprop --centered --momentum=0.9 \
  --alpha=0.9 --data "$t/data" --epochs 1 --backend=emu --resume "$tmp/rms1.ckpt.safetensors" --save "$tmp/rms2.safetensors"
cmp -s "$tmp/rmsprop.emu.safetensors" "$tmp/rms2.safetensors" || fail "resumed RMSprop differs from one run's"
head -c 3000 "$tmp/nadam.ref.ckpt.safetensors" | grep -q '"dlcc.optim.mu_product"' ||
  fail "nadam: the checkpoint lacks dlcc.optim.mu_product"
expect 1 "dlcc: error: --rho is for --optimizer=adadelta, not adam" "$dlcc" train "$t/tiny.dl" --batch 8 \
  --loss=cross_entropy --data "$t/data" --optimizer=adam --rho=0.9
expect 1 "dlcc: error: --decoupled-weight-decay is for --optimizer=radam and nadam, not adamw" "$dlcc" train \
  "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --optimizer=adamw --decoupled-weight-decay
expect 1 "dlcc: error: --schedule=cyclic cycles the momentum or beta1: adadelta has neither" \
  "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --optimizer=adadelta --schedule=cyclic:0.1:2
expect 1 "dlcc: error: sgd: amsgrad is Adam's and AdamW's" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy \
  --data "$t/data" --amsgrad
expect 1 "dlcc: error: adam: momentum is SGD's and RMSprop's" "$dlcc" train "$t/tiny.dl" --batch 8 \
  --loss=cross_entropy --data "$t/data" --optimizer=adam --momentum=0.9
expect 1 "dlcc: error: sgd: clip_grad_value and clip_grad_norm both clip: choose one" "$dlcc" train "$t/tiny.dl" \
  --batch 8 --loss=cross_entropy --data "$t/data" --clip-grad-value=1 --clip-grad-norm=1
# --clip-grad-value at a bound no gradient reaches changes nothing (the same bits), at a small one it does
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --backend=ref --save "$tmp/cv0.safetensors"
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --backend=ref --clip-grad-value=1e30 \
  --save "$tmp/cv1.safetensors"
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --backend=ref --clip-grad-value=1e-4 \
  --save "$tmp/cv2.safetensors"
cmp -s "$tmp/cv0.safetensors" "$tmp/cv1.safetensors" && ! cmp -s "$tmp/cv0.safetensors" "$tmp/cv2.safetensors" ||
  fail "--clip-grad-value: a bound of 1e30 should change nothing and one of 1e-4 something"

# ReduceLROnPlateau (patience 0, halving) at a rate that overshoots: the
# rate halves after epochs 2, 5 and 6, as torch's scheduler does on these
# validation losses; 3 epochs and a resumed 3 more are 6 in one run.
P="$t/tiny.dl --batch 8 --loss=cross_entropy --data $t/data --val $t/val --backend=ref --lr=3 --schedule=plateau:0:0.5"
expect 0 "" "$dlcc" train $P --epochs 6 --log "$tmp/pl.jsonl" --save "$tmp/pl6.safetensors"
[ "$(grep '"step"' "$tmp/pl.jsonl" | sed 's/.*"lr": \([^}]*\)}/\1/' | uniq | tr '\n' ' ')" = "3 1.5 0.75 " ] ||
  fail "ReduceLROnPlateau's rates: $(grep '"step"' "$tmp/pl.jsonl" | sed 's/.*"lr": //' | tr '\n' ' ')"
grep -qx 'epoch 5: no better validation loss for 1 epoch: learning rate 1.5 -> 0.75' "$tmp/out" ||
  fail "ReduceLROnPlateau's line: $(cat "$tmp/out")"
expect 0 "" "$dlcc" train $P --epochs 3 --save "$tmp/pl3.safetensors"
expect 0 "" "$dlcc" train $P --epochs 3 --resume "$tmp/pl3.ckpt.safetensors" --save "$tmp/plr.safetensors"
cmp -s "$tmp/pl6.ckpt.safetensors" "$tmp/plr.ckpt.safetensors" || fail "a resumed plateau differs from one run"
expect 1 "dlcc: error: --schedule=plateau steps by the validation loss: give --val DIR" \
  "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --schedule=plateau

# bf16 on emu: the update kernel merged into one launch with the
# forward's next casts (its buffers once took the names a merged part's
# get: p1_out), with amsgrad, the momentum input and no-decay's groups.
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --epochs 1 --backend=emu \
  --precision=bf16 --optimizer=adam --amsgrad --schedule=onecycle --no-decay='*.bias'
grep -q '^epoch 1: train loss [0-9.]* (mean of 3 steps)$' "$tmp/out" || fail "bf16 training: $(cat "$tmp/out")"

# OneCycleLR over 2 epochs of 3 steps: the momenta and rates torch 2.15's
# sets (OneCycleLR(max_lr=0.05, total_steps=6, pct_start=0.5)), in the
# log; SGD without --momentum takes the schedule's; emu's losses ref's.
for b in ref emu; do
  expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --epochs 2 --backend=$b \
    --lr=0.05 --schedule=onecycle:0.5 --log "$tmp/oc.$b.jsonl"
  losses "$tmp/oc.$b.jsonl" >"$tmp/oc.$b.l"
done
[ "$(sed 's/.*"momentum": \([^,]*\), "lr": \([^}]*\)}/\1 \2/' "$tmp/oc.ref.jsonl" | tr '\n' ' ')" = \
  "0.95 0.002 0.9 0.026 0.85 0.05 0.875 0.03750005 0.925 0.01250015 0.95 2e-07 " ] ||
  fail "OneCycleLR: $(cat "$tmp/oc.ref.jsonl")"
paste "$tmp/oc.ref.l" "$tmp/oc.emu.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1 + 1e-6) bad++ }
  END { exit bad > 0 || NR != 6 }' || fail "OneCycleLR: emu's losses differ from ref's: $(paste "$tmp/oc.ref.l" "$tmp/oc.emu.l")"
expect 1 "dlcc: error: --schedule=onecycle cycles the momentum or beta1: adagrad has neither" "$dlcc" train "$t/tiny.dl" \
  --batch 8 --loss=cross_entropy --data "$t/data" --optimizer=adagrad --schedule=onecycle
# CyclicLR over 2 epochs of 3 steps (CyclicLR(base_lr=0.01, max_lr=0.05,
# step_size_up=1, step_size_down=2), torch 2.15's momenta and rates), in
# the log; no warmup before it.
expect 0 "" "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --epochs 2 --backend=ref \
  --lr=0.05 --schedule=cyclic:0.01:1/2 --log "$tmp/cyc.jsonl"
[ "$(sed 's/.*"momentum": \([^,]*\), "lr": \([^}]*\)}/\1 \2/' "$tmp/cyc.jsonl" | tr '\n' ' ')" = \
  "0.9 0.01 0.8 0.05 0.85 0.03 0.9 0.01 0.8 0.05 0.85 0.03 " ] || fail "CyclicLR: $(cat "$tmp/cyc.jsonl")"
expect 1 "dlcc: error: --schedule: 'warmup:2,cyclic:0.01:2': cyclic rises from its base rate itself and takes no warmup" \
  "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --schedule=warmup:2,cyclic:0.01:2

# The loss's options: class weights of 1 are no weights (to rounding);
# others move the losses and the validation's weighted mean, emu equal to
# ref, from a list or a .npy; --reduction=sum's first loss is the mean's
# times the batch.
cw() { "$dlcc" train "$t/tiny.dl" --batch 8 --loss=cross_entropy --data "$t/data" --val "$t/val" --epochs 1 \
  --shuffle=false "$@"; }
expect 0 "" cw --backend=ref --log "$tmp/cw0.jsonl"
expect 0 "" cw --backend=ref --class-weights=1,1,1 --log "$tmp/cw1.jsonl"
paste "$tmp/cw0.jsonl" "$tmp/cw1.jsonl" | sed 's/"seconds": [0-9.]*, //g' |
  awk -F'\t' '{ split($1, a, /[:,}]/); split($2, b, /[:,}]/); d = a[6] - b[6]; if (d < 0) d = -d; if (d > 1e-6) bad++ }
    END { exit bad > 0 || NR != 4 }' || fail "class weights of 1: $(paste "$tmp/cw0.jsonl" "$tmp/cw1.jsonl")"
/usr/bin/python3 -c 'import numpy; numpy.save("'"$tmp"'/cw.npy", numpy.array([1, 2, 0.5]))' 2>/dev/null ||
  printf '\223NUMPY\001\000v\000{'"'"'descr'"'"': '"'"'<f4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (3,), }                                     \n\000\000\200?\000\000\000@\000\000\000?' >"$tmp/cw.npy"
for b in ref emu; do
  expect 0 "" cw --backend=$b --class-weights="$tmp/cw.npy" --log "$tmp/cw.$b.jsonl"
  losses "$tmp/cw.$b.jsonl" | grep -v epoch >"$tmp/cw.$b.l"
done
expect 0 "" cw --backend=ref --class-weights=1,2,0.5 --log "$tmp/cwlist.jsonl"
cmp -s "$tmp/cw.ref.jsonl" "$tmp/cwlist.jsonl" 2>/dev/null ||
  [ "$(losses "$tmp/cwlist.jsonl" | grep -v epoch)" = "$(cat "$tmp/cw.ref.l")" ] || fail "--class-weights: a list and a .npy differ"
paste "$tmp/cw.ref.l" "$tmp/cw.emu.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1 + 1e-6) bad++ }
  END { exit bad > 0 || NR != 3 }' || fail "class weights: emu's losses differ from ref's: $(paste "$tmp/cw.ref.l" "$tmp/cw.emu.l")"
[ "$(head -1 "$tmp/cw.ref.l")" != "$(losses "$tmp/cw0.jsonl" | head -1)" ] || fail "--class-weights changed nothing"
grep -q '"val_loss": 1.09907' "$tmp/cw.ref.jsonl" || fail "the weighted validation loss: $(tail -1 "$tmp/cw.ref.jsonl")"
expect 0 "" cw --backend=ref --reduction=sum --log "$tmp/sum.jsonl"
awk -v a="$(losses "$tmp/cw0.jsonl" | head -1)" -v b="$(losses "$tmp/sum.jsonl" | head -1)" \
  'BEGIN { d = a * 8 - b; exit !(d < 1e-5 && d > -1e-5) }' || fail "--reduction=sum: $(head -1 "$tmp/sum.jsonl")"
expect 1 "loss cross_entropy: error: cross_entropy: weight f32[2] does not fit logits f32[8, 3]: expected one per class, f32[3]" \
  cw --backend=ref --class-weights=1,2
expect 1 "dlcc: error: --pos-weight is for --loss=bce_with_logits, not --loss=cross_entropy" cw --pos-weight=2
expect 1 "dlcc: error: --class-weights expects numbers W1,W2,... or a FILE.npy, got '1,x'" cw --class-weights=1,x
expect 1 "dlcc: error: --reduction expects mean, sum or batchmean, got 'none'" cw --reduction=none

# Two epochs in one run equal one, a checkpoint and one more, bit for bit.
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 2 --backend=emu --save "$tmp/two.safetensors"
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 1 --backend=emu --save "$tmp/one.safetensors"
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 1 --backend=emu --resume "$tmp/one.ckpt.safetensors" \
  --save "$tmp/res.safetensors"
cmp -s "$tmp/two.safetensors" "$tmp/res.safetensors" || fail "resumed weights differ from one run's"
cmp -s "$tmp/two.ckpt.safetensors" "$tmp/res.ckpt.safetensors" || fail "resumed checkpoint differs from one run's"
# --save-every=N: the files after every N epochs too, and training goes
# on undisturbed: after 3 epochs the same bits as saving once at the end;
# the epoch-2 checkpoint resumed for 1 more epoch gives them too.
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 3 --backend=ref --save "$tmp/end.safetensors"
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 2 --backend=ref --save-every=1 --save "$tmp/every.safetensors"
grep -qx "saved $tmp/every.safetensors and $tmp/every.ckpt.safetensors (epoch 1)" "$tmp/out" &&
  grep -qx "saved $tmp/every.safetensors and $tmp/every.ckpt.safetensors (epoch 2)" "$tmp/out" ||
  fail "--save-every=1: $(cat "$tmp/out")"
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 1 --backend=ref --resume "$tmp/every.ckpt.safetensors" \
  --save-every=1 --save "$tmp/every.safetensors"
cmp -s "$tmp/end.ckpt.safetensors" "$tmp/every.ckpt.safetensors" || fail "--save-every changed the training"
expect 1 "dlcc: error: --save-every needs --save=OUT (the files it writes)" "$dlcc" train $A --data "$t/data" --save-every=2
# --stream-mb=0: every array stays on disk and each batch reads its
# samples (an unshuffled epoch's runs of consecutive ones in one read):
# the same bits as the data read whole, validation included.
for sh in true false; do
  expect 0 "" "$dlcc" train $A --data "$t/data" --val "$t/val" --epochs 2 --backend=ref --shuffle=$sh \
    --save "$tmp/whole.safetensors"
  cp "$tmp/out" "$tmp/whole.out"
  expect 0 "" "$dlcc" train $A --data "$t/data" --val "$t/val" --epochs 2 --backend=ref --shuffle=$sh --stream-mb=0 \
    --save "$tmp/streamed.safetensors"
  grep -v '^saved ' "$tmp/whole.out" >"$tmp/whole.lines"
  grep -v '^saved \|^data: ' "$tmp/out" >"$tmp/streamed.lines"
  cmp -s "$tmp/whole.ckpt.safetensors" "$tmp/streamed.ckpt.safetensors" &&
    cmp -s "$tmp/whole.lines" "$tmp/streamed.lines" || fail "streamed data (--shuffle=$sh) differs from data read whole"
  # every batch but an epoch's first read during the step before
  grep -qx 'data: streamed from its files, 4 of 6 batches read ahead during the step before' "$tmp/out" ||
    fail "the read ahead: $(cat "$tmp/out")"
done
# The state_dict holds the model's names only; the checkpoint adds the state.
head -c 400 "$tmp/two.safetensors" | grep -q 'dlcc\.' && fail "the state_dict has dlcc.* names"
head -c 2000 "$tmp/two.ckpt.safetensors" | grep -q '"dlcc.optim.fc1.weight.exp_avg"' ||
  fail "the checkpoint lacks the optimizer state"
head -c 2000 "$tmp/two.ckpt.safetensors" | grep -q '"epoch":"2"' || fail "the checkpoint lacks its epoch"
expect 0 "" "$dlcc" run "$t/tiny.dl" --weights "$tmp/two.safetensors" --input "x=$t/val/x.npy"
expect 1 "dlcc: error: $tmp/two.safetensors: not a dlcc training checkpoint (no \"dlcc.checkpoint\" in its metadata)" \
  "$dlcc" train $A --data "$t/data" --backend=ref --resume "$tmp/two.safetensors"
if /usr/bin/python3 -c 'import torch, safetensors' 2>/dev/null; then
  /usr/bin/python3 - "$tmp/two.safetensors" <<'EOF' || fail "torch did not load the state_dict strictly"
import sys, torch
from safetensors.torch import load_file
m = torch.nn.Sequential()
m.add_module("fc1", torch.nn.Linear(4, 8))
m.add_module("relu", torch.nn.ReLU())
m.add_module("fc2", torch.nn.Linear(8, 3))
m.load_state_dict(load_file(sys.argv[1]), strict=True)
EOF
else
  echo "torch or safetensors does not import: the strict PyTorch load is not checked"
fi

# Bad data folders, each named by its file.
bad() { rm -rf "$tmp/$1"; mkdir "$tmp/$1"; d=$tmp/$1; }
R="$t/tiny.dl --batch 8 --loss=cross_entropy --backend=ref"
bad len; cp "$t/data/x.npy" "$d/"; cp "$t/bad/target21.npy" "$d/target.npy"
expect 1 "dlcc: error: $d/x.npy has 22 samples but $d/target.npy has 21: the arrays disagree in length" \
  "$dlcc" train $R --data "$d"
bad dtype; cp "$t/data/target.npy" "$d/"; cp "$t/bad/x_f64.npy" "$d/x.npy"
expect 1 "dlcc: error: $d/x.npy: samples of f64 [4], but the model's input 'x' takes f32 [4] per sample" \
  "$dlcc" train $R --data "$d"
bad shape; cp "$t/data/target.npy" "$d/"; cp "$t/bad/x5.npy" "$d/x.npy"
expect 1 "dlcc: note: the inputs given: target [8] from $d/target.npy, x [8, 5] from $d/x.npy (the batch, then a sample's shape)" \
  "$dlcc" train $R --data "$d"
grep -q "tiny.dl:2:22: error: dim 1 of input 'x' is 4, but the input given has 5" "$tmp/err" || fail "$(cat "$tmp/err")"
bad notarget; cp "$t/data/x.npy" "$d/"
expect 1 "dlcc: error: $d/target.npy: missing: the data folder needs the loss's target there" "$dlcc" train $R --data "$d"
bad empty; cp "$t/bad/x0.npy" "$d/x.npy"; cp "$t/bad/target0.npy" "$d/target.npy"
expect 1 "dlcc: error: $d/target.npy: no samples (axis 0 is empty)" "$dlcc" train $R --data "$d"
bad class; cp "$t/data/x.npy" "$d/"; cp "$t/bad/target_class.npy" "$d/target.npy"
expect 1 "dlcc: error: $d/target.npy: sample 5 has class 3, outside [0, 3) of the model's 3 classes (and not the ignore_index -100)" \
  "$dlcc" train $R --data "$d"
expect 1 "dlcc: error: $d/target.npy: sample 5 has class 3, outside [0, 3) of the model's 3 classes (and not the ignore_index -100)" \
  "$dlcc" train $R --data "$d" --stream-mb=0
expect 1 "dlcc: error: --stream-mb expects a number >= 0, got '-1'" "$dlcc" train $R --data "$d" --stream-mb=-1
bad extra; cp "$t/data/x.npy" "$t/data/target.npy" "$d/"; cp "$t/data/x.npy" "$d/extra.npy"
expect 1 "dlcc: error: $d/extra.npy: the model has no input 'extra'" "$dlcc" train $R --data "$d"
bad valclass; cp "$t/val/x.npy" "$d/x.npy"; cp "$t/bad/target_class.npy" "$d/target.npy"
expect 1 "dlcc: error: $d/x.npy has 10 samples but $d/target.npy has 22: the arrays disagree in length" \
  "$dlcc" train $R --data "$t/data" --val "$d"
expect 1 "dlcc: error: $tmp/nowhere: No such file or directory" "$dlcc" train $R --data "$tmp/nowhere"
expect 1 "dlcc: error: $t/data has 22 samples, fewer than one batch of 30, and --drop-last skips them all" \
  "$dlcc" train "$t/tiny.dl" --batch 30 --drop-last --loss=cross_entropy --data "$t/data"
expect 1 "dlcc: error: --schedule: 'step:0:1' is not step:N:GAMMA, multistep:M1/M2/...:GAMMA, exp:GAMMA, cosine[:T_MAX[:ETA_MIN]], cosine_restarts:T0[:TMULT[:ETA_MIN]], poly[:T[:POWER]], linear:START:END[:T], plateau[:PATIENCE[:FACTOR[:MIN_LR]]], onecycle[:PCT_START[:DIV[:FINAL_DIV]]], cyclic:BASE_LR:UP[/DOWN][:MODE[:GAMMA]] or warmup:N[:START] (N, M, T_MAX, T0, TMULT, T, UP and DOWN whole numbers > 0, PATIENCE >= 0, MODE triangular, triangular2 or exp_range)" \
  "$dlcc" train $R --data "$t/data" --schedule=step:0:1
expect 1 "dlcc: error: train needs --batch=N (see dlcc train --help)" "$dlcc" train "$t/tiny.dl" --data "$t/data"
expect 1 "dlcc: error: unknown optimizer 'lbfgs' (expected sgd, adam, adamw, rmsprop, adagrad, adamax, adadelta, radam or nadam)" \
  "$dlcc" train $R --data "$t/data" --optimizer=lbfgs
expect 1 "dlcc: error: --resume and --weights both give the weights: choose one" \
  "$dlcc" train $R --data "$t/data" --resume "$tmp/one.ckpt.safetensors" --weights "$tmp/one.safetensors"
# A model with nothing to train: the message points at its output.
printf 'model noparam(x: f32[N, 4]) -> y: f32[N, 3] {\n  return slice(x, 1, 0, 3) * 2.0\n}\n' >"$tmp/noparam.dl"
expect 1 "$tmp/noparam.dl:2:28: error: sgd: the model has no trainable parameter that the loss depends on" "$dlcc" train "$tmp/noparam.dl" --batch 8 --loss=cross_entropy --backend=ref \
  --data "$t/data"
# Without --loss the model's output 0 must be its loss.
expect_sub 1 "error: the loss must be one float value to differentiate, but output 'logits' is f32[8, 3]" \
  "$dlcc" train "$t/tiny.dl" --batch 8 --backend=ref --data "$t/data"

# --profile: after training, one more step timed kernel by kernel (emu's
# host time), the slowest first; the trained weights were saved before it.
expect 0 "" "$dlcc" train $A --data "$t/data" --epochs 1 --backend=emu --shuffle=false --profile=3 \
  --save "$tmp/prof.safetensors"
grep -q '^dlcc: profile: [0-9]* steps on emu, [0-9.]* us in all (host time), the 3 slowest:$' "$tmp/err" ||
  fail "--profile: no table: $(cat "$tmp/err")"
[ "$(grep -c '^ *[0-9][0-9]* *[0-9.]* *[0-9.]*% ' "$tmp/err")" = 3 ] || fail "--profile=3: not 3 rows: $(cat "$tmp/err")"
[ -s "$tmp/prof.safetensors" ] || fail "--profile: --save wrote nothing"
expect 1 "dlcc: error: --profile expects a whole number >= 1, got '0'" \
  "$dlcc" train $A --data "$t/data" --backend=ref --profile=0
expect_sub 1 "profile: the reference interpreter runs no steps" \
  "$dlcc" train $A --data "$t/data" --epochs 1 --backend=ref --profile

# An ONNX model trains from the weights it brings (what it was exported
# with, to fine-tune): at lr 0 the saved weights are its own, so they run
# as the model does; --init=random draws them from --seed instead.
O="${top_srcdir:-.}/tests/pipeinf/mlp3.onnx" X="${top_srcdir:-.}/tests/pipeinf/x8.npy"
OT="--data $t/data --batch 8 --loss=cross_entropy --optimizer=sgd --epochs 1 --backend=ref"
expect 0 "" "$dlcc" train "$O" $OT --lr=0 --save "$tmp/ox0.safetensors"
expect 0 "" "$dlcc" train "$O" $OT --lr=0 --init=random --save "$tmp/oxr.safetensors"
mkdir "$tmp/oxa" "$tmp/oxb" "$tmp/oxr"
expect 0 "" "$dlcc" run "$O" -D N=8 --input x="$X" --backend=ref --output-dir "$tmp/oxa"
expect 0 "" "$dlcc" run "$O" -D N=8 --input x="$X" --backend=ref --weights "$tmp/ox0.safetensors" --output-dir "$tmp/oxb"
expect 0 "" "$dlcc" run "$O" -D N=8 --input x="$X" --backend=ref --weights "$tmp/oxr.safetensors" --output-dir "$tmp/oxr"
y=$(ls "$tmp/oxa")
cmp -s "$tmp/oxa/$y" "$tmp/oxb/$y" && ok || fail "an ONNX model at lr 0 lost its own weights"
cmp -s "$tmp/oxa/$y" "$tmp/oxr/$y" && fail "--init=random kept the ONNX model's weights" || ok

# --freeze: the params it names (shell patterns) keep their values, the
# others train; a pattern that names nothing is refused.
F="$t/tiny.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=ref --data $t/data --epochs 1 --batch 8"
expect 0 "" "$dlcc" train $F --freeze='fc1.*' --save "$tmp/frozen.safetensors"
expect 0 "" "$dlcc" train $F --lr=0 --save "$tmp/start.safetensors"
if command -v python3 >/dev/null; then
  python3 - "$tmp/frozen.safetensors" "$tmp/start.safetensors" <<'PY' && ok || fail "--freeze: fc1 moved or fc2 did not"
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: d[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a["fc1.weight"] == b["fc1.weight"] and a["fc1.bias"] == b["fc1.bias"] and a["fc2.weight"] != b["fc2.weight"] else 1)
PY
fi
expect_sub 1 "freeze: 'fc9.*' matches no parameter of the model" "$dlcc" train $F --freeze='fc1.*,fc9.*'

# --tf32: a transformer layer's attention trains on the tensor cores'
# m16n8k8 (forward and both backward kernels say "mma tf32"), and emu's
# step losses stay within tf32's rounding of ref's exact ones.
T="$t/attn.dl --loss=mse --optimizer=sgd --momentum=0.9 --lr=0.05 --data $t/attn --epochs 2 --batch 4 --tf32"
expect 0 "" "$dlcc" "$t/attn.dl" -D N=4 --loss=mse --grad --tf32 --emit=plan
[ "$(grep -c "mma tf32" "$tmp/out")" -eq 3 ] || fail "--tf32: attention's kernels not on tf32: $(grep attention "$tmp/out")"
for b in ref emu; do
  expect 0 "" "$dlcc" train $T --backend=$b --log "$tmp/tf32.$b.jsonl"
  losses "$tmp/tf32.$b.jsonl" >"$tmp/tf32.$b.l"
done
paste "$tmp/tf32.ref.l" "$tmp/tf32.emu.l" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3 * $1) bad++ }
  END { exit bad > 0 || NR != 6 }' || fail "--tf32: emu's losses differ from ref's: $(paste "$tmp/tf32.ref.l" "$tmp/tf32.emu.l")"

# A torch.save state_dict, and a training checkpoint dict holding one
# under "model", as --weights: the outputs torch 2.15 gives
# (tests/torchfiles/make.py's MLP on these two rows).
printf 'model mlp(x: f32[N, 4]) -> y: f32[N, 3] {\n  return linear(relu(linear(x, 8) as 0), 3) as 2\n}\n' >"$tmp/pt.dl"
if /usr/bin/python3 -c 'import numpy; numpy.save("'"$tmp"'/ptx.npy", numpy.array([[1, 2, 3, 4], [-1, 0.5, 0, 2]], "f4"))'; then
  for w in fc.pt ckpt.pt; do
    expect 0 "" "$dlcc" run "$tmp/pt.dl" --weights "${top_srcdir:-.}/tests/torchfiles/$w" --input x="$tmp/ptx.npy" \
      --output-dir "$tmp/pt" --backend=ref
    [ "$(npy_values "$tmp/pt/y.npy" | awk '{ printf "%.4f ", $1 }')" = "-0.3697 -0.1071 0.0906 0.1070 -0.2803 0.1043 " ] ||
      fail "--weights $w: $(npy_values "$tmp/pt/y.npy" | tr '\n' ' ')"
  done
fi
expect 1 "dlcc: error: ${top_srcdir:-.}/tests/torchfiles/whole.pt: no tensors to read: the file holds a pickled torch.nn.modules.linear.Linear object (a whole model?); dlcc reads a state_dict (torch.save(model.state_dict(), PATH))" \
  "$dlcc" run "$tmp/pt.dl" -D N=2 --weights "${top_srcdir:-.}/tests/torchfiles/whole.pt" --backend=ref
finish train_cli
