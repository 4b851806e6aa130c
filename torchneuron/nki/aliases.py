"""Opt-in import aliases so published NKI kernels run unedited.

:func:`install_aliases` (or ``TORCHNEURON_NKI_ALIAS=1`` when ``torchneuron.nki`` is imported)
makes ``import nki``, ``nki.language``, ``nki.isa``, ``nki.typing`` resolve to this package and
``neuronxcc.nki``, ``neuronxcc.nki.language``, ``neuronxcc.nki.isa``, ``neuronxcc.nki.typing``
to the legacy dialect (ISA calls returning tiles). It works through ``sys.modules`` entries and
never shadows a module that is already imported unless ``force=True``.
"""

from __future__ import annotations

import sys
import types

_INSTALLED: list[str] = []


def _legacy_package() -> types.ModuleType:
    from .. import nki as current_nki
    from . import language, legacy, simulator
    from . import typing as nki_typing

    mod = types.ModuleType("neuronxcc.nki", "The legacy NKI dialect, simulated by torchneuron.nki.")
    mod.__path__ = []  # a package, so `import neuronxcc.nki.isa` works
    for name in (
        "jit",
        "simulate",
        "simulate_kernel",
        "last_profile",
        "NKIRuleError",
        "Profile",
        "baremetal",
        "benchmark",
        "profile",
    ):
        setattr(mod, name, getattr(current_nki, name))
    mod.language = language
    mod.isa = legacy
    mod.typing = nki_typing
    mod._simulator = simulator
    return mod


def alias_map() -> dict[str, types.ModuleType]:
    from .. import nki as current_nki
    from . import isa, language, legacy
    from . import typing as nki_typing

    legacy_nki = _legacy_package()
    neuronxcc = types.ModuleType(
        "neuronxcc", "Alias package created by torchneuron.nki.install_aliases()."
    )
    neuronxcc.__path__ = []
    neuronxcc.nki = legacy_nki
    return {
        "nki": current_nki,
        "nki.language": language,
        "nki.isa": isa,
        "nki.typing": nki_typing,
        "neuronxcc": neuronxcc,
        "neuronxcc.nki": legacy_nki,
        "neuronxcc.nki.language": language,
        "neuronxcc.nki.isa": legacy,
        "neuronxcc.nki.typing": nki_typing,
    }


def install_aliases(force: bool = False) -> list[str]:
    """Register the aliases; return the module names now pointing at torchneuron.nki."""
    added = []
    for name, module in alias_map().items():
        if name in sys.modules and not force and name not in _INSTALLED:
            continue
        sys.modules[name] = module
        if name not in _INSTALLED:
            _INSTALLED.append(name)
        added.append(name)
    return added


def uninstall_aliases() -> None:
    """Remove the aliases installed by :func:`install_aliases`."""
    while _INSTALLED:
        sys.modules.pop(_INSTALLED.pop(), None)
