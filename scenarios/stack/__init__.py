"""The transformer stack attnprof profiles at scope ``model`` (``blocks``), with its
memory-saving modes: gradient checkpointing and reversible residuals (``reversible``)."""
