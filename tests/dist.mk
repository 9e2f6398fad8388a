# Data-parallel and tensor-parallel training under mpirun
# (tests/dist_cli.sh, tests/tp_cli.sh; skip without
# mpirun), and the NCCL communicator built and linked where NCCL is
# installed (no run: these machines have no GPU).
TESTS += tests/dist_cli.sh tests/tp_cli.sh
EXTRA_DIST += tests/dist_cli.sh tests/tp_cli.sh tests/train/tinybn_tp.dl tests/lsan-mpi.supp tests/train/mlpdrop.dl tests/train/cnnbn.dl tests/train/cnnbn/half/x.npy tests/train/cnnbn/half/target.npy \
	tests/train/cnnbn/twice/x.npy tests/train/cnnbn/twice/target.npy \
	tests/train/cnnbn/quad/x.npy tests/train/cnnbn/quad/target.npy \
	tests/train/attn.dl tests/train/attn/x.npy tests/train/attn/target.npy tests/train/exported.ir tests/train/mha_export.ir tests/train/decoder_export.ir \
	tests/train/tokens.dl tests/train/tokens/x.npy tests/train/tokens/target.npy \
	tests/train/tied_lm.ir tests/train/lm/x.npy tests/train/lm/target.npy \
	tests/train/seq_lm.dl tests/train/seq_lm/x.npy tests/train/seq_lm/target.npy
BENCHES += tests/bench/dist_overlap.sh
EXTRA_DIST += tests/bench/dist_overlap.sh
