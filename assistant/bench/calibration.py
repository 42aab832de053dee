"""The search behind `assistant calibrate`: it finds a model's induction heads (PLD+ §4.2.1), its
PLD+(h) layer and its draft ceiling, the settings `tuning.py` keeps.

Calibration decodes held-out rewrite prompts (the `calibration` split of the benchmark data,
never evaluated on), then replays each output once, teacher-forced. At every output position
whose token occurs earlier, the best candidates are those whose continuation matches the real
output longest. A head scores a hit when its attention from the previous position picks one of
them; heads are ranked by hit rate. The hidden-state layer for PLD+(h) is chosen the same way,
by how often cosine similarity at that layer picks a best candidate.

The most tokens the adaptive draft length may choose is found by replaying the same outputs:
n-gram drafts under `AdaptiveDraftLength` with the machine's measured forward costs, for each
candidate ceiling, counting how many tokens each unit of forward cost makes. No model runs
for that, so every ceiling is judged on exactly the same outputs.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import DynamicCache

from assistant.decoding.draft_length import AdaptiveDraftLength
from assistant.decoding.drafters import Context, NgramDraft
from assistant.decoding.prefix_cache import common_prefix
from assistant.model import loading
from assistant.model.attention import head_attention
from assistant.model.tuning import Tuned, tuned

DRAFT_CEILINGS = (8, 12, 16, 24, 32)  # where drafts start; the replay leaves out their growth past it (long drafts)


def best_candidate_sets(tokens: np.ndarray, start: int):
    """For each position p >= start with earlier copies of tokens[p], yield (p, candidates, best mask)."""
    for p in range(max(start, 2), len(tokens) - 1):
        candidates = np.flatnonzero(tokens[:p] == tokens[p])
        candidates = candidates[candidates >= 1]
        if len(candidates) < 2:
            continue
        matched = np.array([common_prefix(tokens[c + 1:], tokens[p + 1:]) for c in candidates])
        if matched.max() == 0 or matched.min() == matched.max():
            continue  # nothing to copy, or every choice is as good
        yield p, candidates, matched == matched.max()


def score_sequence(model, tokens: list[int], start: int, hits: np.ndarray, layer_hits: np.ndarray) -> int:
    """Add one teacher-forced sequence's hits per (layer, head) and per hidden layer; return positions scored."""
    config = model.config
    cache = DynamicCache(config=config)
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([tokens], device=model.device), cache=cache, use_cache=True,
                    output_hidden_states=True, logits_to_keep=1)
        array = np.asarray(tokens)
        cases = list(best_candidate_sets(array, start))
        if not cases:
            return 0
        queries = torch.tensor([p - 1 for p, _, _ in cases], device=model.device)
        all_heads = list(range(config.num_attention_heads))
        for layer in range(config.num_hidden_layers):
            attention = head_attention(model, cache, {layer: all_heads},
                                       {layer: out.hidden_states[layer][0, queries]}, queries)
            hidden = torch.nn.functional.normalize(out.hidden_states[layer][0].float(), dim=-1)
            for row, (p, candidates, best) in enumerate(cases):
                picks = attention[:, row, candidates].argmax(-1).cpu().numpy()
                hits[layer] += best[picks]
                similarity = hidden[candidates - 1] @ hidden[p - 1]
                layer_hits[layer] += best[int(similarity.argmax())]
    return len(cases)


def replay_cost(costs: dict[int, float], prompt: list[int], output: list[int], most: int) -> float:
    """Forward cost, in one-token forwards, of making `output` with n-gram drafts of adaptive length up to `most`;
    greedy verification accepts a draft's longest prefix that agrees with `output`, plus one token."""
    context = Context.start(prompt, len(prompt) + len(output), (), 0, torch.float32, torch.device("cpu"), None)
    drafter, length = NgramDraft(), AdaptiveDraftLength(costs, most)
    produced, cost = 0, 0.0
    while produced < len(output):
        draft, _ = drafter.propose(context, min(length.choose(), len(output) - produced - 1))
        accepted = common_prefix(np.asarray(draft), np.asarray(output[produced:produced + len(draft)]))
        length.update(len(draft), accepted)
        cost += length.cost(len(draft) + 1)
        context.append(output[produced:produced + accepted + 1])
        produced += accepted + 1
    return cost


def ceiling_speeds(costs: dict[int, float], prompts: list[list[int]], outputs: list[list[int]]) -> dict[int, float]:
    """Tokens made per unit of forward cost over all the outputs, for each candidate ceiling."""
    tokens = sum(len(o) for o in outputs)
    return {most: tokens / sum(replay_cost(costs, p, o, most) for p, o in zip(prompts, outputs))
            for most in DRAFT_CEILINGS}


def calibrate(loaded: loading.LoadedModel, prompts: list[list[int]], outputs: list[list[int]],
              costs: dict[int, float]) -> tuple[Tuned, dict[int, float]]:
    """Tuned settings from the calibration outputs, and the replayed speed of each draft ceiling."""
    config = loaded.model.config
    hits = np.zeros((config.num_hidden_layers, config.num_attention_heads))
    layer_hits = np.zeros(config.num_hidden_layers)
    cases = sum(score_sequence(loaded.model, p + o, len(p), hits, layer_hits) for p, o in zip(prompts, outputs))
    if cases == 0:
        raise RuntimeError("the calibration outputs never repeat earlier tokens; nothing to calibrate on")
    order = np.argsort(-hits, axis=None, kind="stable")
    heads = [tuple(int(v) for v in np.unravel_index(i, hits.shape)) for i in order]
    settings = tuned(loaded)
    settings.heads = heads
    settings.hidden_layer = int(np.argmax(layer_hits[1:]) + 1)
    speeds = ceiling_speeds(costs, prompts, outputs)
    settings.draft_tokens = max(DRAFT_CEILINGS, key=lambda most: (speeds[most], -most))  # ties: the shorter
    return settings, speeds
