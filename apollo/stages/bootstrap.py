"""Bootstrap stage: the policy every later stage starts from → ``data/models/base/``.

* ``model.source: embedded`` (default): make the tiny model here, with no download. Fresh task
  instances (seeds disjoint from the train and test suites) are generated; the noisy scripted agent
  works them while the simulated annotator watches (inline: its advice reaches the agent at the next
  step, deterministically), so demonstrations hold realistic mistakes and guidance-following; the tiny Qwen2 model is behaviour-cloned on them through the dataset builder
  (:mod:`apollo.data.build`): the same context windows, trainable flags and summary samples the agent
  sees at inference, the same data path as masked SFT.
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
from apollo.schema import Trajectory, atomic_write_text

log = logging.getLogger(__name__)


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
    if m.get("source", "embedded") == "hf":
        src = Path(m.get("hf_path") or "")
        if not (src / "config.json").exists():
            raise FileNotFoundError(f"params.yaml: model.hf_path: {src} is not a Hugging Face model directory")
        tmp = Path(tempfile.mkdtemp(prefix=".base.", dir=out.parent if out.parent.exists() else None))
        shutil.rmtree(tmp)
        shutil.copytree(src, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
        stats = {"bootstrap.source": "hf"}
        return stats

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
