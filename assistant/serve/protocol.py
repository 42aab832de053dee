"""The OpenAI-compatible API's requests and answers, and how a request becomes an engine call.

A chat completion is answered in one of three ways, decided by the request alone:

- with the extension field `assistant.document` (and `assistant.instruction`): a rewrite in the engine's
  own terms (`Assistant.run`): its edit prompt, long-document planning, an optional `selection`, and
  attribution into that document. This is what the doors' `--engine` sends; `messages` then only
  renders the same request for servers that do not know the extension;
- with a `prediction` whose text is in none of the messages: a rewrite of the prediction, the last user
  message being the instruction (drafts can copy only from the prompt, so the text must be in it);
- otherwise: the messages as a chat, through the model's chat template (`Assistant.chat`); a prediction
  found in them changes nothing in the prompt, so the answer is the same text with or without it.

Every answer is decoded with the engine's strategies (`assistant.strategy`, the server's by default),
losslessly: greedy output is the same whatever the strategy. Attribution travels in the extension field
`assistant.spans` of each chunk (or of the whole answer): `{"output": [a, b], "source": S}` where S is
`{"message": i, "start": c, "end": d}` (characters of messages[i].content), `{"document": ...}` or
`{"prediction": ...}` likewise, or null for text the model wrote itself; `assistant.step` and
`assistant.totals` are the decoding step's figures and the answer's so far. While a request waits for
the model, chunks with `assistant.queued` say how many run before it; before a repair pass (a rewrite
with `assistant.language`), a chunk with `assistant.repairing` names the problems it repairs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from assistant import Assistant, Delta, Event, Queued, Repair, Repairing, Request, Result, RewriteError, Span, check_strategy
from assistant.engine.contract import SEEDS, check_unicode

MAX_TEXT_CHARS = 400_000  # a message, the prediction, the document: each at most this
MAX_MESSAGES = 256
MAX_NEW_TOKENS = 8192
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}  # "cancelled" ends with an error (app.py)


# ---------------------------------------------------------------- requests
# Every field is checked here, so that a bad value is a 400 naming it, never an engine's failure (a 500,
# which the openai SDK retries): texts are valid Unicode, numbers in the engine's ranges.

def unicode_text(text: str) -> str:
    check_unicode(text)  # a lone surrogate, as JSON's "\ud800" makes, cannot be encoded, nor tokenized
    return text


Text = Annotated[str, AfterValidator(unicode_text)]


class Part(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: Text = Field(max_length=MAX_TEXT_CHARS)


def joined(content: str | list[Part] | None) -> str:
    """A message's content as one text, however it was sent (a string or a list of text parts)."""
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.text for part in content)


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[Part] | None = Field(None, max_length=MAX_TEXT_CHARS)


class Prediction(BaseModel):
    type: Literal["content"]
    content: Text | list[Part] = Field(max_length=MAX_TEXT_CHARS)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class Extension(BaseModel):
    """The `assistant` field of a request: what the engine offers beyond OpenAI's API."""

    model_config = ConfigDict(extra="forbid")

    strategy: Text | None = Field(None, description="ar, pld, pld+h or pld+a; the server's when left out")
    document: Text | None = Field(None, max_length=MAX_TEXT_CHARS, description="a text to rewrite")
    instruction: Text | None = Field(None, max_length=MAX_TEXT_CHARS, description="what to change in `document`")
    selection: tuple[int, int] | None = Field(None, description="rewrite only these characters of `document`")
    references: list[Text] = Field([], max_length=16, description="read-only texts that drafts may copy from")
    max_piece_tokens: int | None = Field(None, ge=1, description="split a long document into pieces this size")
    language: Text | None = Field(None, max_length=64, description="an LSP languageId to check the answer as")
    repairs: int | None = Field(None, ge=0, le=4, description="repair passes at most; the server's when left out")
    by_definition: bool = Field(True, strict=True, description="false: one pass even for an edit asked of each "
                                                                "definition")

    @field_validator("strategy")
    @classmethod
    def known_strategy(cls, value: str | None) -> str | None:
        return value if value is None else check_strategy(value)  # RewriteError is a ValueError


