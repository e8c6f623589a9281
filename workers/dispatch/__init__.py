"""The dispatcher, in parts (docs/workers.md, "Inside the dispatcher").

``dispatcher`` (the loop) wires ``claims`` and ``leases`` (SQL of claims and leases), ``spec`` (a run's
rows -> its execution spec; pure), ``submit`` (putting runs on Ray), ``watch`` (runs in flight) and
``record`` (finished runs -> ingest); ``execution`` is their shared data. On the Ray workers: ``task``
(the node task), ``board`` (progress), ``reaper`` (orphaned runner processes). ``ray_runtime`` connects
to Ray; ``lifespan`` starts the in-process dispatcher of ``ablate serve``. Imports run one way (loop ->
parts -> pure helpers), so this package imports nothing itself.
"""
