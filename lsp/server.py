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
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from contextlib import closing

from assistant import Assistant, Delta, Queued, RewriteError, check_instruction
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.io_ import run_async
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCNotification, LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from . import ranges
from .rewrite import Rewrite


EDIT_INTERVAL = 0.25  # seconds between streaming edits: editors redraw and re-highlight on each
REQUEST_TIMEOUT = 5.0  # seconds the client has to answer a request of ours (`--request-timeout`)
WARM_AFTER = 2.0  # seconds a buffer stays untouched before its prompt is prefilled in the background
FINISHED = ("eos", "stop")  # the answer ended where the model ended it; anything else is unfinished
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
ATTRIBUTION = "assistant/attribution"
INSTRUCTIONS = ("fix bugs", "add type hints", "add docstrings", "simplify", "improve clarity", "fix grammar")


class Protocol(LanguageServerProtocol):
    def __init__(self, server, converter):
        super().__init__(server, converter)
        # cattrs would turn 1.5 into 1 and "3" into 3: positions are whole numbers or an error
        converter.register_structure_hook(types.Position, lambda value, _: parse_position(value))

    def structure_message(self, data):
        """A request whose params do not fit its method gets an error answer that names the problem;
        pygls only logs it, and the client would wait for an answer forever."""
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if not isinstance(data, dict) or "id" not in data or "method" not in data:
                raise
            problem = error.__cause__
            while isinstance(problem, BaseExceptionGroup):
                problem = problem.exceptions[0]
            self._send_response(data["id"], error=JsonRpcInvalidParams(
                f"invalid params for {data['method']}: {problem}").to_response_error())
            return JsonRPCNotification(method="$/invalidRequest", jsonrpc="2.0", params=None)  # answered; ignored

    def _handle_cancel_notification(self, msg_id):
        # pygls only cancels the future of a request that has not started; a running rewrite
        # must also stop the model, so `$/cancelRequest` sets that request's cancel event too.
        self._server.cancel_request(msg_id)
        super()._handle_cancel_notification(msg_id)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args) -> None:
        """End at once, rewrites cancelled: pygls would wait for its worker threads, one of them blocked
        reading stdin for as long as the client keeps it open. Over TCP, end only this client's session."""
        self._server.cancel_all()
        if self._server.tcp:
            self.writer.close()
            return
        sys.stdout.flush()
        os._exit(0 if self._shutdown else 1)


