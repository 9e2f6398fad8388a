# Pipeline-parallel training under mpirun (tests/pipeline_cli.sh; skips
# without mpirun) and the stage split without MPI (tests/test_stages.c).
TESTS += tests/pipeline_cli.sh
EXTRA_DIST += tests/pipeline_cli.sh tests/mpilib.sh tests/train/mlp4.dl tests/train/tied.ir
