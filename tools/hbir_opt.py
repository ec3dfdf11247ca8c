"""hbir-opt: run hbir pass pipelines on ``.mlir`` / ``.bc`` files.

A thin subclass of xDSL's opt driver: it registers only our dialects and passes,
adds ``--compile-to=<phase>``, ``--load-plugin``, ``.bc`` input and output,
prints a compiled ``.hbm`` as text (and assembles that text, ``.hbms``), and
turns every error into a located one-line diagnostic with exit status 1.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.targets.mlir import MLIRTarget
from xdsl.utils.exceptions import ArgSpecParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from hbir import diagnostics, files
from hbir.dialects import get_all_dialects
from hbir.errors import HbirOutputError
from hbir.passes import (
    PassRegistryError,
    get_all_passes,
    load_plugin,
    options,
    pass_options,
    source_options,
    source_summary,
    summaries,
    summary,
)
from hbir.passes.march import UnknownMarchError
from hbir.passes.pipelines import PHASES, pipeline_up_to, stop_points, verify_each

# A compiled model and its text form (hbir/hbm/container.py, hbir/hbm/text.py).
HBM_SUFFIXES = (".hbm", ".hbms")

# xDSL's own generic passes worth exposing next to ours.
_XDSL_PASSES = {
    "canonicalize": ("xdsl.transforms.canonicalize", "CanonicalizePass"),
}


def _plugins(argv: Sequence[str]) -> list[str]:
    """``--load-plugin`` values, read before argparse (passes register first)."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--load-plugin" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--load-plugin="):
            found.append(arg.split("=", 1)[1])
    return found


@dataclass(frozen=True)
class HbirMLIRTarget(MLIRTarget):
    """xDSL's MLIR target, printing with ``files.HbirPrinter`` (exact floats)."""

    def emit(self, ctx, module: ModuleOp, output: IO[str]) -> None:
        if self.syntax_highlight:  # for a terminal: xDSL's colours
            return super().emit(ctx, module, output)
        printer = files.HbirPrinter(
            stream=output,
            print_generic_format=self.print_generic_format,
            print_properties_as_attributes=self.print_properties_as_attributes,
            print_debuginfo=self.print_debuginfo,
        )
        printer.print_op(module)
        printer.print_metadata(ctx.loaded_dialects)
        print("\n", file=output)


