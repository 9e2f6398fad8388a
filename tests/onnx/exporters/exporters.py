#!/usr/bin/env python3
"""Models as today's exporters write them: PyTorch modules exported by
torch.onnx's two exporters (TorchScript, opset 17, and dynamo), run by
onnxruntime and by `dlcc run`, compared (docs/onnx.md, "Exporter
sweeps").  Not part of `make check`: it needs torch and torchvision
(and transformers or timm for those groups) from PyPI, about 4 GB.

    exporters.py [--dlcc BUILD/dlcc] [--backend ref|emu] [--out DIR] [--tol T]
                 NAME[:ts|:dynamo] ... | --group torchvision|detection|ops|hf|timm

Each line: OK or WRONG with the largest difference relative to the
output's largest magnitude, FAIL-RUN with dlcc's message, or
EXPORT/ORT-ERR when PyTorch cannot export the model or onnxruntime
cannot run it.  Random weights: a detector's scores are near-uniform,
so its boxes test the post-processing's order and ties as well.
"""
import argparse, os, subprocess, sys, time, warnings
import numpy as np, torch, torchvision, onnxruntime as ort
warnings.filterwarnings("ignore")
tv = torchvision.models
D = torchvision.models.detection
ARGS = None

def cls(fn, size=64, **kw):
    return lambda: (fn(weights=None, **kw).eval(), (torch.randn(1, 3, size, size),))

class TfEnc(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.e = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2)
    def forward(s, x): return s.e(x)
class TfEncMask(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.e = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=True)
    def forward(s, x):
        m = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return s.e(x, src_mask=m, is_causal=True)
class Mha(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.a = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    def forward(s, q, k): return s.a(q, k, k)[0]
class Sdpa(torch.nn.Module):
    def forward(s, q, k, v): return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
class Gru(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.g = torch.nn.GRU(8, 16, 2, batch_first=True, bidirectional=True)
    def forward(s, x): return s.g(x)[0]
class Lstm(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.g = torch.nn.LSTM(8, 16, 2, batch_first=True)
    def forward(s, x): return s.g(x)[0]
class Unet(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.d = torch.nn.Conv2d(3, 8, 3, 2, 1); s.u = torch.nn.ConvTranspose2d(8, 4, 4, 2, 1); s.n = torch.nn.GroupNorm(2, 4)
    def forward(s, x): return torch.nn.functional.interpolate(s.n(s.u(torch.relu(s.d(x)))), scale_factor=2, mode="bilinear")
class Llama(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.n = torch.nn.RMSNorm(64); s.q = torch.nn.Linear(64, 64); s.kv = torch.nn.Linear(64, 32)
        s.up = torch.nn.Linear(64, 128); s.g = torch.nn.Linear(64, 128); s.dn = torch.nn.Linear(128, 64)
    def forward(s, x):
        h = s.n(x); B, T, _ = h.shape
        q = s.q(h).view(B, T, 4, 16).transpose(1, 2)
        k, v = s.kv(h).view(B, T, 2, 2, 8).permute(2, 0, 3, 1, 4)
        k = torch.cat([k, k], -1).repeat_interleave(2, 1); v = torch.cat([v, v], -1).repeat_interleave(2, 1)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, 64)
        x = x + a
        return x + s.dn(torch.nn.functional.silu(s.g(s.n(x))) * s.up(s.n(x)))

MODELS = {
    "resnet18": cls(tv.resnet18), "resnet50": cls(tv.resnet50), "mobilenet_v2": cls(tv.mobilenet_v2),
    "mobilenet_v3_small": cls(tv.mobilenet_v3_small), "mobilenet_v3_large": cls(tv.mobilenet_v3_large),
    "efficientnet_b0": cls(tv.efficientnet_b0), "efficientnet_v2_s": cls(tv.efficientnet_v2_s),
    "regnet_y_400mf": cls(tv.regnet_y_400mf), "regnet_x_400mf": cls(tv.regnet_x_400mf),
    "shufflenet_v2_x0_5": cls(tv.shufflenet_v2_x0_5), "squeezenet1_1": cls(tv.squeezenet1_1),
    "densenet121": cls(tv.densenet121), "googlenet": cls(tv.googlenet, init_weights=True, aux_logits=False),
    "inception_v3": cls(tv.inception_v3, 299, init_weights=True, aux_logits=False), "mnasnet0_5": cls(tv.mnasnet0_5),
    "alexnet": cls(tv.alexnet, 96), "vgg11_bn": cls(tv.vgg11_bn, 32), "convnext_tiny": cls(tv.convnext_tiny),
    "vit_b_16": cls(tv.vit_b_16, 224), "swin_t": cls(tv.swin_t, 64), "maxvit_t": cls(tv.maxvit_t, 224),
    "resnext50_32x4d": cls(tv.resnext50_32x4d), "wide_resnet50_2": cls(tv.wide_resnet50_2, 32),
    "fcn_resnet50": cls(torchvision.models.segmentation.fcn_resnet50, 64, weights_backbone=None, aux_loss=False),
    "deeplabv3_mobilenet": cls(torchvision.models.segmentation.deeplabv3_mobilenet_v3_large, 64, weights_backbone=None),
    "lraspp": cls(torchvision.models.segmentation.lraspp_mobilenet_v3_large, 64, weights_backbone=None),
    "r3d_18": lambda: (torchvision.models.video.r3d_18(weights=None).eval(), (torch.randn(1, 3, 4, 32, 32),)),
    "s3d": lambda: (torchvision.models.video.s3d(weights=None).eval(), (torch.randn(1, 3, 8, 64, 64),)),
    "tfenc": lambda: (TfEnc().eval(), (torch.randn(2, 10, 32),)),
    "tfenc_mask": lambda: (TfEncMask().eval(), (torch.randn(2, 10, 32),)),
    "mha": lambda: (Mha().eval(), (torch.randn(2, 5, 32), torch.randn(2, 7, 32))),
    "sdpa": lambda: (Sdpa().eval(), (torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16))),
    "gru": lambda: (Gru().eval(), (torch.randn(2, 7, 8),)),
    "lstm": lambda: (Lstm().eval(), (torch.randn(2, 7, 8),)),
    "unet": lambda: (Unet().eval(), (torch.randn(1, 3, 16, 16),)),
    "llama": lambda: (Llama().eval(), (torch.randn(2, 12, 64),)),
    "alexnet224": cls(tv.alexnet, 224), "vgg11_bn224": cls(tv.vgg11_bn, 224),
    "frcnn_mobile": lambda: (D.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, box_score_thresh=0.0).eval(), ([torch.rand(3, 320, 320)],)),
    "ssdlite": lambda: (D.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, score_thresh=0.0).eval(), ([torch.rand(3, 320, 320)],)),
    "retinanet": lambda: (D.retinanet_resnet50_fpn(weights=None, weights_backbone=None, score_thresh=0.0).eval(), ([torch.rand(3, 256, 256)],)),
    "maskrcnn": lambda: (D.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, box_score_thresh=0.0).eval(), ([torch.rand(3, 256, 256)],)),
    "raft_small": lambda: (torchvision.models.optical_flow.raft_small(weights=None, num_flow_updates=2).eval(), (torch.rand(1, 3, 64, 64), torch.rand(1, 3, 64, 64))),
    "swin_v2_t": cls(tv.swin_v2_t, 64),
    "vit_dyn": lambda: (tv.vit_b_16(weights=None, image_size=64, patch_size=16).eval(), (torch.randn(2, 3, 64, 64),)),
}
DYN = {"vit_dyn"}
GROUPS = {"torchvision": list(MODELS)}

