"""Settings from NMT_* variables and `nmt serve` flags; safe defaults; the exposure warning."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import RENAMED, Settings
from app.server import build_parser, settings_from_args, warn_if_exposed


def test_safe_defaults(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("NMT_"):
            monkeypatch.delenv(key)
    s = Settings()
    assert (s.host, s.port, s.api_keys, s.cors_origins) == ("127.0.0.1", 8000, [], [])
    assert s.is_loopback
    assert s.models_dir.name == "bundles"
    assert s.max_body_bytes > 0 and s.queue_size > 0 and s.max_chars_per_text > 0


def test_environment_with_one_prefix(monkeypatch):
    monkeypatch.setenv("NMT_PORT", "9001")
    monkeypatch.setenv("NMT_API_KEYS", "a, b ,c")
    monkeypatch.setenv("NMT_CORS_ORIGINS", "http://x.test")
    monkeypatch.setenv("NMT_JSON_LOGS", "true")
    monkeypatch.setenv("NMT_LOG_LEVEL", "DEBUG")
    s = Settings()
    assert (s.port, s.api_keys, s.cors_origins, s.json_logs, s.log_level) == (
        9001, ["a", "b", "c"], ["http://x.test"], True, "debug")


def test_flags_mirror_settings_and_win_over_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("NMT_PORT", "9001")
    monkeypatch.setenv("NMT_MAX_BATCH_SIZE", "7")
    s = settings_from_args(["--port", "9002", "--models-dir", str(tmp_path), "--api-keys", "k1,k2",
                            "--no-warmup", "--json-logs", "--grace-period", "3"])
    assert (s.port, s.models_dir, s.api_keys, s.warmup, s.json_logs, s.grace_period) == (
        9002, Path(tmp_path), ["k1", "k2"], False, True, 3.0)
    assert s.max_batch_size == 7  # from the environment
    flags = {a.dest for a in build_parser()._actions} - {"help"}
    # generated: every setting has its flag (and a renamed one its first flag too)
    assert flags == set(Settings.model_fields) | set(RENAMED)


def test_flags_take_name_help_type_and_default_from_settings():
    actions = {a.dest: a for a in build_parser()._actions}
    for name, field in Settings.model_fields.items():
        action = actions[name]
        assert action.option_strings[0] == "--" + name.replace("_", "-")
        assert action.help.startswith(field.description) and f"NMT_{name.upper()}" in action.help
    assert actions["max_wait_ms"].type is float and actions["port"].type is int
    assert actions["provider"].choices == ["cpu", "cuda"]
    assert "default 1024" in actions["queue_size"].help
    s = settings_from_args(["--queue-size", "5", "--max-wait-ms", "0.5", "--provider", "cpu",
                            "--cors-origins", "http://a.test,http://b.test"])
    assert (s.queue_size, s.max_wait_ms, s.cors_origins) == (5, 0.5, ["http://a.test",
                                                                       "http://b.test"])
    with pytest.raises(SystemExit):
        settings_from_args(["--provider", "tpu"])


def test_invalid_settings_are_refused():
    with pytest.raises(ValidationError):
        Settings(port=70000)
    with pytest.raises(ValidationError):
        Settings(max_chars_per_text=10, max_total_chars=5)


def test_warning_when_exposed_without_keys(caplog):
    with caplog.at_level(logging.WARNING, logger="app.server"):
        warn_if_exposed(Settings(host="127.0.0.1"))
        warn_if_exposed(Settings(host="0.0.0.0", api_keys=["k"]))
        assert not caplog.records
        warn_if_exposed(Settings(host="0.0.0.0"))
    assert "without API keys" in caplog.text


def test_serve_main_refuses_bad_settings(capsys):
    from app.server import serve_main

    assert serve_main(["--port", "-5"]) == 2
    assert "invalid settings" in capsys.readouterr().err


@pytest.mark.parametrize("processes", ["1", "2"])
def test_serve_main_exits_1_when_no_bundle_loads(tmp_path, restore_logging, processes):
    from app.server import serve_main

    assert serve_main(["--models-dir", str(tmp_path), "--port", "0", "--log-level",
                       "critical", "--processes", processes]) == 1
    # the supervisor leaves this process's environment as it was (servers started later
    # from it must not inherit a removed metrics directory)
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ


def test_json_log_lines():
    import json

    from app.server import JsonFormatter

    record = logging.LogRecord("app.x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["level"], entry["logger"], entry["message"]) == ("info", "app.x", "hello you")


def test_a_renamed_setting_is_still_read_by_its_first_name(monkeypatch):
    """worker_processes was lane_processes: its first keyword, NMT_ variable and flag still
    count, and the new name wins where both are given (flags still win over variables)."""
    for key in ("NMT_WORKER_PROCESSES", "NMT_LANE_PROCESSES"):
        monkeypatch.delenv(key, raising=False)
    assert Settings().worker_processes is True
    assert Settings(lane_processes=False).worker_processes is False
    assert settings_from_args(["--no-lane-processes"]).worker_processes is False
    monkeypatch.setenv("NMT_LANE_PROCESSES", "false")
    assert Settings().worker_processes is False
    assert Settings(worker_processes=True).worker_processes is True
    monkeypatch.setenv("NMT_WORKER_PROCESSES", "true")
    assert Settings().worker_processes is True
    assert settings_from_args(["--no-lane-processes"]).worker_processes is False
    usage = build_parser().format_usage()
    assert "--worker-processes" in usage and "--lane-processes" not in usage  # taken, not shown
