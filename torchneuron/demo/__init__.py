"""The torchneuron demo: train a small character-level GPT on the simulated NeuronCore.

Run it with ``python -m torchneuron.demo`` (or ``make demo``); see ``--help``. The modules are
``corpus`` (generated text and tokenizer), ``model`` (the GPT) and ``train`` (the loop).
"""
