"""The generators `assistant bench` measures, each run to the end of one record's answer: the engine
(every strategy of the contract, on the loaded weights or on others, with its default number of repair
passes or another), transformers' own prompt lookup (`hf-pld`, `generate(prompt_lookup_num_tokens=10)`)
and llama.cpp (`llama-cpp`: llama-cpp-python, optional, greedy on the same GGUF, fed the engine's own
prompt token ids, with the engine's thread count and its own prefill each time), and on CanItEdit the
benchmark's own chat prompt through the engine (`reference-prompt`, `canitedit.py`).

Every generator gets the output budget the front doors give (`Assistant.budget`) unless the plan cuts
answers shorter, and stops where the engine would stop, so that their answers can be compared.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from transformers.generation.streamers import BaseStreamer

from assistant import DEFAULT_STRATEGY, Delta, Result, config, result_of
from assistant.bench import canitedit, data, step_costs
from assistant.bench.plan import (
    ATTENTION,
    HF_PLD,
    LLAMA_CPP,
    ONE_PASS,
    REFERENCE_PROMPT,
    REPAIRS,
    SHORT_DRAFTS,
    SIDE_BY_SIDE,
    TREE,
    BenchError,
)
from assistant.bench.report import ratio
from assistant.engine.output import OutputText
from assistant.model import loading

HF_PLD_LOOKUP = 10  # prompt_lookup_num_tokens, transformers' own default for its PLD
WARMUP_TOKENS = 4
UNFINISHED = ("length", "cancelled")  # a Result's `stopped` for an answer that did not end by itself


# --- running one strategy on one record -----------------------------------------------------------

@dataclass
class Run:
    text: str
    new_tokens: int
    complete: bool  # the answer ended by itself, not at the token limit
    seconds: float
    steps: int | None = None
    first_token_seconds: float | None = None
    per_step: list[int] = field(default_factory=list)  # tokens gained per step
    token_spans: list = field(default_factory=list)
    first_text: str | None = None  # the first answer, before any repair (None: `text`, nothing was repaired)
    result: Result | None = None  # the engine's Result, with its check and repairs
    reply: str | None = None  # `reference-prompt`: the whole reply, of which `text` is the first code block


def runs_on(strategy: str, record: data.Record) -> bool:
    """Whether `strategy` is measured on `record`: `reference-prompt` is CanItEdit's prompt, for its records."""
    return strategy != REFERENCE_PROMPT or record.task == data.CANITEDIT_TASK


