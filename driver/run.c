/* `dlcc run`: compiles a model through the public API (include/dlcc.h),
 * binds weights (a safetensors file, or random with a seed) and inputs
 * (.npy files, or random), runs it, prints a summary of each output and
 * writes them as .npy.  Every failure says why on stderr: an input too
 * large for this machine is named with its size before anything is
 * allocated for it. */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "driver/comm.h"
#include "driver/dist.h"
#include "driver/driver.h"
#include "driver/run.h"
#include "dlcc.h"
#include "dlcrt.h"
#include "ir/eval.h"
#include "ir/names.h"
#include "runtime/tensorio.h"
#ifdef HAVE_NCCL
#include "driver/comm_nccl.h"
#endif

static const char run_usage[] =
    "usage: dlcc run MODEL [options]\n"
    "\n"
    "Compiles MODEL (.dl, .ir or .onnx), or opens a library built by dlcc -o MODEL.so,\n"
    "runs it once and prints each output's name, type and a summary (min, max,\n"
    "mean, first values).  A MODEL.so has its weights inside (--weights replaces\n"
    "them) or reads its external weights file at open.\n"
    "\n"
    "options:\n"
    "  --weights=FILE      parameters from a safetensors file (PyTorch state_dict names);\n"
    "                      without it they are random (see --seed)\n"
    "  --init=random       random parameters (the default when no --weights, except\n"
    "                      for an .onnx model, which brings its own)\n"
    "  --input NAME=FILE   an input from a .npy file; inputs not given are random; its\n"
    "                      shape binds the dims the model leaves free (a name in a .dl\n"
    "                      input's type that nothing defines; an ONNX input's free dims)\n"
    "  --seed=S            seed for random parameters and inputs (default 0)\n"
    "  --output-dir=DIR    write each output to DIR/NAME.npy; a NAME that is not a plain\n"
    "                      file name is encoded (../x: %2E.%2F..%2Fx.npy, docs/names.md)\n"
    "  --bench=N           after the first run, time N more (inputs in, outputs out)\n"
    "                      and print their mean and minimum in ms; then stream N\n"
    "                      batches with copies overlapping compute (dlc_run_batches)\n"
    "  --profile[=N]       after the first run, time every step once (GPU time on cuda)\n"
    "                      and print the N slowest (default 20) with their FLOPs and\n"
    "                      bytes from the cost report: where a run's time goes\n"
    "  --no-graphs         launch every step on each run instead of replaying a\n"
    "                      captured CUDA graph (as DLCC_NO_GRAPHS=1; for debugging)\n"
    "  --verbose           say how the runtime ran it: graphs (or why not), staging\n"
    "  --no-split-k --no-merge-launches --no-chain-launches --unroll-rnn\n"
    "                      as for dlcc (dlcc --help)\n"
    "  --tensor-parallel=T under mpirun -np T: split the linear pairs and attention\n"
    "                      heads over T ranks (docs/parallel.md), each holding its\n"
    "                      parts of the weights; rank 0 prints and writes the outputs;\n"
    "                      under -np D*T, D groups of T each run a share of the batch\n"
    "  --pipeline=S        under mpirun -np S: cut the model into S stages, one a rank\n"
    "                      (at its stage() marks, else balanced by the cost model),\n"
    "                      each rank compiling and binding only its stage's part;\n"
    "                      the last rank prints and writes the outputs (docs/parallel.md);\n"
    "                      -np D*S runs D pipelines, each on 1/D of the batch\n"
    "  --micro-batches=M   with --pipeline: stream the batch (every input's axis 0)\n"
    "                      through the stages as M micro-batches (default 1)\n"
    "  --dist-timeout=S    with --pipeline: seconds a rank waits for another (default 120)\n"
    "  --backend=B         where to run it: auto (default: cuda when a GPU answers,\n"
    "                      else emu), cuda, emu (the generated CUDA C on the CPU) or\n"
    "                      ref (the reference interpreter)\n"
    "  -D NAME=VALUE       as for dlcc\n"
    "  --model=NAME        as for dlcc\n"
    "  --loop-bound=N      as for dlcc\n"
    "  -O0, -O1, -O2       graph optimization, as for dlcc (default -O2)\n"
    "  --precision=P       f32 (default), f16 or bf16, as for dlcc\n"
    "  --tf32              f32 convolutions, attention and matrix products on tensor\n"
    "                      cores, as for dlcc\n"
    "  --grad              run the gradients of a training step instead, as for dlcc\n"
    "  --eval              a model exported in training mode run as PyTorch's eval():\n"
    "                      dropout off, batchnorm by its running statistics\n"
    "  --recompute[=SCOPE,...]  with --grad: activation checkpointing, as for dlcc\n"
    "\n"
    "int8, as for dlcc (calibration uses the weights the run binds: --weights, an\n"
    ".onnx model's own, or the random ones from --seed):\n";

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The int8 flags into the API's options; calibration binds the weights
 * this run would: --weights, or the model's own, or random from --seed. */
