/* libFuzzer target for safetensors files (`--weights`, the JIT API's
 * weights): takes any bytes as the file.  Rejected input must leave a
 * message and an empty set; an accepted file must hold consistent
 * tensors that, written back by rt_safetensors_write, read back equal.
 * Every input is also bound (api_bind_weights) to a small graph whose
 * params cover each dtype and PyTorch's num_batches_tracked rule: a
 * binding either fails with messages or gives every param its tensor. */
#include <string.h>

#include "api/weights.h"
#include "runtime/tensorio.h"
#include "tests/fuzz/fuzz.h"

static const char bind_ir[] =
    "; dlcc IR\n"
    "graph weights {\n"
    "  %0 = param {name=\"fc.weight\"} : f32[2, 3]\n"
    "  %1 = param {name=\"fc.bias\"} : f32[2]\n"
    "  %2 = param {name=\"bn.running_mean\"} : f32[2]\n"
    "  %3 = param {name=\"emb.weight\"} : f16[4, 2]\n"
    "  %4 = param {name=\"ids\"} : i64[3]\n"
    "  %5 = param {name=\"mask\"} : bool[2]\n"
    "  %6 = param {name=\"q\"} : i8[2]\n"
    "  %7 = param {name=\"u\"} : u8[1]\n"
    "  %8 = param {name=\"n\"} : i32[1, 1]\n"
    "  %9 = param {name=\"z\"} : bf16[]\n"
    "  return %0 as \"a\", %1 as \"b\", %2 as \"c\", %3 as \"d\", %4 as \"e\", %5 as \"f\", %6 as \"g\", "
    "%7 as \"h\", %8 as \"i\", %9 as \"j\"\n"
    "}\n";

static FuzzFile in_file, out_file;

static void check_set(const RtTensorSet *s) {
  for (int i = 0; i < s->n; i++) {
    const RtTensor *t = &s->tensors[i];
    int64_t n = rt_numel(t);
    if (!s->names[i] || strcmp(s->names[i], "__metadata__") == 0 || t->rank < 0 || t->rank > RT_MAX_RANK ||
        n < 0 || !t->data || t->nbytes != (size_t)n * (size_t)rt_dtype_size(t->dtype))
      fuzz_fail("accepted tensor %d is inconsistent", i);
  }
  for (int i = 0; i < s->n_meta; i++)
    if (!s->meta_keys[i] || !s->meta_values[i]) fuzz_fail("metadata entry %d is incomplete", i);
}

static bool same_tensor(const RtTensor *a, const RtTensor *b) {
  return a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->rank) == 0 && a->nbytes == b->nbytes &&
         (a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

static void check_reread(const RtTensorSet *s) {
  RtTensorSet back;
  char err[1024] = "";
  if (rt_safetensors_write(out_file.path, s, err, sizeof err) < 0) fuzz_fail("rt_safetensors_write: %s", err);
  if (rt_safetensors_read(out_file.path, &back, err, sizeof err) < 0)
    fuzz_fail("reading back what rt_safetensors_write wrote: %s", err);
  if (back.n != s->n || back.n_meta != s->n_meta) fuzz_fail("a set written and read back has other counts");
  for (int i = 0; i < s->n; i++)
    if (strcmp(back.names[i], s->names[i]) != 0 || !same_tensor(&back.tensors[i], &s->tensors[i]))
      fuzz_fail("tensor '%s' written and read back differs", s->names[i]);
  for (int i = 0; i < s->n_meta; i++)
    if (strcmp(back.meta_keys[i], s->meta_keys[i]) != 0 || strcmp(back.meta_values[i], s->meta_values[i]) != 0)
      fuzz_fail("metadata '%s' written and read back differs", s->meta_keys[i]);
  rt_tensor_set_free(&back);
}

typedef struct Bind {
  const RtTensorSet *set; /* the file as read, or NULL when it was rejected */
} Bind;

static int bind(Ctx *c, void *data) {
  const RtTensorSet *set = ((Bind *)data)->set;
  Graph *g = ir_parse(c, ctx_add_file(c, "weights.ir", bind_ir, sizeof bind_ir - 1));
  if (!g || !ir_verify(g)) fuzz_fail("the binding graph does not parse:\n%s", diag_text(c));
  TensorMap map;
  char err[4096] = "";
  if (!api_bind_weights(g, in_file.path, NULL, &map, err, sizeof err)) {
    fuzz_require_message("api_bind_weights", err);
    if (map.n) fuzz_fail("a failed binding returned %d tensors", map.n);
    return 1;
  }
  if (!set) fuzz_fail("api_bind_weights accepted a file rt_safetensors_read rejects");
  int n_params = 0;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_PARAM) continue;
    n_params++;
    const char *name = ir_attr_str(n, "name");
    const Tensor *t = ir_tensor_map_find(&map, name);
    const RtTensor *f = rt_tensor_set_find(set, name);
    /* or under a wrapper's prefix, which binding strips (api/weights.c) */
    static const char *const wrappers[] = {"module._orig_mod.", "_orig_mod.module.", "module.", "_orig_mod."};
    for (size_t k = 0; !f && k < sizeof wrappers / sizeof wrappers[0]; k++) {
      char wrapped[256];
      snprintf(wrapped, sizeof wrapped, "%s%s", wrappers[k], name);
      f = rt_tensor_set_find(set, wrapped);
    }
    if (!t || !f || !ir_type_eq(&t->type, &n->out[0].type) || ir_tensor_nbytes(&t->type) != f->nbytes ||
        (f->nbytes && memcmp(t->data, f->data, f->nbytes)))
      fuzz_fail("param '%s' is bound to something other than the file's tensor", name);
  }
  if (map.n != n_params) fuzz_fail("%d params bound to %d tensors", n_params, map.n);
  ir_tensor_map_free(&map);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!in_file.path[0]) {
    fuzz_file_open(&in_file, "in.safetensors");
    fuzz_file_open(&out_file, "out.safetensors");
  }
  fuzz_file_set(&in_file, data, size);
  RtTensorSet set;
  char err[1024] = "";
  Bind b = {NULL};
  if (rt_safetensors_read(in_file.path, &set, err, sizeof err) < 0) {
    fuzz_require_message("rt_safetensors_read", err);
    if (set.n || set.n_meta || set.names || set.tensors) fuzz_fail("a rejected file left tensors");
  } else {
    check_set(&set);
    check_reread(&set);
    b.set = &set;
  }
  Ctx c;
  ctx_init(&c);
  fuzz_guard(&c, bind, &b);
  ctx_free(&c);
  if (b.set) rt_tensor_set_free(&set);
  return 0;
}
