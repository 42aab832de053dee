"""`assistant lsp`: the language server front door.

Editors ask for a rewrite through code actions and `workspace/executeCommand`; the server streams
the model's output into the buffer with versioned `workspace/applyEdit`s, says where each output
piece was copied from (hover, document highlight and the `assistant/attribution` notification),
and lets the user accept or reject the result. Handlers stay thin; the work lives in plain
functions below them and in `lsp.rewrite` / `lsp.ranges`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from contextlib import closing

from assistant import Assistant, Delta, Queued
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from . import ranges
from .rewrite import Rewrite


EDIT_INTERVAL = 0.25  # seconds between streaming edits: editors redraw and re-highlight on each
ATTRIBUTION = "assistant/attribution"
INSTRUCTIONS = ("fix bugs", "add type hints", "add docstrings", "simplify", "improve clarity", "fix grammar")


class Protocol(LanguageServerProtocol):
    def _handle_cancel_notification(self, msg_id):
        # pygls only cancels the future of a request that has not started; a running rewrite
        # must also stop the model, so `$/cancelRequest` sets that request's cancel event too.
        self._server.cancel_request(msg_id)
        super()._handle_cancel_notification(msg_id)


class AssistantServer(LanguageServer):
    def __init__(self):
        super().__init__("assistant", "0.1.0", protocol_cls=Protocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.engine: concurrent.futures.Future = concurrent.futures.Future()
        self.rewrites: dict[str, Rewrite] = {}  # the latest rewrite of each document
        self.requests: dict[object, threading.Event] = {}  # request id -> cancel event of its rewrite
        self.draft_from_open_buffers = False

    def load(self, args) -> None:
        """Load the model in a background thread so `initialize` answers at once."""
        def loading():
            try:
                self.engine.set_result(Assistant(args.model, strategy=args.strategy, weights=args.weights,
                                                 device=args.device))
            except BaseException as error:  # noqa: BLE001 - any failure must reach the requests waiting on it
                self.engine.set_exception(error)

        threading.Thread(target=loading, name="load-model", daemon=True).start()

    def cancel_request(self, msg_id) -> None:
        if (cancel := self.requests.get(msg_id)) is not None:
            cancel.set()


server = AssistantServer()


# Handlers: one per LSP feature, each delegating to a plain function below.

@server.feature(types.INITIALIZE)
def on_initialize(ls: AssistantServer, params: types.InitializeParams):
    options = params.initialization_options or {}
    ls.draft_from_open_buffers = bool(isinstance(options, dict) and options.get("draftFromOpenBuffers"))


@server.feature(types.INITIALIZED)
async def on_initialized(ls: AssistantServer, params: types.InitializedParams):
    try:
        await asyncio.wrap_future(ls.engine)
    except Exception as error:  # noqa: BLE001 - reported, and every later request gets it as an error
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Error,
                                                       message=f"assistant: the model failed to load: {error}"))


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def on_change(ls: AssistantServer, params: types.DidChangeTextDocumentParams):
    follow_edits(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: AssistantServer, params: types.DidCloseTextDocumentParams):
    if (rewrite := ls.rewrites.pop(params.text_document.uri, None)) is not None:
        rewrite.closed = True
        rewrite.cancel.set()


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite]))
def on_code_action(ls: AssistantServer, params: types.CodeActionParams):
    return code_actions(params.text_document.uri, params.range)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def on_hover(ls: AssistantServer, params: types.HoverParams):
    return hover(ls, params.text_document.uri, params.position)


@server.feature(types.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
def on_highlight(ls: AssistantServer, params: types.DocumentHighlightParams):
    return highlights(ls, params.text_document.uri, params.position)


@server.command("assistant.rewriteSelection")
async def rewrite_selection_command(ls: AssistantServer, *args):
    uri, range_, instruction = arguments(args, 3)
    return await rewrite(ls, uri, instruction, parse_range(range_))


@server.command("assistant.rewriteDocument")
async def rewrite_document_command(ls: AssistantServer, *args):
    uri, instruction = arguments(args, 2)
    return await rewrite(ls, uri, instruction, None)


@server.command("assistant.cancel")
def cancel_command(ls: AssistantServer, *args):
    (uri,) = arguments(args, 1)
    rewrite = ls.rewrites.get(uri)
    if rewrite is None or not rewrite.running:
        return {"uri": uri, "cancelled": False}
    rewrite.cancel.set()
    return {"uri": uri, "cancelled": True}


@server.command("assistant.accept")
def accept_command(ls: AssistantServer, *args):
    (uri,) = arguments(args, 1)
    return accept(ls, uri)


@server.command("assistant.reject")
async def reject_command(ls: AssistantServer, *args):
    (uri,) = arguments(args, 1)
    return await reject(ls, uri)


# The work.

def arguments(args: tuple, count: int) -> tuple:
    """The command's arguments, checked: `count` of them, a string URI first."""
    if len(args) != count or not isinstance(args[0], str):
        raise JsonRpcInvalidParams(f"expected {count} arguments, the document URI first; got {list(args)!r}")
    if count > 1 and not isinstance(args[-1], str):
        raise JsonRpcInvalidParams("the instruction must be a string")
    return args


