"""Model sweep: build every architecture we can offline, run it on the neuron device, record
placement, numerics, memory and time per (model, mode), and render a compatibility report.

* :mod:`.registry` -- model builders per suite (``torchvision`` classification and its
  ``torchvision_detection|segmentation|video|optical_flow`` families, ``timm``, ``transformers``)
* :mod:`.runner`   -- one (model, mode) check, run in a worker subprocess with a timeout
* :mod:`.results`  -- the JSONL results file (resume skips done records)
* :mod:`.report`   -- Markdown + HTML report
"""

SUITES = ("torchvision", "torchvision_detection", "torchvision_segmentation", "torchvision_video",
          "torchvision_optical_flow", "timm", "transformers")
MODES = ("eager", "compile", "adaptive")
