"""Trainer settings of the tiny preset (``model.source: embedded``), which the trainer tests were
written for. ``params.yaml``'s ``train`` section is sized for the default policy (SmolLM2-135M on 2
cores: 12 steps of 2 rows of 2048 tokens, lr 5e-5); these tests train micro/tiny models on a few
conversations, so they overlay the tiny preset's values (one epoch, no step cap, 4096 tokens)."""

TINY_TRAIN = {"lr": 5e-4, "min_lr": 1e-4, "warmup_steps": 5, "max_steps": None, "grad_accum": 8, "max_length": 4096,
              "bf16": False}  # fp32: the tests' tolerances (DeepSpeed vs the plain loop, ranks) are fp32's
