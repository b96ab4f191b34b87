"""bench.soak's pieces that have logic of their own (the hour itself is not run here): the
documents it sends, the document round trips against a scripted server, and the growth trend."""

from __future__ import annotations

import json

import httpx
import pytest

from app.documents import extract, format_of
from bench import soak

SENTENCES = ["The house is small.", "We walk to the station.", "It rains today."]


def test_sample_documents_are_read_back_as_their_sentences():
    documents = soak.sample_documents(SENTENCES, 4)
    assert [name.rsplit(".", 1)[1] for name, _ in documents] == ["txt", "html", "srt", "docx"]
    expected = SENTENCES + SENTENCES[:1]
    for name, content in documents:
        segments = extract(content, format_of(name)).segments
        if name.endswith(".txt"):  # one line each, no blank line between: one paragraph
            assert segments[0].split("\n") == expected
        else:
            assert [s.strip() for s in segments] == expected, name


class ScriptedServer:
    """The document routes as the real server answers them; `job_states` are the states the
    job reports to successive polls."""

    def __init__(self, job_states: list[str], result: bytes = b"translated") -> None:
        self.job_states, self.result = list(job_states), result
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        route = f"{request.method} {request.url.path}"
        self.calls.append(route)
        job = "/v1/documents/" + "a" * 32
        if route == "POST /v1/documents":
            return httpx.Response(202, json={"state": "queued"}, headers={"location": job})
        if route == f"GET {job}":
            state = self.job_states.pop(0)
            return httpx.Response(200, json={"state": state, "result": job + "/result"
                                             if state == "done" else None})
        if route == f"GET {job}/result":
            return httpx.Response(200, content=self.result)
        if route == f"DELETE {job}":
            return httpx.Response(204)
        if route == "POST /translate_file":
            return httpx.Response(200, json={"translatedFileUrl": "http://x/download_file/f"})
        if route == "GET /download_file/f":
            return httpx.Response(200, content=self.result)
        return httpx.Response(404)


def scripted_soak(server: ScriptedServer, monkeypatch) -> soak.Soak:
    monkeypatch.setattr(soak, "JOB_POLL_S", 0.0)
    runner = soak.Soak("http://x", 1.0, 1.0, 1, ("en", "de"))
    runner.local.client = httpx.Client(base_url="http://x", transport=httpx.MockTransport(server))
    return runner


def test_a_job_is_polled_until_done_then_downloaded_and_deleted(monkeypatch):
    server = ScriptedServer(["running", "running", "done"])
    runner = scripted_soak(server, monkeypatch)
    runner.documents_in_flight = 1
    runner.document(0, via_file=False)
    assert runner.outcomes == {("job", "ok"): 1}
    assert runner.documents_in_flight == 0
    job = "/v1/documents/" + "a" * 32
    assert server.calls == ["POST /v1/documents", f"GET {job}", f"GET {job}", f"GET {job}",
                            f"GET {job}/result", f"DELETE {job}"]


@pytest.mark.parametrize(("states", "result", "outcome"), [
    (["failed"], b"x", "job failed"),
    (["done"], b"", "empty result"),
])
def test_a_failed_or_empty_job_counts_as_its_own_error(monkeypatch, states, result, outcome):
    runner = scripted_soak(ScriptedServer(states, result), monkeypatch)
    runner.documents_in_flight = 1
    runner.document(1, via_file=False)
    assert runner.outcomes == {("job", outcome): 1}
    assert "job" not in runner.latencies


def test_a_file_goes_through_translate_file_and_its_download(monkeypatch):
    server = ScriptedServer([])
    runner = scripted_soak(server, monkeypatch)
    runner.documents_in_flight = 1
    runner.document(3, via_file=True)
    assert runner.outcomes == {("file", "ok"): 1}
    assert server.calls == ["POST /translate_file", "GET /download_file/f"]


def test_trend_leaves_the_warmup_out_and_fits_the_growth():
    # 100 MiB in the first 10 minutes (warm-up), then 2 MiB per hour, with a wobble that the
    # least-squares slope averages out and first-to-last does not
    samples = []
    for minute in range(61):
        rss = 500 + min(minute, 10) * 10 + max(0, minute - 10) * 2 / 60
        wobble = 1.0 if minute == 60 else 0.0
        samples.append({"t_s": minute * 60, "rss_mib": rss + wobble, "pss_mib": rss / 2,
                        "open_fds": 14, "tree_fds": 90 + (minute == 30)})
    out = soak.trend(samples, warmup_s=600)
    assert out["steady_samples"] == 51
    assert out["rss_growth_mib_per_hour"] == pytest.approx(2.0, abs=0.3)
    assert out["rss_first_to_last_mib_per_hour"] == pytest.approx((100 / 60 + 1) * 60 / 50,
                                                                  abs=0.01)
    assert out["pss_growth_mib_per_hour"] == pytest.approx(1.0, abs=0.01)
    assert (out["fds_after_warmup"], out["fds_end"], out["fds_max"]) == (14, 14, 14)
    assert (out["tree_fds_after_warmup"], out["tree_fds_end"], out["tree_fds_max"]) == (90, 90, 91)
    json.dumps(out)


def test_trend_needs_two_samples_after_the_warmup():
    samples = [{"t_s": 0, "rss_mib": 1.0}, {"t_s": 700, "rss_mib": 2.0}]
    assert soak.trend(samples, warmup_s=600)["rss_growth_mib_per_hour"] is None
