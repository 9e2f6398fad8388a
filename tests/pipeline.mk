# Pipeline-parallel training and inference under mpirun
# (tests/pipeline_cli.sh, tests/pipeline_run.sh; skip without mpirun) and
# the stage split without MPI (tests/test_stages.c).
TESTS += tests/pipeline_cli.sh tests/pipeline_run.sh
EXTRA_DIST += tests/pipeline_run.sh tests/pipeinf/multi.dl tests/pipeinf/x8.npy tests/pipeinf/mlp3.onnx
EXTRA_DIST += tests/pipeline_cli.sh tests/mpilib.sh tests/train/mlp4.dl tests/train/mlp4_offset.dl tests/train/part.ir tests/train/mlp4_staged.dl tests/train/cnnbn_staged.dl tests/train/cnnbn_m19.dl tests/train/tied.ir tests/train/weights_first.ir tests/train/mlpdrop.dl
if HAVE_CHECK
check_PROGRAMS += tests/test_stages
TESTS += tests/test_stages
tests_test_stages_SOURCES = tests/test_stages.c tests/irjob.c tests/irjob.h
tests_test_stages_CFLAGS = $(TEST_CFLAGS)
tests_test_stages_LDADD = $(TEST_LIBS)
endif
