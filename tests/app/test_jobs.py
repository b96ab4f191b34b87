"""Document jobs (/v1/documents) on real uvicorn servers: documents round-trip through the tiny
real model with their structure intact; a server killed during a job resumes it from its kept
chunks; finished jobs survive restarts and expire; cancel; each API key sees only its jobs."""

from __future__ import annotations

import io
import signal
import sqlite3
import time

import httpx
import pytest

from app import documents
from app.config import Settings
from app.engine.types import TranslationOptions
from app.http.app import create_app
from app.translation.jobs import JobStore
from tests.app.fakes import (
    FakeTranslator,
    fake_model,
    free_port,
    running,
    spawn_server,
    wait_ready,
    wait_until,
)
from tests.app.test_translate_file import CASES, SRT, UPLOAD_LIMIT

FINISHED = ("done", "failed", "cancelled")


def submit(url: str, name: str, data: bytes, headers=None, **fields) -> httpx.Response:
    fields = {"source": "en", "target": "de", **fields}
    return httpx.post(f"{url}/v1/documents", data=fields, files={"file": (name, data)},
                      headers=headers, timeout=60)


def job(url: str, job_id: str, headers=None) -> dict:
    r = httpx.get(f"{url}/v1/documents/{job_id}", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(url: str, job_id: str, states=FINISHED, headers=None, timeout=120.0) -> dict:
    deadline = time.monotonic() + timeout
    while (current := job(url, job_id, headers))["state"] not in states:
        assert time.monotonic() < deadline, f"job stuck in {current}"
        time.sleep(0.02)
    return current


@pytest.mark.parametrize(("name", "build", "shape"), CASES, ids=[c[0] for c in CASES])
def test_documents_round_trip_through_jobs(real_server, name, build, shape):
    url, original = real_server.url, build()
    r = submit(url, name, original)
    assert r.status_code == 202, r.text
    created = r.json()
    assert r.headers["location"] == f"/v1/documents/{created['id']}"
    assert created["state"] in ("queued", "running") and created["filename"] == name
    done = wait_for(url, created["id"])
    assert done["state"] == "done", done
    assert done["progress"]["done"] == done["progress"]["total"] > 0
    assert done["finished"] and done["expires"] and done["result"]
    got = httpx.get(url + done["result"], timeout=10)
    assert got.status_code == 200
    assert f'filename="{name}"' in got.headers["content-disposition"]
    assert shape(got.content) == shape(original)
    assert got.content != original  # translated, not copied


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path_factory.mktemp("files"),
                        max_file_segments=3, max_file_bytes=50_000, jobs_expiry=1.5)
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        yield srv, engine, settings


def test_a_job_translates_each_cue_and_the_result_waits_until_done(fake):
    srv, engine, _ = fake
    engine.release.clear()  # hold the engine: the job stays running
    try:
        job_id = submit(srv.url, "film.srt", SRT.encode()).json()["id"]
        wait_for(srv.url, job_id, states=("running",))
        r = httpx.get(f"{srv.url}/v1/documents/{job_id}/result")
        assert r.status_code == 409 and r.json()["field"] == "state"
        assert "running, not done" in r.json()["error"]
    finally:
        engine.release.set()
    # the first subtitle's two lines are one sentence
    assert wait_for(srv.url, job_id)["progress"] == {"done": 2, "total": 2, "pages_read": 0,
                                                      "pages": 0}
    out = httpx.get(f"{srv.url}/v1/documents/{job_id}/result").text
    assert "it. save and\nfile the Open" in out and "window. the Close" in out


@pytest.mark.parametrize(
    ("name", "data", "fields", "status", "field"),
    [
        ("notes.exe", b"MZ", {}, 415, "file"),
        ("empty.txt", b"", {}, 422, "file"),
        ("long.txt", b"a\n\nb\n\nc\n\nd\n\ne\n", {}, 413, "file"),  # five paragraphs
        ("a.txt", b"Hello", {"target": ""}, 422, "target"),
        ("a.txt", b"Hello", {"target": "fr"}, 400, "target"),
        ("broken.docx", b"PK\x03\x04 not a zip", {}, 422, "file"),
    ],
)
def test_refused_uploads_name_the_field(fake, name, data, fields, status, field):
    r = submit(fake[0].url, name, data, **fields)
    assert r.status_code == status, r.text
    assert r.json()["field"] == field


