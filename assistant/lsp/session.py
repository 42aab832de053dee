"""One rewrite's life in the editor, for the language server's handlers: stream the diff of the
original lines and the engine's output into the buffer (`rewrite`, `stream`, `write`), follow the
user's edits (`follow_edits`), accept or reject its hunks one by one or all at once (`decide`), and
tell the editor what it shows: where each output piece came from (hover, highlights, the
`assistant/attribution` notification), the hunks (`assistant/diff`, code lenses) and the answer's
problems (diagnostics). The state of one rewrite is `lsp.rewrite.Rewrite`; the handlers in
`lsp.server` only unpack their parameters and call these. Every edit names the document version it
was made for, and counts only once the editor moved past that version.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Protocol

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.progress import Progress
from pygls.protocol import LanguageServerProtocol
from pygls.workspace import Workspace

from assistant import Delta, Queued, Repairing, Result, RewriteError, check_instruction
from assistant.engine import aio
from assistant.lsp import ranges
from assistant.lsp.hunks import Diff, line_edit
from assistant.lsp.rewrite import Rewrite

EDIT_INTERVAL = 0.25  # seconds between streaming edits: editors redraw and re-highlight on each
FINISHED = ("eos", "stop")  # the answer ended where the model ended it; anything else is unfinished
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
ATTRIBUTION = "assistant/attribution"
DIFF = "assistant/diff"
SETTLING: set[asyncio.Task] = set()  # `settle`s under way: the event loop keeps only weak references to tasks


class Server(Protocol):
    """What a session uses of the language server (`lsp.server.AssistantServer`, a pygls LanguageServer): its
    state, the client's capabilities and documents, and the messages it sends."""

    engine: aio.Loader
    rewrites: dict[str, Rewrite]  # the latest rewrite of each document
    requests: dict[object, threading.Event]  # request id -> cancel event of its rewrite
    editing: dict[str, asyncio.Lock]  # uri -> held while an edit of ours names the document's version
    request_timeout: float
    draft_from_open_buffers: bool
    virtual_removed: bool  # the client shows removed lines without making them text (`removedLines: "virtual"`)
    version: str
    client_capabilities: types.ClientCapabilities
    protocol: LanguageServerProtocol
    workspace: Workspace
    work_done_progress: Progress

    @property
    def encoding(self) -> str: ...

    def window_show_message(self, params: types.ShowMessageParams) -> None: ...

    async def workspace_apply_edit_async(self, params: types.ApplyWorkspaceEditParams
                                         ) -> types.ApplyWorkspaceEditResult: ...

    def text_document_publish_diagnostics(self, params: types.PublishDiagnosticsParams) -> None: ...

    def workspace_code_lens_refresh(self, params: None) -> Future[None]: ...


def check_text(uri: str, text: str) -> None:
    """Refuse a document that is not valid Unicode: a lone surrogate cannot be tokenized, encoded or edited."""
    if found := LONE_SURROGATE.search(text):
        position = ranges.position_at(text, found.start())
        raise JsonRpcInvalidParams(f"{uri} has a lone surrogate (U+{ord(found.group()):04X}) at line "
                                   f"{position.line + 1}, character {position.character + 1}; "
                                   "it is not valid Unicode text")


def open_document(ls: Server, uri: str):
    # get_text_document would read an unopened file from disk; we only edit buffers the editor owns
    document = ls.workspace.text_documents.get(uri)
    if document is None:
        raise JsonRpcInvalidParams(f"{uri} is not open")
    return document


async def engine(ls: Server):
    """The loaded model, waiting (with a progress bar) while it loads; an error if loading failed."""
    try:
        if not ls.engine.done():
            async with progress(ls, "Assistant", "loading model"):
                await asyncio.wrap_future(ls.engine)
        return ls.engine.result()
    except Exception as error:  # noqa: BLE001 - whatever broke the load is the request's answer
        raise JsonRpcInvalidRequest(f"the model failed to load: {error}") from error


