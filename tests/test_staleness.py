"""The staleness control of the asynchronous loops (apollo.rl.staleness), the collapse criterion
(apollo.rl.collapse) and the staleness grid's settings and report (apollo.rl.sao_staleness), on a
micro model built here."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from apollo.agent.actions import format_action
from apollo.env.sanity import make_task, make_tasks
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.rl.collapse import collapse, curve_summary, first_nonfinite, trailing_means
from apollo.rl.sao_loop import LoopConfig, countdown_episode, loop_config, run_loop
from apollo.rl.sao_rollout import PolicyServer, Rollout
from apollo.rl.staleness import LaggedPolicyServer, lag_depth, lag_mean, lag_stats, lag_tail, lagged, make_lag


@pytest.fixture(scope="module")
def tok():
    texts = [t.description for t in make_tasks(30)] + [
        format_action("check", "calc", {"expression": "3+4"}), format_action("", "submit", {"answer": 12})]
    return train_tokenizer(texts * 4, vocab_size=400)


@pytest.fixture()
def model(tok):
    return make_model(make_config(tok, "micro"), seed=0).eval()


def _weights(model, v: int) -> dict[str, torch.Tensor]:
    """Version ``v``'s weights: the model's, every tensor shifted by a version-specific noise."""
    g = torch.Generator().manual_seed(1000 + v)
    return {k: t + 0.3 * torch.randn(t.shape, generator=g) if t.is_floating_point() else t
            for k, t in model.state_dict().items()}


# -- the ring of past weights -------------------------------------------------------------------

@pytest.mark.parametrize("max_batch", [1, 4])
def test_lagged_server_samples_from_the_weights_k_versions_ago(model, tok, max_batch):
    """After publishing versions 1..5, a turn at lag k is sampled by version 5 − k's weights: its
    tokens and log-probs are exactly those of a plain server holding that version's weights (and
    not those of the newest), and it is tagged with that version."""
    server = LaggedPolicyServer(model, tok, depth=3, max_new_tokens=8, max_batch=max_batch)
    prompt = server.prompt_ids(make_task("cd-x", "train", 0).messages())
    server.set_lag(2)  # nothing published yet: the oldest (only) weights, version 0
    assert server.generate(prompt, seed=1)[3] == 0
    for v in range(1, 6):
        assert server.publish(_weights(model, v)) == v
    assert server.version == 5 and server.versions() == [2, 3, 4, 5]
    refs = {}
    for v in (2, 3, 4, 5):
        ref = PolicyServer(model, tok, max_new_tokens=8)
        ref.publish(_weights(model, v), version=v)
        refs[v] = ref.generate(prompt, seed=7)
    for k in (0, 1, 2, 3, 7):  # 7 > depth: the oldest weights kept (version 2)
        server.set_lag(k)
        new, lps, _, version = server.generate(prompt, seed=7)
        want = max(2, 5 - k)
        assert version == want
        assert new == refs[want][0] and lps == pytest.approx(refs[want][1], abs=1e-4)
        if want != 5:
            assert (new, lps) != (refs[5][0], pytest.approx(refs[5][1], abs=1e-4))
    assert server.lag == 7
    server.set_lag(0)
    assert server.generate(prompt, seed=7)[3] == 5
    assert server.served[2] == 2 and server.served[5] == 2


def test_lag_is_per_thread_and_per_group(model, tok):
    """The lag is the calling worker's: a group draws it once for all its episodes, the rows carry
    it, every action token of a group's episodes is tagged with the lagged version, and the other
    thread's turns keep their own lag."""
    import threading

    server = LaggedPolicyServer(model, tok, depth=4, max_new_tokens=6)
    for v in range(1, 7):
        server.publish(_weights(model, v))
    draws = iter([3, 1, 4])
    calls = []

    def draw():
        calls.append(1)
        return next(draws)

    ep = lagged(countdown_episode, draw)
    task = make_task("cd-y", "train", 1, max_steps=2)
    rows = ep(server, task, seed=0, rollout_id="a0", group="A") + ep(server, task, seed=1, rollout_id="a1", group="A")
    assert len(calls) == 1 and [r.meta["lag"] for r in rows] == [3, 3]
    for r in rows:
        acted = {v for v, m in zip(r.versions, r.action_mask) if m}
        assert acted == {3}  # 6 − 3
    assert server.lag == 0  # reset after the episode
    other = {}
    t = threading.Thread(target=lambda: other.setdefault("rows", ep(server, task, seed=2, rollout_id="b0", group="B")))
    t.start()
    t.join()
    assert other["rows"][0].meta["lag"] == 1 and other["rows"][0].version == 5
    assert lag_stats(rows + other["rows"]) == {"lag.mean": pytest.approx(7 / 3), "lag.max": 3.0}
    assert lag_stats([Rollout("x", "t", "g", [1], [1], [0.0], [0.0], [0], 0.0, 1, 0.0)]) == {}


