"""Operator conformance of the ``neuron`` device against CPU, driven by PyTorch's OpInfo database.

* :mod:`.cases` enumerates the (op, variant, dtype) cases and the deterministic CI shard;
* :mod:`.runner` runs one case (CPU reference vs device) and raises on a mismatch;
* :mod:`.xfails` is the strict expected-failure table, as data;
* :mod:`.report` turns the outcomes into the summary line and the JSON report.

The pytest front end is ``tests/conformance`` (``make conformance`` runs it all).
"""