class Sampled(BaseModel):
    """What chat and plain completions share. Unknown OpenAI fields are ignored; `temperature` defaults to
    0 (greedy), where OpenAI's default is 1."""

    model_config = ConfigDict(extra="ignore")

    model: Text | None = None  # one model is served, whatever the name
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, lt=SEEDS)
    stop: Text | list[Text] | None = Field(None, max_length=4)
    n: int = Field(1, ge=1, le=1, description="one answer per request")
    assistant: Extension | None = None

    def options(self, max_tokens: int | None) -> dict:
        """The engine Request's fields this request sets."""
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        strategy = self.assistant.strategy if self.assistant else None
        return {"strategy": strategy, "max_new_tokens": max_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed, "stop": stop}


class ChatRequest(Sampled):
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS)
    prediction: Prediction | None = None


class CompletionRequest(Sampled):
    prompt: Text | list[Text] = Field(max_length=MAX_TEXT_CHARS)

    @field_validator("prompt")
    @classmethod
    def one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("send one prompt per request")
        return value


# ---------------------------------------------------------------- requests as engine calls

@dataclass(frozen=True)
class Job:
    """One request as the engine runs it: `start(cancel)` makes its events (on a worker thread), `source`
    names an engine source span in the request's terms, `predicted` says whether a prediction came."""

    start: Callable[[threading.Event], Iterator[Event]]
    source: Callable[[tuple[int, int]], dict]
    predicted: bool = False


def located(where: dict) -> Callable[[tuple[int, int]], dict]:
    return lambda span: {**where, "start": span[0], "end": span[1]}


def chat_job(assistant: Assistant, body: ChatRequest) -> Job:
    options = body.options(body.max_completion_tokens or body.max_tokens)
    prediction = joined(body.prediction.content) if body.prediction else None
    extension = body.assistant or Extension()
    if extension.document is not None:
        if extension.instruction is None:
            raise RewriteError("assistant.document needs assistant.instruction: say what to change")
        return rewrite_job(assistant, extension.document, extension.instruction, prediction, extension, options,
                           {"document": True})
    *history, last = body.messages
    if last.role != "user":
        raise RewriteError("the last message must be the user's")
    texts = [joined(message.content) for message in body.messages]
    if prediction and not any(prediction in text for text in texts):
        return rewrite_job(assistant, prediction, texts[-1], None, extension, options, {"prediction": True})
    history = tuple({"role": message.role, "content": text} for message, text in zip(history, texts))

    def start(cancel: threading.Event) -> Iterator[Event]:
        return assistant.chat(texts[-1], history=history, cancel=cancel, **options)

    return Job(start, located({"message": len(texts) - 1}), prediction is not None)


def rewrite_job(assistant: Assistant, document: str, instruction: str, prediction: str | None,
                extension: Extension, options: dict, where: dict) -> Job:
    """A rewrite of `document`; a prediction not in it is shown as a reference, so drafts may copy from it."""
    references = tuple(extension.references) + ((prediction,) if prediction and prediction not in document else ())
    selection = tuple(extension.selection) if extension.selection else None
    request = Request(document, instruction, selection=selection, references=references,
                      max_piece_tokens=extension.max_piece_tokens, language=extension.language,
                      repairs=extension.repairs, by_definition=extension.by_definition, **options)

    def start(cancel: threading.Event) -> Iterator[Event]:
        return assistant.run(request, cancel)

    return Job(start, located(where), prediction is not None)


def completion_job(assistant: Assistant, body: CompletionRequest) -> Job:
    prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
    options = body.options(body.max_tokens)

    def start(cancel: threading.Event) -> Iterator[Event]:
        return assistant.complete(prompt, cancel=cancel, **options)

    return Job(start, located({"prompt": True}))


# ---------------------------------------------------------------- answers

