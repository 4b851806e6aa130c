"""The error raised when a graph cannot be compiled for the NeuronCore."""

from __future__ import annotations


class NeuronCompilationError(RuntimeError):
    """A graph (or a region of it) could not be lowered to StableHLO or compiled.

    ``op`` is the ATen operator that failed (when it could be isolated), ``location`` the
    user's source line that produced it, ``dump_dir`` where the graph, StableHLO and compile
    log were saved (``TORCHNEURON_DUMP_DIR``), if set.
    """

    def __init__(self, message: str, *, op: str | None = None, location: str | None = None,
                 dump_dir: str | None = None, advice: bool = True):
        parts = [message]
        if op:
            parts.append(f"  failing op: {op}")
        if location:
            parts.append(f"  source: {location}")
        if dump_dir:
            parts.append(f"  graph, StableHLO and compile log saved in: {dump_dir}")
        elif advice:
            parts.append("  set TORCHNEURON_DUMP_DIR=<dir> to save the graph, StableHLO and compile log")
        if advice:
            parts.append(
                "  pass options={'fallback': True} to torch.compile (or set "
                "TORCHNEURON_COMPILE_FALLBACK=1) to run such graphs eagerly instead"
            )
        super().__init__("\n".join(parts))
        self.op = op
        self.location = location
        self.dump_dir = dump_dir
