"""The experiment instrument: variants x seeds, bootstrap intervals, test-time-scaling curves.

Pure functions (no Prefect, no MLflow): :mod:`.stats` (two-way bootstrap over seeds and tasks),
:mod:`.tts` (score vs step / wall-clock budget from a trajectory's eval records), :mod:`.results`
(the per-variant table, ``results.json``, the paired difference vs ``untrained``), :mod:`.plots`
(the TTS figure as PNG and interactive HTML).
"""