class Runner:
    """Runs a record under a strategy with one loaded model; knows which strategies it can run."""

    def __init__(self, assistant, max_new_tokens: int | None, model: str, load=None):
        self.assistant, self.max_new_tokens, self.model = assistant, max_new_tokens, model
        # (weights, long_drafts=, branches=, side_by_side=, attention=) -> another Assistant of the same model, for ar@float32
        self.load = load
        self.others: dict[str, object] = {}
        self.unavailable: dict[str, str] = {}
        self.histories: dict[str, tuple[dict, ...]] = {}
        self.llama = None
        self.llama_info: dict = {}  # what llama.cpp ran, for summary.json

    def check(self, strategies: list[str]) -> list[str]:
        """The strategies that can run here; the others go to `unavailable` with the reason."""
        if "pld+a" in strategies and not self.assistant.tuned.heads:
            self.unavailable["pld+a"] = "no tuned induction heads for this model (run `assistant calibrate`)"
        if LLAMA_CPP in strategies:
            try:
                self.load_llama()
            except ImportError:
                self.unavailable[LLAMA_CPP] = "llama_cpp is not installed (see the README's bench section)"
            except (BenchError, loading.ModelError, ValueError) as error:  # no GGUF, or one llama.cpp cannot load
                self.unavailable[LLAMA_CPP] = str(error)
        return [s for s in strategies if s not in self.unavailable]

    def load_llama(self) -> None:
        from llama_cpp import Llama, __version__  # optional, never a dependency

        gguf, threads = llama_gguf(self.model), torch.get_num_threads()
        self.llama = Llama(model_path=str(gguf), n_ctx=self.assistant.loaded.context_length, n_threads=threads,
                           n_threads_batch=threads, verbose=False)
        self.llama_info = {"version": __version__, "gguf": str(gguf), "threads": threads,
                           "prompt": "the engine's prompt token ids"}

    def warm_up(self, strategies: list[str], record: data.Record) -> list[str]:
        """One short generation per strategy, so that first-call costs stay out of the timings."""
        for strategy in strategies:
            try:
                self.run(strategy, record, WARMUP_TOKENS)
            except Exception as error:  # a strategy that cannot run here is reported, not fatal
                if strategy == "ar":
                    raise
                self.unavailable[strategy] = f"{type(error).__name__}: {error}"
        return [s for s in strategies if s not in self.unavailable]

    def run(self, strategy: str, record: data.Record, max_new_tokens: int | None = None) -> Run:
        max_new_tokens = max_new_tokens or self.max_new_tokens
        if strategy == HF_PLD:
            return self.hf_pld(record, max_new_tokens)
        if strategy == LLAMA_CPP:
            return self.llama_cpp(record, max_new_tokens)
        if strategy == REFERENCE_PROMPT:
            return self.reference(record, max_new_tokens)
        return self.engine(strategy, record, max_new_tokens)  # None: the engine's own budget

    def budget(self, record: data.Record, prompt, max_new_tokens: int | None) -> int:
        """The tokens another generator may make: `max_new_tokens`, or the budget the engine gives itself."""
        return max_new_tokens or self.assistant.budget(prompt, record.document if record.is_edit else None)

    def with_weights(self, strategy: str):
        """(assistant, engine strategy, request options) for `strategy`, which may name other weights,
        `ar@float32`, another number of repair passes, `ar@repairs=0`, one pass, `ar@one-pass`, or drafts
        that stop at the tuned ceiling, `pld+h@long-drafts=0` (an assistant loaded without long drafts), a
        token tree of N candidates' drafts, `pld+h@tree=N` (an assistant loaded with N branches), N passes
        over definitions side by side, `pld+h@side-by-side=N`, or attention in another precision,
        `pld+h@attention=float32`."""
        strategy, _, other = strategy.partition("@")
        if not other:
            return self.assistant, strategy, {}
        if repairs := REPAIRS.fullmatch(other):
            return self.assistant, strategy, {"repairs": int(repairs.group(1))}
        if other == ONE_PASS:
            return self.assistant, strategy, {"by_definition": False}
        if other not in self.others:
            self.others[other] = self.variant(other)
            self.others[other].measured_costs()
        return self.others[other], strategy, {}

    def variant(self, other: str):
        """Another assistant of the model for the variant `other`: other weights, or the same weights without
        long drafts (`long-drafts=0`), with a token tree (`tree=N`), with N passes side by side (`side-by-side=N`) or
        with attention in another precision (`attention=float32`)."""
        weights = self.assistant.loaded.weights
        if other == SHORT_DRAFTS:
            return self.load(weights, long_drafts=False)
        if tree := TREE.fullmatch(other):
            return self.load(weights, branches=int(tree.group(1)))
        if side := SIDE_BY_SIDE.fullmatch(other):
            return self.load(weights, side_by_side=int(side.group(1)))
        if precision := ATTENTION.fullmatch(other):
            return self.load(weights, attention=precision.group(1))
        return self.load(other)

    def events(self, strategy: str, record: data.Record, max_new_tokens: int | None):
        assistant, strategy, options = self.with_weights(strategy)
        if record.is_edit:
            return assistant.rewrite(record.document, record.instruction, strategy=strategy,
                                     max_new_tokens=max_new_tokens, language=record.language, **options)
        return assistant.chat(record.document, history=self.history(record), strategy=strategy,
                              max_new_tokens=max_new_tokens)

    def engine(self, strategy: str, record: data.Record, max_new_tokens: int | None) -> Run:
        return collected(self.events(strategy, record, max_new_tokens))

    def reference(self, record: data.Record, max_new_tokens: int | None) -> Run:
        """CanItEdit's own chat prompt for the record, answered greedily (with the engine's default drafting,
        which keeps greedy's text) within the budget of an edit of its document; the answer is the code of
        the reply's first code block, as upstream takes it. The engine does not check a chat turn."""
        system, user = canitedit.messages(record.document, record.instruction)
        history = (system,)
        budget = self.budget(record, self.assistant.chat_prompt(user["content"], history), max_new_tokens)
        run = collected(self.assistant.chat(user["content"], history=history, strategy=DEFAULT_STRATEGY,
                                            max_new_tokens=budget))
        return replace(run, text=canitedit.code_block(run.text), first_text=None, result=None, reply=run.text)

    def forward_costs(self, records: list[data.Record]) -> dict[str, dict]:
        """The cost of a forward (`step_costs`) for each weights loaded and for llama.cpp, after the same
        context made of the records' text, and of a one-token step of the engine's loop around it."""
        loaded = self.assistant.loaded
        ids = step_costs.context_ids(loaded.tokenizer, [r.document for r in records], loaded.context_length)
        engines = {f"engine {a.loaded.weights}": step_costs.Engine(a.loaded.model, ids, a.drafter(a.strategy),
                                                                   a.adaptive_length())
                   for a in (self.assistant, *self.others.values())}
        if self.llama is not None:
            engines[LLAMA_CPP] = step_costs.LlamaCpp(self.llama, ids)
        costs = step_costs.measure(engines)
        llama = costs.get(LLAMA_CPP)
        return {name: {**c.as_dict(), "step_vs_llama_cpp": ratio(llama and llama.step_seconds, c.step_seconds),
                       "prefill_vs_llama_cpp": ratio(llama and llama.prefill_seconds, c.prefill_seconds)}
                for name, c in costs.items()}

    def history(self, record: data.Record) -> tuple[dict, ...]:
        """MT-Bench earlier turns with the model's own (greedy, untimed) answers, made once per record."""
        if record.id not in self.histories:
            history: tuple[dict, ...] = ()
            for turn in record.earlier_turns:
                answer = result_of(self.assistant.chat(turn, history=history, strategy="ar",
                                                       max_new_tokens=self.max_new_tokens)).text
                history += ({"role": "user", "content": turn}, {"role": "assistant", "content": answer})
            self.histories[record.id] = history
        return self.histories[record.id]

    def prompt(self, record: data.Record):
        if record.is_edit:
            return self.assistant.prompt(record.document, record.instruction)
        return self.assistant.chat_prompt(record.document, self.history(record))

    def visible(self, record: data.Record, prompt, tokens: list[int]) -> tuple[str, int, bool]:
        """What the engine would show for these tokens, how many of them it would count, and whether they
        end the answer."""
        target = (0, len(record.document)) if record.is_edit else None
        return self.assistant.shown(prompt, record.document, target, tokens)

    def hf_pld(self, record: data.Record, max_new_tokens: int | None) -> Run:
        model, tokenizer = self.assistant.loaded.model, self.assistant.loaded.tokenizer
        prompt = self.prompt(record)
        max_new_tokens = self.budget(record, prompt, max_new_tokens)
        ids = torch.tensor([prompt.ids], device=model.device)
        # The engine ends an edit where the answer's code block closes; generate() is told the same.
        closing = {"stop_strings": [f"\n{prompt.fence}\n"], "tokenizer": tokenizer} if prompt.fence else {}
        synchronize(model.device)
        first = FirstTokens()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), prompt_lookup_num_tokens=HF_PLD_LOOKUP,
                                 max_new_tokens=max_new_tokens, do_sample=False, streamer=first, **closing)
        synchronize(model.device)
        seconds = time.perf_counter() - first.started
        return Run(*self.visible(record, prompt, out[0, ids.shape[1]:].tolist()), seconds,
                   first_token_seconds=first.seconds)

    def llama_cpp(self, record: data.Record, max_new_tokens: int | None) -> Run:
        """llama.cpp's greedy decoding of the engine's prompt ids, stopped where the engine would stop."""
        prompt, eos = self.prompt(record), self.assistant.loaded.eos
        max_new_tokens = self.budget(record, prompt, max_new_tokens)
        output = OutputText(self.assistant.loaded.tokenizer, record.document, fence=prompt.fence)
        tokens, first_token = [], None
        self.llama.reset()  # no reuse of the previous prompt's cache: it pays its own prefill, as every strategy
        started = time.perf_counter()
        for token in self.llama.generate(prompt.ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            first_token = first_token or time.perf_counter() - started
            tokens.append(token)
            output.add([token], [None])
            if token in eos or output.ended or len(tokens) == max_new_tokens:
                break
        seconds = time.perf_counter() - started
        return Run(*self.visible(record, prompt, tokens), seconds, first_token_seconds=first_token)


def collected(events) -> Run:
    """The engine's answer from its events, with the tokens each step gained and its first answer."""
    per_step, first = [], ""  # first: the first answer, as streamed (a repair's steps are not)
    with closing(events):
        for event in events:
            if isinstance(event, Delta):
                first += event.text
                if event.new_tokens:  # new_tokens == 0: the final flush
                    per_step.append(event.new_tokens)
            if isinstance(event, Result):
                stats = event.stats
                return Run(event.text, stats.new_tokens, event.stopped not in UNFINISHED, stats.seconds,
                           stats.steps, stats.first_token_seconds, per_step, event.token_spans, first, event)
    raise AssertionError("the engine ended without a result")


class FirstTokens(BaseStreamer):
    """When generate() hands over its first new tokens (its first `put` is the prompt), in seconds from
    this streamer's making: `hf-pld`'s time to first token, as the engine's is taken at its first step."""

    def __init__(self):
        self.started, self.puts, self.seconds = time.perf_counter(), 0, None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.seconds = time.perf_counter() - self.started

    def end(self) -> None:
        pass


def llama_gguf(model: str) -> Path:
    """The GGUF file llama.cpp reads for `--model`: a .gguf path as given, or an embedded model's
    weights, joined once into the cache when they ship in parts."""
    path = loading.gguf_file(model, config.settings().cache)
    if path is None:
        raise BenchError(f"llama-cpp reads GGUF weights: --model {model!r} is neither an embedded model "
                         f"nor a .gguf file")
    return path


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()

