"""Continuous batching in the hf engine: concurrent calls decode together and compute what lone calls do."""

import threading

import pytest

from apollo.engines.hf import HFEngine

WORDS = "list_files open_file run_command eval finish tool_call arguments path train loss score"


@pytest.fixture(scope="module")
def model_dir(micro_model_dir):
    return micro_model_dir


def _prompts(n: int) -> list[list[dict]]:
    # different lengths: the batch is left-padded
    return [[{"role": "system", "content": "You are an agent."},
             {"role": "user", "content": " ".join(WORDS.split()[: 2 + i]) * (1 + 3 * i)}] for i in range(n)]


def _concurrently(eng: HFEngine, prompts, seeds):
    out = [None] * len(prompts)

    def one(i):
        out[i] = eng.generate(prompts[i], seed=seeds[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_decode_equals_lone_decode(model_dir, temperature):
    prompts, seeds = _prompts(5), [11, 12, 13, 14, 15]
    lone = HFEngine(model_dir, temperature=temperature, max_new_tokens=24)
    ref = [lone.generate(p, seed=s) for p, s in zip(prompts, seeds, strict=True)]
    assert len({len(lone.prompt_ids(p)) for p in prompts}) == 5
    batched = HFEngine(model_dir, temperature=temperature, max_new_tokens=24, max_batch=4,
                       model=lone.model, tokenizer=lone.tokenizer)
    got = _concurrently(batched, prompts, seeds)
    b = batched.batcher
    assert b.forwards > 0 and b.rows / b.forwards > 1.5, "the calls did not decode together"
    for r, g in zip(ref, got, strict=True):
        assert g.token_ids == r.token_ids
        assert g.logprobs == pytest.approx(r.logprobs, abs=1e-4)
        assert g.entropies == pytest.approx(r.entropies, abs=1e-4)
        assert g.text == r.text and g.finish_reason == r.finish_reason and g.prompt_tokens == r.prompt_tokens


def test_batched_decode_uses_and_fills_the_prefix_cache(model_dir):
    prompts = _prompts(3)
    eng = HFEngine(model_dir, temperature=0.0, max_new_tokens=16, max_batch=3, prefix_cache_tokens=50_000)
    first = _concurrently(eng, prompts, [1, 2, 3])
    assert all(g.meta["cached_tokens"] == 0 for g in first)
    # the next turn of each conversation: its own earlier input and output come from the cache
    turns = [p + [{"role": "assistant", "content": g.text}, {"role": "user", "content": "ok"}]
             for p, g in zip(prompts, first, strict=True)]
    second = _concurrently(eng, turns, [4, 5, 6])
    lone = HFEngine(model_dir, temperature=0.0, max_new_tokens=16, model=eng.model, tokenizer=eng.tokenizer)
    for p, g in zip(prompts, second, strict=True):
        assert g.meta["cached_tokens"] >= len(lone.prompt_ids(p))
    for t, g in zip(turns, second, strict=True):
        assert g.token_ids == lone.generate(t, seed=0).token_ids


def test_a_failing_request_fails_alone(model_dir):
    eng = HFEngine(model_dir, temperature=0.0, max_new_tokens=8, max_batch=4)
    ok = _prompts(2)
    bad = [{"role": "user", "content": "x"}]
    results, errors = {}, {}

    def one(name, msgs):
        try:
            results[name] = eng.generate(msgs, seed=0)
        except Exception as e:  # noqa: BLE001
            errors[name] = e

    real = eng.batcher._prefill

    def prefill(ids):
        if len(ids) == len(eng.prompt_ids(bad)):
            raise RuntimeError("boom")
        return real(ids)

    eng.batcher._prefill = prefill  # fault injection: this one request's prefill raises
    threads = [threading.Thread(target=one, args=(n, m)) for n, m in [("a", ok[0]), ("bad", bad), ("b", ok[1])]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(results) == {"a", "b"} and isinstance(errors["bad"], RuntimeError)