for name in ("frcnn_mobile", "ssdlite", "retinanet", "maskrcnn"):
    GROUPS["torchvision"].remove(name)
MODELS["fcos"] = lambda: (D.fcos_resnet50_fpn(weights=None, weights_backbone=None, score_thresh=0.0, min_size=224, max_size=224).eval(), ([torch.rand(3, 224, 224)],))
MODELS["ssd300"] = lambda: (D.ssd300_vgg16(weights=None, weights_backbone=None, score_thresh=0.0).eval(), ([torch.rand(3, 300, 300)],))
MODELS["keypointrcnn"] = lambda: (D.keypointrcnn_resnet50_fpn(weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=224, max_size=224).eval(), ([torch.rand(3, 224, 224)],))
MODELS["frcnn_r50"] = lambda: (D.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=224, max_size=224).eval(), ([torch.rand(3, 224, 224)],))
MODELS["frcnn_r50_v2"] = lambda: (D.fasterrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=224, max_size=224).eval(), ([torch.rand(3, 224, 224)],))
MODELS["frcnn_mobile_hi"] = lambda: (D.fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=320, max_size=320).eval(), ([torch.rand(3, 320, 320)],))
GROUPS["detection"] = ["ssdlite", "ssd300", "retinanet", "fcos", "frcnn_mobile", "frcnn_mobile_hi", "frcnn_r50",
                       "frcnn_r50_v2", "maskrcnn", "keypointrcnn"]

class Fn(torch.nn.Module):
    def __init__(s, f): super().__init__(); s.f = f
    def forward(s, *a): return s.f(*a)
def add(name, f, *shapes, dtype=torch.float32, gen=None):
    def make():
        torch.manual_seed(0)
        args = tuple(gen(i, sh) if gen else torch.randn(*sh, dtype=dtype) for i, sh in enumerate(shapes))
        return Fn(f).eval(), args
    MODELS[name] = make
    GROUPS.setdefault("ops", []).append(name)
