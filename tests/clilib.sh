# What the command-line tests (tests/*_cli.sh, cli.sh, aot.sh) share:
# source it after `set -u`.  Gives $tmp (removed at exit), the pass/fail
# counters, expect/expect_sub and .npy readers; finish prints the tally
# and is the script's status.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
ok() { passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_in MODE STATUS "stderr text" command...: the exit status, and
# stderr has the text as a whole line (MODE x) or anywhere (MODE "").
expect_in() {
  mode=$1 want_rc=$2 want_err=$3
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    fail "$* exited $rc, expected $want_rc"; cat "$tmp/err"; return
  fi
  if [ -n "$want_err" ] && ! grep -q${mode}F -- "$want_err" "$tmp/err"; then
    fail "$*: stderr lacks '$want_err':"; cat "$tmp/err"; return
  fi
  ok
}
# expect STATUS "exact stderr line" command...
expect() { expect_in x "$@"; }
# expect_sub STATUS "stderr substring" command...
expect_sub() { expect_in "" "$@"; }

# f32 values of an .npy, one a line.
npy_values() {
  hl=$(od -An -t u2 -j 8 -N 2 "$1" | tr -d ' ')
  od -An -v -t f4 -j $((10 + hl)) "$1" | tr -s ' ' '\n' | sed '/^$/d'
}

finish() {
  echo "${1:+$1: }$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