def parse_range(value) -> types.Range:
    try:
        return types.Range(start=types.Position(line=int(value["start"]["line"]),
                                                character=int(value["start"]["character"])),
                           end=types.Position(line=int(value["end"]["line"]), character=int(value["end"]["character"])))
    except (TypeError, KeyError, ValueError) as error:
        raise JsonRpcInvalidParams(f"not an LSP range: {value!r}") from error


def open_document(ls: AssistantServer, uri: str):
    # get_text_document would read an unopened file from disk; we only edit buffers the editor owns
    document = ls.workspace.text_documents.get(uri)
    if document is None:
        raise JsonRpcInvalidParams(f"{uri} is not open")
    return document


def code_actions(uri: str, range_: types.Range) -> list[types.CodeAction]:
    def action(title: str, command: str, arguments: list) -> types.CodeAction:
        return types.CodeAction(title=title, kind=types.CodeActionKind.RefactorRewrite,
                                command=types.Command(title=title, command=command, arguments=arguments))

    target = {"start": {"line": range_.start.line, "character": range_.start.character},
              "end": {"line": range_.end.line, "character": range_.end.character}}
    # The "…" actions carry no instruction: the client asks the user and adds it as the last argument.
    if range_.start != range_.end:
        actions = [action("Rewrite selection…", "assistant.rewriteSelection", [uri, target])]
        actions += [action(f"Assistant: {name} (selection)", "assistant.rewriteSelection", [uri, target, name])
                    for name in INSTRUCTIONS]
    else:
        actions = []
    actions.append(action("Rewrite document…", "assistant.rewriteDocument", [uri]))
    actions += [action(f"Assistant: {name} (document)", "assistant.rewriteDocument", [uri, name])
                for name in INSTRUCTIONS]
    return actions


async def engine(ls: AssistantServer):
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

    def __init__(self, ls: AssistantServer, title: str, message: str, cancel: threading.Event | None = None):
        self.ls, self.title, self.message, self.cancel = ls, title, message, cancel
        self.token: str | None = None
        self.outcome: str | None = None  # shown when the progress ends

    async def __aenter__(self):
        window = self.ls.client_capabilities.window
        if window is None or not window.work_done_progress:
            return self
        token = str(uuid.uuid4())
        try:
            await self.ls.work_done_progress.create_async(token)
        except Exception:  # noqa: BLE001 - a client that refuses a progress bar still gets its rewrite
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


