"""The hardware as data: ``gpus`` is the GPU spec table (``gpus.toml`` plus the user's own
files), the one module that both the memory model (memmodel) and the time model
(timemodel) read. Imports neither torch nor pandas."""
