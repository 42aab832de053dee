"""Calibration: the replay that picks the draft ceiling, and a whole calibration on the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from assistant.bench import calibration
from assistant.model import loading

FLAT = {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2, 16: 1.4, 32: 1.8}  # verification nearly free, as on a GPU
STEEP = {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0, 16: 16.0, 32: 32.0}  # every drafted token costs a full forward


def test_output_with_nothing_to_copy_costs_one_forward_per_token():
    prompt, output = list(range(100, 140)), list(range(200, 230))
    assert calibration.replay_cost(FLAT, prompt, output, 16) == pytest.approx(len(output))


def test_a_long_copy_costs_far_less_and_longer_drafts_pay_when_verification_is_cheap():
    prompt = list(range(100, 400))
    output = prompt[:1] + prompt[1:250]  # the prompt copied back: every draft after the first is accepted
    costs = {most: calibration.replay_cost(FLAT, prompt, output, most) for most in (8, 32)}
    assert costs[32] < costs[8] < len(output) / 4


def test_ceiling_speeds_replay_every_candidate_and_prefers_short_drafts_when_they_cost_a_forward_each():
    prompt = list(range(100, 400))
    outputs = [prompt[:120], list(range(500, 530))]
    speeds = calibration.ceiling_speeds(STEEP, [prompt, prompt], outputs)
    assert list(speeds) == list(calibration.DRAFT_CEILINGS)
    assert max(speeds.values()) <= 1.0 + 1e-9  # drafting cannot beat plain decoding at this cost


def test_calibrate_on_the_tiny_model(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_CACHE", str(tmp_path))
    loaded = loading.LoadedModel(tiny_model, None, "tiny", None, Path(tmp_path), "float32")
    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7, 20, 21, 22] * 3
    output = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7, 20]
    settings, speeds = calibration.calibrate(loaded, [prompt], [output], FLAT)
    config = tiny_model.config
    assert len(settings.heads) == config.num_hidden_layers * config.num_attention_heads
    assert 1 <= settings.hidden_layer < config.num_hidden_layers
    assert settings.draft_tokens in calibration.DRAFT_CEILINGS and set(speeds) == set(calibration.DRAFT_CEILINGS)