static bool set_quant_options(RunOptions *o) {
  DType precision = TY_F32;
  if (o->api.precision && !ir_dtype_from_name(o->api.precision, &precision)) precision = TY_F32;
  if (!driver_quant_check(&o->quant, precision)) return false;
  if (!o->quant.int8) return true;
  if (o->init_random && has_suffix(o->model_path, ".onnx")) {
    fprintf(stderr, "dlcc: error: --init=random with --quantize=int8: calibration would see %s's own "
                    "weights and the run random ones; give --weights instead\n", o->model_path);
    return false;
  }
  o->api.quantize = "int8";
  o->api.calibrate_dir = o->quant.calibrate;
  o->api.calib_method = o->quant.method;
  o->api.calib_samples = o->quant.max_samples;
  o->api.calib_backend = o->quant.backend;
  o->api.calibrate_seed = o->seed;
  o->api.weights = o->weights;
  return true;
}

/* v as a whole number in [lo, hi] into *out. */
static bool int_in(const char *v, long lo, long hi, int *out) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || end == v || n < lo || n > hi) return false;
  *out = (int)n;
  return true;
}

static int parse_run_args(int argc, char **argv, RunOptions *o) {
  DriverModelWords words = {&o->model_path, &o->api, o->defines};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v;
    int quant_flag = driver_quant_option(a, &o->quant);
    if (quant_flag < 0) return 1;
    if (quant_flag > 0) continue;
    if (strcmp(a, "--help") == 0) {
      fputs(run_usage, stdout);
      fputs(driver_quant_usage, stdout);
      return 2;
    } else if ((v = driver_flag_value(argc, argv, &i, "--weights"))) {
      o->weights = v;
    } else if ((v = driver_flag_value(argc, argv, &i, "--output-dir"))) {
      o->output_dir = v;
    } else if ((v = driver_flag_value(argc, argv, &i, "--bench"))) {
      if (!int_in(v, 1, 100000, &o->bench)) {
        fprintf(stderr, "dlcc: error: --bench expects a number of runs (1 to 100000), got '%s'\n", v);
        return 1;
      }
    } else if ((v = driver_flag_value(argc, argv, &i, "--tensor-parallel"))) {
      if (!int_in(v, 1, 4096, &o->tp)) {
        fprintf(stderr, "dlcc: error: --tensor-parallel expects a whole number >= 1, got '%s'\n", v);
        return 1;
      }
    } else if ((v = driver_flag_value(argc, argv, &i, "--pipeline"))) {
      if (!int_in(v, 1, 4096, &o->pipeline)) {
        fprintf(stderr, "dlcc: error: --pipeline expects a number of stages (1 to 4096), got '%s'\n", v);
        return 1;
      }
    } else if ((v = driver_flag_value(argc, argv, &i, "--micro-batches"))) {
      if (!int_in(v, 1, 1 << 20, &o->micro)) {
        fprintf(stderr, "dlcc: error: --micro-batches expects a whole number >= 1, got '%s'\n", v);
        return 1;
      }
    } else if ((v = driver_flag_value(argc, argv, &i, "--dist-timeout"))) {
      if (!int_in(v, 1, 86400, &o->dist_timeout)) {
        fprintf(stderr, "dlcc: error: --dist-timeout expects seconds (1 to 86400), got '%s'\n", v);
        return 1;
      }
    } else if (strcmp(a, "--no-graphs") == 0) {
      o->api.no_graphs = 1;
    } else if (strcmp(a, "--verbose") == 0) {
      o->verbose = true;
    } else if (strcmp(a, "--profile") == 0) {
      o->profile = 20;
    } else if ((v = driver_flag_value(argc, argv, &i, "--profile"))) {
      if (!int_in(v, 1, 1000000, &o->profile)) {
        fprintf(stderr, "dlcc: error: --profile expects a number of steps to show (1 or more), got '%s'\n", v);
        return 1;
      }
    } else if ((v = driver_flag_value(argc, argv, &i, "--backend"))) {
      o->backend = v;
    } else if ((v = driver_flag_value(argc, argv, &i, "--init"))) {
      if (strcmp(v, "random") != 0) {
        fprintf(stderr, "dlcc: error: unknown --init '%s' (expected random)\n", v);
        return 1;
      }
      o->init_random = true;
    } else if ((v = driver_flag_value(argc, argv, &i, "--seed"))) {
      char *end;
      errno = 0;
      unsigned long long s = strtoull(v, &end, 10);
      if (*end || end == v || errno) {
        fprintf(stderr, "dlcc: error: --seed expects a non-negative integer, got '%s'\n", v);
        return 1;
      }
      o->seed = s;
    } else if ((v = driver_flag_value(argc, argv, &i, "--input"))) {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1] || o->n_inputs == (int)ARRAY_LEN(o->inputs)) {
        fprintf(stderr, "dlcc: error: --input expects NAME=FILE.npy, got '%s'\n", v);
        return 1;
      }
      InputArg *in = &o->inputs[o->n_inputs];
      if (!(in->name = strndup(v, (size_t)(eq - v)))) {
        fputs("dlcc: error: out of memory\n", stderr);
        return 1;
      }
      in->path = eq + 1;
      o->n_inputs++;
    } else if ((v = driver_flag_value(argc, argv, &i, "--precision"))) {
      o->api.precision = v;
    } else if (strcmp(a, "--tf32") == 0) {
      o->api.tf32 = 1;
    } else if (strcmp(a, "--grad") == 0) {
      o->api.grad = 1;
    } else if (strcmp(a, "--eval") == 0) {
      o->api.eval_mode = 1;
    } else if ((v = driver_flag_value(argc, argv, &i, "--model"))) {
      o->api.model = v;
    } else if (driver_model_word(argc, argv, &i, "run", &words)) {
      return 1;
    }
  }
  if (!o->model_path) {
    fputs("dlcc: error: run needs a model file (see dlcc run --help)\n", stderr);
    return 1;
  }
  o->api.defines = o->defines;
  o->api.backend = o->backend;
  return set_quant_options(o) ? 0 : 1;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* bytes as "2.0 TiB", "512 bytes". */
