BENCHES += tests/bench/compile.sh
EXTRA_DIST += tests/bench/compile.sh
