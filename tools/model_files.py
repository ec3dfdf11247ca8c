"""The model files the ``hbir`` commands read, each checked to be the kind the
argument takes: an IR model (``.bc`` / ``.mlir``) or a compiled ``model.hbm``."""

from __future__ import annotations

from hbir.errors import HbirFileError


def load_ir(path: str, what: str, flag: str = ""):
    """The ``hbir.Module`` at ``path``; a model.hbm is refused, naming ``what``
    the argument (``flag``, if it has one) takes."""
    import hbir

    model = hbir.load(path)
    if not isinstance(model, hbir.Module):
        where = f"{flag} {path}" if flag else path
        raise HbirFileError(
            f"{where}: a compiled model (model.hbm); it takes {what} (a .bc or .mlir)"
        )
    return model


def load_hbm(path: str, flag: str = ""):
    """The ``Hbm`` at ``path``; an IR model is refused by name."""
    import hbir

    model = hbir.load(path)
    if not isinstance(model, hbir.Hbm):
        where = f"{flag} {path}" if flag else path
        raise HbirFileError(
            f"{where}: an hbir model ({type(model).__name__}); it takes the compiled "
            "model.hbm (hbir compile quantized.bc -o model.hbm)"
        )
    return model
