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


def test_a_request_over_the_positions_fails_alone(model_dir):
    """A request that cannot fit the rows' positions is refused before it joins a forward; the
    requests running beside it finish as if it had not come."""
    import torch

    from apollo.engines.hf_batch import DecodeBatcher, DecodeRequest

    eng = HFEngine(model_dir, temperature=0.0, max_new_tokens=8)
    b = DecodeBatcher(eng.model, max_batch=4, eos_ids=eng.eos_ids, sample=eng._sample, max_len=256)
    ok = [eng.prompt_ids(p) for p in _prompts(2)]
    reqs = {"a": DecodeRequest(ok[0], 8, torch.Generator()), "bad": DecodeRequest([5] * 250, 8, torch.Generator()),
            "b": DecodeRequest(ok[1], 8, torch.Generator())}
    errors = {}

    def one(name):
        try:
            b.submit(reqs[name])
        except ValueError as e:
            errors[name] = e

    threads = [threading.Thread(target=one, args=(n,)) for n in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(errors) == {"bad"} and "256 positions" in str(errors["bad"])
    for i, name in enumerate("ab"):
        assert reqs[name].new == eng.generate(_prompts(2)[i], seed=0).token_ids
    assert b.slots.has_free() and len(b.slots._free) == 4  # every row back


def _ids(g, n):
    import torch

    return torch.randint(3, 200, (1, n), generator=g)


def test_slot_forward_matches_the_models_own_forward(model_dir):
    """SlotKV's forward gives the logits of the model's forward over each whole sequence: prefill in
    one segment and in chunks, decode rows of different lengths with a free row between them, a
    prefill chunk in the same forward as decode rows, capacity growing past 256."""
    import torch
    from transformers import AutoModelForCausalLM

    from apollo.engines.hf_batch import SlotKV

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    g = torch.Generator().manual_seed(0)
    seqs = {0: _ids(g, 40), 2: _ids(g, 250)}
    kv = SlotKV(model, 4, "cpu", max_len=1024)
    with torch.no_grad():
        assert [kv.take() for _ in range(3)] == [0, 1, 2]  # the lowest free row each time
        kv.free(1)  # row 1 stays free: decode forwards span it and discard it
        # row 0 in one segment, row 2 in two chunks (the second in the same forward as row 0)
        kv.forward([(2, 0, seqs[2][0, :100].tolist())])
        got = kv.forward([(0, 0, seqs[0][0].tolist()), (2, 100, seqs[2][0, 100:].tolist())])
        for i, s in enumerate((0, 2)):
            ref = model(seqs[s]).logits[0, -1]
            assert torch.allclose(got[i], ref, atol=1e-4), (s, (got[i] - ref).abs().max())
            seqs[s] = torch.cat([seqs[s], ref.argmax().view(1, 1)], dim=1)
        slots = [0, 2]
        late = _ids(g, 30)  # row 3: prefilled in the middle of the decoding
        for extra in range(12):  # decode 12 tokens: row 2 crosses the first capacity (256)
            segs = [(s, seqs[s].shape[1] - 1, [int(seqs[s][0, -1])]) for s in slots]
            if extra == 5:
                segs.append((3, 0, late[0].tolist()))
            got = kv.forward(segs)
            for i, s in enumerate(slots):
                ref = model(seqs[s]).logits[0, -1]
                assert torch.allclose(got[i], ref, atol=1e-4), (extra, s, (got[i] - ref).abs().max())
                seqs[s] = torch.cat([seqs[s], ref.argmax().view(1, 1)], dim=1)
            if extra == 5:
                assert torch.allclose(got[2], model(late).logits[0, -1], atol=1e-4)
        assert kv.capacity >= 262
        # the keys written for row 2 are the model's own
        ref_kv = model(seqs[2][:, :-1], use_cache=True).past_key_values.layers[0].keys
        n = seqs[2].shape[1] - 1
        assert torch.allclose(kv.keys[0][2, :, :n], ref_kv[0], atol=1e-5)
        kv.copy(2, 1, n)  # a copied row continues like the original
        got = kv.forward([(1, n, [int(seqs[2][0, -1])])])
        assert torch.allclose(got[0], model(seqs[2]).logits[0, -1], atol=1e-4)


def test_slot_forward_with_bf16_weights_keeps_bf16_buffers(model_dir):
    """bf16 weights (``evaluate.dtype: bfloat16``): the key/value buffers are bf16 (the projections'
    own outputs), the logits come back fp32 and follow the model's own bf16 forward within bf16 rounding."""
    import torch
    from transformers import AutoModelForCausalLM

    from apollo.engines.hf_batch import SlotKV

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    g = torch.Generator().manual_seed(1)
    seqs = {0: _ids(g, 30), 1: _ids(g, 90)}
    kv = SlotKV(model, 2, "cpu", max_len=512)
    with torch.no_grad():
        assert [kv.take(), kv.take()] == [0, 1]
        got = kv.forward([(s, 0, seqs[s][0, :-1].tolist()) for s in (0, 1)])
        assert kv.keys[0].dtype == torch.bfloat16 and kv.kv_dtype == torch.bfloat16 and got.dtype == torch.float32
        for _ in range(6):
            got = kv.forward([(s, seqs[s].shape[1] - 1, [int(seqs[s][0, -1])]) for s in (0, 1)])
            assert got.dtype == torch.float32
            for s in (0, 1):
                ref = model(seqs[s]).logits[0, -1].float()
                # bf16 keeps ~3 significant digits: compare at the scale of the logits
                assert (got[s] - ref).abs().max() <= 0.05 * ref.abs().max(), (s, (got[s] - ref).abs().max())
                assert int(torch.argmax(got[s])) == int(torch.argmax(ref)) or \
                    (ref.max() - ref[int(torch.argmax(got[s]))]) < 0.05 * ref.abs().max()
                seqs[s] = torch.cat([seqs[s], torch.argmax(ref).view(1, 1)], dim=1)


def test_parked_rows_serve_the_next_turn_and_branches(model_dir):
    """With the prefix cache on, a finished request's row is parked: the next turn of its conversation
    takes the row and prefills only what is new; a request sharing a shorter prefix (a branch) gets a
    copy and leaves the parked row in place; after ``clear_prefix_cache`` nothing is reused. The
    tokens equal a lone engine's every time."""
    prompts = _prompts(2)
    eng = HFEngine(model_dir, temperature=0.0, max_new_tokens=12, max_batch=2, prefix_cache_tokens=50_000)
    lone = HFEngine(model_dir, temperature=0.0, max_new_tokens=12, model=eng.model, tokenizer=eng.tokenizer)
    b = eng.batcher
    first = eng.generate(prompts[1], seed=0)
    assert first.meta["cached_tokens"] == 0 and len(b._parked) == 1
    row = next(iter(b._parked))
    turn = prompts[1] + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "go on"}]
    second = eng.generate(turn, seed=0)
    n_prompt = len(eng.prompt_ids(prompts[1]))
    assert second.meta["cached_tokens"] >= n_prompt and list(b._parked) == [row]  # the same row, extended
    assert second.token_ids == lone.generate(turn, seed=0).token_ids
    # a branch: the prompt plus the first 3 tokens of the first answer, continued
    prefilled, copied = b.prefilled, b.copied
    branch = eng.generate(prompts[1], seed=0, prefix=first.token_ids[:3])
    assert branch.meta["cached_tokens"] == n_prompt + 2 and b.copied - copied == n_prompt + 2
    assert b.prefilled - prefilled == 1 and row in b._parked and len(b._parked) == 2
    assert branch.token_ids == lone.generate(prompts[1], seed=0, prefix=first.token_ids[:3]).token_ids
    eng.clear_prefix_cache()
    assert not b._parked and eng.generate(turn, seed=0).meta["cached_tokens"] == 0


def test_dtype_auto_is_bf16_only_where_it_is_native(model_dir):
    """``dtype: auto`` (rollout/evaluate) and ``bf16: auto`` (training) follow the CPU's bf16 support,
    read from /proc/cpuinfo: emulated bf16 on an AVX2-only CPU is 5-35x slower than fp32."""
    from pathlib import Path

    from apollo.config import fast_bf16, resolve_dtype
    import torch

    from apollo.train.config import loop_config

    flags = Path("/proc/cpuinfo").read_text().split()
    native = "avx512_bf16" in flags or "amx_bf16" in flags
    assert fast_bf16("cpu") is native
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    assert resolve_dtype("float32", "cpu") == "float32" and resolve_dtype("bfloat16", "cpu") == "bfloat16"
    eng = HFEngine(model_dir, dtype="auto", device="cpu")
    assert next(eng.model.parameters()).dtype == (torch.bfloat16 if native else torch.float32)
    from apollo.config import load_params

    warm = load_params()["bootstrap"]["warmup"]["sft"]
    assert warm["bf16"] == "auto" and loop_config(warm, 0).bf16 is native
