/* The fuzz targets' shared checks (fuzz.h): takes inputs, graphs and
 * messages, returns only when they hold; otherwise prints the broken
 * rule and aborts so that libFuzzer keeps the input. */
#include "tests/fuzz/fuzz.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

_Noreturn void fuzz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

void fuzz_file_open(FuzzFile *f, const char *name) {
  f->fd = memfd_create(name, 0);
  if (f->fd < 0) fuzz_fail("memfd_create(%s) failed", name);
  snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

void fuzz_file_set(FuzzFile *f, const void *data, size_t size) {
  if (ftruncate(f->fd, 0) != 0) fuzz_fail("ftruncate(%s) failed", f->path);
  const char *p = data;
  for (size_t done = 0; done < size;) {
    ssize_t n = pwrite(f->fd, p + done, size - done, (off_t)done);
    if (n <= 0) fuzz_fail("pwrite(%s) failed", f->path);
    done += (size_t)n;
  }
}

static char model_dir[4096];

static void remove_model_dir(void) {
  char path[4200];
  /* Only what the targets write there. */
  static const char *const names[] = {"ext.bin", "fuzz.onnx", "tensor.pb"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", model_dir, names[i]);
    unlink(path);
  }
  rmdir(model_dir);
}

static void write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) fuzz_fail("cannot write %s", path);
}

const char *fuzz_model_dir(void) {
  if (model_dir[0]) return model_dir;
  const char *tmp = getenv("TMPDIR");
  snprintf(model_dir, sizeof model_dir, "%s/dlcc-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(model_dir)) fuzz_fail("mkdtemp(%s) failed", model_dir);
  atexit(remove_model_dir);
  /* 0, 1, 0, 0x3f repeated: about 0.5 as f32, small as integers. */
  static uint8_t ext[1 << 16];
  for (size_t i = 0; i < sizeof ext; i++) ext[i] = (uint8_t)(i % 4 == 3 ? 0x3f : i % 2);
  char path[4200];
  snprintf(path, sizeof path, "%s/ext.bin", model_dir);
  write_file(path, ext, sizeof ext);
  return model_dir;
}

char *fuzz_model_file(const char *name, const void *data, size_t size) {
  char *path = NULL;
  if (asprintf(&path, "%s/%s", fuzz_model_dir(), name) < 0) fuzz_fail("out of memory");
  write_file(path, data, size);
  return path;
}

char *fuzz_copy(const uint8_t *data, size_t size) {
  char *copy = malloc(size ? size : 1);
  if (!copy) fuzz_fail("out of memory for a %zu-byte input", size);
  if (size) memcpy(copy, data, size);
  return copy;
}

void fuzz_require_message(const char *what, const char *err) {
  if (!err || !err[0]) fuzz_fail("%s failed without a message", what);
}

void fuzz_require_diag(const char *what, const Ctx *c) {
  if (c->diag.errors == 0) fuzz_fail("%s failed without reporting an error:\n%s", what, diag_text(c));
  fuzz_require_message(what, diag_text(c));
}

char *fuzz_ir_text(Graph *g) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) fuzz_fail("open_memstream failed");
  ir_print(m, g);
  if (fclose(m) != 0) fuzz_fail("printing the IR failed");
  return text;
}

char *fuzz_check_graph(Ctx *c, Graph *g, const char *what) {
  if (!ir_verify(g)) fuzz_fail("%s gave a graph the verifier rejects:\n%s", what, diag_text(c));
  char *text = fuzz_ir_text(g);
  ir_print_dot(fuzz_devnull(), g);
  /* The parser keeps pointers into its file's text: the arena's copy
   * lives as long as the graph. */
  const char *kept = arena_strdup(&c->arena, text);
  Graph *back = ir_parse(c, ctx_add_file(c, "roundtrip.ir", kept, strlen(kept)));
  if (!back) fuzz_fail("%s: the printed IR does not parse back:\n%s\n%s", what, diag_text(c), text);
  if (!ir_verify(back)) fuzz_fail("%s: the printed IR parses to a graph the verifier rejects:\n%s\n%s", what,
                                  diag_text(c), text);
  char *again = fuzz_ir_text(back);
  if (strcmp(text, again) != 0)
    fuzz_fail("%s: the IR does not round-trip; printed:\n%s\nparsed and printed again:\n%s", what, text, again);
  free(again);
  return text;
}

int fuzz_guard(Ctx *c, int (*fn)(Ctx *c, void *data), void *data) {
  int rc = ctx_guard(c, fn, data);
  if (rc < 0) fuzz_fail("internal error:\n%s", diag_text(c));
  return rc;
}

void fuzz_run_text(const uint8_t *data, size_t size, int (*fn)(Ctx *c, void *text)) {
  FuzzText in = {fuzz_copy(data, size), size};
  Ctx c;
  ctx_init(&c);
  fuzz_guard(&c, fn, &in);
  ctx_free(&c);
  free((char *)in.text);
}

FILE *fuzz_devnull(void) {
  static FILE *devnull;
  if (!devnull && !(devnull = fopen("/dev/null", "w"))) fuzz_fail("cannot open /dev/null");
  return devnull;
}
