/* The dlcc command line: reads a model (.dl source or .ir text), builds
 * and checks its graph, and writes what was asked for.  The whole
 * pipeline is in compile(); everything else is option handling. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/calibrate.h"
#include "api/weights.h"
#include "codegen/codegen.h"
#include "driver/driver.h"
#include "frontend/ast.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "passes/optim.h"
#include "passes/pass.h"
#include "passes/tensor_par.h"

typedef enum { EMIT_NONE, EMIT_AST, EMIT_IR, EMIT_DOT, EMIT_CUDA, EMIT_PLAN } Emit;

typedef struct Options {
  const char *input;
  const char *output; /* -o; NULL: stdout */
  Emit emit;
  const char *model;
  int n_defines;
  Define defines[64];
  /* -o FILE.so: the model library (codegen/aot.c) */
  const char *weights;
  uint64_t seed;
  bool external_weights, keep_temps;
  bool time_stages;
  bool grad; /* --grad: the training step's gradients (passes/autodiff.c) */
  bool eval_mode; /* --eval: a training-mode export as eval() (passes/eval_mode.c) */
  bool optimize; /* --optimizer=NAME: and the updates (passes/optim.c) */
  bool data_parallel; /* --data-parallel: each gradient's allreduce_mean */
  int sync_bn;        /* --sync-bn=K: batchnorm's statistics over K ranks */
  int bucket_mb;      /* --bucket-mb=M: gradients' all-reduces in buckets of M MiB */
  int tp, tp_rank;    /* --tensor-parallel=T[:R]: rank R's graph of T */
  OptimSpec optim;
  DriverLoss loss;    /* --loss=NAME and its flags (passes/loss.c) */
  LossSpec loss_spec; /* what they ask for, when loss.name is set */
  int n_archs;
  const char *archs[16];
  PassOptions passes; /* -O, --passes, --print-after, ... */
  DriverQuant quant;  /* --quantize=int8, --calibrate=DIR, ... */
  bool quant_report;  /* dlcc quant-report */
  bool check_weights; /* dlcc check-weights, or --weights alone */
  int dot_depth;      /* --dot-depth=N; -1: every scope a cluster */
  int loop_bound;     /* --loop-bound=N: an ONNX Loop's steps where the file gives no bound */
  const char *test_dir; /* its --test=DIR */
  int test_samples;     /* its --test-samples=N */
} Options;