r = torch.randn
add("cumsum", lambda x: torch.cumsum(x, 1), (2, 5, 3))
add("cumprod", lambda x: torch.cumprod(x, 1), (2, 5))
add("sort", lambda x: torch.sort(x, -1, descending=True)[0], (3, 7))
add("argsort", lambda x: torch.argsort(x, 1), (3, 7))
add("topk", lambda x: torch.topk(x, 3, 1)[1], (3, 7))
add("roll", lambda x: torch.roll(x, (1, -2), (1, 2)), (2, 4, 5))
add("flip", lambda x: torch.flip(x, (1,)), (2, 4, 5))
add("tril", lambda x: torch.tril(x, -1), (2, 4, 5))
add("triu", lambda x: torch.triu(x, 1), (4, 5))
add("masked_fill", lambda x: x.masked_fill(x > 0.5, -1e9), (2, 4, 5))
add("where", lambda x, y: torch.where(x > y, x, y * 2), (2, 4), (4,))
add("index_put", lambda x: x.index_put((torch.tensor([0, 2]),), torch.tensor(5.0)), (4, 3))
add("scatter_add", lambda x: torch.zeros(3, 5).scatter_add(1, torch.tensor([[0, 1, 2, 0, 4]] * 3), x), (3, 5))
add("scatter_reduce", lambda x: torch.zeros(3, 5).scatter_reduce(1, torch.tensor([[0, 1, 1, 0, 4]] * 3), x, "amax", include_self=False), (3, 5))
add("index_select", lambda x: torch.index_select(x, 1, torch.tensor([3, 0, 0])), (2, 4, 3))
add("gather", lambda x: torch.gather(x, 1, torch.tensor([[0, 0], [1, 0]])), (2, 3))
add("einsum_bij", lambda a, b: torch.einsum("bij,bjk->bik", a, b), (2, 3, 4), (2, 4, 5))
add("einsum_trace", lambda a: torch.einsum("ii->i", a), (4, 4))
add("einsum_outer", lambda a, b: torch.einsum("i,j->ij", a, b), (3,), (4,))
add("bmm", torch.bmm, (2, 3, 4), (2, 4, 5))
add("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2), (2, 3, 5), (2, 3, 4), (2, 4, 5))
add("addmm", lambda c, a, b: torch.addmm(c, a, b), (5,), (3, 4), (4, 5))
add("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), (1, 8, 3, 3))
add("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), (1, 2, 4, 6))
add("unfold", lambda x: F.unfold(x, 3, padding=1, stride=2), (1, 2, 5, 5))
add("fold", lambda x: F.fold(x, (4, 4), 2, stride=2), (1, 8, 4))
add("grid_sample", lambda x, g: F.grid_sample(x, g.tanh(), align_corners=False), (1, 2, 5, 6), (1, 3, 4, 2))
add("grid_sample_nearest", lambda x, g: F.grid_sample(x, g.tanh(), mode="nearest", padding_mode="border", align_corners=True), (1, 2, 5, 6), (1, 3, 4, 2))
add("affine_grid", lambda t: F.affine_grid(t, (1, 2, 4, 5), align_corners=False), (1, 2, 3))
add("interp_bicubic", lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False), (1, 2, 4, 5))
add("interp_nearest", lambda x: F.interpolate(x, size=(7, 9), mode="nearest"), (1, 2, 4, 5))
add("interp_antialias", lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True), (1, 2, 8, 9))
add("interp_trilinear", lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), (1, 2, 3, 4, 5))
add("adaptive_avg", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), (1, 2, 7, 5))
add("adaptive_max", lambda x: F.adaptive_max_pool2d(x, (2, 2)), (1, 2, 8, 6))
add("avgpool_ceil", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (1, 2, 8, 7))
add("maxpool_dil", lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2), (1, 2, 9, 9))
add("maxpool1d", lambda x: F.max_pool1d(x, 3, 2), (1, 2, 9))
add("lppool", lambda x: F.lp_pool2d(x, 2, 2), (1, 2, 6, 6))
add("instancenorm", lambda x: F.instance_norm(x), (2, 3, 5, 5))
add("groupnorm", lambda x: F.group_norm(x, 2), (2, 4, 5))
add("layernorm2", lambda x: F.layer_norm(x, (4, 5)), (2, 4, 5))
add("rmsnorm", lambda x: F.rms_norm(x, (5,)), (2, 4, 5))
add("normalize", lambda x: F.normalize(x, dim=1), (3, 5))
add("cosine_sim", lambda a, b: F.cosine_similarity(a, b, dim=1), (3, 5), (3, 5))
add("cdist", lambda a, b: torch.cdist(a, b), (1, 4, 3), (1, 5, 3))
add("norm_fro", lambda x: torch.linalg.vector_norm(x, 3, dim=1), (3, 5))
add("logsumexp", lambda x: torch.logsumexp(x, 1), (3, 5))
add("var_mean", lambda x: torch.var_mean(x, 1, correction=1)[0], (3, 5))
add("std", lambda x: torch.std(x, (0, 2)), (3, 5, 2))
add("median", lambda x: torch.median(x, 1)[0], (3, 5))
add("amax", lambda x: torch.amax(x, (1, 2)), (3, 5, 2))
add("prod", lambda x: torch.prod(x, 1), (3, 5))
add("all_any", lambda x: (x > 0).all(1) | (x > 1).any(1), (3, 5))
add("clamp_t", lambda x, lo: torch.clamp(x, min=lo), (3, 5), (5,))
add("erf_gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), (3, 5))
add("mish_silu", lambda x: F.mish(x) + F.silu(x) + F.hardswish(x) + F.hardsigmoid(x), (3, 5))
add("softplus", lambda x: F.softplus(x, beta=2, threshold=5), (3, 5))
add("elu_selu", lambda x: F.elu(x, 0.5) + F.selu(x) + F.celu(x, 2.0), (3, 5))
add("prelu", lambda x: F.prelu(x, torch.tensor([0.1, 0.2, 0.3])), (2, 3, 4))
add("glu", lambda x: F.glu(x, 1), (2, 6))
add("logsigmoid", lambda x: F.logsigmoid(x) + F.softsign(x) + F.tanhshrink(x), (2, 6))
add("hardtanh", lambda x: F.hardtanh(x, -0.5, 0.5) + F.relu6(x * 4) + F.leaky_relu(x, 0.3), (2, 6))
add("threshold", lambda x: F.threshold(x, 0.1, 20.0), (2, 6))
add("atan2", lambda a, b: torch.atan2(a, b), (3,), (3,))
add("remainder", lambda a, b: torch.remainder(a, b.abs() + 0.5) + torch.fmod(a, b.abs() + 0.5), (3, 4), (4,))
add("floor_div", lambda a, b: torch.div(a, b.abs() + 0.5, rounding_mode="floor") + torch.div(a, b.abs() + 0.5, rounding_mode="trunc"), (3, 4), (4,))
add("round", lambda x: torch.round(x * 3) + torch.round(x, decimals=2), (3, 4))
add("sign_abs", lambda x: torch.sign(x) * torch.abs(x) + torch.frac(x) + torch.trunc(x), (3, 4))
add("pow_t", lambda x: torch.pow(x.abs(), 1.7) + torch.rsqrt(x.abs() + 1) + torch.reciprocal(x + 3), (3, 4))
add("lerp", lambda a, b: torch.lerp(a, b, 0.3), (3, 4), (3, 4))
add("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), (3, 4), (3, 4), (3, 4))
add("isnan", lambda x: torch.nan_to_num(x / (x - x.round())) + torch.isinf(x).float(), (3, 4))
add("bitwise", lambda x: ((x * 10).int() & 6) | ((x * 10).int() ^ 3), (3, 4))
add("shift", lambda x: ((x.abs() * 10).long() << 2) >> 1, (3, 4))
add("repeat", lambda x: x.repeat(2, 1, 3), (2, 3))
add("repeat_interleave", lambda x: x.repeat_interleave(2, dim=1), (2, 3))
add("expand_as", lambda x, y: x.expand_as(y) + y, (1, 3), (4, 3))
add("chunk", lambda x: torch.stack(x.chunk(3, 1), 0).sum(0), (2, 6))
add("split_sizes", lambda x: torch.cat(x.split([1, 3, 2], 1)[::-1], 1), (2, 6))
add("unbind", lambda x: sum(x.unbind(1)), (2, 6))
add("narrow", lambda x: x.narrow(1, 2, 3), (2, 6))
add("stride_slice", lambda x: x[:, ::2, 1::3], (2, 6, 7))
add("neg_index", lambda x: x[..., -1] + x[:, -2], (2, 6, 6))
add("bool_index_const", lambda x: x[:, torch.tensor([True, False, True])], (2, 3))
add("diag", lambda x: torch.diagonal(x, 0, -2, -1) + torch.diag_embed(x[..., 0]).sum(-1), (2, 4, 4))
add("eye_arange", lambda x: x + torch.eye(4) * torch.arange(4.0), (4, 4))
add("linspace", lambda x: x * torch.linspace(0, 1, 5), (3, 5))
add("full_like", lambda x: torch.full_like(x, 2.5) + torch.ones_like(x) + torch.zeros_like(x), (3, 5))
add("one_hot", lambda x: F.one_hot((x.abs() * 3).long().clamp(max=4), 5).float(), (3, 5))
add("embedding", lambda i: F.embedding(i, torch.arange(20.0).reshape(5, 4)), (3, 2), gen=lambda i, s: torch.randint(0, 5, s))
add("embedding_bag", lambda i: F.embedding_bag(i, torch.arange(20.0).reshape(5, 4), torch.tensor([0, 2, 4]), mode="mean"), (6,), gen=lambda i, s: torch.randint(0, 5, s))
add("bucketize", lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0])), (3, 5))
add("searchsorted", lambda x: torch.searchsorted(torch.tensor([-1.0, 0.0, 1.0]), x), (3, 5))
add("conv1d_groups", lambda x: F.conv1d(x, torch.ones(4, 2, 3), groups=2, padding="same"), (1, 4, 9))
add("conv_dil", lambda x: F.conv2d(x, torch.ones(2, 2, 3, 3), dilation=2, padding=2, stride=(1, 2)), (1, 2, 9, 9))
add("conv_tr1d", lambda x: F.conv_transpose1d(x, torch.ones(2, 3, 4), stride=3, padding=1, output_padding=1), (1, 2, 5))
add("conv_tr_groups", lambda x: F.conv_transpose2d(x, torch.ones(4, 1, 3, 3), stride=2, groups=4, dilation=2), (1, 4, 4, 4))
add("stft", lambda x: torch.stft(x, 16, 4, window=torch.hann_window(16), return_complex=True).abs(), (1, 64))
add("rfft", lambda x: torch.fft.rfft(x).abs(), (2, 16))
add("fft2", lambda x: torch.fft.fft2(x).real, (2, 8, 8))
add("complex_mul", lambda a, b: torch.view_as_real(torch.view_as_complex(a) * torch.view_as_complex(b)), (3, 4, 2), (3, 4, 2))
add("mha_mask", lambda q, k: F.scaled_dot_product_attention(q, k, k, attn_mask=torch.tril(torch.ones(4, 6, dtype=torch.bool))), (1, 2, 4, 8), (1, 2, 6, 8))
add("sdpa_scale", lambda q, k: F.scaled_dot_product_attention(q, k, k, scale=0.3), (2, 4, 8), (2, 6, 8))
add("sdpa_gqa", lambda q, k: F.scaled_dot_product_attention(q, k, k, enable_gqa=True, is_causal=True), (1, 4, 5, 8), (1, 2, 5, 8))
add("max_unpool", lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), (1, 2, 4, 4))
add("maxpool_idx", lambda x: F.max_pool2d(x, 2, return_indices=True)[1].float(), (1, 2, 4, 4))
add("cummax", lambda x: torch.cummax(x, 1)[0], (2, 5))
add("logcumsumexp", lambda x: torch.logcumsumexp(x, 1), (2, 5))
add("kthvalue", lambda x: torch.kthvalue(x, 2, 1)[0], (2, 5))
add("mode", lambda x: torch.mode((x * 2).round(), 1)[0], (2, 5))
add("unique_consec", lambda x: torch.unique_consecutive((x * 2).round()), (6,))
add("tensor_split", lambda x: torch.tensor_split(x, 3, 1)[1], (2, 7))
add("movedim", lambda x: torch.movedim(x, 1, -1).flatten(1), (2, 3, 4, 5))
add("channel_shuffle", lambda x: F.channel_shuffle(x, 2), (1, 4, 3, 3))
add("pad_reflect", lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), (1, 2, 4, 5))
add("pad_replicate", lambda x: F.pad(x, (1, 2, 2, 1), mode="replicate"), (1, 2, 4, 5))
add("pad_circular", lambda x: F.pad(x, (1, 2, 2, 1), mode="circular"), (1, 2, 4, 5))
add("pad_neg", lambda x: F.pad(x, (-1, 2, 0, -1)), (1, 2, 4, 5))
add("dropout_eval", lambda x: F.dropout(x, 0.5, training=False) + F.alpha_dropout(x, 0.2, False), (2, 4))
add("bilinear", lambda a, b: F.bilinear(a, b, torch.ones(3, 4, 5)), (2, 4), (2, 5))
add("pdist_cross", lambda a, b: torch.linalg.cross(a, b), (4, 3), (4, 3))
add("matrix_power", lambda a: torch.linalg.matrix_power(a, 3), (3, 3))
add("det", lambda a: torch.linalg.det(a), (2, 3, 3))
add("inverse", lambda a: torch.linalg.inv(a + 3 * torch.eye(3)), (2, 3, 3))
add("int_ops", lambda x: (x * 5).to(torch.int32) // 2 + (x * 5).to(torch.int64) % 3, (3, 4))
add("half_model", lambda x: (x.half() @ x.half().T).float(), (3, 4))
add("bf16_model", lambda x: F.softmax(x.bfloat16(), -1).float(), (3, 4))
add("size_arith", lambda x: x.view(x.shape[0] * x.shape[1], -1) / x.shape[-1], (2, 3, 4))
add("new_zeros", lambda x: x.new_zeros(x.shape[0], 3) + x[:, :3], (2, 4))
add("masked_select_sum", lambda x: x[x > 0].sum(), (3, 4))
add("nonzero_count", lambda x: torch.count_nonzero(x > 0, 1), (3, 4))
add("argwhere_idx", lambda x: torch.argwhere(x > 0).float().mean(), (3, 4))

def hf_models():
    import transformers as T
    class Wrap(torch.nn.Module):
        def __init__(s, m, key="last_hidden_state"):
            super().__init__(); s.m = m; s.key = key
        def forward(s, *a):
            out = s.m(*a)
            return out[s.key] if isinstance(out, dict) or hasattr(out, "keys") else out[0]
    class Seq2Seq(Wrap):
        """An encoder-decoder's decoder states, from input_ids and decoder_input_ids."""
        def forward(s, src, tgt):
            return s.m(input_ids=src, decoder_input_ids=tgt).last_hidden_state

    def ids(b=2, t=16, v=100): return torch.randint(0, v, (b, t))
    small = dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, vocab_size=100)
    M = {
      "bert": lambda: (Wrap(T.BertModel(T.BertConfig(**small, max_position_embeddings=64)).eval()), (ids(), torch.ones(2, 16, dtype=torch.int64))),
      "distilbert": lambda: (Wrap(T.DistilBertModel(T.DistilBertConfig(dim=64, n_heads=4, hidden_dim=128, n_layers=2, vocab_size=100, max_position_embeddings=64)).eval()), (ids(), torch.ones(2, 16, dtype=torch.int64))),
      "gpt2": lambda: (Wrap(T.GPT2Model(T.GPT2Config(n_embd=64, n_head=4, n_layer=2, vocab_size=100, n_positions=64, use_cache=False)).eval()), (ids(),)),
      "llama_hf": lambda: (Wrap(T.LlamaModel(T.LlamaConfig(**small, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)).eval()), (ids(),)),
      "vit_hf": lambda: (Wrap(T.ViTModel(T.ViTConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, image_size=32, patch_size=8)).eval()), (torch.randn(2, 3, 32, 32),)),
      "whisper_enc": lambda: (Wrap(T.WhisperModel(T.WhisperConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32, vocab_size=100)).get_encoder().eval()), (torch.randn(1, 16, 64),)),
      "t5_enc": lambda: (Wrap(T.T5EncoderModel(T.T5Config(d_model=64, num_heads=4, d_ff=128, num_layers=2, vocab_size=100, d_kv=16)).eval()), (ids(),)),
      "roberta": lambda: (Wrap(T.RobertaModel(T.RobertaConfig(**small, max_position_embeddings=64)).eval()), (ids(),)),
      "convnext_hf": lambda: (Wrap(T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])).eval()), (torch.randn(1, 3, 64, 64),)),
      "mobilevit": lambda: (Wrap(T.MobileViTModel(T.MobileViTConfig(image_size=64)).eval()), (torch.randn(1, 3, 64, 64),)),
      "wav2vec2": lambda: (Wrap(T.Wav2Vec2Model(T.Wav2Vec2Config(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)).eval()), (torch.randn(1, 1600),)),
      "qwen2": lambda: (Wrap(T.Qwen2Model(T.Qwen2Config(**small, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)).eval()), (ids(),)),
      "deit": lambda: (Wrap(T.DeiTModel(T.DeiTConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, image_size=32, patch_size=8)).eval()), (torch.randn(2, 3, 32, 32),)),
      "clip_text": lambda: (Wrap(T.CLIPTextModel(T.CLIPTextConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, vocab_size=100, max_position_embeddings=32)).eval()), (ids(),)),
      "bart": lambda: (Seq2Seq(T.BartModel(T.BartConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=100, max_position_embeddings=64, use_cache=False)).eval()), (ids(), ids(2, 9))),
      "t5": lambda: (Seq2Seq(T.T5Model(T.T5Config(d_model=64, num_heads=4, d_ff=128, num_layers=2, vocab_size=100, d_kv=16, use_cache=False)).eval()), (ids(), ids(2, 9))),
      "opt": lambda: (Wrap(T.OPTModel(T.OPTConfig(hidden_size=64, num_attention_heads=4, ffn_dim=128, num_hidden_layers=2, vocab_size=100, max_position_embeddings=64, word_embed_proj_dim=64, use_cache=False)).eval()), (ids(),)),
      "gpt_neox": lambda: (Wrap(T.GPTNeoXModel(T.GPTNeoXConfig(**small, max_position_embeddings=64, rotary_pct=0.25, use_cache=False)).eval()), (ids(),)),
      "phi": lambda: (Wrap(T.PhiModel(T.PhiConfig(**small, max_position_embeddings=64, partial_rotary_factor=0.5, use_cache=False)).eval()), (ids(),)),
      "mistral": lambda: (Wrap(T.MistralModel(T.MistralConfig(**small, num_key_value_heads=2, max_position_embeddings=64, sliding_window=8, use_cache=False)).eval()), (ids(),)),
      "gemma": lambda: (Wrap(T.GemmaModel(T.GemmaConfig(**small, num_key_value_heads=1, head_dim=16, max_position_embeddings=64, use_cache=False)).eval()), (ids(),)),
      "gemma2": lambda: (Wrap(T.Gemma2Model(T.Gemma2Config(**small, num_key_value_heads=2, head_dim=16, max_position_embeddings=64, sliding_window=8, use_cache=False)).eval()), (ids(),)),
      "bloom": lambda: (Wrap(T.BloomModel(T.BloomConfig(hidden_size=64, n_head=4, n_layer=2, vocab_size=100, use_cache=False)).eval()), (ids(),)),
      "falcon": lambda: (Wrap(T.FalconModel(T.FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=100, use_cache=False)).eval()), (ids(),)),
      "gpt_bigcode": lambda: (Wrap(T.GPTBigCodeModel(T.GPTBigCodeConfig(n_embd=64, n_head=4, n_layer=2, vocab_size=100, n_positions=64, multi_query=True, use_cache=False)).eval()), (ids(),)),
      "gptj": lambda: (Wrap(T.GPTJModel(T.GPTJConfig(n_embd=64, n_head=4, n_layer=2, vocab_size=100, n_positions=64, rotary_dim=8, use_cache=False)).eval()), (ids(),)),
      "electra": lambda: (Wrap(T.ElectraModel(T.ElectraConfig(**small, embedding_size=32, max_position_embeddings=64)).eval()), (ids(),)),
      "albert": lambda: (Wrap(T.AlbertModel(T.AlbertConfig(**small, embedding_size=32, max_position_embeddings=64)).eval()), (ids(),)),
      "deberta_v2": lambda: (Wrap(T.DebertaV2Model(T.DebertaV2Config(**small, max_position_embeddings=64, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"])).eval()), (ids(),)),
      "mpnet": lambda: (Wrap(T.MPNetModel(T.MPNetConfig(**small, max_position_embeddings=64)).eval()), (ids(),)),
      "modernbert": lambda: (Wrap(T.ModernBertModel(T.ModernBertConfig(**small, max_position_embeddings=64, pad_token_id=0, global_attn_every_n_layers=2, local_attention=8)).eval()), (ids(),)),
      "segformer": lambda: (Wrap(T.SegformerModel(T.SegformerConfig(hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1], decoder_hidden_size=64)).eval()), (torch.randn(1, 3, 64, 64),)),
      "beit": lambda: (Wrap(T.BeitModel(T.BeitConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, image_size=32, patch_size=8, use_relative_position_bias=True)).eval()), (torch.randn(2, 3, 32, 32),)),
      "dinov2": lambda: (Wrap(T.Dinov2Model(T.Dinov2Config(hidden_size=64, num_attention_heads=4, mlp_ratio=2, num_hidden_layers=2, image_size=32, patch_size=8)).eval()), (torch.randn(2, 3, 32, 32),)),
      "siglip_vision": lambda: (Wrap(T.SiglipVisionModel(T.SiglipVisionConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, image_size=32, patch_size=8)).eval()), (torch.randn(2, 3, 32, 32),)),
      "swin_hf": lambda: (Wrap(T.SwinModel(T.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4)).eval()), (torch.randn(1, 3, 32, 32),)),
      "hubert": lambda: (Wrap(T.HubertModel(T.HubertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)).eval()), (torch.randn(1, 1600),)),
      "mamba": lambda: (Wrap(T.MambaModel(T.MambaConfig(hidden_size=32, state_size=8, num_hidden_layers=2, vocab_size=100, use_cache=False)).eval()), (ids(2, 8),)),
      "mixtral": lambda: (Wrap(T.MixtralModel(T.MixtralConfig(**small, num_key_value_heads=2, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2, use_cache=False)).eval()), (ids(),)),
      "qwen3": lambda: (Wrap(T.Qwen3Model(T.Qwen3Config(**small, num_key_value_heads=2, head_dim=16, max_position_embeddings=64, use_cache=False)).eval()), (ids(),)),
    }
    return M

