/* Check suite for the tensor files (runtime/npy.c, runtime/safetensors.c,
 * runtime/torchfile.c) and binding weights to a graph (api/weights.c):
 * round trips, files written byte by byte as NumPy and PyTorch write
 * them (torch.save's committed in tests/torchfiles/, by its make.py),
 * and every malformed input with its exact message, every truncation and
 * byte flip of a torch.save file.  Files live in a mkdtemp dir. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/weights.h"
#include "ir/eval.h"
#include "runtime/tensorio.h"

static char dir[64];
static char err[4096];
static int nfiles;

static void setup(void) {
  strcpy(dir, "/tmp/dlcc-tio-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  err[0] = 0;
  nfiles = 0;
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* A fresh path in the temp dir; the returned buffer is static per slot. */
static const char *path_for(const char *name) {
  static char paths[64][128];
  char *p = paths[nfiles++ % 64];
  snprintf(p, 128, "%s/%s", dir, name);
  return p;
}

static const char *write_bytes(const char *name, const void *a, size_t na, const void *b, size_t nb) {
  const char *p = path_for(name);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  if (na) ck_assert_uint_eq(fwrite(a, 1, na, f), na);
  if (nb) ck_assert_uint_eq(fwrite(b, 1, nb, f), nb);
  fclose(f);
  return p;
}

static long file_size(const char *p) {
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  return n;
}

/* ---- .npy ---- */

/* magic, version, header length (2 or 4 bytes), header text, data. */
static const char *make_npy(const char *name, int major, int minor, const char *header,
                            const void *data, size_t nbytes) {
  unsigned char buf[1024];
  size_t hl = strlen(header), n = 0;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = (unsigned char)minor;
  n = 8;
  int lenbytes = major == 1 ? 2 : 4;
  for (int i = 0; i < lenbytes; i++) buf[n++] = (unsigned char)(hl >> (8 * i));
  memcpy(buf + n, header, hl);
  n += hl;
  return write_bytes(name, buf, n, data, nbytes);
}

static void expect_npy_error(const char *header, const void *data, size_t nbytes, const char *msg) {
  const char *p = make_npy("bad.npy", 1, 0, header, data, nbytes);
  RtTensor t;
  ck_assert_int_eq(rt_npy_read(p, &t, err, sizeof err), -1);
  char want[512];
  snprintf(want, sizeof want, "%s: %s", p, msg);
  ck_assert_str_eq(err, want);
  ck_assert_ptr_null(t.data);
}

