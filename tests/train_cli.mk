# dlcc train and dlc_train_* (docs/training.md): the CLI on a tiny MLP
# (train_cli.sh: convergence, emu == ref, resume bit for bit, the log,
# schedules, every bad-data message) and the API and host pieces in C
# (test_train_api: the schedules against PyTorch's closed forms, the
# data order, parameters read and written, copy_state, save and its
# errors).
TESTS += tests/train_cli.sh tests/torch_train.sh
EXTRA_DIST += tests/train_cli.sh tests/torch_train.sh tests/torch/train_parity.py tests/torch/grad_sweep.py tests/torch/sweep_pieces.py tests/train/tiny.dl tests/train/tinybn.dl tests/train/make_data.py \
	tests/train/data/x.npy tests/train/data/target.npy tests/train/val/x.npy tests/train/val/target.npy \
	tests/train/bad/target21.npy tests/train/bad/x_f64.npy tests/train/bad/x5.npy tests/train/bad/x0.npy \
	tests/train/bad/target0.npy tests/train/bad/target_class.npy \
	tests/train/alt/target_i32.npy tests/train/alt/target_prob.npy \
	tests/train/lenet8/x.npy tests/train/lenet8/target.npy tests/train/seqsign/x.npy tests/train/seqsign/target.npy \
	tests/train/seqsign_gru.dl
if HAVE_CHECK
check_PROGRAMS += tests/test_train_api
TESTS += tests/test_train_api
tests_test_train_api_SOURCES = tests/test_train_api.c driver/train_data.c driver/train_prefetch.c driver/train_sched.c driver/train.h
tests_test_train_api_CFLAGS = $(TEST_CFLAGS)
tests_test_train_api_LDADD = $(TEST_LIBS)
endif
BENCHES += tests/bench/train_digits.sh
EXTRA_DIST += tests/bench/train_digits.sh
