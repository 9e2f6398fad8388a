# Fuzzing (docs/fuzzing.md): one libFuzzer target per reader,
# tests/fuzz/fuzz_NAME.c, linked against every source of the compiler and
# the runtime compiled again by clang (configure's FUZZ_CC) with coverage,
# ASan and UBSan.  make check builds them (check_DATA) and tests/fuzz.sh
# runs each for a bounded time; `make fuzz` builds them for long runs by
# hand (tests/fuzz/run.sh).  These two lists are the one list of targets:
# each NAME has tests/fuzz/fuzz_NAME.c, tests/fuzz/corpus/NAME/ and maybe
# tests/fuzz/dict/NAME.dict.
FUZZ_TARGETS_CORE = dl ir compile npy safetensors plan
FUZZ_TARGETS_ONNX = onnx onnx_tensor
FUZZ_TARGETS = $(FUZZ_TARGETS_CORE)
if HAVE_ONNX
FUZZ_TARGETS += $(FUZZ_TARGETS_ONNX)
endif

FUZZ_PROGS = $(FUZZ_TARGETS:%=tests/fuzz/fuzz_%)
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS = -std=c11 -O1 -gline-tables-only $(FUZZ_SAN)
# The project's sources with every library's flags; their warnings are
# gcc's business in the main build, so clang's are off here.
FUZZ_CPPFLAGS = $(libdlcrt_la_CPPFLAGS) $(libdlaot_la_CPPFLAGS) $(PROTOBUF_C_CFLAGS)
FUZZ_LIB_SRCS = $(filter %.c,$(libdlcc_core_la_SOURCES) $(libdlcrt_la_SOURCES) $(libdlaot_la_SOURCES) \
	$(libdlonnx_gen_la_SOURCES) $(patsubst %.y,%.c,$(patsubst %.l,%.c,$(libdlfe_gen_la_SOURCES))))
FUZZ_LIB_OBJS = $(FUZZ_LIB_SRCS:%.c=tests/fuzz/lib/%.o)
FUZZ_MAIN_OBJS = $(FUZZ_TARGETS:%=tests/fuzz/fuzz_%.o) tests/fuzz/fuzz.o
FUZZ_LIBS = $(CJSON_LIBS) $(PROTOBUF_C_LIBS) -lm -ldl -lpthread

$(FUZZ_LIB_OBJS): tests/fuzz/lib/%.o: %.c
	@$(MKDIR_P) $(@D)
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -w -MMD -MP -c -o $@ $<
$(FUZZ_MAIN_OBJS): tests/fuzz/%.o: tests/fuzz/%.c
	@$(MKDIR_P) $(@D)
	$(AM_V_CC)$(FUZZ_CC) $(AM_CPPFLAGS) $(FUZZ_CFLAGS) $(WARN_CFLAGS) -MMD -MP -c -o $@ $<
tests/fuzz/libdlcc-fuzz.a: $(FUZZ_LIB_OBJS)
	$(AM_V_at)rm -f $@ && $(AR) cr $@ $(FUZZ_LIB_OBJS) && $(RANLIB) $@
$(FUZZ_PROGS): tests/fuzz/fuzz_%: tests/fuzz/fuzz_%.o tests/fuzz/fuzz.o tests/fuzz/libdlcc-fuzz.a
	$(AM_V_CCLD)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LIBS)
-include $(FUZZ_LIB_OBJS:.o=.d) $(FUZZ_MAIN_OBJS:.o=.d)

check_DATA =
if HAVE_FUZZER
check_DATA += $(FUZZ_PROGS)
fuzz: $(FUZZ_PROGS)
else
fuzz:
	@echo "make fuzz: $(FUZZ_SKIP)" >&2; exit 1
endif
fuzz-list:
	@echo $(FUZZ_TARGETS)
.PHONY: fuzz fuzz-list

TESTS += tests/fuzz.sh
AM_TESTS_ENVIRONMENT += FUZZ_TARGETS='$(FUZZ_TARGETS)' FUZZ_SKIP='$(FUZZ_SKIP)' FUZZ_SANITIZED='$(SAN_CFLAGS)'; \
	export FUZZ_TARGETS FUZZ_SKIP FUZZ_SANITIZED;
EXTRA_DIST += tests/fuzz.sh tests/fuzz/run.sh tests/fuzz/make_seeds.py tests/fuzz/corpus tests/fuzz/dict \
	$(FUZZ_TARGETS_CORE:%=tests/fuzz/fuzz_%.c) $(FUZZ_TARGETS_ONNX:%=tests/fuzz/fuzz_%.c) \
	tests/fuzz/fuzz.c tests/fuzz/fuzz.h
clean-local: clean-fuzz
clean-fuzz:
	rm -rf tests/fuzz/lib tests/fuzz/run tests/fuzz/artifacts tests/fuzz/libdlcc-fuzz.a \
	  tests/fuzz/*.o tests/fuzz/*.d $(FUZZ_PROGS)
.PHONY: clean-fuzz