START_TEST(test_npy_roundtrip) {
  struct {
    RtDType dt;
    int rank;
    int64_t dims[3];
    const char *descr;
  } cases[] = {
      {RT_F32, 2, {2, 3}, "'<f4'"}, {RT_F16, 3, {1, 1, 3}, "'<f2'"}, {RT_I8, 0, {0}, "'|i1'"},
      {RT_I32, 1, {5}, "'<i4'"},    {RT_I64, 1, {1}, "'<i8'"},       {RT_F64, 2, {2, 2}, "'<f8'"},
      {RT_U8, 1, {7}, "'|u1'"},     {RT_BOOL, 1, {3}, "'|b1'"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    RtTensor t = {.dtype = cases[k].dt, .rank = cases[k].rank};
    memcpy(t.dims, cases[k].dims, sizeof t.dims[0] * 3);
    t.nbytes = (size_t)rt_numel(&t) * (size_t)rt_dtype_size(t.dtype);
    unsigned char data[64];
    for (size_t i = 0; i < t.nbytes; i++) data[i] = (unsigned char)(i * 37 + k);
    if (t.dtype == RT_BOOL)
      for (size_t i = 0; i < t.nbytes; i++) data[i] &= 1;
    t.data = data;
    const char *p = path_for("rt.npy");
    ck_assert_msg(rt_npy_write(p, &t, err, sizeof err) == 0, "%s", err);
    /* Header padded to 64 bytes, ending in a newline, in NumPy's spelling. */
    long size = file_size(p);
    ck_assert_int_eq((size - (long)t.nbytes) % 64, 0);
    FILE *f = fopen(p, "rb");
    char head[256] = {0};
    ck_assert_uint_eq(fread(head, 1, (size_t)(size - (long)t.nbytes), f), (size_t)(size - (long)t.nbytes));
    fclose(f);
    ck_assert_int_eq(head[size - (long)t.nbytes - 1], '\n');
    char want[128];
    snprintf(want, sizeof want, "{'descr': %s, 'fortran_order': False, 'shape': (", cases[k].descr);
    ck_assert_msg(strncmp(head + 10, want, strlen(want)) == 0, "%s", head + 10);
    RtTensor r;
    ck_assert_msg(rt_npy_read(p, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.dtype, t.dtype);
    ck_assert_int_eq(r.rank, t.rank);
    for (int i = 0; i < t.rank; i++) ck_assert_int_eq(r.dims[i], t.dims[i]);
    ck_assert_uint_eq(r.nbytes, t.nbytes);
    ck_assert_mem_eq(r.data, data, t.nbytes);
    rt_tensor_free(&r);
  }
}
END_TEST

START_TEST(test_npy_shape_text) {
  RtTensor t = {.dtype = RT_F32, .rank = 1, .dims = {3}, .nbytes = 12};
  float v[3] = {1, 2, 3};
  t.data = v;
  const char *p = path_for("one.npy");
  ck_assert_int_eq(rt_npy_write(p, &t, err, sizeof err), 0);
  FILE *f = fopen(p, "rb");
  char head[256] = {0};
  ck_assert_uint_eq(fread(head, 1, 128, f), 128);
  fclose(f);
  const char *one = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  ck_assert_msg(strncmp(head + 10, one, strlen(one)) == 0, "%s", head + 10);
  t.rank = 0;
  t.nbytes = 4;
  ck_assert_int_eq(rt_npy_write(p, &t, err, sizeof err), 0);
  f = fopen(p, "rb");
  ck_assert_uint_eq(fread(head, 1, 128, f), 128);
  fclose(f);
  const char *scalar = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
  ck_assert_msg(strncmp(head + 10, scalar, strlen(scalar)) == 0, "%s", head + 10);
}
END_TEST

START_TEST(test_npy_read_variants) {
  float v[4] = {1.5f, -2, 3, 4};
  struct {
    int major;
    const char *header;
    int rank;
    int64_t d0, d1;
  } cases[] = {
      {1, "{'shape': (4,), 'fortran_order': False, 'descr': '<f4'}", 1, 4, 0},
      {1, "{ 'descr' : \"<f4\" ,'fortran_order':False,'shape':( 2 , 2 ) , }   \n", 2, 2, 2},
      {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n", 1, 4, 0},
      {3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\n", 2, 2, 2},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4L,), }\n", 1, 4, 0},
      {1, "{'descr':'<f4','fortran_order':False,'shape':(1,4)}", 2, 1, 4},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const char *p = make_npy("v.npy", cases[k].major, 0, cases[k].header, v, 16);
    RtTensor t;
    ck_assert_msg(rt_npy_read(p, &t, err, sizeof err) == 0, "case %zu: %s", k, err);
    ck_assert_int_eq(t.dtype, RT_F32);
    ck_assert_int_eq(t.rank, cases[k].rank);
    ck_assert_int_eq(t.dims[0], cases[k].d0);
    if (t.rank > 1) ck_assert_int_eq(t.dims[1], cases[k].d1);
    ck_assert_mem_eq(t.data, v, 16);
    rt_tensor_free(&t);
  }
  /* A scalar: shape (). */
  const char *p = make_npy("s.npy", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", v, 4);
  RtTensor t;
  ck_assert_msg(rt_npy_read(p, &t, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(t.rank, 0);
  ck_assert_uint_eq(t.nbytes, 4);
  rt_tensor_free(&t);
  /* Empty: shape (0, 3), no data. */
  p = make_npy("e.npy", 1, 0, "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 3), }", NULL, 0);
  ck_assert_msg(rt_npy_read(p, &t, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(t.dims[0], 0);
  ck_assert_uint_eq(t.nbytes, 0);
  rt_tensor_free(&t);
}
END_TEST

START_TEST(test_npy_errors) {
  float v[8] = {0};
  const char *good_tail = "'fortran_order': False, 'shape': (4,), }";
  char h[256];
  /* bad magic */
  const char *p = write_bytes("m.npy", "\x93NUMPX\x01\x00\x00\x00", 10, NULL, 0);
  RtTensor t;
  ck_assert_int_eq(rt_npy_read(p, &t, err, sizeof err), -1);
  char want[512];
  snprintf(want, sizeof want, "%s: not a .npy file (bad magic)", p);
  ck_assert_str_eq(err, want);
  p = write_bytes("short.npy", "\x93NU", 3, NULL, 0);
  ck_assert_int_eq(rt_npy_read(p, &t, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: not a .npy file (bad magic)", p);
  ck_assert_str_eq(err, want);
  /* version */
  p = make_npy("ver.npy", 4, 0, "{}", NULL, 0);
  ck_assert_int_eq(rt_npy_read(p, &t, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: unsupported .npy version 4.0", p);
  ck_assert_str_eq(err, want);
  /* truncated header: promises 100 bytes, has 2 */
  p = write_bytes("th.npy", "\x93NUMPY\x01\x00\x64\x00{}", 12, NULL, 0);
  ck_assert_int_eq(rt_npy_read(p, &t, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: truncated header", p);
  ck_assert_str_eq(err, want);
  /* malformed headers */
  expect_npy_error("{'descr': '<f4', 'fortran_order': False}", v, 16, "malformed header: missing key 'shape'");
  expect_npy_error("{'descr': '<f4' 'fortran_order': False, 'shape': (4,)}", v, 16,
                   "malformed header: expected ',' or '}' in the dict");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4)}", v, 16,
                   "malformed header: 'shape' is not a tuple");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': [4]}", v, 16,
                   "malformed header: 'shape' is not a tuple");
  expect_npy_error("{'descr': '<f4', 'fortran_order': 0, 'shape': (4,)}", v, 16,
                   "malformed header: 'fortran_order' is not True or False");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", v, 16,
                   "malformed header: unexpected key 'x'");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4,", v, 16,
                   "malformed header: unterminated tuple");
  expect_npy_error("{'descr': '<f4, 'fortran_order': False, 'shape': (4,)}", v, 16,
                   "malformed header: expected ',' or '}' in the dict");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} junk", v, 16,
                   "malformed header: text after the dict");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': ('a',)}", v, 16,
                   "malformed header: 'shape' must hold integers");
  expect_npy_error("['descr']", v, 16, "malformed header: not a dict");
  /* dtypes and layout */
  snprintf(h, sizeof h, "{'descr': '>f4', %s", good_tail);
  expect_npy_error(h, v, 16, "big-endian data ('>f4') is not supported");
  snprintf(h, sizeof h, "{'descr': '<c8', %s", good_tail);
  expect_npy_error(h, v, 16, "unsupported dtype '<c8'");
  expect_npy_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,)}", v, 16,
                   "unsupported dtype (a structured array)");
  /* np.save(x.T) writes Fortran order; it reads back in C order. */
  {
    const float fo[6] = {0, 3, 1, 4, 2, 5}; /* [[0, 1, 2], [3, 4, 5]], columns first */
    p = make_npy("f.npy", 1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", fo,
                 sizeof fo);
    ck_assert_msg(rt_npy_read(p, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t.rank, 2);
    ck_assert_int_eq(t.dims[0], 2);
    ck_assert_int_eq(t.dims[1], 3);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(((const float *)t.data)[i], (float)i);
    rt_tensor_free(&t);
    const int32_t f3[8] = {0, 4, 2, 6, 1, 5, 3, 7}; /* arange(8).reshape(2, 2, 2) */
    p = make_npy("f3.npy", 1, 0, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2, 2), }", f3,
                 sizeof f3);
    ck_assert_msg(rt_npy_read(p, &t, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(((const int32_t *)t.data)[i], i);
    rt_tensor_free(&t);
  }
  /* data size */
  snprintf(h, sizeof h, "{'descr': '<f4', %s", good_tail);
  expect_npy_error(h, v, 12, "truncated data: the header promises 16 bytes, the file has 12");
  expect_npy_error(h, v, 20, "extra data after the array's 16 bytes");
  /* shapes */
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776)}",
                   v, 16, "shape is too large (more than 2^40 elements)");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}", v,
                   16, "shape is too large (more than 2^40 elements)");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}", v, 16,
                   "negative dim -4 in the shape");
  expect_npy_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", v, 4,
                   "rank 9 is more than 8");
  /* missing file */
  ck_assert_int_eq(rt_npy_read(path_for("nope.npy"), &t, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "nope.npy: No such file"));
}
END_TEST

