"""A toy stage for the flow tests, run by DVC like a real one (``python toy_stage.py NAME [ITEM]``)
through :func:`apollo.stages.run_stage`: it reads its params section, waits for ``gate-NAME`` when
``wait`` is set (so a test can edit params.yaml while it runs), and writes ``out/<stage>.json``
with the value it used and a total over its inputs."""

import json
import os
import sys
import time
from pathlib import Path

from apollo.stages import run_stage

INPUTS = {"a": [], "b": ["out/a.json"], "c": ["out/b.json"]}


def run(params, tracker, variant=None):
    stage = os.environ["DVC_STAGE"]
    name = stage.split("@")[0]
    p = params[name]
    Path(f"started-{name}").write_text(stage)
    t0 = time.time()
    while p.get("wait") and not Path(f"gate-{name}").exists() and time.time() - t0 < 300:
        time.sleep(0.1)
    inputs = {f: json.loads(Path(f).read_text()) for f in INPUTS[name]}
    total = p["value"] + sum(v["total"] for v in inputs.values())
    Path("out").mkdir(exist_ok=True)
    out = Path("out") / f"{stage.replace('@', '-')}.json"
    out.write_text(json.dumps({"value": p["value"], "total": total}))
    tracker.log_metrics({f"{name}.total": total})
    return {"total": total}


if __name__ == "__main__":
    run_stage(sys.argv[1], variant=sys.argv[2] if len(sys.argv) > 2 else None, module=sys.modules[__name__])
