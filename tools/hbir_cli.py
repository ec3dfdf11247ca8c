"""``hbir``: one command per stage, and the analysis tools.

    hbir export   --qat qat.pt [--model file.py:factory] --data x.npy -o qat.bc
    hbir convert  qat.bc -o quantized.bc [--march nash-e] [--advice]
    hbir compile  quantized.bc -o model.hbm [--march nash-e] [--opt 2] [--progress]
                  [--verify-each]
    hbir run      MODEL -i x.npy [-o outputs.npz]       (.bc, .mlir or .hbm)
    hbir perf     model.hbm [--out-dir DIR]             (or a quantized.bc)
    hbir verify   MODEL_A MODEL_B -i x.npy              (bit identity; exit 1 if not)
    hbir doctor   --qat qat.pt --data data.pt [...]     (stage, op and cause)
    hbir bisect   --qat-bc qat.bc --data data.pt --reference qat.pt --threshold T

``qat.pt`` is either the whole prepared model (``torch.save(qat, ...)``) or its
``state_dict`` (what the README saves), given with ``--model module:factory``:
the code that builds the model (``hbir.quantization.checkpoint``).

Exit status: 0 done; 1 bad input (one line on stderr, no traceback), except for
``verify`` (0 bit-identical, 1 not, 2 bad input, as ``diff`` and ``hb_verifier``)
and ``doctor`` (3: a stage pair beyond its contract). Parsing the command line
imports neither torch nor the compiler, so ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# The marches are passes/march.py's; an unknown one is refused by the command
# (naming them), so that parsing does not load the compiler.
MARCH = "the target march (default nash-e)"
QAT_PT = (
    "qat.pt: the prepared model saved whole (torch.save(qat, path)) or its "
    "state_dict (then give --model)"
)
MODEL_FACTORY = (
    "module:factory building the model a state_dict qat.pt belongs to: an "
    "importable module or a .py file, and a callable returning the prepared model "
    "(or the float model, then prepared on the first input batch)"
)
DATA = (
    "input batches: a .npy array (one batch) or a torch.save file of a tensor, a "
    "tuple of tensors, or a list of them"
)


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with the command's bad-input status, in one line."""

    bad_input_status = 1

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(self.bad_input_status, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hbir",
        description="hbir: every stage from qat.pt to model.hbm, and the tools that "
        "find where and why two stages differ.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 1 bad input; verify: 0 bit-identical, 1 not, "
        "2 bad input; doctor: 3 a stage pair beyond its contract.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser(
        "export",
        help="qat.pt -> qat.bc",
        description="Export the "
        "prepared model (in VALIDATION) to qat.bc; the first input "
        "batch is the example, which fixes qat.bc's batch size.",
    )
    p.add_argument("--qat", required=True, help=QAT_PT)
    _model_args(p)
    p.add_argument("--data", required=True, help=DATA)
    p.add_argument("-o", "--output", required=True, help="qat.bc (or .mlir) to write")

    p = sub.add_parser(
        "convert",
        help="qat.bc -> quantized.bc",
        description="Convert qat.bc to fixed point for a march.",
    )
    p.add_argument("model", help="qat.bc (or .mlir)")
    p.add_argument("-o", "--output", required=True, help="quantized.bc to write")
    p.add_argument("--march", default="nash-e", help=MARCH)
    p.add_argument(
        "--advice", action="store_true", help="print every op left on the CPU, and why"
    )

    p = sub.add_parser(
        "compile",
        help="quantized.bc -> model.hbm",
        description="Compile quantized.bc to model.hbm for the simulated NPU.",
    )
    p.add_argument("model", help="quantized.bc (or .mlir)")
    p.add_argument("-o", "--output", required=True, help="model.hbm to write")
    p.add_argument("--march", default="nash-e", help=MARCH)
    p.add_argument(
        "--opt",
        type=int,
        default=2,
        choices=(0, 1, 2),
        help="0 skips fusion (default 2)",
    )
    p.add_argument(
        "--progress", action="store_true", help="one line per compile pass on stderr"
    )
    p.add_argument(
        "--time-passes", action="store_true", help="with --progress: each pass's time"
    )
    p.add_argument(
        "--verify-each",
        action="store_true",
        default=None,
        help="verify the IR after every compile pass (default: once at the end; "
        "on where the environment sets HBIR_VERIFY_EACH=1)",
    )

    p = sub.add_parser(
        "run",
        help="run any model on input files",
        description="Run a .bc, .mlir or .hbm on .npy inputs; print "
        "each output's dtype, shape and range.",
    )
    p.add_argument("model", help="the model file")
    _inputs(p)
    p.add_argument("-o", "--output", help="write the outputs to this .npz")
    p.add_argument(
        "--reference",
        action="store_true",
        help="a .bc: run the interpreter's definition (op by op)",
    )

    p = sub.add_parser(
        "perf",
        help="estimated speed of a model.hbm",
        description="FPS, latency and DDR traffic of a model.hbm on "
        "its march; writes <model>.json and <model>.html.",
    )
    p.add_argument("model", help="model.hbm, or a quantized.bc (compiled in memory)")
    p.add_argument("--out-dir", default=".", help="where the reports go (default .)")

    p = sub.add_parser(
        "verify",
        help="are two models bit-identical on inputs",
        description="Run both models on the same inputs: the "
        "consistency table, the bit-identity verdict and the first "
        "differing instruction or op. Exit 0 bit-identical, 1 not.",
    )
    p.bad_input_status = 2  # as diff's and hb_verifier's
    p.add_argument("model_a", help="the reference model (.bc, .mlir or .hbm)")
    p.add_argument("model_b", help="the model checked against it")
    _inputs(p)
    p.add_argument(
        "-c",
        "--compare-digits",
        type=int,
        default=5,
        help="the decimal tolerance of the Consistency column",
    )
    p.add_argument(
        "--dump-all-nodes",
        metavar="DIR",
        help="write every op's value of both models to DIR",
    )

    p = sub.add_parser(
        "doctor",
        help="find the stage, the op and the cause of a difference",
        description="Find the first stage pair beyond "
        "its numeric contract, its first op and the cause.",
    )
    p.add_argument("--qat", required=True, help=QAT_PT + " (in VALIDATION)")
    _model_args(p)
    p.add_argument("--data", required=True, help=DATA)
    p.add_argument("--qat-bc", help="qat.bc (default: export qat.pt)")
    p.add_argument("--quantized-bc", help="quantized.bc (default: convert)")
    p.add_argument(
        "--nv12-bc",
        help="nv12_quantized.bc (qat.bc with camera nodes inserted, converted)",
    )
    p.add_argument(
        "--nv12-data",
        help="the NV12 planes of the same frames as --data (torch.save "
        "of a list of (y, uv) uint8 tensors, one per batch)",
    )
    p.add_argument(
        "--hbm",
        help="model.hbm compiled from quantized.bc (or from --nv12-bc): the compile "
        "stage",
    )
    p.add_argument(
        "--float",
        dest="float_model",
        help="the float model (torch.save of the whole nn.Module) qat.pt is "
        "measured against (default: qat.pt with its fake quants off)",
    )
    p.add_argument(
        "--cosine-tolerance",
        type=float,
        help="the output cosine with the float model below which qat.pt's own "
        "quantization loss is a finding (default: hbir.profiler.quant_loss's "
        "COSINE_TOLERANCE)",
    )
    p.add_argument("--march", default="nash-e", help=MARCH)
    p.add_argument("--out-dir", help="write report.json and report.html here")
    p.add_argument(
        "--fix",
        action="store_true",
        help="apply the finding's mechanical remedy to a copy and report the "
        "figures before and after (no file is changed)",
    )

    p = sub.add_parser(
        "bisect",
        help="the smallest float region of qat.bc that restores a metric",
        description="Search windows of qat.bc "
        "fake-quant IDs whose float fallback brings the metric "
        "against the reference within the threshold; print the "
        "bc_editor config.",
    )
    p.add_argument("--qat-bc", required=True, help="qat.bc to edit")
    p.add_argument("--data", required=True, help=DATA)
    p.add_argument(
        "--reference", required=True, help="the model to recover: qat.pt or a .bc"
    )
    _model_args(p)
    p.add_argument("--threshold", required=True, type=float)
    p.add_argument("--metric", default="Atol")
    p.add_argument("--march", default="nash-e", help=MARCH)
    p.add_argument(
        "--no-convert",
        action="store_true",
        help="run the edited qat.bc itself (the error is already in qat.bc)",
    )
    return parser


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help=MODEL_FACTORY)
    p.add_argument(
        "--qconfig",
        help="module:name of the QConfig / QconfigSetter to prepare a float --model "
        "with (default get_qconfig())",
    )