def test_limits_unknown_jobs_and_not_multipart(fake):
    url = fake[0].url
    r = submit(url, "long.txt", b"a\n\nb\n\nc\n\nd\n")  # four paragraphs
    assert r.json()["limit"] == 3 and "the limit is 3" in r.json()["error"]
    r = submit(url, "big.txt", b"word " * 240_000)  # the body over its cap
    assert r.status_code == 413 and r.json()["limit"] == UPLOAD_LIMIT
    r = httpx.post(f"{url}/v1/documents", json={"source": "en", "target": "de"})
    assert r.status_code == 415 and r.json()["field"] == "Content-Type"
    for path in ("0" * 32, "0" * 32 + "/result", "../../etc/passwd"):
        assert httpx.get(f"{url}/v1/documents/{path}").status_code == 404
    assert httpx.delete(f"{url}/v1/documents/{'0' * 32}").status_code == 404


def _pdf(pages: list[str]) -> bytes:
    """A PDF of one line a page."""
    canvas = pytest.importorskip("reportlab.pdfgen.canvas")
    out = io.BytesIO()
    c = canvas.Canvas(out)
    for line in pages:
        c.drawString(72, 700, line)
        c.showPage()
    c.save()
    return out.getvalue()


def test_a_pdf_job_shows_the_pages_read_before_its_sentences(fake, monkeypatch):
    """Reading a long PDF takes a while: the job counts its pages as they are read; one that
    translates what its upload's check read shows them all read at once."""
    pytest.importorskip("pdfminer")
    reads = []
    extract = documents.extract
    monkeypatch.setattr(documents, "extract", lambda *a, **k: reads.append(1) or extract(*a, **k))
    srv, engine, _ = fake
    entered = engine.entered
    engine.release.clear()  # held at the first sentences, the pages all read
    try:
        job_id = submit(srv.url, "book.pdf", _pdf([f"Page {k} has one line." for k in range(3)])
                        ).json()["id"]
        wait_until(lambda: engine.entered > entered)
        assert job(srv.url, job_id)["progress"] == {"done": 0, "total": 3, "pages_read": 3,
                                                     "pages": 3}
        assert len(reads) == 1
    finally:
        engine.release.set()
    assert wait_for(srv.url, job_id)["progress"] == {"done": 3, "total": 3, "pages_read": 3,
                                                      "pages": 3}


def test_a_jobs_database_of_an_older_version_gets_the_new_columns(tmp_path):
    """A server upgraded over its jobs' database: the job rows made before the page counts
    were kept are served, with no pages read."""
    db = sqlite3.connect(tmp_path / "jobs.db")
    db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, owner TEXT NOT NULL, filename TEXT "
               "NOT NULL, format TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL, "
               "state TEXT NOT NULL, segments INTEGER NOT NULL, done INTEGER NOT NULL DEFAULT "
               "0, total INTEGER NOT NULL DEFAULT 0, error TEXT, created REAL NOT NULL, "
               "started REAL, finished REAL, expires REAL)")
    db.execute("INSERT INTO jobs (id, owner, filename, format, source, target, state, "
               "segments, done, total, created) VALUES ('a', '', 'a.txt', 'txt', 'en', 'de', "
               "'done', 1, 1, 1, 0)")
    db.commit()
    db.close()
    old = JobStore(tmp_path, expiry=60).get("a")
    assert old is not None and (old.done, old.pages_read, old.pages) == (1, 0, 0)


def test_cancel_a_running_job_then_remove_it(fake):
    srv, engine, settings = fake
    engine.release.clear()
    try:
        job_id = submit(srv.url, "film.srt", SRT.encode()).json()["id"]
        wait_for(srv.url, job_id, states=("running",))
        r = httpx.delete(f"{srv.url}/v1/documents/{job_id}")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
    finally:
        engine.release.set()
    time.sleep(0.2)  # the held chunk comes back: the job stays cancelled, with no result
    assert job(srv.url, job_id)["state"] == "cancelled"
    assert httpx.get(f"{srv.url}/v1/documents/{job_id}/result").status_code == 409
    assert httpx.delete(f"{srv.url}/v1/documents/{job_id}").status_code == 204
    assert httpx.get(f"{srv.url}/v1/documents/{job_id}").status_code == 404
    assert not (settings.jobs_path / job_id).exists()