static const char usage[] =
    "usage: dlcc [options] FILE\n"
    "       dlcc run FILE [options]     compile and run once (dlcc run --help)\n"
    "       dlcc train FILE --data DIR --batch=N   train its parameters (dlcc train --help)\n"
    "       dlcc memplan FILE.csv       solve an allocation problem with the memory planner\n"
    "       dlcc check-weights FILE --weights=W\n"
    "                                   check a safetensors file against the model: every\n"
    "                                   missing, unexpected or mis-shaped tensor, at the\n"
    "                                   line that declares its parameter\n"
    "       dlcc quant-report FILE --calibrate=DIR [--test=DIR] [--test-samples=N]\n"
    "                                   int8 against f32: per-layer and per-output errors,\n"
    "                                   top-1 agreement (docs/quantization.md)\n"
    "\n"
    "Compiles a network written in the dlcc language (FILE.dl) or in dlcc's IR\n"
    "text (FILE.ir), or an ONNX model (FILE.onnx, weights included).  Without\n"
    "--emit or -o it checks the model and prints a one-line summary.\n"
    "\n"
    "options:\n"
    "  --emit=ir          print the graph IR (docs/ir.md); it reads back with dlcc FILE.ir\n"
    "  --emit=dot         print the graph in Graphviz DOT (dlcc m.dl --emit=dot | dot -Tsvg):\n"
    "                     a cluster per `as` scope, weights inside the op that uses\n"
    "                     them, after fusion a node per kernel with its launch and\n"
    "                     bytes (-O0: a node per op)\n"
    "  --dot-depth=N      draw scopes nested deeper than N as one node each\n"
    "  --emit=cuda        print the generated CUDA C of every kernel\n"
    "  --emit=plan        print the launch plan: buffers, kernels, cuBLAS calls, offsets,\n"
    "                     each step's FLOPs and minimum bytes (docs/cost.md)\n"
    "  --emit=ast         print the syntax tree (for debugging the frontend)\n"
    "  -o FILE            write the output to FILE instead of standard output\n"
    "  -D NAME=VALUE      set an integer constant: overrides 'let NAME' or binds a\n"
    "                     dimension the model leaves free (an ONNX input's too, and\n"
    "                     -D INPUT:AXIS=VALUE any free dim of an ONNX input); naming\n"
    "                     a one-element integer or bool ONNX input, fixes its value\n"
    "                     (use_cache_branch=1), each run checking it\n"
    "  --model=NAME       which model of the file to compile (default: the last)\n"
    "  --loop-bound=N     unroll an ONNX Loop that has no bound in the file (a while\n"
    "                     loop) to N steps, at most 1024; a run needing more fails\n"
    "\n"
    "  -O0, -O1, -O2      graph optimization: none, cheap cleanups, everything (default)\n"
    "  --passes=a,b,c     run exactly these passes instead (listed below)\n"
    "  --print-before=P   print the IR before each run of pass P (to stderr)\n"
    "  --print-after=P    print the IR after each run of pass P\n"
    "  --print-after-all  print the IR after every pass\n"
    "  --dump-dir=D       write the IR after every pass to D/NNN_PASS.ir\n"
    "  --time-passes      a table of the time each pass took (to stderr)\n"
    "  --time-stages      a table of the time each stage took: parse, lower, passes,\n"
    "                     codegen, and for -o FILE.so nvrtc and cc (to stderr)\n"
    "  --verify-each      check the graph after every pass\n"
    "  --stats            what the passes did, ops before and after (to stderr); with\n"
    "                     --emit=plan also the plan's FLOPs, bytes and FLOP per byte\n"
    "  --unroll=N         unroll loops of at most N constant trips (default 8)\n"
    "  --no-unroll        unroll no loop at all\n"
    "  --no-vectorize     no float4 loads and stores in elementwise kernels\n"
    "  --tf32             f32 convolutions, attention and matrix products on tensor\n"
    "                     cores, operands rounded to tf32 (PyTorch's allow_tf32)\n"
    "                     (10 fraction bits; docs/tensorcores.md); default: exact f32\n"
    "  --no-tensor-cores  f16, bf16 and int8 convolutions on the FMA kernel too\n"
    "  --no-wgmma         tensor-core kernels on mma.sync alone, also on sm_90a\n"
    "  --no-nhwc          convolutions stay NCHW: no channels-last regions for the\n"
    "                     tensor cores (docs/passes.md, nhwc)\n"
    "  --no-gemm-batch    linears of one input as one GEMM each, not one batched GEMM\n"
    "  --no-split-keys    attention's keys in one block a query block, even where few\n"
    "                     blocks fill the GPU (no flash-decoding split)\n"    "  --no-split-k       a convolution's tile sums all of K in one block, even where\n"
    "                     its tiles are fewer than the SMs (no split-K)\n"
    "  --no-persistent-rnn\n"
    "                     recurrent layers as a kernel per timestep, not one kernel\n"
    "                     for the whole sequence (docs/kernels.md)\n"
    "  --unroll-rnn       a training step's lstm or gru unrolled over time, not one\n"
    "                     backward kernel per layer (docs/training.md)\n"
    "  --no-update-in-place\n"
    "                     a training step's updates into outputs copied over the\n"
    "                     params after it, not written over them (docs/training.md)\n"
    "  --no-merge-launches\n"
    "                     every kernel its own launch, even beside an independent\n"
    "                     one it could share a launch with (docs/kernels.md); so\n"
    "                     at -O0\n"
    "  --no-chain-launches\n"
    "                     no kernel joins the launch before it behind a grid\n"
    "                     barrier where it reads what that launch wrote (a\n"
    "                     batchnorm's statistics and its map; docs/kernels.md)\n"
    "  --precision=P      f32 (default), f16 or bf16: activations and weights in P,\n"
    "                     sensitive ops in f32, f32 accumulation (docs/passes.md)\n"
    "  --grad             the gradients of a training step: output 0 must be the loss\n"
    "                     (one value); adds an output NAME.grad per trainable parameter\n"
    "                     and the training-mode state updates (docs/training.md)\n"
    "  --eval             a model exported in training mode (torch.onnx's TRAINING)\n"
    "                     as PyTorch's eval(): dropout off, batchnorm by its running\n"
    "                     statistics (docs/training.md)\n"
    "  --optimizer=NAME   with --grad: the whole step, sgd, adam, adamw, rmsprop, adagrad,\n"
    "                     adamax, adadelta, radam or nadam with PyTorch's defaults,\n"
    "                     updating every parameter;\n"
    "                     the learning rate is the input dlcc.lr\n"
    "  --data-parallel    with --optimizer: each gradient averaged over the ranks\n"
    "                     before the update, as under mpirun (docs/parallel.md)\n"
    "  --bucket-mb=M      with --data-parallel: gradients share all-reduces in buckets\n"
    "                     of about M MiB (PyTorch DDP's bucket_cap_mb)\n"
    "  --sync-bn=K        with --grad: training-mode batchnorm's statistics over the\n"
    "                     global batch of K ranks (docs/parallel.md)\n"
    "  --tensor-parallel=T[:R]  rank R's (default 0) share of a Megatron-style split\n"
    "                     over T ranks, what was split and why not on stderr\n"
    "  --recompute[=SCOPE,...]  with --grad: activation checkpointing, the forward of\n"
    "                     each residual block (or of the `as` scopes named) computed\n"
    "                     again in the backward instead of kept (docs/training.md)\n";

/* After driver_quant_usage. */
static const char usage_library[] =
    "\n"
    "  -o FILE.so         build the model as a shared library with a C ABI (libdlcrt\n"
    "                     runs it: dlcc run FILE.so, or a host program with FILE.h)\n"
    "  --weights=FILE     its weights from a safetensors file (PyTorch names); without\n"
    "                     it they are random (see --seed); with --quantize=int8 also\n"
    "                     the weights calibration runs with; without -o or --emit:\n"
    "                     only checked against the model (dlcc check-weights)\n"
    "  --seed=S           seed for random weights, in the library and in calibration\n"
    "                     (default 0, as dlcc run)\n"
    "  --external-weights keep the weights out of FILE.so: it reads the --weights file\n"
    "                     (or FILE.safetensors, written beside it) at open; the\n"
    "                     environment variable DLCC_WEIGHTS names another\n"
    "  --arch=sm_80,sm_90 precompile the kernels for these GPUs, cubin and PTX each\n"
    "                     (default sm_90a: the H100/H200's, with wgmma, and portable\n"
    "                     compute_90 PTX; none: only the CUDA source)\n"
    "  --save-temps       keep the generated C and its blobs\n"
    "  --onnx-support     list the ONNX ops that import, with their limits\n"
    "  --help             show this text\n"
    "  --version          show the version\n";

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool driver_is_onnx(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

bool driver_parse_define(const char *text, Define *d) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) return false;
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (*end || end == eq + 1 || errno == ERANGE) return false;
  d->name = strndup(text, (size_t)(eq - text));
  d->value = v;
  return d->name != NULL;
}

bool driver_take_define(int argc, char **argv, int *i, Define *defs, int *n, int cap) {
  const char *a = argv[*i], *def = a[2] ? a + 2 : (++*i < argc ? argv[*i] : NULL);
  if (!def || *n >= cap || !driver_parse_define(def, &defs[*n])) {
    fprintf(stderr, "dlcc: error: -D expects NAME=INTEGER, got '%s'%s\n", def ? def : "",
            def && *n >= cap ? " (too many -D)" : "");
    return false;
  }
  ++*n;
  return true;
}