class progress:
    """Work-done progress for one job; a no-op for clients that cannot show it."""

    def __init__(self, ls: Server, title: str, message: str, cancel: threading.Event | None = None):
        self.ls, self.title, self.message, self.cancel = ls, title, message, cancel
        self.token: str | None = None
        self.outcome: str | None = None  # shown when the progress ends

    async def __aenter__(self):
        window = self.ls.client_capabilities.window
        if window is None or not window.work_done_progress:
            return self
        token = str(uuid.uuid4())
        try:
            await answer_within(self.ls, self.ls.work_done_progress.create_async(token))
        except Exception:  # noqa: BLE001 - a client that refuses (or never answers) still gets its rewrite
            return self
        self.token = token
        self.ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title=self.title, message=self.message, cancellable=self.cancel is not None))
        if self.cancel is not None:  # window/workDoneProgress/cancel cancels this future
            self.ls.work_done_progress.tokens[token].add_done_callback(lambda _: self.cancel.set())
        return self

    def report(self, message: str) -> None:
        if self.token is not None:
            self.ls.work_done_progress.report(self.token, types.WorkDoneProgressReport(message=message))

    async def __aexit__(self, *exc):
        if self.token is not None:
            self.ls.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=self.outcome))
            self.ls.work_done_progress.tokens.pop(self.token, None)


async def answer_within(ls: Server, request):
    """The client's answer to a request of ours, or TimeoutError once `request_timeout` passes; the
    request is shielded so a late answer still finds its future."""
    return await asyncio.wait_for(asyncio.shield(request), ls.request_timeout)


async def rewrite(ls: Server, uri: str, instruction: str, target: types.Range | None) -> dict:
    """Run one rewrite, streaming it into the buffer; returns the engine's result plus the URI."""
    try:
        check_instruction(instruction)
    except RewriteError as error:
        raise JsonRpcInvalidParams(str(error)) from error
    check_text("the instruction", instruction)
    document = open_document(ls, uri)
    text = document.source
    check_text(uri, text)
    try:
        selection = ranges.offsets_of(text, target, ls.encoding) if target is not None else None
    except ValueError as error:
        raise JsonRpcInvalidParams(f"the range is outside the document: {error}") from error
    model = await engine(ls)
    document = open_document(ls, uri)  # it may have changed or closed while the model loaded
    if document.source != text:
        raise JsonRpcInvalidRequest(f"{uri} changed while the model loaded; ask again")
    check_free(ls, uri)
    start, end = selection or (0, len(text))
    job = Rewrite(uri, text, start, end, ls.encoding, str(uuid.uuid4()), virtual=ls.virtual_removed)
    ls.rewrites[uri] = job
    msg_id = ls.protocol.msg_id
    ls.requests[msg_id] = job.cancel
    try:
        references = tuple(d.source for u, d in ls.workspace.text_documents.items()
                           if u != uri and d.source.strip()) if ls.draft_from_open_buffers else ()
        try:
            # rewrite() tokenizes and may time the model once: keep it off the event loop
            events = await asyncio.to_thread(model.rewrite, text, instruction, selection=selection,
                                             cancel=job.cancel, references=references, language=document.language_id)
        except Exception as error:  # RewriteError, and anything else the engine refuses with
            raise JsonRpcInvalidParams(str(error)) from error
        result = await stream(ls, job, events, model.loaded.context_length)
    except BaseException:
        if ls.rewrites.get(uri) is job:
            del ls.rewrites[uri]
        raise
    finally:
        job.running = False
        ls.requests.pop(msg_id, None)
    if job.closed:
        raise JsonRpcInvalidRequest(f"{uri} was closed during the rewrite")
    await settle(ls, job)  # shows the review, with any typing that came after the last edit
    report_unchanged(ls, job, result)
    return answer_of(job, result)


def check_free(ls: Server, uri: str) -> None:
    """Refuse a second rewrite of a document whose rewrite still streams, or still waits for a decision."""
    current = ls.rewrites.get(uri)
    if current is not None and current.running:
        raise JsonRpcInvalidRequest(f"{uri} is already being rewritten; cancel that first")
    if current is not None and current.reviewing:
        raise JsonRpcInvalidRequest(f"{uri} has a rewrite whose hunks wait for a decision; accept or reject them first")


def answer_of(job: Rewrite, result) -> dict:
    """The command's answer: the engine's result as the buffer holds it (the original target, when an
    unfinished answer was taken back), its offsets in that text."""
    answer = result.to_json()
    if job.restored:
        answer["text"], answer["spans"] = job.target, []
    else:
        answer["text"], at = job.shown(result.text), job.shown_offset(result.text)
        for span in answer["spans"]:
            span["output"] = [at(span["output"][0]), at(span["output"][1])]
    answer.update(uri=job.uri, id=job.id, conflict=job.typed, restored=job.restored, hunks=len(job.undecided),
                  unchanged=result.unchanged)
    return answer


