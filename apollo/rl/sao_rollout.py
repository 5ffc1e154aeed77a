"""The rollout side of the asynchronous RL loop (:mod:`apollo.rl.sao_loop`): the policy copy that the
rollout workers sample from, a multi-turn episode on the sanity environment, and the bounded,
persisted rollout buffer with a maximum staleness.

Token-in/token-out: a conversation is one growing list of token ids; the policy samples its turn
after it, the observation's tokens are appended, and the training row is exactly that list, so
nothing is re-tokenized between rollout and training. Every sampled token records the policy version
that produced it (:attr:`PolicyServer.version` at its turn): when the trainer publishes new weights
in the middle of an episode, the episode goes on with them and its later tokens carry the new
version (partial rollouts continue across updates).
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from apollo.engines.hf_batch import DecodeBatcher, DecodeRequest, sample_token
from apollo.env.sanity import CountdownEnv, CountdownTask


def prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """An episode's first tokens: the chat template up to the first assistant header."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def observation_ids(tokenizer: Any, text: str) -> list[int]:
    """Tokens after an assistant turn's ``<|im_end|>``: the tool turn, then the next assistant header."""
    return list(tokenizer.encode(f"\n<|im_start|>tool\n{text}<|im_end|>\n<|im_start|>assistant\n",
                                 add_special_tokens=False))


