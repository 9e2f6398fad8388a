/* Check suite for model names as data (ir/names.c, docs/names.md): the
 * escapes for comments, C strings, identifiers and file names on hostile
 * names; an ONNX model whose graph name would inject a constructor and
 * whose input and output names would break model.h or leave
 * --output-dir, built with `dlcc -o`, its header compiled into a host
 * program with -Werror and run, and run by `dlcc run` (.onnx and .so);
 * IR outputs named "../../x" and ""; a .dl whose path and parameter names
 * hold comment closers; an IR location comment that would end a CUDA
 * line comment.  Each test works in its own folder; the kernel cache is
 * shared by the suite. */
#include "check_quiet.h"
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "ir/ir.h"
#include "ir/names.h"
#include "runtime/tensorio.h"
#ifdef HAVE_ONNX
#include "onnxbuild.h"
#endif

static char root[64]; /* the suite's folder: the kernel cache and one folder per test */
static char dir[256]; /* this test's */
static char path_buf[4][1024];

/* A path in this test's folder (four live at a time). */
static const char *at(const char *name) {
  static int k;
  char *p = path_buf[k++ & 3];
  snprintf(p, sizeof path_buf[0], "%s/%s", dir, name);
  return p;
}

static void setup(void) {
  snprintf(dir, sizeof dir, "%s/t-XXXXXX", root);
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* $top_srcdir or $top_builddir as an absolute path: commands run from
 * the test's folder. */
static const char *top(const char *var) {
  static char p[2][4096];
  char *out = p[strcmp(var, "top_srcdir") == 0];
  const char *v = getenv(var);
  if (!realpath(v && *v ? v : ".", out)) snprintf(out, sizeof p[0], "%s", v && *v ? v : ".");
  return out;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (int c; (c = fgetc(f)) != EOF;) {
    if (n + 2 > cap) {
      cap = cap ? 2 * cap : 4096;
      buf = realloc(buf, cap);
      ck_assert_ptr_nonnull(buf);
    }
    buf[n++] = (char)c;
  }
  fclose(f);
  if (!buf) buf = calloc(1, 1);
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}

static void spit(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

/* Runs a shell command (what it does not redirect itself to DIR/log),
 * returns its status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd + 1, sizeof cmd - 512, fmt, ap);
  va_end(ap);
  ck_assert_int_lt(n, (int)sizeof cmd - 512);
  cmd[0] = '(';
  snprintf(cmd + n + 1, sizeof cmd - (size_t)n - 1, ") >'%s/log' 2>&1", dir);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The log's first 2,000 bytes: Check cannot carry much more in a message. */
static const char *log_text(void) {
  char *t = slurp(at("log"), NULL);
  if (t && strlen(t) > 2000) strcpy(t + 1990, "\n[...]");
  return t;
}

#define SH_OK(...) ck_assert_msg(sh(__VA_ARGS__) == 0, "%s", log_text())

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Folder rel in this test's folder, and those above it. */
static void make_dirs(const char *rel) {
  char *p = strdup(at(rel));
  for (char *slash = p + strlen(dir) + 1; (slash = strchr(slash, '/')); *slash++ = '/') {
    *slash = 0;
    ck_assert(mkdir(p, 0777) == 0 || exists(p));
  }
  ck_assert_int_eq(mkdir(p, 0777), 0);
  free(p);
}

/* The entries of a folder, but . and .. */
static int count_entries(const char *path) {
  DIR *d = opendir(path);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

/* The hostile names the suite feeds everywhere. */
static char all_bytes[256]; /* 0x01..0xff */
static char *long_name;      /* 10,000 characters */

static void make_names(void) {
  for (int i = 1; i < 256; i++) all_bytes[i - 1] = (char)i;
  long_name = malloc(10001);
  memset(long_name, 'n', 10000);
  long_name[10000] = 0;
}

/* ---- the escapes ---- */

/* Text written to a FILE, in memory: mem_open, write, mem_text (free it). */
typedef struct Mem {
  char *buf;
  size_t len;
  FILE *f;
} Mem;

static FILE *mem_open(Mem *m) {
  *m = (Mem){0};
  m->f = open_memstream(&m->buf, &m->len);
  ck_assert_ptr_nonnull(m->f);
  return m->f;
}

static char *mem_text(Mem *m) {
  ck_assert_int_eq(fclose(m->f), 0);
  return m->buf;
}

static char *comment_text(const char *s) {
  Mem m;
  ir_put_comment_text(mem_open(&m), s);
  return mem_text(&m);
}

START_TEST(comment_text_is_inert) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"fc1.weight", "fc1.weight"},
      {"*/\n#error x", "*\\/\\n#error x"},
      {"a/*b*/", "a/\\*b*\\/"},
      {"tri?\?/", "tri?\\?/"},
      {"x\r#error\ty", "x\\r#error\\ty"},
      {"back\\", "back\\x5c"},
      {"\x01\x7f\xc3\xa9", "\\x01\\x7f\\xc3\\xa9"},
      {"**//", "**\\//"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *t = comment_text(cases[i].in);
    ck_assert_str_eq(t, cases[i].out);
    free(t);
  }
  const char *hostile[] = {all_bytes, long_name, "*/", "/*", "?\?/", "\\", "?\?\?\?/", "*/*/"};
  for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
    char *t = comment_text(hostile[i]);
    size_t n = strlen(t);
    for (size_t k = 0; k < n; k++) ck_assert_msg(t[k] >= 0x20 && t[k] < 0x7f, "byte %zu of case %zu", k, i);
    ck_assert_ptr_null(strstr(t, "*/"));
    ck_assert_ptr_null(strstr(t, "/*"));
    ck_assert_ptr_null(strstr(t, "?\?"));
    ck_assert(n == 0 || t[n - 1] != '\\');
    char *back = malloc(n + 1);
    ck_assert(ir_unescape_comment_text(t, n, back));
    ck_assert_str_eq(back, hostile[i]);
    free(back);
    free(t);
  }
  char out[8];
  ck_assert(!ir_unescape_comment_text("a\\q", 3, out));
  ck_assert(!ir_unescape_comment_text("a\\x00", 5, out));
  ck_assert(!ir_unescape_comment_text("a\\", 2, out));
}
END_TEST

