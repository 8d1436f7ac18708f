"""Attention variants, one paper per module. ``attnprof.scenarios.registry`` imports
the built-in modules below on first use, which registers them."""

BUILTIN_MODULES = ("full", "sdpa", "talking_heads", "lsh", "sparse")
