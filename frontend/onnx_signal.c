/* ONNX's signal and unpooling ops written with the IR's: takes one node's
 * operands, returns its results.  DFT (opsets 17 and 20) and STFT are a
 * direct O(N^2) DFT, one `matmul` of the signal by a constant table of
 * twiddles computed in double (a GEMM: cuBLAS, the tensor cores), with
 * STFT's frames a `gather` times the window; Col2Im is a grouped
 * `conv_transpose2d`/`3d` whose one-hot weight puts each block position
 * in its place; MaxUnpool a `scatter_nd` of the values into zeros at
 * their flat indices; MelWeightMatrix a constant computed at import. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* cos and sin of 2 pi r / n, exact (0, 1, -1) at the quarter turns so
 * that a real signal's imaginary part at 0 and n/2 comes out 0. */
static void unit_root(int64_t r, int64_t n, double *c, double *s) {
  r %= n;
  if ((4 * r) % n == 0) {
    static const double cq[4] = {1, 0, -1, 0}, sq[4] = {0, 1, 0, -1};
    *c = cq[4 * r / n], *s = sq[4 * r / n];
    return;
  }
  double t = 2 * M_PI * (double)r / (double)n;
  *c = cos(t), *s = sin(t);
}

/* The DFT of length len along axis of x [..., n, ..., c] (c = 1: real,
 * 2: complex, the last dim), as ONNX's reference (NumPy's fft, ifft and
 * irfft): the signal cut or zero-padded to len, the result [..., m, ...,
 * 2] with m = len, or len / 2 + 1 when onesided; inverse divides by len;
 * inverse and onesided together is irfft, a real result [..., len, ...,
 * 1] of the first len / 2 + 1 (Hermitian) frequencies.  f16 and bf16
 * compute in f32 and round once. */
static Val *dft_along(Imp *im, Val *x, int axis, int64_t len, bool inverse, bool onesided) {
  int r = x->type.rank;
  int64_t c = x->type.dims[r - 1], n = x->type.dims[axis];
  if (c != 1 && c != 2) {
    ox_bad(im, "the last dim is %" PRId64 ": it must be 1 (real) or 2 (real and imaginary)", c);
    return NULL;
  }
  if (len < 1) {
    ox_bad(im, "dft_length %" PRId64 " is not positive", len);
    return NULL;
  }
  bool irfft = inverse && onesided;
  int64_t m = irfft || !onesided ? len : len / 2 + 1, cout = irfft ? 1 : 2;
  int64_t used = irfft ? len / 2 + 1 : len; /* input points that reach the result */
  int64_t nin = n < used ? n : used;
  double rows = (double)nin * (double)c, cols = (double)m * (double)cout;
  if (len > (int64_t)1 << 20 || rows * cols > (double)im->fold_max) {
    ox_bad(im, "a DFT of length %" PRId64 " is too long (its table of %.0f twiddles is past the limit)", len,
           rows * cols);
    return NULL;
  }
  /* The signal axis next to the last, then [..., nin * c]. */
  int64_t perm[DL_MAX_RANK], back[DL_MAX_RANK];
  int k = 0;
  for (int d = 0; d < r - 1; d++)
    if (d != axis) perm[k++] = d;
  perm[k++] = axis, perm[k++] = r - 1;
  for (int d = 0; d < r; d++) back[perm[d]] = d;
  Val *t = ox_transpose(im, ox_widen(im, x), perm);
  if (t && nin < n) t = ox_slice_axis(im, t, r - 2, 0, nin, 1);
  if (!t) return NULL;
  int64_t dims[DL_MAX_RANK];
  memcpy(dims, t->type.dims, sizeof(int64_t) * (size_t)r);
  dims[r - 2] = nin * c;
  Val *flat = ox_reshape(im, t, r - 1, dims);
  /* w[(j, p), (f, q)]: input point j's real (p 0) or imaginary part
   * into frequency f's real (q 0) or imaginary part.  (a + ib)(cs + i sn)
   * = (a cs - b sn) + i (a sn + b cs), sn = -sin forward, +sin inverse. */
  int64_t wd[2] = {nin * c, m * cout};
  TensorType wt = ir_type_make(flat ? flat->type.dtype : TY_F32, 2, wd);
  Val *w = ox_known_new(im, &wt);
  double scale = inverse ? 1.0 / (double)len : 1.0;
  for (int64_t j = 0; j < nin; j++)
    for (int64_t f = 0; f < m; f++) {
      double cs, sn;
      unit_root(j * f, len, &cs, &sn);
      if (!inverse) sn = -sn;
      if (irfft) {
        /* y_t = sum over f of c_f (a_f cos - b_f sin) / len, c_f 1 for
         * the frequencies that have no mirror (0 and len / 2), else 2. */
        double twice = j == 0 || 2 * j == len ? 1 : 2;
        ir_tensor_set(w->k, (j * c) * m + f, twice * cs * scale);
        if (c == 2) ir_tensor_set(w->k, (j * c + 1) * m + f, -twice * sn * scale);
        continue;
      }
      ir_tensor_set(w->k, (j * c) * m * 2 + 2 * f, cs * scale);
      ir_tensor_set(w->k, (j * c) * m * 2 + 2 * f + 1, sn * scale);
      if (c == 2) {
        ir_tensor_set(w->k, (j * c + 1) * m * 2 + 2 * f, -sn * scale);
        ir_tensor_set(w->k, (j * c + 1) * m * 2 + 2 * f + 1, cs * scale);
      }
    }
  Val *y = ox_op2(im, OP_MATMUL, flat, w);
  dims[r - 2] = m, dims[r - 1] = cout;
  y = ox_transpose(im, ox_reshape(im, y, r, dims), back);
  return ox_narrow(im, y, x->type.dtype);
}

