"""`nmt serve` / `python -m app.server`: flags generated from Settings, uvicorn, graceful shutdown.

On SIGTERM (or SIGINT) readiness turns 503 at once, uvicorn stops accepting connections, the
requests in flight finish within the grace period, and the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import logging.config
import signal
import socket
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import ValidationError

from app.config import RENAMED, Settings

if TYPE_CHECKING:
    from app.serving.peers import Peers

log = logging.getLogger("app.server")

def _argument(annotation: Any) -> dict[str, Any]:
    """argparse keywords for a Settings field of this type (every flag is optional: unset
    flags leave the NMT_* variables and the defaults in charge)."""
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if get_origin(annotation) is Literal:
        return {"choices": list(get_args(annotation))}
    if annotation in (int, float):
        return {"type": annotation}
    if get_origin(annotation) is list:
        return {"metavar": "A,B"}
    return {}  # str, Path, str | None: the string as given


SERVE = "Serve the translation API."


def build_parser(prog: str = "nmt serve", does: str = SERVE) -> argparse.ArgumentParser:
    """One flag per Settings field: name, type, help and default all come from Settings."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"{does} Every flag also reads NMT_<NAME> from the environment; flags win.",
    )
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=False)
        shown = "computed" if field.default_factory is not None else default
        parser.add_argument(
            "--" + name.replace("_", "-"), dest=name, default=None,
            help=f"{field.description or ''} [NMT_{name.upper()}, default {shown}]",
            **_argument(field.annotation),
        )
    for first, name in RENAMED.items():  # a renamed setting's first flag, still taken
        parser.add_argument("--" + first.replace("_", "-"), dest=first, default=None,
                            help=argparse.SUPPRESS,
                            **_argument(Settings.model_fields[name].annotation))
    return parser


def settings_from_args(argv: list[str] | None, prog: str = "nmt serve",
                       does: str = SERVE) -> Settings:
    args = vars(build_parser(prog, does).parse_args(argv))
    return Settings(**{key: value for key, value in args.items() if value is not None})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def log_config(settings: Settings) -> dict[str, Any]:
    formatter = (
        {"()": JsonFormatter} if settings.json_logs
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    level = settings.log_level.upper()
    handler = {"class": "logging.StreamHandler", "formatter": "default",
               "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": level},
        "loggers": {
            "uvicorn": {"level": level},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"level": level},
        },
    }


def warn_if_exposed(settings: Settings) -> None:
    if not settings.is_loopback and not settings.api_keys:
        log.warning(
            "binding to %s without API keys: anyone who can reach this address can use the "
            "service; set NMT_API_KEYS or bind to 127.0.0.1", settings.host,
        )


def serve_main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; 0 after a graceful stop, 2 on bad settings,
    1 when the models cannot be loaded."""
    from app.engine import heap

    heap.map_large_blocks()  # before the models and batches allocate (app.engine.heap)
    try:
        settings = settings_from_args(argv)
    except ValidationError as exc:
        print(f"nmt serve: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    logging.config.dictConfig(log_config(settings))
    warn_if_exposed(settings)
    from app.engine.kernels import runtime as kernels

    found = kernels.report(settings.provider)  # once, before the server processes start
    log.log(logging.WARNING if found.missing else logging.INFO, "%s", found.line())
    from app.serving.supervisor import process_count, supervise

    count = process_count(settings)
    if count > 1:
        return supervise(settings, count, run_server, prepare=lambda: _before_fork(settings))
    return run_server(settings)


def _before_fork(settings: Settings) -> None:
    """What every server process would load for itself, loaded once by the supervisor: the web
    stack, ONNX Runtime, and the language identification tables the native scores read for the
    bundles' languages (app.http.app builds its detector over the same)."""
    import uvicorn  # noqa: F401

    import app.http.app  # noqa: F401
    from app.engine.kernels.runtime import langid_library
    from app.text.langid import native_tables
    from app.translation.registry import bundle_languages

    languages = bundle_languages(settings.models_dir)
    if langid_library() is not None and len(languages) > 1:
        native_tables(tuple(languages))


def run_server(settings: Settings, peers: Peers | None = None,
               channel: socket.socket | None = None) -> int:
    """One server process: its own listening socket, or (`channel`, under app.serving.supervisor)
    the
    connections its supervisor hands over."""
    import uvicorn

    from app.http.app import create_app

    if peers is not None:
        logging.config.dictConfig(log_config(settings))
    app = create_app(settings, peers=peers)
    state = app.state.nmt

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not state.draining:
                log.info("signal %s: draining (grace period %gs)", sig, settings.grace_period)
            state.begin_drain()
            super().handle_exit(sig, frame)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            if channel is None:
                await super().startup(sockets)
                return
            await super().startup(sockets=[])  # no listener of its own
            if self.started:
                assert peers is not None
                _receive_connections(self, channel, peers)

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=log_config(settings),
        timeout_graceful_shutdown=settings.grace_period,
        access_log=settings.log_level == "debug",
        server_header=False,
    )
    server = Server(config)

    def fatal() -> None:
        server.should_exit = True

    state.on_fatal = fatal
    # What loading left alive lives as long as the process: frozen, the collector's full passes
    # (one after every document, app.translation.stoppable) skip it. Models are never replaced
    # in a running process, and what is reloaded (a server glossary) is freed by reference
    # counts, so nothing frozen becomes garbage that only the collector could free.
    state.on_loaded = gc.freeze
    # uvicorn re-raises the signal it caught once it has stopped; a no-op handler turns that
    # into a normal return, so a graceful stop exits 0
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM,
                                                                     signal.SIGINT)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if state.load_error or not server.started:
        return 1
    return 0


def _receive_connections(server: Any, channel: socket.socket, peers: Peers) -> None:
    """Serve each connection the supervisor sends over `channel` (one descriptor a message);
    count the closed ones in `peers.closed` (the supervisor balances on them). The supervisor
    gone (end of file), the server stops."""
    from app.serving.supervisor import HEARTBEAT

    loop = asyncio.get_running_loop()
    config = server.config

    class Counted(config.http_protocol_class):  # type: ignore[name-defined, misc]
        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            peers.closed[peers.index] += 1

    def protocol() -> asyncio.Protocol:
        return Counted(config=config, server_state=server.server_state,
                       app_state=server.lifespan.state)

    def receive() -> None:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(channel, 1, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message, fds = b"", []
            if not message and not fds:  # the supervisor is gone
                loop.remove_reader(channel.fileno())
                server.should_exit = True
                return
            for fd in fds:
                conn = socket.socket(fileno=fd)
                if server.should_exit:
                    conn.close()
                    peers.closed[peers.index] += 1
                    continue
                conn.setblocking(False)
                loop.create_task(loop.connect_accepted_socket(protocol, conn))

    def beat() -> None:  # the supervisor hands new connections only to loops that beat
        peers.beat()
        if not server.should_exit:
            loop.call_later(HEARTBEAT, beat)

    channel.setblocking(False)
    loop.add_reader(channel.fileno(), receive)
    beat()


if __name__ == "__main__":
    sys.exit(serve_main())