/* 1 when arg is a pass manager flag (stored in po), 0 when it is not, -1
 * after printing why it is malformed.  Names of passes are checked when
 * the pipeline starts, with a suggestion. */
int driver_pass_option(const char *arg, PassOptions *po) {
  static const struct {
    const char *flag;
    size_t off;
  } strs[] = {
      {"--passes=", offsetof(PassOptions, passes)},
      {"--print-before=", offsetof(PassOptions, print_before)},
      {"--print-after=", offsetof(PassOptions, print_after)},
      {"--dump-dir=", offsetof(PassOptions, dump_dir)},
  };
  static const struct {
    const char *flag;
    size_t off;
  } bools[] = {
      {"--print-after-all", offsetof(PassOptions, print_after_all)},
      {"--time-passes", offsetof(PassOptions, time_passes)},
      {"--verify-each", offsetof(PassOptions, verify_each)},
      {"--stats", offsetof(PassOptions, stats)},
      {"--no-unroll", offsetof(PassOptions, no_unroll)},
      {"--no-vectorize", offsetof(PassOptions, no_vectorize)},
      {"--tf32", offsetof(PassOptions, tf32)},
      {"--no-tensor-cores", offsetof(PassOptions, no_tensor_cores)},
      {"--no-wgmma", offsetof(PassOptions, no_wgmma)},
      {"--no-nhwc", offsetof(PassOptions, no_nhwc)},
      {"--no-gemm-batch", offsetof(PassOptions, no_gemm_batch)},
      {"--no-split-keys", offsetof(PassOptions, no_split_keys)},
      {"--no-split-k", offsetof(PassOptions, no_split_k)},
      {"--no-persistent-rnn", offsetof(PassOptions, no_persistent_rnn)},
      {"--unroll-rnn", offsetof(PassOptions, unroll_rnn)},
      {"--no-update-in-place", offsetof(PassOptions, no_update_in_place)},
      {"--no-merge-launches", offsetof(PassOptions, no_merge_launches)},
      {"--no-chain-launches", offsetof(PassOptions, no_chain_launches)},
  };
  if (strncmp(arg, "--precision=", 12) == 0) {
    DType t;
    if (!ir_dtype_from_name(arg + 12, &t) || (t != TY_F32 && t != TY_F16 && t != TY_BF16)) {
      fprintf(stderr, "dlcc: error: --precision expects f32, f16 or bf16, got '%s'\n", arg + 12);
      return -1;
    }
    po->precision = t;
    return 1;
  }
  if (strcmp(arg, "--recompute") == 0 || strncmp(arg, "--recompute=", 12) == 0) {
    po->recompute = arg[11] ? arg + 12 : "";
    return 1;
  }
  if (strncmp(arg, "--unroll=", 9) == 0)
    return driver_int_value("--unroll", arg + 9, 1, 4096, "a trip count from 1 to 4096", &po->unroll) ? 1 : -1;
  if (arg[0] == '-' && arg[1] == 'O' && arg[2] && !arg[3]) {
    if (arg[2] < '0' || arg[2] > '2') {
      fprintf(stderr, "dlcc: error: unknown optimization level '%s' (expected -O0, -O1 or -O2)\n", arg);
      return -1;
    }
    po->opt_level = arg[2] - '0';
    return 1;
  }
  for (size_t i = 0; i < ARRAY_LEN(strs); i++) {
    size_t n = strlen(strs[i].flag);
    if (strncmp(arg, strs[i].flag, n) != 0) continue;
    if (!arg[n]) {
      fprintf(stderr, "dlcc: error: %.*s needs a value\n", (int)n - 1, strs[i].flag);
      return -1;
    }
    *(const char **)((char *)po + strs[i].off) = arg + n;
    return 1;
  }
  for (size_t i = 0; i < ARRAY_LEN(bools); i++)
    if (strcmp(arg, bools[i].flag) == 0) {
      *(bool *)((char *)po + bools[i].off) = true;
      return 1;
    }
  return 0;
}

CgOptions driver_cg_options(const PassOptions *po) {
  return (CgOptions){.unroll = po->unroll,
                     .no_unroll = po->no_unroll,
                     .no_vectorize = po->no_vectorize,
                     .tf32 = po->tf32,
                     .no_tensor_cores = po->no_tensor_cores,
                     .no_wgmma = po->no_wgmma,
                     .no_gemm_batch = po->no_gemm_batch,
                     .no_split_keys = po->no_split_keys,
                     .no_split_k = po->no_split_k,
                     .no_persistent_rnn = po->no_persistent_rnn,
                     .no_update_in_place = po->no_update_in_place,
                     /* -O0 keeps a launch per kernel, as a baseline to read */
                     .merge_launches = !po->no_merge_launches && po->opt_level > 0,
                     .no_chain_launches = po->no_chain_launches};
}

const char driver_quant_usage[] =
    "  --quantize=int8    convolutions, linear layers and matmuls with a weight in int8:\n"
    "                     per-channel weight scales, activation scales calibrated on\n"
    "                     --calibrate's samples (docs/quantization.md); none: off\n"
    "  --calibrate=DIR    sample inputs for calibration: DIR/*.npy for a model with one\n"
    "                     input, DIR/<input name>/*.npy for several (matched by name order)\n"
    "  --calib-method=M   how a range is chosen from what the samples showed: minmax,\n"
    "                     percentile[=P] (the default, P 99.99) or entropy (TensorRT's)\n"
    "  --calib-samples=N  calibrate on the first N samples by name (default: all)\n"
    "  --calib-backend=B  where calibration runs the f32 model: auto (default: cuda when\n"
    "                     a GPU answers, else ref), cuda, emu (the kernels on the CPU)\n"
    "                     or ref (the reference interpreter)\n";

