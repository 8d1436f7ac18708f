"""The prediction layer: predicting many points (fake-tensor runs, composition, the one
cache, the one budget search, the worker pool, the capacity curve); below the runner and
the reports, above measure, memmodel and timemodel."""