def test_finished_jobs_expire(fake):
    srv, _, settings = fake
    job_id = submit(srv.url, "a.txt", b"Hello world").json()["id"]
    assert wait_for(srv.url, job_id)["state"] == "done"
    assert (settings.jobs_path / job_id / "result").read_text() == "world Hello"
    time.sleep(1.6)  # jobs_expiry=1.5
    assert httpx.get(f"{srv.url}/v1/documents/{job_id}").status_code == 404
    wait_until(lambda: not (settings.jobs_path / job_id).exists(), 5)  # the runner sweeps


def test_each_key_sees_only_its_own_jobs(tmp_path):
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, api_keys=["k1", "k2"])
    one, two = {"X-API-Key": "k1"}, {"Authorization": "Bearer k2"}
    with running(create_app(settings, loader=lambda s: [fake_model()])) as srv:
        assert submit(srv.url, "a.txt", b"Hello").status_code == 401
        assert submit(srv.url, "a.txt", b"Hello", {"X-API-Key": "nope"}).status_code == 401
        job_id = submit(srv.url, "a.txt", b"Hello world", one).json()["id"]
        assert wait_for(srv.url, job_id, headers=one)["state"] == "done"
        base = f"{srv.url}/v1/documents/{job_id}"
        for path in (base, base + "/result"):
            assert httpx.get(path, headers=two).status_code == 404
            assert httpx.get(path).status_code == 401
        assert httpx.delete(base, headers=two).status_code == 404
        assert httpx.get(base + "/result", headers=one).text == "world Hello"


def test_a_stopped_server_resumes_its_job_and_keeps_finished_ones(tmp_path):
    """Graceful stops in the middle of a job: it resumes on the next start and finishes; a
    finished job and its result are still there after another restart."""
    lines = [f"line number {i} here" for i in range(60)]
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, max_batch_size=4,
                        document_batch_size=2, grace_period=5)

    def server(engine):
        return running(create_app(settings, loader=lambda s: [fake_model(engine)]))

    with server(FakeTranslator(delay=0.01)) as srv:
        job_id = submit(srv.url, "lines.txt", "\n".join(lines).encode()).json()["id"]
        wait_until(lambda: job(srv.url, job_id)["progress"]["done"] >= 8)
    stopped = job_id, sqlite3.connect(settings.jobs_path / "jobs.db").execute(
        "SELECT state, done FROM jobs").fetchone()
    assert stopped[1][0] == "queued" and 8 <= stopped[1][1] < 60  # queued again, part done
    engine = FakeTranslator()
    with server(engine) as srv:
        done = wait_for(srv.url, job_id)
        result = httpx.get(url := f"{srv.url}/v1/documents/{job_id}/result").text
    assert done["state"] == "done" and done["progress"]["done"] == done["progress"]["total"] == 60
    assert result.splitlines() == [" ".join(reversed(s.split())) for s in lines]
    translated = sum(len(batch) for batch, _ in engine.batches)
    assert translated <= 60 - stopped[1][1] + 1  # the kept chunks were not done again
    with server(FakeTranslator()) as srv:
        assert job(srv.url, job_id)["state"] == "done"
        assert httpx.get(url.replace(url.split("/v1")[0], srv.url)).text == result


def _stop_part_done(settings: Settings, lines: list[str]) -> tuple[str, int]:
    """A job of `lines` on a server stopped gracefully once 8 of them are translated: its id and
    the sentences it had done (kept)."""
    app = create_app(settings, loader=lambda s: [fake_model(FakeTranslator(delay=0.01))])
    with running(app) as srv:
        job_id = submit(srv.url, "lines.txt", "\n".join(lines).encode()).json()["id"]
        wait_until(lambda: job(srv.url, job_id)["progress"]["done"] >= 8)
    state, done = sqlite3.connect(settings.jobs_path / "jobs.db").execute(
        "SELECT state, done FROM jobs").fetchone()
    assert state == "queued" and 8 <= done < len(lines)
    return job_id, done


