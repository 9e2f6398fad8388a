#!/bin/sh
# The dlcc command line: options, exit codes, messages, and that what
# --emit=ir writes reads back in.
set -u
dlcc="${top_builddir:-.}/dlcc"
src="${top_srcdir:-.}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

ok() { passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect STATUS "stderr substring" command...
expect() {
  want_rc=$1 want_err=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    fail "$* exited $rc, expected $want_rc"; cat "$tmp/err"; return
  fi
  if [ -n "$want_err" ] && ! grep -qF -- "$want_err" "$tmp/err"; then
    fail "$*: stderr lacks '$want_err':"; cat "$tmp/err"; return
  fi
  ok
}

expect 0 "" "$dlcc" --help
grep -q "usage: dlcc" "$tmp/out" || fail "--help prints no usage"
expect 0 "" "$dlcc" --version
grep -q "^dlcc [0-9]" "$tmp/out" || fail "--version prints no version"
expect 1 "no input file" "$dlcc"
expect 1 "unknown option '--frobnicate'" "$dlcc" --frobnicate x.dl
expect 1 "cannot read '$tmp/missing.dl': No such file or directory" "$dlcc" "$tmp/missing.dl"
expect 1 "cannot read '$tmp': it is a directory" "$dlcc" "$tmp"
expect 1 "-D expects NAME=INTEGER, got 'N=abc'" "$dlcc" -D N=abc "$src/examples/mlp.dl"
expect 1 "unknown --emit kind 'llvm'" "$dlcc" --emit=llvm "$src/examples/mlp.dl"

# A model with an error: exit 1, located message, no output file left behind.
printf 'model m(x: f32[2, 3]) -> f32[2, 3] {\n  return relu(y)\n}\n' >"$tmp/bad.dl"
expect 1 "bad.dl:2:15: error:" "$dlcc" "$tmp/bad.dl" --emit=ir -o "$tmp/bad.ir"
[ -e "$tmp/bad.ir" ] && fail "a failed compile left $tmp/bad.ir behind"

# The summary, -D, and the IR written by --emit=ir reads back unchanged.
expect 0 "" "$dlcc" "$src/examples/mlp.dl"
grep -q "model mlp:" "$tmp/out" || fail "no summary line: $(cat "$tmp/out")"
expect 0 "" "$dlcc" -D N=3 "$src/examples/mlp.dl" --emit=ir -o "$tmp/mlp.ir"
grep -q "input {name=\"x\"} : f32\[3, 784\]" "$tmp/mlp.ir" || fail "-D N=3 did not reach the input type"
expect 0 "" "$dlcc" "$tmp/mlp.ir" --emit=ir -o "$tmp/mlp2.ir"
cmp -s "$tmp/mlp.ir" "$tmp/mlp2.ir" || fail "IR read back from --emit=ir prints differently"
expect 0 "" "$dlcc" "$src/examples/resnet18.dl" --emit=dot -o "$tmp/r.dot"
head -1 "$tmp/r.dot" | grep -q "^digraph" || fail "--emit=dot does not start with digraph"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
