"""Several candidates in one verification: a token tree of the best-ranked candidates' continuations gives
plain decoding's tokens, attributes them to the accepted branch, leaves the cache as a chain would, falls
back to a chain where the tree does not fit or decoding samples, and is cut at the token limit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from assistant.decoding import loop
from assistant.decoding.drafters import AttentionDraft, Context, HiddenDraft, NgramDraft, NoDraft, Ranking
from assistant.decoding.tree import TokenTree, grow
from assistant.decoding.verification import Sampling
from assistant.model import attention, tree_attention

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def trees(monkeypatch) -> list[TokenTree]:
    """Every token tree a step verifies (a tree of several branches), recorded with the origin accepted."""
    seen, step = [], loop.tree_step

    def recorded(model, context, tree, hidden):
        tokens, origin = step(model, context, tree, hidden)
        tree.accepted = (len(tokens) - 1, origin)
        seen.append(tree)
        return tokens, origin

    monkeypatch.setattr(loop, "tree_step", recorded)
    return seen


class Worst(Ranking):
    """An n-gram drafter's ranking reversed: its first branches are the worst, so later ones get accepted."""

    layers: tuple[int, ...] = ()

    def rank(self, context: Context) -> np.ndarray:
        return NgramDraft().rank(context)[::-1]


def tokens_of(steps) -> list[int]:
    return [t for s in steps for t in s.tokens]