int driver_quant_option(const char *arg, DriverQuant *q) {
  static const char *const bare[] = {"--quantize", "--calibrate", "--calib-method", "--calib-samples",
                                     "--calib-backend"};
  for (size_t i = 0; i < ARRAY_LEN(bare); i++)
    if (strcmp(arg, bare[i]) == 0) {
      fprintf(stderr, "dlcc: error: %s takes its value after '=': %s=%s\n", arg, arg,
              i == 0 ? "int8" : i == 1 ? "DIR" : i == 2 ? "METHOD" : i == 3 ? "N" : "BACKEND");
      return -1;
    }
  const char *v;
  if ((v = driver_eq_value(arg, "--quantize"))) {
    if (strcmp(v, "int8") != 0 && strcmp(v, "none") != 0) {
      fprintf(stderr, "dlcc: error: --quantize expects int8 or none, got '%s'\n", v);
      return -1;
    }
    q->int8 = strcmp(v, "int8") == 0;
    return 1;
  }
  bool calib = false;
  if ((v = driver_eq_value(arg, "--calibrate"))) {
    if (!*v) {
      fputs("dlcc: error: --calibrate needs a folder of sample inputs\n", stderr);
      return -1;
    }
    q->calibrate = v;
    calib = true;
  } else if ((v = driver_eq_value(arg, "--calib-method"))) {
    char err[256];
    if (!api_calib_parse_method(v, &q->parsed, err, sizeof err)) {
      fprintf(stderr, "dlcc: error: --calib-method: %s\n", err);
      return -1;
    }
    q->method = v;
    calib = true;
  } else if ((v = driver_eq_value(arg, "--calib-samples"))) {
    if (!driver_int_value("--calib-samples", v, 1, 1000000000, "a number of samples (1 or more)", &q->max_samples))
      return -1;
    calib = true;
  } else if ((v = driver_eq_value(arg, "--calib-backend"))) {
    char err[256];
    if (!api_calib_parse_backend(v, &q->on, err, sizeof err)) {
      fprintf(stderr, "dlcc: error: --calib-backend: %s\n", err);
      return -1;
    }
    q->backend = v;
    calib = true;
  }
  if (calib && !q->first_calib_flag) q->first_calib_flag = arg;
  return calib;
}

bool driver_quant_check(const DriverQuant *q, DType precision) {
  if (!q->int8) {
    if (q->first_calib_flag) {
      fprintf(stderr, "dlcc: error: %s is for --quantize=int8\n", q->first_calib_flag);
      return false;
    }
    return true;
  }
  if (!q->calibrate) {
    fputs("dlcc: error: --quantize=int8 needs --calibrate=DIR, a folder of sample inputs (.npy) "
          "to measure the activations' ranges on\n",
          stderr);
    return false;
  }
  if (precision != TY_F32) {
    fprintf(stderr, "dlcc: error: --quantize=int8 and --precision=%s do not combine: choose one\n",
            ir_dtype_name(precision));
    return false;
  }
  return true;
}