class HbirOptMain(xDSLOptMain):
    version_format = "hbir-opt (xdsl {xdsl_version})"

    def __init__(self, args: Sequence[str] | None = None):
        argv = list(sys.argv[1:] if args is None else args)
        self._wants_help = "-h" in argv or "--help" in argv
        for plugin in _plugins(argv):
            load_plugin(plugin)
        super().__init__(description="hbir modular optimizer driver", args=argv)

    # ---- registration
    def register_all_dialects(self) -> None:
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        import importlib

        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)
        for name, (module, cls) in _XDSL_PASSES.items():
            self.register_pass(
                name, lambda m=module, c=cls: getattr(importlib.import_module(m), c)
            )

    def register_all_targets(self) -> None:
        self.available_targets["mlir"] = lambda: HbirMLIRTarget

    def register_all_frontends(self) -> None:
        self.available_frontends["mlir"] = lambda io: None  # parse_chunk does it
        self.available_frontends["bc"] = lambda io: None

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--compile-to",
            choices=stop_points(),
            default=None,
            help="run the phases up to and including this phase or pass",
        )
        arg_parser.add_argument(
            "--verify-each",
            action="store_true",
            default=None,
            help="verify the module after every pass, naming the pass that broke "
            "it (default: once, after the last pass; on where the environment "
            "sets HBIR_VERIFY_EACH=1, as the tests do)",
        )
        arg_parser.add_argument(
            "--march",
            default=None,
            help="the march every phase's passes take (nash-e, nash-m, nash-p, "
            "nash-h, nash-b, ...); default: each pass's own default (nash-e)",
        )
        arg_parser.add_argument(
            "--load-plugin",
            action="append",
            default=[],
            metavar="MODULE",
            help="import a Python module that registers user passes",
        )
        if self._wants_help:
            arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
            arg_parser.epilog = self._pass_listing()

    def _pass_listing(self) -> str:
        lines = ["passes:"]
        ours = summaries()  # read from the sources: no pass module is imported
        our_options = options()
        for name, (module, cls) in _XDSL_PASSES.items():
            ours.setdefault(name, source_summary(module, cls))
            our_options.setdefault(name, source_options(module, cls))
        for name in sorted(self.available_passes):
            text = ours.get(name) or summary(self.available_passes[name]())
            lines.append(f"  {name:<24} {text}")
            found = our_options.get(name)
            if found is None:
                found = pass_options(self.available_passes[name]())
            if found:  # given as -p 'name{option=value option=value}'
                lines.append(f"  {'':<24}   options: {', '.join(found)}")
        lines.append("phases (--compile-to):")
        for phase, specs in PHASES.items():
            lines.append(f"  {phase:<24} {','.join(specs) or '(verify only)'}")
        return "\n".join(lines)

    # ---- pipeline: user passes, then the requested phases; our verifier between
    def setup_pipeline(self, done: frozenset[str] = frozenset()) -> None:
        """The user's passes, then the phases up to ``--compile-to`` that the
        input has not been through yet (``done``: a converted model skips export
        and convert), with ``--march`` passed to every pass that takes one."""
        import time

        from xdsl.passes import PassPipeline

        specs = [self.args.passes] if self.args.passes else []
        if self.args.compile_to:
            try:
                phases = pipeline_up_to(self.args.compile_to, self.args.march)
            except ValueError as e:  # a phase with no passes yet
                raise diagnostics.HbirError(f"hbir-opt: error: {e}") from None
            for phase, phase_specs in phases:
                if phase not in done:
                    specs.extend(phase_specs)
        started = [time.perf_counter()]

        each = verify_each(self.args.verify_each)

        def verify_between(previous, module: ModuleOp, next_pass) -> None:
            if self.args.time_passes and previous is not None:
                took = time.perf_counter() - started[0]
                print(
                    f"hbir-opt: pass '{previous.name}' took {took:.3f} s",
                    file=sys.stderr,
                )
            last = next_pass is None
            if not self.args.disable_verify and previous is not None and (each or last):
                where = (
                    f"after pass '{previous.name}'"
                    if each
                    else "after the passes (--verify-each: after every pass)"
                )
                diagnostics.verify(module, filename=where)
                # npu ops (made by parsing or by a pass) import their dialect;
                # without it there is no SRAM to check, and no 0.3 s import
                npu = sys.modules.get("hbir.dialects.npu")
                try:
                    if npu is not None:
                        npu.verify_sram(module)
                except Exception as e:
                    raise diagnostics.HbirError(f"{where}: error: {e}") from None
            started[0] = time.perf_counter()

        spec = ",".join(specs)
        _check_spec(spec, self.available_passes)
        try:
            self.pipeline = PassPipeline.parse_spec(
                self.available_passes, spec, verify_between
            )
        except ValueError as e:  # an option xDSL cannot give the pass
            raise diagnostics.HbirError(f"hbir-opt: error: {e}") from None

    def apply_passes(self, prog: ModuleOp) -> None:
        if self.args.compile_to and "hbir.march" in prog.attributes:
            # a converted model (quantized.bc): export and convert are done
            self.setup_pipeline(done=frozenset({"export", "convert"}))
        super().apply_passes(prog)

    # ---- input / output
    def prepare_input(self):
        extension = os.path.splitext(self.args.input_file or "x.mlir")[1]
        if extension not in files.SUFFIXES and not self.args.frontend:
            raise files.HbirFileError(
                f"{self.args.input_file}: unsupported file type '{extension}': "
                f"expected one of {files.SUFFIXES}"
            )
        return super().prepare_input()

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp:
        name = self.get_input_name()
        data = chunk.read()
        self._spans, self._line_offset = {}, start_offset
        if file_extension == "bc":
            text = files.decode_bc(data, name)
            return diagnostics.parse_module(self.ctx, text, name, spans=self._spans)
        return diagnostics.parse_module(
            self.ctx, data, name, start_offset, spans=self._spans
        )

    def run(self) -> None:
        if self._run_hbm():
            return
        self._check_output()
        chunks, extension = self.prepare_input()
        if extension == "bc" and self.args.split_input_file:
            raise diagnostics.HbirError(
                "--split-input-file applies to .mlir input only"
            )
        outputs: list[str] = []
        modules: list[ModuleOp] = []
        for chunk, offset in chunks:
            with chunk:
                try:
                    module = self.parse_chunk(chunk, extension, offset)
                    try:
                        self.apply_passes(module)
                    except diagnostics.HbirOpError as e:  # at the op's line
                        located = diagnostics.relocate(e, self._spans, offset)
                        raise located from None
                except diagnostics.HbirError as e:
                    if not self.args.verify_diagnostics:
                        raise
                    outputs.append(f"{e}\n")
                    continue
            modules.append(module)
            outputs.append(self.output_resulting_program(module))
        self._write(outputs, modules)

    def _run_hbm(self) -> bool:
        """A compiled model (``.hbm``) prints as its text form; a text form
        (``.hbms``) is assembled. ``-o x.hbm`` writes the binary, ``-o x.hbms``
        the text. False: the input is IR, not a compiled model."""
        path, out = self.args.input_file, self.args.output_file
        if os.path.splitext(path or "")[1] not in HBM_SUFFIXES:
            return False
        from hbir.hbm import container, text

        if self.args.passes or self.args.compile_to:
            raise files.HbirFileError(
                f"{path}: a compiled model takes no passes: give hbir-opt the "
                ".bc or .mlir it was compiled from"
            )
        if out is not None and os.path.splitext(out)[1] not in HBM_SUFFIXES:
            raise files.HbirFileError(
                f"{out}: a compiled model is written as .hbm (binary) or .hbms (text)"
            )
        if path.endswith(".hbm"):
            program = container.read(path)
        else:
            with open(path, encoding="utf-8") as f:
                program = text.assemble(f.read(), path)
        if out is not None and out.endswith(".hbm"):
            container.write(program, out)
            return True
        listing = text.disassemble(program)
        if out is None:
            sys.stdout.write(listing)
        else:
            with open(out, "w", encoding="utf-8") as f:
                f.write(listing)
        return True

    def _check_output(self) -> None:
        path = self.args.output_file
        if path is not None and path.endswith(".hbm"):
            raise files.HbirFileError(
                f"{path}: hbir-opt writes .bc or .mlir (IR); a model.hbm is compiled "
                f"from quantized.bc by 'hbir compile quantized.bc -o {path} "
                "--march nash-e' (or hbir.compile in Python)"
            )
        if path is not None and os.path.splitext(path)[1] not in files.SUFFIXES:
            raise files.HbirFileError(
                f"{path}: hbir-opt writes {' or '.join(files.SUFFIXES)}: end the "
                "output path in .bc (model file) or .mlir (text); a torch .pt "
                "comes from torch.save, not from hbir-opt"
            )

    def _write(self, outputs: list[str], modules: list[ModuleOp]) -> None:
        path = self.args.output_file
        if path and path.endswith(".bc"):
            if len(modules) != 1 or len(outputs) != 1:
                raise files.HbirFileError(
                    f"{path}: a .bc file holds exactly one module"
                )
            data = files.encode_bc(files.print_module(modules[0]))
            with open(path, "wb") as f:
                f.write(data)
            return
        text = "// -----\n".join(outputs)
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            sys.stdout.write(text)