/* DFT: opset 17's axis attribute (default 1), opset 20's axis input
 * (default -2); dft_length, inverse, onesided. */
bool ox_op_dft(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *vl = ox_in_opt(n, 1), *va = ox_in_opt(n, 2);
  int64_t inverse, onesided, axis = im->opset >= 20 ? -2 : 1;
  if (!x || !ox_attr_int(im, "inverse", 0, &inverse) || !ox_attr_int(im, "onesided", 0, &onesided) ||
      !ox_need_float_in(im, x))
    return false;
  if (im->opset < 20 && !ox_attr_int(im, "axis", 1, &axis)) return false;
  if (im->opset >= 20 && va) {
    double a;
    if (!ox_const_scalar(im, va, "the axis", &a)) return false;
    axis = (int64_t)a;
  }
  if (inverse != 0 && inverse != 1) return ox_bad(im, "inverse must be 0 or 1, got %" PRId64, inverse);
  if (onesided != 0 && onesided != 1) return ox_bad(im, "onesided must be 0 or 1, got %" PRId64, onesided);
  int r = x->type.rank, ax;
  if (r < 2) return ox_bad(im, "the input has rank %d: it needs a signal axis and a last dim of 1 or 2", r);
  if (!ox_norm_axis(im, axis, r, &ax)) return false;
  if (ax == r - 1) return ox_bad(im, "axis %" PRId64 " is the last dim, which holds the real and imaginary parts", axis);
  int64_t n_in = x->type.dims[ax], len = inverse && onesided ? 2 * (n_in - 1) : n_in;
  if (vl) {
    double l;
    if (!ox_const_scalar(im, vl, "dft_length", &l)) return false;
    if (!(l >= 1 && l == floor(l))) return ox_bad(im, "dft_length %g is not a positive whole number", l);
    len = (int64_t)fmin(l, 9e18);
  }
  return (n->out[0] = dft_along(im, x, ax, len, inverse, onesided));
}

/* STFT: frames of frame_length every frame_step along axis 1 of signal
 * [batch, length, 1 or 2] (a gather of a constant index table), times the
 * window, each frame's DFT: [batch, frames, bins, 2]. */
