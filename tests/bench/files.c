/* make bench, the file readers' part: seconds to read safetensors files
 * of 25,000 to 200,000 one-element tensors (the header is what grows:
 * about 68 bytes an entry) and to bind each to a graph of as many params,
 * and the time per entry, which stays flat when reading is linear (the
 * quadratic duplicate check it replaced took 32 s for 100,000 entries).
 * Figures only; nothing here fails on a slow machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/weights.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "runtime/tensorio.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* n tensors "t<i>" of one f32 each; the header's length in *hbytes. */
static int write_file(const char *path, int n, size_t *hbytes) {
  size_t cap = (size_t)n * 80 + 64, len = 0;
  char *json = malloc(cap);
  float *data = calloc((size_t)n, sizeof(float));
  FILE *f = fopen(path, "wb");
  if (!json || !data || !f) return -1;
  json[len++] = '{';
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(json + len, cap - len,
                            "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                            i ? "," : "", i, 4 * i, 4 * i + 4);
  json[len++] = '}';
  while (len % 8) json[len++] = ' ';
  unsigned char pre[8];
  for (int i = 0; i < 8; i++) pre[i] = (unsigned char)((unsigned long long)len >> (8 * i));
  int rc = fwrite(pre, 1, 8, f) == 8 && fwrite(json, 1, len, f) == len &&
                   fwrite(data, sizeof(float), (size_t)n, f) == (size_t)n
               ? 0
               : -1;
  if (fclose(f) != 0) rc = -1;
  free(json);
  free(data);
  *hbytes = len;
  return rc;
}

int main(void) {
  char dir[] = "/tmp/dlcc-bench-files-XXXXXX", path[64], err[1024];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  printf("safetensors: read a file of N one-element tensors, then bind them to N params\n");
  printf("  %8s %10s %10s %12s %10s %12s\n", "N", "header MB", "read s", "read us/ent", "bind s",
         "bind us/ent");
  static const int sizes[] = {25000, 50000, 100000, 200000};
  int rc = 0;
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes && rc == 0; k++) {
    int n = sizes[k];
    size_t hbytes;
    if (write_file(path, n, &hbytes) != 0) {
      rc = 1;
      break;
    }
    double t0 = now();
    RtTensorSet s;
    if (rt_safetensors_read(path, &s, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      rc = 1;
      break;
    }
    double read = now() - t0;
    rt_tensor_set_free(&s);
    Ctx c;
    ctx_init(&c);
    Graph *g = ir_graph_new(&c, "g");
    TensorType t = ir_type_make(TY_F32, 1, (const int64_t[]){1});
    for (int i = 0; i < n; i++) ir_source(g, OP_PARAM, &t, arena_printf(&c.arena, "t%d", i), (SrcLoc){0});
    TensorMap m;
    t0 = now();
    if (!api_bind_weights(g, path, NULL, &m, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      rc = 1;
    }
    double bind = now() - t0;
    ir_tensor_map_free(&m);
    ctx_free(&c);
    printf("  %8d %10.1f %10.3f %12.2f %10.3f %12.2f\n", n, (double)hbytes / 1e6, read, read / n * 1e6,
           bind, bind / n * 1e6);
  }
  unlink(path);
  rmdir(dir);
  return rc;
}