def one(name, exporter):
    torch.manual_seed(0)
    model, args = MODELS[name]()
    stem = f"{ARGS.out}/{name.replace('/', '_')}.{exporter}"
    path = stem + ".onnx"
    names = [f"in{i}" for i in range(len(args))]
    t0 = time.time()
    dyn = {n: {0: "batch"} for n in names} if name in DYN else None
    if exporter == "ts":
        torch.onnx.export(model, args, path, input_names=names, opset_version=17, dynamo=False, dynamic_axes=dyn)
    else:
        torch.onnx.export(model, args, path, input_names=names, dynamo=True, external_data=False,
                          dynamic_shapes=({0: torch.export.Dim("batch")},) if dyn else None)
    te = time.time() - t0
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    flat = [a for x in args for a in (x if isinstance(x, list) else [x])]
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), flat)}
    ref = sess.run(None, feeds)
    d = stem
    os.makedirs(d, exist_ok=True)
    cmd = [ARGS.dlcc, "run", path, "--backend=" + ARGS.backend, "--output-dir=" + d]
    for k, v in feeds.items():
        np.save(f"{d}/{k}.in.npy", v); cmd += ["--input", f"{k}={d}/{k}.in.npy"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    tr = time.time() - t0
    if r.returncode:
        return f"FAIL-RUN ({te:.0f}s export, {tr:.0f}s) " + (r.stderr.strip().splitlines() or ["?"])[-1][:400]
    worst = 0
    for o, val in zip(sess.get_outputs(), ref):
        fn = f"{d}/{o.name}.npy"
        if not os.path.exists(fn): return f"NO-OUTPUT {o.name}: {os.listdir(d)}"
        got = np.load(fn)
        if got.shape != val.shape: return f"SHAPE {o.name}: {got.shape} vs {val.shape}"
        if val.size == 0: continue
        err = float(np.max(np.abs(got.astype(np.float64) - val)) / (np.max(np.abs(val)) + 1e-6))
        worst = max(worst, err)
    return f"{'OK' if worst < ARGS.tol else 'WRONG'} rel {worst:.2e} ({te:.0f}s export, {tr:.0f}s run)"

def nonzero_params(m):
    """m with its all-zero weights drawn instead (timm starts some
    classifier heads and layer scales at 0, which would make every
    output 0 and the comparison empty)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            if p.numel() > 1 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return m


def timm_model(name):
    """timm's model of that name, random weights, at its input size (64 x 64
    for the convolutional ones whose size is past 128, to keep the
    reference interpreter quick)."""
    import timm
    m = nonzero_params(timm.create_model(name, pretrained=False, num_classes=10)).eval()
    size = getattr(m, "pretrained_cfg", {}).get("input_size", (3, 224, 224))
    hw = size[1]
    attention = ("nest", "pit", "volo", "visformer", "vit", "deit", "swin", "beit", "eva", "pvt", "cait", "xcit", "levit", "coat", "crossvit", "maxvit", "twins",
                 "tnt", "mvit", "edgenext", "efficientformer", "fastvit", "repvit", "nextvit", "tiny_vit", "hiera", "mobilevit")
    if hw > 128 and not any(k in name for k in attention):
        hw = 64
    return m, (torch.randn(1, size[0], hw, hw),)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="NAME, NAME:ts, NAME:dynamo; timm/NAME for a timm model")
    ap.add_argument("--group", choices=["torchvision", "detection", "ops", "hf"])
    ap.add_argument("--dlcc", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "dlcc"))
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--out", default="/tmp/dlcc-exporters")
    ap.add_argument("--tol", type=float, default=1e-4)
    ARGS = ap.parse_args()
    os.makedirs(ARGS.out, exist_ok=True)
    if ARGS.group == "hf" or any(not n.startswith("timm/") and n.partition(":")[0] not in MODELS for n in ARGS.names):
        try:
            MODELS.update(hf_models())
            GROUPS["hf"] = list(hf_models())
        except ImportError:
            pass
    names = list(ARGS.names) + GROUPS.get(ARGS.group, [])
    for arg in names:
        name, _, ex = arg.partition(":")
        if name.startswith("timm/"):
            MODELS[name] = lambda n=name[5:]: timm_model(n)
        if name not in MODELS:
            print(f"{name}: no such model", file=sys.stderr)
            return 2
        for e in [ex] if ex else ["ts", "dynamo"]:
            try:
                res = one(name, e)
            except Exception as x:
                res = "EXPORT/ORT-ERR " + (str(x).strip().splitlines() or [repr(x)])[-1][:300]
            print(f"{name:22s} {e:7s} {res}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