bool ox_op_stft(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *vs = ox_in_req(im, n, 1), *win = ox_in_opt(n, 2), *vl = ox_in_opt(n, 3);
  int64_t onesided;
  double step, fl;
  if (!x || !vs || !ox_attr_int(im, "onesided", 1, &onesided) || !ox_need_float_in(im, x) ||
      !ox_const_scalar(im, vs, "frame_step", &step))
    return false;
  if (onesided != 0 && onesided != 1) return ox_bad(im, "onesided must be 0 or 1, got %" PRId64, onesided);
  if (x->type.rank != 3) return ox_bad(im, "the signal has rank %d (it must be [batch, length, 1 or 2])", x->type.rank);
  int64_t length = x->type.dims[1];
  if (win && win->type.rank != 1) return ox_bad(im, "the window has rank %d (it must be 1-d)", win->type.rank);
  if (vl) {
    if (!ox_const_scalar(im, vl, "frame_length", &fl)) return false;
  } else {
    fl = (double)(win ? win->type.dims[0] : length);
  }
  if (!(step >= 1 && step == floor(step))) return ox_bad(im, "frame_step %g is not a positive whole number", step);
  if (!(fl >= 1 && fl == floor(fl) && fl <= (double)length))
    return ox_bad(im, "frame_length %g must be a whole number from 1 to the signal's length (%" PRId64 ")", fl,
                  length);
  int64_t flen = (int64_t)fl, hop = (int64_t)fmin(step, 9e18), frames = 1 + (length - flen) / hop;
  if (win && win->type.dims[0] != flen)
    return ox_bad(im, "the window has %" PRId64 " values for frames of %" PRId64, win->type.dims[0], flen);
  if ((double)frames * (double)flen > (double)im->fold_max) return ox_bad(im, "too many frames");
  int64_t id[2] = {frames, flen};
  TensorType it = ir_type_make(TY_I64, 2, id);
  Val *idx = ox_known_new(im, &it);
  for (int64_t f = 0; f < frames; f++)
    for (int64_t t = 0; t < flen; t++) ((int64_t *)idx->k->data)[f * flen + t] = f * hop + t;
  Val *y = ox_gather(im, x, idx, 1); /* [batch, frames, flen, c] */
  if (win && y) {
    int64_t wd[2] = {flen, 1};
    y = ox_op2(im, OP_MUL, y, ox_cast(im, ox_reshape(im, win, 2, wd), x->type.dtype));
  }
  return y && (n->out[0] = dft_along(im, y, 2, flen, false, onesided));
}

/* Col2Im: input [N, C * prod(block), L] of blocks back into [N, C,
 * image...], overlapping blocks summed.  The L columns are the blocks'
 * positions, a grid of counts_d = (image_d + pads - dilation (block_d -
 * 1) - 1) / stride + 1; seen as [N, C * K, counts...], the image is a
 * conv_transpose with groups C whose weight [C * K, 1, block...] is 1
 * where the tap is the channel's block position k (output_pad adds
 * what the floor dropped). */