async def stream(ls: Server, job: Rewrite, events, context: int):
    """Show the diff of the engine's output as it comes, at most one edit per EDIT_INTERVAL, then the
    final one: the answer's diff if it finished, else the original lines, so no unfinished answer stays."""
    received = aio.events(events, job.cancel)
    output, token_spans, written, last_edit = "", [], None, 0.0
    result = failure = None
    async with progress(ls, "Assistant rewrite", "starting", job.cancel) as bar:
        async for event in received:
            if isinstance(event, BaseException):
                failure = event
            elif isinstance(event, Queued):
                bar.report(f"waiting for the model: {event.ahead} ahead")
            elif isinstance(event, Delta):
                output += event.text
                token_spans += event.tokens
                if time.monotonic() - last_edit >= EDIT_INTERVAL and output != written and not job.typed:
                    bar.report(f"{event.totals.tokens_per_second:.0f} tokens/s, "
                               f"{event.totals.mean_accepted:.2f} tokens per step")
                    await write(ls, job, *job.diff_of(output, token_spans, final=False))
                    written, last_edit = output, time.monotonic()
            elif isinstance(event, Repairing):  # the Result's text is the answer kept, maybe not what streamed
                bar.report(f"repairing {len(event.problems)} problems (attempt {event.attempt})")
            elif isinstance(event, Result):
                result = event
                bar.outcome = event.stopped
    finished = failure is None and result.stopped in FINISHED and not job.refused
    if finished and not job.closed:
        job.answer_problems = job.problems_of(result.text, result.problems)
        finished = await write(ls, job, *job.diff_of(result.text, result.spans, final=True))
    if not finished and not job.closed:
        await take_back(ls, job)
        if not job.typed:  # typing stopped it, and `follow` said so
            report_unfinished(ls, job, failure or job.refused or result, context)
    if failure is not None:
        raise JsonRpcInvalidRequest(f"the rewrite failed: {failure}") from failure
    return result


def report_unchanged(ls: Server, job: Rewrite, result: Result) -> None:
    """A finished answer that made no edit is said to be one, whatever its hunks show (`Result.unchanged`)."""
    if result.unchanged and not job.restored:
        ls.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Info, message=f"assistant: {result.change_note}"))


def report_unfinished(ls: Server, job: Rewrite, why, context: int) -> None:
    """Say why the answer was not applied, and what would let it finish."""
    if isinstance(why, str):
        reason = why
    elif isinstance(why, BaseException):
        reason = f"the rewrite failed: {why}"
    elif why.stopped == "cancelled":
        reason = "the rewrite was cancelled"
    elif why.stats.prompt_tokens + why.stats.new_tokens >= context - 1:
        reason = (f"the document needs more room than the model's context of {context} tokens has, so the "
                  "answer stopped early; rewrite a selection instead of the whole document")
    else:
        reason = (f"the answer reached its limit of {why.stats.new_tokens} new tokens (about twice the "
                  "target's length) before it finished; rewrite a smaller selection or ask for less")
    kept = "the original text is back" if job.restored else "the buffer keeps what was written; use undo"
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                   message=f"assistant: {reason}; {kept}"))


async def write(ls: Server, job: Rewrite, diff: Diff, answer_spans) -> bool:
    """Show the streaming answer's `diff` in the rewrite's lines, unless the user typed in them; whether it landed."""
    async with ls.editing[job.uri]:
        follow(ls, job, open_document(ls, job.uri).source)
        return not job.closed and not job.typed and await put(ls, job, diff, answer_spans, "assistant")


async def take_back(ls: Server, job: Rewrite) -> None:
    """An unfinished answer: every hunk goes back to its original lines, but those the user typed in, which
    keep the side typed in."""
    async with ls.editing[job.uri]:
        follow(ls, job, open_document(ls, job.uri).source)
        if not job.closed:
            await put(ls, job, job.resolved().decide(job.undecided, False), None, "assistant")
    job.restored = job.known[job.start:job.end] == job.base