def _inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-i",
        "--input",
        action="append",
        required=True,
        help="a .npy per model input, in order (repeat -i, or a,b); "
        "name:file binds a file to a named input",
    )


def main(args: Sequence[str] | None = None) -> None:
    parser = build_parser()
    ns = parser.parse_args(args)
    if ns.command == "doctor" and bool(ns.nv12_bc) != bool(ns.nv12_data):
        parser.exit(
            1,
            "hbir doctor: error: the NV12 stage needs both --nv12-bc and "
            "--nv12-data (the NV12 planes of the same frames as --data)\n",
        )
    from hbir.errors import HbirError

    command = _command(ns.command)
    try:
        status = command(ns)
    except HbirError as e:
        print(f"hbir {ns.command}: error: {e}", file=sys.stderr)
        status = 2 if ns.command == "verify" else 1
    sys.exit(status)


def _command(name: str):
    from hbir.tools import analysis_commands, stage_commands

    return {
        "export": stage_commands.export,
        "convert": stage_commands.convert,
        "compile": stage_commands.compile_model,
        "run": stage_commands.run,
        "perf": stage_commands.perf,
        "verify": stage_commands.verify,
        "doctor": analysis_commands.doctor,
        "bisect": analysis_commands.bisect,
    }[name]


if __name__ == "__main__":
    main()
