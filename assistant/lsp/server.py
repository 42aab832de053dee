"""`assistant lsp`: the language server front door.

Editors ask for a rewrite through code actions and `workspace/executeCommand`; the server streams
the model's output into the buffer with versioned `workspace/applyEdit`s, says where each output
piece was copied from (hover, document highlight and the `assistant/attribution` notification),
and lets the user accept or reject the result. Handlers stay thin: they check their arguments and
call `lsp.session`, where a rewrite's work lives (its state in `lsp.rewrite`, its geometry in
`lsp.ranges`). This module holds the protocol, the server (TCP, warm-up) and the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections import defaultdict
from collections.abc import Callable

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCNotification, LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from assistant import Engine
from assistant.engine import aio
from assistant.lsp import documents, ranges, session
from assistant.lsp.rewrite import Rewrite

REQUEST_TIMEOUT = 5.0  # seconds the client has to answer a request of ours (`--request-timeout`)
WARM_AFTER = 2.0  # seconds a buffer stays untouched before its prompt is prefilled in the background
INSTRUCTIONS = ("fix bugs", "add type hints", "add docstrings", "simplify", "improve clarity", "fix grammar")


class Protocol(LanguageServerProtocol):
    def structure_message(self, data):
        """A request whose params do not fit its method gets an error answer that names the problem;
        pygls only logs it, and the client would wait for an answer forever."""
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if not isinstance(data, dict) or "id" not in data or "method" not in data:
                raise
            problem = ranges.innermost(error.__cause__)
            self._send_response(data["id"], error=JsonRpcInvalidParams(
                f"invalid params for {data['method']}: {problem}").to_response_error())
            return JsonRPCNotification(method="$/invalidRequest", jsonrpc="2.0", params=None)  # answered; ignored

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls' initialize, then a workspace whose documents count lines as LSP does (`lsp.documents`)."""
        answer = yield from super().lsp_initialize(params)
        self._workspace = documents.Workspace.like(self._workspace)
        return answer

    def _handle_cancel_notification(self, msg_id):
        # pygls only cancels the future of a request that has not started; a running rewrite
        # must also stop the model, so `$/cancelRequest` sets that request's cancel event too.
        self._server.cancel_request(msg_id)
        super()._handle_cancel_notification(msg_id)

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args) -> None:
        """Stop every rewrite and cancel the requests still pending. pygls cancels them while iterating the
        dict that a cancelled request's answer removes it from ("dictionary changed size during iteration")."""
        self._server.cancel_all()
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != self.msg_id and not future.done():
                future.cancel()
        self._shutdown = True

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args) -> None:
        """End at once (`AssistantServer.end`), with the status LSP gives: 1 unless `shutdown` came first. Over
        TCP, end only this client's session."""
        if self._server.tcp:
            self._server.cancel_all()
            self.writer.close()
            return
        self._server.end(0 if self._shutdown else 1)