START_TEST(identifiers_are_sanitized_and_distinct) {
  SafeName n;
  ir_name_ident("in_", "*/\n#error x", false, &n);
  ck_assert_str_eq(n.s, "in_____error_x");
  ir_name_ident("", "9lives", true, &n);
  ck_assert_str_eq(n.s, "_9LIVES");
  ir_name_ident("", "", false, &n);
  ck_assert_str_eq(n.s, "_");
  ir_name_ident("out_", long_name, false, &n);
  ck_assert_uint_eq(strlen(n.s), IR_IDENT_MAX);
  ck_assert_int_eq(strncmp(n.s, "out_nnnn", 8), 0);
  ck_assert_int_eq(n.s[IR_IDENT_MAX - 9], '_');
  SafeName other;
  long_name[9999] = 'm';
  ir_name_ident("out_", long_name, false, &other);
  long_name[9999] = 'n';
  ck_assert_str_ne(n.s, other.s);
  /* "a b", "a.b" and "a_b" all sanitize to a_b; a name the model uses
   * itself (a_b_2) is never taken by a suffix. */
  SafeName list[5];
  const char *in[] = {"a b", "a.b", "a_b_2", "a_b", "x"};
  for (int i = 0; i < 5; i++) ir_name_ident("", in[i], false, &list[i]);
  ck_assert(ir_names_unique(list, 5, '_', IR_IDENT_MAX, false));
  const char *want[] = {"a_b", "a_b_3", "a_b_2", "a_b_4", "x"};
  for (int i = 0; i < 5; i++) ck_assert_str_eq(list[i].s, want[i]);
  /* Suffixes stay within the length. */
  SafeName two[2];
  ir_name_ident("", long_name, false, &two[0]);
  two[1] = two[0];
  ck_assert(ir_names_unique(two, 2, '_', IR_IDENT_MAX, false));
  ck_assert_uint_eq(strlen(two[1].s), IR_IDENT_MAX);
  ck_assert_str_ne(two[0].s, two[1].s);
}
END_TEST

