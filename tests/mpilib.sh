# What the mpirun tests (tests/dist_cli.sh, tests/pipeline_cli.sh) share:
# source it after tests/clilib.sh with $dlcc set.  Skips (exit 77)
# without mpirun or without MPI in dlcc; gives mpi (mpirun under a
# timeout, leak checking kept), st_values, agree, agree_at, close and losses.
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
# As root (CI's containers) OpenMPI wants both; on 2 cores, oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Leak checking stays on under mpirun, with what OpenMPI allocates in
# MPI_Init and MPI_Finalize suppressed (tests/lsan-mpi.supp says what and
# why); LSan reaches those frames through OpenMPI's only by unwinding
# slowly.
supp=$(cd "${top_srcdir:-.}/tests" && pwd)/lsan-mpi.supp
mpi() {
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:fast_unwind_on_malloc=0" LSAN_OPTIONS="${LSAN_OPTIONS:-}:suppressions=$supp" \
    timeout 120 mpirun --oversubscribe -np "$@"
}
if ! mpi 1 "$dlcc" train --help 2>&1 | grep -q -- --dist-timeout; then
  echo "SKIP: mpirun cannot start dlcc"; exit 77
fi

# f32 values of a safetensors file's data (every tensor, in the file's
# order; an i64 counter reads as two f32 words, equal when it is), one a line.
st_values() {
  hl=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  od -An -v -t f4 -j $((8 + hl)) "$1" | tr -s ' ' '\n' | sed '/^$/d'
}
# agree A.v B.v: two files of values, one a line, agree at f32 1e-5.
agree() {
  paste "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1
      if (d > 1e-5 * m + 1e-6) bad++ } END { exit bad > 0 || NR == 0 }'
}
# agree_at T A.v B.v: the same at tolerance T (relative and absolute).
agree_at() {
  paste "$2" "$3" | awk -v t="$1" '{ d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1
      if (d > t * m + t) bad++ } END { exit bad > 0 || NR == 0 }'
}
# close A B WHAT: the two files' values agree at f32 1e-5.
close() {
  st_values "$1" >"$tmp/a.v"; st_values "$2" >"$tmp/b.v"
  if agree "$tmp/a.v" "$tmp/b.v"; then ok; else fail "$3: $1 and $2 differ"; fi
}
# losses LOG: the losses of a --log file, one a line.
losses() { sed 's/.*"loss": \([^,]*\),.*/\1/' "$1"; }