def test_pareto_lag_draws_follow_the_long_tailed_distribution():
    spec = {"dist": "pareto", "scale": 7.47, "shape": 1.5, "cap": 32}
    assert lag_mean(spec) == pytest.approx(8.0, abs=0.01) and lag_depth(spec) == 32
    draw = make_lag(spec, seed=3)
    xs = [draw() for _ in range(40_000)]
    assert min(xs) == 0 and max(xs) == 32 and all(isinstance(x, int) for x in xs)
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))
    assert abs(m - lag_mean(spec)) < 4 * sd / math.sqrt(len(xs))
    for j in (1, 2, 4, 8, 16, 32):  # the tail, P(k ≥ j) = (1 + j/s)^-a
        p = lag_tail(spec, j)
        freq = sum(x >= j for x in xs) / len(xs)
        assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / len(xs)) + 1e-9, (j, freq, p)
    median = sorted(xs)[len(xs) // 2]
    assert median < m / 2  # long-tailed: most groups much fresher than the mean
    assert make_lag(spec, seed=3)() == make_lag(spec, seed=3)()  # seeded
    assert {make_lag({"dist": "fixed", "k": 4}, 0)() for _ in range(5)} == {4}
    assert make_lag({"dist": "none"}, 0)() == 0 and lag_mean({"dist": "fixed", "k": 4}) == 4
    with pytest.raises(ValueError, match="unknown"):
        make_lag({"dist": "zipf"}, 0)
    with pytest.raises(ValueError, match="max_staleness"):
        LoopConfig(lag={"dist": "fixed", "k": 5}, max_staleness=4)


@pytest.mark.parametrize("mode", ["grpo_async", "sao"])
def test_loop_with_a_fixed_lag_trains_on_rollouts_k_versions_old(model, tok, tmp_path, mode):
    """With ``lag: {fixed, k: 3}`` every trained rollout was sampled at least min(3, versions
    published then) versions behind, the measured staleness says so, and each rollout persisted in
    the buffer carries its lag and tokens tagged with versions 3 behind the learner's at the time."""
    cfg = LoopConfig(mode=mode, steps=10, batch_size=4, group_size=2, workers=2, max_staleness=6,
                     buffer_capacity=4, critic_warmup_steps=1, max_new_tokens=6, max_turns=2, num_threads=1,
                     lag={"dist": "fixed", "k": 3}, actor_lr=1e-3, critic_lr=1e-3)
    logs = []
    res = run_loop(model, tok, make_tasks(4), cfg, out_dir=tmp_path, on_log=lambda s, st: logs.append(st))
    assert res["steps"] == 10
    for st in logs:
        before = st["policy_version"] - st["actor_updated"]  # the learner's version when it trained
        assert st["lag.mean"] == 3.0 and st["lag.max"] == 3.0
        assert st["staleness.traj_mean"] >= min(3, before) - 1e-9
        assert st["staleness.traj_max"] <= cfg.max_staleness
    late = [st for st in logs if st["policy_version"] - st["actor_updated"] >= 6]
    assert late and all(st["staleness.token_mean"] >= 3 - 1e-9 for st in late)
    rows = [Rollout(**r) for line in (tmp_path / "buffer" / "rollouts.jsonl").read_text().splitlines()
            for r in json.loads(line)["rollouts"]]
    assert rows and all(r.meta["lag"] == 3 for r in rows)
    top = max(v for r in rows for v in r.versions)
    assert top <= res["policy_version"] - 3  # no token was sampled by the newest 3 versions


# -- the collapse criterion ----------------------------------------------------------------------

def _noisy(mean_fn, n, seed, sd=0.1):
    rng = random.Random(seed)
    return [min(1.0, max(0.0, mean_fn(t) + rng.gauss(0, sd))) for t in range(1, n + 1)]


def test_trailing_means():
    assert trailing_means([1, 2, 3, 4, 5], 2) == [1.5, 2.5, 3.5, 4.5]
    assert trailing_means([1, 2], 3) == []


def test_criterion_fires_on_a_collapse_and_not_on_rising_flat_or_dipping_curves():
    n = 1000
    rising = _noisy(lambda t: 0.45 + 0.2 * t / n, n, 0)
    assert collapse(rising)["fired"] is False and collapse(rising)["pending"] is False
    for s in range(10):  # flat, noisy: the margin keeps noise from firing
        assert collapse(_noisy(lambda t: 0.5, n, s))["fired"] is False
    # without the margin, "below the first 50 updates' mean for 100 updates" fires on noise alone
    assert any(collapse(_noisy(lambda t: 0.5, n, s), margin=0.0)["fired"] for s in range(10))
    falls = _noisy(lambda t: 0.5 if t <= 300 else 0.1, n, 1)
    c = collapse(falls)
    assert c["fired"] and c["reason"] == "reward" and 300 < c["at"] <= 330
    assert c["baseline"] == pytest.approx(sum(falls[:50]) / 50) and c["line"] == pytest.approx(c["baseline"] - 0.05)
    dip = _noisy(lambda t: 0.1 if 400 < t <= 440 else 0.5, n, 2)  # a 40-update dip that recovers
    assert collapse(dip)["fired"] is False
    early = _noisy(lambda t: 0.1 if t <= 80 else 0.5, n, 3)  # warm-up trouble before update 100
    assert collapse(_noisy(lambda t: 0.5, 50, 3) + early[50:])["fired"] is False
    late = _noisy(lambda t: 0.5 if t <= 960 else 0.1, n, 4)  # falls 40 updates before the end
    assert collapse(late)["fired"] is False and collapse(late)["pending"] is True
    assert collapse([0.5] * 30)["fired"] is False  # too short to judge


def test_criterion_fires_at_a_non_finite_loss_and_the_summary_numbers():
    n = 400
    rewards = _noisy(lambda t: 0.4 + 0.3 * t / n, n, 5)
    hist = [{"reward": r, "policy_loss": 0.1, "grad_norm": 1.0} for r in rewards]
    hist[122]["policy_loss"] = float("nan")
    assert first_nonfinite(hist) == 123
    s = curve_summary(hist)
    assert s["collapse"] == {**s["collapse"], "fired": True, "at": 123, "reason": "non_finite"}
    ok = [dict(h, policy_loss=0.1) for h in hist]
    s = curve_summary(ok)
    m = trailing_means(rewards)
    assert s["collapse"]["fired"] is False and s["updates"] == n
    assert s["reward_first"] == pytest.approx(sum(rewards[:50]) / 50)
    assert s["reward_last"] == pytest.approx(sum(rewards[-50:]) / 50)
    assert s["lowest_after_start"] == pytest.approx(min(m[50:]))  # m_t for t ≥ 100
    assert s["drop_peak_to_last"] == pytest.approx(max(m) - m[-1])


# -- the grid ------------------------------------------------------------------------------------

def test_staleness_grid_settings_read_the_projects_params():
    from apollo.config import load_params, project_root
    from apollo.rl.sao_staleness import settings

    params = load_params(project_root() / "params.yaml")
    st = settings(params)
    levels = params["sao"]["stability"]["staleness"]["levels"]
    assert [round(lag_mean(levels[n]["lag"]), 1) for n in ("lag1", "lag4", "lag8")] == [1.0, 4.0, 8.0]
    cells = {(c["level"], c["seed"], c["mode"]) for c in st["cells"]}
    assert {(lv, s) for lv, s, _ in cells} == {("lag1", 0), ("lag4", 0), ("lag8", 0), ("lag8", 1), ("lag8", 2),
                                               ("lag8_lr1e-3", 0), ("lag8_lr1e-3", 1), ("lag8_lr1e-3", 2),
                                               ("lag1_lr1e-3", 0), ("lag8_lr1e-3_band08", 0), ("lag8_lr1e-3_warm100", 0)}
    assert {m for *_, m in cells} == {"sao", "grpo_async"} and len(st["cells"]) == 22
    probe = {c["level"]: loop_config(c["loop"], mode="sao") for c in st["cells"] if c["seed"] == 0}
    assert (probe["lag8_lr1e-3_band08"].eps_low, probe["lag8_lr1e-3_band08"].eps_high) == (0.8, 3.0)
    assert probe["lag8_lr1e-3_warm100"].critic_warmup_steps == 100 and probe["lag1_lr1e-3"].actor_lr == 1e-3
    over = params["sao"]["stability"]["overrides"]
    for c in st["cells"]:
        cfg = loop_config(c["loop"], mode=c["mode"])
        assert cfg.lag == levels[c["level"]]["lag"] and cfg.seed == c["seed"]
        want = {**over, **{k: v for k, v in levels[c["level"]].items() if k in over}}
        assert {k: getattr(cfg, k) for k in over} == want  # the stability run's sizes (the probe: its lr)
    assert loop_config(next(c for c in st["cells"] if c["level"] == "lag8_lr1e-3")["loop"]).actor_lr == 1e-3
    assert settings(params, levels=["lag8"], seeds=[4], steps=9)["steps"] == 9
    with pytest.raises(ValueError, match="unknown staleness levels"):
        settings(params, levels=["lag99"])


def test_report_table_over_seeds(tmp_path):
    """The report reads finished cells from disk: per level and mode, means over seeds with a
    t-interval, the criterion's firings, and SAO − GRPO paired on the seed."""
    from apollo.rl.sao_staleness import report, run_summary

    for seed in range(3):
        for mode, fn in (("sao", lambda t: 0.45 + 0.0002 * t), ("grpo_async", lambda t: 0.45 if t < 200 else 0.1)):
            d = tmp_path / "lag8" / f"s{seed}"
            d.mkdir(parents=True, exist_ok=True)
            rewards = _noisy(fn, 400, seed * 10 + len(mode))
            hist = [{"step": i + 1, "reward": r, "entropy": 0.1, "grad_norm": 0.5, "masked_fraction": 0.01,
                     "staleness.token_mean": 8.0, "staleness.token_max": 32.0, "lag.mean": 8.0}
                    for i, r in enumerate(rewards)]
            (d / f"{mode}.jsonl").write_text("".join(json.dumps(h) + "\n" for h in hist))
            (d / f"{mode}.result.json").write_text(json.dumps(
                {"level": "lag8", "seed": seed, "mode": mode, "seconds": 1.0, "summary": run_summary(hist)}))
    rows, text = report(tmp_path, ["lag1", "lag8"])
    by = {r["mode"]: r for r in rows}
    assert by["grpo_async"]["fired"] == [True] * 3 and by["sao"]["fired"] == [False] * 3
    m, lo, hi = by["grpo_async"]["reward_last"]
    assert lo < m < hi and 0.05 < m < 0.15
    assert "| lag8 | grpo_async | 0,1,2 | 400 |" in text and "3/3 (at" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    _, dlo, _ = summary["paired_sao_minus_grpo_reward_last"]["lag8"]
    assert dlo > 0.3  # SAO holds, GRPO collapsed, in every seed
    assert (tmp_path / "staleness.png").stat().st_size > 0 and (tmp_path / "table.md").exists()


@pytest.mark.parametrize("preset,steps", [("micro", 300)])
def test_preset_model_from_scratch_learns_the_countdown_format(tmp_path, preset, steps):
    """``model: preset:<name>``: a fresh preset with a countdown tokenizer, cloned on the scripted
    episodes, calls ``calc`` then ``submit`` in well-formed turns that fit ``max_new_tokens``; the
    random model it starts from does not."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.rl.sao_loop import warm_start
    from apollo.rl.sao_rollout import run_episode
    from apollo.rl.sao_staleness import build_preset_model

    path = build_preset_model(preset, tmp_path / "base", vocab_size=1024, seed=0)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tk = AutoTokenizer.from_pretrained(path)
    tasks = make_tasks(64)

    def mean_reward(m):
        server = PolicyServer(m, tk, max_new_tokens=40)
        rs = [run_episode(server, make_task(t.task_id, t.split, i, max_steps=2), seed=i, rollout_id=f"r{i}", group="g")
              for i, t in enumerate(tasks[:12])]
        return sum(r.reward for r in rs) / len(rs)

    before = mean_reward(model)
    stats = warm_start(model, tk, tasks, steps=steps, lr=3e-3, batch_size=8, seed=0, num_threads=1)
    model.eval()
    after = mean_reward(model)
    assert stats["loss_last"] < 0.25 * stats["loss_first"]
    assert before < 0.1 and after > 0.35, (before, after, stats)


@pytest.mark.parametrize("mode", ["sao", "grpo_async"])
def test_the_highest_levels_cell_config_runs(model, tok, mode):
    """A few updates of params.yaml's ``lag8`` cell (the stability sizes, the long-tailed lag):
    lags drawn up to the cap, nothing dropped as stale (max_staleness covers the cap), the measured
    staleness grows with the versions published."""
    from apollo.config import load_params, project_root
    from apollo.rl.sao_staleness import settings

    cell = next(c for c in settings(load_params(project_root() / "params.yaml"), levels=["lag8"])["cells"]
                if c["mode"] == mode)
    cfg = loop_config(cell["loop"], mode=mode, steps=30, num_threads=1)
    logs = []
    res = run_loop(model, tok, make_tasks(cfg.n_tasks, seed=cfg.seed), cfg, on_log=lambda s, st: logs.append(st))
    assert res["steps"] == 30 and res["dropped_stale"] == 0
    assert all(0 <= st["lag.max"] <= 32 for st in logs)
    assert sum(st["lag.mean"] for st in logs) / len(logs) > 1.0
    assert max(st["staleness.traj_max"] for st in logs) >= 4


def test_staleness_cli_runs_cells_once_and_logs_them_to_mlflow(tmp_path, monkeypatch, capsys):
    """``python -m apollo.rl.sao_staleness`` end to end on a small grid: a preset model built and
    warm-started once, a process per cell, each cell's history, result and MLflow child run, the
    report; a second call finds the cells finished and runs nothing."""
    import yaml
    from mlflow.tracking import MlflowClient

    from apollo.config import load_params, project_root
    from apollo.rl import sao_staleness

    params = load_params(project_root() / "params.yaml")
    grid = params["sao"]["stability"]["staleness"]
    grid.update(warm_start={"steps": 5, "lr": 3e-3, "batch_size": 4}, out="out", seeds={"lag8": [0]},
                overrides={"n_tasks": 8, "critic_warmup_steps": 2})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("APOLLO_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    argv = ["--params", str(tmp_path / "params.yaml"), "--levels", "lag8", "--steps", "6"]
    assert sao_staleness.main(argv) == 0
    out = tmp_path / "out"
    for mode in ("sao", "grpo_async"):
        res = json.loads((out / "lag8" / "s0" / f"{mode}.result.json").read_text())
        assert res["summary"]["updates"] == 6 and res["lag"]["cap"] == 32
        assert len((out / "lag8" / "s0" / f"{mode}.jsonl").read_text().splitlines()) == 6
    assert (out / "warm_start" / "config.json").exists() and (out / "base" / "tokenizer.json").exists()
    assert "| lag8 | sao | 0 | 6 |" in (out / "table.md").read_text()
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("apollo").experiment_id])
    names = {r.info.run_name for r in runs}
    assert {"sao_staleness", "rl_staleness@lag8-sao-s0", "rl_staleness@lag8-grpo_async-s0"} <= names
    capsys.readouterr()
    before = (out / "lag8" / "s0" / "sao.jsonl").stat().st_mtime_ns
    assert sao_staleness.main(argv) == 0  # finished cells are skipped
    assert (out / "lag8" / "s0" / "sao.jsonl").stat().st_mtime_ns == before
    assert "| lag8 | grpo_async | 0 | 6 |" in capsys.readouterr().out
