"""The decode loop on a tiny random Llama: greedy drafting is token-identical to plain loop,
sampled drafting keeps the model's distribution, and the loop's bookkeeping (EOS, length,
cancel, KV cache size, sources) holds at every step."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from conftest import TINY_VOCAB, make_tiny_model

from assistant.decoding import loop, verification
from assistant.decoding.draft_length import AdaptiveDraftLength
from assistant.decoding.drafters import AttentionDraft, Context, HiddenDraft, NgramDraft, NoDraft
from assistant.decoding.loop import decode, forward, prefill, start
from assistant.decoding.prefix_cache import PrefixCache
from assistant.decoding.verification import Sampling, verify_sampled
from assistant.engine.assistant import WARM_CHUNK
from assistant.kernels import gguf_vnni
from assistant.model import exactness, weights

pytestmark = pytest.mark.usefixtures("one_thread")


class Checked:
    """Wraps a drafter and checks the loop's invariant each time it is asked for a draft:
    the KV cache covers exactly positions 0..n-2, and a draft is a real continuation in the context."""

    def __init__(self, inner):
        self.inner = inner
        self.layers = inner.layers
        self.calls = 0

    def propose(self, context: Context, k: int):
        self.calls += 1
        assert context.cache.get_seq_length() == context.n - 1
        draft, origin = self.inner.propose(context, k)
        assert len(draft) <= max(k, 0)
        if draft:
            assert 0 <= origin < context.n - 1
            assert context.tokens[origin] == context.tokens[context.n - 1]
            assert draft == context.tokens[origin + 1:origin + 1 + len(draft)].tolist()
            assert not context.eos.intersection(draft[:-1])  # nothing after an EOS: generation ends there
        return draft, origin


def drafters(model):
    return {
        "pld": NgramDraft(),
        "pld1": NgramDraft(max_ngram=1),
        "pld+h": HiddenDraft(1),
        "pld+h2": HiddenDraft(2),
    }


def run(model, prompt, drafter, max_new_tokens=24, draft_tokens=6, **options):
    checked = Checked(drafter)
    steps = list(decode(model, list(prompt), checked, max_new_tokens=max_new_tokens, draft_tokens=draft_tokens,
                        **options))
    tokens = [t for s in steps for t in s.tokens]
    check_steps(prompt, steps, max_new_tokens, draft_tokens if isinstance(draft_tokens, int) else None)
    return tokens, steps


def check_steps(prompt, steps, max_new_tokens, draft_tokens):
    context = list(prompt)
    produced = 0
    for number, step in enumerate(steps):
        assert len(step.sources) == len(step.tokens)
        assert 0 <= step.accepted <= step.drafted
        if draft_tokens is not None:
            assert step.drafted <= draft_tokens
        assert step.drafted <= max(0, max_new_tokens - produced - 1)
        assert len(step.tokens) <= step.accepted + 1
        if step.finished is None:
            assert len(step.tokens) == step.accepted + 1
            assert number < len(steps) - 1
        for token, source in zip(step.tokens, step.sources):
            if source is not None:
                assert 0 <= source < len(context)
                assert context[source] == token, "a source must point at the same token"
            context.append(token)
        produced += len(step.tokens)
    assert produced <= max_new_tokens
    if steps:
        assert steps[-1].finished in ("eos", "length")
        if steps[-1].finished == "length":
            assert produced == max_new_tokens


def random_prompts(count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    prompts = []
    for i in range(count):
        alphabet = int(rng.integers(3, TINY_VOCAB))
        length = int(rng.integers(1, 80))
        prompt = rng.integers(0, alphabet, size=length).tolist()
        if i % 3 == 0 and length > 8:  # copy a chunk forward so there is something to draft
            start = int(rng.integers(0, length // 2))
            prompt += prompt[start:start + int(rng.integers(2, 20))]
        prompts.append(prompt)
    return prompts


EDGE_PROMPTS = {
    "single token": [7],
    "two tokens": [7, 7],
    "repeated": [5] * 50,
    "no match": list(range(40)),
    "period two": [3, 9] * 20,
    "runs off the end": [1, 2, 3, 4, 5, 6, 1, 2, 3],
    "match at start": [11, 12, 13, 14, 15, 11],
}


def test_plain_decoding_matches_transformers_generate(tiny_model):
    """The reference itself (our loop over the preallocated KV cache) agrees with transformers' own greedy
    loop, so "identical to ar" means identical to what the library would produce."""
    for prompt in random_prompts(6, seed=3):
        ours, _ = run(tiny_model, prompt, NoDraft(), 20, 0)
        with torch.inference_mode():
            ids = torch.tensor([prompt])
            out = tiny_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, min_new_tokens=20,
                                      do_sample=False, eos_token_id=None, pad_token_id=0)
        assert ours == out[0, len(prompt):].tolist()


@pytest.mark.parametrize("model", ["tiny_model", "bfloat16_model"])
@pytest.mark.parametrize("name", ["pld", "pld1", "pld+h", "pld+h2"])
def test_greedy_matches_plain_decoding_on_random_prompts(request, model, name):
    """Also with the attention kernel's bfloat16 build (heads of 32 values), which rounds what it multiplies,
    each row alike whatever comes with it."""
    model = request.getfixturevalue(model)
    drafter = drafters(model)[name]
    accepted = 0
    for index, prompt in enumerate(random_prompts(24)):
        max_new, k = 1 + index % 37, 1 + index % 9
        expected, _ = run(model, prompt, NoDraft(), max_new, k)
        got, steps = run(model, prompt, drafter, max_new, k)
        assert got == expected, f"prompt {index}: {prompt}"
        accepted += sum(s.accepted for s in steps)
    assert accepted > 0, "no draft was ever accepted: the test would not exercise verification"


@pytest.mark.parametrize("name", ["pld", "pld+h"])
@pytest.mark.parametrize("case", list(EDGE_PROMPTS))
def test_greedy_matches_plain_decoding_on_edge_prompts(tiny_model, name, case):
    prompt = EDGE_PROMPTS[case]
    drafter = drafters(tiny_model)[name]
    for max_new, k in ((1, 4), (2, 1), (30, 3), (40, 12)):
        expected, _ = run(tiny_model, prompt, NoDraft(), max_new, k)
        got, steps = run(tiny_model, prompt, drafter, max_new, k)
        assert got == expected
        assert len(got) == max_new
        if max_new == 1:
            assert len(steps) == 1 and steps[0].drafted == 0 and steps[0].finished == "length"


def test_no_match_means_no_draft(tiny_model):
    prompt = list(range(40))
    for drafter in drafters(tiny_model).values():
        _, steps = run(tiny_model, prompt, drafter, 1, 4)
        assert steps[0].drafted == 0  # the last token occurs nowhere earlier
    # Two tokens of context, draft proposed from the very first position.
    _, steps = run(tiny_model, [4, 4], NgramDraft(), 3, 4)
    assert steps[0].drafted == 1


def test_draft_that_runs_off_the_end_of_the_context_is_clipped(tiny_model):
    tokens = [1, 2, 3, 4, 5, 6, 1, 2, 3]
    context = Context.start(tokens, 64, (), 32, torch.float32, torch.device("cpu"), None)
    draft, origin = NgramDraft().propose(context, 10)
    assert origin == 2 and draft == [4, 5, 6, 1, 2, 3]  # stops at the end of the context
    assert NgramDraft().propose(context, 0) == ([], -1)
    # The most recent copy of a repeated token offers a one-token draft, the longest match wins over recency.
    context = Context.start([5] * 6, 64, (), 32, torch.float32, torch.device("cpu"), None)
    draft, origin = NgramDraft().propose(context, 10)
    assert origin == 4 and draft == [5]
    context = Context.start([8, 1, 2, 9, 2, 7, 8, 1, 2], 64, (), 32, torch.float32, torch.device("cpu"), None)
    assert NgramDraft().propose(context, 3) == ([9, 2, 7], 2)


def test_a_draft_stops_at_the_first_eos_it_copies():
    """Generation ends at an EOS, so what a prompt holds after one (a chat template's next turn) is never drafted."""
    eos = frozenset({9})
    context = Context.start([1, 2, 3, 9, 4, 5, 1], 64, (), 32, torch.float32, torch.device("cpu"), None, eos)
    assert NgramDraft().propose(context, 10) == ([2, 3, 9], 0)
    context = Context.start([1, 9, 4, 1], 64, (), 32, torch.float32, torch.device("cpu"), None, eos)
    assert NgramDraft().propose(context, 10) == ([9], 0)


def find_eos_inside_accepted_draft(model):
    """A (prompt, eos) where greedy output hits `eos` strictly inside an accepted pld draft."""
    for seed_prompt in list(EDGE_PROMPTS.values()) + random_prompts(20, seed=7):
        # The greedy trajectory itself as the prompt: its continuation is the same trajectory, so once it
        # repeats itself the drafts copied from the prompt are accepted, with tokens new to the output.
        trajectory, _ = run(model, seed_prompt, NoDraft(), 40, 8)
        prompt = seed_prompt + trajectory[:20]
        expected, _ = run(model, prompt, NoDraft(), 40, 8)
        _, steps = run(model, prompt, NgramDraft(), 40, 8)
        at = 0
        for step in steps:
            for i, token in enumerate(step.tokens[:step.accepted]):
                if i < step.accepted - 1 and token not in expected[:at + i]:
                    return prompt, token, at + i, expected
            at += len(step.tokens)
    pytest.fail("no accepted multi-token draft found")


def test_eos_inside_an_accepted_draft_stops_exactly_there(tiny_model):
    prompt, eos, where, expected = find_eos_inside_accepted_draft(tiny_model)
    for name, drafter in [("ar", NoDraft())] + list(drafters(tiny_model).items()):
        got, steps = run(tiny_model, prompt, drafter, 40, 8, eos=frozenset({eos}))
        assert got == expected[:where], name
        assert steps[-1].finished == "eos"
        assert eos not in got


def test_eos_as_the_first_token(tiny_model):
    prompt = [5] * 50
    expected, _ = run(tiny_model, prompt, NoDraft(), 5, 4)
    for drafter in [NoDraft()] + list(drafters(tiny_model).values()):
        got, steps = run(tiny_model, prompt, drafter, 5, 4, eos=frozenset({expected[0]}))
        assert got == [] and len(steps) == 1 and steps[0].finished == "eos"


def test_max_new_tokens_at_every_point_of_a_long_accepted_draft(tiny_model):
    prompt = [3, 9] * 20
    full, steps = run(tiny_model, prompt, NgramDraft(), 40, 12)
    assert max(s.accepted for s in steps) >= 3, "needs a long accepted draft"
    for max_new in range(1, 20):
        for drafter in (NgramDraft(), HiddenDraft(1)):
            got, steps = run(tiny_model, prompt, drafter, max_new, 12)
            assert got == full[:max_new]
            assert steps[-1].finished == "length"


def test_adaptive_draft_length_is_exact(tiny_model):
    costs = {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3, 16: 1.8, 32: 3.0}
    for prompt in random_prompts(10, seed=3) + [[5] * 50, [3, 9] * 20]:
        expected, _ = run(tiny_model, prompt, NoDraft(), 30, 4)
        for drafter in (NgramDraft(), HiddenDraft(1)):
            got, _ = run(tiny_model, prompt, drafter, 30, AdaptiveDraftLength(costs, 16))
            assert got == expected


def test_prefix_reuse_changes_nothing(tiny_model):
    """Restoring a cached prompt prefix gives the same steps (tokens, drafts, sources) as a cold start."""
    base = random_prompts(1, seed=11)[0] + [3, 9] * 10
    prompts = [base, base + [4, 5, 3, 9], base[:-3], base + [3, 9, 3], base]
    for make in (NgramDraft, lambda: HiddenDraft(1)):
        prefixes = PrefixCache(64 << 20)
        for prompt in prompts:
            _, cold = run(tiny_model, prompt, make(), 20, 5)
            _, warm = run(tiny_model, prompt, make(), 20, 5, prefixes=prefixes)
            key = lambda steps: [(s.tokens, s.sources, s.drafted, s.accepted, s.finished) for s in steps]  # noqa: E731
            assert key(warm) == key(cold)


def test_a_prefill_computes_no_logits(tiny_model, monkeypatch):
    """Its hidden rows and cache only: the model's head, which a 64-token piece of the 1.5B's prefill would pay for
    one row, is not run."""
    rows = []
    head = tiny_model.lm_head.forward
    monkeypatch.setattr(tiny_model.lm_head, "forward", lambda x: rows.append(x.shape[-2]) or head(x))
    prompt = random_prompts(1, seed=3)[0] * 4
    context = loop.start(tiny_model, prompt, len(prompt) + 8, (1,))
    assert loop.prefill(tiny_model, prompt[:-1], context, None, chunk=5) == len(prompt) - 1
    assert rows == []
    assert loop.step(tiny_model, context, [], True, Sampling(), torch.Generator()) and rows == [1]


def test_fixed_shapes_change_nothing(tiny_model, monkeypatch):
    """Where forwards are padded to fixed shapes (on CUDA, and in bfloat16), every forward has one of them,
    drafting still gives plain decoding's tokens, and a reused prefix gives a cold start's steps."""
    monkeypatch.setattr(exactness, "fixed_shapes", lambda model: True)
    monkeypatch.setitem(exactness.STEP_ROWS, "cpu", 8)
    monkeypatch.setattr(exactness, "PROMPT_ROWS", 16)
    shapes = []
    forward = loop.forward
    def recorded(model, ids, cache, hidden, logits_to_keep, head=True):
        if exactness.fixed_shapes(model):  # a step keeps every row's logits, a prefill chunk (logits_to_keep 1) none
            shapes.append((len(ids), cache.get_seq_length() % 16 if logits_to_keep == 1 else 0))
        return forward(model, ids, cache, hidden, logits_to_keep, head=head)
    monkeypatch.setattr(loop, "forward", recorded)
    prompts = random_prompts(6, seed=5) + [[3, 9] * 20, [7]]
    for prompt in prompts:
        expected, _ = run(tiny_model, prompt, NoDraft(), 30, 0)
        monkeypatch.setattr(exactness, "fixed_shapes", lambda model: False)
        assert run(tiny_model, prompt, NoDraft(), 30, 0)[0] == expected
        monkeypatch.setattr(exactness, "fixed_shapes", lambda model: True)
        for drafter in drafters(tiny_model).values():
            for k in (3, 7, 12):  # 12: a draft is cut to the step's rows
                assert run(tiny_model, prompt, drafter, 30, k)[0] == expected
    base = prompts[0] + [3, 9] * 12
    for make in (NgramDraft, lambda: HiddenDraft(1)):
        prefixes = PrefixCache(64 << 20)
        for prompt in (base, base + [4, 5, 3, 9], base[:-3], base[:17], base):
            _, cold = run(tiny_model, prompt, make(), 20, 5)
            _, warm = run(tiny_model, prompt, make(), 20, 5, prefixes=prefixes)
            key = lambda steps: [(s.tokens, s.sources, s.drafted, s.accepted, s.finished) for s in steps]  # noqa: E731
            assert key(warm) == key(cold)
    assert set(shapes) == {(8, 0), (16, 0)}  # prompt chunks start at multiples of 16


def test_cancel_before_start_yields_nothing(tiny_model):
    cancel = threading.Event()
    cancel.set()
    for drafter in (NoDraft(), NgramDraft(), HiddenDraft(1)):
        assert list(decode(tiny_model, [5] * 10, drafter, max_new_tokens=10, draft_tokens=4, cancel=cancel)) == []


def test_cancel_before_start_runs_no_prefill(tiny_model, monkeypatch):
    """A request cancelled while it waits for its turn leaves the line at once; it must not then run
    its prompt through the model beside the generation that holds it."""
    def no_forward(*args, **kwargs):
        raise AssertionError("a cancelled decode ran a forward")

    monkeypatch.setattr(loop, "forward", no_forward)
    cancel = threading.Event()
    cancel.set()
    assert list(decode(tiny_model, [5] * 10, HiddenDraft(1), max_new_tokens=10, draft_tokens=4, cancel=cancel)) == []


def test_cancel_during_generation_stops_after_the_current_step(tiny_model):
    for drafter in (NoDraft(), NgramDraft(), HiddenDraft(1)):
        cancel = threading.Event()
        steps = decode(tiny_model, [5] * 10, drafter, max_new_tokens=30, draft_tokens=4, cancel=cancel)
        first = next(steps)
        assert first.finished is None
        cancel.set()
        assert list(steps) == []


# --- pld+a ----------------------------------------------------------------------------------------------------
# AttentionDraft used to project queries with the model's weights outside inference mode, so autograd recorded
# the graph and `.numpy()` refused a tensor that requires grad: pld+a crashed at its first draft. The first test
# guards that regression; the exactness tests also run under inference mode.


def attention_drafter(model):
    return AttentionDraft(model, [(0, 0), (1, 1)])


def test_attention_draft_runs_outside_inference_mode(tiny_model):
    assert any(p.requires_grad for p in tiny_model.parameters())  # as from_pretrained leaves them
    expected, _ = run(tiny_model, [3, 9] * 20, NoDraft(), 20, 4)
    got, steps = run(tiny_model, [3, 9] * 20, attention_drafter(tiny_model), 20, 4)
    assert got == expected and sum(s.drafted for s in steps) > 0


def test_attention_draft_greedy_exact(tiny_model):
    with torch.inference_mode():
        accepted = 0
        prompts = random_prompts(16, seed=5) + list(EDGE_PROMPTS.values())
        for index, prompt in enumerate(prompts):
            max_new, k = 1 + index % 31, 1 + index % 9
            expected, _ = run(tiny_model, prompt, NoDraft(), max_new, k)
            got, steps = run(tiny_model, prompt, attention_drafter(tiny_model), max_new, k)
            assert got == expected, f"prompt {index}: {prompt}"
            accepted += sum(s.accepted for s in steps)
        assert accepted > 0
        prompt, eos, where, expected = find_eos_inside_accepted_draft(tiny_model)
        got, steps = run(tiny_model, prompt, attention_drafter(tiny_model), 40, 8, eos=frozenset({eos}))
        assert got == expected[:where] and steps[-1].finished == "eos"
        prefixes = PrefixCache(64 << 20)
        base = random_prompts(1, seed=11)[0] + [3, 9] * 10
        for prompt in (base, base + [4, 5, 3, 9], base[:-3], base):
            _, cold = run(tiny_model, prompt, attention_drafter(tiny_model), 20, 5)
            _, warm = run(tiny_model, prompt, attention_drafter(tiny_model), 20, 5, prefixes=prefixes)
            assert [(s.tokens, s.sources, s.drafted) for s in warm] == [(s.tokens, s.sources, s.drafted) for s in cold]


# --- sampling -------------------------------------------------------------------------------------------------


def reference_probabilities(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """An independent implementation of temperature, then top-k, then top-p (nucleus) filtering."""
    logits = logits.double() / temperature
    probs = torch.softmax(logits, -1)
    if top_k:
        keep = torch.zeros_like(probs, dtype=torch.bool)
        keep[torch.topk(probs, top_k).indices] = True
        probs = torch.where(keep, probs, 0.0)
        probs /= probs.sum()
    if top_p < 1.0:
        order = torch.argsort(probs, descending=True)
        total, keep = 0.0, torch.zeros_like(probs, dtype=torch.bool)
        for index in order.tolist():
            keep[index] = True
            total += float(probs[index])
            if total >= top_p:
                break
        probs = torch.where(keep, probs, 0.0)
        probs /= probs.sum()
    return probs


def exact_joint(model, prompt, sampling: Sampling) -> torch.Tensor:
    """P(first token, second token) of plain sampling, [vocab, vocab], from one batched forward."""
    vocab = model.config.vocab_size
    with torch.inference_mode():
        first = model(torch.tensor([prompt])).logits[0, -1]
        batch = torch.tensor([prompt + [t] for t in range(vocab)])
        second = model(batch).logits[:, -1]
    p1 = reference_probabilities(first, sampling.temperature, sampling.top_k, sampling.top_p)
    p2 = torch.stack([reference_probabilities(row, sampling.temperature, sampling.top_k, sampling.top_p)
                      for row in second])
    return p1[:, None] * p2


def chi_square_p_value(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    """Pearson's test with cells of expected count < 5 pooled into one; tokens the model forbids must not occur."""
    total = counts.sum()
    expected = expected_probs * total
    assert counts[expected_probs == 0].sum() == 0, "a token with zero probability was sampled"
    big = expected >= 5
    observed = np.append(counts[big], counts[~big & (expected_probs > 0)].sum())
    wanted = np.append(expected[big], expected[~big & (expected_probs > 0)].sum())
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    statistic = float(((observed - wanted) ** 2 / wanted).sum())
    df = len(wanted) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(statistic / 2, dtype=torch.float64)))


def sampled_joint_counts(model, prompt, drafter, sampling: Sampling, samples: int) -> tuple[np.ndarray, int]:
    vocab = model.config.vocab_size
    counts = np.zeros(vocab * vocab)
    drafted = 0
    for seed in range(samples):
        options = Sampling(sampling.temperature, sampling.top_k, sampling.top_p, seed=seed)
        steps = list(decode(model, prompt, drafter, max_new_tokens=3, draft_tokens=4, sampling=options))
        tokens = [t for s in steps for t in s.tokens]
        drafted += sum(s.drafted for s in steps)
        counts[tokens[0] * vocab + tokens[1]] += 1
    return counts, drafted


SAMPLE_PROMPT = [3, 7] * 6 + [3]  # the last token has earlier copies: drafts [7, 3] are proposed at once
SAMPLES = 300


@pytest.mark.parametrize("sampling", [Sampling(1.0), Sampling(0.8, top_p=0.8), Sampling(1.0, top_k=5, top_p=0.9)],
                         ids=["t1", "top_p", "top_k+top_p"])
def test_sampled_drafting_keeps_the_model_distribution(peaky_model, sampling):
    exact = exact_joint(peaky_model, SAMPLE_PROMPT, sampling).flatten().numpy()
    strategies = [NgramDraft(), HiddenDraft(1)] if sampling == Sampling(1.0) else [NgramDraft()]
    for drafter in ([NoDraft()] if sampling == Sampling(1.0) else []) + strategies:
        counts, drafted = sampled_joint_counts(peaky_model, SAMPLE_PROMPT, drafter, sampling, SAMPLES)
        if not isinstance(drafter, NoDraft):
            assert drafted >= SAMPLES, "drafts must be proposed for the test to mean anything"
        p = chi_square_p_value(counts, exact)
        tv = 0.5 * np.abs(counts / counts.sum() - exact).sum()
        print(f"{type(drafter).__name__} {sampling}: p={p:.3g} total variation={tv:.3f}")
        assert p > 1e-4, f"{type(drafter).__name__} samples differ from the model's distribution (p={p:.3g})"


def test_a_biased_verifier_fails_the_same_test(peaky_model, monkeypatch):
    """The distribution test has teeth: a verifier that always accepts the draft is caught."""

    def always_accept(logits, draft, sampling, generator):
        probs = verification.probabilities(logits, sampling).cpu()
        return len(draft), int(torch.multinomial(probs[len(draft)], 1, generator=generator))

    monkeypatch.setattr(loop, "verify_sampled", always_accept)
    exact = exact_joint(peaky_model, SAMPLE_PROMPT, Sampling(1.0)).flatten().numpy()
    counts, _ = sampled_joint_counts(peaky_model, SAMPLE_PROMPT, NgramDraft(), Sampling(1.0), SAMPLES)
    p = chi_square_p_value(counts, exact) if counts[exact == 0].sum() == 0 else 0.0
    assert p < 1e-6


def test_verify_sampled_matches_the_target_rows():
    """Unit level, many samples: the first token follows row 0, the second (after accepting d_0) row 1."""
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    logits = torch.randn(3, 6) * 1.5
    draft = [int(logits[0].argsort()[-2]), int(logits[1].argmax())]  # a likely but not certain first draft
    sampling = Sampling(1.0)
    probs = torch.softmax(logits.double(), -1).numpy()
    first, second = np.zeros(6), np.zeros(6)
    for _ in range(12000):
        accepted, bonus = verify_sampled(logits, draft, sampling, generator)
        tokens = draft[:accepted] + [bonus]
        first[tokens[0]] += 1
        if tokens[0] == draft[0]:
            second[tokens[1]] += 1
    assert chi_square_p_value(first, probs[0]) > 1e-4
    assert chi_square_p_value(second, probs[1]) > 1e-4


def test_probabilities_filters_like_the_reference():
    torch.manual_seed(1)
    logits = torch.randn(4, TINY_VOCAB) * 2
    for sampling in (Sampling(1.0), Sampling(0.7, top_k=3), Sampling(1.0, top_p=0.5), Sampling(1.3, 10, 0.95)):
        got = verification.probabilities(logits, sampling)
        for row in range(4):
            want = reference_probabilities(logits[row], sampling.temperature, sampling.top_k, sampling.top_p)
            assert torch.allclose(got[row].double(), want, atol=1e-6)


def test_same_seed_same_sample(tiny_model):
    for drafter in (NoDraft(), NgramDraft()):
        a, _ = run(tiny_model, [5] * 20, drafter, 10, 4, sampling=Sampling(1.0, seed=3))
        b, _ = run(tiny_model, [5] * 20, drafter, 10, 4, sampling=Sampling(1.0, seed=3))
        assert a == b


ALIKE = [kind for kind in ("float16", "gguf-q8") if kind in weights.available(torch.device("cpu"))
         and (kind != "gguf-q8" or gguf_vnni.prefill_alike())]  # with AMX, gguf-q8's prefill takes the tiles


@pytest.mark.parametrize("kind", ALIKE)
def test_where_rows_are_alike_a_prompt_prefilled_in_pieces_gets_the_bits_of_one_prefilled_at_once(kind):
    """float16 (padded batches) and gguf-q8 compute a row alike whatever the rows, so a prompt is prefilled
    in forwards of up to exactness.FEW tokens, row-exact attention included: a warm buffer's pieces
    (`WARM_CHUNK`) and a cold prefill then leave the same cache, and the next token's logits are the same bits."""
    model = make_tiny_model()
    weights.pack(model, kind)
    assert exactness.alike(model)
    ids = [(7 * i) % TINY_VOCAB for i in range(150)]  # more than exactness.FEW

    def prefilled(chunk: int) -> tuple[list[torch.Tensor], torch.Tensor]:
        context = start(model, ids, len(ids) + 1, ())
        assert prefill(model, ids, context, None, chunk) == len(ids)
        keys = [layer.keys.clone() for layer in context.cache.layers]
        return keys, forward(model, [3], context.cache, False, 1).logits

    (whole_keys, whole), (piece_keys, pieces) = prefilled(0), prefilled(WARM_CHUNK)
    assert all(torch.equal(a, b) for a, b in zip(whole_keys, piece_keys)) and torch.equal(whole, pieces)