async def settle(ls: Server, job: Rewrite) -> None:
    """Make the decisions the user's typing made (the other side of each hunk typed in goes), then tell the
    editor what the rewrite's lines show."""
    async with ls.editing[job.uri]:
        while not job.closed and ls.rewrites.get(job.uri) is job:
            follow(ls, job, open_document(ls, job.uri).source)
            if not job.owed or not await put(ls, job, job.resolved(), None, "assistant: keep typing"):
                break
    if not job.closed:
        publish(ls, job)


async def put(ls: Server, job: Rewrite, diff: Diff, answer_spans, label: str) -> bool:
    """Under the document's edit lock, the rewrite followed onto the document: one edit, naming the
    document's version, that replaces the lines which differ between what the rewrite's lines hold and
    `diff`'s view; whether it landed. `answer_spans`: the answer's attribution, None to keep the spans."""
    document = open_document(ls, job.uri)
    version, before = document.version, document.source
    view = diff.view()
    start, end, text = line_edit(before[job.start:job.end], view.text)
    expected = before[:job.start] + view.text + before[job.end:]
    if start == end and not text:  # the same lines, marked anew (a deletion shows the old lines as they are)
        job.wrote(diff, view, expected, answer_spans)
        if job.running:
            publish(ls, job)
        return True
    edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=job.uri, version=version),
        edits=[types.TextEdit(range=ranges.range_at(before, job.start + start, job.start + end, job.encoding),
                              new_text=text)])])
    job.editing = True
    try:
        answer = await apply_edit(ls, edit, label)
    finally:
        job.editing = False
    if job.closed:
        return False
    now = ls.workspace.text_documents[job.uri]
    # Neovim answers applied=true even when it skipped a stale edit, so the version must have moved too;
    # if the edit did not land, `known` stays the text before it and the next follow() sees the truth.
    if answer.applied and now.version is not None and version is not None and now.version > version:
        job.wrote(diff, view, expected, answer_spans)
        follow(ls, job, now.source)
        if job.running:
            publish(ls, job)
        return True
    if not answer.applied and now.version == version:  # refused, not overtaken by typing: stop generating
        job.refused = f"the editor did not apply an edit ({answer.failure_reason or 'no reason given'})"
        job.cancel.set()
    return False


async def apply_edit(ls: Server, edit: types.WorkspaceEdit, label: str) -> types.ApplyWorkspaceEditResult:
    """Send `workspace/applyEdit`; a client that fails it or does not answer in time counts as refusing."""
    try:
        return await answer_within(ls, ls.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(edit=edit, label=label)))
    except TimeoutError:
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason=f"no answer in {ls.request_timeout:g} s")
    except Exception as error:  # noqa: BLE001 - an error answer is a refusal with a reason
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason=str(error))


def follow(ls: Server, job: Rewrite, text: str) -> None:
    """Move the rewrite onto the document's `text`, the user's typing in it (`Rewrite.follow`); typing in a
    streaming rewrite's lines stops it, and the user is told."""
    typed = job.typed
    job.follow(text)
    if job.running and job.typed and not typed:
        job.cancel.set()
        ls.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Warning,
            message="assistant: you edited the text being rewritten, so the rewrite stopped; your typing is kept, "
                    "and the lines the answer changed go back to the original"))


def follow_edits(ls: Server, uri: str) -> None:
    """Keep a finished rewrite's lines, hunks and attribution on the edited text; re-send what changed, and
    remove the other side of a hunk the user typed in."""
    job = ls.rewrites.get(uri)
    if job is None or job.running or uri not in ls.workspace.text_documents:
        return
    spans, shown = len(job.spans), (job.first_line, job.view.text)
    follow(ls, job, ls.workspace.text_documents[uri].source)
    if job.owed:
        task = asyncio.ensure_future(settle(ls, job))  # after any edit of ours in flight (the edit lock)
        SETTLING.add(task)
        task.add_done_callback(SETTLING.discard)
    elif job.reviewing and (job.first_line, job.view.text) != shown:
        publish(ls, job)
    elif len(job.spans) != spans:
        send_attribution(ls, job)


def send_attribution(ls: Server, job: Rewrite) -> None:
    document = ls.workspace.text_documents.get(job.uri)
    ls.protocol.notify(ATTRIBUTION, job.attribution(document.version if document else None))