/* Returns 0 to go on, 1 on a usage error, 2 for --help/--version. */
static int parse_args(int argc, char **argv, Options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int pass_flag = driver_pass_option(a, &o->passes);
    if (pass_flag == 0) pass_flag = driver_quant_option(a, &o->quant);
    if (pass_flag == 0) pass_flag = driver_loss_option(a, &o->loss);
    if (pass_flag < 0) return 1;
    if (pass_flag > 0) continue;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage, stdout);
      fputs(driver_quant_usage, stdout);
      fputs(driver_loss_usage, stdout);
      fputs(usage_library, stdout);
      fputs("\npasses:\n", stdout);
      for (int k = 0; k < pass_count(); k++)
        printf("  %-18s %s\n", pass_at(k)->name, pass_at(k)->summary);
      return 2;
    } else if (strcmp(a, "--onnx-support") == 0) {
      fe_onnx_print_support(stdout);
      return 2;
    } else if (strcmp(a, "--version") == 0) {
      printf("dlcc %s\n", PACKAGE_VERSION);
      return 2;
    } else if (strncmp(a, "--emit=", 7) == 0) {
      const char *what = a + 7;
      if (strcmp(what, "ir") == 0) o->emit = EMIT_IR;
      else if (strcmp(what, "dot") == 0) o->emit = EMIT_DOT;
      else if (strcmp(what, "ast") == 0) o->emit = EMIT_AST;
      else if (strcmp(what, "cuda") == 0) o->emit = EMIT_CUDA;
      else if (strcmp(what, "plan") == 0) o->emit = EMIT_PLAN;
      else {
        fprintf(stderr, "dlcc: error: unknown --emit kind '%s' (expected ir, dot, cuda, plan or ast)\n", what);
        return 1;
      }
    } else if (strncmp(a, "--dot-depth=", 12) == 0) {
      if (!driver_int_value("--dot-depth", a + 12, 0, 1000, "a depth from 0 to 1000", &o->dot_depth)) return 1;
    } else if (strcmp(a, "-o") == 0) {
      if (++i == argc) {
        fputs("dlcc: error: -o needs a file name\n", stderr);
        return 1;
      }
      o->output = argv[i];
    } else if (strncmp(a, "-D", 2) == 0) {
      if (!driver_take_define(argc, argv, &i, o->defines, &o->n_defines, (int)ARRAY_LEN(o->defines))) return 1;
    } else if (strncmp(a, "--model=", 8) == 0) {
      o->model = a + 8;
    } else if (strncmp(a, "--loop-bound=", 13) == 0) {
      if (!driver_loop_bound(a + 13, &o->loop_bound)) return 1;
    } else if (strncmp(a, "--weights=", 10) == 0 || strcmp(a, "--weights") == 0) {
      o->weights = a[9] ? a + 10 : (++i < argc ? argv[i] : NULL);
      if (!o->weights || !*o->weights) {
        fputs("dlcc: error: --weights needs a file name\n", stderr);
        return 1;
      }
    } else if (strncmp(a, "--seed=", 7) == 0) {
      char *end;
      errno = 0;
      o->seed = strtoull(a + 7, &end, 10);
      if (*end || end == a + 7 || errno || a[7] == '-') {
        fprintf(stderr, "dlcc: error: --seed expects a non-negative integer, got '%s'\n", a + 7);
        return 1;
      }
    } else if (o->quant_report && strncmp(a, "--test=", 7) == 0 && a[7]) {
      o->test_dir = a + 7;
    } else if (o->quant_report && strncmp(a, "--test-samples=", 15) == 0) {
      if (!driver_int_value("--test-samples", a + 15, 1, 1000000000, "a number of samples (1 or more)", &o->test_samples))
        return 1;
    } else if (strcmp(a, "--time-stages") == 0) {
      o->time_stages = true;
    } else if (strcmp(a, "--grad") == 0) {
      o->grad = true;
    } else if (strcmp(a, "--eval") == 0) {
      o->eval_mode = true;
    } else if (strncmp(a, "--optimizer=", 12) == 0) {
      OptimKind kind;
      if (!optim_from_name(a + 12, &kind)) {
        fprintf(stderr, "dlcc: error: unknown optimizer '%s' (expected %s)\n", a + 12, optim_names().s);
        return 1;
      }
      o->optimize = true;
      o->optim = optim_spec_default(kind);
    } else if (strcmp(a, "--data-parallel") == 0) {
      o->data_parallel = true;
    } else if (strncmp(a, "--bucket-mb=", 12) == 0) {
      if (!driver_int_value("--bucket-mb", a + 12, 0, 1 << 20, "a whole number of MiB", &o->bucket_mb)) return 1;
    } else if (strncmp(a, "--tensor-parallel=", 18) == 0) {
      char t[32];
      const char *colon = strchr(a + 18, ':');
      snprintf(t, sizeof t, "%.*s", colon ? (int)(colon - a - 18) : 31, a + 18);
      if (!driver_int_value("--tensor-parallel", t, 1, 1 << 20, "a number of ranks (1 or more)", &o->tp) ||
          (colon && !driver_int_value("--tensor-parallel", colon + 1, 0, o->tp - 1, "a rank below T", &o->tp_rank)))
        return 1;
    } else if (strncmp(a, "--sync-bn=", 10) == 0) {
      if (!driver_int_value("--sync-bn", a + 10, 1, 1 << 20, "a number of ranks (1 or more)", &o->sync_bn)) return 1;
    } else if (strcmp(a, "--external-weights") == 0) {
      o->external_weights = true;
    } else if (strcmp(a, "--save-temps") == 0) {
      o->keep_temps = true;
    } else if (strncmp(a, "--arch=", 7) == 0) {
      o->n_archs = 0;
      if (strcmp(a + 7, "none") != 0) {
        for (const char *p = a + 7;; p++) {
          size_t n = strcspn(p, ",");
          if (!n || o->n_archs == (int)ARRAY_LEN(o->archs)) {
            fprintf(stderr, "dlcc: error: --arch expects a list like sm_80,sm_90, got '%s'\n", a + 7);
            return 1;
          }
          if (!(o->archs[o->n_archs++] = strndup(p, n))) {
            fputs("dlcc: error: out of memory\n", stderr);
            return 1;
          }
          p += n;
          if (!*p) break;
        }
      }
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "dlcc: error: unknown option '%s' (see dlcc --help)\n", a);
      return 1;
    } else if (o->input) {
      fprintf(stderr, "dlcc: error: more than one input file ('%s' and '%s')\n", o->input, a);
      return 1;
    } else {
      o->input = a;
    }
  }
  if (!o->input) {
    fputs("dlcc: error: no input file (see dlcc --help)\n", stderr);
    return 1;
  }
  if (o->eval_mode && o->grad) {
    fputs("dlcc: error: --eval with --grad: a training step runs in training mode\n", stderr);
    return 1;
  }
  if (o->passes.recompute && !o->grad) {
    fputs("dlcc: error: --recompute needs --grad (a training step)\n", stderr);
    return 1;
  }
  if (o->optimize && !o->grad) {
    fputs("dlcc: error: --optimizer needs --grad (a training step)\n", stderr);
    return 1;
  }
  if (o->sync_bn && !o->grad) {
    fputs("dlcc: error: --sync-bn needs --grad (batchnorm in training mode)\n", stderr);
    return 1;
  }
  if (o->bucket_mb && !o->data_parallel) {
    fputs("dlcc: error: --bucket-mb needs --data-parallel (it groups the gradients' all-reduces)\n", stderr);
    return 1;
  }
  if (o->data_parallel && !o->optimize) {
    fputs("dlcc: error: --data-parallel needs --optimizer (the gradients are averaged before the update)\n", stderr);
    return 1;
  }
  return 0;
}

static void print_summary(FILE *f, const char *path, Graph *g) {
  int ops = 0, params = 0, inputs = 0;
  int64_t weights = 0;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op == OP_PARAM) {
      params++;
      weights += ir_type_numel(&n->out[0].type);
    } else if (n->op == OP_INPUT) {
      inputs++;
    } else if (n->op != OP_CONST) {
      ops++;
    }
  }
  fprintf(f, "%s: model %s: %d ops, %d params (%" PRId64 " weights), %d input%s, %d output%s\n", path,
          g->name, ops, params, weights, inputs, inputs == 1 ? "" : "s", g->n_outputs,
          g->n_outputs == 1 ? "" : "s");
}

/* The step where the most arena bytes are live and the largest buffers
 * live there, by their label in the plan (%N, the value's number): what
 * holds the peak. */
