"""One trainer for every objective, split by responsibility.

- :mod:`~apollo.train.config`: the typed, validated configuration (defaults live in params.yaml only)
- :mod:`~apollo.train.batching`: examples → rows → micro-batches
- :mod:`~apollo.train.objectives`: the pluggable ``Objective`` (SFT, token-level policy gradient)
- :mod:`~apollo.train.engine`: optimizer engines (``torch`` in-process, DeepSpeed ZeRO 0–3)
- :mod:`~apollo.train.loop`: the step loop every backend and objective goes through
- :mod:`~apollo.train.checkpoint`, :mod:`~apollo.train.ds_config`, :mod:`~apollo.train.launch`
- :mod:`~apollo.train.cli`: ``python -m apollo.train`` (one DeepSpeed rank)
"""
