"""``continuity-drift demo``: ``run`` starts and stops it, ``traffic`` tells the simulated
story, ``tally`` counts what the worker published beside its ``/metrics``, ``screen``
shows it."""
