"""Attention variants, one paper per module, and their registry.

Every module here but ``base``, ``registry`` and ``catalog`` is imported on first use by
``registry`` (a variant module registers its classes; a helper such as ``sparse_patterns``
registers nothing), so adding
a variant is adding a file. ``catalog`` lists them without importing torch:
``catalog.builtin_names`` is the one list of built-ins the CLI, the registry and the
reports share.
"""