START_TEST(test_npy_write_bf16_refused) {
  uint16_t v[2] = {0};
  RtTensor t = {.dtype = RT_BF16, .rank = 1, .dims = {2}, .data = v, .nbytes = 4};
  const char *p = path_for("b.npy");
  ck_assert_int_eq(rt_npy_write(p, &t, err, sizeof err), -1);
  char want[256];
  snprintf(want, sizeof want, "%s: .npy has no dtype for bf16", p);
  ck_assert_str_eq(err, want);
}
END_TEST

/* ---- safetensors ---- */

static const char *make_st(const char *name, const char *json, const void *data, size_t nbytes) {
  unsigned char buf[4096];
  size_t hl = strlen(json);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, json, hl);
  return write_bytes(name, buf, 8 + hl, data, nbytes);
}

static void expect_st_error(const char *json, const void *data, size_t nbytes, const char *msg) {
  const char *p = make_st("bad.safetensors", json, data, nbytes);
  RtTensorSet s;
  ck_assert_int_eq(rt_safetensors_read(p, &s, err, sizeof err), -1);
  char want[512];
  snprintf(want, sizeof want, "%s: %s", p, msg);
  ck_assert_str_eq(err, want);
  ck_assert_int_eq(s.n, 0);
}

START_TEST(test_st_roundtrip) {
  float a[6] = {1, 2, 3, 4, 5, 6};
  uint16_t b[4] = {0x3F80, 0x4000, 0xBF80, 0};
  int64_t c = 12345678901234;
  char *names[] = {"layer.weight", "emb", "step", "empty"};
  RtTensor ts[4] = {
      {.dtype = RT_F32, .rank = 2, .dims = {2, 3}, .data = a, .nbytes = 24},
      {.dtype = RT_BF16, .rank = 1, .dims = {4}, .data = b, .nbytes = 8},
      {.dtype = RT_I64, .rank = 0, .data = &c, .nbytes = 8},
      {.dtype = RT_F16, .rank = 2, .dims = {0, 5}, .data = NULL, .nbytes = 0},
  };
  char *mk[] = {"format"}, *mv[] = {"pt"};
  RtTensorSet set = {
      .n = 4, .names = names, .tensors = ts, .n_meta = 1, .meta_keys = mk, .meta_values = mv};
  const char *p = path_for("w.safetensors");
  ck_assert_msg(rt_safetensors_write(p, &set, err, sizeof err) == 0, "%s", err);
  FILE *f = fopen(p, "rb");
  unsigned char pre[8];
  ck_assert_uint_eq(fread(pre, 1, 8, f), 8);
  fclose(f);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)pre[i] << (8 * i);
  ck_assert_uint_eq(hl % 8, 0);
  ck_assert_int_eq(file_size(p), (long)(8 + hl + 40));
  RtTensorSet r;
  ck_assert_msg(rt_safetensors_read(p, &r, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(r.n, 4);
  for (int i = 0; i < 4; i++) {
    ck_assert_str_eq(r.names[i], names[i]);
    ck_assert_int_eq(r.tensors[i].dtype, ts[i].dtype);
    ck_assert_int_eq(r.tensors[i].rank, ts[i].rank);
    for (int d = 0; d < ts[i].rank; d++) ck_assert_int_eq(r.tensors[i].dims[d], ts[i].dims[d]);
    ck_assert_uint_eq(r.tensors[i].nbytes, ts[i].nbytes);
    if (ts[i].nbytes) ck_assert_mem_eq(r.tensors[i].data, ts[i].data, ts[i].nbytes);
  }
  ck_assert_int_eq(r.n_meta, 1);
  ck_assert_str_eq(r.meta_keys[0], "format");
  ck_assert_str_eq(r.meta_values[0], "pt");
  ck_assert_ptr_nonnull(rt_tensor_set_find(&r, "emb"));
  ck_assert_ptr_null(rt_tensor_set_find(&r, "nope"));
  rt_tensor_set_free(&r);
  /* Duplicate names are refused on write. */
  names[1] = "layer.weight";
  ck_assert_int_eq(rt_safetensors_write(p, &set, err, sizeof err), -1);
  char want[256];
  snprintf(want, sizeof want, "%s: tensor 'layer.weight' is given twice", p);
  ck_assert_str_eq(err, want);
  names[1] = "emb";
  /* A regular file is replaced whole (a new inode renamed over it), never
   * truncated and rewritten in place, and no temporary is left beside it. */
  struct stat before, after;
  ck_assert_int_eq(stat(p, &before), 0);
  ck_assert_msg(rt_safetensors_write(p, &set, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(stat(p, &after), 0);
  ck_assert(before.st_ino != after.st_ino);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", p, (long)getpid());
  ck_assert_int_eq(access(tmp, F_OK), -1);
  /* A link is written through: it stays a link to the file it named. */
  const char *link = path_for("link.safetensors");
  ck_assert_int_eq(symlink(p, link), 0);
  ck_assert_msg(rt_safetensors_write(link, &set, err, sizeof err) == 0, "%s", err);
  struct stat ls;
  ck_assert_int_eq(lstat(link, &ls), 0);
  ck_assert(S_ISLNK(ls.st_mode));
  ck_assert_int_eq(unlink(link), 0);
  /* A write that fails (the target is a folder) reports it and leaves
   * nothing behind. */
  const char *folder = path_for("ckpt.dir");
  ck_assert_int_eq(mkdir(folder, 0700), 0);
  ck_assert_int_eq(rt_safetensors_write(folder, &set, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "Is a directory") != NULL, "%s", err);
  ck_assert_int_eq(rmdir(folder), 0);
  /* The failed writes above left the earlier file as it was. */
  ck_assert_msg(rt_safetensors_read(p, &r, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(r.n, 4);
  rt_tensor_set_free(&r);
}
END_TEST

/* As the Python library writes it: offsets out of order relative to the
 * header, all dtypes, a space-padded header. */
START_TEST(test_st_read_handmade) {
  unsigned char data[32];
  for (int i = 0; i < 32; i++) data[i] = (unsigned char)i;
  const char *json =
      "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[24,26]},"
      "\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F64\",\"shape\":[1,3],\"data_offsets\":[0,24]},"
      "\"c\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[26,27]},"
      "\"d\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[27,27]}}      ";
  const char *p = make_st("h.safetensors", json, data, 27);
  RtTensorSet s;
  ck_assert_msg(rt_safetensors_read(p, &s, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(s.n, 4);
  ck_assert_str_eq(s.names[0], "b");
  ck_assert_int_eq(s.tensors[0].dtype, RT_U8);
  ck_assert_mem_eq(s.tensors[0].data, data + 24, 2);
  ck_assert_int_eq(s.tensors[1].dtype, RT_F64);
  ck_assert_mem_eq(s.tensors[1].data, data, 24);
  ck_assert_int_eq(s.tensors[2].rank, 0);
  ck_assert_int_eq(*(unsigned char *)s.tensors[2].data, 26);
  rt_tensor_set_free(&s);
  /* Opened, the same header and no data until a tensor is loaded, each
   * from its own place; a load again keeps what it read. */
  ck_assert_msg(rt_safetensors_open(p, &s, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(s.n, 4);
  for (int i = 0; i < 4; i++) ck_assert_ptr_null(s.tensors[i].data);
  ck_assert_msg(rt_safetensors_load(&s, 1, err, sizeof err) == 0, "%s", err);
  ck_assert_mem_eq(s.tensors[1].data, data, 24);
  ck_assert_ptr_null(s.tensors[0].data);
  void *first = s.tensors[1].data;
  ck_assert_msg(rt_safetensors_load(&s, 1, err, sizeof err) == 0, "%s", err);
  ck_assert_ptr_eq(s.tensors[1].data, first);
  ck_assert_msg(rt_safetensors_load(&s, 0, err, sizeof err) == 0, "%s", err);
  ck_assert_mem_eq(s.tensors[0].data, data + 24, 2);
  ck_assert_msg(rt_safetensors_load(&s, 3, err, sizeof err) == 0, "%s", err);
  rt_tensor_set_free(&s);
  /* A header the reader refuses, the opener refuses alike. */
  p = make_st("bad.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9]}}", data, 9);
  ck_assert_int_eq(rt_safetensors_open(p, &s, err, sizeof err), -1);
  char open_err[sizeof err];
  memcpy(open_err, err, sizeof err);
  ck_assert_int_eq(rt_safetensors_read(p, &s, err, sizeof err), -1);
  ck_assert_str_eq(open_err, err);
}
END_TEST

START_TEST(test_st_errors) {
  unsigned char data[16] = {0};
  RtTensorSet s;
  char want[512];
  const char *p = write_bytes("tiny.safetensors", "abcd", 4, NULL, 0);
  ck_assert_int_eq(rt_safetensors_read(p, &s, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: too short for a safetensors file (4 bytes)", p);
  ck_assert_str_eq(err, want);
  unsigned char big[20] = {0xe8, 0x03}; /* header size 1000 */
  p = write_bytes("big.safetensors", big, 20, NULL, 0);
  ck_assert_int_eq(rt_safetensors_read(p, &s, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: header size 1000 is larger than the file (20 bytes)", p);
  ck_assert_str_eq(err, want);
  /* A sparse file larger than the 100 MB header limit. */
  unsigned char huge[8] = {0x01, 0xe1, 0xf5, 0x05}; /* 100000001 */
  p = write_bytes("huge.safetensors", huge, 8, NULL, 0);
  ck_assert_int_eq(truncate(p, 100000200), 0);
  ck_assert_int_eq(rt_safetensors_read(p, &s, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: header size 100000001 is more than 100 MB", p);
  ck_assert_str_eq(err, want);
  unlink(p);

  expect_st_error("{\"a\": ", data, 0, "the header is not valid JSON");
  expect_st_error("{}xyz", data, 0, "the header is not valid JSON");
  expect_st_error("[1, 2]", data, 0, "the header is not a JSON object");
  expect_st_error("{\"a\": 3}", data, 0, "tensor 'a': the entry is not a JSON object");
  expect_st_error("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", data, 4, "tensor 'a': missing \"dtype\"");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", data, 4, "tensor 'a': missing \"shape\"");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", data, 4, "tensor 'a': missing \"data_offsets\"");
  expect_st_error("{\"a\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}", data, 4,
                  "tensor 'a': \"dtype\" is not a string");
  expect_st_error("{\"a\": {\"dtype\": \"F8_E4M3\", \"shape\": [1], \"data_offsets\": [0, 1]}}", data, 1,
                  "tensor 'a': unsupported dtype \"F8_E4M3\"");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", data, 4,
                  "tensor 'a': \"shape\" is not an array");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", data, 4,
                  "tensor 'a': \"shape\" must hold integers >= 0");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", data, 4,
                  "tensor 'a': \"shape\" must hold integers >= 0");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
                  data, 4, "tensor 'a': rank 9 is more than 8");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 2], \"data_offsets\": [0, 4]}}",
                  data, 4, "tensor 'a': shape is too large");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", data, 4,
                  "tensor 'a': \"data_offsets\" must be [begin, end] with 0 <= begin <= end");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", data, 4,
                  "tensor 'a': \"data_offsets\" must be [begin, end] with 0 <= begin <= end");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", data, 8,
                  "tensor 'a': data_offsets [0, 4] hold 4 bytes, F32[2] needs 8");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", data, 4,
                  "tensor 'a': data_offsets [0, 8] run past the end of the data (4 bytes)");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                  " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                  data, 12, "tensors 'a' and 'b' overlap in the data");
  expect_st_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                  " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                  data, 8, "tensor 'a' appears twice in the header");
  expect_st_error("{\"__metadata__\": {\"k\": 1}}", data, 0, "\"__metadata__\" entry 'k' is not a string");
  expect_st_error("{\"__metadata__\": [1]}", data, 0, "\"__metadata__\" is not a JSON object");
}
END_TEST

/* ---- binding weights to a graph ---- */

static Ctx ctx;
static Graph *g;
/* Tensor i of a weights file starts at float i of 0, 1, 2, ... */
static float *blob;

static void gsetup(void) {
  setup();
  ctx_init(&ctx);
  g = ir_graph_new(&ctx, "m");
}

static void gteardown(void) {
  free(blob);
  blob = NULL;
  ctx_free(&ctx);
  teardown();
}

static void param(const char *name, DType dt, int rank, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  TensorType t = ir_type_make(dt, rank, dims);
  ir_source(g, OP_PARAM, &t, name, (SrcLoc){0});
}


static const char *weights_file(int n, const char **names, const RtDType *dts, const int *ranks,
                                const int64_t (*dims)[2]) {
  RtTensor ts[16];
  size_t most = 0;
  for (int i = 0; i < n; i++) {
    ts[i] = (RtTensor){.dtype = dts[i], .rank = ranks[i]};
    for (int d = 0; d < ranks[i]; d++) ts[i].dims[d] = dims[i][d];
    ts[i].nbytes = (size_t)rt_numel(&ts[i]) * (size_t)rt_dtype_size(dts[i]);
    if (ts[i].nbytes > most) most = ts[i].nbytes;
  }
  size_t count = most / 4 + 16;
  blob = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) blob[i] = (float)i;
  for (int i = 0; i < n; i++) ts[i].data = blob + i;
  RtTensorSet set = {.n = n, .names = (char **)names, .tensors = ts};
  const char *p = path_for("w.safetensors");
  ck_assert_msg(rt_safetensors_write(p, &set, err, sizeof err) == 0, "%s", err);
  return p;
}

static bool want_bias(void *unused, const char *name) {
  (void)unused;
  return strcmp(name, "fc1.bias") == 0;
}

START_TEST(test_bind_ok) {
  param("fc1.weight", TY_F32, 2, 4, 3);
  param("fc1.bias", TY_F32, 1, 4, 0);
  param("bn.running_mean", TY_F32, 1, 2, 0);
  param("fc1.weight", TY_F32, 2, 4, 3); /* shared: bound once */
  const char *names[] = {"bn.running_mean", "fc1.bias", "bn.num_batches_tracked", "fc1.weight"};
  RtDType dts[] = {RT_F32, RT_F32, RT_I64, RT_F32};
  int ranks[] = {1, 1, 0, 2};
  int64_t dims[][2] = {{2, 0}, {4, 0}, {0, 0}, {4, 3}};
  const char *p = weights_file(4, names, dts, ranks, dims);
  TensorMap m;
  ck_assert_msg(api_bind_weights(g, p, NULL, &m, err, sizeof err), "%s", err);
  ck_assert_int_eq(m.n, 3);
  ck_assert_str_eq(m.names[0], "fc1.weight");
  const Tensor *w = ir_tensor_map_find(&m, "fc1.weight");
  ck_assert_int_eq(w->type.dims[0], 4);
  ck_assert_mem_eq(w->data, blob + 3, 48);
  ir_tensor_map_free(&m);
  /* Binding some (a pipeline stage's): the others are checked, not
   * read or bound. */
  ApiWeightFilter only = {want_bias, NULL};
  ck_assert_msg(api_bind_some_weights(g, p, NULL, &only, &m, err, sizeof err), "%s", err);
  ck_assert_int_eq(m.n, 1);
  ck_assert_str_eq(m.names[0], "fc1.bias");
  ck_assert_mem_eq(m.tensors[0].data, blob + 1, 16);
  ir_tensor_map_free(&m);
  param("fc2.weight", TY_F32, 1, 4, 0);
  ck_assert(!api_bind_some_weights(g, p, NULL, &only, &m, err, sizeof err));
  ck_assert_msg(strstr(err, "missing tensor 'fc2.weight'"), "%s", err);
}
END_TEST

START_TEST(test_bind_errors) {
  param("fc1.weight", TY_F32, 2, 512, 784);
  param("fc1.bias", TY_F32, 1, 512, 0);
  param("fc2.weight", TY_F16, 2, 10, 512);
  param("fc2.bias", TY_F32, 1, 10, 0);
  const char *names[] = {"fc1.weight", "fc2.weight", "fc2.bias", "foo", "bn.num_batches_tracked"};
  RtDType dts[] = {RT_F32, RT_F32, RT_F16, RT_F32, RT_I64};
  int ranks[] = {2, 2, 1, 1, 0};
  int64_t dims[][2] = {{512, 700}, {10, 512}, {11, 0}, {1, 0}, {0, 0}};
  const char *p = weights_file(5, names, dts, ranks, dims);
  TensorMap m;
  ck_assert(!api_bind_weights(g, p, NULL, &m, err, sizeof err));
  char want[2048];
  snprintf(want, sizeof want,
           "tensor 'fc1.weight' is [512, 700] in %s, the model expects [512, 784]\n"
           "missing tensor 'fc1.bias' (expected f32[512]) in %s\n"
           "tensor 'fc2.weight' is f32 in %s, the model expects f16\n"
           "tensor 'fc2.bias' is f16[11] in %s, the model expects f32[10]\n"
           "%s: unexpected tensor 'foo' (the model has no such parameter)\n"
           "%s: unexpected tensor 'bn.num_batches_tracked' (the model has no such parameter)",
           p, p, p, p, p, p);
  ck_assert_str_eq(err, want);
  ck_assert_int_eq(m.n, 0);
}
END_TEST

START_TEST(test_bind_many_errors_capped) {
  char names[30][16];
  for (int i = 0; i < 30; i++) {
    snprintf(names[i], sizeof names[i], "p%d", i);
    param(names[i], TY_F32, 1, 2, 0);
  }
  const char *fn[] = {"other"};
  RtDType dts[] = {RT_F32};
  int ranks[] = {1};
  int64_t dims[][2] = {{2, 0}};
  const char *p = weights_file(1, fn, dts, ranks, dims);
  TensorMap m;
  ck_assert(!api_bind_weights(g, p, NULL, &m, err, sizeof err));
  int lines = 1;
  for (const char *c = err; *c; c++) lines += *c == '\n';
  ck_assert_int_eq(lines, 21);
  ck_assert_ptr_nonnull(strstr(err, "\n(11 more not shown)"));
  /* A file that cannot be read says why, naming it. */
  ck_assert(!api_bind_weights(g, path_for("none.safetensors"), NULL, &m, err, sizeof err));
  ck_assert_ptr_nonnull(strstr(err, "none.safetensors: No such file"));
}
END_TEST

/* ---- torch.save files (tests/torchfiles, written by torch 2.15) ---- */

static const char *torch_file(const char *name) {
  static char p[4][1024];
  static int k;
  const char *src = getenv("top_srcdir");
  char *out = p[k++ % 4];
  snprintf(out, sizeof p[0], "%s/tests/torchfiles/%s", src ? src : ".", name);
  return out;
}

static const RtTensor *must_find(const RtTensorSet *s, const char *name, RtDType dt, int rank, int64_t d0,
                                 int64_t d1) {
  const RtTensor *t = rt_tensor_set_find(s, name);
  ck_assert_msg(t != NULL, "no tensor '%s'", name);
  ck_assert_int_eq(t->dtype, dt);
  ck_assert_int_eq(t->rank, rank);
  if (rank > 0) ck_assert_int_eq(t->dims[0], d0);
  if (rank > 1) ck_assert_int_eq(t->dims[1], d1);
  ck_assert_uint_eq(t->nbytes, (size_t)rt_numel(t) * (size_t)rt_dtype_size(dt));
  return t;
}

/* Views of one storage a = arange(12).reshape(3, 4) (make.py), read as
 * the views they are, through rt_safetensors_read and _open alike. */
START_TEST(test_torch_views) {
  for (int lazy = 0; lazy < 2; lazy++) {
    RtTensorSet s;
    const char *p = torch_file("views.pt");
    ck_assert_msg((lazy ? rt_safetensors_open : rt_safetensors_read)(p, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.n, 8);
    ck_assert_str_eq(s.names[0], "t"); /* the dict's order */
    for (int i = 0; i < s.n; i++) ck_assert_int_eq(rt_safetensors_load(&s, i, err, sizeof err), 0);
    const float *t = must_find(&s, "t", RT_F32, 2, 4, 3)->data;
    for (int i = 0; i < 12; i++) ck_assert_float_eq(t[i], (float)(i % 3 * 4 + i / 3));
    const float *v = must_find(&s, "s", RT_F32, 2, 2, 2)->data;
    ck_assert(v[0] == 4 && v[1] == 6 && v[2] == 8 && v[3] == 10);
    const uint16_t *h = must_find(&s, "h", RT_F16, 2, 3, 4)->data, *b = must_find(&s, "b", RT_BF16, 2, 3, 4)->data;
    ck_assert_uint_eq(h[11], 0x4980); /* 11 in f16 */
    ck_assert_uint_eq(b[11], 0x4130); /* 11 in bf16 */
    const int64_t *l = must_find(&s, "i", RT_I64, 2, 3, 4)->data;
    ck_assert_int_eq(l[7], 7);
    must_find(&s, "z", RT_F32, 2, 0, 3);
    ck_assert_float_eq(*(const float *)must_find(&s, "q", RT_F32, 0, 0, 0)->data, 11);
    const float *whole = must_find(&s, "tie", RT_F32, 2, 3, 4)->data;
    for (int i = 0; i < 12; i++) ck_assert_float_eq(whole[i], (float)i);
    rt_tensor_set_free(&s);
  }
}
END_TEST

/* A checkpoint dict's "model" (or "state_dict") entry is the state_dict;
 * its other entries (the optimizer's state, numbers, a list, a 64-bit
 * unsigned seed, a defaultdict, a set) are read and left; protocol 4's
 * MEMOIZE stores as Python's does (a slot per value, in order). */
START_TEST(test_torch_checkpoint) {
  RtTensorSet a, b;
  ck_assert_msg(rt_safetensors_read(torch_file("fc.pt"), &a, err, sizeof err) == 0, "%s", err);
  static const char *const names[] = {"0.weight", "0.bias", "2.weight", "2.bias"};
  static const char *const files[] = {"ckpt.pt", "proto4.pt", "extras.pt"};
  ck_assert_int_eq(a.n, 4);
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    ck_assert_msg(rt_safetensors_read(torch_file(files[f]), &b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(b.n, 4);
    for (int i = 0; i < 4; i++) {
      ck_assert_str_eq(a.names[i], names[i]);
      ck_assert_str_eq(b.names[i], names[i]);
      ck_assert_uint_eq(a.tensors[i].nbytes, b.tensors[i].nbytes);
      ck_assert_mem_eq(a.tensors[i].data, b.tensors[i].data, a.tensors[i].nbytes);
    }
    rt_tensor_set_free(&b);
  }
  const float *bias = must_find(&a, "2.bias", RT_F32, 1, 3, 0)->data;
  ck_assert(fabsf(bias[0] - 0.19409f) < 1e-4f && fabsf(bias[1] + 0.04462f) < 1e-4f);
  rt_tensor_set_free(&a);
}
END_TEST

START_TEST(test_torch_refused) {
  static const struct {
    const char *file, *msg;
  } cases[] = {
      {"whole.pt", "no tensors to read: the file holds a pickled torch.nn.modules.linear.Linear object (a whole "
                   "model?); dlcc reads a state_dict (torch.save(model.state_dict(), PATH))"},
      {"complex.pt", "tensor 'w' is a kind dlcc does not read (torch.ComplexFloatStorage)"},
      {"legacy.pt", "a torch.save file in the format before PyTorch 1.6 (a bare pickle): save it again with "
                    "torch.save(torch.load(PATH), PATH) under a current PyTorch, or as safetensors"},
      {"expand.pt", "tensor 'x': the tensors would take more than 67115144 bytes (4 times the file's size and 64 "
                    "MiB): views that repeat their storage (expand()'s stride 0) are not read; save contiguous "
                    "tensors"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    RtTensorSet s;
    const char *p = torch_file(cases[i].file);
    ck_assert_int_eq(rt_safetensors_read(p, &s, err, sizeof err), -1);
    char want[1024];
    snprintf(want, sizeof want, "%s: %s", p, cases[i].msg);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(s.n, 0);
  }
}
END_TEST

/* A safetensors header of 640 bytes starts the file with 0x80 0x02, as
 * a pickle starts (the fuzzer's find): it is still a safetensors file. */
START_TEST(test_st_not_taken_for_torch) {
  char json[641];
  memset(json, ' ', 640);
  json[640] = 0;
  const char *entry = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
  memcpy(json, entry, strlen(entry));
  unsigned char data[2] = {7, 9};
  RtTensorSet s;
  const char *p = make_st("pk.safetensors", json, data, 2);
  ck_assert_msg(rt_safetensors_read(p, &s, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(s.n, 1);
  ck_assert_mem_eq(s.tensors[0].data, data, 2);
  rt_tensor_set_free(&s);
}
END_TEST

/* A sharded checkpoint: two safetensors shards and a torch.save one,
 * named by an index as Hugging Face writes it; then each way an index
 * can be wrong, and a shard that is a link. */
START_TEST(test_sharded) {
  unsigned char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  make_st("a.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", data, 2);
  make_st("b.safetensors", "{\"y\":{\"dtype\":\"I8\",\"shape\":[1,3],\"data_offsets\":[0,3]}}", data + 4, 3);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/fc.pt'", torch_file("fc.pt"), dir);
  ck_assert_int_eq(system(cmd), 0);
  static const char good[] = "{\"metadata\": {\"total_size\": 5}, \"weight_map\": {\"y\": \"b.safetensors\", "
                             "\"x\": \"a.safetensors\", \"0.bias\": \"fc.pt\"}}";
  const char *index = write_bytes("model.safetensors.index.json", good, strlen(good), NULL, 0);
  for (int lazy = 0; lazy < 2; lazy++) {
    RtTensorSet s;
    ck_assert_msg((lazy ? rt_safetensors_open : rt_safetensors_read)(index, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.n, 6); /* y, x, then fc.pt's four: shards in order of first mention */
    ck_assert_str_eq(s.names[0], "y");
    ck_assert_str_eq(s.names[1], "x");
    for (int i = 0; i < s.n; i++) ck_assert_msg(rt_safetensors_load(&s, i, err, sizeof err) == 0, "%s", err);
    ck_assert_mem_eq(must_find(&s, "x", RT_U8, 1, 2, 0)->data, data, 2);
    ck_assert_mem_eq(must_find(&s, "y", RT_I8, 2, 1, 3)->data, data + 4, 3);
    must_find(&s, "2.weight", RT_F32, 2, 3, 8);
    rt_tensor_set_free(&s);
  }
  static const struct {
    const char *json, *msg;
  } bad[] = {
      {"{\"metadata\": {}}", "no \"weight_map\" object: not a sharded checkpoint's index"},
      {"{\"weight_map\": {\"x\": \"../a.safetensors\"}}",
       "tensor 'x': its shard must be a file name in the index's folder"},
      {"{\"weight_map\": {\"x\": 3}}", "tensor 'x': its shard must be a file name in the index's folder"},
      {"{\"weight_map\": {\"x\": \"b.safetensors\", \"y\": \"b.safetensors\"}}",
       "the index puts tensor 'x' in b.safetensors, which lacks it"},
      {"{\"weight_map\": {\"x\": \"a.safetensors\", \"z\": \"a.safetensors\"}}",
       "the index puts tensor 'z' in a.safetensors, which lacks it"},
      {"{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a2.safetensors\"}}",
       "tensor 'x' is in two shards (one is a2.safetensors)"},
      {"{\"weight_map\": ", "the index is not valid JSON"},
  };
  snprintf(cmd, sizeof cmd, "cp '%s/a.safetensors' '%s/a2.safetensors'", dir, dir);
  ck_assert_int_eq(system(cmd), 0);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *p = write_bytes("bad.index.json", bad[i].json, strlen(bad[i].json), NULL, 0);
    RtTensorSet s;
    ck_assert_int_eq(rt_safetensors_open(p, &s, err, sizeof err), -1);
    char want[1024];
    snprintf(want, sizeof want, "%s: %s", p, bad[i].msg);
    ck_assert_str_eq(err, want);
  }
  /* a shard that is a link is not followed, even inside the folder */
  snprintf(cmd, sizeof cmd, "ln -s a.safetensors '%s/link.safetensors'", dir);
  ck_assert_int_eq(system(cmd), 0);
  static const char linked[] = "{\"weight_map\": {\"x\": \"link.safetensors\"}}";
  const char *p = write_bytes("l.index.json", linked, strlen(linked), NULL, 0);
  RtTensorSet s;
  ck_assert_int_eq(rt_safetensors_read(p, &s, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "link.safetensors: is a symbolic link, which is not followed here"), "%s", err);
}
END_TEST

static unsigned char *slurp(const char *p, long *n) {
  *n = file_size(p);
  unsigned char *b = malloc((size_t)*n);
  FILE *f = fopen(p, "rb");
  ck_assert(b && f && fread(b, 1, (size_t)*n, f) == (size_t)*n);
  fclose(f);
  return b;
}

/* Every truncation of fc.pt is refused with a message; every byte of it
 * flipped either is refused with one or reads as a consistent set (the
 * CRC guards the data; a flip in a field nothing reads changes nothing). */
START_TEST(test_torch_damaged) {
  long n;
  unsigned char *good = slurp(torch_file("fc.pt"), &n);
  RtTensorSet s;
  for (long len = 0; len < n; len++) {
    const char *p = write_bytes("cut.pt", good, (size_t)len, NULL, 0);
    err[0] = 0;
    ck_assert_msg(rt_safetensors_read(p, &s, err, sizeof err) == -1, "truncated to %ld bytes: read", len);
    ck_assert_msg(err[0], "truncated to %ld bytes: no message", len);
  }
  int refused = 0;
  for (long at = 0; at < n; at++) {
    good[at] ^= 0xA5;
    const char *p = write_bytes("flip.pt", good, (size_t)n, NULL, 0);
    good[at] ^= 0xA5;
    err[0] = 0;
    if (rt_safetensors_read(p, &s, err, sizeof err) < 0) {
      ck_assert_msg(err[0], "byte %ld flipped: no message", at);
      refused++;
      continue;
    }
    for (int i = 0; i < s.n; i++)
      ck_assert(s.names[i] && s.tensors[i].data &&
                s.tensors[i].nbytes == (size_t)rt_numel(&s.tensors[i]) * (size_t)rt_dtype_size(s.tensors[i].dtype));
    rt_tensor_set_free(&s);
  }
  ck_assert_int_gt(refused, n / 4); /* the pickle and the storages are CRC-checked; padding is not read */
  free(good);
}
END_TEST

static Suite *tensorio_suite(void) {
  Suite *s = suite_create("tensorio");
  TCase *t = tcase_create("npy");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_npy_roundtrip);
  tcase_add_test(t, test_npy_shape_text);
  tcase_add_test(t, test_npy_read_variants);
  tcase_add_test(t, test_npy_errors);
  tcase_add_test(t, test_npy_write_bf16_refused);
  suite_add_tcase(s, t);
  t = tcase_create("safetensors");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_st_roundtrip);
  tcase_add_test(t, test_st_read_handmade);
  tcase_add_test(t, test_st_errors);
  tcase_add_test(t, test_st_not_taken_for_torch);
  tcase_add_test(t, test_torch_views);
  tcase_add_test(t, test_torch_checkpoint);
  tcase_add_test(t, test_torch_refused);
  tcase_add_test(t, test_torch_damaged);
  tcase_add_test(t, test_sharded);
  suite_add_tcase(s, t);
  t = tcase_create("weights");
  tcase_add_checked_fixture(t, gsetup, gteardown);
  tcase_add_test(t, test_bind_ok);
  tcase_add_test(t, test_bind_errors);
  tcase_add_test(t, test_bind_many_errors_capped);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(tensorio_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