/* The documented encoding, written out again here: [A-Za-z0-9._-] kept
 * (but a leading '.'), every other byte %HH. */
static void encode_by_hand(const char *name, char *out) {
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    bool keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
                *p == '-' || (*p == '.' && p != (const unsigned char *)name);
    out += keep ? sprintf(out, "%c", *p) : sprintf(out, "%%%02X", *p);
  }
  *out = 0;
}

START_TEST(file_names_are_plain_and_distinct) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"logits", "logits"},         {"../../escaped", "%2E.%2F..%2Fescaped"},
      {"", "%00"},                  {"a/b", "a%2Fb"},
      {"a%2Fb", "a%252Fb"},         {".", "%2E"},
      {"..", "%2E."},               {".hidden", "%2Ehidden"},
      {"x:0", "x%3A0"},             {"*/\n#error", "%2A%2F%0A%23error"},
      {"r\xc3\xa9sum\xc3\xa9", "r%C3%A9sum%C3%A9"},
  };
  SafeName n;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ir_name_file(cases[i].in, &n);
    ck_assert_str_eq(n.s, cases[i].out);
  }
  char want[1024];
  ir_name_file(all_bytes, &n);
  encode_by_hand(all_bytes, want);
  /* 255 bytes encode to more than the stem may hold: cut at a whole
   * escape, then ~ and the hash. */
  size_t cut = strlen(n.s) - 9;
  ck_assert_uint_le(strlen(n.s), IR_FILE_STEM_MAX);
  ck_assert_int_eq(strncmp(n.s, want, cut), 0);
  ck_assert_int_eq(n.s[cut], '~');
  ck_assert_uint_eq(strspn(n.s + cut + 1, "0123456789abcdef"), 8);
  ir_name_file(long_name, &n);
  ck_assert_uint_eq(strlen(n.s), IR_FILE_STEM_MAX);
  ck_assert_uint_eq(strspn(n.s, "n"), IR_FILE_STEM_MAX - 9);
  /* Equal names, names equal but for case (one file on a case-insensitive
   * file system) and two long names cut to the same stem get distinct
   * files; '~' only comes from a suffix. */
  SafeName list[6];
  char long2[10001];
  memcpy(long2, long_name, sizeof long2);
  long2[9999] = 'm';
  const char *in[] = {"out", "OUT", "out~2", "out", long_name, long2};
  for (int i = 0; i < 6; i++) ir_name_file(in[i], &list[i]);
  ck_assert(ir_names_unique(list, 6, '~', IR_FILE_STEM_MAX, true));
  ck_assert_str_eq(list[0].s, "out");
  ck_assert_str_eq(list[1].s, "OUT~2");
  ck_assert_str_eq(list[2].s, "out%7E2");
  ck_assert_str_eq(list[3].s, "out~3");
  ck_assert_str_ne(list[4].s, list[5].s);
}
END_TEST

START_TEST(c_string_escapes) {
  Mem m;
  ir_put_c_string(mem_open(&m), "q\"\\?\?/\n\x01\xff" "7");
  ir_put_c_string(m.f, NULL);
  char *buf = mem_text(&m);
  ck_assert_str_eq(buf, "\"q\\\"\\\\\\?\\?/\\n\\001\\3777\"NULL");
  free(buf);
}
END_TEST

/* ---- IR text ---- */

/* A relu whose location comment holds a carriage return, which the host
 * compiler (and NVRTC) take as the end of a // comment. */