def test_a_resumed_job_pairs_kept_translations_only_with_their_own_sentences(tmp_path):
    """An upgrade that reads the same file into segments in another order (a PDF reader that
    orders a page's blocks differently, say) and the job resumes: each sentence gets its own
    translation, the kept ones reused wherever the same sentence comes again."""
    lines = [f"line number {i} here" for i in range(60)]
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, max_batch_size=4,
                        document_batch_size=2, grace_period=5)
    job_id, kept = _stop_part_done(settings, lines)
    # the file as the new reader sees it: the same sentences, each chunk's in another order
    reordered = lines[1::2] + lines[::2]
    (settings.jobs_path / job_id / "source").write_text("\n".join(reordered))
    engine = FakeTranslator()
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        done = wait_for(srv.url, job_id)
        result = httpx.get(f"{srv.url}/v1/documents/{job_id}/result").text
    assert done["state"] == "done" and done["progress"]["done"] == 60
    assert result.splitlines() == [" ".join(reversed(s.split())) for s in reordered]
    assert sum(len(batch) for batch, _ in engine.batches) <= 60 - kept


def test_a_job_resumed_with_other_decoding_options_translates_again(tmp_path):
    """Kept translations are reused only under the options that made them: a model with other
    decoding defaults after a restart translates the whole document again."""
    lines = [f"line number {i} here" for i in range(60)]
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, max_batch_size=4,
                        document_batch_size=2, grace_period=5)
    job_id, _ = _stop_part_done(settings, lines)
    engine = FakeTranslator()
    engine.default_options = TranslationOptions(beam_size=4)
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        assert wait_for(srv.url, job_id)["state"] == "done"
    assert sum(len(batch) for batch, _ in engine.batches) == 60


def test_a_jobs_database_with_chunks_kept_by_position_resumes_its_job(tmp_path):
    """The kept chunks of an older version (by their place in the document) cannot tell
    whether they still belong to the same sentences: they are not used, the job's sentences
    are translated again and the database goes on working."""
    store = JobStore(tmp_path, expiry=60)
    made = store.create("", "lines.txt", "txt", "en", "de", 3, b"one two\n\nthree four\n\nfive")
    store.close()
    db = sqlite3.connect(tmp_path / "jobs.db")
    db.execute("DROP TABLE IF EXISTS kept_translations")
    db.execute("CREATE TABLE IF NOT EXISTS chunks (job TEXT NOT NULL REFERENCES jobs(id) ON "
               "DELETE CASCADE, start INTEGER NOT NULL, count INTEGER NOT NULL, translations "
               "TEXT NOT NULL, PRIMARY KEY (job, start, count))")
    db.execute("INSERT INTO chunks VALUES (?, 0, 3, ?)", (made.id, '["a", "b", "c"]'))
    db.commit()
    db.close()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path / "files", jobs_dir=tmp_path)
    with running(create_app(settings, loader=lambda s: [fake_model()])) as srv:
        assert wait_for(srv.url, made.id)["state"] == "done"
        result = httpx.get(f"{srv.url}/v1/documents/{made.id}/result").text
        again = submit(srv.url, "a.txt", b"Hello world").json()["id"]
        assert wait_for(srv.url, again)["state"] == "done"
    assert result == "two one\n\nfour three\n\nfive"


def test_pages_read_never_go_back_when_a_job_reads_its_pdf_again(tmp_path, monkeypatch):
    """A PDF job queued again (a restart) reads its file from the first page again: a client
    polling it sees the pages read stay where they were until the new reading passes them."""
    pytest.importorskip("pdfminer")
    data = _pdf(["Page zero has one line.", "Page one has one line.", "Page two as well."])
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, max_batch_size=1, grace_period=5)
    slow = FakeTranslator(delay=0.3)
    with running(create_app(settings, loader=lambda s: [fake_model(slow)])) as srv:
        job_id = submit(srv.url, "book.pdf", data).json()["id"]
        wait_until(lambda: job(srv.url, job_id)["progress"]["done"] >= 1)
    seen: list[int] = []
    reading = JobStore.reading

    def recorded(store: JobStore, job_id: str, read: int, pages: int) -> None:
        reading(store, job_id, read, pages)
        seen.append(store.get(job_id).pages_read)

    monkeypatch.setattr(JobStore, "reading", recorded)
    with running(create_app(settings, loader=lambda s: [fake_model()])) as srv:
        done = wait_for(srv.url, job_id)
    assert done["progress"] == {"done": 3, "total": 3, "pages_read": 3, "pages": 3}
    assert seen and set(seen) == {3}


