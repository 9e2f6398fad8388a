#!/bin/sh
# Data-parallel `dlcc train` under mpirun on emu (docs/parallel.md): 2 and
# 4 ranks equal one process at the same global batch (f32 1e-5), a last
# partial batch split among the ranks, bit-identical run to run and with
# gradients in buckets, dropout's masks as one process draws them, a CNN
# with per-rank batchnorm statistics against the one process that sees
# the same statistics, --sync-bn against one process at the global
# batch, the refusals, and a rank that fails or vanishes
# ending every rank with a message naming it.  Skips without mpirun or
# without MPI in dlcc.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
t="${top_srcdir:-.}/tests/train"
. "${top_srcdir:-.}/tests/mpilib.sh"
A="$t/tiny.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=emu --data $t/data --epochs 2"

# The MLP, 22 samples at a global batch of 8: two full batches and a
# last one of 6, 3 a rank.
expect 0 "" "$dlcc" train $A --batch 8 --save "$tmp/one.safetensors"
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --save "$tmp/two.safetensors" --log "$tmp/two.jsonl"
close "$tmp/one.ckpt.safetensors" "$tmp/two.ckpt.safetensors" "2 ranks against one"
[ "$(grep -c '"step"' "$tmp/two.jsonl")" -eq 6 ] && ok || fail "rank 0's log: $(cat "$tmp/two.jsonl")"
[ "$(grep -c '^epoch' "$tmp/out")" -eq 2 ] && ok || fail "only rank 0 prints: $(cat "$tmp/out")"
# Run to run: the same bits.
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --save "$tmp/two2.safetensors"
cmp -s "$tmp/two.ckpt.safetensors" "$tmp/two2.ckpt.safetensors" && ok || fail "2 ranks twice: not bit-identical"
# --bucket-mb: gradients share all-reduces (tiny.dl's 4 gradients in
# buckets of about 104 bytes: 2 of 2), the same bits; the plan of a
# bucket of 1 MiB has one all-reduce where it had 4.
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --bucket-mb=0.0001 --save "$tmp/bucket.safetensors"
cmp -s "$tmp/two.ckpt.safetensors" "$tmp/bucket.ckpt.safetensors" && ok || fail "--bucket-mb: not the same bits"
for b in 0:4 1:1; do
  n=$("$dlcc" "$t/tiny.dl" -D N=8 --loss=cross_entropy --grad --optimizer=sgd --data-parallel --bucket-mb=${b%:*} \
      --emit=plan | grep -c '^ *[0-9]*  allreduce_mean ')
  [ "$n" -eq "${b#*:}" ] && ok || fail "--bucket-mb=${b%:*}: $n all-reduce steps, expected ${b#*:}"
done

# 4 ranks, 2 samples each (the last 6 dropped: 6 does not split 4 ways).
expect 0 "" "$dlcc" train $A --batch 8 --drop-last --save "$tmp/one_d.safetensors"
expect 0 "" mpi 4 "$dlcc" train $A --batch 8 --drop-last --save "$tmp/four.safetensors"
close "$tmp/one_d.ckpt.safetensors" "$tmp/four.ckpt.safetensors" "4 ranks against one"

# Dropout: each rank draws the masks of its slice of the global batch
# (dlcc.first_sample), so 2 ranks equal one process, the last partial
# batch (3 a rank) too; were the ranks' masks alike they would not.
D="$t/mlpdrop.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=emu --data $t/data --epochs 2 --batch 8"
expect 0 "" "$dlcc" train $D --save "$tmp/drop1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $D --save "$tmp/drop2.safetensors"
close "$tmp/drop1.ckpt.safetensors" "$tmp/drop2.ckpt.safetensors" "dropout on 2 ranks against one"

# The CNN with batchnorm: each rank normalizes over its own 4 images
# (PyTorch DDP).  "twice" repeats each batch of 4, so both ranks see the
# same images and statistics: one process at batch 4 on "half" is the
# run that computes the same.
C="$t/cnnbn.dl --loss=cross_entropy --optimizer=sgd --momentum=0.9 --lr=0.1 --shuffle=false --epochs 2 --backend=emu"
expect 0 "" "$dlcc" train $C --batch 4 --data "$t/cnnbn/half" --save "$tmp/bn1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $C --batch 8 --data "$t/cnnbn/twice" --save "$tmp/bn2.safetensors"
close "$tmp/bn1.ckpt.safetensors" "$tmp/bn2.ckpt.safetensors" "batchnorm per rank"

