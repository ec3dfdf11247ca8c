"""QAT modules: the quantized ops of a prepared model.

Every quantized op in a prepared graph is a ``call_module`` to one of these. Each owns
``activation_post_process``, the ``FakeQuantize`` of its output; weight modules also
own ``weight_fake_quant`` (per output channel). Inputs are already fake-quantized by
their producers; ``producer_fake_quants`` (set by ``prepare``) links to those
``FakeQuantize`` modules, so export and level-2 bias quantization know each input's
scale. With ``get_qconfig(in_dtype=...)`` a module also owns ``input_fake_quant``, one
per tensor input, which then takes the producers' place.

In VALIDATION below consistency level 2, a module whose fake quants are all frozen
computes the integer pipeline's own arithmetic instead (its ``fixed_point_grids``
and the ``numerics.fixed_point_*`` functions convert's parameters come from; export
marks the op ``qnt.exact``; docs/contract.md); the paths below are the forward
otherwise.

``exact`` (consistency level 2) runs the conv/linear/matmul/add/sub/mul forward in
float64 with the bias on the int32 grid ``s_in * s_w``: with power-of-two scales every
product and sum is then exact, and the output fake quant equals the integer kernel's
requantization bit for bit.

``exact_inputs`` (below level 2, set by ``prepare`` on the modules whose class has
``exact_below_level_2``: add/sub/mul/matmul/mean/sum) runs the same float64 forward
on the *exact* dequantized inputs: each float32 input ``fl32(q * s)`` is
fake-quantized again in float64 with its producer's scale, which gives ``q * s``
exactly. With non-power-of-two scales the float32 forward rounds the dequantized
inputs, the products/sums and the result before the output fake quant, and that
double rounding flips near-tie codes against the integer kernel convert emits (which
rounds once, from the exact accumulator).
"""

from __future__ import annotations

import contextlib
import math
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hbir.quantization.dtypes import qint32
from hbir.quantization.fake_quantize import FakeQuantize, fake_quantize
from hbir.quantization.observers import FixedScaleObserver
from hbir.quantization.options import current_options, using
from hbir.quantization.qconfig import QConfig
from hbir.quantization.rounding import get_round_mode
from hbir.runtime import numerics, requantizer, winograd

# The fixed-point forward's requantizations by the runtime's compiled form (the
# reference's numbers: ``numerics.requantize_by``).
_FAST = {"requant": requantizer.prepared_requantize}