static const char cr_ir[] = "graph g {\n"
                            "  %0 = input {name=\"x\"} : f32[2, 3]\n"
                            "  %1 = relu %0 : f32[2, 3]  ; x\r#error boom\r:1:1\n"
                            "  return %1 as \"y\"\n"
                            "}\n";

static char *print_ir(Graph *g) {
  Mem m;
  ir_print(mem_open(&m), g);
  return mem_text(&m);
}

START_TEST(ir_location_comments_escape_and_read_back) {
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_parse(&c, ctx_add_file(&c, "t.ir", cr_ir, strlen(cr_ir)));
  ck_assert_msg(g != NULL, "%s", diag_text(&c));
  ck_assert_str_eq(g->first->next->loc.file->name, "x\r#error boom\r");
  char *text = print_ir(g);
  ck_assert_msg(strstr(text, "; x\\r#error boom\\r:1:1\n") != NULL, "%s", text);
  ck_assert_ptr_null(strchr(text, '\r'));
  Graph *again = ir_parse(&c, ctx_add_file(&c, "u.ir", text, strlen(text)));
  ck_assert_msg(again != NULL, "%s", diag_text(&c));
  ck_assert_str_eq(again->first->next->loc.file->name, "x\r#error boom\r");
  char *text2 = print_ir(again);
  ck_assert_str_eq(text2, text);
  free(text);
  free(text2);
  ctx_free(&c);
}
END_TEST

static const char *dlcc(void) {
  static char p[1024];
  snprintf(p, sizeof p, "%s/dlcc", top("top_builddir"));
  return p;
}

START_TEST(kernel_comment_cannot_end_early) {
  spit(at("cr.ir"), cr_ir, strlen(cr_ir));
  SH_OK("'%s' '%s' --emit=cuda >'%s'", dlcc(), at("cr.ir"), at("cr.cu"));
  char *cu = slurp(at("cr.cu"), NULL);
  ck_assert_ptr_null(strchr(cu, '\r'));
  ck_assert_msg(strstr(cu, "\n// relu %1  (x\\r#error boom\\r:1:1)\n") != NULL, "%s", cu);
  free(cu);
  /* The emulator compiles that text with the host compiler. */
  SH_OK("'%s' run '%s' --backend=emu", dlcc(), at("cr.ir"));
}
END_TEST

/* A message quotes names: one with a newline and an escape sequence
 * (from an ONNX node name, a file name) stays on its line and sends the
 * terminal nothing. */
START_TEST(messages_show_control_bytes) {
  Ctx c;
  ctx_init(&c);
  const SrcFile *f = ctx_add_file(&c, "m\x1b]0;title\x07.dl", "x\n", 2);
  SrcLoc where = {f, 1, 1};
  diag_error(&c, where, "node '%s' failed", "a\n#b\x1b[31m\tc");
  diag_error(&c, (SrcLoc){0}, "%s", "\r\x7f");
  ck_assert_str_eq(diag_text(&c), "m\\x1b]0;title\\x07.dl:1:1: error: node 'a\\n#b\\x1b[31m\tc' failed\n"
                                  "    x\n"
                                  "    ^\n"
                                  "dlcc: error: \\r\\x7f\n");
  ctx_free(&c);
}
END_TEST

/* Item 2 of the security review, as reported: IR outputs named "../../x"
 * and "" under --output-dir=out/a/b. */
