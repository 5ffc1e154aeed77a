"""The variant table and the experiment DAG: each variant's cells differ from ``full`` exactly where
the paper says (no_mask: the build's masks param; no_human: the unguided rollouts; untrained: no
training at all), every cell depends only on its own seed, and the table guards its DVC lists."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from apollo.experiment.variants import VariantTableError, cells, check_table

ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
APPO = ["appo", "appo_no_future", "appo_single_group", "appo_entropy_only", "appo_mixed", "appo_mixed_lr"]
SAO = ["sao", "sao_guided", "grpo_async", "grpo_sync"]
RL = APPO + SAO


@pytest.fixture(scope="module")
def dag():
    """stage address -> (upstream addresses, declared params, data deps) from DVC's own index."""
    import networkx as nx
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    repo = Repo(str(ROOT))
    try:
        stages = {s.addressing: s for s in repo.index.stages}
        out = {}
        for a, st in stages.items():
            params = sorted(p for d in st.deps if isinstance(d, ParamsDependency) for p in (d.params or []))
            data = sorted(str(d.def_path) for d in st.deps
                          if not isinstance(d, ParamsDependency) and str(d.def_path).startswith("data/"))
            out[a] = ({s.addressing for s in nx.descendants(repo.index.graph, st)}, params, data)
        return out
    finally:
        repo.close()


def _cell_chain(dag, address):
    up, _, _ = dag[address]
    return {a for a in up | {address} if a not in ("suite", "bootstrap")}


def test_each_variant_differs_from_full_where_the_paper_says(dag):
    seed = PARAMS["experiment"]["seeds"][-1]
    full = _cell_chain(dag, f"evaluate@full-{seed}")
    assert full == {f"rollout@guided-{seed}", f"guidance@guided-{seed}", f"mask@guided-{seed}",
                    f"build_guided@full-{seed}", f"train@full-{seed}", f"evaluate@full-{seed}"}
    # no_mask: the same guided rollouts, guidance and masks; its own build (masks off) and training
    no_mask = _cell_chain(dag, f"evaluate@no_mask-{seed}")
    assert full & no_mask == {f"rollout@guided-{seed}", f"guidance@guided-{seed}", f"mask@guided-{seed}"}
    b_full, b_nm = dag[f"build_guided@full-{seed}"], dag[f"build_guided@no_mask-{seed}"]
    assert b_full[2] == b_nm[2] == ["data/masked/guided/s%d" % seed, "data/models/base"]
    assert b_full[1] == ["build", "experiment.variants.full"]
    assert b_nm[1] == ["build", "experiment.variants.no_mask"]
    assert PARAMS["experiment"]["variants"]["no_mask"] == {**PARAMS["experiment"]["variants"]["full"], "masks": False}
    # no_human: rollouts without the annotator, nothing shared with full's cell
    no_human = _cell_chain(dag, f"evaluate@no_human-{seed}")
    assert not (full & no_human)
    assert f"rollout@unguided-{seed}" in no_human and f"mask@unguided-{seed}" in no_human
    assert PARAMS["experiment"]["variants"]["no_human"] == {**PARAMS["experiment"]["variants"]["full"],
                                                            "rollouts": "unguided"}
    # the RL variants (APPO, SAO, GRPO): an rl stage from the base policy, then its evaluation;
    # nothing shared with full
    for v in RL:
        chain = _cell_chain(dag, f"evaluate@{v}-{seed}")
        assert chain == {f"rl@{v}-{seed}", f"evaluate@{v}-{seed}"}
        assert dag[f"rl@{v}-{seed}"][1] == ["appo", f"experiment.variants.{v}", "mask", "sao"]
        assert dag[f"rl@{v}-{seed}"][2] == ["data/models/base", "data/suite"]
        assert dag[f"evaluate@{v}-{seed}"][1] == ["evaluate"]
    # untrained: the base policy, nothing trained
    up, params, data = dag[f"evaluate_untrained@{seed}"]
    assert up == {"suite", "bootstrap"} and data == ["data/models/base", "data/suite"]
    # the same stage code and params for the same step of every variant
    for v in ("no_mask", "no_human"):
        assert dag[f"train@{v}-{seed}"][1] == dag[f"train@full-{seed}"][1] == ["train"]
        assert dag[f"evaluate@{v}-{seed}"][1] == dag[f"evaluate_untrained@{seed}"][1] == ["evaluate"]


def test_cells_depend_only_on_their_own_seed(dag):
    seeds = PARAMS["experiment"]["seeds"]
    for a, (up, _, _) in dag.items():
        if "-" in a or a.startswith("evaluate_untrained@"):
            s = a.rsplit("-", 1)[-1] if "-" in a else a.split("@")[1]
            others = {u for u in up if u not in ("suite", "bootstrap")
                      and (u.rsplit("-", 1)[-1] if "-" in u else u.split("@")[-1]) != s}
            assert not others, f"{a} depends on another seed's stages {others}"
    exp_up = dag["experiment"][0]
    for v, s in cells(PARAMS):
        assert (f"evaluate_untrained@{s}" if v == "untrained" else f"evaluate@{v}-{s}") in exp_up
    assert len(seeds) >= 3


def test_the_table_guards_the_lists_dvc_reads():
    table = check_table(PARAMS)
    assert list(table) == ["untrained", "full", "no_mask", "no_human", *RL]
    bad = copy.deepcopy(PARAMS)
    bad["experiment"]["variants"]["ppo"] = {"policy": "ppo"}  # a new method: the evaluate list must name it
    with pytest.raises(VariantTableError, match=r"experiment.evaluated .* gives \[.*'grpo_sync', 'ppo'\]"):
        check_table(bad)
    bad["experiment"]["evaluated"].append("ppo")
    assert check_table(bad)["ppo"].trained
    bad = copy.deepcopy(PARAMS)
    bad["experiment"]["variants"]["full"]["rollouts"] = "sometimes"
    with pytest.raises(VariantTableError, match=r"experiment.variants.full.rollouts: 'sometimes'"):
        check_table(bad)
    with pytest.raises(VariantTableError, match=r"seeds \[7\] are not in"):
        cells(PARAMS, only_seeds=[7])
    with pytest.raises(VariantTableError, match=r"variants \['nope'\]"):
        cells(PARAMS, only_variants=["nope"])
    assert cells(PARAMS, ["full", "untrained"], [0]) == [("full", 0), ("untrained", 0)]
