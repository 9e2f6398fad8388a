# ThreadSanitizer (docs/runtime.md, "Threads"): libdlcrt compiled again
# with -fsanitize=thread into tests/tsan/libdlcrt.so.0, which the test's
# model.so then loads in place of the build's (it is the library's
# soname), and tests/tsan/threads (tests/threads.c) linked against it.
# tests/threads.sh runs it: 8 threads, a model each, 1,000 runs each.
TSAN_FLAGS = -fsanitize=thread -fno-omit-frame-pointer
TSAN_CFLAGS = -std=c11 -O1 -g -fPIC $(TSAN_FLAGS)
TSAN_LIB_SRCS = $(filter %.c,$(libdlcrt_la_SOURCES))
TSAN_LIB_OBJS = $(TSAN_LIB_SRCS:%.c=tests/tsan/lib/%.o)

# The library's warnings are the main build's business.
$(TSAN_LIB_OBJS): tests/tsan/lib/%.o: %.c
	@$(MKDIR_P) $(@D)
	$(AM_V_CC)$(CC) $(libdlcrt_la_CPPFLAGS) $(TSAN_CFLAGS) -w -MMD -MP -c -o $@ $<
tests/tsan/libdlcrt.so.0: $(TSAN_LIB_OBJS)
	$(AM_V_CCLD)$(CC) $(TSAN_FLAGS) -shared -Wl,-soname,libdlcrt.so.0 -o $@ $(TSAN_LIB_OBJS) \
	  $(CJSON_LIBS) $(CUDA_LIBS) -lm -ldl -lpthread
tests/tsan/threads: tests/threads.c tests/tsan/libdlcrt.so.0
	$(AM_V_CCLD)$(CC) $(AM_CPPFLAGS) $(TSAN_CFLAGS) $(WARN_CFLAGS) $(CHECK_CFLAGS) -o $@ $(srcdir)/tests/threads.c \
	  tests/tsan/libdlcrt.so.0 -Wl,-rpath,'$$ORIGIN' $(CHECK_LIBS) -lpthread
-include $(TSAN_LIB_OBJS:.o=.d)

if HAVE_TSAN
check_DATA += tests/tsan/threads
endif
TESTS += tests/threads.sh
AM_TESTS_ENVIRONMENT += TSAN_SKIP='$(TSAN_SKIP)'; export TSAN_SKIP;
EXTRA_DIST += tests/threads.sh tests/threads.c tests/threads.dl tests/tsan.supp
clean-local: clean-tsan
clean-tsan:
	rm -rf tests/tsan
