"""attnprof: what each attention variant costs, in bytes and milliseconds, up to 64K tokens."""

__version__ = "0.1.0"