def publish(ls: Server, job: Rewrite) -> None:
    """Tell the editor what the rewrite's lines show: attribution, hunks, problems (once it finished),
    and that the code lenses changed, to a client that can be told."""
    document = ls.workspace.text_documents.get(job.uri)
    version = document.version if document else None
    ls.protocol.notify(ATTRIBUTION, job.attribution(version))
    ls.protocol.notify(DIFF, job.diff_notice(version))
    if not job.running:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=job.uri, diagnostics=job.diagnostics(), version=version))
    lenses = [(lens.range.start.line, lens.command.command) for lens in job.code_lenses()]
    workspace = ls.client_capabilities.workspace
    if lenses != job.lenses_sent and workspace and workspace.code_lens and workspace.code_lens.refresh_support:
        ls.workspace_code_lens_refresh(None).add_done_callback(lambda answer: answer.exception())
    job.lenses_sent = lenses


def close(ls: Server, uri: str) -> None:
    """The editor closed the document: its rewrite stops, and nothing of it is kept."""
    if (job := ls.rewrites.pop(uri, None)) is not None:
        job.closed = True
        job.cancel.set()


def cancel(uri: str, job: Rewrite | None) -> dict:
    if job is None or not job.running:
        return {"uri": uri, "cancelled": False}
    job.cancel.set()
    return {"uri": uri, "cancelled": True}


async def decide(ls: Server, uri: str, job: Rewrite | None, accept: bool, hunk: int | None = None) -> dict:
    """Accept or reject the hunk `hunk`, or every undecided one, in one edit. Accepting all when none is
    left keeps the rewrite as it is; rejecting every hunk leaves the original lines and ends the rewrite."""
    verb, done = ("accept", "accepted") if accept else ("reject", "rejected")
    if job is None or job.running:
        raise JsonRpcInvalidRequest(f"{uri} has no finished rewrite to {verb}")
    async with ls.editing[uri]:
        follow(ls, job, open_document(ls, uri).source)
        chosen = job.undecided if hunk is None else [hunk]
        if not chosen and not accept:
            raise JsonRpcInvalidRequest(f"{uri} has no rewrite to reject (accepted, decided by typing, or none)")
        if chosen or job.owed:
            try:
                diff = job.resolved().decide(chosen, accept)
            except ValueError as error:
                raise JsonRpcInvalidParams(str(error)) from error
            if not await put(ls, job, diff, None, f"assistant: {verb}"):
                raise JsonRpcInvalidRequest(f"the editor did not apply the edit: {job.refused or 'the document moved on'}")
    if job.diff.rejected and ls.rewrites.get(uri) is job:
        del ls.rewrites[uri]  # every hunk rejected: the original lines are back, nothing is the model's
        job.spans = []
    publish(ls, job)
    answer = {"uri": uri, "id": job.id, done: True, "remaining": len(job.undecided)}
    return answer if hunk is None else answer | {"hunk": hunk}


def status(ls: Server) -> dict:
    """What a client's health check shows: the server's version, and the model once it has loaded (or
    why it did not)."""
    model = ls.engine.loaded()
    failure = ls.engine.exception() if ls.engine.done() else None
    return {"version": ls.version, "loaded": model is not None, "model": model.model if model else None,
            "error": str(failure) if failure else None}


def hover(ls: Server, uri: str, position: types.Position) -> types.Hover | None:
    found = attribution_at(ls, uri, position)
    if found is None:
        return None
    job, span = found
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=job.describe(span)),
                       range=job.range_at(span[0], span[1]))


def highlights(ls: Server, uri: str, position: types.Position) -> list[types.DocumentHighlight] | None:
    """The sources of the output under the cursor, where that source text still exists in the document."""
    found = attribution_at(ls, uri, position)
    if found is None:
        return None
    job, (_, _, c, d) = found
    try:
        start, end = ranges.map_range(c, d, ranges.changes(job.original, job.known))
    except ranges.Conflict:
        return []
    return [types.DocumentHighlight(range=job.range_at(start, end), kind=types.DocumentHighlightKind.Read)]


def attribution_at(ls: Server, uri: str, position: types.Position):
    job = ls.rewrites.get(uri)
    document = ls.workspace.text_documents.get(uri)
    if job is None or document is None:
        return None
    follow(ls, job, document.source)
    try:
        offset = ranges.offset_at(document.source, position, job.encoding)
    except ValueError:
        return None
    spans = job.spans_at(offset)
    return (job, spans[0]) if spans else None
