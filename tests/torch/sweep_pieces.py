"""torch.nn's layers one kind at a time, for grad_sweep.py (torch alone,
no torchvision): each a body that ends in a linear head of 10 logits.
Left out because the TorchScript exporter cannot write them (opset 20):
Bilinear, ChannelShuffle, RMSNorm, LSTM's proj_size, Threshold with a
nonzero threshold, torch.median, AdaptiveAvgPool2d to a size that does
not divide the input's.  Left out because the export loses what PyTorch
trains by: Embedding's padding_idx (docs/training.md) and BatchNorm's
momentum=None (a cumulative average; the export writes momentum 0)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Body(nn.Module):
    """body(x), its spatial or sequence axes averaged, then a linear head."""

    def __init__(s, body, width):
        super().__init__()
        s.body = body
        s.fc = nn.Linear(width, 10)

    def forward(s, x):
        y = s.body(x)
        return s.fc(y.flatten(2).mean(2) if y.dim() > 2 else y)


class Call(nn.Module):
    """f(x, *modules): a functional body whose modules train."""

    def __init__(s, f, *mods):
        super().__init__()
        s.f = f
        s.mods = nn.ModuleList(mods)

    def forward(s, x):
        return s.f(x, *s.mods)


IMAGE, SEQ, FLAT = (3, 16, 16), (6, 12), (12,)
PIECES = {}


def piece(name, shape, body):
    def build():
        b = body()
        with torch.no_grad():
            width = b(torch.zeros(2, *shape)).shape[1]
        return Body(b, width)
    PIECES[name] = (build, shape)


def conv():
    return nn.Conv2d(3, 8, 3, padding=1)


def lin():
    return nn.Linear(12, 16)


piece("conv1d", SEQ, lambda: nn.Sequential(nn.Conv1d(6, 8, 3, stride=2, padding=1), nn.ReLU(),
                                           nn.Conv1d(8, 8, 2, dilation=2, groups=2)))
piece("conv3d", (3, 6, 8, 8), lambda: nn.Sequential(nn.Conv3d(3, 8, 3, stride=(1, 2, 2), padding=1), nn.BatchNorm3d(8),
                                                    nn.ReLU(), nn.MaxPool3d(2), nn.AvgPool3d(2)))
piece("conv_transpose1d", SEQ, lambda: nn.Sequential(
    nn.ConvTranspose1d(6, 8, 3, stride=2, padding=1, output_padding=1), nn.Tanh()))
piece("conv_transpose3d", (3, 4, 6, 6), lambda: nn.Sequential(nn.ConvTranspose3d(3, 4, 2, stride=2), nn.Sigmoid()))
piece("conv_transpose_groups", IMAGE, lambda: nn.Sequential(
    nn.Conv2d(3, 8, 1), nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, groups=4), nn.Hardswish()))
piece("conv_padding_modes", IMAGE, lambda: nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect"), nn.Conv2d(8, 8, 3, padding=1, padding_mode="replicate"),
    nn.Conv2d(8, 8, 3, padding=1, padding_mode="circular")))
piece("depthwise", IMAGE, lambda: nn.Sequential(
    nn.Conv2d(3, 12, 5, padding=2, groups=3, stride=2), nn.BatchNorm2d(12), nn.ReLU(),
    nn.Conv2d(12, 12, (1, 3), padding=(0, 2), dilation=2, groups=12, bias=False)))
piece("pool_ceil", IMAGE, lambda: nn.Sequential(
    conv(), nn.MaxPool2d(3, 2, ceil_mode=True), nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False)))
piece("pool_adaptive", IMAGE, lambda: nn.Sequential(conv(), nn.AdaptiveAvgPool2d((8, 4)), nn.AdaptiveMaxPool2d((2, 2))))
piece("pool_dilated", IMAGE, lambda: nn.Sequential(conv(), nn.MaxPool2d(3, 1, padding=1, dilation=2)))
piece("pool_lp", IMAGE, lambda: nn.Sequential(conv(), nn.Softplus(), nn.LPPool2d(2, 2)))
piece("norms", IMAGE, lambda: nn.Sequential(conv(), nn.GroupNorm(4, 8), nn.GELU(approximate="tanh"),
                                            nn.InstanceNorm2d(8), nn.LocalResponseNorm(3), nn.Mish()))
piece("layernorm_plain", SEQ, lambda: nn.Sequential(lin(), nn.LayerNorm(16, elementwise_affine=False), nn.SELU(),
                                                    nn.LayerNorm([6, 16])))
piece("batchnorm1d", FLAT, lambda: nn.Sequential(lin(), nn.BatchNorm1d(16), nn.ReLU6(), nn.Linear(16, 16),
                                                 nn.BatchNorm1d(16, affine=False), nn.CELU(0.5)))
piece("batchnorm_no_stats", IMAGE, lambda: nn.Sequential(conv(), nn.BatchNorm2d(8, track_running_stats=False)))
piece("activations", SEQ, lambda: nn.Sequential(lin(), *[m for a in (
    nn.Softsign(), nn.Tanhshrink(), nn.LogSigmoid(), nn.Hardsigmoid(), nn.Softshrink(0.1), nn.Hardshrink(0.05),
    nn.SiLU(), nn.Hardtanh(-0.5, 0.5)) for m in (a, nn.Linear(16, 16))], nn.GLU()))
piece("softmin", SEQ, lambda: nn.Sequential(lin(), nn.Softmin(-1), nn.Linear(16, 16), nn.LogSoftmax(1)))
piece("prelu_per_channel", IMAGE, lambda: nn.Sequential(conv(), nn.PReLU(8), nn.Flatten(), nn.Unflatten(1, (8, 16, 16)),
                                                        nn.ELU(0.7), nn.RReLU(0.1, 0.1)))
piece("pixel_shuffle", IMAGE, lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.PixelShuffle(2),
                                                    nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.PixelUnshuffle(2)))
piece("upsample", IMAGE, lambda: nn.Sequential(
    conv(), nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), nn.Conv2d(8, 8, 3, 2),
    nn.Upsample(size=(9, 7), mode="bilinear"), nn.Upsample(scale_factor=1.5, mode="nearest")))
piece("upsample_bicubic", IMAGE, lambda: nn.Sequential(conv(), nn.Upsample(scale_factor=2, mode="bicubic")))
piece("pads", IMAGE, lambda: nn.Sequential(nn.ReflectionPad2d((1, 2, 0, 1)), conv(), nn.ReplicationPad2d(1),
                                           nn.ZeroPad2d((0, 1, 2, 0)), nn.ConstantPad2d(1, 0.5)))
piece("fold_unfold", IMAGE, lambda: Call(lambda x, c: F.fold(F.unfold(c(x), 2, stride=2), (16, 16), 2, stride=2), conv()))
piece("embedding", (5,), lambda: Call(
    lambda x, e, e2: torch.cat([e((x.abs() * 3).long().clamp(max=19)), e2((x.abs() * 2).long().clamp(max=9))], -1).sum(1),
    nn.Embedding(20, 8), nn.Embedding(10, 4)))
piece("rnn_relu", SEQ, lambda: Call(lambda x, r: r(x)[0][:, -1],
                                    nn.RNN(12, 16, num_layers=2, nonlinearity="relu", batch_first=True)))
piece("gru_hidden", SEQ, lambda: Call(lambda x, r: r(x.transpose(0, 1))[1][-1], nn.GRU(12, 16, num_layers=2)))
piece("lstm_bidirectional", SEQ, lambda: Call(lambda x, r: r(x)[0].mean(1),
                                              nn.LSTM(12, 16, num_layers=2, batch_first=True, bidirectional=True)))
piece("attention_masks", SEQ, lambda: Call(
    lambda x, l, a: a(l(x), l(x), l(x), key_padding_mask=torch.tensor([[False] * 5 + [True]] * x.shape[0]),
                      attn_mask=torch.triu(torch.ones(6, 6, dtype=torch.bool), 1))[0].mean(1),
    lin(), nn.MultiheadAttention(16, 2, batch_first=True)))
piece("attention_kdim_bias_kv", SEQ, lambda: Call(
    lambda x, l, a: a(l(x), x, x)[0].mean(1),
    lin(), nn.MultiheadAttention(16, 4, batch_first=True, kdim=12, vdim=12, bias=False, add_bias_kv=True)))
piece("sdpa_causal", SEQ, lambda: Call(
    lambda x, l: F.scaled_dot_product_attention(*l(x).view(x.shape[0], 6, 2, 8).transpose(1, 2).unsqueeze(0)
                                                .expand(3, -1, -1, -1, -1), is_causal=True).transpose(1, 2).flatten(2)
    .mean(1), lin()))
piece("transformer_encoder", SEQ, lambda: Call(
    lambda x, l, t: t(l(x)).mean(1), lin(),
    nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2,
                          enable_nested_tensor=False)))
piece("tensor_ops", SEQ, lambda: Call(
    lambda x, l: torch.cat([l(x).cumsum(1), l(x).roll(2, 1), l(x).flip(2), torch.logsumexp(l(x), 1, keepdim=True),
                            l(x).std(1, keepdim=True), l(x).var(2, keepdim=True).expand(-1, -1, 16)], 1), lin()))
piece("min_max_sort", SEQ, lambda: Call(
    lambda x, l: torch.stack([l(x).max(1).values, l(x).min(2).values.repeat(1, 3)[:, :16], l(x).amax(1),
                              l(x).topk(3, 1).values.sum(1), l(x).sort(2).values[:, 0]], 1), lin()))
piece("norm_ops", SEQ, lambda: Call(
    lambda x, l: torch.cat([F.normalize(l(x), dim=2),
                            F.cosine_similarity(l(x), l(x).flip(1), dim=2).unsqueeze(2).expand(-1, -1, 16),
                            l(x).norm(dim=2, keepdim=True).expand(-1, -1, 16),
                            torch.cdist(l(x), l(x)).mean(2, keepdim=True).expand(-1, -1, 16)], 1), lin()))
piece("einsum_bmm", SEQ, lambda: Call(
    lambda x, l, m: torch.einsum("bij,bkj->bik", l(x), m(x)).sum(2) + torch.bmm(l(x), m(x).transpose(1, 2)).mean(1),
    lin(), lin()))
piece("elementwise", SEQ, lambda: Call(
    lambda x, l: torch.where(l(x) > 0, l(x) * 2, l(x).exp()).clamp(-1, 1) + l(x).clamp(min=l(x).mean())
    + torch.maximum(l(x), l(x).flip(1)) + l(x).abs().sqrt() + l(x).pow(3) + 1 / (l(x).abs() + 1)
    + l(x).sign() * l(x).square() + torch.atan(l(x)) + torch.erf(l(x)), lin()))
piece("indexing", SEQ, lambda: Call(
    lambda x, l: torch.cat([l(x)[:, [0, 2, 2, 5]], l(x)[:, 1:5:2],
                            l(x).gather(2, torch.tensor([[[0, 3, 1]]]).expand(x.shape[0], 6, 3)).repeat(1, 1, 6)
                            [..., :16][:, :2],
                            torch.index_select(l(x), 2, torch.tensor([1, 1, 4, 7] * 4)).narrow(1, 0, 1)], 1), lin()))