class PolicyServer:
    """The served policy of the loop: a copy of the trainer's model that workers sample from.

    ``publish(state_dict)`` loads new weights and bumps :attr:`version`; each generated turn sees one
    version (a turn in flight finishes with the weights it started with: ``publish`` stops new turns
    from starting, waits for the turns in flight, swaps the weights, then lets turns start again).

    ``max_batch > 1``: the workers' turns decode together (:class:`apollo.engines.hf_batch.DecodeBatcher`,
    continuous batching over per-row KV slots, one model thread); ``1``: each turn runs alone,
    one at a time.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, temperature: float = 1.0,
                 max_new_tokens: int = 32, max_batch: int = 1, max_len: int | None = None):
        # the workers sample on CPU, as always; the learner's module may sit on a GPU (a DeepSpeed rank)
        self.model = copy.deepcopy(model).to("cpu").eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.eos_id = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.version = 0
        self._lock = threading.Lock()  # one lone turn at a time (max_batch 1)
        self._gate = threading.Condition()
        self._inflight = 0
        self._publishing = False
        self.batcher = None
        if int(max_batch) > 1:
            self.batcher = DecodeBatcher(self.model, max_batch=int(max_batch), eos_ids=[self.eos_id],
                                         sample=self._sample, max_len=max_len)

    def publish(self, state_dict: dict[str, torch.Tensor], version: int | None = None) -> int:
        with self._gate:
            self._publishing = True
            try:
                self._gate.wait_for(lambda: self._inflight == 0)
                self.model.load_state_dict(state_dict)
                self.version = self.version + 1 if version is None else int(version)
                return self.version
            finally:
                self._publishing = False
                self._gate.notify_all()

    def _sample(self, logits: torch.Tensor, gen: torch.Generator) -> tuple[int, float, float]:
        return sample_token(logits, gen, self.temperature)

    @torch.no_grad()
    def generate(self, ids: list[int], seed: int) -> tuple[list[int], list[float], list[float], int]:
        """Sample one turn after ``ids`` → (new ids, sampling logprobs, entropies, policy version)."""
        gen = torch.Generator().manual_seed(int(seed))
        with self._gate:
            self._gate.wait_for(lambda: not self._publishing)
            self._inflight += 1
            version = self.version
        try:
            if self.batcher is not None:
                req = self.batcher.submit(DecodeRequest(ids=list(ids), limit=self.max_new_tokens, rng=gen))
                return req.new, req.logprobs, req.entropies, version
            with self._lock:
                out = self.model(input_ids=torch.tensor([ids]), use_cache=True)
                past = out.past_key_values
                new, lps, ents = [], [], []
                for _ in range(self.max_new_tokens):
                    tok, lp, ent = self._sample(out.logits[0, -1], gen)
                    new.append(tok)
                    lps.append(lp)
                    ents.append(ent)
                    if tok == self.eos_id:
                        break
                    out = self.model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
                    past = out.past_key_values
            return new, lps, ents, version
        finally:
            with self._gate:
                self._inflight -= 1
                self._gate.notify_all()

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return prompt_ids(self.tokenizer, messages)

    def observation_ids(self, text: str) -> list[int]:
        return observation_ids(self.tokenizer, text)


@dataclass
class Rollout:
    """One finished episode as a training row. ``action_mask`` is 1 on the policy's sampled tokens;
    ``logprobs``/``entropies``/``versions`` are those tokens' sampling logprob, entropy and policy
    version (0 / 0 / −1 elsewhere)."""

    rollout_id: str
    task_id: str
    group: str
    input_ids: list[int]
    action_mask: list[int]
    logprobs: list[float]
    entropies: list[float]
    versions: list[int]
    reward: float
    turns: int
    seconds: float
    finished_at: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> int:
        """The policy version of the first sampled token (staleness is measured from there)."""
        return next((v for v in self.versions if v >= 0), -1)

    def n_action(self) -> int:
        return int(sum(self.action_mask))


def run_episode(server: PolicyServer, task: CountdownTask, *, seed: int, rollout_id: str, group: str,
                latency: Callable[[], float] | None = None) -> Rollout:
    """Roll out ``task`` with the current policy (blocking); weights may change between turns."""
    t0 = time.perf_counter()
    env = CountdownEnv(task, latency)
    ids = server.prompt_ids(task.messages())
    mask, lps, ents, vers = [0] * len(ids), [0.0] * len(ids), [0.0] * len(ids), [-1] * len(ids)
    turn = 0
    while not env.done:
        new, lp, ent, v = server.generate(ids, seed * 1009 + turn)
        ids += new
        mask += [1] * len(new)
        lps += lp
        ents += ent
        vers += [v] * len(new)
        if not new or new[-1] != server.eos_id:  # cut at max_new_tokens: close the turn (not a policy token)
            ids.append(server.eos_id)
            mask.append(0), lps.append(0.0), ents.append(0.0), vers.append(-1)
        obs, done = env.step(server.tokenizer.decode(new, skip_special_tokens=True))
        turn += 1
        if not done:
            o = server.observation_ids(obs)
            ids += o
            mask += [0] * len(o)
            lps += [0.0] * len(o)
            ents += [0.0] * len(o)
            vers += [-1] * len(o)
    return Rollout(rollout_id, task.task_id, group, ids, mask, lps, ents, vers, env.reward(), turn,
                   time.perf_counter() - t0, time.time())


class RolloutBuffer:
    """Bounded FIFO of rollout *groups* (SAO: groups of one; GRPO: the G rollouts of a prompt) with a
    maximum staleness, persisted so that a restart after a kill loses no finished rollout.

    ``put`` blocks while ``capacity`` groups wait (back-pressure on the workers); after ``close`` it
    only persists the group (a worker finishing its episode while the loop stops loses nothing). ``take(n, version)``
    returns the oldest groups holding ≥ ``n`` rollouts, first dropping every group whose staleness
    ``version − group version`` exceeds ``max_staleness`` (counted in :attr:`dropped`).

    Persistence (``path`` a directory): each finished group is appended to ``rollouts.jsonl`` and each
    consumed or dropped group id to ``consumed.jsonl`` (both flushed and fsynced), so the buffer of a
    new instance on the same directory is exactly the groups put and not yet consumed.
    """

    def __init__(self, capacity: int, max_staleness: int, path: str | Path | None = None):
        if capacity < 1 or max_staleness < 0:
            raise ValueError(f"RolloutBuffer: capacity ≥ 1 and max_staleness ≥ 0 required, got {capacity}, {max_staleness}")
        self.capacity, self.max_staleness = int(capacity), int(max_staleness)
        self.path = Path(path) if path is not None else None
        self._groups: deque[list[Rollout]] = deque()
        self._cond = threading.Condition()
        self.dropped = 0
        self.closed = False
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._restore()

    # -- persistence ---------------------------------------------------------------------------
    def _append(self, name: str, obj: Any) -> None:
        with open(self.path / name, "a", encoding="utf-8") as fh:  # type: ignore[operator]
            fh.write(json.dumps(obj) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _restore(self) -> None:
        def lines(name: str) -> list[Any]:
            p = self.path / name  # type: ignore[operator]
            if not p.exists():
                return []
            out = []
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    if i == len(p.read_text(encoding="utf-8").splitlines()) - 1:  # a torn last line: a kill mid-write
                        break
                    raise ValueError(f"{p}:{i + 1}: not JSON") from None
            return out

        consumed = set(lines("consumed.jsonl"))
        for g in lines("rollouts.jsonl"):
            if g["id"] not in consumed:
                self._groups.append([Rollout(**r) for r in g["rollouts"]])

    @staticmethod
    def group_id(group: list[Rollout]) -> str:
        return group[0].rollout_id

    # -- queue -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        with self._cond:
            return sum(len(g) for g in self._groups)

    def put(self, group: list[Rollout], timeout: float | None = None) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: self.closed or len(self._groups) < self.capacity, timeout):
                return False
            if self.closed:  # stopping: a finished group still reaches the disk, for the next run
                if self.path is not None:
                    self._append("rollouts.jsonl", {"id": self.group_id(group), "rollouts": [asdict(r) for r in group]})
                return True
            if self.path is not None:
                self._append("rollouts.jsonl", {"id": self.group_id(group), "rollouts": [asdict(r) for r in group]})
            self._groups.append(group)
            self._cond.notify_all()
            return True

    def take(self, n: int, version: int, timeout: float | None = None) -> list[list[Rollout]] | None:
        """The oldest fresh groups with ≥ ``n`` rollouts in all (None on timeout or close)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if any(self._stale(g, version) for g in self._groups):
                    fresh = deque()
                    for g in self._groups:
                        if self._stale(g, version):
                            self.dropped += len(g)
                            self._consumed(g)
                        else:
                            fresh.append(g)
                    self._groups = fresh
                if sum(len(g) for g in self._groups) >= n:
                    out, k = [], 0
                    while k < n:
                        g = self._groups.popleft()
                        out.append(g)
                        k += len(g)
                        self._consumed(g)
                    self._cond.notify_all()
                    return out
                if self.closed:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)

    def _stale(self, group: list[Rollout], version: int) -> bool:
        return version - min(r.version for r in group) > self.max_staleness

    def _consumed(self, group: list[Rollout]) -> None:
        if self.path is not None:
            self._append("consumed.jsonl", self.group_id(group))
        self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
