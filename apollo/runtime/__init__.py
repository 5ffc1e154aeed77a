"""Async agent runtime: many episodes in flight against one shared engine, weight updates between.

* :func:`run_episodes` runs the episodes of a stage as coroutines of the one episode loop
  (:func:`apollo.agent.react.arun_episode`) on one event loop, at most ``concurrency`` at a time.
  Generation requests of all episodes go to the same engine: a served vLLM policy
  (:mod:`apollo.engines.vllm_server`) batches the requests in flight into shared forward passes;
  an in-process engine runs each request in a worker thread. Tool calls run in worker threads
  (they block on processes), so a 10 s ``run_command`` never stalls the other episodes.
* :func:`throughput` summarizes what a run did: steps/s, generated tokens/s, generation vs tool time.
* Weight updates: ``engine.update_weights(path, version)`` of a served engine, between training
  steps; every later token carries the new ``policy_version`` (see :mod:`apollo.engines.vllm_server`).
"""

from apollo.runtime.runner import RuntimeError_, run_episodes, run_episodes_async, throughput

__all__ = ["RuntimeError_", "run_episodes", "run_episodes_async", "throughput"]
