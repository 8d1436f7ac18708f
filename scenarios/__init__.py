"""What attnprof runs: attention variants, the transformer stack, and scenario files."""