async def rewrite(ls: AssistantServer, uri: str, instruction: str, target: types.Range | None) -> dict:
    """Run one rewrite, streaming it into the buffer; returns the engine's result plus the URI."""
    if not instruction.strip():
        raise JsonRpcInvalidParams("the instruction is empty")
    document = open_document(ls, uri)
    text = document.source
    try:
        selection = ranges.offsets_of(text, target) if target is not None else None
    except ValueError as error:
        raise JsonRpcInvalidParams(f"the range is outside the document: {error}") from error
    model = await engine(ls)
    document = open_document(ls, uri)  # it may have changed or closed while the model loaded
    if document.source != text:
        raise JsonRpcInvalidRequest(f"{uri} changed while the model loaded; ask again")
    current = ls.rewrites.get(uri)
    if current is not None and current.running:
        raise JsonRpcInvalidRequest(f"{uri} is already being rewritten; cancel that first")
    start, end = selection or (0, len(text))
    job = Rewrite(uri, text, start, end)
    ls.rewrites[uri] = job
    msg_id = ls.protocol.msg_id
    ls.requests[msg_id] = job.cancel
    try:
        references = tuple(d.source for u, d in ls.workspace.text_documents.items()
                           if u != uri and d.source.strip()) if ls.draft_from_open_buffers else ()
        try:
            # rewrite() tokenizes and may time the model once: keep it off the event loop
            events = await asyncio.to_thread(model.rewrite, text, instruction, selection=selection,
                                             cancel=job.cancel, references=references)
        except Exception as error:  # RewriteError, and anything else the engine refuses with
            raise JsonRpcInvalidParams(str(error)) from error
        result = await stream(ls, job, events)
    except BaseException:
        if ls.rewrites.get(uri) is job:
            del ls.rewrites[uri]
        raise
    finally:
        job.running = False
        ls.requests.pop(msg_id, None)
    if job.closed:
        raise JsonRpcInvalidRequest(f"{uri} was closed during the rewrite")
    if job.held:
        send_attribution(ls, job)
    answer = result.to_json()
    answer["text"] = job.shown(result.text)  # what was put in the buffer
    answer["uri"] = uri
    answer["conflict"] = not job.held
    return answer


async def stream(ls: AssistantServer, job: Rewrite, events):
    """Apply the engine's output as it comes, at most one edit per EDIT_INTERVAL, then the final one."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def pump():  # the engine blocks: iterate it on a worker thread, hand events to the loop
        try:
            with closing(events):
                for event in events:
                    loop.call_soon_threadsafe(queue.put_nowait, event)
        except BaseException as error:  # noqa: BLE001 - re-raised on the loop below
            loop.call_soon_threadsafe(queue.put_nowait, error)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    worker = loop.run_in_executor(ls.thread_pool, pump)
    output, token_spans, written, last_edit = "", [], None, 0.0
    new_tokens = steps = 0
    seconds = 0.0
    result = failure = None
    async with progress(ls, "Assistant rewrite", "starting", job.cancel) as bar:
        while (event := await queue.get()) is not None:
            if isinstance(event, BaseException):
                failure = event
            elif isinstance(event, Queued):
                bar.report(f"waiting for the model: {event.ahead} ahead")
            elif isinstance(event, Delta):
                output += event.text
                token_spans += event.tokens
                new_tokens, steps, seconds = new_tokens + event.new_tokens, steps + 1, seconds + event.seconds
                if time.monotonic() - last_edit >= EDIT_INTERVAL and output != written and job.held:
                    bar.report(f"{new_tokens / seconds if seconds else 0:.0f} tokens/s, "
                               f"{new_tokens / steps:.2f} tokens per step")
                    await write(ls, job, output, token_spans)
                    written, last_edit = output, time.monotonic()
            else:
                result = event
                bar.outcome = event.stopped
        await worker
    if failure is not None:
        raise JsonRpcInvalidRequest(f"the rewrite failed: {failure}") from failure
    if job.held and not job.closed:
        await write(ls, job, result.text, result.spans)
    return result


async def write(ls: AssistantServer, job: Rewrite, output: str, token_spans) -> None:
    """Put `output` over the rewrite's target, unless the user edited the target meanwhile."""
    if job.closed:
        return
    document = open_document(ls, job.uri)
    job.follow(document.source)
    if not job.held:
        stop_for_typing(ls, job)
        return
    version, before = document.version, document.source
    output = job.shown(output)
    expected = before[:job.start] + output + before[job.end:]
    edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=job.uri, version=version),
        edits=[types.TextEdit(range=ranges.range_at(before, job.start, job.end), new_text=output)])])
    job.editing = True
    try:
        answer = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="assistant"))
    finally:
        job.editing = False
    if job.closed:
        return
    now = ls.workspace.text_documents[job.uri]
    # Neovim answers applied=true even when it skipped a stale edit, so the version must have moved too;
    # if the edit did not land, `known` stays the text before it and the next follow() sees the truth.
    if answer.applied and now.version is not None and version is not None and now.version > version:
        job.wrote(output, expected, token_spans)
        job.follow(now.source)
        if not job.held:
            stop_for_typing(ls, job)


