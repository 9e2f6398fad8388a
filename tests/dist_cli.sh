#!/bin/sh
# Data-parallel `dlcc train` under mpirun on emu and ref (docs/parallel.md): 2 and
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
# Each rank reading its samples from the files (--stream-mb=0): the same bits.
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --stream-mb=0 --save "$tmp/streamed.safetensors"
cmp -s "$tmp/two.ckpt.safetensors" "$tmp/streamed.ckpt.safetensors" && ok || fail "2 ranks streaming: not the same bits"
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

# The ref backend (the interpreter): its all-reduces go through the same
# MPI collectives on host memory, so 2 ranks equal one process there
# too, and --sync-bn equals one process at the global batch.
F="$t/tiny.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=ref --data $t/data --epochs 2"
expect 0 "" "$dlcc" train $F --batch 8 --save "$tmp/ref1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $F --batch 8 --save "$tmp/ref2.safetensors"
close "$tmp/ref1.ckpt.safetensors" "$tmp/ref2.ckpt.safetensors" "2 ranks against one on ref"
CF="$t/cnnbn.dl --loss=cross_entropy --optimizer=sgd --momentum=0.9 --lr=0.1 --shuffle=false --epochs 2 --backend=ref"
expect 0 "" mpi 2 "$dlcc" train $CF --batch 4 --data "$t/cnnbn/half" --sync-bn --save "$tmp/refsync.safetensors"
close "$tmp/bn4.ckpt.safetensors" "$tmp/refsync.ckpt.safetensors" "--sync-bn on 2 ranks on ref"

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