# --sync-bn: batchnorm over the global batch of 4, 2 images a rank,
# equals one process at batch 4 (losses, weights, running statistics,
# optimizer state, after 4 steps); without it each rank normalizes over
# its 2 and the result differs.
expect 0 "" "$dlcc" train $C --batch 4 --data "$t/cnnbn/half" --save "$tmp/bn4.safetensors" --log "$tmp/bn4.jsonl"
expect 0 "" mpi 2 "$dlcc" train $C --batch 4 --data "$t/cnnbn/half" --sync-bn --save "$tmp/sync.safetensors" \
  --log "$tmp/sync.jsonl"
close "$tmp/bn4.ckpt.safetensors" "$tmp/sync.ckpt.safetensors" "--sync-bn on 2 ranks"
losses "$tmp/bn4.jsonl" >"$tmp/a.v"; losses "$tmp/sync.jsonl" >"$tmp/b.v"
[ "$(wc -l <"$tmp/a.v")" -eq 4 ] && agree "$tmp/a.v" "$tmp/b.v" && ok || fail "--sync-bn losses: $(paste "$tmp/a.v" "$tmp/b.v")"
expect 0 "" mpi 2 "$dlcc" train $C --batch 4 --data "$t/cnnbn/half" --save "$tmp/nosync.safetensors"
st_values "$tmp/bn4.ckpt.safetensors" >"$tmp/a.v"; st_values "$tmp/nosync.ckpt.safetensors" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && fail "per-rank batchnorm equals the global batch's" || ok

# Tensor parallel (Megatron-style): the MLP's fc1 split by rows and fc2
# by columns over 2 and 4 ranks, each rank on the whole batch, equals
# one process (losses and every tensor of the checkpoint, gathered from
# the ranks that own each part), the same bytes twice; the validation
# runs on the gathered weights.
expect 0 "" "$dlcc" train $A --batch 8 --val "$t/val" --save "$tmp/tp1.safetensors" --log "$tmp/tp1.jsonl"
grep '^epoch' "$tmp/out" >"$tmp/tp1.out"
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --val "$t/val" --tensor-parallel=2 --save "$tmp/tp2.safetensors" \
  --log "$tmp/tp2.jsonl"
grep -qx "tensor parallel: split: fc1.weight by output rows, fc2.weight by input columns" "$tmp/out" && ok ||
  fail "the split line: $(cat "$tmp/out")"
grep '^epoch' "$tmp/out" | diff - "$tmp/tp1.out" >/dev/null && ok || fail "2-way tensor parallel: $(cat "$tmp/out")"
close "$tmp/tp1.ckpt.safetensors" "$tmp/tp2.ckpt.safetensors" "2-way tensor parallel against one process"
grep '"step"' "$tmp/tp1.jsonl" | losses /dev/stdin >"$tmp/a.v"; grep '"step"' "$tmp/tp2.jsonl" | losses /dev/stdin >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && ok || fail "2-way tensor parallel losses: $(paste "$tmp/a.v" "$tmp/b.v")"
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --val "$t/val" --tensor-parallel=2 --save "$tmp/tp2b.safetensors"
cmp -s "$tmp/tp2.ckpt.safetensors" "$tmp/tp2b.ckpt.safetensors" && ok || fail "tensor parallel twice: not bit-identical"
expect 0 "" mpi 4 "$dlcc" train $A --batch 8 --tensor-parallel=4 --save "$tmp/tp4.safetensors"
close "$tmp/tp1.ckpt.safetensors" "$tmp/tp4.ckpt.safetensors" "4-way tensor parallel against one process"
# A transformer encoder layer: the q, k, v projections split by heads
# with the output projection by columns, then the MLP.  SGD: the key
# bias's gradient is zero but for rounding, which Adam's normalization
# would blow up into updates of the rounding's sign.
T="$t/attn.dl --loss=mse --optimizer=sgd --momentum=0.9 --lr=0.05 --backend=emu --data $t/attn --epochs 2 --batch 4"
expect 0 "" "$dlcc" train $T --save "$tmp/at1.safetensors" --log "$tmp/at1.jsonl"
expect 0 "" mpi 2 "$dlcc" train $T --tensor-parallel=2 --save "$tmp/at2.safetensors" --log "$tmp/at2.jsonl"
[ "$(grep -c '^tensor parallel: split: ' "$tmp/out")" -eq 2 ] && ok || fail "attention's split lines: $(cat "$tmp/out")"
close "$tmp/at1.ckpt.safetensors" "$tmp/at2.ckpt.safetensors" "attention, 2-way tensor parallel"
losses "$tmp/at1.jsonl" >"$tmp/a.v"; losses "$tmp/at2.jsonl" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && ok || fail "attention tensor parallel losses: $(paste "$tmp/a.v" "$tmp/b.v")"
# 2 heads do not split 4 ways: attention stays whole on every rank (and
# the line says why), the MLP splits, and the result is still one
# process's.
expect 0 "" mpi 4 "$dlcc" train $T --tensor-parallel=4 --save "$tmp/at4.safetensors"
grep -q "^tensor parallel: not split: self_attn.in_proj_weight\[0:8\]: a reshape to f32\[4, 4, 2, 4\] does not keep the split whole (heads not a multiple of 4)" "$tmp/out" &&
  grep -qx "tensor parallel: split: linear1.weight by output rows, linear2.weight by input columns" "$tmp/out" && ok ||
  fail "2 heads 4 ways: $(cat "$tmp/out")"
