/* Golden IR for every example: lowering each examples/NAME.dl must print
 * exactly tests/golden/NAME.ir, and that text must parse back and print
 * identically (the IR round trip).  Regenerate with `make update-golden`
 * after a deliberate change, and read the diff. */
#include "check_quiet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/ast.h"
#include "ir/ir.h"

static const char *const examples[] = {
    "mlp", "lenet", "resnet18", "resnet50", "mobilenetv2", "lstm", "transformer",
};

/* Relative to the source tree (main chdirs there), so the location
 * comments in the IR read "examples/mlp.dl:3:16" wherever it is built. */
static char *path_of(const char *dir, const char *name, const char *ext) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s%s", dir, name, ext) < 0) return NULL;
  return p;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, n, m);
  fclose(f);
  fclose(m);
  return buf;
}

typedef struct Job {
  const char *path;
  char *text; /* printed IR, malloc'd */
} Job;

static int lower_and_print(Ctx *c, void *data) {
  Job *job = data;
  const SrcFile *f = ctx_load_file(c, job->path);
  if (!f) return 1;
  Program *p = fe_parse(c, f);
  if (!p) return 1;
  LowerOptions opt = {0};
  Graph *g = fe_lower(c, p, &opt);
  if (!g || !ir_verify(g)) return 1;
  size_t len;
  FILE *m = open_memstream(&job->text, &len);
  ir_print(m, g);
  fclose(m);
  return 0;
}

static int parse_and_print(Ctx *c, void *data) {
  Job *job = data;
  const SrcFile *f = ctx_add_file(c, job->path, job->text, strlen(job->text));
  Graph *g = ir_parse(c, f);
  if (!g || !ir_verify(g)) return 1;
  char *out;
  size_t len;
  FILE *m = open_memstream(&out, &len);
  ir_print(m, g);
  fclose(m);
  job->text = out;
  return 0;
}

/* First differing line, for a readable failure. */
static void report_diff(const char *want, const char *got, const char *what) {
  int line = 1;
  const char *w = want, *g = got;
  while (*w && *w == *g) {
    if (*w == '\n') line++;
    w++, g++;
  }
  const char *we = strchr(w, '\n'), *ge = strchr(g, '\n');
  ck_abort_msg("%s differs at line %d:\n  want: %.*s\n  got:  %.*s", what, line,
               (int)(we ? we - w : (long)strlen(w)), w, (int)(ge ? ge - g : (long)strlen(g)), g);
}

START_TEST(test_example_golden) {
  const char *name = examples[_i];
  char *src = path_of("examples", name, ".dl");
  char *golden_path = path_of("tests/golden", name, ".ir");
  Ctx c;
  ctx_init(&c);
  Job job = {src, NULL};
  int rc = ctx_guard(&c, lower_and_print, &job);
  ck_assert_msg(rc == 0, "%s failed to compile:\n%s", src, diag_text(&c));
  char *golden = slurp(golden_path);
  ck_assert_msg(golden != NULL, "missing %s (run make update-golden)", golden_path);
  if (strcmp(golden, job.text) != 0) report_diff(golden, job.text, golden_path);

  char *printed = job.text;
  Job again = {golden_path, printed};
  rc = ctx_guard(&c, parse_and_print, &again);
  ck_assert_msg(rc == 0, "%s does not parse back:\n%s", golden_path, diag_text(&c));
  if (strcmp(printed, again.text) != 0) report_diff(printed, again.text, "round trip");
  free(again.text);
  free(printed);
  free(golden);
  ctx_free(&c);
  free(src);
  free(golden_path);
}
END_TEST

int main(void) {
  const char *top = getenv("top_srcdir");
  if (top && chdir(top) != 0) {
    perror(top);
    return 99;
  }
  Suite *s = suite_create("golden");
  TCase *tc = tcase_create("examples");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_example_golden, 0, (int)(sizeof examples / sizeof examples[0]));
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