def test_a_job_counted_again_never_shows_more_done_than_its_total(tmp_path):
    """A job resumed by a version that cuts its document into fewer sentences: what it had done
    stays, but never above the new total (a progress bar past its end)."""
    store = JobStore(tmp_path, expiry=60)
    made = store.create("", "a.txt", "txt", "en", "de", 1, b"x")
    store.start(made.id)
    store.progress(made.id, 50, 60)
    store.requeue(made.id)
    store.start(made.id)
    store.progress(made.id, 0, 40)
    assert (store.get(made.id).done, store.get(made.id).total) == (40, 40)


def test_a_job_translates_what_its_upload_read(tmp_path, monkeypatch):
    """An upload is read once to check it (a refusal comes before a job exists); a job that the
    same server process runs at once translates what that read found. Jobs that wait behind
    another read their files when they run (their documents are not held in memory)."""
    reads: list[bytes] = []
    extract = documents.extract

    def counted(data: bytes, *args, **kwargs):
        reads.append(data)
        return extract(data, *args, **kwargs)

    monkeypatch.setattr(documents, "extract", counted)
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path)
    uploads = [b"First one", b"Second one", b"Third one"]
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        engine.release.clear()  # the first job holds the runner; the others wait
        try:
            ids = [submit(srv.url, "a.txt", uploads[0]).json()["id"]]
            wait_until(lambda: engine.entered >= 1)
            ids += [submit(srv.url, "a.txt", data).json()["id"] for data in uploads[1:]]
        finally:
            engine.release.set()
        results = [wait_for(srv.url, job_id)["result"] for job_id in ids]
        texts = [httpx.get(srv.url + result).text for result in results]
    assert texts == ["one First", "one Second", "one Third"]
    assert [reads.count(data) for data in uploads] == [1, 2, 2]


def test_a_killed_server_process_resumes_the_job(tiny_bundle, tiny_sentences, tmp_path):
    """SIGKILL in the middle of a job on a real server process; a new process on the same data
    directory finishes it from its kept chunks, and the result is complete."""
    lines = [f"{tiny_sentences[i % len(tiny_sentences)]} {i}" for i in range(1500)]
    flags = ("--jobs-dir", str(tmp_path), "--max-batch-size", "8", "--max-wait-ms", "0")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, *flags)
    try:
        wait_ready(url, 180)
        # a paragraph each: lowercase lines of this length could read as one wrapped sentence
        r = submit(url, "big.txt", "\n\n".join(lines).encode())
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        wait_until(lambda: job(url, job_id)["progress"]["done"] >= 80, 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    state, kept = sqlite3.connect(tmp_path / "jobs.db").execute(
        "SELECT state, done FROM jobs").fetchone()
    assert state == "running" and 80 <= kept < len(lines), (state, kept)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_server(tiny_bundle, port, *flags)
    try:
        wait_ready(url, 180)
        done = wait_for(url, job_id, timeout=300)
        assert done["state"] == "done", done
        assert done["progress"]["done"] == done["progress"]["total"] == len(lines)
        out = httpx.get(f"{url}/v1/documents/{job_id}/result", timeout=10).text.split("\n\n")
        assert len(out) == len(lines) and all(line.strip() for line in out)
        # the engine translated only what was not kept (+ the warm-up sentence)
        sentences = sum(float(line.split()[-1]) for line in httpx.get(f"{url}/metrics").text
                        .splitlines() if line.startswith("nmt_sentences_total{"))
        assert 0 < sentences <= len(lines) - kept + 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except Exception:
            proc.kill()


def test_a_wrong_method_names_every_method_of_the_path(fake):
    r = httpx.put(f"{fake[0].url}/v1/documents/{'0' * 32}")
    assert r.status_code == 405
    assert set(r.headers["allow"].split(", ")) >= {"GET", "DELETE"}


def test_a_job_outlasts_the_request_timeout_behind_a_held_engine(tmp_path):
    """A document job's chunks wait for the engine as long as it takes: the request timeout
    bounds live requests, not background work (a busy server must not fail long jobs)."""
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, request_timeout=0.2)
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        engine.release.clear()  # every batch waits longer than the request timeout
        try:
            job_id = submit(srv.url, "film.srt", SRT.encode()).json()["id"]
            wait_for(srv.url, job_id, states=("running",))
            time.sleep(0.6)
        finally:
            engine.release.set()
        done = wait_for(srv.url, job_id)
        assert done["state"] == "done", done
        r = httpx.post(f"{srv.url}/v1/translate", json={"text": "open the file", "source": "en",
                                                       "target": "de"}, timeout=10)
        assert r.status_code == 200  # live requests still run under their timeout