class AssistantServer(LanguageServer):
    def __init__(self):
        super().__init__("assistant", "0.1.0", protocol_cls=Protocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.engine: concurrent.futures.Future = concurrent.futures.Future()
        self.rewrites: dict[str, Rewrite] = {}  # the latest rewrite of each document
        self.requests: dict[object, threading.Event] = {}  # request id -> cancel event of its rewrite
        self.draft_from_open_buffers = False
        self.request_timeout = REQUEST_TIMEOUT
        self.tcp = False
        self.client_connected = False  # over TCP: one client at a time
        self.warming: dict[str, tuple[asyncio.TimerHandle, threading.Event]] = {}  # uri -> pending warm-up

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

    @property
    def encoding(self) -> str:
        """The position encoding negotiated at `initialize`: every range we read or write counts its units."""
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    def cancel_all(self) -> None:
        for job in self.rewrites.values():
            job.cancel.set()

    def start_tcp(self, host: str, port: int) -> None:
        """Serve one TCP client at a time. pygls shares one protocol among all connections (each new one
        would take over the others' replies) and stops the server when any of them leaves, so a second
        client is told why and closed, and a leaving client's rewrites are cancelled."""
        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
            if self.client_connected:
                await refuse_connection(writer)
                return
            self.client_connected = True
            self.protocol.set_writer(writer)
            try:
                await run_async(stop_event=threading.Event(), reader=reader, protocol=self.protocol,
                                error_handler=self.report_server_error)
            finally:
                self.cancel_all()
                self.rewrites.clear()
                self.protocol._shutdown = False  # the next client starts with initialize, as a new session
                writer.close()
                self.client_connected = False

        self.tcp = True

        async def serve():
            async with await asyncio.start_server(connection, host, port) as listening:
                await listening.serve_forever()

        asyncio.run(serve())


async def refuse_connection(writer: asyncio.StreamWriter) -> None:
    message = {"jsonrpc": "2.0", "method": types.WINDOW_SHOW_MESSAGE,
               "params": {"type": types.MessageType.Error.value,
                          "message": "assistant: this server already has a client; it serves one at a time"}}
    body = json.dumps(message).encode()
    writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


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


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def on_open(ls: AssistantServer, params: types.DidOpenTextDocumentParams):
    warm_when_idle(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def on_change(ls: AssistantServer, params: types.DidChangeTextDocumentParams):
    follow_edits(ls, params.text_document.uri)
    warm_when_idle(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: AssistantServer, params: types.DidCloseTextDocumentParams):
    stop_warming(ls, params.text_document.uri)
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
    uri, job = named_rewrite(ls, args)
    if job is None or not job.running:
        return {"uri": uri, "cancelled": False}
    job.cancel.set()
    return {"uri": uri, "cancelled": True}


@server.command("assistant.accept")
def accept_command(ls: AssistantServer, *args):
    return accept(ls, *named_rewrite(ls, args))


@server.command("assistant.reject")
async def reject_command(ls: AssistantServer, *args):
    return await reject(ls, *named_rewrite(ls, args))


# The work.

def arguments(args: tuple, count: int) -> tuple:
    """The command's arguments, checked: `count` of them, a string URI first."""
    if len(args) != count or not isinstance(args[0], str):
        raise JsonRpcInvalidParams(f"expected {count} arguments, the document URI first; got {list(args)!r}")
    if count > 1 and not isinstance(args[-1], str):
        raise JsonRpcInvalidParams("the instruction must be a string")
    return args


def named_rewrite(ls: AssistantServer, args: tuple):
    """The rewrite an accept, reject or cancel names: `[uri]` the document's latest, `[uri, id]` that one only."""
    if not 1 <= len(args) <= 2 or not all(isinstance(a, str) for a in args):
        raise JsonRpcInvalidParams(f"expected the document URI and optionally the rewrite's id; got {list(args)!r}")
    job = ls.rewrites.get(args[0])
    if len(args) == 2 and (job is None or job.id != args[1]):
        raise JsonRpcInvalidRequest(f"rewrite {args[1]} is not the latest rewrite of {args[0]}; "
                                    "a newer rewrite accepted it, or it was rejected")
    return args[0], job


def parse_range(value) -> types.Range:
    """An LSP range from a command argument: whole numbers from 0 to 2**31 - 1, nothing else."""
    try:
        return types.Range(start=parse_position(value["start"]), end=parse_position(value["end"]))
    except (TypeError, KeyError) as error:
        raise JsonRpcInvalidParams(f"not an LSP range (start and end, each with line and character): "
                                   f"{value!r}") from error


def parse_position(value) -> types.Position:
    numbers = [value["line"], value["character"]]
    for name, number in zip(("line", "character"), numbers):
        if type(number) is not int or not 0 <= number < 2**31:
            raise JsonRpcInvalidParams(f"position {name} must be a whole number from 0 to 2**31-1, not {number!r}")
    return types.Position(*numbers)


def warm_when_idle(ls: AssistantServer, uri: str) -> None:
    """Once a buffer has been left alone for WARM_AFTER seconds, prefill what any rewrite of it shares
    (`Assistant.warm`), so that its first rewrite starts without the prefill. The engine does it one
    short forward per turn, behind any real request; typing cancels it and starts the wait again."""
    stop_warming(ls, uri)
    if not ls.engine.done() or ls.engine.exception() is not None:
        return
    cancel = threading.Event()

    def start():
        text = ls.workspace.get_text_document(uri).source
        asyncio.get_running_loop().run_in_executor(None, ls.engine.result().warm, text, cancel)

    ls.warming[uri] = (asyncio.get_running_loop().call_later(WARM_AFTER, start), cancel)


def stop_warming(ls: AssistantServer, uri: str) -> None:
    if (pending := ls.warming.pop(uri, None)) is not None:
        pending[0].cancel()
        pending[1].set()


def check_text(uri: str, text: str) -> None:
    """Refuse a document that is not valid Unicode: a lone surrogate cannot be tokenized, encoded or edited."""
    if found := LONE_SURROGATE.search(text):
        position = ranges.position_at(text, found.start())
        raise JsonRpcInvalidParams(f"{uri} has a lone surrogate (U+{ord(found.group()):04X}) at line "
                                   f"{position.line + 1}, character {position.character + 1}; "
                                   "it is not valid Unicode text")


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


async def answer_within(ls: AssistantServer, request):
    """The client's answer to a request of ours, or TimeoutError once `request_timeout` passes; the
    request is shielded so a late answer still finds its future."""
    return await asyncio.wait_for(asyncio.shield(request), ls.request_timeout)


async def rewrite(ls: AssistantServer, uri: str, instruction: str, target: types.Range | None) -> dict:
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
    current = ls.rewrites.get(uri)
    if current is not None and current.running:
        raise JsonRpcInvalidRequest(f"{uri} is already being rewritten; cancel that first")
    start, end = selection or (0, len(text))
    job = Rewrite(uri, text, start, end, ls.encoding, str(uuid.uuid4()))
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
    if job.held:
        send_attribution(ls, job)
    return answer_of(job, result)


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
    answer.update(uri=job.uri, id=job.id, conflict=not job.held, restored=job.restored)
    return answer


async def stream(ls: AssistantServer, job: Rewrite, events, context: int):
    """Apply the engine's output as it comes, at most one edit per EDIT_INTERVAL, then the final one:
    the answer if it finished, else the original target text, so no unfinished answer stays."""
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
                if time.monotonic() - last_edit >= EDIT_INTERVAL and output != written and job.held:
                    bar.report(f"{event.totals.tokens_per_second:.0f} tokens/s, "
                               f"{event.totals.mean_accepted:.2f} tokens per step")
                    await write(ls, job, output, token_spans)
                    written, last_edit = output, time.monotonic()
            else:
                result = event
                bar.outcome = event.stopped
        await worker
    finished = failure is None and result.stopped in FINISHED and not job.refused
    if finished and job.held and not job.closed:
        await write(ls, job, result.text, result.spans)
        finished = not job.refused
    if not finished and job.held and not job.closed:
        if job.written:
            await write(ls, job, job.target, [])
        job.restored = job.known[job.start:job.end] == job.target
        job.undo = None if job.restored else job.undo  # nothing to reject: the original is back
        report_unfinished(ls, job, failure or job.refused or result, context)
    if failure is not None:
        raise JsonRpcInvalidRequest(f"the rewrite failed: {failure}") from failure
    return result


def report_unfinished(ls: AssistantServer, job: Rewrite, why, context: int) -> None:
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
        edits=[types.TextEdit(range=ranges.range_at(before, job.start, job.end, job.encoding), new_text=output)])])
    job.editing = True
    try:
        answer = await apply_edit(ls, edit, "assistant")
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
    elif not answer.applied and now.version == version:  # refused, not overtaken by typing: stop generating
        job.refused = f"the editor did not apply an edit ({answer.failure_reason or 'no reason given'})"
        job.cancel.set()