START_TEST(ir_output_names_stay_inside) {
  static const char text[] = "graph g {\n"
                             "  %0 = input {name=\"x\"} : f32[2, 3]\n"
                             "  %1 = relu %0 : f32[2, 3]\n"
                             "  %2 = neg %0 : f32[2, 3]\n"
                             "  return %1 as \"../../x\", %2 as \"\"\n"
                             "}\n";
  spit(at("t.ir"), text, sizeof text - 1);
  make_dirs("out/a");
  SH_OK("'%s' run '%s' --backend=ref --output-dir='%s'", dlcc(), at("t.ir"), at("out/a/b"));
  ck_assert(!exists(at("x.npy")));
  ck_assert(!exists(at("out/x.npy")));
  ck_assert(!exists(at("out/a/.npy")));
  ck_assert(!exists(at("out/a/b/.npy")));
  ck_assert_int_eq(count_entries(at("out")), 1);
  ck_assert_int_eq(count_entries(at("out/a")), 1);
  ck_assert_int_eq(count_entries(at("out/a/b")), 2);
  RtTensor x = {0}, y = {0};
  char err[512];
  ck_assert_msg(rt_npy_read(at("out/a/b/%2E.%2F..%2Fx.npy"), &x, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(rt_npy_read(at("out/a/b/%00.npy"), &y, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < 6; i++) ck_assert_float_eq(((float *)x.data)[i], fmaxf(-((float *)y.data)[i], 0.0f));
  rt_tensor_free(&x);
  rt_tensor_free(&y);
  char want[2048];
  snprintf(want, sizeof want, "dlcc: output '../../x' written to %s\n", at("out/a/b/%2E.%2F..%2Fx.npy"));
  char *log = (char *)log_text();
  ck_assert_msg(strstr(log, want) != NULL, "%s", log);
  free(log);
}
END_TEST

/* --calibrate=DIR reads DIR/<input name>/ with the name encoded as a
 * file name: "../up" is DIR/%2E.%2Fup, never DIR/../up. */
START_TEST(calibration_folders_stay_inside) {
  static const char text[] = "graph g {\n"
                             "  %0 = input {name=\"../up\"} : f32[2, 3]\n"
                             "  %1 = input {name=\"x\"} : f32[2, 3]\n"
                             "  %2 = add %0, %1 : f32[2, 3]\n"
                             "  %3 = param {name=\"w\"} : f32[4, 3]\n"
                             "  %4 = linear %2, %3 : f32[2, 4]\n"
                             "  return %4 as \"y\"\n"
                             "}\n";
  spit(at("t.ir"), text, sizeof text - 1);
  make_dirs("calib");
  make_dirs("up");
  RtTensor t = {.dtype = RT_F32, .rank = 2, .dims = {2, 3}, .data = (float[6]){0}, .nbytes = 24};
  char err[512];
  ck_assert_msg(rt_npy_write(at("up/0.npy"), &t, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(sh("'%s' '%s' --quantize=int8 --calibrate='%s'", dlcc(), at("t.ir"), at("calib")), 1);
  char want[2048];
  snprintf(want, sizeof want,
           "dlcc: error: calibration folder %s has no folder '%%2E.%%2Fup' for input '../up' (a model with several "
           "inputs reads DIR/<input name>/*.npy)\n",
           at("calib"));
  char *log = slurp(at("log"), NULL);
  ck_assert_str_eq(log, want);
  free(log);
}
END_TEST

/* ---- the language ---- */

/* A .dl whose path holds "*" "/" (written into model.c and model.h as
 * the source) and whose parameter names hold comment closers, newlines,
 * quotes and a trigraph. */
START_TEST(dl_paths_and_param_names) {
  static const char text[] = "model m(x: f32[2, 3]) -> f32[2, 4] {\n"
                             "  return linear(x, 4) as {\"*/\\n#error p?\?/\\\\\"}\n"
                             "}\n";
  make_dirs("d*");
  spit(at("d*/m.dl"), text, sizeof text - 1);
  /* A relative source path, as the header records it. */
  SH_OK("cd '%s' && '%s' 'd*/m.dl' --emit=plan >'%s'", dir, dlcc(), at("plan.txt"));
  char *plan = slurp(at("plan.txt"), NULL);
  ck_assert_msg(strstr(plan, "weight 0 \"*/\\n#error p\\?\\?/\\\\.weight\" f32[4, 3]") != NULL, "%s", plan);
  free(plan);
  SH_OK("cd '%s' && '%s' 'd*/m.dl' -o m.so", dir, dlcc());
  static const char host[] = "#include <stdio.h>\n#include \"m.h\"\n"
                             "int main(void) {\n"
                             "  DlrtModel *m;\n"
                             "  float x[M_INPUT0_NUMEL] = {1, 2, 3, 4, 5, 6}, y[M_OUTPUT0_NUMEL];\n"
                             "  if (m_open(\"emu\", &m) != DLRT_OK || m_run(m, x, y) != DLRT_OK) {\n"
                             "    puts(dlrt_error(m));\n"
                             "    return 1;\n"
                             "  }\n"
                             "  dlrt_close(m);\n"
                             "  return 0;\n"
                             "}\n";
  spit(at("host.c"), host, sizeof host - 1);
  const char *b = top("top_builddir"), *s = top("top_srcdir"), *san = getenv("DLCC_HOST_CFLAGS");
  SH_OK("cd '%s' && ${CC:-cc} -std=c11 -Wall -Wextra -Werror %s -I. -I'%s/include' host.c ./m.so -L'%s/.libs' -ldlcrt "
        "-Wl,-rpath,'%s/.libs' -Wl,-rpath,'%s' -o host && ./host",
        dir, san ? san : "", s, b, b, dir);
}
END_TEST

/* ---- ONNX: the model a stranger sends ---- */

#ifdef HAVE_ONNX
enum { N_OUT = 14 };

/* Item 1 of the security review: this graph name closed model.c's
 * comment and became a constructor run whenever model.so was loaded. */
static char payload[512];

static const char *out_names[N_OUT];
static const char *out_files[N_OUT] = {
    "%2E.%2F..%2Fescaped.npy", "%2A%2F%0A%23error%20out.npy", "q%22uote.npy", "back%5Cslash%5C.npy",
    "tri%3F%3F%2F.npy", "a%2Fb.npy", "a%252Fb.npy", "%2E.npy", "%2E..npy", NULL /* all bytes */,
    NULL /* 10,000 characters */, "A.npy", "a~2.npy", "Relu_out.npy",
};
static const char in_name[] = "x*/\n#error in ?\?/";

static void write_onnx(const char *path) {
  const char *names[N_OUT] = {
      "../../escaped", "*/\n#error out", "q\"uote", "back\\slash\\", "tri?\?/", "a/b", "a%2Fb", ".", "..",
      all_bytes, long_name, "A", "a", "Relu_out",
  };
  memcpy(out_names, names, sizeof names);
  snprintf(payload, sizeof payload,
           "*/ __attribute__((constructor)) static void dlcc_pwn(void) { if (system(\"touch %s\")) {} } /*",
           at("pwned"));
  Model *b = model_new(13);
  b->g.name = str(payload);
  const int64_t dims[] = {2, 3};
  add_input(b, in_name, 2, dims);
  for (int k = 0; k < N_OUT; k++) {
    char init[64];
    snprintf(init, sizeof init, "c*/\n#define %d ?\?/", k);
    float v = (float)(k + 1);
    add_init_f32(b, init, 0, NULL, 1, &v);
    Onnx__NodeProto *n = add_node(b, "Mul", "a,b", "c");
    n->input[0] = str(in_name);
    n->input[1] = str(init);
    n->output[0] = str(out_names[k]);
    add_output(b, out_names[k]);
  }
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  spit(path, buf, len);
  free(buf);
}

/* The host program: opens m.so on emu, runs it through the header's
 * m_run on x = 1..6, writes every name macro (NUL after each) and then
 * every output's values to the file argv[1]. */
static void write_host(const char *path) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("#include <stdio.h>\n#include <string.h>\n#include \"m.h\"\n\n", f);
  for (int k = 0; k < N_OUT; k++) fprintf(f, "static float y%d[M_OUTPUT%d_NUMEL];\n", k, k);
  fputs("static const char *const names[] = {M_MODEL_NAME, M_INPUT0_NAME", f);
  for (int k = 0; k < N_OUT; k++) fprintf(f, ", M_OUTPUT%d_NAME", k);
  fputs("};\n\nint main(int argc, char **argv) {\n"
        "  float x[M_INPUT0_NUMEL] = {1, 2, 3, 4, 5, 6};\n"
        "  DlrtModel *m;\n"
        "  if (argc != 2 || m_open(\"emu\", &m) != DLRT_OK) return 1;\n"
        "  if (m_run(m, x",
        f);
  for (int k = 0; k < N_OUT; k++) fprintf(f, ", y%d", k);
  fputs(") != DLRT_OK) {\n    puts(dlrt_error(m));\n    return 1;\n  }\n"
        "  dlrt_close(m);\n"
        "  FILE *f = fopen(argv[1], \"wb\");\n"
        "  if (!f) return 1;\n"
        "  for (size_t i = 0; i < sizeof names / sizeof *names; i++) fwrite(names[i], 1, strlen(names[i]) + 1, f);\n",
        f);
  for (int k = 0; k < N_OUT; k++) fprintf(f, "  fwrite(y%d, sizeof(float), M_OUTPUT%d_NUMEL, f);\n", k, k);
  fputs("  return fclose(f) != 0;\n}\n", f);
  ck_assert_int_eq(fclose(f), 0);
}

static void file_name_of(int k, char *out) {
  if (out_files[k]) {
    strcpy(out, out_files[k]);
    return;
  }
  SafeName n;
  ir_name_file(out_names[k], &n);
  sprintf(out, "%s.npy", n.s);
}

/* out/a/b holds exactly one file per output, each with output k's values
 * (x times k + 1, for the x of output 0), and nothing left the folder. */
static void check_output_dir(const char *out) {
  char sub[1024], file[2048];
  snprintf(sub, sizeof sub, "%s/a/b", out);
  ck_assert_int_eq(count_entries(out), 1);
  snprintf(file, sizeof file, "%s/a", out);
  ck_assert_int_eq(count_entries(file), 1);
  ck_assert_int_eq(count_entries(sub), N_OUT);
  ck_assert(!exists(at("escaped.npy")));
  RtTensor y0 = {0};
  for (int k = 0; k < N_OUT; k++) {
    char name[IR_SAFE_NAME_SIZE + 8], err[512];
    file_name_of(k, name);
    snprintf(file, sizeof file, "%s/%s", sub, name);
    RtTensor t = {0};
    ck_assert_msg(rt_npy_read(file, &t, err, sizeof err) == 0, "output %d: %s", k, err);
    ck_assert_int_eq(t.rank, 2);
    if (k == 0) y0 = t;
    for (int i = 0; i < 6; i++)
      ck_assert_float_eq_tol(((float *)t.data)[i], ((float *)y0.data)[i] * (float)(k + 1), 1e-5f * (float)(k + 1));
    if (k) rt_tensor_free(&t);
  }
  rt_tensor_free(&y0);
}

START_TEST(onnx_names_cannot_inject_or_escape) {
  write_onnx(at("m.onnx"));
  SH_OK("'%s' '%s' -o '%s'", dlcc(), at("m.onnx"), at("m.so"));
  /* Loading the library runs what it holds: --output-dir from the .so
   * on emu. */
  make_dirs("so/a");
  int rc = sh("'%s' run '%s' --backend=emu --output-dir='%s'", dlcc(), at("m.so"), at("so/a/b"));
  ck_assert_msg(!exists(at("pwned")), "the graph name ran as code");
  ck_assert_msg(rc == 0, "%s", log_text());
  check_output_dir(at("so"));

  /* model.h compiles into a host program under -Werror, and its string
   * macros hold the names byte for byte. */
  write_host(at("host.c"));
  const char *b = top("top_builddir"), *s = top("top_srcdir"), *san = getenv("DLCC_HOST_CFLAGS");
  SH_OK("cd '%s' && ${CC:-cc} -std=c11 -Wall -Wextra -Werror %s -I. -I'%s/include' host.c ./m.so -L'%s/.libs' -ldlcrt "
        "-Wl,-rpath,'%s/.libs' -Wl,-rpath,'%s' -o host && ./host host.out",
        dir, san ? san : "", s, b, b, dir);
  size_t len;
  char *got = slurp(at("host.out"), &len);
  const char *p = got;
  ck_assert_str_eq(p, payload);
  p += strlen(p) + 1;
  ck_assert_str_eq(p, in_name);
  p += strlen(p) + 1;
  for (int k = 0; k < N_OUT; k++, p += strlen(p) + 1) ck_assert_str_eq(p, out_names[k]);
  ck_assert_uint_eq((size_t)(p - got) + N_OUT * 6 * sizeof(float), len);
  for (int k = 0; k < N_OUT; k++)
    for (int i = 0; i < 6; i++) {
      float y;
      memcpy(&y, p + (k * 6 + i) * sizeof(float), sizeof y);
      ck_assert_float_eq_tol(y, (float)((i + 1) * (k + 1)), 1e-5f * (float)(k + 1));
    }
  free(got);

  /* --output-dir from the .onnx on the reference interpreter; a symbolic
   * link planted at an output's file is replaced, not followed. */
  make_dirs("ref/a/b");
  spit(at("victim"), "victim", 6);
  ck_assert_int_eq(symlink(at("victim"), at("ref/a/b/A.npy")), 0);
  SH_OK("'%s' run '%s' --backend=ref --output-dir='%s'", dlcc(), at("m.onnx"), at("ref/a/b"));
  check_output_dir(at("ref"));
  char *victim = slurp(at("victim"), NULL);
  ck_assert_str_eq(victim, "victim");
  free(victim);
  char want[2048];
  snprintf(want, sizeof want, "dlcc: output '../../escaped' written to %s\n", at("ref/a/b/%2E.%2F..%2Fescaped.npy"));
  char *log = slurp(at("log"), NULL);
  ck_assert_msg(strstr(log, want) != NULL, "%s", log_text());
  snprintf(want, sizeof want, "dlcc: output 'a' written to %s\n", at("ref/a/b/a~2.npy"));
  ck_assert_msg(strstr(log, want) != NULL, "%s", log_text());
  ck_assert_msg(strstr(log, "output 'A'") == NULL && strstr(log, "output 'Relu_out'") == NULL, "%s", log_text());
  free(log);
  ck_assert(!exists(at("pwned")));
}
END_TEST
#endif

static Suite *names_suite(void) {
  Suite *s = suite_create("names");
  TCase *tc = tcase_create("escapes");
  tcase_add_test(tc, comment_text_is_inert);
  tcase_add_test(tc, identifiers_are_sanitized_and_distinct);
  tcase_add_test(tc, file_names_are_plain_and_distinct);
  tcase_add_test(tc, c_string_escapes);
  tcase_add_test(tc, ir_location_comments_escape_and_read_back);
  suite_add_tcase(s, tc);
  tc = tcase_create("cli");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, kernel_comment_cannot_end_early);
  tcase_add_test(tc, messages_show_control_bytes);
  tcase_add_test(tc, ir_output_names_stay_inside);
  tcase_add_test(tc, calibration_folders_stay_inside);
  tcase_add_test(tc, dl_paths_and_param_names);
#ifdef HAVE_ONNX
  tcase_add_test(tc, onnx_names_cannot_inject_or_escape);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  make_names();
  snprintf(root, sizeof root, "/tmp/dlcc-names-XXXXXX");
  if (!mkdtemp(root)) return 99;
  char cache[128];
  snprintf(cache, sizeof cache, "%s/cache", root);
  setenv("DLCC_CACHE_DIR", cache, 1);
  if (!getenv("DLCC_EMU_HEADER")) {
    char h[4096];
    snprintf(h, sizeof h, "%s/runtime/emu/dlcc_emu.h", top("top_srcdir"));
    setenv("DLCC_EMU_HEADER", h, 1);
  }
  SRunner *r = srunner_create(names_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) failed++;
  free(long_name);
  return failed ? 1 : 0;
}