class QATModule(nn.Module):
    """Shared quantization state of all QAT modules (a mixin for nn layers)."""

    op: ClassVar[str] = ""
    supports_exact: ClassVar[bool] = False
    exact_below_level_2: ClassVar[bool] = False

    def _init_quant(self, qconfig: QConfig) -> None:
        self.qconfig = qconfig
        self.activation_post_process = qconfig.activation()
        self.input_fake_quant: nn.ModuleList | None = None
        self.producer_fake_quants: tuple[FakeQuantize | None, ...] = ()
        self.exact = False
        self.exact_inputs = False

    def attach_input_fake_quants(self, count: int, producers=()) -> None:
        """Give the module its own input fake quants when the qconfig asks for
        them (``input_if_retyped``: only when a producer's dtype differs)."""
        specs = self.qconfig.input_specs(count)
        if specs is None or self.input_fake_quant is not None:
            return
        if self.qconfig.input_if_retyped and len(producers) == count:
            met = [
                p is not None and p.dtype == s.dtype
                for p, s in zip(producers, specs, strict=True)
            ]
            if all(met):
                return
        self.input_fake_quant = nn.ModuleList(spec() for spec in specs)

    def input_fake_quants(self) -> tuple[FakeQuantize | None, ...]:
        """The fake quant that defines each tensor input's scale, in argument order."""
        if self.input_fake_quant is not None:
            return tuple(self.input_fake_quant)
        return self.producer_fake_quants

    def _quant_inputs(self, *xs):
        if self.input_fake_quant is None:
            return xs
        fqs = iter(self.input_fake_quant)
        return tuple(next(fqs)(x) if torch.is_tensor(x) else x for x in xs)

    def _output(self, out: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.activation_post_process(out).to(dtype)


def _apply_relu(x: torch.Tensor, kind: str | None) -> torch.Tensor:
    if kind is None:
        return x
    if kind == "relu":
        return F.relu(x)
    if kind == "relu6":
        return F.relu6(x)
    raise ValueError(f"unknown fused activation {kind!r}")


def _float_dtype(*xs) -> torch.dtype:
    return next(x.dtype for x in xs if torch.is_tensor(x))


def _double(x):
    """A tensor in float64; a Python number as the float32 constant export emits."""
    return x.double() if torch.is_tensor(x) else float(torch.tensor(x).float())


def _exact_values(xs, fqs) -> tuple:
    """Tensors ``fl32(q * s)`` as the exact ``q * s`` in float64 (numbers: float32).

    ``fqs`` are the input fake quants in the order of the tensor inputs; a disabled
    (or missing) one leaves the tensor as it is, in float64.
    """
    fqs = iter(fqs)
    out = []
    for x in xs:
        if not torch.is_tensor(x):
            out.append(_double(x))
            continue
        fq = next(fqs, None)
        x = x.double()
        if fq is not None and bool(fq.fake_quant_enabled[0]):
            x = fake_quantize(
                x, fq.scale, fq.zero_point, fq.quant_min, fq.quant_max, fq.ch_axis
            )
        out.append(x)
    return tuple(out)


def _frozen_grid(fq) -> tuple[tuple[float, ...], int] | None:
    """(float32 scales, width) of a fake quant that rounds on a fixed symmetric
    signed grid of 8 or 16 bits (VALIDATION: enabled, not observing), else None."""
    if not isinstance(fq, FakeQuantize):
        return None
    if not fq.fake_quant_enabled[0] or fq.observer_enabled[0]:
        return None
    if bool(torch.any(fq.zero_point != 0)):
        return None
    bits = int(fq.quant_max).bit_length() + 1
    if bits not in (8, 16) or int(fq.quant_max) != (1 << (bits - 1)) - 1:
        return None
    if int(fq.quant_min) not in (-(1 << (bits - 1)), -(1 << (bits - 1)) + 1):
        return None  # the full or the narrow range
    scales = fq.scale.detach().cpu().to(torch.float32).reshape(-1).tolist()
    return tuple(scales), bits


@contextlib.contextmanager
def float_validation():
    """Evaluate VALIDATION with the float forward instead of the fixed-point one.

    Faster (no exact integer accumulation, no int64 requantization), but no longer
    bit-identical to ``quantized.bc``: a near tie can flip one code and the flip
    grows with depth. For quick accuracy scans and for measuring what the
    fixed-point forward costs; export inside this block writes no ``qnt.exact``
    marks, so ``qat.bc`` follows the float forward too. (A shim over the
    quantization options: ``using(fixed_point_validation=False)``.)
    """
    with using(fixed_point_validation=False):
        yield


def _grids(
    module: QATModule, fqs, fq_w=None, *, at_level_2: bool = False
) -> numerics.Grids | None:
    """The grids of ``module``'s fixed-point forward when the fake quants of its
    inputs (``fqs``), weight (``fq_w``, gemms) and output are all frozen
    (VALIDATION), per tensor except the weight, and the module is not at
    consistency level 2 (``exact``: float64 on power-of-two grids, exact
    already) unless ``at_level_2``; else None, and the forward stays float."""
    if (module.exact and not at_level_2) or module.training or not fqs:
        return None
    if not current_options().fixed_point_validation:
        return None
    grids = [_frozen_grid(fq) for fq in fqs]
    out = _frozen_grid(module.activation_post_process)
    if out is None or any(g is None or len(g[0]) != 1 for g in grids + [out]):
        return None
    weight, w_bits = (), 0
    if fq_w is not None:
        w = _frozen_grid(fq_w)
        if w is None:
            return None
        weight, w_bits = w
    return numerics.Grids(
        tuple(g[0][0] for g in grids),
        tuple(g[1] for g in grids),
        out[0][0],
        out[1],
        weight,
        w_bits,
    )


def gemm_grids(module: QATModule, fq_x, fq_w) -> numerics.Grids | None:
    """The grids of a gemm's fixed-point forward (``_grids``)."""
    if fq_w is None:
        return None
    return _grids(module, [fq_x], fq_w)


def _numpy(v) -> np.ndarray:
    """A tensor as a float32 array; a number as the float32 constant export emits."""
    if torch.is_tensor(v):
        return v.detach().cpu().float().numpy()
    return np.full((), np.float32(v), np.float32)


def _with_gradient(approx: torch.Tensor, exact: np.ndarray) -> torch.Tensor:
    """``exact`` (the integer pipeline's values) with ``approx``'s gradient when
    one is needed (straight through); a reduction over every dim is 0-d."""
    y = torch.from_numpy(np.asarray(exact)).to(approx.device)
    if torch.is_grad_enabled() and approx.requires_grad:
        return _Substitute.apply(approx, y)
    return y


class _Substitute(torch.autograd.Function):
    """Forward ``exact``; backward the gradient of ``approx`` (straight through)."""

    @staticmethod
    def forward(ctx, approx, exact):
        return exact.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _fixed_point(
    grids,
    x,
    w,
    bias,
    gemm,
    *,
    terms: int,
    axis: int,
    w_axis,
    w_out=0,
    w_codes=None,
    split=None,
    w_stats=None,
    exact=None,
):
    """The integer pipeline's output values (``numerics.fixed_point_gemm``) of
    ``gemm`` (a float conv / linear / matmul), with the float gemm's gradient
    when one is needed. ``w`` is the weight on its grid; with ``w_codes`` (its
    codes) ``w`` may be None when no gradient is needed."""

    def accumulate(a: np.ndarray, c: np.ndarray) -> np.ndarray:
        return gemm(torch.from_numpy(a), torch.from_numpy(c), None).numpy()

    y = numerics.fixed_point_gemm(
        grids,
        _numpy(x),
        _numpy(w) if w_codes is None else w_codes,
        accumulate,
        bias=None if bias is None else bias.detach().cpu().double().numpy(),
        terms=terms,
        axis=axis,
        w_axis=w_axis if len(grids.w_scales) > 1 else None,
        w_out_axis=w_out,
        w_codes=w_codes is not None,
        mode=get_round_mode(),
        output=requantizer.prepared_gemm_output,  # the runtime's compiled form
        split=split,
        w_stats=w_stats,
        exact=exact,
    )
    if w is not None and _grad_needed(x, w, bias):
        return _with_gradient(gemm(x, w, bias), y)
    return _with_gradient(x.detach(), y)


def _grad_needed(*tensors) -> bool:
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in tensors
    )


# ----------------------------------------------------------------- stubs


class QuantStub(QATModule):
    """Quantizes a float input: its ``activation_post_process`` sets the input scale."""

    op = "quantize"

    def __init__(self, qconfig: QConfig) -> None:
        super().__init__()
        self._init_quant(qconfig)

    @classmethod
    def from_float(cls, stub: nn.Module, qconfig: QConfig) -> QuantStub:
        scale = getattr(stub, "scale", None)
        if scale is not None:
            spec = qconfig.activation
            fixed = spec.replace(
                observer=FixedScaleObserver, observer_kwargs={"scale": scale}
            )
            qconfig = qconfig.replace(activation=fixed)
        return cls(qconfig)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation_post_process(x)


class DeQuantStub(nn.Module):
    """End of the quantized region: an identity whose output export marks as float."""

    op = "dequantize"
    qconfig = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


# ----------------------------------------------------------------- tables


class Embedding(QATModule):
    """``nn.Embedding``: rows of a table. The rows are the output's values, so the
    table is quantized as one tensor by the output's own fake quant (observing the
    table) and the looked-up rows keep its grid."""

    op = "embedding"

    def __init__(
        self, qconfig: QConfig, weight: nn.Parameter, padding_idx: int | None = None
    ) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.weight = weight
        self.padding_idx = padding_idx

    @classmethod
    def from_float(cls, mod: nn.Embedding, qconfig: QConfig) -> Embedding:
        return cls(qconfig, mod.weight, mod.padding_idx)

    def table(self) -> torch.Tensor:
        return self.activation_post_process(self.weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.table(), self.padding_idx)


