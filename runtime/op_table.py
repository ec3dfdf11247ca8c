"""The op table: one entry per op, the one place every layer reads what an op is.

An entry binds

* ``op``: the name ``prepare`` gives the op (generated module names, qconfig type
  rules, ``model_check_result.txt``);
* ``hbir``: the hbir op export imports it as (None: imports as nothing, an
  identity);
* ``lowering``: how ``convert`` brings that hbir op to fixed point (the family, and
  so the pass, that lowers it; ``FLOAT`` ops stay float CPU islands);
* ``torch``: the torch spellings ``prepare`` and ``export`` take for it, as text
  (``"nn.Conv2d"``, ``"F.relu"``, ``"torch.sigmoid"``, ``"operator.add"``,
  ``"Tensor.view"``), resolved on the torch side so this module imports neither
  torch nor xDSL;
* ``quantized``: how ``prepare`` quantizes it: ``MODULE`` (a QAT module with its own
  output fake quant), ``DECOMPOSED`` (a chain of QAT modules), ``PASSTHROUGH``
  (moves or selects values: keeps the producer's scale), ``INDEX`` (integer
  arithmetic on index tensors, never on values) or ``NONE`` (prepare never sees
  it: IR-only ops);
* ``lut``: the lookup table that evaluates it in fixed point, a key of
  ``numerics.LUT_FUNCTIONS`` (``gelu`` with ``approximate="tanh"`` uses
  ``gelu_tanh``);
* ``cpu``: why the hbir op runs on the CPU in ``model.hbm`` even on integer codes
  (an ``npu.cpu_call`` with this reason). None: ``npu-lower`` has a rule for it
  (``FLOAT`` ops without one are float CPU islands). An integer op with neither is
  a located compile error, never a silent island.

Everything else is derived from here: the dialect's table names and LUT op set, the
interpreter's rounding-dependent kernels, the convert passes' op sets, prepare's
rule tables and export's importers. ``docs/adding-ops.md`` shows how to add an op.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---- convert lowering families (the pass that lowers the op)
GEMM = "gemm"  # convert-gemm: int8/int16 operands, int32 accumulator, requantize
ELEMENTWISE = "elementwise"  # convert-elementwise: add/sub/mul on aligned codes
POOL = "pool"  # convert-pool: sums and means (int32 sum, then requantize)
LUT = "lut"  # convert-lut: a lookup table on the input codes
CLAMP = "clamp"  # fold-requantize: relu/clip become the requantization's bounds
MOVE = "move"  # sink-dequantize: moves or selects codes, values unchanged
QUANT = "quant"  # expand-fake-quant and friends: the quantization ops themselves
INTEGER = "integer"  # already integer (made by convert or input adaptation)
IMAGE = "image"  # convert-image-preprocess: colour conversion + normalisation tables
FLOAT = "float"  # no fixed-point form: stays a float CPU island
LOWERINGS = (GEMM, ELEMENTWISE, POOL, LUT, CLAMP, MOVE, QUANT, INTEGER, IMAGE, FLOAT)

# ---- how prepare quantizes an op
MODULE = "module"
DECOMPOSED = "decomposed"
PASSTHROUGH = "passthrough"
NONE = "none"
INDEX = "index"  # integer arithmetic on index tensors only (``idx % w``)


@dataclass(frozen=True)
class OpEntry:
    op: str
    hbir: str | None
    lowering: str
    torch: tuple[str, ...] = ()
    quantized: str = MODULE
    lut: str | None = None
    cpu: str | None = None


def _lut(op: str, *torch: str) -> OpEntry:
    return OpEntry(op, f"hbir.{op}", LUT, torch, MODULE, lut=op)


def _ir(name: str, lowering: str, cpu: str | None = None) -> OpEntry:
    """An op that only exists in IR (no torch spelling), named as in the IR."""
    return OpEntry(name, name, lowering, (), NONE, cpu=cpu)


# the comparisons, each a torch spelling and an hbir.compare kind
COMPARE_KINDS = ("eq", "ne", "gt", "ge", "lt", "le")
_COMPARISONS = tuple(
    f"{root}.{kind}"
    for root in ("operator", "torch", "Tensor")
    for kind in COMPARE_KINDS
)
_METHODS_RESHAPE = ("view", "view_as", "reshape", "reshape_as", "flatten")
_METHODS_RESHAPE += ("unflatten", "squeeze", "unsqueeze")

OPS: tuple[OpEntry, ...] = (
    # ---------------------------------------------------------------- weight layers
    OpEntry("conv2d", "hbir.conv2d", GEMM, ("nn.Conv2d", "F.conv2d")),
    OpEntry("conv_transpose2d", "hbir.conv_transpose2d", GEMM, ("nn.ConvTranspose2d",)),
    OpEntry("linear", "hbir.linear", GEMM, ("nn.Linear", "F.linear")),
    # 1-d convs and pools: the 2-d op on [N, C, 1, L]
    OpEntry("conv1d", "hbir.conv2d", GEMM, ("nn.Conv1d", "F.conv1d"), DECOMPOSED),
    OpEntry(
        "conv_transpose1d",
        "hbir.conv_transpose2d",
        GEMM,
        ("nn.ConvTranspose1d",),
        DECOMPOSED,
    ),
    # one 2-d conv over the depth windows (index_select, moves), [O, kd * C, kh, kw]
    OpEntry("conv3d", "hbir.conv2d", GEMM, ("nn.Conv3d", "F.conv3d"), DECOMPOSED),
    OpEntry(
        "matmul",
        "hbir.matmul",
        GEMM,
        ("operator.matmul", "torch.matmul", "torch.bmm", "Tensor.matmul"),
    ),
    # ``softmax(q @ k^T * scale) @ v``: quantized matmuls around a quantized softmax
    OpEntry(
        "attention",
        "hbir.matmul",
        GEMM,
        ("F.scaled_dot_product_attention",),
        DECOMPOSED,
    ),
    # ``beta * input + alpha * (a @ b)``
    OpEntry(
        "addmm",
        "hbir.matmul",
        GEMM,
        ("torch.addmm", "torch.baddbmm", "Tensor.addmm", "Tensor.baddbmm"),
        DECOMPOSED,
    ),
    # two operands: a batched matmul between permutations and views
    OpEntry("einsum", "hbir.matmul", GEMM, ("torch.einsum",), DECOMPOSED),
    # unrolled over the traced sequence length: per step its linears (weights
    # shared by the steps), gate tables, state products and sums
    OpEntry("lstm", "hbir.linear", GEMM, ("nn.LSTM",), DECOMPOSED),
    OpEntry("gru", "hbir.linear", GEMM, ("nn.GRU",), DECOMPOSED),
    OpEntry("rnn", "hbir.linear", GEMM, ("nn.RNN",), DECOMPOSED),
    # in-projections, the heads' attention, the out-projection
    OpEntry(
        "multihead_attention",
        "hbir.linear",
        GEMM,
        ("nn.MultiheadAttention",),
        DECOMPOSED,
    ),
    # ---------------------------------------------------------------- arithmetic
    OpEntry(
        "add",
        "hbir.add",
        ELEMENTWISE,
        ("operator.add", "operator.iadd", "torch.add", "Tensor.add", "Tensor.add_"),
    ),
    OpEntry(
        "sub",
        "hbir.sub",
        ELEMENTWISE,
        ("operator.sub", "operator.isub", "torch.sub", "Tensor.sub"),
    ),
    OpEntry(
        "mul",
        "hbir.mul",
        ELEMENTWISE,
        ("operator.mul", "operator.imul", "torch.mul", "Tensor.mul")
        + ("torch.square", "Tensor.square"),
    ),
    # ``x * w + b`` per channel (batch norm in eval that fusion cannot fold into a
    # conv)
    OpEntry(
        "affine",
        "hbir.mul",
        ELEMENTWISE,
        ("nn.BatchNorm2d", "nn.BatchNorm1d", "F.batch_norm"),
    ),
    # ``x / number`` is a mul; ``x / y`` is ``x * reciprocal(y)``
    OpEntry(
        "div",
        "hbir.mul",
        ELEMENTWISE,
        ("operator.truediv", "torch.div", "Tensor.div"),
        DECOMPOSED,
    ),
    # exponent 2: mul; 0.5, -0.5, -1: the sqrt, rsqrt, reciprocal tables
    OpEntry(
        "pow", "hbir.mul", ELEMENTWISE, ("operator.pow", "torch.pow", "Tensor.pow")
    ),
    # a constant mask: ``a * keep + b * (1 - keep)`` (masked_fill: the value is a)
    OpEntry(
        "where",
        "hbir.mul",
        ELEMENTWISE,
        ("torch.where", "Tensor.where", "Tensor.masked_fill", "torch.masked_fill"),
        DECOMPOSED,
    ),
    # a linear with the fixed lower-triangular ones over the summed dim
    OpEntry(
        "cumsum", "hbir.linear", GEMM, ("torch.cumsum", "Tensor.cumsum"), DECOMPOSED
    ),
    # ``input + value * a * b``
    OpEntry(
        "addcmul",
        "hbir.add",
        ELEMENTWISE,
        ("torch.addcmul", "Tensor.addcmul"),
        DECOMPOSED,
    ),
    # ``-x`` is an exact multiplication by -1
    OpEntry(
        "neg", "hbir.mul", ELEMENTWISE, ("operator.neg", "torch.neg", "Tensor.neg")
    ),
    _ir("hbir.neg", FLOAT),
    # |qmin| is off the input grid, so abs has its own output fake quantization
    OpEntry("abs", "hbir.abs", FLOAT, ("torch.abs", "Tensor.abs")),
    _ir("hbir.div", FLOAT),
    # both operands on one add grid, the larger (smaller) kept, one requantization:
    # exact, as requantization is monotonic
    OpEntry(
        "maximum", "hbir.maximum", ELEMENTWISE, ("torch.maximum", "Tensor.maximum")
    ),
    OpEntry(
        "minimum", "hbir.minimum", ELEMENTWISE, ("torch.minimum", "Tensor.minimum")
    ),
    # on index tensors only (prepare refuses them on values): exact int64
    OpEntry(
        "floor_divide",
        "hbir.floor_divide",
        INTEGER,
        ("operator.floordiv", "torch.floor_divide", "Tensor.floor_divide"),
        INDEX,
    ),
    OpEntry(
        "remainder",
        "hbir.remainder",
        INTEGER,
        ("operator.mod", "torch.remainder", "Tensor.remainder"),
        INDEX,
    ),
    # ---------------------------------------------------------------- activations
    OpEntry(
        "relu", "hbir.relu", CLAMP, ("nn.ReLU", "F.relu", "torch.relu", "Tensor.relu")
    ),
    OpEntry("relu6", "hbir.clip", CLAMP, ("nn.ReLU6", "F.relu6")),
    OpEntry(
        "clamp",
        "hbir.clip",
        CLAMP,
        ("nn.Hardtanh", "F.hardtanh", "torch.clamp", "torch.clip")
        + ("Tensor.clamp", "Tensor.clip", "torch.clamp_min", "Tensor.clamp_min")
        + ("torch.clamp_max", "Tensor.clamp_max"),
    ),
    _lut("sigmoid", "nn.Sigmoid", "torch.sigmoid", "F.sigmoid", "Tensor.sigmoid"),
    _lut("tanh", "nn.Tanh", "torch.tanh", "F.tanh", "Tensor.tanh"),
    _lut("exp", "torch.exp", "Tensor.exp"),
    _lut("log", "torch.log", "Tensor.log"),
    _lut("sqrt", "torch.sqrt", "Tensor.sqrt"),
    _lut("rsqrt", "torch.rsqrt", "Tensor.rsqrt"),
    _lut("reciprocal", "torch.reciprocal", "Tensor.reciprocal"),
    _lut("sin", "torch.sin", "Tensor.sin"),
    _lut("cos", "torch.cos", "Tensor.cos"),
    _lut("gelu", "nn.GELU", "F.gelu"),
    _lut("silu", "nn.SiLU", "F.silu"),
    _lut("hardsigmoid", "nn.Hardsigmoid", "F.hardsigmoid"),
    _lut("hardswish", "nn.Hardswish", "F.hardswish"),
    # with a parameter (numerics.LUT_PARAMETERS): one table per value
    _lut("leaky_relu", "nn.LeakyReLU", "F.leaky_relu"),
    _lut("elu", "nn.ELU", "F.elu"),
    _lut("celu", "nn.CELU", "F.celu"),
    _lut("softplus", "nn.Softplus", "F.softplus"),
    _lut("selu", "nn.SELU", "F.selu"),
    _lut("mish", "nn.Mish", "F.mish"),
    _lut("erf", "torch.erf", "Tensor.erf"),
    _lut("logsigmoid", "nn.LogSigmoid", "F.logsigmoid"),
    _lut("softsign", "nn.Softsign", "F.softsign"),
    _lut("tanhshrink", "nn.Tanhshrink", "F.tanhshrink"),
    # ``relu(x) + w[c] * (x - relu(x))``, the slope a per-channel affine
    OpEntry("prelu", "hbir.relu", CLAMP, ("nn.PReLU", "F.prelu"), DECOMPOSED),
    # ---------------------------------------------------------------- normalisation
    # prepare decomposes both into quantized steps (hbir.quantization.decompositions);
    # the hbir ops themselves are the float forms
    OpEntry(
        "softmax",
        "hbir.softmax",
        FLOAT,
        ("nn.Softmax", "F.softmax", "torch.softmax", "Tensor.softmax"),
        DECOMPOSED,
    ),
    OpEntry(
        "layer_norm",
        "hbir.layer_norm",
        FLOAT,
        ("nn.LayerNorm", "F.layer_norm"),
        DECOMPOSED,
    ),
    OpEntry(
        "group_norm",
        "hbir.layer_norm",
        FLOAT,
        ("nn.GroupNorm", "F.group_norm"),
        DECOMPOSED,
    ),
    # ``x * rsqrt(sum(x * x))`` (p = 2)
    OpEntry("normalize", "hbir.mul", ELEMENTWISE, ("F.normalize",), DECOMPOSED),
    # a group norm of one channel per group (running statistics: an affine)
    OpEntry(
        "instance_norm",
        "hbir.layer_norm",
        FLOAT,
        ("nn.InstanceNorm1d", "nn.InstanceNorm2d", "F.instance_norm"),
        DECOMPOSED,
    ),
    # ``(x - max) - log(sum(exp(x - max)))``
    OpEntry(
        "log_softmax",
        "hbir.sub",
        ELEMENTWISE,
        ("nn.LogSoftmax", "F.log_softmax", "torch.log_softmax")
        + ("Tensor.log_softmax",),
        DECOMPOSED,
    ),
    # ``mean((x - mean(x))^2) * n / (n - correction)``; std: its sqrt table
    OpEntry("var", "hbir.reduce_mean", POOL, ("torch.var", "Tensor.var"), DECOMPOSED),
    OpEntry("std", "hbir.reduce_mean", POOL, ("torch.std", "Tensor.std"), DECOMPOSED),
    # the 2-norm ``sqrt(sum(x * x))``
    OpEntry(
        "norm",
        "hbir.reduce_sum",
        POOL,
        ("torch.norm", "Tensor.norm", "torch.linalg.vector_norm"),
        DECOMPOSED,
    ),
    # ---------------------------------------------------------------- reductions, pools
    OpEntry("sum", "hbir.reduce_sum", POOL, ("torch.sum", "Tensor.sum")),
    OpEntry("mean", "hbir.reduce_mean", POOL, ("torch.mean", "Tensor.mean")),
    OpEntry("avg_pool2d", "hbir.avg_pool2d", POOL, ("nn.AvgPool2d", "F.avg_pool2d")),
    OpEntry(
        "adaptive_avg_pool2d",
        "hbir.global_avg_pool2d",
        POOL,
        ("nn.AdaptiveAvgPool2d", "F.adaptive_avg_pool2d"),
    ),
    OpEntry(
        "max_pool2d",
        "hbir.max_pool2d",
        MOVE,
        ("nn.MaxPool2d", "F.max_pool2d", "F._max_pool2d")
        + ("F.max_pool2d_with_indices",),
    ),
    OpEntry(
        "max_pool1d",
        "hbir.max_pool2d",
        MOVE,
        ("nn.MaxPool1d", "F.max_pool1d", "F._max_pool1d"),
        DECOMPOSED,
    ),
    OpEntry(
        "avg_pool1d",
        "hbir.avg_pool2d",
        POOL,
        ("nn.AvgPool1d", "F.avg_pool1d"),
        DECOMPOSED,
    ),
    OpEntry(
        "adaptive_avg_pool1d",
        "hbir.avg_pool2d",
        POOL,
        ("nn.AdaptiveAvgPool1d", "F.adaptive_avg_pool1d"),
        DECOMPOSED,
    ),
    # ``max_unpool2d(values, indices)`` of a ``max_pool2d(return_indices=True)``:
    # the values placed at their indices in zeros (zero is on every grid)
    OpEntry(
        "max_unpool2d",
        "hbir.max_unpool2d",
        MOVE,
        ("nn.MaxUnpool2d", "F.max_unpool2d"),
        PASSTHROUGH,
    ),
    # an output size that divides the input size: a max pool of that window
    OpEntry(
        "adaptive_max_pool2d",
        "hbir.max_pool2d",
        MOVE,
        ("nn.AdaptiveMaxPool2d", "F.adaptive_max_pool2d", "F._adaptive_max_pool2d")
        + ("F.adaptive_max_pool2d_with_indices",),
    ),
    OpEntry(
        "amax", "hbir.reduce_max", MOVE, ("torch.amax", "Tensor.amax"), PASSTHROUGH
    ),
    OpEntry(
        "amin", "hbir.reduce_min", MOVE, ("torch.amin", "Tensor.amin"), PASSTHROUGH
    ),
    # ---------------------------------------------------------------- data movement
    OpEntry(
        "cat", "hbir.concat", MOVE, ("torch.cat", "torch.concat", "torch.concatenate")
    ),
    # ``stack``: a cat of the inputs, each given a dim of size 1
    OpEntry("stack", "hbir.concat", MOVE, ("torch.stack",)),
    OpEntry(
        "reshape",
        "hbir.reshape",
        MOVE,
        ("torch.flatten", "torch.reshape", "torch.squeeze", "torch.unsqueeze")
        + tuple(f"Tensor.{m}" for m in _METHODS_RESHAPE),
        PASSTHROUGH,
    ),
    OpEntry(
        "transpose",
        "hbir.transpose",
        MOVE,
        (
            "torch.permute",
            "torch.transpose",
            "torch.swapaxes",
            "torch.t",
            "torch.movedim",
        )
        + ("Tensor.permute", "Tensor.transpose", "Tensor.t", "Tensor.movedim"),
        PASSTHROUGH,
    ),
    OpEntry(
        "split",
        "hbir.split",
        MOVE,
        ("torch.split", "torch.chunk", "torch.unbind")
        + ("Tensor.split", "Tensor.chunk", "Tensor.unbind"),
        PASSTHROUGH,
    ),
    OpEntry(
        "slice",
        "hbir.slice",
        MOVE,
        ("operator.getitem", "torch.narrow", "Tensor.narrow"),
        PASSTHROUGH,
    ),
    OpEntry("flip", "hbir.flip", MOVE, ("torch.flip", "Tensor.flip"), PASSTHROUGH),
    # ---------------------------------------------------------------- selection
    # they choose elements (runtime/selection.py: the tie rule), so the values keep
    # the input's grid and the indices are i64 tensors; prepare calls selection's
    # topk / sort (stable) for torch's, whose order of equal values is open
    OpEntry("topk", "hbir.topk", MOVE, ("torch.topk", "Tensor.topk"), PASSTHROUGH),
    # a top-k of the whole dim
    OpEntry(
        "sort",
        "hbir.topk",
        MOVE,
        ("torch.sort", "Tensor.sort", "torch.argsort", "Tensor.argsort"),
        PASSTHROUGH,
    ),
    OpEntry(
        "argmax", "hbir.argmax", MOVE, ("torch.argmax", "Tensor.argmax"), PASSTHROUGH
    ),
    OpEntry(
        "argmin", "hbir.argmin", MOVE, ("torch.argmin", "Tensor.argmin"), PASSTHROUGH
    ),
    # ``max(x, dim)``: (reduce_max, argmax); ``max(x)``: reduce_max (``max(x, y)``
    # of two tensors is refused: torch.maximum)
    OpEntry("max", "hbir.argmax", MOVE, ("torch.max", "Tensor.max"), PASSTHROUGH),
    OpEntry("min", "hbir.argmin", MOVE, ("torch.min", "Tensor.min"), PASSTHROUGH),
    # a mask of quantized values: on codes (one grid, or integer thresholds of a
    # constant) or as fl32(q * s) (two grids); it may be cast to float (scale 1)
    OpEntry(
        "compare",
        "hbir.compare",
        MOVE,
        _COMPARISONS,
        PASSTHROUGH,
    ),
    OpEntry(
        "gather", "hbir.gather", MOVE, ("torch.gather", "Tensor.gather"), PASSTHROUGH
    ),
    # a table's rows at integer ids: the table quantized as one tensor (by the
    # output's fake quant), the rows read with index_select
    OpEntry("embedding", "hbir.index_select", MOVE, ("nn.Embedding", "F.embedding")),
    OpEntry(
        "index_select",
        "hbir.index_select",
        MOVE,
        ("torch.index_select", "Tensor.index_select"),
        PASSTHROUGH,
    ),
    # sub-pixel convolution's rearrangement: a reshape, a transpose, a reshape
    OpEntry(
        "pixel_shuffle",
        "hbir.transpose",
        MOVE,
        ("nn.PixelShuffle", "nn.PixelUnshuffle", "F.pixel_shuffle")
        + ("F.pixel_unshuffle",),
        PASSTHROUGH,
    ),
    # ShuffleNet's: ``[N, g * c, ...]`` viewed as ``[N, g, c, ...]``, g and c swapped
    OpEntry(
        "channel_shuffle",
        "hbir.transpose",
        MOVE,
        ("nn.ChannelShuffle", "F.channel_shuffle"),
        PASSTHROUGH,
    ),
    # ``roll``: two slices and a concat; ``repeat`` / ``expand`` / ``tile``: a concat
    # of copies
    OpEntry("roll", "hbir.concat", MOVE, ("torch.roll", "Tensor.roll"), PASSTHROUGH),
    OpEntry(
        "repeat",
        "hbir.concat",
        MOVE,
        ("Tensor.repeat", "Tensor.expand", "Tensor.expand_as")
        + ("torch.tile", "Tensor.tile"),
        PASSTHROUGH,
    ),
    # each element ``r`` times in a row: a concat of copies along a new dim, viewed
    OpEntry(
        "repeat_interleave",
        "hbir.concat",
        MOVE,
        ("torch.repeat_interleave", "Tensor.repeat_interleave"),
        PASSTHROUGH,
    ),
    # a zero, reflect, replicate or circular pad and a nearest resize keep the input
    # grid (reflect / replicate / circular: slices and a concat)
    OpEntry("pad", "hbir.pad", MOVE, ("F.pad",), PASSTHROUGH),
    # im2col: one strided slice per kernel position, concatenated and viewed
    OpEntry("unfold", "hbir.concat", MOVE, ("F.unfold",), PASSTHROUGH),
    # a nonzero pad value is off the input grid: its own output fake quantization;
    # the value's blocks and the input concatenated (convert quantizes each)
    OpEntry("constant_pad", "hbir.concat", MOVE, ("F.pad",)),
    OpEntry("interpolate", "hbir.resize2d", MOVE, ("F.interpolate",), PASSTHROUGH),
    # bilinear makes values off the input grid: its own output fake quantization,
    # the NPU's integer weights (``weight_bits``), lowered by convert-pool
    OpEntry("resize", "hbir.resize2d", MOVE, ("F.interpolate",)),
    # the NPU's bilinear weights at coordinates read from the grid's codes: its own
    # output fake quantization, the exact si32 sums requantized (convert-pool)
    OpEntry("grid_sample", "hbir.grid_sample", POOL, ("F.grid_sample",)),
    OpEntry(
        "cast",
        "hbir.cast",
        MOVE,
        ("torch.clone", "torch.detach")
        + ("Tensor.contiguous", "Tensor.clone", "Tensor.detach", "Tensor.float")
        + ("Tensor.to", "Tensor.type_as", "Tensor.type", "Tensor.long"),
        PASSTHROUGH,
    ),
    OpEntry("dropout", None, MOVE, ("nn.Dropout", "F.dropout"), PASSTHROUGH),
    # ---------------------------------------------------------------- IR only
    _ir("hbir.constant", QUANT),
    _ir("hbir.lut", INTEGER),
    # ``canvas[:, idx] = feats`` (prepare: a write into a zero canvas, which keeps
    # the written values' grid)
    _ir("hbir.index_copy", MOVE),
    # ``max_pool2d(..., return_indices=True)``'s indices (prepare: the max pool
    # module's second result)
    _ir("hbir.max_pool2d_indices", MOVE),
    # ``where`` with a computed mask (prepare's ``where``: both values first
    # rescaled onto the output grid, a number fake-quantized onto it)
    _ir("hbir.select", MOVE),
    # the camera input's colour conversion: the CPU's, at the model's edge
    _ir("hbir.image_convert", INTEGER, cpu="image input conversion"),
    # the camera resizer: a roi of the frame, resized (npu.roi_resize)
    _ir("hbir.roi_resize", INTEGER),
    _ir("hbir.image_preprocess", IMAGE, cpu="image input preprocessing"),
    _ir("qnt.const_fake_quant", QUANT, cpu="fake quantization (convert first)"),
    # float <-> codes at the model's edges
    _ir("qnt.quantize", QUANT, cpu="quantize"),
    _ir("qnt.dequantize", QUANT, cpu="dequantize"),
    _ir("qnt.requantize", QUANT),
    _ir("qnt.barrier", QUANT, cpu="float island edge"),
)


# ----------------------------------------------------------------- derived views


def _lowerings() -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in OPS:
        if entry.hbir is None:
            continue
        if found.setdefault(entry.hbir, entry.lowering) != entry.lowering:
            raise AssertionError(f"{entry.hbir}: two lowerings in the op table")
    return found


# hbir op name -> its convert lowering family
LOWERING: dict[str, str] = _lowerings()

# hbir op name -> its lookup table (numerics.LUT_FUNCTIONS key): the LUT op set
LUT_TABLES: dict[str, str] = {e.hbir: e.lut for e in OPS if e.lut is not None}


def _cpu_reasons() -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in OPS:
        if entry.hbir is None:
            continue
        reason = entry.cpu or (
            f"no npu op computes '{entry.hbir}' (float in the op table)"
            if entry.lowering == FLOAT
            else None
        )
        if reason is not None and found.setdefault(entry.hbir, reason) != reason:
            raise AssertionError(f"{entry.hbir}: two CPU reasons in the op table")
    return found


# hbir op name -> why it stays on the CPU in model.hbm (on integer codes too);
# every other hbir op has an npu-lower rule
CPU_REASONS: dict[str, str] = _cpu_reasons()

# prepare's op name -> entry
BY_OP: dict[str, OpEntry] = {e.op: e for e in OPS}

# The ops with an fp16 form (prepare's names), for a march with fp16
# (``MarchLimits.float_bits``): the non-gemm ops the J6 guide advises running in
# fp16 on J6P / J6H. Each computes its float32 kernel on binary16 inputs and
# rounds its result to binary16 (docs/quantization.md, fp16); the float16 qconfig
# on any other op is refused by prepare, naming it.
FP16_OPS = frozenset(
    {"add", "sub", "mul", "sigmoid", "tanh", "exp", "gelu", "silu", "softmax"}
    | {"layer_norm"}
)
assert FP16_OPS <= set(BY_OP), FP16_OPS - set(BY_OP)


def ops_lowered_as(lowering: str) -> tuple[str, ...]:
    """The hbir op names whose convert lowering is ``lowering``."""
    if lowering not in LOWERINGS:
        raise ValueError(f"unknown lowering {lowering!r}: expected one of {LOWERINGS}")
    return tuple(name for name, low in LOWERING.items() if low == lowering)


def table_name(hbir_op: str, approximate: str = "none") -> str:
    """The lookup table of a LUT op (``gelu`` with the tanh approximation: its own)."""
    name = LUT_TABLES[hbir_op]
    return f"{name}_tanh" if approximate == "tanh" else name
