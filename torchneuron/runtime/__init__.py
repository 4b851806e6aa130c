"""The simulated NeuronCore: target figures, device memory, the hardware queue and errors."""
