"""`nmt serve` / `python -m app.server`: flags mirroring Settings, uvicorn, graceful shutdown.

On SIGTERM (or SIGINT) readiness turns 503 at once, uvicorn stops accepting connections, the
requests in flight finish within the grace period, and the process exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.config
import signal
import sys
import time
from types import FrameType
from typing import Any

from pydantic import ValidationError

from app.config import Settings

log = logging.getLogger("app.server")

# flag -> Settings field; each flag's default is "unset" so NMT_* variables still apply
FLAGS: dict[str, dict[str, Any]] = {
    "host": {}, "port": {"type": int}, "models_dir": {"metavar": "DIR"},
    "provider": {"choices": ["cpu", "cuda"]}, "threads": {"type": int},
    "variant": {}, "max_batch_tokens": {"type": int}, "max_batch_size": {"type": int},
    "max_wait_ms": {"type": float}, "queue_size": {"type": int},
    "request_timeout": {"type": float, "metavar": "SECONDS"},
    "max_chars_per_text": {"type": int}, "max_texts_per_request": {"type": int},
    "max_total_chars": {"type": int}, "max_body_bytes": {"type": int},
    "max_beam_size": {"type": int}, "max_alternatives": {"type": int},
    "api_keys": {"metavar": "KEY,KEY"}, "cors_origins": {"metavar": "ORIGIN,ORIGIN"},
    "rate_limit": {"type": float, "metavar": "PER_MINUTE"}, "rate_limit_burst": {"type": int},
    "log_level": {"choices": ["critical", "error", "warning", "info", "debug"]},
    "grace_period": {"type": float, "metavar": "SECONDS"},
}
SWITCHES = {"json_logs": "one JSON object per log line", "warmup": "warm up each bundle"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nmt serve",
        description="Serve the translation API. Every flag also reads NMT_<NAME> from the "
        "environment; flags win.",
    )
    fields = Settings.model_fields
    for name, extra in FLAGS.items():
        flag = "--" + name.replace("_", "-")
        default = fields[name].get_default(call_default_factory=False)
        help_text = f"{fields[name].description or ''} [NMT_{name.upper()}, default {default}]"
        parser.add_argument(flag, dest=name, default=None, help=help_text, **extra)
    for name, text in SWITCHES.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None,
                            action=argparse.BooleanOptionalAction, help=text)
    return parser


def settings_from_args(argv: list[str] | None) -> Settings:
    args = vars(build_parser().parse_args(argv))
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
    import uvicorn

    from app.main import create_app

    try:
        settings = settings_from_args(argv)
    except ValidationError as exc:
        print(f"nmt serve: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    logging.config.dictConfig(log_config(settings))
    warn_if_exposed(settings)
    app = create_app(settings)
    state = app.state.nmt

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not state.draining:
                log.info("signal %s: draining (grace period %gs)", sig, settings.grace_period)
            state.begin_drain()
            super().handle_exit(sig, frame)

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


if __name__ == "__main__":
    sys.exit(serve_main())