static const char *size_text(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, len, "%" PRIu64 " bytes", bytes);
    return buf;
  }
  double v = (double)bytes / 1024;
  int u = 0;
  while (v >= 1024 && u + 1 < (int)ARRAY_LEN(units)) v /= 1024, u++;
  snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

/* The most this process could allocate at once: the machine's memory, or
 * less under ulimit -v or -d.  0 when unknown.  *why and *cap say which. */
static uint64_t allocation_limit(const char **why, const char **cap) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t limit = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  *why = "this machine's memory";
  *cap = "";
  static const struct {
    int resource;
    const char *cap;
  } caps[] = {{RLIMIT_AS, " under ulimit -v"}, {RLIMIT_DATA, " under ulimit -d"}};
  for (size_t i = 0; i < ARRAY_LEN(caps); i++) {
    struct rlimit rl;
    if (getrlimit(caps[i].resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (limit == 0 || (uint64_t)rl.rlim_cur < limit)) {
      limit = (uint64_t)rl.rlim_cur;
      *why = "this process may allocate";
      *cap = caps[i].cap;
    }
  }
  return limit;
}

/* Memory for an input, or false after saying why there is none: a size
 * beyond what the process could ever allocate is named before trying. */
static bool alloc_input(const dlc_tensor_info *info, Tensor *t) {
  TensorType type = ir_type_make((DType)info->dtype, info->rank, info->dims);
  char ty[IR_TYPE_STR_MAX], sz[32], lim[32];
  ir_type_str(&type, ty, sizeof ty);
  size_text(info->nbytes, sz, sizeof sz);
  const char *why, *cap;
  uint64_t limit = allocation_limit(&why, &cap);
  if (limit && info->nbytes > limit) {
    fprintf(stderr, "dlcc: error: input '%s' is %s (%s): more than %s (%s%s)\n", info->name, sz, ty, why,
            size_text(limit, lim, sizeof lim), cap);
    return false;
  }
  if (!ir_tensor_alloc(t, &type)) {
    fprintf(stderr, "dlcc: error: input '%s' is %s (%s): out of memory drawing it at random\n", info->name,
            sz, ty);
    return false;
  }
  return true;
}

/* Floats U(-1, 1); integers in [0, index_bound) for indices, else [0, 10);
 * bools true or false, half and half.  False after a message. */
bool run_random_input(const dlc_tensor_info *info, uint64_t seed, Tensor *t) {
  if (!alloc_input(info, t)) return false;
  const TensorType type = t->type;
  uint64_t state = seed ^ hash_name(info->name);
  int64_t n = ir_type_numel(&type);
  int64_t bound = info->index_bound > 0 ? info->index_bound : type.dtype == TY_BOOL ? 2 : 10;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = splitmix64(&state);
    double v = ir_dtype_is_float(type.dtype) ? (double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0
                                             : (double)(r % (uint64_t)bound);
    ir_tensor_set(t, i, v);
  }
  return true;
}

static void type_text(const dlc_tensor_info *info, char *buf, size_t len) {
  TensorType t = ir_type_make((DType)info->dtype, info->rank, info->dims);
  ir_type_str(&t, buf, len);
}

/* Reads every --input file; their shapes go to the compiler
 * (dlc_options.input_shapes), which binds the model's free dims to them. */
bool run_read_inputs(RunOptions *o) {
  for (int i = 0; i < o->n_inputs; i++) {
    InputArg *in = &o->inputs[i];
    char err[512];
    if (rt_npy_read(in->path, &in->data, err, sizeof err) != 0) {
      fprintf(stderr, "dlcc: error: %s\n", err);
      return false;
    }
    in->read = true;
    o->input_shapes[i] = (dlc_input_shape){in->name, in->data.rank, in->data.dims};
  }
  o->api.n_input_shapes = o->n_inputs;
  o->api.input_shapes = o->input_shapes;
  return true;
}