def stop_for_typing(ls: AssistantServer, job: Rewrite) -> None:
    if not job.cancel.is_set():
        job.cancel.set()
        ls.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Warning,
            message="assistant: you edited the text being rewritten, so the rewrite stopped; your typing is kept"))


def follow_edits(ls: AssistantServer, uri: str) -> None:
    """Keep a finished rewrite's target and attribution on the edited text; re-send what no longer holds."""
    job = ls.rewrites.get(uri)
    if job is None or job.running or uri not in ls.workspace.text_documents:
        return
    before = len(job.spans)
    job.follow(ls.workspace.text_documents[uri].source)
    if len(job.spans) != before:
        send_attribution(ls, job)


def send_attribution(ls: AssistantServer, job: Rewrite) -> None:
    document = ls.workspace.text_documents.get(job.uri)
    ls.protocol.notify(ATTRIBUTION, job.attribution(document.version if document else None))


def accept(ls: AssistantServer, uri: str) -> dict:
    job = ls.rewrites.get(uri)
    if job is None or job.running:
        raise JsonRpcInvalidRequest(f"{uri} has no finished rewrite to accept")
    job.undo = None
    follow_edits(ls, uri)
    send_attribution(ls, job)
    return {"uri": uri, "accepted": True}


async def reject(ls: AssistantServer, uri: str) -> dict:
    """Put the original text back over the rewritten range, exactly."""
    job = ls.rewrites.get(uri)
    if job is None or job.running or job.undo is None:
        raise JsonRpcInvalidRequest(f"{uri} has no rewrite to reject (accepted, edited since, or none)")
    document = open_document(ls, uri)
    job.follow(document.source)
    if job.undo is None:
        raise JsonRpcInvalidRequest("the rewritten text was edited since; use the editor's undo")
    version = document.version  # the document object changes in place when the edit lands
    edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
        edits=[types.TextEdit(range=ranges.range_at(document.source, job.start, job.end), new_text=job.undo)])])
    answer = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="assistant: reject"))
    now = ls.workspace.text_documents.get(uri)
    if not answer.applied or now is None or now.version is None or version is None or now.version <= version:
        raise JsonRpcInvalidRequest(f"the editor did not restore the original text: {answer.failure_reason or 'stale'}")
    del ls.rewrites[uri]
    ls.protocol.notify(ATTRIBUTION, {"uri": uri, "version": now.version, "spans": []})
    return {"uri": uri, "rejected": True}


def hover(ls: AssistantServer, uri: str, position: types.Position) -> types.Hover | None:
    found = attribution_at(ls, uri, position)
    if found is None:
        return None
    job, span = found
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=job.describe(span)),
                       range=ranges.range_at(job.known, span[0], span[1]))


def highlights(ls: AssistantServer, uri: str, position: types.Position) -> list[types.DocumentHighlight] | None:
    """The sources of the output under the cursor, where that source text still exists in the document."""
    found = attribution_at(ls, uri, position)
    if found is None:
        return None
    job, (_, _, c, d) = found
    try:
        start, end = ranges.map_range(c, d, ranges.changes(job.original, job.known))
    except ranges.Conflict:
        return []
    return [types.DocumentHighlight(range=ranges.range_at(job.known, start, end), kind=types.DocumentHighlightKind.Read)]


def attribution_at(ls: AssistantServer, uri: str, position: types.Position):
    job = ls.rewrites.get(uri)
    document = ls.workspace.text_documents.get(uri)
    if job is None or document is None:
        return None
    job.follow(document.source)
    try:
        offset = ranges.offset_at(document.source, position)
    except ValueError:
        return None
    spans = job.spans_at(offset)
    return (job, spans[0]) if spans else None


def register(commands) -> None:
    from assistant.cli import add_model_options

    parser = commands.add_parser("lsp", help="run the language server (stdio, or --tcp HOST:PORT)")
    add_model_options(parser)
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead of stdio")
    parser.set_defaults(run=run)


def run(args) -> int:
    logging.basicConfig(level=logging.WARNING)
    server.load(args)
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()
    return 0