class AssistantServer(LanguageServer):
    def __init__(self):
        super().__init__("assistant", "0.1.0", protocol_cls=Protocol, converter_factory=ranges.converter,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.engine = aio.Loader()
        self.rewrites: dict[str, Rewrite] = {}  # the latest rewrite of each document
        self.requests: dict[object, threading.Event] = {}  # request id -> cancel event of its rewrite
        self.draft_from_open_buffers = False
        self.virtual_removed = False  # the client shows removed lines without making them text
        self.request_timeout = REQUEST_TIMEOUT
        self.tcp = False
        self.client_connected = False  # over TCP: one client at a time
        self.warming: dict[str, tuple[asyncio.TimerHandle, threading.Event]] = {}  # uri -> pending warm-up
        # uri -> held from reading a document's version until the editor answers the edit naming it: a
        # reject and a newer rewrite's first edit, sent together, named the same version and one was refused
        self.editing: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def load(self, build: Callable[[], Engine]) -> None:
        """Load the model (or reach the engine of --engine) in a background thread so `initialize` answers at once."""
        self.engine.load(build)

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

    def start_io(self) -> None:
        """Serve the client on stdin and stdout until it sends `exit`, closes its end, or a signal (SIGTERM,
        SIGINT) comes: each ends the process at once, with status 0 unless `exit` says otherwise."""
        async def serve():
            self.end_on_signals()
            self.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
            await run_async(stop_event=threading.Event(), reader=StdinAsyncReader(sys.stdin.buffer, self.thread_pool),
                            protocol=self.protocol, error_handler=self.report_server_error)
            self.end(0)  # the client closed its end: nobody is left to answer

        asyncio.run(serve())

    def end(self, status: int) -> None:
        """End the process now, rewrites cancelled. Not through the interpreter's exit: it would wait for
        pygls' worker threads (one blocked reading stdin), and a process that exits while a thread is
        inside torch aborts (SIGABRT). os._exit does neither; the cache's files are written whole or not at all."""
        self.cancel_all()
        with contextlib.suppress(OSError):  # a client gone with its end of stdout
            sys.stdout.flush()
        os._exit(status)

    def end_on_signals(self) -> None:
        """SIGTERM and SIGINT end the server (`end`) with status 0, on whatever transport."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, self.end, 0)

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
            self.end_on_signals()
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


# Handlers: one per LSP feature, each unpacking its parameters for `lsp.session`.

@server.feature(types.INITIALIZE)
def on_initialize(ls: AssistantServer, params: types.InitializeParams):
    options = params.initialization_options if isinstance(params.initialization_options, dict) else {}
    ls.draft_from_open_buffers = bool(options.get("draftFromOpenBuffers"))
    ls.virtual_removed = options.get("removedLines") == "virtual"


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
    session.follow_edits(ls, params.text_document.uri)
    warm_when_idle(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: AssistantServer, params: types.DidCloseTextDocumentParams):
    stop_warming(ls, params.text_document.uri)
    session.close(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite]))
def on_code_action(ls: AssistantServer, params: types.CodeActionParams):
    return code_actions(params.text_document.uri, params.range)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def on_hover(ls: AssistantServer, params: types.HoverParams):
    return session.hover(ls, params.text_document.uri, params.position)


@server.feature(types.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
def on_highlight(ls: AssistantServer, params: types.DocumentHighlightParams):
    return session.highlights(ls, params.text_document.uri, params.position)


@server.command("assistant.rewriteSelection")
async def rewrite_selection_command(ls: AssistantServer, *args):
    uri, range_, instruction = arguments(args, 3)
    return await session.rewrite(ls, uri, instruction, ranges.parse_range(range_))


@server.command("assistant.rewriteDocument")
async def rewrite_document_command(ls: AssistantServer, *args):
    uri, instruction = arguments(args, 2)
    return await session.rewrite(ls, uri, instruction, None)


@server.command("assistant.cancel")
def cancel_command(ls: AssistantServer, *args):
    return session.cancel(*named_rewrite(ls, args))


@server.command("assistant.accept")
@server.command("assistant.acceptAll")
async def accept_command(ls: AssistantServer, *args):
    return await session.decide(ls, *named_rewrite(ls, args), accept=True)


@server.command("assistant.reject")
@server.command("assistant.rejectAll")
async def reject_command(ls: AssistantServer, *args):
    return await session.decide(ls, *named_rewrite(ls, args), accept=False)


@server.command("assistant.acceptHunk")
async def accept_hunk_command(ls: AssistantServer, *args):
    return await session.decide(ls, *named_rewrite(ls, args[:2]), accept=True, hunk=hunk_index(args))


@server.command("assistant.rejectHunk")
async def reject_hunk_command(ls: AssistantServer, *args):
    return await session.decide(ls, *named_rewrite(ls, args[:2]), accept=False, hunk=hunk_index(args))


@server.command("assistant.status")
def status_command(ls: AssistantServer, *args):
    return session.status(ls)


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def on_code_lens(ls: AssistantServer, params: types.CodeLensParams):
    job = ls.rewrites.get(params.text_document.uri)
    return job.code_lenses() if job is not None else []


# Their arguments, the warm-up of idle buffers, and the code actions on offer.

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


def hunk_index(args: tuple) -> int:
    """A hunk command's arguments, `[uri, id, index]`: the index, checked (the rest by `named_rewrite`)."""
    if len(args) != 3 or type(args[2]) is not int or args[2] < 0:
        raise JsonRpcInvalidParams(f"expected the document URI, the rewrite's id and a hunk index; got {list(args)!r}")
    return args[2]


def warm_when_idle(ls: AssistantServer, uri: str) -> None:
    """Once a buffer has been left alone for WARM_AFTER seconds, prefill what any rewrite of it shares
    (`Assistant.warm`), so that its first rewrite starts without the prefill. The engine does it one
    short forward per turn, behind any real request; typing cancels it and starts the wait again."""
    stop_warming(ls, uri)
    if (model := ls.engine.loaded()) is None:
        return
    cancel = threading.Event()

    def start():
        text = ls.workspace.get_text_document(uri).source
        asyncio.get_running_loop().run_in_executor(None, model.warm, text, cancel)

    ls.warming[uri] = (asyncio.get_running_loop().call_later(WARM_AFTER, start), cancel)


def stop_warming(ls: AssistantServer, uri: str) -> None:
    if (pending := ls.warming.pop(uri, None)) is not None:
        pending[0].cancel()
        pending[1].set()


def code_actions(uri: str, range_: types.Range) -> list[types.CodeAction]:
    def action(title: str, command: str, arguments: list) -> types.CodeAction:
        return types.CodeAction(title=title, kind=types.CodeActionKind.RefactorRewrite,
                                command=types.Command(title=title, command=command, arguments=arguments))

    target = ranges.to_json(range_)
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
