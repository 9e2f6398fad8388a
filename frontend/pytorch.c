/* PyTorch's spellings against dlcc's: takes a word where the parser or
 * lowering found nothing of that name, returns the table's entry (an
 * alias to accept, or a hint for the message).  An alias is only taken
 * where it cannot mean anything else: its function has the dlcc
 * parameter and none of the PyTorch name, and a positional call means
 * the same in both (F.interpolate's order differs from upsample's: a
 * hint).  docs/language.md, "Coming from PyTorch", is this table. */
#include "frontend/pytorch.h"

#include <stdio.h>
#include <string.h>

#define ALIAS(w, t, d, only) {w, t, d, only, true, NULL}
#define HINT(w, t, d, only, note) {w, t, d, only, false, note}

static const char from_input[] = "dlcc takes it from the input's shape: leave it out";

static const PtSpelling table[] = {
    /* Python's keywords: dlcc's syntax differs, so only hints. */
    HINT(PT_KEYWORD, "def", "block", NULL, "a block is a function: block mlp(x) { ... return y }"),
    HINT(PT_KEYWORD, "class", "model", NULL,
         "a network's entry point is a model with typed inputs; its parts are blocks"),
    HINT(PT_KEYWORD, "elif", "else", NULL, "write else if"),
    HINT(PT_KEYWORD, "while", "for", NULL, "loops run over a range: for i in 0..n"),
    HINT(PT_KEYWORD, "import", NULL, NULL, "nothing to import: every function is built in"),

    /* Names. */
    ALIAS(PT_NAME, "True", "true", NULL),
    ALIAS(PT_NAME, "False", "false", NULL),
    HINT(PT_NAME, "None", NULL, NULL, "dlcc has no None: leave the argument out to take its default"),
    /* torch's dtypes, as they are written after `torch.`. */
    ALIAS(PT_NAME, "float32", "f32", NULL),
    ALIAS(PT_NAME, "float", "f32", NULL),
    ALIAS(PT_NAME, "float16", "f16", NULL),
    ALIAS(PT_NAME, "half", "f16", NULL),
    ALIAS(PT_NAME, "bfloat16", "bf16", NULL),
    ALIAS(PT_NAME, "int8", "i8", NULL),
    ALIAS(PT_NAME, "uint8", "u8", NULL),
    ALIAS(PT_NAME, "int32", "i32", NULL),
    ALIAS(PT_NAME, "int64", "i64", NULL),
    ALIAS(PT_NAME, "long", "i64", NULL),

    /* Functions whose PyTorch name means the same call. */
    ALIAS(PT_FUNC, "cat", "concat", NULL),
    ALIAS(PT_FUNC, "clamp", "clip", NULL),
    ALIAS(PT_FUNC, "view", "reshape", NULL),
    ALIAS(PT_FUNC, "permute", "transpose", NULL),
    ALIAS(PT_FUNC, "mm", "matmul", NULL),
    ALIAS(PT_FUNC, "bmm", "matmul", NULL),
    ALIAS(PT_FUNC, "max_pool2d", "maxpool2d", NULL),
    ALIAS(PT_FUNC, "avg_pool2d", "avgpool2d", NULL),
    ALIAS(PT_FUNC, "max_pool3d", "maxpool3d", NULL),
    ALIAS(PT_FUNC, "avg_pool3d", "avgpool3d", NULL),
    /* ... and those where dlcc's call differs. */
    HINT(PT_FUNC, "interpolate", "upsample", NULL, "upsample(x, scale=2) or upsample(x, size=[h, w])"),
    HINT(PT_FUNC, "adaptive_avg_pool2d", "global_avgpool", NULL, "to an output of 1 x 1"),
    HINT(PT_FUNC, "batch_norm", "batchnorm", NULL, "a layer: its statistics are parameters"),
    HINT(PT_FUNC, "layer_norm", "layernorm", NULL, "a layer over the last dim, with its weight and bias"),
    HINT(PT_FUNC, "unsqueeze", "reshape", NULL, "reshape(x, shape) with the new dim of 1"),
    HINT(PT_FUNC, "squeeze", "reshape", NULL, "reshape(x, shape) without the dims of 1"),
    HINT(PT_FUNC, "stack", "concat", NULL, "concat of the inputs reshaped to a leading dim of 1"),
    HINT(PT_FUNC, "scaled_dot_product_attention", "multihead_attention", NULL,
         "or matmul, softmax and matmul"),
    HINT(PT_FUNC, "size", "dim", NULL, "dim(x, axis) is x.size(axis)"),
    /* Modules: dlcc calls a layer where PyTorch builds a module. */
    HINT(PT_FUNC, "Linear", "linear", NULL, "dlcc calls a layer where PyTorch builds a module: linear(x, 10) as fc"),
    HINT(PT_FUNC, "Conv1d", NULL, NULL, "dlcc has conv2d and conv3d"),
    HINT(PT_FUNC, "Conv2d", "conv2d", NULL, "dlcc calls a layer where PyTorch builds a module"),
    HINT(PT_FUNC, "Conv3d", "conv3d", NULL, "dlcc calls a layer where PyTorch builds a module"),
    HINT(PT_FUNC, "ConvTranspose2d", "conv_transpose2d", NULL, "dlcc calls a layer where PyTorch builds a module"),
    HINT(PT_FUNC, "BatchNorm1d", "batchnorm", NULL, "one layer for every rank"),
    HINT(PT_FUNC, "BatchNorm2d", "batchnorm", NULL, "one layer for every rank"),
    HINT(PT_FUNC, "BatchNorm3d", "batchnorm", NULL, "one layer for every rank"),
    HINT(PT_FUNC, "LayerNorm", "layernorm", NULL, "dlcc calls a layer where PyTorch builds a module"),
    HINT(PT_FUNC, "Embedding", "embedding", NULL, "dlcc calls a layer where PyTorch builds a module"),
    HINT(PT_FUNC, "LSTM", "lstm", NULL, "batch_first is true by default in dlcc"),
    HINT(PT_FUNC, "GRU", "gru", NULL, "batch_first is true by default in dlcc"),
    HINT(PT_FUNC, "MultiheadAttention", "multihead_attention", NULL, "batch first, as batch_first=True"),
    HINT(PT_FUNC, "Dropout", "dropout", NULL, "dlcc calls a layer where PyTorch builds a module"),
    HINT(PT_FUNC, "ReLU", "relu", NULL, NULL),
    HINT(PT_FUNC, "GELU", "gelu", NULL, NULL),
    HINT(PT_FUNC, "SiLU", "silu", NULL, NULL),
    HINT(PT_FUNC, "Sigmoid", "sigmoid", NULL, NULL),
    HINT(PT_FUNC, "Tanh", "tanh", NULL, NULL),
    HINT(PT_FUNC, "Softmax", "softmax", NULL, NULL),
    HINT(PT_FUNC, "Flatten", "flatten", NULL, NULL),
    HINT(PT_FUNC, "MaxPool2d", "maxpool2d", NULL, NULL),
    HINT(PT_FUNC, "AvgPool2d", "avgpool2d", NULL, NULL),
    HINT(PT_FUNC, "AdaptiveAvgPool2d", "global_avgpool", NULL, "to an output of 1 x 1"),
    HINT(PT_FUNC, "Sequential", "block", NULL, "a block that calls its layers in turn"),
    /* Loss modules: dlcc has PyTorch's functional losses. */
    HINT(PT_FUNC, "CrossEntropyLoss", "cross_entropy", NULL, "call the loss: cross_entropy(logits, target)"),
    HINT(PT_FUNC, "NLLLoss", "nll_loss", NULL, "call the loss: nll_loss(log_probs, target)"),
    HINT(PT_FUNC, "MSELoss", "mse_loss", NULL, "call the loss: mse_loss(input, target)"),
    HINT(PT_FUNC, "L1Loss", "l1_loss", NULL, "call the loss: l1_loss(input, target)"),
    HINT(PT_FUNC, "SmoothL1Loss", "smooth_l1_loss", NULL, "call the loss: smooth_l1_loss(input, target, beta=1.0)"),
    HINT(PT_FUNC, "BCEWithLogitsLoss", "binary_cross_entropy_with_logits", NULL,
         "call the loss: binary_cross_entropy_with_logits(logits, target)"),
    HINT(PT_FUNC, "binary_cross_entropy", "binary_cross_entropy_with_logits", NULL,
         "give it the logits, before the sigmoid: the stable form"),

    /* Keyword arguments. */
    ALIAS(PT_ARG, "kernel_size", "kernel", NULL),
    ALIAS(PT_ARG, "padding", "pad", NULL),
    ALIAS(PT_ARG, "output_padding", "output_pad", NULL),
    ALIAS(PT_ARG, "dim", "axis", NULL),
    ALIAS(PT_ARG, "keepdim", "keepdims", NULL),
    ALIAS(PT_ARG, "out_features", "out", "linear"),
    ALIAS(PT_ARG, "out_channels", "out", NULL),
    ALIAS(PT_ARG, "hidden_size", "hidden", NULL),
    ALIAS(PT_ARG, "num_layers", "layers", NULL),
    ALIAS(PT_ARG, "num_heads", "heads", NULL),
    ALIAS(PT_ARG, "negative_slope", "alpha", NULL),
    ALIAS(PT_ARG, "start_dim", "start", NULL),
    ALIAS(PT_ARG, "end_dim", "end", NULL),
    ALIAS(PT_ARG, "num_embeddings", "num", NULL),
    ALIAS(PT_ARG, "embedding_dim", "dim", NULL),
    ALIAS(PT_ARG, "scale_factor", "scale", NULL),
    ALIAS(PT_ARG, "dims", "perm", NULL),
    ALIAS(PT_ARG, "index", "indices", NULL),
    ALIAS(PT_ARG, "pad", "pads", "pad"),
    ALIAS(PT_ARG, "size", "shape", "zeros,ones,full,expand"),
    ALIAS(PT_ARG, "fill_value", "value", NULL),
    ALIAS(PT_ARG, "input", "x", NULL),
    HINT(PT_ARG, "in_features", NULL, NULL, from_input),
    HINT(PT_ARG, "in_channels", NULL, NULL, from_input),
    HINT(PT_ARG, "num_features", NULL, NULL, from_input),
    HINT(PT_ARG, "normalized_shape", NULL, NULL, "layernorm normalizes the last dim"),
    HINT(PT_ARG, "embed_dim", NULL, NULL, from_input),
    HINT(PT_ARG, "input_size", NULL, NULL, from_input),
    HINT(PT_ARG, "inplace", NULL, NULL, "dlcc has no in-place ops: leave it out"),
    HINT(PT_ARG, "momentum", NULL, NULL, "unused at inference: leave it out"),
    HINT(PT_ARG, "training", NULL, NULL, "dlcc compiles for inference, where dropout is the identity: leave it out"),
    HINT(PT_ARG, "dim0", "perm", "transpose", "transpose takes the whole permutation; without it the last two dims swap"),
    HINT(PT_ARG, "dim1", "perm", "transpose", "transpose takes the whole permutation; without it the last two dims swap"),
    HINT(PT_ARG, "need_weights", NULL, NULL, "multihead_attention returns the attention output only"),
    HINT(PT_ARG, "device", NULL, NULL, "dlcc places tensors itself: leave it out"),
    HINT(PT_ARG, "requires_grad", NULL, NULL, "leave it out"),
};

/* Whether fn is in the comma-separated list only. */
static bool listed(const char *only, const char *fn) {
  size_t n = strlen(fn);
  for (const char *p = only; *p;) {
    size_t k = strcspn(p, ",");
    if (k == n && strncmp(p, fn, n) == 0) return true;
    p += k + (p[k] == ',');
  }
  return false;
}

const PtSpelling *fe_torch_find(PtWhere where, const char *word, const char *fn, const char *const *params, int n) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const PtSpelling *s = &table[i];
    if (s->where != where || strcmp(s->torch, word) != 0) continue;
    if (where != PT_ARG) return s;
    if (s->only && (!fn || !listed(s->only, fn))) continue;
    if (!s->dlcc) return s;
    for (int k = 0; k < n; k++)
      if (strcmp(params[k], s->dlcc) == 0) return s;
  }
  return NULL;
}

const char *fe_torch_note(const PtSpelling *s, char *buf, int len) {
  if (!s || !s->note) return "";
  snprintf(buf, (size_t)len, " (%s)", s->note);
  return buf;
}
