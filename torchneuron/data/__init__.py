"""Package data: generated tables (operator placement)."""
