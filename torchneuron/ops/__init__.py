"""Eager kernels of the simulated NeuronCore: memory ops, the generic kernel, dtype and
autocast rules, and operator-placement tracking."""
