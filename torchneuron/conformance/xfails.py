"""The strict expected-failure table of the conformance suite.

Keyed by ``(op, variant, dtype)`` where ``op`` is the OpInfo name plus ``.variant_test_name``
when it has one, ``variant`` is one of :data:`torchneuron.conformance.cases.VARIANTS` and
``dtype`` a short dtype name (``"float32"``); ``variant`` and ``dtype`` may be ``"*"`` (any). Every entry names the
*expected* difference between the device and the CPU that makes it fail; device bugs do not
belong here. An entry whose case passes fails the run (strict xfail) until it is removed.
"""

from __future__ import annotations

# Reasons, shared by entries (the JSON report counts xfails by reason).
INT64_AS_INT32 = (
    "int64 is computed as int32 on the NeuronCore (DESIGN dtype policy): the sample's values "
    "beyond the int32 range wrap"
)
COMPLEX = (
    "complex dtypes have no device representation (DESIGN dtype policy): the device refuses "
    "a complex result or input with a TypeError; keep complex tensors on the CPU"
)
SPARSE = "sparse layouts have no device representation: the device holds strided tensors only"
UINT = (
    "uint64 has no device representation (DESIGN dtype policy): the device refuses the "
    "op's uint64 result with a TypeError"
)

XFAILS: dict[tuple[str, str, str], str] = {
    ("cdouble", "*", "*"): COMPLEX,
    ("cfloat", "*", "*"): COMPLEX,
    ("chalf", "*", "*"): COMPLEX,
    ("complex", "*", "*"): COMPLEX,
    ("fft.fft", "*", "*"): COMPLEX,
    ("fft.fft2", "*", "*"): COMPLEX,
    ("fft.fftn", "*", "*"): COMPLEX,
    ("fft.hfft", "*", "*"): COMPLEX,
    ("fft.hfft2", "*", "*"): COMPLEX,
    ("fft.hfftn", "*", "*"): COMPLEX,
    ("fft.ifft", "*", "*"): COMPLEX,
    ("fft.ifft2", "*", "*"): COMPLEX,
    ("fft.ifftn", "*", "*"): COMPLEX,
    ("fft.ihfft", "*", "*"): COMPLEX,
    ("fft.ihfft2", "*", "*"): COMPLEX,
    ("fft.ihfftn", "*", "*"): COMPLEX,
    ("fft.irfft", "*", "*"): COMPLEX,
    ("fft.irfft2", "*", "*"): COMPLEX,
    ("fft.irfftn", "*", "*"): COMPLEX,
    ("fft.rfft", "*", "*"): COMPLEX,
    ("fft.rfft2", "*", "*"): COMPLEX,
    ("fft.rfftn", "*", "*"): COMPLEX,
    ("linalg.eig", "*", "*"): COMPLEX,
    ("linalg.eigvals", "*", "*"): COMPLEX,
    ("polar", "*", "*"): COMPLEX,
    ("stft", "*", "*"): COMPLEX,
    ("view_as_complex", "grad", "*"): COMPLEX,
    ("abs", "*", "int64"): INT64_AS_INT32,
    ("unravel_index", "forward", "int64"): INT64_AS_INT32,
    ("unravel_index", "noncontig", "int64"): INT64_AS_INT32,
    ("to_sparse", "*", "*"): SPARSE,
    ("hash_tensor", "*", "*"): UINT,
}


def reason_for(op: str, variant: str, dtype: str) -> str | None:
    """The expected-failure reason of a case, or ``None`` when it must pass."""
    for key in ((op, variant, dtype), (op, variant, "*"), (op, "*", dtype), (op, "*", "*")):
        reason = XFAILS.get(key)
        if reason is not None:
            return reason
    return None