bool ox_op_col2im(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *vi = ox_in_req(im, n, 1), *vb = ox_in_req(im, n, 2);
  int nsp, nb, nd, np, ns;
  int64_t image[64], block[64];
  const int64_t *dil, *pads, *strides;
  if (!x || !vi || !vb || !ox_const_ints(im, vi, "image_shape", &nsp, image) ||
      !ox_const_ints(im, vb, "block_shape", &nb, block) || !ox_attr_ints(im, "dilations", &nd, &dil) ||
      !ox_attr_ints(im, "pads", &np, &pads) || !ox_attr_ints(im, "strides", &ns, &strides) ||
      !ox_need_float_in(im, x))
    return false;
  if (nsp < 1 || nsp > 3) return ox_bad(im, "image_shape has %d dims (1, 2 or 3 are supported)", nsp);
  if (nb != nsp) return ox_bad(im, "block_shape has %d dims, image_shape %d", nb, nsp);
  if ((nd >= 0 && nd != nsp) || (ns >= 0 && ns != nsp) || (np >= 0 && np != 2 * nsp))
    return ox_bad(im, "dilations and strides need %d values and pads %d", nsp, 2 * nsp);
  if (x->type.rank != 3) return ox_bad(im, "the input has rank %d (it must be [N, C * block size, L])", x->type.rank);
  /* 1-d as 2-d of height 1. */
  int nip = nsp == 1 ? 2 : nsp, o = nip - nsp;
  int64_t img[3] = {1, 1, 1}, blk[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1}, pd[6] = {0};
  int64_t cnt[3], opad[3], kk = 1, total = 1;
  for (int d = 0; d < nsp; d++) {
    img[o + d] = image[d], blk[o + d] = block[d];
    if (ns >= 0) st[o + d] = strides[d];
    if (nd >= 0) dl[o + d] = dil[d];
    if (np >= 0) pd[o + d] = pads[d], pd[nip + o + d] = pads[nsp + d];
  }
  for (int d = 0; d < nip; d++) {
    if (img[d] < 1 || blk[d] < 1 || st[d] < 1 || dl[d] < 1 || pd[d] < 0 || pd[nip + d] < 0 || blk[d] > 1 << 16)
      return ox_bad(im, "image_shape, block_shape, strides and dilations must be positive and pads not negative");
    int64_t span = img[d] + pd[d] + pd[nip + d] - dl[d] * (blk[d] - 1) - 1;
    if (span < 0) return ox_bad(im, "the block (with its dilation) is larger than the padded image on axis %d", d - o);
    cnt[d] = span / st[d] + 1;
    opad[d] = span % st[d];
    kk *= blk[d], total *= cnt[d];
  }
  int64_t ck = x->type.dims[1], C = ck / kk;
  if (ck % kk != 0)
    return ox_bad(im, "the input's %" PRId64 " rows are not a multiple of the block size %" PRId64, ck, kk);
  if (x->type.dims[2] != total)
    return ox_bad(im, "the input has %" PRId64 " blocks, the image and block shapes give %" PRId64, x->type.dims[2],
                  total);
  if ((double)ck * (double)kk > (double)im->fold_max) return ox_bad(im, "the block is too large");
  int64_t xd[5] = {x->type.dims[0], ck, cnt[0], cnt[1], cnt[2]};
  Val *xs = ox_reshape(im, x, 2 + nip, xd);
  int64_t wd[5] = {ck, 1, blk[0], blk[1], blk[2]};
  TensorType wt = ir_type_make(x->type.dtype, 2 + nip, wd);
  Val *w = ox_known_new(im, &wt);
  for (int64_t ch = 0; ch < ck; ch++) ir_tensor_set(w->k, ch * kk + ch % kk, 1);
  if (!xs) return false;
  Emit e;
  Node *t = ox_begin(im, &e, nip == 3 ? OP_CONV_TRANSPOSE3D : OP_CONV_TRANSPOSE2D, 2, (Val *[]){xs, w});
  ir_set_ints(im->g, t, "stride", nip, st);
  ir_set_ints(im->g, t, "dilation", nip, dl);
  ir_set_ints(im->g, t, "pad", 2 * nip, pd);
  ir_set_ints(im->g, t, "output_pad", nip, opad);
  ir_set_int(im->g, t, "groups", C);
  Val *y = ox_emit1(im, &e);
  int64_t yd[5] = {x->type.dims[0], C, image[0], image[1], image[2]};
  return (n->out[0] = ox_reshape(im, y, 2 + nsp, yd));
}

/* MaxUnpool as ONNX's reference: X's values written at the flat indices
 * I holds (MaxPool's Indices) into zeros of the inferred shape, (in - 1)
 * * stride - pads + kernel per spatial dim, the last one winning; an
 * output_shape pads that with zeros at the end of each dim (onnxruntime
 * and PyTorch read the indices within output_shape instead). */
