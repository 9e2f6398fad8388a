# Training's foundation (docs/training.md): every gradient rule against
# finite differences in f64 on the reference interpreter, autodiff's
# errors, the IR text of state updates and Philox (test_grad); the
# training ops' kernels, dropout's mask bit for bit and the gradients of
# the example models on emu against ir_eval (test_train).
if HAVE_CHECK
check_PROGRAMS += tests/test_grad tests/test_train
TESTS += tests/test_grad tests/test_train
tests_test_grad_SOURCES = tests/test_grad.c tests/testutil.c tests/testutil.h
tests_test_grad_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_grad_CFLAGS = $(TEST_CFLAGS)
tests_test_grad_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
tests_test_train_SOURCES = tests/test_train.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_train_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_train_CFLAGS = $(TEST_CFLAGS)
tests_test_train_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