bool run_input_matches(const InputArg *in, const dlc_tensor_info *info, char *err, size_t errlen) {
  const RtTensor *rt = &in->data;
  bool same = (int)rt->dtype == (int)info->dtype && rt->rank == info->rank;
  for (int i = 0; same && i < rt->rank; i++) same = rt->dims[i] == info->dims[i];
  if (same) return true;
  char want[IR_TYPE_STR_MAX], got[IR_TYPE_STR_MAX] = "?";
  type_text(info, want, sizeof want);
  if (rt->dtype <= RT_U8) { /* a dtype dlcc has */
    dlc_tensor_info file = {.dtype = (dlc_dtype)rt->dtype, .rank = rt->rank};
    memcpy(file.dims, rt->dims, sizeof file.dims);
    type_text(&file, got, sizeof got);
  } else {
    snprintf(got, sizeof got, "%s data", rt_dtype_name(rt->dtype));
  }
  /* NumPy makes float64 and int64 unless told otherwise. */
  static const char *const np_names[] = {"float32", "float16", NULL, "int8", "int32", "int64", "bool_", "uint8"};
  const char *np = (int)rt->dtype != (int)info->dtype && (unsigned)info->dtype < ARRAY_LEN(np_names)
                       ? np_names[info->dtype] : NULL;
  snprintf(err, errlen, "input '%s': %s holds %s, the model expects %s%s%s%s", in->name, in->path, got, want,
           np ? " (save it with x.astype(np." : "", np ? np : "", np ? "))" : "");
  return false;
}

/* The input's data (read by read_inputs) if it has the type the model
 * expects. */
static bool load_input(const InputArg *in, const dlc_tensor_info *info, const RtTensor **out) {
  char err[1024];
  *out = &in->data;
  if (run_input_matches(in, info, err, sizeof err)) return true;
  fprintf(stderr, "dlcc: error: %s\n", err);
  return false;
}

void run_print_summary(const dlc_tensor_info *info, const void *data) {
  char type[IR_TYPE_STR_MAX];
  type_text(info, type, sizeof type);
  Tensor t = {ir_type_make((DType)info->dtype, info->rank, info->dims), (void *)data};
  int64_t n = ir_type_numel(&t.type);
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = ir_tensor_get(&t, i);
    if (v < lo) lo = v;
    if (v > hi) hi = v;
    sum += v;
  }
  ir_put_comment_text(stdout, info->name); /* a model's name is no terminal control sequence */
  printf(": %s  min %.6g  max %.6g  mean %.6g  [", type, lo, hi, n ? sum / (double)n : 0.0);
  for (int64_t i = 0; i < n && i < 6; i++) printf("%s%.6g", i ? ", " : "", ir_tensor_get(&t, i));
  printf("%s]\n", n > 6 ? ", ..." : "");
}

/* --output-dir: the folder, opened once, and each output's file in it
 * (docs/names.md): NAME.npy when NAME is a plain file name, else its
 * encoding, always inside the folder and distinct. */
void run_output_dir_close(OutputDir *d) {
  if (d->fd >= 0) close(d->fd);
  free(d->files);
  d->fd = -1;
  d->files = NULL;
}

