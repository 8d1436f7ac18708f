"""Running many points: the plan (scenario -> points), the sweep (each point in its own
process: ``worker``, ``preload``), predictions, progress, the manifest and run-folder
storage."""
