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


def test_slot_forward_matches_the_models_own_forward(model_dir):
    """SlotKV's batched one-token forward gives the logits of the model's forward over each whole
    sequence: rows of different lengths, a free row between them, capacity growing past 256."""
    import torch
    from transformers import AutoModelForCausalLM

    from apollo.engines.hf_batch import SlotKV, kv_of

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    g = torch.Generator().manual_seed(0)
    seqs = {0: torch.randint(3, 200, (1, 40), generator=g), 2: torch.randint(3, 200, (1, 250), generator=g)}
    kv = SlotKV(model, 3, "cpu", max_len=1024)
    with torch.no_grad():
        got_slots = [kv.load(kv_of(model(ids[:, :-1], use_cache=True).past_key_values), ids.shape[1] - 1)
                     for ids in (seqs[0], torch.zeros(1, 5, dtype=torch.long), seqs[2])]
        assert got_slots == [0, 1, 2]  # the lowest free slot each time
        kv.free(1)  # row 1 stays free: the forward spans it and discards it
        assert kv._free == [1]
        slots = [0, 2]
        for extra in range(12):  # decode 12 tokens: row 2 crosses the first capacity (256)
            toks = [int(seqs[s][0, -1]) for s in slots]
            pos = [seqs[s].shape[1] - 1 for s in slots]
            got = kv.step(slots, toks, pos)
            for i, s in enumerate(slots):
                ref = model(seqs[s]).logits[0, -1]
                assert torch.allclose(got[i], ref, atol=1e-4), (extra, s, (got[i] - ref).abs().max())
                nxt = int(torch.argmax(ref))
                seqs[s] = torch.cat([seqs[s], torch.tensor([[nxt]])], dim=1)
    assert kv.capacity >= 262
    exported = kv.export(2, seqs[2].shape[1] - 1)
    with torch.no_grad():
        ref_kv = kv_of(model(seqs[2][:, :-1], use_cache=True).past_key_values)
    assert torch.allclose(exported[0][0], ref_kv[0][0], atol=1e-5)


def test_slot_forward_with_bf16_weights_keeps_fp32_buffers(model_dir):
    """bf16 weights (``evaluate.dtype: bfloat16``): on CPU the key/value buffers and the attention stay
    fp32, the logits follow the model's own bf16 forward within bf16 rounding, and an exported cache
    comes back in the weights' dtype (the prefix cache feeds it to the bf16 model)."""
    import torch
    from transformers import AutoModelForCausalLM

    from apollo.engines.hf_batch import SlotKV, kv_of

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    g = torch.Generator().manual_seed(1)
    seqs = {0: torch.randint(3, 200, (1, 30), generator=g), 1: torch.randint(3, 200, (1, 90), generator=g)}
    kv = SlotKV(model, 2, "cpu", max_len=512)
    with torch.no_grad():
        for s in (0, 1):
            assert kv.load(kv_of(model(seqs[s][:, :-1], use_cache=True).past_key_values), seqs[s].shape[1] - 1) == s
        assert kv.keys[0].dtype == torch.float32 and kv.kv_dtype == torch.float32
        for _ in range(6):
            got = kv.step([0, 1], [int(seqs[s][0, -1]) for s in (0, 1)], [seqs[s].shape[1] - 1 for s in (0, 1)])
            assert got.dtype == torch.float32
            for s in (0, 1):
                ref = model(seqs[s]).logits[0, -1].float()
                # bf16 keeps ~3 significant digits: compare at the scale of the logits
                assert (got[s] - ref).abs().max() <= 0.05 * ref.abs().max(), (s, (got[s] - ref).abs().max())
                assert int(torch.argmax(got[s])) == int(torch.argmax(ref)) or \
                    (ref.max() - ref[int(torch.argmax(got[s]))]) < 0.05 * ref.abs().max()
                seqs[s] = torch.cat([seqs[s], torch.argmax(ref).view(1, 1)], dim=1)
    exported = kv.export(1, seqs[1].shape[1] - 1)
    assert exported[0][0].dtype == torch.bfloat16 and exported[0][0].shape[-2] == seqs[1].shape[1] - 1