def plain(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    return tokens_of(loop.decode(model, prompt, NoDraft(), max_new_tokens=max_new_tokens, draft_tokens=0))


def prompts() -> list[list[int]]:
    body = torch.randint(0, 20, (30,), generator=torch.Generator().manual_seed(3)).tolist()
    diverging = body[:10] + [7, 1, 2, 3] + body[10:20] + [7, 1, 4, 5] + body[20:] + [7, 6, 2] + body[:10] + [7]
    return [body * 4, body + [3, 9] * 30, diverging, [5] * 40 + [5, 6] * 20]


@pytest.mark.parametrize("prompt", prompts())
def test_a_tree_of_candidates_gives_plain_decodings_tokens_and_sources(tiny_model, trees, prompt):
    expected = plain(tiny_model, prompt, 100)
    for drafter in (NgramDraft(), HiddenDraft(1), AttentionDraft(tiny_model, [(0, 0), (1, 1)]), Worst()):
        for branches in (2, 4):
            steps = list(loop.decode(tiny_model, prompt, drafter, max_new_tokens=100, draft_tokens=6,
                                     branches=branches))
            assert tokens_of(steps) == expected
            context = prompt + expected
            sources = [source for step in steps for source in step.sources]
            assert all(source is None or context[source] == token for source, token in zip(sources, expected))
    assert any(tree.branches > 1 for tree in trees)


def test_the_accepted_branch_is_what_its_tokens_are_attributed_to(tiny_model, trees):
    prompt = prompts()[2]
    expected = plain(tiny_model, prompt, 100)
    steps = list(loop.decode(tiny_model, prompt, Worst(), max_new_tokens=100, draft_tokens=6, branches=3))
    assert tokens_of(steps) == expected
    for step in steps:
        copied = step.sources[:step.accepted]
        assert copied == list(range(copied[0], copied[0] + len(copied)) if copied else [])  # one branch's copy
    later = [tree.accepted for tree in trees if tree.accepted[0] and tree.accepted[1] != tree.best]
    assert later  # paths accepted on a branch past the first
    context = prompt + expected
    for step in steps:  # the tokens are the copies they are attributed to
        assert all(source is None or context[source] == token for source, token in zip(step.sources, step.tokens))


@pytest.mark.parametrize("kernel", [True, False])
def test_every_row_of_a_tree_has_the_bits_of_the_chain_to_it(tiny_model, monkeypatch, kernel):
    """On the attention kernel and on `few_queries`. Each chain is padded to the tree's rows (copies of its
    last token, after it), so that products whose bits depend on the count of rows (MKL's float32 with 1 or
    2 rows) cannot hide a difference in attention."""
    if not kernel:
        monkeypatch.setattr(attention, "kernel_takes", lambda key, value, kernel: False)
    prompt = prompts()[2]
    context = loop.start(tiny_model, prompt, 200, ())
    loop.prefill(tiny_model, prompt[:-1], context, None)
    tree = TokenTree([prompt[-1]], [-1], [-1], [{}])
    for origin, draft in enumerate(([1, 2, 3, 4], [1, 2, 5], [6, 7], [1, 8, 9, 10, 11])):
        row = 0
        for token in draft:
            row = tree.children[row].get(token) or tree.add(row, token, origin)
    rows = tree_attention.Tree.of(tree.parents)
    out = loop.forward(tiny_model, tree.tokens, context.cache, True, len(tree.tokens), rows)
    assert context.cache.get_seq_length() == len(prompt) - 1  # left as it was
    for row in range(len(tree.tokens)):
        path = tree_attention.path(tree.parents, row)
        fed = [tree.tokens[r] for r in path] + [tree.tokens[row]] * (len(tree.tokens) - len(path))
        chain = loop.forward(tiny_model, fed, context.cache, True, len(fed))
        context.cache.crop(-len(fed))
        assert torch.equal(out.logits[0, row], chain.logits[0, len(path) - 1])
        assert all(torch.equal(ours[0, path], theirs[0, :len(path)])
                   for ours, theirs in zip(out.hidden_states, chain.hidden_states))


def test_a_tree_leaves_the_cache_and_hidden_rows_a_chain_would(tiny_model):
    prompt = prompts()[2]
    expected = plain(tiny_model, prompt, 6)
    chain = loop.start(tiny_model, prompt, 200, (1,))
    loop.prefill(tiny_model, prompt[:-1], chain, None)
    tree = loop.start(tiny_model, prompt, 200, (1,))
    loop.prefill(tiny_model, prompt[:-1], tree, None)
    wrong = TokenTree([prompt[-1]], [-1], [-1], [{}])
    row = wrong.add(0, (expected[0] + 1) % 64, 3)
    wrong.add(row, expected[1], 3)
    row = 0
    for token in expected[:4]:
        row = wrong.add(row, token, 5)
    wrong.drafts = {3: 2, 5: 4}
    tokens, origin = loop.tree_step(tiny_model, tree, wrong, True)
    assert (tokens, origin) == (expected[:5], 5)
    assert loop.step(tiny_model, chain, expected[:4], True, Sampling(), torch.Generator()) == expected[:5]
    for ours, theirs in zip(tree.cache.layers, chain.cache.layers):
        assert ours.length == theirs.length == len(prompt) + 4
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
    assert torch.equal(tree.hidden[1][:tree.n - 1], chain.hidden[1][:chain.n - 1])


def test_a_tree_that_does_not_fit_its_rows_is_a_chain(tiny_model, trees):
    context = loop.start(tiny_model, [1, 2, 3, 1, 4, 5, 1], 40, ())
    assert grow(context, np.array([3, 0]), 3, 2, 7).branches == 2  # 1 + 3 + 3 rows
    only = grow(context, np.array([3, 0]), 3, 2, 6)
    assert only.branches == 1 and only.first() == ([4, 5, 1], 3)  # the second branch left out
    for prompt in prompts():
        expected = plain(tiny_model, prompt, 80)
        assert tokens_of(loop.decode(tiny_model, prompt, NgramDraft(), max_new_tokens=80, draft_tokens=8,
                                     branches=3)) == expected
    assert trees and all(len(tree.tokens) <= 9 for tree in trees)  # a step's rows: a draft of 8 and its token
    assert any(tree.branches < 3 for tree in trees)  # branches left out


def test_sampled_decoding_verifies_a_chain(tiny_model, trees):
    prompt = prompts()[0]
    sampling = Sampling(temperature=0.8, seed=5)
    chain, tree = (tokens_of(loop.decode(tiny_model, prompt, NgramDraft(), max_new_tokens=60, draft_tokens=6,
                                         sampling=sampling, branches=branches)) for branches in (1, 3))
    assert chain == tree and not trees


@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 17, 40])
def test_trees_are_cut_at_the_tokens_left_and_the_context_end(tiny_model, trees, monkeypatch, max_new_tokens):
    asked, real = [], loop.grow

    def recorded(context, ranked, k, branches, rows):
        asked.append((k, rows, context.n, len(context.tokens)))
        return real(context, ranked, k, branches, rows)

    monkeypatch.setattr(loop, "grow", recorded)
    prompt = prompts()[0]
    expected = plain(tiny_model, prompt, max_new_tokens)
    steps = list(loop.decode(tiny_model, prompt, NgramDraft(), max_new_tokens=max_new_tokens, draft_tokens=6,
                             branches=3))
    assert tokens_of(steps) == expected and steps[-1].finished == "length"
    produced = 0
    for (k, rows, n, capacity), step in zip(asked, steps):
        assert k <= max_new_tokens - produced - 1  # no branch past the token limit
        assert n - 1 + rows <= capacity  # the tree's rows fit the context
        produced += len(step.tokens)
    for tree in trees:
        assert max(tree.drafts.values()) <= 6 and tree_attention.Tree.of(tree.parents).depths.max() <= 6


def test_the_engine_setting_keeps_plain_decodings_answers(embedded, trees, monkeypatch):
    document = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(8)) + "def g(x):\n    return x * 2\n"
    instruction = "Rename the parameter x to value."
    expected = embedded.rewrite_text(document, instruction, strategy="ar", max_new_tokens=160).text
    monkeypatch.setattr(embedded, "branches", 3)
    for strategy in ("pld", "pld+h"):
        assert embedded.rewrite_text(document, instruction, strategy=strategy, max_new_tokens=160).text == expected
    assert trees