def _check_spec(spec: str, available: dict) -> None:
    """Unknown pass names (with a "did you mean") and options given twice."""
    from xdsl.utils.arg_spec import PipelineLexer, SpecTokenKind, parse_pipeline

    for pass_spec in parse_pipeline(spec):
        if pass_spec.name not in available:
            close = difflib.get_close_matches(pass_spec.name, list(available), n=1)
            hint = (
                f"did you mean '{close[0]}'?"
                if close
                else "hbir-opt --help lists every pass"
            )
            raise diagnostics.HbirError(
                f"hbir-opt: error: unknown pass '{pass_spec.name}' ({hint})"
            )
    # xDSL keeps the last of two equal options; a typo'd pipeline would then
    # silently run with a value the user did not mean.
    lexer = PipelineLexer(spec)
    names: list[str] = []
    depth, previous, seen = 0, None, set()
    while (token := lexer.lex()).kind is not SpecTokenKind.EOF:
        kind = token.kind
        if kind is SpecTokenKind.IDENT and depth == 0:
            names.append(token.span.text)
        elif kind is SpecTokenKind.L_BRACE:
            depth, seen = depth + 1, set()
        elif kind is SpecTokenKind.R_BRACE:
            depth -= 1
        elif kind is SpecTokenKind.IDENT and previous in (
            SpecTokenKind.L_BRACE,
            SpecTokenKind.SPACE,
        ):
            key = token.span.text
            if key in seen:
                raise diagnostics.HbirError(
                    f"hbir-opt: error: pass '{names[-1]}': option '{key}' is given "
                    "twice; give it once"
                )
            seen.add(key)
        previous = kind


def main(args: Sequence[str] | None = None) -> None:
    """Run hbir-opt; a user error is one message and status 1.

    Errors the user can cause are caught by type: ``HbirError`` (located IR
    errors, ``HbirFileError`` as ``hbir-opt: error: <file>: <what>``), plugin
    errors, malformed pipelines, unreadable files. Anything else is a bug in
    hbir: it prints as an internal error with its traceback and status 2.
    """
    try:
        HbirOptMain(args).run()
    except (
        diagnostics.HbirFileError,
        HbirOutputError,
        ArgSpecParseError,
        UnknownMarchError,
    ) as e:
        # a file read or written, a malformed -p pipeline, a march: not located
        # in an IR file
        print(f"hbir-opt: error: {e}", file=sys.stderr)
        sys.exit(1)
    except (diagnostics.HbirError, PassRegistryError) as e:
        print(e, file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"hbir-opt: error: {e.filename}: {e.strerror}", file=sys.stderr)
        sys.exit(1)
    except Exception:
        import traceback

        traceback.print_exc()
        print(
            "hbir-opt: internal error: this is a bug in hbir, not in your input; "
            "please report it with the command line and the input file",
            file=sys.stderr,
        )
        sys.exit(2)


if __name__ == "__main__":
    main()
