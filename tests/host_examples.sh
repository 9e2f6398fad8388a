#!/bin/sh
# The host examples, as a user builds them: examples/host_jit.c against
# dlcc.h and libdlcc (the compiler API) and examples/host_aot.c against
# the mlp.so and mlp.h that dlcc writes.  Both run mlp on emu and
# must agree with `dlcc run --backend=ref` on the same input (f32: 1e-5
# relative).
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
dlcc="$b/dlcc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DLCC_CACHE_DIR="$tmp/cache"
[ -n "${DLCC_EMU_HEADER:-}" ] || DLCC_EMU_HEADER="$s/runtime/emu/dlcc_emu.h" && export DLCC_EMU_HEADER
fail() { echo "FAIL: $*"; exit 1; }

# npy_values FILE: "output NAME COUNT" and one f32 a line, as the host
# examples print them (an .npy v1 header is 10 bytes plus its length).
npy_values() {
  hl=$(od -An -t u2 -j 8 -N 2 "$1" | tr -d ' ')
  od -An -v -t f4 -j $((10 + hl)) "$1" | tr -s ' ' '\n' | sed '/^$/d' >"$tmp/v"
  echo "output $2 $(wc -l <"$tmp/v" | tr -d ' ')"
  cat "$tmp/v"
}

# close A B: same header lines, values within 1e-5 relative (of the
# value, or 1e-3 of the largest for values near zero).
close() {
  awk -v what="$3" '
    NR == FNR { a[FNR] = $0; n = FNR; next }
    { m = FNR
      if ($1 == "output") { if ($0 != a[FNR]) { print what ": line " FNR ": " a[FNR] " vs " $0; bad = 1 }; next }
      v[FNR] = $1 + 0; w[FNR] = a[FNR] + 0; s = (w[FNR] < 0 ? -w[FNR] : w[FNR]); if (s > big) big = s }
    END {
      if (m != n || n < 2) { print what ": " n " lines vs " m; exit 1 }
      for (i in v) { d = v[i] - w[i]; if (d < 0) d = -d; s = (w[i] < 0 ? -w[i] : w[i]); if (s < 1e-3 * big) s = 1e-3 * big
        if (d > 1e-5 * s) { print what ": value " i ": " w[i] " vs " v[i]; bad = 1 } }
      exit bad }' "$1" "$2"
}

"$dlcc" "$s/examples/mlp.dl" -o "$tmp/mlp.so" || fail "dlcc -o mlp.so"
[ -f "$tmp/mlp.h" ] || fail "dlcc wrote no mlp.h"
# In the build tree: dlcrt.h from the source, libdlcrt from .libs; an
# installed dlcc would use $(pkg-config --cflags --libs dlcrt).
# shellcheck disable=SC2086 # DLCC_HOST_CFLAGS: words (the sanitizers of the build)
${CC:-cc} -std=c11 -Wall -Wextra -Werror ${DLCC_HOST_CFLAGS:-} -I"$tmp" -I"$s/include" "$s/examples/host_aot.c" "$tmp/mlp.so" \
  -L"$b/.libs" -ldlcrt -Wl,-rpath,"$b/.libs" -Wl,-rpath,'$ORIGIN' -o "$tmp/host_aot" || fail "compiling host_aot.c"

# host_jit.c as a user builds it against an installed dlcc ($(pkg-config
# --cflags --libs dlcc)): dlcc.h and libdlcc alone, which exports the
# dlc_* functions and nothing else.
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -Wall -Wextra -Werror ${DLCC_HOST_CFLAGS:-} -I"$s/include" "$s/examples/host_jit.c" \
  -L"$b/.libs" -ldlcc -Wl,-rpath,"$b/.libs" -o "$tmp/host_jit" || fail "compiling host_jit.c against libdlcc"
exported=$(nm -D --defined-only "$b/.libs/libdlcc.so" | awk '$2 == "T" && $3 !~ /^dlc_/ { print $3 }' | head -3)
[ -z "$exported" ] || fail "libdlcc exports more than dlc_*: $exported"

mkdir "$tmp/in"
# libdlcrt, which libdlcc needs, is in the same uninstalled folder.
LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/host_jit" "$s/examples/mlp.dl" emu "$tmp/in" \
  >"$tmp/jit.txt" || fail "host_jit"
"$tmp/host_aot" emu >"$tmp/aot.txt" || fail "host_aot"
[ -f "$tmp/in/x.npy" ] || fail "host_jit wrote no x.npy"
"$dlcc" run "$s/examples/mlp.dl" --backend=ref --input "x=$tmp/in/x.npy" --output-dir "$tmp/ref" >/dev/null ||
  fail "dlcc run --backend=ref"
npy_values "$tmp/ref/probs.npy" probs >"$tmp/ref.txt"
head -1 "$tmp/jit.txt" | grep -qx "output probs 80" || fail "host_jit printed: $(head -2 "$tmp/jit.txt")"
close "$tmp/ref.txt" "$tmp/jit.txt" "host_jit vs ref" || fail "host_jit differs from the reference"
close "$tmp/ref.txt" "$tmp/aot.txt" "host_aot vs ref" || fail "host_aot differs from the reference"
echo "host_jit and host_aot agree with the reference on $(($(wc -l <"$tmp/ref.txt") - 1)) values"