@dataclass
class Answer:
    """One completion as it is answered: its identity, and the text streamed so far."""

    kind: Literal["chat.completion", "text_completion"]
    model: str
    job: Job
    id: str = ""
    created: int = 0
    text: str = ""

    def __post_init__(self):
        prefix = "chatcmpl" if self.kind == "chat.completion" else "cmpl"
        self.id, self.created = f"{prefix}-{uuid.uuid4().hex}", int(time.time())

    def spans(self, spans: list[Span]) -> list[dict]:
        return [{"output": list(span.output), "source": None if span.source is None else self.job.source(span.source)}
                for span in spans]

    def envelope(self, choice: dict, chunk: bool, extension: dict | None = None) -> dict:
        kind = self.kind + (".chunk" if chunk and self.kind == "chat.completion" else "")
        body = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": [{"index": 0, "logprobs": None, **choice}]}
        return body | ({"assistant": extension} if extension else {})

    def piece(self, delta: dict, finish_reason: str | None = None) -> dict:
        """A streamed choice: a chat delta, or a plain completion's text."""
        if self.kind == "text_completion":
            return {"text": delta.get("content", ""), "finish_reason": finish_reason}
        return {"delta": delta, "finish_reason": finish_reason}

    def first_chunk(self) -> dict:
        return self.envelope(self.piece({"role": "assistant", "content": ""}), True)

    def chunk(self, event: Event) -> dict | None:
        """The streamed chunk of an engine event (None for one that shows nothing)."""
        if isinstance(event, Queued):
            return self.envelope(self.piece({}), True, {"queued": event.ahead})
        if isinstance(event, Repairing):
            return self.envelope(self.piece({}), True, {"repairing": {
                "attempt": event.attempt, "problems": [problem.to_json() for problem in event.problems]}})
        if isinstance(event, Delta) and (event.text or event.tokens or event.new_tokens):
            self.text += event.text
            step = {"new_tokens": event.new_tokens, "drafted": event.drafted, "accepted": event.accepted,
                    "seconds": round(event.seconds, 5)}
            return self.envelope(self.piece({"content": event.text}), True, {
                "spans": self.spans(event.tokens), "step": step, "totals": event.totals.to_json()})
        return None

    def last_chunk(self, result: Result) -> dict:
        """The chunk that ends the stream: the finish reason and the engine's own account of the answer."""
        extension = summary(result)
        if result.text != self.text:  # a repair replaced the answer streamed
            extension |= {"text": result.text, "spans": self.spans(result.spans)}
        return self.envelope(self.piece({}, finish_reason(result)), True, extension)

    def whole(self, result: Result) -> dict:
        """The answer of a request that was not streamed."""
        if self.kind == "chat.completion":
            choice = {"message": {"role": "assistant", "content": result.text}, "finish_reason": finish_reason(result)}
        else:
            choice = {"text": result.text, "finish_reason": finish_reason(result)}
        return self.envelope(choice, False, summary(result) | {"spans": self.spans(result.spans)}) | {
            "usage": usage(result, self.job.predicted)}

    def usage_chunk(self, result: Result) -> dict:
        return {"id": self.id, "object": self.envelope({}, True)["object"], "created": self.created,
                "model": self.model, "choices": [], "usage": usage(result, self.job.predicted)}


def finish_reason(result: Result) -> str:
    return FINISH_REASONS.get(result.stopped, "length")


def summary(result: Result) -> dict:
    """The engine's account of an answer, in the extension field: how it stopped, what it cost, and whether it
    changed anything (`change`: "none", "layout" or "comments" is no change made; "edit"; None: unfinished)."""
    return {"stopped": result.stopped, "stats": result.stats.to_json(), "model": result.model,
            "weights": result.weights, "pieces": [list(piece) for piece in result.pieces],
            "check": None if result.check is None else result.check.to_json(), "change": result.change,
            "repairs": [repair_json(repair) for repair in result.repairs]}


def repair_json(repair: Repair) -> dict:
    """A repair pass, whole (a remote door rebuilds it): its problems before and after, and its figures."""
    return {"attempt": repair.attempt, "kept": repair.kept, "seconds": round(repair.seconds, 4),
            "stats": repair.stats.to_json(), "problems_before": [p.to_json() for p in repair.problems_before],
            "problems_after": [p.to_json() for p in repair.problems_after], "model": repair.model}


def usage(result: Result, predicted: bool) -> dict:
    """OpenAI's usage: with a prediction, the draft tokens (copied from the prompt, which holds it) that the
    model accepted and those it rejected."""
    stats = result.stats
    accepted, rejected = (stats.accepted, stats.drafted - stats.accepted) if predicted else (0, 0)
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.new_tokens,
            "total_tokens": stats.prompt_tokens + stats.new_tokens,
            "completion_tokens_details": {"accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": rejected}}
