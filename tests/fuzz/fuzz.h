/* What every libFuzzer target of tests/fuzz/ shares: inputs as files
 * without touching the disk (memfd), the checks on accepted and rejected
 * input, and the IR text round trip.  A failed check prints why and
 * aborts, which libFuzzer reports as a crash with the input saved. */
#ifndef DLCC_TESTS_FUZZ_H
#define DLCC_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

_Noreturn void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A file in memory: path is /proc/self/fd/N, so readers that take a path
 * read the bytes given to fuzz_file_set.  The descriptor lives as long as
 * the process. */
typedef struct FuzzFile {
  int fd;
  char path[48];
} FuzzFile;

void fuzz_file_open(FuzzFile *f, const char *name);
/* Replaces the file's contents. */
void fuzz_file_set(FuzzFile *f, const void *data, size_t size);

/* A directory made once per process (removed at exit) holding ext.bin,
 * 64 KiB of known bytes, for ONNX external data to point at. */
const char *fuzz_model_dir(void);
/* Writes data to dir/name and returns that path (malloc'd). */
char *fuzz_model_file(const char *name, const void *data, size_t size);

/* A copy of the input without a terminator, so ASan sees any read past
 * its end; free it. */
char *fuzz_copy(const uint8_t *data, size_t size);

/* A rejection must say why: err (or c's diag) non-empty, and for c an
 * error counted. */
void fuzz_require_message(const char *what, const char *err);
void fuzz_require_diag(const char *what, const Ctx *c);

/* g as IR text (malloc'd, NUL-terminated). */
char *fuzz_ir_text(Graph *g);

/* g must pass the verifier, print, parse back, verify and print the same
 * text; also writes its DOT graph.  Returns the text (malloc'd). */
char *fuzz_check_graph(Ctx *c, Graph *g, const char *what);

/* The input as text, for fuzz_run_text. */
typedef struct FuzzText {
  const char *text; /* a copy without a terminator (fuzz_copy) */
  size_t len;
} FuzzText;

/* Runs fn(c, FuzzText *) on a fresh context under fuzz_guard, then frees
 * everything. */
void fuzz_run_text(const uint8_t *data, size_t size, int (*fn)(Ctx *c, void *text));

/* Runs fn under c's guard; an internal error (a longjmp to the guard) is
 * a bug even on garbage input, so it fails.  Returns fn's result. */
int fuzz_guard(Ctx *c, int (*fn)(Ctx *c, void *data), void *data);

/* /dev/null, opened once, for output that is only produced, not read. */
FILE *fuzz_devnull(void);

#endif