static void print_peak(FILE *f, const CgResult *cg) {
  int steps = 0;
  for (int k = 0; k < cg->n_buffers; k++) steps = cg->buffers[k].upper > steps ? cg->buffers[k].upper : steps;
  uint64_t *live = calloc((size_t)steps + 1, sizeof *live);
  int *top = calloc((size_t)cg->n_buffers + 1, sizeof *top);
  if (!live || !top) {
    free(live), free(top);
    return;
  }
  /* extents as the planner counts them (256-byte alignment); a buffer
   * that takes over another's bytes counts from the step after */
  for (int k = 0; k < cg->n_buffers; k++) {
    const CgBuffer *b = &cg->buffers[k];
    for (int s = b->lower + (b->inplace_of >= 0); s < b->upper; s++) live[s] += (b->nbytes + 255) / 256 * 256;
  }
  int peak = 0;
  for (int s = 1; s < steps; s++) peak = live[s] > live[peak] ? s : peak;
  int n = 0;
  for (int k = 0; k < cg->n_buffers; k++) {
    const CgBuffer *b = &cg->buffers[k];
    if (b->nbytes && b->lower + (b->inplace_of >= 0) <= peak && peak < b->upper) top[n++] = k;
  }
  /* largest first, by selection: a handful are printed */
  fprintf(f, "%10" PRIu64 " memplan: bytes live at the peak (step %d of %d), %d buffers; the largest:\n",
          steps ? live[peak] : 0, peak, steps, n);
  for (int shown = 0; shown < 5 && shown < n; shown++) {
    int best = shown;
    for (int j = shown + 1; j < n; j++)
      if (cg->buffers[top[j]].nbytes > cg->buffers[top[best]].nbytes) best = j;
    int t = top[shown];
    top[shown] = top[best], top[best] = t;
    const CgBuffer *b = &cg->buffers[top[shown]];
    fprintf(f, "%10" PRIu64 "   %s (live over steps %d..%d)\n", b->nbytes, b->what ? b->what : "?", b->lower,
            b->upper - 1);
  }
  free(live), free(top);
}

/* What codegen made of the optimized graph, after the passes' stats. */
static void print_plan_stats(FILE *f, const CgResult *cg) {
  const RtPlan *p = cg->plan;
  uint32_t launches = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) launches += p->steps[i].kind == RT_STEP_LAUNCH;
  fprintf(f, "%10u plan: kernels\n", p->n_kernels);
  fprintf(f, "%10u plan: kernel launches\n", launches);
  fprintf(f, "%10u plan: steps (launches, GEMMs, copies)\n", p->n_steps);
  fprintf(f, "%10u plan: init steps (once per change of the weights)\n", p->n_init_steps);
  fprintf(f, "%10" PRIu64 " plan: derived weight bytes\n", p->derived_bytes);
  fprintf(f, "%10" PRIu64 " plan: arena bytes\n", p->arena_bytes);
  /* the memory planner against no reuse and against the bound */
  double lb = cg->lower_bound ? (double)cg->lower_bound : 1;
  fprintf(f, "%10" PRIu64 " memplan: naive bytes (every buffer its own)\n", cg->naive_bytes);
  fprintf(f, "%10" PRIu64 " memplan: lower bound bytes (most live at one step)\n", cg->lower_bound);
  fprintf(f, "%10.3f memplan: arena / lower bound\n", (double)p->arena_bytes / lb);
  fprintf(f, "%10.3f memplan: naive / arena\n",
          p->arena_bytes ? (double)cg->naive_bytes / (double)p->arena_bytes : 1.0);
  print_peak(f, cg);
  fprintf(f, "%10d memplan: outputs written in place\n", cg->n_inplace);
  fprintf(f, "%10s memplan: heuristic %s\n", "", cg->memplan ? cg->memplan : "none");
  cg_print_cost_stats(f, cg, 5);
}

typedef struct Job {
  const Options *opt;
  FILE *out;
  TensorMap onnx_params; /* an .onnx file's weights */
  OnnxOwn onnx_own;      /* and its own values a weights file need not give */
} Job;

/* -o FILE.so: weights bound (or drawn) as dlcc run does, then aot.c. */
static void print_stages(FILE *f, const Ctx *c, double total) {
  fprintf(f, "stage                         seconds\n");
  for (int i = 0; i < c->n_stages; i++)
    fprintf(f, "  %-26s %9.4f\n", c->stages[i].name, c->stages[i].seconds);
  fprintf(f, "  %-26s %9.4f\n", "total", total);
}

static int build_library(Ctx *c, const Options *o, Graph *g, const TensorMap *bound, const TensorMap *own_values) {
  CgResult cg;
  CgOptions cg_opts = driver_cg_options(&o->passes);
  double t = ctx_now();
  if (!cg_compile_opts(g, &cg_opts, &cg)) return 1;
  t = ctx_stage(c, "codegen", t);
  TensorMap params = {0};
  /* An .onnx file's own weights, unless --weights replaces them. */
  bool own = o->weights || !bound || !bound->n;
  if (own && !api_calib_params(c, g, o->weights, own_values, o->seed, &params)) return 1;
  ctx_stage(c, "weights", t);
  CgAotOptions aot = {.output = o->output,
                      .source_name = o->input,
                      .params = own ? &params : bound,
                      .external_weights = o->external_weights,
                      .weights_path = o->external_weights ? o->weights : NULL,
                      .n_archs = o->n_archs,
                      .archs = o->archs,
                      .keep_temps = o->keep_temps};
  bool ok = cg_aot_build(g, &cg, &aot);
  ir_tensor_map_free(&params);
  return ok ? 0 : 1;
}

/* The weights calibration evaluates with, as build_library and dlcc run
 * bind them: --weights, else an .onnx file's own, else random from
 * --seed.  *own says whether out must be freed. */
static bool calibration_params(Ctx *c, Job *job, Graph *g, TensorMap *out, bool *own) {
  const Options *o = job->opt;
  *own = o->weights || !job->onnx_params.n;
  if (!*own) {
    *out = job->onnx_params;
    return true;
  }
  return api_calib_params(c, g, o->weights, &job->onnx_own.values, o->seed, out);
}

static void print_calibration(FILE *f, const ApiCalibration *cal) {
  fprintf(f, "%10d calibrate: samples\n", cal->n_samples);
  fprintf(f, "%10.3f calibrate: seconds\n", cal->seconds);
  fprintf(f, "%10.3f calibrate: ms per sample\n", cal->n_samples ? cal->seconds * 1e3 / cal->n_samples : 0.0);
  fprintf(f, "%10s calibrate: backend\n", cal->ran_on);
}

