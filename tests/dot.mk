# --emit=dot: golden pictures of a small model, kernels after fusion,
# and every example through Graphviz when it is installed.
TESTS += tests/dot.sh
EXTRA_DIST += tests/dot.sh tests/dot/net.dl tests/dot/net.O0.dot tests/dot/net.depth0.dot \
	tests/dot/net.kernels.dot