bool ox_op_max_unpool(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *vi = ox_in_req(im, n, 1), *vo = ox_in_opt(n, 2);
  int nk, np, ns;
  const int64_t *kernel, *pads, *strides;
  if (!x || !vi || !ox_attr_ints(im, "kernel_shape", &nk, &kernel) || !ox_attr_ints(im, "pads", &np, &pads) ||
      !ox_attr_ints(im, "strides", &ns, &strides))
    return false;
  int r = x->type.rank, nsp = r - 2;
  if (nsp < 1) return ox_bad(im, "the input has rank %d (it must be [N, C, spatial...])", r);
  if (nk != nsp) return ox_bad(im, "kernel_shape has %d values for %d spatial dims", nk < 0 ? 0 : nk, nsp);
  if ((ns >= 0 && ns != nsp) || (np >= 0 && np != 2 * nsp))
    return ox_bad(im, "strides need %d values and pads %d", nsp, 2 * nsp);
  if (!ox_same_dims(&vi->type, r, x->type.dims) || (vi->type.dtype != TY_I64 && vi->type.dtype != TY_I32))
    return ox_bad(im, "the indices must be integers of the input's shape");
  int64_t shape[DL_MAX_RANK], total = 1;
  shape[0] = x->type.dims[0], shape[1] = x->type.dims[1];
  for (int d = 0; d < nsp; d++) {
    int64_t s = ns >= 0 ? strides[d] : 1, pb = np >= 0 ? pads[d] : 0, pe = np >= 0 ? pads[nsp + d] : 0;
    if (s < 1 || kernel[d] < 1 || pb < 0 || pe < 0)
      return ox_bad(im, "kernel_shape and strides must be positive and pads not negative");
    shape[2 + d] = (x->type.dims[2 + d] - 1) * s - pb - pe + kernel[d];
  }
  for (int d = 0; d < r; d++) {
    if (shape[d] < 1) return ox_bad(im, "the output's dim %d is %" PRId64 ", not positive", d, shape[d]);
    if (__builtin_mul_overflow(total, shape[d], &total) || total > ((int64_t)1 << 40))
      return ox_bad(im, "the output is too large");
  }
  int64_t pad[2 * DL_MAX_RANK] = {0}, want[64];
  bool padded = false;
  if (vo) {
    int no;
    if (!ox_const_ints(im, vo, "output_shape", &no, want)) return false;
    if (no != r) return ox_bad(im, "output_shape has %d dims for an input of rank %d", no, r);
    for (int d = 0; d < r; d++) {
      if (want[d] < shape[d])
        return ox_bad(im, "output_shape's dim %d is %" PRId64 ", smaller than the unpooled %" PRId64, d, want[d],
                      shape[d]);
      pad[r + d] = want[d] - shape[d];
      padded |= pad[r + d] > 0;
    }
  }
  int64_t m = ir_type_numel(&x->type), id[2] = {m, 1};
  /* The zeros are one splat const in the graph, never host data. */
  TensorType zt = ir_type_make(x->type.dtype, 1, &total);
  Node *z = ir_node_new(im->g, OP_CONST, 0, NULL, im->loc);
  ir_set_float(im->g, z, "value", 0);
  ir_declare(z, &zt);
  ir_append(im->g, z);
  Val *in[3] = {ox_val_of(im, &z->out[0]), ox_reshape(im, vi, 2, id), ox_reshape(im, x, 1, &m)};
  if (!in[1] || !in[2]) return false;
  Emit e;
  Node *s = ox_begin(im, &e, OP_SCATTER_ND, 3, in);
  ir_set_str(im->g, s, "reduction", "none");
  Val *y = ox_reshape(im, ox_emit1(im, &e), r, shape);
  if (y && padded) {
    Node *p = ox_begin(im, &e, OP_PAD, 1, &y);
    ir_set_ints(im->g, p, "pads", 2 * r, pad);
    ir_set_float(im->g, p, "value", 0);
    y = ox_emit1(im, &e);
  }
  return (n->out[0] = y);
}