/* name_of(model, i): output i's name, for the n outputs. */
bool run_output_dir_open(OutputDir *d, const char *path, int n, const char *(*name_of)(void *, int), void *model) {
  *d = (OutputDir){.path = path, .fd = -1};
  if (mkdir(path, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "dlcc: error: cannot create '%s': %s\n", path, strerror(errno));
    return false;
  }
  if ((d->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    fprintf(stderr, "dlcc: error: cannot open the folder '%s': %s\n", path, strerror(errno));
    return false;
  }
  d->files = calloc((size_t)n + 1, sizeof *d->files);
  if (!d->files) {
    fputs("dlcc: out of memory\n", stderr);
    run_output_dir_close(d);
    return false;
  }
  for (int i = 0; i < n; i++) ir_name_file(name_of(model, i), &d->files[i]);
  if (!ir_names_unique(d->files, n, '~', IR_FILE_STEM_MAX, true)) {
    fputs("dlcc: out of memory\n", stderr);
    run_output_dir_close(d);
    return false;
  }
  for (int i = 0; i < n; i++) strcat(d->files[i].s, ".npy");
  return true;
}

bool run_write_output(const OutputDir *d, int i, const dlc_tensor_info *info, const void *data, size_t nbytes) {
  const char *file = d->files[i].s;
  char *path = NULL;
  if (asprintf(&path, "%s/%s", d->path, file) < 0) return false;
  RtTensor rt = {.dtype = (RtDType)info->dtype, .rank = info->rank, .data = (void *)data, .nbytes = nbytes};
  memcpy(rt.dims, info->dims, sizeof rt.dims);
  char err[512];
  bool ok = rt_npy_write_at(d->fd, file, path, &rt, err, sizeof err) == 0;
  if (!ok) {
    fprintf(stderr, "dlcc: error: %s\n", err);
  } else if (strlen(file) != strlen(info->name) + 4 || strncmp(file, info->name, strlen(info->name)) != 0) {
    fputs("dlcc: output '", stderr);
    ir_put_comment_text(stderr, info->name);
    fprintf(stderr, "' written to %s\n", path);
  }
  free(path);
  return ok;
}

/* --profile=N: the table of the N slowest steps, then the sum over all
 * of them and what the cost report says of the whole. */
static int by_time(const void *a, const void *b) {
  const dlc_step_time *x = *(const dlc_step_time *const *)a, *y = *(const dlc_step_time *const *)b;
  return x->us < y->us ? 1 : x->us > y->us ? -1 : x < y ? -1 : x > y;
}

void run_print_profile(const char *backend, dlc_step_time *steps, int n, int top) {
  const dlc_step_time **order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
  if (!order) {
    fputs("dlcc: error: profile: out of memory\n", stderr);
    return;
  }
  double total = 0, flops = 0, bytes = 0;
  for (int i = 0; i < n; i++) {
    order[i] = &steps[i];
    total += steps[i].us, flops += steps[i].flops, bytes += steps[i].bytes;
  }
  qsort(order, (size_t)n, sizeof *order, by_time);
  fprintf(stderr, "dlcc: profile: %d steps on %s, %.1f us in all (%s), the %d slowest:\n", n, backend, total,
          strcmp(backend, "cuda") ? "host time" : "GPU time, launched one by one", top < n ? top : n);
  fprintf(stderr, "  %5s %10s %6s %9s %8s %8s  %s\n", "step", "us", "share", "GFLOP", "TFLOP/s", "GB/s", "label");
  for (int k = 0; k < n && k < top; k++) {
    const dlc_step_time *s = order[k];
    double sec = s->us * 1e-6;
    char cost[40] = "        -        -        -";
    if (s->flops > 0 || s->bytes > 0)
      snprintf(cost, sizeof cost, "%9.3f %8.1f %8.1f", s->flops * 1e-9, sec > 0 ? s->flops * 1e-12 / sec : 0.0,
               sec > 0 ? s->bytes * 1e-9 / sec : 0.0);
    fprintf(stderr, "  %5d %10.1f %5.1f%% %s  %.110s\n", (int)(s - steps), s->us,
            total > 0 ? 100.0 * s->us / total : 0.0, cost, s->label);
  }
  if (total > 0 && (flops > 0 || bytes > 0))
    fprintf(stderr, "  all   %10.1f        %9.3f %8.1f %8.1f\n", total, flops * 1e-9, flops * 1e-6 / total,
            bytes * 1e-3 / total);
  else if (total > 0)
    fprintf(stderr, "  all   %10.1f  (a model.so has no cost report: dlcc run MODEL.dl --profile has)\n", total);
  free(order);
}

/* A model.so's input as the compiler API describes one. */
static void library_info(const DlrtTensorInfo *t, int64_t bound, dlc_tensor_info *out) {
  memset(out, 0, sizeof *out);
  out->name = t->name;
  out->dtype = (dlc_dtype)t->dtype;
  out->rank = t->rank;
  memcpy(out->dims, t->dims, sizeof out->dims);
  out->nbytes = t->nbytes;
  out->index_bound = bound;
  out->run_time_axis = t->run_time_axis;
}

static const char *library_output_name(void *m, int i) {
  DlrtTensorInfo ti;
  dlrt_output_info(m, i, &ti);
  return ti.name;
}

/* `dlcc run model.so`: the same inputs, output and messages as for the
 * model's .dl, through libdlcrt alone. */
static int run_library(RunOptions *o) {
  if (o->api.n_defines || o->api.model) {
    fputs("dlcc: error: -D and --model change how a model compiles; a .so is compiled already\n", stderr);
    return 1;
  }
  if (o->api.grad) {
    fprintf(stderr, "dlcc: error: %s is compiled already: --grad needs the model's .dl, .ir or .onnx\n",
            o->model_path);
    return 1;
  }
  if (o->quant.int8) {
    fprintf(stderr, "dlcc: error: %s is compiled already: quantize it when you build it (dlcc MODEL "
                    "--quantize=int8 --calibrate=DIR -o %s)\n", o->model_path, o->model_path);
    return 1;
  }
  if (o->backend && strcmp(o->backend, "ref") == 0) {
    fprintf(stderr, "dlcc: error: %s: the reference interpreter needs the model's .dl or .ir; "
                    "a .so runs on auto, cuda or emu\n", o->model_path);
    return 1;
  }
  /* dlopen searches the library path for a name without a slash. */
  char path[4096];
  snprintf(path, sizeof path, "%s%s", strchr(o->model_path, '/') ? "" : "./", o->model_path);
  DlrtModel *m;
  if (dlrt_open_file(path, o->backend, &m) != DLRT_OK) {
    fprintf(stderr, "dlcc: error: %s\n", dlrt_error(m));
    dlrt_close(m);
    return 1;
  }
  if (!o->backend || strcmp(o->backend, "auto") == 0) fprintf(stderr, "dlcc: running on %s\n", dlrt_backend(m));
  /* The library is loaded already; this only finds its other exports. */
  void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  const char *(*weights_path)(void) = so ? (const char *(*)(void))dlsym(so, CG_AOT_WEIGHTS_PATH_SYMBOL) : NULL;
  int64_t (*index_bound)(int) = so ? (int64_t(*)(int))dlsym(so, CG_AOT_INDEX_BOUND_SYMBOL) : NULL;
  int rc = 1;
  OutputDir out = {.fd = -1};
  const char *w = o->weights ? o->weights : weights_path ? weights_path() : NULL;
  if (w && dlrt_load_weights(m, w) != DLRT_OK) {
    fprintf(stderr, "dlcc: error: %s\n", dlrt_error(m));
    goto done;
  }
  for (int i = 0; i < o->n_inputs; i++)
    if (dlrt_find_input(m, o->inputs[i].name) < 0) {
      fprintf(stderr, "dlcc: error: --input %s: the model has no input '%s'\n", o->inputs[i].path,
              o->inputs[i].name);
      goto done;
    }
  for (int i = 0; i < dlrt_num_inputs(m); i++) {
    DlrtTensorInfo ti;
    dlc_tensor_info info;
    dlrt_input_info(m, i, &ti);
    library_info(&ti, index_bound ? index_bound(i) : 0, &info);
    const InputArg *given = NULL;
    for (int k = 0; k < o->n_inputs; k++)
      if (strcmp(o->inputs[k].name, info.name) == 0) given = &o->inputs[k];
    bool ok;
    if (given) {
      const RtTensor *rt;
      ok = load_input(given, &info, &rt);
      if (ok && dlrt_set_input(m, i, rt->data, rt->nbytes) != DLRT_OK) {
        fprintf(stderr, "dlcc: error: %s\n", dlrt_error(m));
        ok = false;
      }
    } else {
      Tensor t = {0};
      ok = run_random_input(&info, o->seed, &t);
      if (ok && dlrt_set_input(m, i, t.data, info.nbytes) != DLRT_OK) {
        fprintf(stderr, "dlcc: error: %s\n", dlrt_error(m));
        ok = false;
      }
      ir_tensor_free(&t);
    }
    if (!ok) goto done;
  }
  if ((o->api.no_graphs && dlrt_set_graphs(m, 0) != DLRT_OK) || dlrt_run(m) != DLRT_OK) {
    fprintf(stderr, "dlcc: error: %s\n", dlrt_error(m));
    goto done;
  }
  if (o->verbose) fprintf(stderr, "dlcc: engine: %s\n", dlrt_engine_report(m));
  if (o->profile) {
    int n = dlrt_num_steps(m);
    double *us = malloc((size_t)(n > 0 ? n : 1) * sizeof *us);
    dlc_step_time *st = calloc((size_t)(n > 0 ? n : 1), sizeof *st);
    bool ok = us && st && dlrt_profile(m, us, n) == DLRT_OK;
    if (ok) {
      for (int i = 0; i < n; i++) st[i] = (dlc_step_time){.label = dlrt_step_label(m, i), .us = us[i]};
      run_print_profile(dlrt_backend(m), st, n, o->profile);
    } else {
      fprintf(stderr, "dlcc: error: %s\n", us && st ? dlrt_error(m) : "out of memory");
    }
    free(us), free(st);
    if (!ok) goto done;
  }
  int n_out = dlrt_num_outputs(m);
  if (o->output_dir && !run_output_dir_open(&out, o->output_dir, n_out, library_output_name, m)) goto done;
  rc = 0;
  for (int i = 0; i < n_out && rc == 0; i++) {
    DlrtTensorInfo ti;
    dlc_tensor_info info;
    if (dlrt_output_shape(m, i, &ti) != DLRT_OK) {
      fprintf(stderr, "dlcc: error: %s\n", dlrt_error(m));
      rc = 1;
      break;
    }
    library_info(&ti, 0, &info);
    void *data = malloc(info.nbytes ? info.nbytes : 1);
    if (!data || dlrt_get_output(m, i, data, info.nbytes) != DLRT_OK) {
      fprintf(stderr, "dlcc: error: %s\n", data ? dlrt_error(m) : "out of memory");
      rc = 1;
    } else {
      run_print_summary(&info, data);
      if (o->output_dir && !run_write_output(&out, i, &info, data, info.nbytes)) rc = 1;
    }
    free(data);
  }
done:
  run_output_dir_close(&out);
  if (so) dlclose(so);
  dlrt_close(m);
  return rc;
}

/* --bench=N: wall time of N more dlc_run calls, after the first has
 * compiled, loaded and warmed everything up. */
static bool bench_runs(dlc_model *m, int n) {
  double total = 0, best = INFINITY;
  for (int i = 0; i < n; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (dlc_run(m) != DLC_OK) {
      fputs(dlc_error(m), stderr);
      return false;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    total += ms;
    if (ms < best) best = ms;
  }
  fprintf(stderr, "dlcc: bench: %d runs on %s: mean %.3f ms, min %.3f ms\n", n, dlc_backend(m), total / n, best);
  return true;
}

/* --bench=N, then N batches streamed through dlc_run_batches (their
 * inputs zeros: only the time is of interest), copies overlapped. */
static int feed_zeros(void *user, long batch, void *const *inputs) { return batch < *(const int *)user ? 0 : 1; }
static int drain_nothing(void *user, long batch, const void *const *outputs) { return 0; }

static bool bench_batches(dlc_model *m, int n) {
  if (!strcmp(dlc_backend(m), "ref")) return true;
  for (int i = 0; i < dlc_num_outputs(m); i++) {
    dlc_tensor_info info;
    if (dlc_output_info(m, i, &info) == DLC_OK && info.run_time_axis >= 0) {
      fprintf(stderr, "dlcc: bench: no batches streamed: output '%s' has a length known only at run time\n",
              info.name);
      return true;
    }
  }
  struct timespec t0, t1;
  long done = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (dlc_run_batches(m, feed_zeros, drain_nothing, &n, &done) != DLC_OK) {
    fputs(dlc_error(m), stderr);
    return false;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  fprintf(stderr, "dlcc: bench: %ld batches streamed on %s (dlc_run_batches): %.3f ms a batch\n", done,
          dlc_backend(m), ms / (double)(done ? done : 1));
  return true;
}

static const char *model_output_name(void *m, int i) {
  dlc_tensor_info info;
  dlc_output_info(m, i, &info);
  return info.name;
}

/* --tensor-parallel: what it does not combine with, or NULL. */
static const char *tp_refusal(const RunOptions *o) {
  if (has_suffix(o->model_path, ".so")) return "a model.so (compile the model: dlcc run MODEL.dl)";
  if (o->bench) return "--bench";
  if (o->api.grad) return "--grad (dlcc train --tensor-parallel trains)";
  return NULL;
}

static int run_model(RunOptions *o, DistComm *comm) {
  if (!run_read_inputs(o)) return 1;
  if (has_suffix(o->model_path, ".so")) return run_library(o);
  dlc_model *m;
  if (dlc_compile_file(o->model_path, &o->api, &m) != DLC_OK) {
    fputs(dlc_error(m), stderr);
    dlc_free(m);
    return 1;
  }
  bool quiet = o->dist && o->dist->rank; /* rank 0 prints and writes */
  if (!quiet) fputs(dlc_error(m), stderr); /* warnings */
  if (!quiet && (!o->backend || strcmp(o->backend, "auto") == 0))
    fprintf(stderr, "dlcc: running on %s\n", dlc_backend(m));
  for (int i = 0; !quiet && i < dlc_num_tensor_notes(m); i++)
    fprintf(stderr, "dlcc: tensor parallel: %s\n", dlc_tensor_note(m, i));
  int rc = 1;
  OutputDir out = {.fd = -1};
  if (o->tp > 1 && dlc_set_comm(m, dist_comm, comm) != DLC_OK) {
    fputs(dlc_error(m), stderr);
    goto done;
  }
  /* An .onnx model brings its own weights. */
  bool keep = (!o->weights && !o->init_random && dlc_weights_bound(m)) || o->api.weights;
  if (!keep && (o->weights ? dlc_load_weights(m, o->weights) : dlc_init_weights(m, o->seed)) != DLC_OK) {
    fputs(dlc_error(m), stderr);
    goto done;
  }
  for (int i = 0; i < o->n_inputs; i++)
    if (dlc_input_index(m, o->inputs[i].name) < 0) {
      fprintf(stderr, "dlcc: error: --input %s=%s: the model has no input '%s'; its inputs:",
              o->inputs[i].name, o->inputs[i].path, o->inputs[i].name);
      for (int k = 0; k < dlc_num_inputs(m); k++) {
        dlc_tensor_info info;
        dlc_input_info(m, k, &info);
        fprintf(stderr, "%s %s", k ? "," : "", info.name);
      }
      fputc('\n', stderr);
      goto done;
    }
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info info;
    dlc_input_info(m, i, &info);
    const InputArg *given = NULL;
    for (int k = 0; k < o->n_inputs; k++)
      if (strcmp(o->inputs[k].name, info.name) == 0) given = &o->inputs[k];
    /* The readers print their own message; dlc_set_input leaves one on m. */
    bool read = true, ok = false;
    if (given) {
      const RtTensor *rt;
      read = load_input(given, &info, &rt);
      ok = read && dlc_set_input(m, info.name, rt->data, rt->nbytes) == DLC_OK;
    } else {
      Tensor t = {0};
      read = run_random_input(&info, o->seed, &t);
      ok = read && dlc_set_input(m, info.name, t.data, info.nbytes) == DLC_OK;
      ir_tensor_free(&t);
    }
    if (!ok) {
      if (read) fputs(dlc_error(m), stderr);
      goto done;
    }
  }
  if (dlc_run(m) != DLC_OK) {
    fputs(dlc_error(m), stderr);
    goto done;
  }
  if (o->bench && (!bench_runs(m, o->bench) || !bench_batches(m, o->bench))) goto done;
  if (o->verbose) fprintf(stderr, "dlcc: engine: %s\n", dlc_engine_report(m));
  if (o->profile && !quiet) {
    int n = dlc_num_steps(m);
    dlc_step_time *st = calloc((size_t)(n > 0 ? n : 1), sizeof *st);
    if (!st || dlc_profile(m, st, n) != DLC_OK) {
      fputs(st ? dlc_error(m) : "dlcc: error: out of memory\n", stderr);
      free(st);
      goto done;
    }
    run_print_profile(dlc_backend(m), st, n, o->profile);
    free(st);
  }
  int n_out = quiet ? 0 : dlc_num_outputs(m);
  if (o->output_dir && !run_output_dir_open(&out, o->output_dir, n_out, model_output_name, m)) goto done;
  rc = 0;
  for (int i = 0; i < n_out; i++) {
    dlc_tensor_info info;
    const void *data;
    size_t nbytes;
    if (dlc_get_output(m, i, &data, &nbytes) != DLC_OK || dlc_output_shape(m, i, &info) != DLC_OK) {
      fputs(dlc_error(m), stderr);
      rc = 1;
      break;
    }
    run_print_summary(&info, data);
    if (o->output_dir && !run_write_output(&out, i, &info, data, nbytes)) rc = 1;
  }
done:
  run_output_dir_close(&out);
  dlc_free(m);
  return rc;
}

/* --tensor-parallel=T: this process as one of the launch's T ranks. */
static int run_parallel(RunOptions *o) {
  const char *no = tp_refusal(o);
  if (no) {
    fprintf(stderr, "dlcc: error: --tensor-parallel does not combine with %s\n", no);
    return 1;
  }
  Dist dist;
  if (!dist_init(&dist, 120)) {
    fprintf(stderr, "dlcc: error: %s\n", dist.err);
    return 1;
  }
  if (dist.size != o->tp && dist.size % o->tp == 0) {
    /* D groups of T: data parallel over the batch, as D pipelines of
     * one stage (run_pipe.c splits the batch and gathers the outputs) */
    o->pipeline = 1;
    return run_pipeline_in(o, &dist);
  }
  if (dist.size != o->tp) {
    char msg[200];
    if (dist.size < o->tp)
      snprintf(msg, sizeof msg, "--tensor-parallel=%d needs %d ranks, and this launch has %d (mpirun -np %d)", o->tp,
               o->tp, dist.size, o->tp);
    else
      snprintf(msg, sizeof msg, "--tensor-parallel=%d does not divide the %d ranks of the launch (mpirun -np %d, or a "
               "multiple of %d for data parallel over groups of %d)", o->tp, dist.size, o->tp, o->tp, o->tp);
    if (!dist.rank) fprintf(stderr, "dlcc: error: %s\n", msg);
    dist_end(&dist, false, msg);
    return 1;
  }
#ifdef HAVE_NCCL
  nccl_pick_device();
#endif
  o->dist = &dist;
  o->api.tensor_parallel = o->tp;
  o->api.tensor_rank = dist.rank;
  DistComm comm = {&dist, &dist, NULL, NULL};
  int rc = run_model(o, &comm);
  dist_comm_free(&comm);
  dist_end(&dist, rc == 0, NULL);
  return rc;
}

int driver_run(int argc, char **argv) {
  RunOptions *o = calloc(1, sizeof *o);
  if (!o) {
    fputs("dlcc: error: out of memory\n", stderr);
    return 1;
  }
  int rc = parse_run_args(argc, argv, o);
  if (rc == 0 && (o->pipeline || o->micro || o->dist_timeout)) rc = run_pipeline(o);
  else if (rc == 0 && o->tp > 1) rc = run_parallel(o);
  else if (rc == 0) rc = run_model(o, NULL);
  else rc = rc == 2 ? 0 : 1;
  for (int i = 0; i < o->n_inputs; i++) {
    free((char *)o->inputs[i].name);
    if (o->inputs[i].read) rt_tensor_free(&o->inputs[i].data);
  }
  for (int i = 0; i < o->api.n_defines; i++) free((char *)o->defines[i].name);
  free(o);
  return rc;
}
