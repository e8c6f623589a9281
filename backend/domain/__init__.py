"""The ground floor: Ablate's shared vocabulary, importing nothing of the project.

- :mod:`.metrics`: the metric registry (names, units, which direction is better).
- :mod:`.factors`: factor names of the CNP ladder and their normalisation.
- :mod:`.states`: run and study states, with the one set of terminal states.
- :mod:`.runner`: the runner contract (RunSpec in, RunResult out) and the runner registry.
- :mod:`.placement`: what a run asks of Ray, and the label-selector rules pools are matched by.
- :mod:`.formatting`: how numbers, intervals and missing values read (dashboard, reports, charts).
- :mod:`.catalog`: releases and workloads as the comparison report and the catalog API show them.

Every other layer imports from here; nothing here imports from them (an import-linter contract in
``.ci/run`` keeps it so).
"""