/* The pipeline, with a calibrator when --quantize=int8 asks for one. */
static bool run_passes(Ctx *c, Job *job, Graph *g) {
  const Options *o = job->opt;
  if (!o->quant.int8) return pass_run_pipeline(g, &o->passes, stderr);
  TensorMap params;
  bool own;
  if (!calibration_params(c, job, g, &params, &own)) return false;
  ApiCalibration cal = {.dir = o->quant.calibrate,
                        .method = o->quant.method ? o->quant.parsed : api_calib_default_method(),
                        .params = &params,
                        .max_samples = o->quant.max_samples,
                        .backend = o->quant.backend ? o->quant.on : CALIB_ON_AUTO,
                        .passes = &o->passes};
  PassOptions po = o->passes;
  po.quantize_int8 = true;
  po.calibrate = api_calibrate;
  po.calibrate_ud = &cal;
  DriverReport report = {.calibration = &cal, .test_dir = o->test_dir, .max_samples = o->test_samples};
  if (o->quant_report) {
    report.copy = (QuantCopyCalibrator){.inner = api_calibrate, .inner_ud = &cal};
    po.calibrate = api_quant_copy_calibrate;
    po.calibrate_ud = &report.copy;
    po.quant_summary = &report.summary;
  }
  bool ok = pass_run_pipeline(g, &po, stderr);
  if (ok && o->passes.stats && cal.n_samples) print_calibration(stderr, &cal);
  if (ok && o->quant_report) ok = driver_quant_report(job->out, &report, g, &params);
  if (own) ir_tensor_map_free(&params);
  return ok;
}

/* dlcc check-weights: every problem at its parameter's location, or a
 * line that says the file fits. */
static int check_weights(Ctx *c, const Options *o, Graph *g, const TensorMap *own) {
  TensorMap params;
  if (!api_check_weights(c, g, o->weights, own, &params)) return 1;
  int64_t count = 0;
  for (int i = 0; i < params.n; i++) count += ir_type_numel(&params.tensors[i].type);
  printf("%s: %s fits model %s: %d tensor%s, %" PRId64 " weights\n", o->input, o->weights, g->name, params.n,
         params.n == 1 ? "" : "s", count);
  ir_tensor_map_free(&params);
  return 0;
}

/* Whether the pipeline ran fuse: -O2, or a --passes list naming it. */
static bool ran_fuse(const PassOptions *po) {
  if (!po->passes) return po->opt_level == 2;
  for (const char *p = po->passes; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
    size_t n = strcspn(p, ",");
    if (n == 4 && strncmp(p, "fuse", 4) == 0) return true;
  }
  return false;
}

/* After fusion a node per kernel, with what its steps launch and move. */
static int emit_dot(Job *job, Graph *g) {
  const Options *o = job->opt;
  IrDotOptions dot = {.depth = o->dot_depth, .kernels = ran_fuse(&o->passes)};
  for (const Node *n = g->first; n && !dot.kernels; n = n->next) dot.kernels = n->group >= 0;
  if (dot.kernels) {
    CgResult cg;
    CgOptions cg_opts = driver_cg_options(&o->passes);
    if (!cg_compile_opts(g, &cg_opts, &cg)) return 1;
    dot.notes = cg_dot_notes(g, &cg);
  }
  ir_print_dot_opts(job->out, g, &dot);
  return 0;
}