# ----------------------------------------------------------------- weight layers


class _WeightLayer(QATModule):
    supports_exact = True
    weight_ch_axis: ClassVar[int] = 0

    def _init_weight_quant(self, qconfig: QConfig, channels: int) -> None:
        self._init_quant(qconfig)
        if qconfig.weight is None:
            raise ValueError(f"{type(self).__name__} needs a weight qconfig")
        self.weight_fake_quant = qconfig.weight(channels, ch_axis=self.weight_ch_axis)

    def _bias_scale(self) -> torch.Tensor:
        return self.weight_fake_quant.scale

    def _exact_bias(self) -> torch.Tensor | None:
        """The bias on the int32 grid ``numerics.bias_scale(s_in, s_w)``, as float64."""
        if self.bias is None:
            return None
        fq_in = self.input_fake_quants()[0] if self.input_fake_quants() else None
        fq_w = self.weight_fake_quant
        if fq_in is None or not (
            fq_in.fake_quant_enabled[0] and fq_w.fake_quant_enabled[0]
        ):
            return self.bias.double()
        s_in = fq_in.scale.detach().cpu().numpy()
        s_w = self._bias_scale().detach().cpu().numpy()
        scale = torch.from_numpy(numerics.bias_scale(s_in, s_w)).to(fq_in.scale.device)
        zero = torch.zeros(scale.shape, dtype=torch.int32)
        return fake_quantize(self.bias.double(), scale, zero, qint32.min, qint32.max, 0)

    def fixed_point_grids(self) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward (``gemm_grids``)."""
        if getattr(self, "padding_mode", "zeros") != "zeros":
            return None
        fqs = self.input_fake_quants()
        return gemm_grids(self, fqs[0] if fqs else None, self.weight_fake_quant)

    def _weight_codes(self) -> np.ndarray:
        """The weight's codes (float32), computed again only when the weight or
        its scale changed (their tensor versions)."""
        fq = self.weight_fake_quant
        key = (
            self.weight.data_ptr(),
            self.weight._version,
            fq.scale.data_ptr(),
            fq.scale._version,
            get_round_mode(),
        )
        cached = getattr(self, "_codes_cache", None)
        if cached is None or cached[0] != key:
            with torch.no_grad():
                codes = fq.codes(self.weight.detach()).cpu().numpy()
            cached = self._codes_cache = (key, codes)
        return cached[1]

    def _fixed_point_forward(self, grids, x, gemm, **layout) -> torch.Tensor:
        """The gemm's fixed-point forward on the (input-fake-quantized) ``x``."""
        bias = self.bias
        w = None
        if _grad_needed(x, self.weight, bias):
            w = self.weight_fake_quant(self.weight)
        codes = self._weight_codes()
        split = layout.get("split")
        w_axes = (layout.get("w_out", 0), None if split is None else split[1])
        stats = getattr(self, "_stats_cache", None)
        key = (id(codes), w_axes)
        if stats is None or stats[0] != key or stats[1] is not codes:
            stats = (key, codes, numerics.weight_sums(codes, *w_axes))
            self._stats_cache = stats  # (per weight version, as the codes)
        return _fixed_point(
            grids,
            x,
            w,
            bias,
            gemm,
            w_codes=codes,
            w_stats=stats[2],
            exact=self._exact_sums(grids, codes),
            **layout,
        )

    def _exact_sums(self, grids, codes: np.ndarray):
        """A faster exact engine for this layer's code sums (``fixed_point_gemm``'s
        ``exact``), or None: see ``Conv2d``."""
        return None

    def _inputs(self, x: torch.Tensor):
        """(input, fake-quantized weight, bias) in the forward's precision."""
        (x,) = self._quant_inputs(x)
        weight = self.weight_fake_quant(self.weight)
        if self.exact:
            return x.double(), weight.double(), self._exact_bias()
        return x, weight, self.bias

    def extra_repr(self) -> str:
        text = super().extra_repr()
        if getattr(self, "fused_relu", None):
            text += f", fused_relu={self.fused_relu}"
        return text + (", exact=True" if self.exact else "")


