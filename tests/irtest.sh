#!/bin/sh
# IR-level golden tests of the passes: each tests/golden/passes/NAME.ir
# names its dlcc flags on a "; RUN:" line; `dlcc FLAGS NAME.ir --emit=ir`
# must print exactly NAME.expected.  IRTEST_UPDATE=1 rewrites the
# .expected files from the current compiler (then read the diff).
set -u
dlcc="${top_builddir:-.}/dlcc"
src="${top_srcdir:-.}"
dir="$src/tests/golden/passes"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
cd "$dir" || exit 1
for ir in *.ir; do
  name=${ir%.ir}
  flags=$(sed -n 's/^; RUN: *//p' "$ir" | head -1)
  if [ -z "$flags" ]; then
    echo "FAIL: $ir has no '; RUN:' line"; fails=$((fails + 1)); continue
  fi
  # shellcheck disable=SC2086 # flags are words
  if ! "$dlcc" $flags "$ir" --emit=ir >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL: dlcc $flags $ir exited non-zero:"; cat "$tmp/err"; fails=$((fails + 1)); continue
  fi
  if [ "${IRTEST_UPDATE:-0}" = 1 ]; then
    cp "$tmp/out" "$name.expected"
  elif ! diff -u "$name.expected" "$tmp/out" >"$tmp/diff" 2>&1; then
    echo "FAIL: dlcc $flags $ir differs from $name.expected:"; cat "$tmp/diff"
    fails=$((fails + 1)); continue
  fi
  # The output is valid IR that reads back unchanged with no passes.
  cp "$tmp/out" "$tmp/out.ir"
  if ! "$dlcc" -O0 "$tmp/out.ir" --emit=ir >"$tmp/back" 2>"$tmp/err" || ! cmp -s "$tmp/out" "$tmp/back"; then
    echo "FAIL: the output of $ir does not read back:"; cat "$tmp/err"; fails=$((fails + 1)); continue
  fi
  passes=$((passes + 1))
done
# The pass manager's flags on the command line.
t="$dir/simplify_identity.ir"
check() { # check WHAT COMMAND...: the command succeeds
  what=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then passes=$((passes + 1)); else
    echo "FAIL: $what: $* exited non-zero:"; cat "$tmp/err"; fails=$((fails + 1)); fi
}
has() { # has FILE TEXT
  if grep -qF -- "$2" "$1"; then passes=$((passes + 1)); else
    echo "FAIL: $1 lacks '$2':"; head -20 "$1"; fails=$((fails + 1)); fi
}
if "$dlcc" --passes=simplify,dcee "$t" --emit=ir >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: an unknown pass was accepted"; fails=$((fails + 1))
fi
has "$tmp/err" "unknown pass 'dcee' in --passes; did you mean 'dce'?"
if "$dlcc" -O3 "$t" >"$tmp/out" 2>"$tmp/err"; then echo "FAIL: -O3 was accepted"; fails=$((fails + 1)); fi
has "$tmp/err" "unknown optimization level '-O3'"
check "print-after" "$dlcc" --passes=simplify,dce --print-after=simplify --print-before=dce "$t" --emit=ir
has "$tmp/err" "; *** IR Dump After simplify ***"
has "$tmp/err" "; *** IR Dump Before dce ***"
check "print-after-all" "$dlcc" -O1 --print-after-all --time-passes --stats --verify-each "$t" --emit=ir
has "$tmp/err" "; *** IR Dump After cse ***"
has "$tmp/err" "Pass execution timing report"
has "$tmp/err" "graph: ops before"
has "$tmp/err" "simplify: identities removed"
check "dump-dir" "$dlcc" --passes=simplify,dce --dump-dir="$tmp/dumps" "$t" --emit=ir
has "$tmp/dumps/002_dce.ir" "graph simplify_identity {"
cmp -s "$tmp/out" "$tmp/dumps/002_dce.ir" || { echo "FAIL: the last dump is not the output"; fails=$((fails + 1)); }
check "-O0" "$dlcc" -O0 "$t" --emit=ir
has "$tmp/out" "pow %"
check "help" "$dlcc" --help
has "$tmp/out" "bn-fold"
check "run -O0" "$dlcc" run -O0 --backend=ref "$t"
check "run -O1" "$dlcc" run -O1 --backend=ref "$t"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