def test_a_result_that_cannot_be_kept_fails_the_job_with_a_reason(tmp_path):
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path)
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        engine.release.clear()
        try:
            job_id = submit(srv.url, "film.srt", SRT.encode()).json()["id"]
            wait_for(srv.url, job_id, states=("running",))
            (settings.jobs_path / job_id / "result").mkdir()  # where the file must go
        finally:
            engine.release.set()
        failed = wait_for(srv.url, job_id)
        assert failed["state"] == "failed", failed
        assert "could not keep the result" in failed["error"] and str(tmp_path) not in str(failed)
        again = submit(srv.url, "film.srt", SRT.encode()).json()["id"]
        assert wait_for(srv.url, again)["state"] == "done"


def test_a_job_queued_while_the_runner_looks_for_jobs_runs_at_once(tmp_path, monkeypatch):
    """The runner cleared its wake-up after reading the queue: a job queued while it read an
    empty queue waited for the next sweep (a minute), though its upload had woken it."""
    import threading

    gate, entered, resume = threading.Event(), threading.Event(), threading.Event()
    pending = JobStore.pending

    def looking(self):
        rows = pending(self)
        if not rows and gate.is_set():  # once: the runner's look after the first job
            gate.clear()
            entered.set()
            resume.wait(10)
        return rows

    monkeypatch.setattr(JobStore, "pending", looking)
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path)
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        engine.release.clear()
        try:
            first = submit(srv.url, "a.txt", b"First one").json()["id"]
            wait_until(lambda: engine.entered >= 1)
            gate.set()
        finally:
            engine.release.set()
        wait_for(srv.url, first)
        assert entered.wait(10)  # the runner reads the queue: empty
        second = submit(srv.url, "a.txt", b"Second one").json()["id"]
        resume.set()
        assert wait_for(srv.url, second, timeout=15)["state"] == "done"


def test_a_job_cancelled_as_the_runner_takes_it_ends_quietly(tmp_path, monkeypatch, caplog):
    """A DELETE between the runner's read of the queue and the job's start (a client that
    cancels right after its upload) removed the file the runner then read: "document job ...
    failed" with a traceback in the log, for a job that was only cancelled."""
    import threading

    pending, cancelled, looked_again = JobStore.pending, [], threading.Event()

    def cancelled_meanwhile(self):
        rows = pending(self)
        if rows and not cancelled:  # the runner's read: the job, cancelled right after it
            cancelled.append(rows[0].id)
            self.finish(rows[0].id, "cancelled")  # what DELETE does to a queued job
        elif cancelled:
            looked_again.set()  # the runner is done with it
        return rows

    monkeypatch.setattr(JobStore, "pending", cancelled_meanwhile)
    engine = FakeTranslator()
    with running(create_app(Settings(max_wait_ms=1, files_dir=tmp_path),
                            loader=lambda s: [fake_model(engine)])) as srv:
        job_id = submit(srv.url, "a.txt", b"Open the file.").json()["id"]
        assert looked_again.wait(10) and cancelled == [job_id]
        assert job(srv.url, job_id)["state"] == "cancelled"
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []



def test_a_job_cancelled_while_its_file_is_read_ends_quietly(tmp_path, monkeypatch, caplog):
    """A DELETE while the runner reads the job's upload (in a thread, the job started)
    removes the file under it: the read's FileNotFoundError was logged as the job's failure,
    with a traceback, for a job that was only cancelled."""
    from pathlib import PosixPath

    source_path, stores, cancelled = JobStore.source_path, [], []

    class Removed(PosixPath):  # the upload, removed by a DELETE as the runner reads it
        def read_bytes(self):
            job_id = self.parent.name
            stores[-1].finish(job_id, "cancelled")  # what DELETE does meanwhile
            cancelled.append(job_id)
            raise FileNotFoundError(self)

    def path(self, job_id):
        stores.append(self)
        return Removed(source_path(self, job_id))

    monkeypatch.setattr(JobStore, "source_path", path)
    engine = FakeTranslator()
    with running(create_app(Settings(max_wait_ms=1, files_dir=tmp_path),
                            loader=lambda s: [fake_model(engine)])) as srv:
        job_id = submit(srv.url, "a.txt", b"Open the file.").json()["id"]
        assert wait_for(srv.url, job_id, timeout=15)["state"] == "cancelled"
        assert cancelled == [job_id]
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