async def apply_edit(ls: AssistantServer, edit: types.WorkspaceEdit, label: str) -> types.ApplyWorkspaceEditResult:
    """Send `workspace/applyEdit`; a client that fails it or does not answer in time counts as refusing."""
    try:
        return await answer_within(ls, ls.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(edit=edit, label=label)))
    except TimeoutError:
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason=f"no answer in {ls.request_timeout:g} s")
    except Exception as error:  # noqa: BLE001 - an error answer is a refusal with a reason
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason=str(error))


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


def accept(ls: AssistantServer, uri: str, job: Rewrite | None) -> dict:
    if job is None or job.running:
        raise JsonRpcInvalidRequest(f"{uri} has no finished rewrite to accept")
    job.undo = None
    follow_edits(ls, uri)
    send_attribution(ls, job)
    return {"uri": uri, "id": job.id, "accepted": True}


async def reject(ls: AssistantServer, uri: str, job: Rewrite | None) -> dict:
    """Put the original text back over the rewritten range, exactly; a newer rewrite started meanwhile stays."""
    if job is None or job.running or job.undo is None:
        raise JsonRpcInvalidRequest(f"{uri} has no rewrite to reject (accepted, edited since, or none)")
    document = open_document(ls, uri)
    job.follow(document.source)
    if job.undo is None:
        raise JsonRpcInvalidRequest("the rewritten text was edited since; use the editor's undo")
    version = document.version  # the document object changes in place when the edit lands
    edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
        edits=[types.TextEdit(range=job.range_at(job.start, job.end), new_text=job.undo)])])
    answer = await apply_edit(ls, edit, "assistant: reject")
    now = ls.workspace.text_documents.get(uri)
    if not answer.applied or now is None or now.version is None or version is None or now.version <= version:
        raise JsonRpcInvalidRequest(f"the editor did not restore the original text: {answer.failure_reason or 'stale'}")
    if ls.rewrites.get(uri) is job:
        del ls.rewrites[uri]
        ls.protocol.notify(ATTRIBUTION, {"uri": uri, "version": now.version, "spans": []})
    return {"uri": uri, "id": job.id, "rejected": True}


def hover(ls: AssistantServer, uri: str, position: types.Position) -> types.Hover | None:
    found = attribution_at(ls, uri, position)
    if found is None:
        return None
    job, span = found
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=job.describe(span)),
                       range=job.range_at(span[0], span[1]))


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
    return [types.DocumentHighlight(range=job.range_at(start, end), kind=types.DocumentHighlightKind.Read)]


def attribution_at(ls: AssistantServer, uri: str, position: types.Position):
    job = ls.rewrites.get(uri)
    document = ls.workspace.text_documents.get(uri)
    if job is None or document is None:
        return None
    job.follow(document.source)
    try:
        offset = ranges.offset_at(document.source, position, job.encoding)
    except ValueError:
        return None
    spans = job.spans_at(offset)
    return (job, spans[0]) if spans else None


def register(commands) -> None:
    from assistant.cli import add_model_options

    parser = commands.add_parser("lsp", help="run the language server (stdio, or --tcp HOST:PORT)")
    add_model_options(parser)
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead of stdio")
    parser.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT, metavar="SECONDS",
                        help="how long the editor has to answer an edit or a progress request (default %(default)s)")
    parser.set_defaults(run=run)


def run(args) -> int:
    logging.basicConfig(level=logging.WARNING)
    server.request_timeout = args.request_timeout
    server.load(args)
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()
    return 0
