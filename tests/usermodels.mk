# User-style models (tests/usermodels/*.dl) on ref and emu at -O0 and -O2,
# compared with each other; and a NumPy check of the pooling, data
# movement, reduction and broadcasting models (skips without numpy).
if HAVE_CHECK
check_PROGRAMS += tests/test_usermodels
TESTS += tests/test_usermodels
tests_test_usermodels_SOURCES = tests/test_usermodels.c
tests_test_usermodels_CFLAGS = $(TEST_CFLAGS)
tests_test_usermodels_LDADD = $(TEST_LIBS)
endif
TESTS += tests/usermodels/npcheck.sh
EXTRA_DIST += tests/usermodels/npcheck.sh tests/usermodels/npcheck.py \
	tests/usermodels/vgg11.dl tests/usermodels/unet.dl tests/usermodels/squeezenet.dl \
	tests/usermodels/densenet.dl tests/usermodels/mobilenetv1.dl tests/usermodels/resnext.dl \
	tests/usermodels/vit.dl tests/usermodels/gpt.dl tests/usermodels/gru_classifier.dl \
	tests/usermodels/seq2seq.dl tests/usermodels/autoencoder.dl tests/usermodels/multi_dtype.dl \
	tests/usermodels/embed_i32.dl tests/usermodels/reductions.dl tests/usermodels/broadcast.dl \
	tests/usermodels/odd_sizes.dl tests/usermodels/pools.dl tests/usermodels/movement.dl \
	tests/usermodels/generator.dl tests/usermodels/segment.dl tests/usermodels/masking.dl