static int compile(Ctx *c, void *data) {
  Job *job = data;
  const Options *o = job->opt;
  const SrcFile *file;
  Graph *g;
  double t = ctx_now();
  if (has_suffix(o->input, ".onnx")) {
    OnnxOptions oo = {
        .n_defines = o->n_defines, .defines = o->defines, .own = &job->onnx_own, .loop_bound = o->loop_bound};
    g = fe_onnx_import(c, o->input, &oo, &job->onnx_params);
    t = ctx_stage(c, "import onnx", t);
  } else if (!(file = ctx_load_file(c, o->input))) {
    return 1;
  } else if (has_suffix(o->input, ".ir")) {
    g = ir_parse(c, file);
    t = ctx_stage(c, "parse ir", t);
  } else {
    Program *p = fe_parse(c, file);
    t = ctx_stage(c, "parse", t);
    if (!p) return 1;
    if (o->emit == EMIT_AST) {
      fe_dump_ast(job->out, p);
      return 0;
    }
    LowerOptions lo = {.model = o->model, .n_defines = o->n_defines, .defines = o->defines, .training = o->grad,
                       .free_dims_default = o->check_weights ? 1 : 0};
    g = fe_lower(c, p, &lo);
    t = ctx_stage(c, "lower", t);
  }
  if (!g || !ir_verify(g)) return 1;
  t = ctx_stage(c, "verify", t);
  if (o->eval_mode && (!pass_eval_mode(g) || !ir_verify(g))) return 1;
  /* Before the passes, which may drop params a full state_dict names. */
  if (o->check_weights) return check_weights(c, o, g, &job->onnx_own.values);
  if (o->loss.name) {
    if (!pass_append_loss(g, &o->loss_spec, o->loss.output, "target", NULL) || !ir_verify(g)) return 1;
    t = ctx_stage(c, "loss", t);
  }
  TpResult tp = {0};
  if (o->tp > 1) {
    if (!pass_tensor_parallel(g,
                              &(TpOptions){.ranks = o->tp, .rank = o->tp_rank,
                                           .fuse_attention = pass_fuses_attention(&o->passes), .inference = !o->grad},
                              &tp) || !ir_verify(g)) return 1;
    for (int i = 0; i < tp.n_lines; i++) fprintf(stderr, "dlcc: tensor parallel: %s\n", tp.lines[i]);
    t = ctx_stage(c, "tensor-parallel", t);
  }
  if (o->grad) {
    /* f16 steps scale the loss (api/dlcc.c says why) */
    OptimSpec spec = o->optim;
    spec.loss_scaling = o->optimize && o->passes.precision == TY_F16;
    AutodiffOptions ado = {.loss_scale = spec.loss_scaling, .sync_bn = o->sync_bn, .unroll_rnn = o->passes.unroll_rnn,
                           .fuse_attention = pass_fuses_attention(&o->passes)};
    if (!pass_autodiff(g, &ado) || !ir_verify(g)) return 1;
    t = ctx_stage(c, "autodiff", t);
    spec.data_parallel = o->data_parallel;
    spec.bucket_bytes = (int64_t)o->bucket_mb << 20;
    /* the clip's norm and the overflow check span the tensor group */
    spec.tp_parts = tp_split_names(g, &tp);
    spec.n_tp_parts = tp.n_splits;
    if (o->optimize && (!pass_append_optimizer(g, &spec) || !ir_verify(g))) return 1;
  }
  if (!run_passes(c, job, g)) return 1;
  t = ctx_stage(c, "passes", t);
  if (o->quant_report) return 0;

  switch (o->emit) {
    case EMIT_IR: ir_print(job->out, g); break;
    case EMIT_DOT: return emit_dot(job, g);
    case EMIT_CUDA:
    case EMIT_PLAN: {
      CgResult cg;
      CgOptions cg_opts = driver_cg_options(&o->passes);
      if (!cg_compile_opts(g, &cg_opts, &cg)) return 1;
      ctx_stage(c, "codegen", t);
      if (o->passes.stats) print_plan_stats(stderr, &cg);
      if (o->emit == EMIT_CUDA)
        fputs(cg.source, job->out);
      else
        cg_print_plan_costs(job->out, cg.plan, cg.step_costs);
      break;
    }
    case EMIT_AST:
      diag_error(c, (SrcLoc){0}, "--emit=ast needs a .dl file");
      return 1;
    case EMIT_NONE:
      if (o->output) return build_library(c, o, g, &job->onnx_params, &job->onnx_own.values);
      print_summary(stdout, o->input, g);
      break;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "run") == 0) return driver_run(argc - 2, argv + 2);
  if (argc > 1 && strcmp(argv[1], "train") == 0) return driver_train(argc - 2, argv + 2);
  if (argc > 1 && strcmp(argv[1], "memplan") == 0) return driver_memplan(argc - 2, argv + 2);
  Options opt = {.n_archs = -1, .passes = {.opt_level = 2}, .dot_depth = -1}; /* -1: not given */
  if (argc > 1 && strcmp(argv[1], "check-weights") == 0) {
    opt.check_weights = true;
    argc--, argv++;
  }
  if (argc > 1 && strcmp(argv[1], "quant-report") == 0) {
    /* The compile flow with int8 on, stopping after the passes to compare
     * the two graphs; parse_args skips argv[0], here "quant-report". */
    opt.quant_report = opt.quant.int8 = true;
    argc--, argv++;
  }
  int rc = parse_args(argc, argv, &opt);
  if (rc) return rc == 2 ? 0 : 1;
  bool library = opt.output && opt.emit == EMIT_NONE;
  if (library && !has_suffix(opt.output, ".so")) {
    fprintf(stderr, "dlcc: error: -o %s: name a shared library (FILE.so), or choose an --emit kind\n",
            opt.output);
    return 1;
  }
  if (!driver_quant_check(&opt.quant, opt.passes.precision)) return 1;
  if (!driver_loss_check(&opt.loss, &opt.loss_spec)) return 1;
  /* dlcc FILE --weights=W alone checks W. */
  if (opt.weights && !opt.output && opt.emit == EMIT_NONE && !opt.quant.int8) opt.check_weights = true;
  if (opt.check_weights && (!opt.weights || opt.output || opt.emit != EMIT_NONE || opt.quant.int8)) {
    fputs("dlcc: error: check-weights takes a model and --weights=FILE (no -o, --emit or --quantize)\n",
          stderr);
    return 1;
  }
  bool weights_alone = opt.weights && !opt.quant.int8 && !opt.check_weights;
  if (!library && (opt.external_weights || opt.keep_temps || weights_alone)) {
    fputs("dlcc: error: --weights, --external-weights and --save-temps are for building a library (-o FILE.so)"
          "; --weights also for checking a weights file (alone, or dlcc check-weights) and for calibration "
          "(--quantize=int8)\n",
          stderr);
    return 1;
  }
#ifndef HAVE_CUDA
  /* No NVRTC: the library carries the CUDA source only. */
  if (library && opt.n_archs < 0) opt.n_archs = 0;
#endif
  if (opt.n_archs < 0) {
    opt.n_archs = 0;
    if (!(opt.archs[opt.n_archs++] = strdup("sm_90a"))) {
      fputs("dlcc: error: out of memory\n", stderr);
      return 1;
    }
  }

  FILE *out = stdout;
  if (opt.output && !library && !(out = fopen(opt.output, "w"))) {
    fprintf(stderr, "dlcc: error: cannot write '%s': %s\n", opt.output, strerror(errno));
    return 1;
  }
  Ctx c;
  ctx_init(&c);
  Job job = {.opt = &opt, .out = out};
  double started = ctx_now();
  rc = ctx_guard(&c, compile, &job);
  if (opt.time_stages) print_stages(stderr, &c, ctx_now() - started);
  ir_tensor_map_free(&job.onnx_params);
  ir_tensor_map_free(&job.onnx_own.values);
  fputs(diag_text(&c), stderr);
  if (c.diag.errors && rc == 0) rc = 1;
  ctx_free(&c);
  for (int i = 0; i < opt.n_defines; i++) free((char *)opt.defines[i].name);
  for (int i = 0; i < opt.n_archs; i++) free((char *)opt.archs[i]);
  if (out != stdout && fclose(out) != 0 && rc == 0) {
    fprintf(stderr, "dlcc: error: cannot write '%s': %s\n", opt.output, strerror(errno));
    rc = 1;
  }
  /* A failed run leaves no half-written output behind. */
  if (rc && opt.output) remove(opt.output);
  return rc ? 1 : 0;
}
