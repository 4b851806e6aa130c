"""Model sweep: build every architecture we can offline, run it on the neuron device, record
placement, numerics, memory and time per (model, mode), and render a compatibility report.

* :mod:`.registry` -- model builders per suite (``torchvision``, ``transformers``)
* :mod:`.runner`   -- one (model, mode) check, run in a worker subprocess with a timeout
* :mod:`.results`  -- the JSONL results file (resume skips done records)
* :mod:`.report`   -- Markdown + HTML report
"""

SUITES = ("torchvision", "transformers")
MODES = ("eager", "compile", "adaptive")