/* MelWeightMatrix (opset 17): a constant [dft_length / 2 + 1,
 * num_mel_bins] of triangular filters, computed at import as ONNX's
 * reference does it (the edges' mel values in the inputs' float type,
 * then in double, the bins floored to whole spectrogram bins), so the
 * operands must be known. */
bool ox_op_mel_weight_matrix(Imp *im, ONode *n) {
  double mel_bins, dft, rate, lo, hi;
  int64_t code;
  Val *lv = ox_in_req(im, n, 3), *hv = ox_in_req(im, n, 4);
  if (!lv || !hv || !ox_const_scalar(im, ox_in_req(im, n, 0), "num_mel_bins", &mel_bins) ||
      !ox_const_scalar(im, ox_in_req(im, n, 1), "dft_length", &dft) ||
      !ox_const_scalar(im, ox_in_req(im, n, 2), "sample_rate", &rate) ||
      !ox_const_scalar(im, lv, "lower_edge_hertz", &lo) || !ox_const_scalar(im, hv, "upper_edge_hertz", &hi) ||
      !ox_attr_int(im, "output_datatype", 1, &code))
    return false;
  DType dt;
  if (!ox_dtype_from_onnx((int32_t)code, &dt))
    return ox_bad(im, "output_datatype %s is not supported", ox_onnx_type_name((int32_t)code));
  if (!(mel_bins >= 1 && mel_bins <= 1 << 16 && dft >= 1 && dft <= 1 << 24 && rate >= 1 && lo >= 0 && hi > lo))
    return ox_bad(im, "num_mel_bins %g, dft_length %g, sample_rate %g and edges %g to %g Hz do not make a filter bank "
                  "(at most 65,536 bins of a DFT of at most 2^24, 0 <= lower < upper)", mel_bins, dft, rate, lo, hi);
  int64_t M = (int64_t)mel_bins, S = (int64_t)dft / 2 + 1;
  if (M * S > (int64_t)1 << 26) return ox_bad(im, "a %" PRId64 " x %" PRId64 " filter bank is too large", S, M);
  /* 2595 log10(1 + f / 700), each step in the edges' type up to the
   * division by ln 10 (NumPy's promotion in the reference) */
  bool f32 = lv->type.dtype != TY_F64;
  double edge[2] = {lo, hi}, mel[2];
  for (int i = 0; i < 2; i++) {
    double a = f32 ? (float)((float)edge[i] / 700.0f) : edge[i] / 700;
    double b = f32 ? (float)log1p(a) : log1p(a);
    double c = f32 ? (float)(2595.0f * (float)b) : 2595 * b;
    mel[i] = c / log(10.0);
  }
  double step = (mel[1] - mel[0]) / (double)(M + 2);
  int64_t *bin = ARENA_ARRAY(&im->c->arena, int64_t, M + 2);
  for (int64_t i = 0; i < M + 2; i++) {
    double f = 700 * expm1(((double)i * step + mel[0]) / 2595 * log(10.0));
    bin[i] = (int64_t)floor((dft + 1) * f / rate);
    if (bin[i] < 0 || bin[i] >= S)
      return ox_bad(im, "upper_edge_hertz %g puts a filter past the %" PRId64 " spectrogram bins", hi, S);
  }
  TensorType t = ir_type_make(dt, 2, (int64_t[]){S, M});
  Val *w = ox_known_new(im, &t);
  for (int64_t i = 0; i < M; i++) {
    int64_t l = bin[i], c = bin[i + 1], r = bin[i + 2];
    if (c == l)
      ir_tensor_set(w->k, c * M + i, 1);
    else
      for (int64_t j = l; j <= c; j++) ir_tensor_set(w->k, j * M + i, (double)(j - l) / (double)(c - l));
    for (int64_t j = c; j < r; j++) ir_tensor_set(w->k, j * M + i, (double)(r - j) / (double)(r - c));
  }
  return (n->out[0] = w);
}
