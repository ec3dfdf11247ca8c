"""Fake quantization: round to the integer grid and back, with straight-through grads.

Half-to-even (default) calls ``torch.fake_quantize_per_tensor_affine`` /
``torch.fake_quantize_per_channel_affine``, so it is bit-identical to torch by
construction: ``clamp(rint(fl32(x * fl32(1/s))) + zp, qmin, qmax) - zp) * s``, which is
``hbir.runtime.numerics.fake_quant``. The legacy half-up mode computes
``floor(x * fl32(1/s) + 0.5)`` (computed without rounding the addition) in the
input's dtype, and float64 inputs (the exact
accumulators of consistency level 2, int32 biases) round and dequantize in float64.
All pass gradients where the rounded code lies inside ``[qmin, qmax]`` and block them
elsewhere.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from hbir.quantization.dtypes import QuantDType, qint8
from hbir.quantization.observers import MovingAverageMinMaxObserver
from hbir.quantization.rounding import get_round_mode, set_round_mode
from hbir.runtime import numerics, requantizer


def fake_quantize(
    x: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor,
    quant_min: int,
    quant_max: int,
    ch_axis: int = -1,
) -> torch.Tensor:
    """Fake-quantize ``x`` per tensor (``ch_axis=-1``) or per channel along ``ch_axis``.

    float64 inputs (level-2 accumulators, int32 biases) are rounded and dequantized in
    float64: torch's kernels dequantize in float32, which is wrong above 2**24 codes.
    """
    mode = get_round_mode()
    if mode == numerics.HALF_UP or x.dtype == torch.float64:
        return _ReferenceFakeQuantize.apply(
            x, scale, zero_point, quant_min, quant_max, ch_axis, mode
        )
    zero_point = zero_point.to(torch.int32)
    if ch_axis < 0 and not (torch.is_grad_enabled() and x.requires_grad):
        y = _compiled_per_tensor(x, scale, zero_point, quant_min, quant_max)
        if y is not None:
            return y
    if ch_axis < 0:
        return torch.fake_quantize_per_tensor_affine(
            x, scale, zero_point, quant_min, quant_max
        )
    return torch.fake_quantize_per_channel_affine(
        x, scale, zero_point, ch_axis, quant_min, quant_max
    )


def _compiled_per_tensor(x, scale, zero_point, quant_min, quant_max):
    """``torch.fake_quantize_per_tensor_affine(x, ...)`` where no gradient is
    needed, as one compiled pass (``runtime/jit_kernels.fake_quantize``, the
    same float32 arithmetic; torch's kernel is ~10x slower, rounding scalar by
    scalar); None where it does not apply (no compiled loops, not a dense
    float32 CPU tensor, a scale or zero point of several values)."""
    jit = requantizer.loops()
    if (
        jit is None
        or x.dtype != torch.float32
        or x.device.type != "cpu"
        or not (x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last))
        or scale.numel() != 1
        or zero_point.numel() != 1
    ):
        return None
    s = np.float32(scale.item())
    zero = np.float32(zero_point.item())
    y = torch.empty_like(x)  # (of x's strides)
    xm, ym = x.detach(), y
    if not x.is_contiguous():  # channels-last memory: NHWC is its order
        xm, ym = xm.permute(0, 2, 3, 1), ym.permute(0, 2, 3, 1)
    jit.fake_quantize(
        xm.numpy().reshape(-1),
        np.float32(1.0) / s,
        s,
        zero,
        np.float32(quant_min),
        np.float32(quant_max),
        ym.numpy().reshape(-1),
    )
    return y


def _along(values: torch.Tensor, x: torch.Tensor, ch_axis: int) -> torch.Tensor:
    if ch_axis < 0:
        return values.reshape(())
    shape = [1] * x.dim()
    shape[ch_axis] = -1
    return values.reshape(shape)


def _round_half_up(v: torch.Tensor) -> torch.Tensor:
    """``floor(v + 0.5)`` without rounding in the addition (as numerics.round_float)."""
    floor = torch.floor(v)
    return floor + (v - floor >= 0.5).to(v.dtype)


class _ReferenceFakeQuantize(torch.autograd.Function):
    """``round(x * fl32(1/s)) + zp``, clamp, dequantize, all in the input's dtype.

    Half-up is the legacy (``legacy_round``) ``floor(v + 0.5)``; half-even is
    ``torch.round``. Gradients pass where the unclamped code is in range.
    """

    @staticmethod
    def forward(ctx, x, scale, zero_point, quant_min, quant_max, ch_axis, mode):
        inv = _along(1.0 / scale.float(), x, ch_axis).to(x.dtype)
        zp = _along(zero_point, x, ch_axis).to(x.dtype)
        v = x * inv
        code = _round_half_up(v) if mode == numerics.HALF_UP else torch.round(v)
        code = code + zp
        inside = (code >= quant_min) & (code <= quant_max)
        ctx.save_for_backward(inside)
        s = _along(scale.float(), x, ch_axis).to(x.dtype)
        return (code.clamp(quant_min, quant_max) - zp) * s

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        return grad * inside, None, None, None, None, None, None


class FakeQuantize(nn.Module):
    """Observe a tensor, keep its scale, and fake-quantize it.

    ``fake_quant_enabled`` and ``observer_enabled`` (uint8 buffers) select what a
    forward does; :func:`hbir.quantization.set_fake_quantize` sets them per
    :class:`FakeQuantState`. ``scale`` (float32) and ``zero_point`` (int64) hold one
    entry per channel; per-tensor fake quants have ``ch_axis = -1`` and one entry.
    The nested observer is ``activation_post_process``, as in the reference toolchain.
    """

    _version = 2

    def __init__(
        self,
        observer: type[nn.Module] = MovingAverageMinMaxObserver,
        dtype: QuantDType = qint8,
        channel_len: int = 1,
        **observer_kwargs,
    ) -> None:
        super().__init__()
        self.activation_post_process = observer(dtype=dtype, **observer_kwargs)
        self.dtype = dtype
        self.quant_min, self.quant_max = dtype.min, dtype.max
        self.qscheme = self.activation_post_process.qscheme
        self.ch_axis = self.activation_post_process.ch_axis
        self.register_buffer("fake_quant_enabled", torch.tensor([1], dtype=torch.uint8))
        self.register_buffer("observer_enabled", torch.tensor([1], dtype=torch.uint8))
        self.register_buffer("scale", torch.ones(channel_len, dtype=torch.float32))
        self.register_buffer("zero_point", torch.zeros(channel_len, dtype=torch.long))
        # Set by set_fake_quantize: the FakeQuantState, whether it needs train() mode,
        # and this module's name for error messages.
        self._state = None
        self._needs_training: bool | None = None
        self._name = ""
        if self.activation_post_process.has_data():
            self._update_qparams()

    @property
    def pot(self) -> bool:
        return bool(self.activation_post_process.pot)

    def enable_fake_quant(self, enabled: bool = True) -> FakeQuantize:
        self.fake_quant_enabled[0] = int(enabled)
        return self

    def enable_observer(self, enabled: bool = True) -> FakeQuantize:
        self.observer_enabled[0] = int(enabled)
        return self

    def configure(
        self, state, fake_quant: bool, observe: bool, needs_training: bool, name: str
    ):
        """Used by ``set_fake_quantize``: switch both flags and remember the state."""
        self.enable_fake_quant(fake_quant)
        self.enable_observer(observe)
        self._state, self._needs_training, self._name = state, needs_training, name

    def reset_dtype(self, dtype: QuantDType, update_scale: bool = True) -> None:
        """Switch to ``dtype`` (e.g. int8 -> int16 after a sensitivity run); with
        ``update_scale`` the scale is recomputed from what the observer saw."""
        self.dtype = self.activation_post_process.dtype = dtype
        self.quant_min, self.quant_max = dtype.min, dtype.max
        if update_scale and self.activation_post_process.has_data():
            self._update_qparams()

    def _update_qparams(self) -> None:
        scale, zero_point = self.activation_post_process.calculate_qparams()
        if self.scale.shape != scale.shape:
            self.scale.resize_(scale.shape)
            self.zero_point.resize_(zero_point.shape)
        self.scale.copy_(scale)
        self.zero_point.copy_(zero_point)

    def _check_mode(self) -> None:
        if self._needs_training is None or self._needs_training == self.training:
            return
        name = self._name or "a FakeQuantize"
        state = f"FakeQuantState.{self._state.name}"
        if self._needs_training:
            raise RuntimeError(
                f"{name} is in {state}, which trains, but the model is in eval "
                f"mode: call model.train() (or set_fake_quantize(model, "
                f"FakeQuantState.VALIDATION) to evaluate)"
            )
        raise RuntimeError(
            f"{name} is in {state}, which needs eval mode, but the model is in train "
            f"mode: call model.eval() (or set_fake_quantize(model, FakeQuantState.QAT) "
            f"to train)"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_mode()
        if self.observer_enabled[0]:
            self.activation_post_process(x.detach())
            if self.activation_post_process.has_data():
                self._update_qparams()
        if self.fake_quant_enabled[0]:
            x = fake_quantize(
                x,
                self.scale,
                self.zero_point,
                self.quant_min,
                self.quant_max,
                self.ch_axis,
            )
        return x

    def codes(self, x: torch.Tensor) -> torch.Tensor:
        """The integer codes (float32) this fake quant rounds float32 ``x`` to:
        ``clamp(round(x * fl32(1/s)) + zp, qmin, qmax) - zp``, the same rounding
        as ``forward`` (torch's kernels compute ``nearbyint(x * (1.0f / s))``)."""
        inv = _along(1.0 / self.scale.float(), x, self.ch_axis)
        zp = _along(self.zero_point, x, self.ch_axis).float()
        v = x.float() * inv
        code = _round_half_up(v) if get_round_mode() == numerics.HALF_UP else v.round()
        return (code + zp).clamp(self.quant_min, self.quant_max) - zp

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, *args, **kwargs
    ):
        version = local_metadata.get("version")
        if version is not None and version < 2:
            # Checkpoints of the first version were trained with half-up rounding.
            warnings.warn(
                f"{prefix or 'FakeQuantize'}: checkpoint version {version} < 2 was "
                "trained with half-up rounding; switching to set_round_mode('half_up')",
                stacklevel=2,
            )
            set_round_mode(numerics.HALF_UP)
        for name in ("scale", "zero_point"):
            saved = state_dict.get(prefix + name)
            if saved is not None and saved.shape != self._buffers[name].shape:
                self._buffers[name].resize_(saved.shape)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, *args, **kwargs
        )

    def extra_repr(self) -> str:
        return (
            f"fake_quant_enabled={self.fake_quant_enabled}, "
            f"observer_enabled={self.observer_enabled}, quant_min={self.quant_min}, "
            f"quant_max={self.quant_max}, dtype={self.dtype}, qscheme={self.qscheme}, "
            f"ch_axis={self.ch_axis}, scale={self.scale}, zero_point={self.zero_point}"
        )