close "$tmp/at1.ckpt.safetensors" "$tmp/at4.ckpt.safetensors" "attention whole, MLP 4-way"
# The plan: the two regions' forward sums and the second's input
# gradient (the first's input is the model's: no gradient).
n=$("$dlcc" "$t/attn.dl" -D N=4 --loss=mse --grad --optimizer=sgd --tensor-parallel=2:1 --emit=plan 2>"$tmp/err" |
    grep -c '^ *[0-9]*  allreduce_sum ')
[ "$n" -eq 3 ] && grep -c "^dlcc: tensor parallel: split: " "$tmp/err" | grep -qx 2 && ok ||
  fail "the tensor-parallel plan: $n sums; $(cat "$tmp/err")"
expect_sub 1 "dlcc: error: --tensor-parallel=4 does not divide the 2 ranks of the launch (mpirun -np 4 for tensor parallel alone)" \
  mpi 2 "$dlcc" train $A --batch 8 --tensor-parallel=4
expect_sub 1 "dlcc: error: --tensor-parallel=2 with 4 ranks would add data parallel over 2 groups, which is not built yet: launch 2 ranks" \
  mpi 4 "$dlcc" train $A --batch 8 --tensor-parallel=2
expect_sub 1 "dlcc: error: --tensor-parallel expects a whole number >= 1, got '0'" \
  "$dlcc" train $A --batch 8 --tensor-parallel=0
expect_sub 1 "tensor parallel over 2 ranks does not support clip_grad_norm (each rank holds a part of the split gradients) yet" \
  mpi 2 "$dlcc" train $A --batch 8 --tensor-parallel=2 --clip-grad-norm=1

# Refusals, from every rank.
expect_sub 1 "dlcc: error: --batch=7 does not divide among 2 ranks: give a multiple of 2" \
  mpi 2 "$dlcc" train $A --batch 7
expect_sub 1 "the last batch of 6 samples does not divide among 4 ranks: add --drop-last" \
  mpi 4 "$dlcc" train $A --batch 8

# Bad data on rank 1 only: rank 0 stops with rank 1's message.
mkdir "$tmp/bad"; cp "$t/data/target.npy" "$tmp/bad/"; cp "$t/bad/x_f64.npy" "$tmp/bad/x.npy"
expect_sub 1 "dlcc: error: rank 0 stops: rank 1: $tmp/bad/x.npy: samples of f64 [4], but the model's input 'x' takes f32 [4] per sample" \
  mpi 1 "$dlcc" train $A --batch 8 --dist-timeout=30 : -np 1 "$dlcc" train $A --batch 8 --data "$tmp/bad"
# A rank that leaves early (1 epoch where rank 0 runs 2): rank 0's next
# all-reduce times out, says so, and ends the job.
start=$(date +%s)
expect_sub 1 "dlcc: rank 0: an all-reduce timed out after 2 s waiting for the other ranks" \
  mpi 1 "$dlcc" train $A --batch 8 --dist-timeout=2 : -np 1 "$dlcc" train $A --batch 8 --epochs 1
[ $(($(date +%s) - start)) -lt 60 ] && ok || fail "the timeout took $(($(date +%s) - start)) s"

finish dist_cli
