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
SPARSE = "sparse layouts have no device representation: the device holds strided tensors only"
IHFFTN_OUT = (
    "PyTorch 2.14 bug: fft_ihfftn_impl (SpectralOps.cpp) calls at::conj_physical_out(tmp, out) with "
    "the arguments swapped when one dim is transformed, so conj_physical.out reads the unwritten out= "
    "tensor; the CPU gives the same wrong result when the call reaches a Python kernel (reproduced "
    "under a TorchDispatchMode), as every call on a Python-registered backend does"
)

LCE_AUTO = (
    "PyTorch resolves LinearCrossEntropyOptions(acc_policy='auto') per device type "
    "(torch/nn/modules/linear_cross_entropy_options.py: _auto_acc_policy gives the CPU its own "
    "choice for bf16/fp16), so the CPU and the device run different accumulation variants; with "
    "acc_policy 'accurate' or 'compact' given explicitly the device equals the CPU bit for bit"
)

XFAILS: dict[tuple[str, str, str], str] = {
    ("abs", "*", "int64"): INT64_AS_INT32,
    ("unravel_index", "forward", "int64"): INT64_AS_INT32,
    ("unravel_index", "noncontig", "int64"): INT64_AS_INT32,
    ("to_sparse", "*", "*"): SPARSE,
    ("nn.functional.linear_cross_entropy.chunked_none", "forward", "bfloat16"): LCE_AUTO,
    ("nn.functional.linear_cross_entropy.chunked_none", "noncontig", "bfloat16"): LCE_AUTO,
    ("fft.ihfft2", "out", "*"): IHFFTN_OUT,
    ("fft.ihfftn", "out", "*"): IHFFTN_OUT,
}


def reason_for(op: str, variant: str, dtype: str) -> str | None:
    """The expected-failure reason of a case, or ``None`` when it must pass."""
    for key in ((op, variant, dtype), (op, variant, "*"), (op, "*", dtype), (op, "*", "*")):
        reason = XFAILS.get(key)
        if reason is not None:
            return reason
    return None