class Conv2d(_WeightLayer, nn.Conv2d):
    """Conv2d (BN folded in, optional fused relu/relu6) with per-channel weights."""

    op = "conv2d"

    def __init__(
        self, *args, qconfig: QConfig, fused_relu: str | None = None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self._init_weight_quant(qconfig, self.out_channels)
        self.fused_relu = fused_relu

    @classmethod
    def from_float(cls, mod: nn.Conv2d, qconfig: QConfig, fused_relu=None) -> Conv2d:
        qat = cls(
            mod.in_channels,
            mod.out_channels,
            mod.kernel_size,
            stride=mod.stride,
            padding=mod.padding,
            dilation=mod.dilation,
            groups=mod.groups,
            bias=mod.bias is not None,
            padding_mode=mod.padding_mode,
            qconfig=qconfig,
            fused_relu=fused_relu,
        )
        qat.weight, qat.bias = mod.weight, mod.bias
        return qat

    def _gemm(self, x, weight, bias):
        return F.conv2d(
            x, weight, bias, self.stride, self.padding, self.dilation, self.groups
        )

    def _exact_sums(self, grids, codes: np.ndarray):
        """A dense 3x3 stride-1 conv of 8-bit input codes sums them as the
        runtime's exact integer Winograd transform does (``runtime/winograd.py``,
        2.25x fewer multiply-adds than the float conv); its weight transform is
        made once per weight version (the codes' cache)."""
        # (the kernel size and each call's window: ``pack`` and ``takes``;
        # a strided conv is not worth transforming its weight for)
        if (
            grids.x_bits != 8
            or self.groups != 1
            or tuple(self.stride) != (1, 1)
            or isinstance(self.padding, str)
        ):
            return None
        cached = getattr(self, "_winograd_cache", None)
        if cached is None or cached[0] is not codes:
            cached = (codes, winograd.pack(codes.astype(np.int64), np.int8))
            self._winograd_cache = cached
        packed = cached[1]
        if packed is None:
            return None
        ph, pw = self.padding
        pads = (ph, pw, ph, pw)

        def sums(qx: np.ndarray, qw: np.ndarray) -> np.ndarray | None:
            xi = qx.astype(np.int8)  # (8-bit codes: exact)
            if qw is not codes or not packed.takes(
                xi, self.stride, pads, self.dilation
            ):
                return None
            return winograd.sums(xi, packed, pads, np.int64)

        return sums

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        grids = self.fixed_point_grids()
        if grids is None:
            x, weight, bias = self._inputs(x)
            out = self._conv_forward(x, weight, bias)
        else:
            (x,) = self._quant_inputs(x)
            terms = self.weight[0].numel()
            # (without groups: the sum over input channels splits into slices)
            split = (1, 1) if self.groups == 1 else None
            out = self._fixed_point_forward(
                grids, x, self._gemm, terms=terms, axis=1, w_axis=0, split=split
            )
        return self._output(_apply_relu(out, self.fused_relu), dtype)


class ComputedWeightConv2d(Conv2d):
    """A conv whose weight the graph computes each forward from the model's
    parameters (weight standardisation: timm's ``StdConv2d`` /
    ``ScaledStdConv2d``, ``F.conv2d(x, standardise(w))``): ``forward(x,
    weight)``, the weight fake-quantized per channel as any conv's and trained
    through the computation. Export reads the weight of the last forward (the
    one export's own forward computes from the parameters)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self.weight  # not a parameter: the graph's value, set per forward
        self.weight = None

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # a plain attribute, never a registered parameter (the weight may be one)
        self.__dict__["weight"] = weight
        try:
            return super().forward(x)
        finally:  # kept for export, off the autograd graph (copyable)
            self.__dict__["weight"] = weight.detach()

    def _exact_sums(self, grids, codes: np.ndarray):
        return None  # (a new weight every forward: its transform would not pay)

    def _weight_codes(self) -> np.ndarray:
        with torch.no_grad():  # a new tensor every forward: nothing to cache
            return self.weight_fake_quant.codes(self.weight.detach()).cpu().numpy()


class ConvTranspose2d(_WeightLayer, nn.ConvTranspose2d):
    """ConvTranspose2d; weights ``[in, out/groups, kh, kw]`` quantized along axis 1."""

    op = "conv_transpose2d"
    weight_ch_axis = 1

    def __init__(
        self, *args, qconfig: QConfig, fused_relu: str | None = None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self._init_weight_quant(qconfig, self.out_channels // self.groups)
        self.fused_relu = fused_relu

    @classmethod
    def from_float(cls, mod: nn.ConvTranspose2d, qconfig: QConfig, fused_relu=None):
        qat = cls(
            mod.in_channels,
            mod.out_channels,
            mod.kernel_size,
            stride=mod.stride,
            padding=mod.padding,
            output_padding=mod.output_padding,
            groups=mod.groups,
            bias=mod.bias is not None,
            dilation=mod.dilation,
            qconfig=qconfig,
            fused_relu=fused_relu,
        )
        qat.weight, qat.bias = mod.weight, mod.bias
        return qat

    def _bias_scale(self) -> torch.Tensor:
        # Output channel g * (out / groups) + j uses weight channel j.
        return self.weight_fake_quant.scale.repeat(self.groups)

    def _gemm(self, x, weight, bias):
        return F.conv_transpose2d(
            x,
            weight,
            bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            self.dilation,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        grids = self.fixed_point_grids()
        if grids is None:
            x, weight, bias = self._inputs(x)
            out = self._gemm(x, weight, bias)
        else:
            (x,) = self._quant_inputs(x)
            # Each output sums (C_in / groups) * kH * kW products.
            w = self.weight
            terms = w.shape[0] // self.groups * w[0, 0].numel()
            out = self._fixed_point_forward(
                grids, x, self._gemm, terms=terms, axis=1, w_axis=1, w_out=1
            )
        return self._output(_apply_relu(out, self.fused_relu), dtype)


class Linear(_WeightLayer, nn.Linear):
    """Linear (optional fused relu/relu6) with per-output-channel weights."""

    op = "linear"

    def __init__(
        self, *args, qconfig: QConfig, fused_relu: str | None = None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self._init_weight_quant(qconfig, self.out_features)
        self.fused_relu = fused_relu

    @classmethod
    def from_float(cls, mod: nn.Linear, qconfig: QConfig, fused_relu=None) -> Linear:
        qat = cls(
            mod.in_features,
            mod.out_features,
            bias=mod.bias is not None,
            qconfig=qconfig,
            fused_relu=fused_relu,
        )
        qat.weight, qat.bias = mod.weight, mod.bias
        return qat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        grids = self.fixed_point_grids()
        if grids is None:
            x, weight, bias = self._inputs(x)
            out = F.linear(x, weight, bias)
        else:
            (x,) = self._quant_inputs(x)
            terms = self.weight.shape[1]
            out = self._fixed_point_forward(
                grids, x, F.linear, terms=terms, axis=-1, w_axis=0, split=(-1, 1)
            )
        return self._output(_apply_relu(out, self.fused_relu), dtype)


class QuantAffine(_WeightLayer, nn.Module):
    """``x * weight + bias`` with a per-channel fake-quantized weight.

    The affine step of a layer-norm decomposition and the form a BatchNorm2d takes when
    it cannot be folded into a conv. ``view_shape`` broadcasts the weight against the
    input (``normalized_shape`` for layer norm, ``(C, 1, 1)`` for batch norm).

    Exact (consistency level 2) as the weight layers: float64 product and the bias on
    the int32 grid ``s_in * s_w[c]``, so convert lowers it to an integer multiply, an
    int32 bias add and one requantization, bit-identical.
    """

    op = "affine"

    def __init__(
        self,
        qconfig: QConfig,
        weight: nn.Parameter,
        bias: nn.Parameter | None,
        view_shape: tuple[int, ...],
    ) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.weight = weight
        self.bias = bias
        self.view_shape = tuple(view_shape)
        self.weight_fake_quant = qconfig.weight(weight.shape[0], ch_axis=0)

    @classmethod
    def from_batch_norm(
        cls, bn: nn.modules.batchnorm._BatchNorm, qconfig: QConfig, rank: int = 4
    ) -> QuantAffine:
        """The eval-mode batch norm ``x * g / sqrt(var + eps) + (b - mean * ...)`` of
        a rank-``rank`` input (channels in dim 1)."""
        inv_std = torch.rsqrt(bn.running_var + bn.eps)
        gamma = (
            bn.weight.detach() if bn.weight is not None else torch.ones_like(inv_std)
        )
        beta = bn.bias.detach() if bn.bias is not None else torch.zeros_like(inv_std)
        weight = nn.Parameter(gamma * inv_std)
        bias = nn.Parameter(beta - bn.running_mean * gamma * inv_std)
        return cls(qconfig, weight, bias, (-1,) + (1,) * (rank - 2))

    def channels_last(self) -> bool:
        """The weight broadcasts along the last dim (layer norm over one dim,
        batch norm of an ``(N, C)`` input)."""
        return self.view_shape in ((-1,), (self.weight.numel(),))

    def fixed_point_grids(self, rank: int = 4) -> numerics.Grids | None:
        """A per-channel affine in VALIDATION below level 2 is a depthwise 1x1
        conv (``x * w[c] + b[c]``) with the gemm's fixed-point forward
        (``gemm_grids``): over NCHW (``view_shape (-1, 1, 1)``) as it is, with
        the channels last through a reshape to ``(-1, C, 1, 1)`` (the same memory
        order). Export writes that conv; other layouts stay float."""
        nchw = self.view_shape == (-1, 1, 1) and rank == 4
        if self.weight.dim() != 1 or not (nchw or self.channels_last()):
            return None
        fqs = self.input_fake_quants()
        return gemm_grids(self, fqs[0] if fqs else None, self.weight_fake_quant)

    def depthwise(self, x, weight, bias):
        """``x * w[c] + b[c]`` over NCHW as the depthwise 1x1 conv it is."""
        w = weight.reshape(-1, 1, 1, 1)
        return F.conv2d(x, w, bias, groups=w.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        grids = self.fixed_point_grids(x.dim())
        if grids is not None:
            (x,) = self._quant_inputs(x)
            x4 = x
            if x.dim() != 4 or self.channels_last():
                x4 = x.reshape(-1, self.weight.numel(), 1, 1)
            out = self._fixed_point_forward(
                grids, x4, self.depthwise, terms=1, axis=1, w_axis=0
            )
            return self._output(out, dtype).reshape(x.shape)
        x, weight, bias = self._inputs(x)
        out = x * weight.reshape(self.view_shape)
        if bias is not None:
            out = out + bias.reshape(self.view_shape)
        return self._output(out, dtype)

    def extra_repr(self) -> str:
        text = f"view_shape={self.view_shape}, bias={self.bias is not None}"
        return text + (", exact=True" if self.exact else "")


# ----------------------------------------------------------------- pooling


class MaxPool2d(nn.MaxPool2d, QATModule):
    """Max pooling; its output has its own fake quant. With ``return_indices``
    it also returns torch's indices of its (fake-quantized) input, as int64:
    the first maximum of each window (``selection.max_pool_indices``)."""

    op = "max_pool2d"

    def __init__(self, *args, qconfig: QConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_quant(qconfig)

    @classmethod
    def from_float(cls, mod: nn.MaxPool2d, qconfig: QConfig) -> MaxPool2d:
        return cls(
            mod.kernel_size,
            mod.stride,
            mod.padding,
            mod.dilation,
            mod.return_indices,
            mod.ceil_mode,
            qconfig=qconfig,
        )

    def fixed_point_grids(self) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward: the pooled codes
        rescaled onto the output grid (``numerics.fixed_point_rescale``)."""
        return _grids(self, self.input_fake_quants()[:1])

    def forward(self, x: torch.Tensor):
        (x,) = self._quant_inputs(x)
        y = super().forward(x)
        y, indices = y if self.return_indices else (y, None)
        grids = self.fixed_point_grids()
        if grids is not None:
            mode = get_round_mode()
            y = _with_gradient(
                y, numerics.fixed_point_rescale(grids, _numpy(y), 0, mode=mode, **_FAST)
            )
        y = self.activation_post_process(y)
        return y if indices is None else (y, indices)


class AvgPool2d(nn.AvgPool2d, QATModule):
    op = "avg_pool2d"

    def __init__(self, *args, qconfig: QConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_quant(qconfig)

    @classmethod
    def from_float(cls, mod: nn.AvgPool2d, qconfig: QConfig) -> AvgPool2d:
        return cls(
            mod.kernel_size,
            mod.stride,
            mod.padding,
            mod.ceil_mode,
            mod.count_include_pad,
            mod.divisor_override,
            qconfig=qconfig,
        )

    def fixed_point_grids(self) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward: the codes on the fine
        grid, the integer window average, one requantization
        (``numerics.fixed_point_avg_pool``)."""
        if self.divisor_override is not None:
            return None
        grids = _grids(self, self.input_fake_quants()[:1])
        kernel = _pair(self.kernel_size)
        window = kernel[0] * kernel[1]
        if grids is None or numerics.avg_pool_fine_bits(grids.x_bits, window) is None:
            return None  # convert leaves it float (no 32-bit fine grid)
        return grids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (x,) = self._quant_inputs(x)
        y = super().forward(x)
        grids = self.fixed_point_grids() if x.dim() == 4 else None
        if grids is not None:
            exact = numerics.fixed_point_avg_pool(
                grids,
                _numpy(x),
                _pair(self.kernel_size),
                _pair(self.kernel_size if self.stride is None else self.stride),
                _pair(self.padding),
                bool(self.count_include_pad),
                tuple(y.shape[2:]),
                get_round_mode(),
            )
            y = _with_gradient(y, exact)
        return self.activation_post_process(y)


class AdaptiveAvgPool2d(nn.AdaptiveAvgPool2d, QATModule):
    op = "adaptive_avg_pool2d"

    def __init__(self, output_size, *, qconfig: QConfig):
        super().__init__(output_size)
        self._init_quant(qconfig)

    @classmethod
    def from_float(
        cls, mod: nn.AdaptiveAvgPool2d, qconfig: QConfig
    ) -> AdaptiveAvgPool2d:
        return cls(mod.output_size, qconfig=qconfig)

    def fixed_point_grids(self) -> numerics.Grids | None:
        """A global pool's fixed-point VALIDATION forward
        (``numerics.fixed_point_mean``)."""
        if _pair(self.output_size) != (1, 1):
            return None
        return _grids(self, self.input_fake_quants()[:1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (x,) = self._quant_inputs(x)
        y = super().forward(x)
        grids = self.fixed_point_grids() if x.dim() == 4 else None
        if grids is not None:
            count = x.shape[2] * x.shape[3]
            exact = numerics.fixed_point_mean(
                grids, _numpy(x), (2, 3), True, count, get_round_mode()
            )
            y = _with_gradient(y, exact)
        return self.activation_post_process(y)


def _pair(v) -> tuple:
    return tuple(v) if isinstance(v, list | tuple) else (v, v)


class Resize(QATModule):
    """Bilinear or bicubic ``F.interpolate``: values off the input grid, so its own
    output fake quant. It interpolates the input's exact values ``q * s`` with the
    NPU's integer weights (``numerics.resize_taps``, in units of 2**-7) in float64;
    in VALIDATION it computes the integer pipeline's numbers
    (``numerics.fixed_point_resize``: the exact integer sum, one 31-bit
    requantization), so deployment computes the same codes even at a tie."""

    op = "resize"

    def __init__(
        self, qconfig: QConfig, size, scale_factor, mode: str, align_corners
    ) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.size, self.scale_factor = size, scale_factor
        self.mode, self.align_corners = mode, align_corners

    def output_size(self, x: torch.Tensor, size=None) -> tuple[int, int]:
        size = self.size if size is None else size
        if size is not None:
            return (size, size) if isinstance(size, int) else tuple(size)
        h, w = x.shape[2:]
        sh, sw = self.scales()
        return math.floor(h * sh), math.floor(w * sw)

    def scales(self) -> tuple[float | None, float | None]:
        s = self.scale_factor
        if s is None:
            return None, None
        return (float(s), float(s)) if isinstance(s, int | float) else tuple(s)

    def fixed_point_grids(self) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward
        (``numerics.fixed_point_resize``)."""
        return _grids(self, self.input_fake_quants()[:1])

    def forward(self, x: torch.Tensor, size=None) -> torch.Tensor:
        """``size``: an output size computed in the graph (``skip.shape[2:]``)."""
        (x,) = self._quant_inputs(x)
        # q * s exactly (float32 holds it rounded), so the sums below are exact
        dtype, (y,) = x.dtype, _exact_values([x], self.input_fake_quants())
        corners = bool(self.align_corners)
        taps = [
            numerics.resize_taps(self.mode, x.shape[dim], out, corners, scale)
            for dim, out, scale in zip(
                (2, 3), self.output_size(x, size), self.scales(), strict=True
            )
        ]
        for dim, t in zip((2, 3), taps, strict=True):
            y = _interpolate_along(y, dim, t)
        grids = self.fixed_point_grids() if x.dim() == 4 else None
        if grids is not None:
            exact = numerics.fixed_point_resize(
                grids, _numpy(x), *taps, get_round_mode()
            )
            y = _with_gradient(y.to(dtype), exact)
        return self._output(y, dtype)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, align_corners={self.align_corners}"


class GridSample(QATModule):
    """``F.grid_sample``: values off the input grid, so its own output fake quant.
    It samples the input's exact values ``q * s`` at the coordinates of the grid's
    exact values with the NPU's integer weights (``numerics.grid_sample_sum``, in
    float64: exact); in VALIDATION it computes the integer pipeline's numbers
    (``numerics.fixed_point_grid_sample``). The gradient is torch's
    ``grid_sample``'s, for the input and the grid (learned offsets train)."""

    op = "grid_sample"

    def __init__(
        self, qconfig: QConfig, mode: str, padding_mode: str, align_corners: bool
    ) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.mode, self.padding_mode = mode, padding_mode
        self.align_corners = bool(align_corners)

    def fixed_point_grids(self) -> numerics.Grids | None:
        return _grids(self, self.input_fake_quants()[:2])

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        x, grid = self._quant_inputs(x, grid)
        dtype = x.dtype
        how = (self.align_corners, self.padding_mode, self.mode)
        grids = self.fixed_point_grids()
        if grids is not None:
            y = numerics.fixed_point_grid_sample(
                grids, _numpy(x), _numpy(grid), *how, get_round_mode()
            )
        else:
            xs, gs = _exact_values([x, grid], self.input_fake_quants())
            y = numerics.grid_sample_sum(
                xs.detach().cpu().numpy(), gs.detach().cpu().numpy(), *how
            ).astype(np.float32)
        if not _grad_needed(x, grid):  # (VALIDATION: the exact numbers only)
            return self._output(_with_gradient(x.detach(), y), dtype)
        approx = F.grid_sample(
            x,
            grid,
            mode=self.mode,
            padding_mode=self.padding_mode,
            align_corners=self.align_corners,
        )
        return self._output(_with_gradient(approx, y), dtype)

    def extra_repr(self) -> str:
        return (
            f"mode={self.mode!r}, padding_mode={self.padding_mode!r}, "
            f"align_corners={self.align_corners}"
        )


def _interpolate_along(y: torch.Tensor, dim: int, taps) -> torch.Tensor:
    """``numerics.resize_weighted`` along one dim, in torch (for gradients)."""
    index, weight = (torch.from_numpy(t) for t in taps)
    shape = [1] * y.dim()
    shape[dim] = -1
    total = 0
    for k in range(index.shape[1]):
        w = weight[:, k].to(y.dtype).reshape(shape)
        total = total + y.index_select(dim, index[:, k]) * w
    return total / (1 << numerics.BILINEAR_BITS)


# ----------------------------------------------------------------- elementwise


class Clamp(QATModule):
    """``clamp(x, min_value, max_value)`` (either bound may be None)."""

    op = "clamp"

    def __init__(self, qconfig: QConfig, min_value=None, max_value=None) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.min_value, self.max_value = min_value, max_value

    def fixed_point_grids(self) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward: the input's codes
        rescaled onto the output grid, clipped (``numerics.rescale``)."""
        fqs = self.input_fake_quants()
        return _grids(self, fqs[:1])

    def bounds(self) -> tuple[float, float]:
        lo = -math.inf if self.min_value is None else float(self.min_value)
        hi = math.inf if self.max_value is None else float(self.max_value)
        return lo, hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (x,) = self._quant_inputs(x)
        grids = self.fixed_point_grids()
        if grids is None:
            y = torch.clamp(x, self.min_value, self.max_value)
        else:
            y = _with_gradient(
                torch.clamp(x, self.min_value, self.max_value),
                numerics.fixed_point_clip(
                    grids, _numpy(x), *self.bounds(), get_round_mode(), **_FAST
                ),
            )
        return self.activation_post_process(y)

    def extra_repr(self) -> str:
        return f"min_value={self.min_value}, max_value={self.max_value}"


class Abs(QATModule):
    """``|x|`` with its own output fake quant (``|qmin|`` is off the input grid)."""

    op = "abs"

    def __init__(self, qconfig: QConfig) -> None:
        super().__init__()
        self._init_quant(qconfig)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (x,) = self._quant_inputs(x)
        return self.activation_post_process(torch.abs(x))


class ConstantPad(QATModule):
    """``F.pad`` with a nonzero value, with its own output fake quant (the value is
    off the input grid); exported as the value's blocks concatenated with the
    input, so convert quantizes the value onto the output grid like any
    constant."""

    op = "constant_pad"

    def __init__(self, qconfig: QConfig, pad: tuple[int, ...], value: float) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.pad, self.value = tuple(pad), float(value)

    def fixed_point_grids(self) -> numerics.Grids | None:
        """The input's codes rescaled onto the output grid
        (``numerics.fixed_point_rescale``, as a concat's inputs)."""
        fqs = self.input_fake_quants()
        return _grids(self, fqs[:1]) if fqs else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (x,) = self._quant_inputs(x)
        grids = self.fixed_point_grids()
        if grids is not None:  # the input requantized to the output grid, as convert
            mode = get_round_mode()
            exact = numerics.fixed_point_rescale(
                grids, _numpy(x), 0, mode=mode, **_FAST
            )
            x = _with_gradient(x, exact)
        return self.activation_post_process(F.pad(x, self.pad, value=self.value))

    def extra_repr(self) -> str:
        return f"pad={self.pad}, value={self.value}"


class QuantSelect(QATModule):
    """``where(mask, a, b)`` / ``masked_fill`` with a computed mask (a comparison):
    each value onto the output grid first (a tensor rescaled as the integer
    pipeline rescales it, ``numerics.fixed_point_rescale``, in VALIDATION; a
    number fake-quantized by the output's fake quant), then a selection of those
    values, which the output's fake quant leaves as they are."""

    op = "where"

    def __init__(self, qconfig: QConfig, tensors: tuple[bool, bool]) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.tensors = tuple(tensors)

    def branch_grids(self, index: int) -> numerics.Grids | None:
        """The grids of value ``index``'s rescale (its producer's, the output's)."""
        if not self.tensors[index]:
            return None
        fqs = self.input_fake_quants()
        return _grids(self, fqs[sum(self.tensors[:index]) :][:1])

    def _branch(self, v, index: int) -> torch.Tensor:
        if not self.tensors[index]:  # a fill value: onto the output grid
            return self.activation_post_process(torch.tensor(float(v)))
        grids = self.branch_grids(index)
        if grids is None:
            return v
        mode = get_round_mode()
        exact = numerics.fixed_point_rescale(grids, _numpy(v), 0, mode=mode, **_FAST)
        return _with_gradient(v, exact)

    def forward(self, mask: torch.Tensor, a, b) -> torch.Tensor:
        ins = [v for v, t in zip((a, b), self.tensors, strict=True) if t]
        it = iter(self._quant_inputs(*ins))
        a, b = (next(it) if t else v for v, t in zip((a, b), self.tensors, strict=True))
        y = torch.where(mask, self._branch(a, 0), self._branch(b, 1))
        return self.activation_post_process(y)


class ReLU(Clamp):
    op = "relu"

    def __init__(self, qconfig: QConfig) -> None:
        super().__init__(qconfig, 0.0, None)


class ReLU6(Clamp):
    op = "relu6"

    def __init__(self, qconfig: QConfig) -> None:
        super().__init__(qconfig, 0.0, 6.0)


class _Binary(QATModule):
    """A two-operand op; either operand may be a Python number."""

    supports_exact = True
    exact_below_level_2 = True

    def __init__(self, qconfig: QConfig) -> None:
        super().__init__()
        self._init_quant(qconfig)

    def compute(self, a, b) -> torch.Tensor:
        raise NotImplementedError

    def fixed_point_grids(self, a, b) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward of ``a op b`` (add /
        sub / mul: ``numerics.fixed_point_binary``); a Python number operand is a
        float constant (scale 0). With a constant also at consistency level 2,
        whose float64 forward would add it exactly."""
        if self.op not in numerics.FIXED_POINT_BINARY_KINDS:
            return None
        numbers = [isinstance(v, int | float) for v in (a, b)]
        if all(numbers):
            return None
        if self.op == "mul" and any(
            n and float(np.float32(v)) == 0.0
            for v, n in zip((a, b), numbers, strict=True)
        ):
            return None  # convert keeps a product by zero in float
        # At level 2 too: a float constant is not on any power-of-two grid
        # (0.1), and the integer add puts it on its accumulation grid first.
        fqs = self.input_fake_quants()[: numbers.count(False)]
        if len(fqs) != numbers.count(False):
            return None  # a tensor operand without fake quant (a constant)
        grids = _grids(self, fqs, at_level_2=any(numbers))
        if grids is None:
            return None
        scales, bits = iter(grids.in_scales), iter(grids.in_bits)
        in_scales = tuple(0.0 if n else next(scales) for n in numbers)
        in_bits = tuple(32 if n else next(bits) for n in numbers)
        return numerics.Grids(in_scales, in_bits, grids.out_scale, grids.out_bits)

    def forward(self, a, b) -> torch.Tensor:
        a, b = self._quant_inputs(a, b)
        dtype = _float_dtype(a, b)
        grids = self.fixed_point_grids(a, b)
        if grids is not None:
            y = numerics.fixed_point_binary(
                self.op, grids, _numpy(a), _numpy(b), get_round_mode(), **_FAST
            )
            return self._output(_with_gradient(self.compute(a, b), y), dtype)
        if self.exact_inputs:
            a, b = _exact_values((a, b), self.input_fake_quants())
        elif self.exact:
            a, b = _double(a), _double(b)
        return self._output(self.compute(a, b), dtype)

    def extra_repr(self) -> str:
        return _exact_repr(self)


def _exact_repr(mod: QATModule) -> str:
    if mod.exact_inputs:
        return "exact_inputs=True"
    return "exact=True" if mod.exact else ""


class QuantAdd(_Binary):
    op = "add"

    def compute(self, a, b):
        return a + b


class QuantSub(_Binary):
    op = "sub"

    def compute(self, a, b):
        return a - b


class QuantMul(_Binary):
    op = "mul"

    def compute(self, a, b):
        return a * b


class QuantMaximum(_Binary):
    op = "maximum"

    def compute(self, a, b):
        return torch.maximum(*_tensors(a, b))


class QuantMinimum(_Binary):
    op = "minimum"

    def compute(self, a, b):
        return torch.minimum(*_tensors(a, b))


def _tensors(a, b) -> tuple[torch.Tensor, torch.Tensor]:
    """Both operands as tensors (torch.maximum takes no Python number)."""
    like = a if isinstance(a, torch.Tensor) else b
    return tuple(
        v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=like.dtype)
        for v in (a, b)
    )


class QuantMatmul(_Binary):
    op = "matmul"

    def compute(self, a, b):
        return torch.matmul(a, b)

    def fixed_point_grids(self, a=None, b=None) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward (``gemm_grids``), the
        right operand in the weight's place."""
        if isinstance(a, int | float) or isinstance(b, int | float):
            return None
        fqs = tuple(self.input_fake_quants()) + (None, None)
        return gemm_grids(self, fqs[0], fqs[1])

    def forward(self, a, b) -> torch.Tensor:
        grids = self.fixed_point_grids(a, b)
        if grids is None:
            return super().forward(a, b)
        a, b = self._quant_inputs(a, b)
        out = _fixed_point(
            grids,
            a,
            b,
            None,
            _matmul,
            terms=a.shape[-1],
            axis=-1,
            w_axis=None,
            w_out=-1,
        )
        return self._output(out, a.dtype)


def _matmul(a, b, bias):
    return torch.matmul(a, b)


class QuantCat(QATModule):
    """``torch.cat(tensors, dim)``: one output scale for all inputs."""

    op = "cat"

    def __init__(self, qconfig: QConfig, dim: int = 0) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.dim = dim

    def fixed_point_grids(self, count: int) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward: each input's codes
        rescaled onto the output grid (``numerics.fixed_point_rescale``)."""
        fqs = self.input_fake_quants()
        return _grids(self, fqs[:count]) if len(fqs) >= count else None

    def forward(self, tensors) -> torch.Tensor:
        tensors = self._quant_inputs(*tensors)
        grids = self.fixed_point_grids(len(tensors))
        if grids is not None:
            mode = get_round_mode()
            tensors = [
                _with_gradient(
                    t,
                    numerics.fixed_point_rescale(
                        grids, _numpy(t), i, mode=mode, **_FAST
                    ),
                )
                for i, t in enumerate(tensors)
            ]
        return self.activation_post_process(torch.cat(tensors, self.dim))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class QuantStack(QuantCat):
    """``torch.stack(tensors, dim)``: ``QuantCat`` of the inputs, each given a dim
    of size 1 at ``dim`` (the same codes, one output scale)."""

    op = "stack"

    def forward(self, tensors) -> torch.Tensor:
        return super().forward([t.unsqueeze(self.dim) for t in tensors])


class _Reduce(QATModule):
    """A sum-like reduction; exact (float64 from exact inputs) as the binary ops."""

    supports_exact = True
    exact_below_level_2 = True

    def __init__(self, qconfig: QConfig, dim=None, keepdim: bool = False) -> None:
        super().__init__()
        self._init_quant(qconfig)
        self.dim = tuple(dim) if isinstance(dim, list | tuple) else dim
        self.keepdim = keepdim

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    divides: ClassVar[bool] = True  # a mean; a sum does not

    def fixed_point_grids(self) -> numerics.Grids | None:
        """The grids of the fixed-point VALIDATION forward
        (``numerics.fixed_point_mean``)."""
        return _grids(self, self.input_fake_quants()[:1])

    def dims(self, rank: int) -> tuple[int, ...]:
        dims = range(rank) if self.dim is None else self.dim
        dims = [dims] if isinstance(dims, int) else list(dims)
        return tuple(d % rank for d in dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (x,) = self._quant_inputs(x)
        dtype = x.dtype
        grids = self.fixed_point_grids()
        if grids is not None:
            dims = self.dims(x.dim())
            count = math.prod(x.shape[d] for d in dims) if self.divides else 1
            keepdim = bool(self.keepdim) and self.dim is not None
            exact = numerics.fixed_point_mean(
                grids, _numpy(x), dims, keepdim, count, get_round_mode()
            )
            return self._output(_with_gradient(self.reduce(x), exact), dtype)
        if self.exact_inputs:
            (x,) = _exact_values((x,), self.input_fake_quants())
        elif self.exact:
            x = x.double()
        return self._output(self.reduce(x), dtype)

    def extra_repr(self) -> str:
        text = _exact_repr(self)
        return f"dim={self.dim}, keepdim={self.keepdim}" + (", " + text if text else "")


class QuantMean(_Reduce):
    op = "mean"

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.dim is None:
            return x.mean()
        return x.mean(self.dim, self.keepdim)


class QuantSum(_Reduce):
    op = "sum"
    divides = False

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.dim is None:
            return x.sum()
        return x.sum(self.dim, self.keepdim)
