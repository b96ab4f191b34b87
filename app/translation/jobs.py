"""Document jobs (/v1/documents): a document is uploaded, translated in the background, polled
and downloaded.

A job is a row of an embedded SQLite database (`<jobs_dir>/jobs.db`) and a directory
(`<jobs_dir>/<id>/`) holding the uploaded file and, once done, the translated one. One runner task
translates the queued jobs one at a time, oldest first, through the service's one document use
case (TranslationService.translate_document) at background priority
(app.translation.batcher.Priority), so
live requests keep their latency while a document runs.

Each translated chunk of sentences is written to the database as soon as it is done, each
sentence's translation kept under a digest of the sentence and of the models and options that
translated it (app.translation.service.KeptKeys), never under its place in the document. After
a restart, a crash included, the unfinished jobs are queued again and resume where they
stopped: the document is read again, and a sentence whose translation was kept is not
translated again, wherever it is now (a newer version's reader may cut or order the segments
otherwise). Finished jobs are served as before. A finished job (done, failed or cancelled)
expires `expiry` seconds after it finished: its row and files go.

A job's own glossary (the request's terms, merged over the server's when it runs) is kept in
the same database, written in one transaction with the job's row: whichever server process
runs the job reads it from there. It goes when the job finishes, like the kept translations.

With API keys configured, a job belongs to the key that created it (the key's sha256 is kept,
never the key); asking for another key's job is answered like asking for no job at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from app.documents import Document
from app.documents.filestore import safe_name
from app.errors import Overloaded, ServiceError
from app.translation.batcher import Priority
from app.translation.service import TranslationService

log = logging.getLogger("app.translation.jobs")

T = TypeVar("T")
# how often a running job's row is read for a cancellation from any process: a cancelled job's
# work stops within this and the stop itself
CANCEL_POLL = 0.5
# keys looked up in one statement: within SQLite's oldest limit on a statement's parameters
_KEYS_A_QUERY = 500

STATES = ("queued", "running", "done", "failed", "cancelled")
FINISHED = ("done", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,           -- sha256 of the API key that created it; '' without keys
    filename TEXT NOT NULL,
    format TEXT NOT NULL,
    source TEXT NOT NULL,
    target TEXT NOT NULL,
    state TEXT NOT NULL,
    segments INTEGER NOT NULL,     -- of the document (paragraphs, cues, entries)
    done INTEGER NOT NULL DEFAULT 0,   -- sentences translated
    total INTEGER NOT NULL DEFAULT 0,  -- sentences to translate (known once it has started)
    pages_read INTEGER NOT NULL DEFAULT 0,  -- of a document slow to read (.pdf), before `total`
    pages INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    expires REAL
);
CREATE TABLE IF NOT EXISTS kept_translations (
    job TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,             -- the text's and its route's digest (service.KeptKeys)
    translation TEXT NOT NULL,
    PRIMARY KEY (job, key)
) WITHOUT ROWID;
-- a table of its own, not a column of jobs: every poll reads every pending job's row, and a
-- glossary may be as large as a whole request body; only the runner of the job reads it
CREATE TABLE IF NOT EXISTS glossaries (
    job TEXT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    entries TEXT NOT NULL          -- the request's glossary: a JSON object, source -> target
);
"""


@dataclass(frozen=True)
class Job:
    id: str
    owner: str
    filename: str
    format: str
    source: str
    target: str
    state: str
    segments: int
    done: int
    total: int
    pages_read: int
    pages: int
    error: str | None
    created: float
    started: float | None
    finished: float | None
    expires: float | None

    @property
    def finished_state(self) -> bool:
        return self.state in FINISHED


class JobStore:
    """The jobs' rows and files; safe to call from any thread (one connection, one lock)."""

    def __init__(self, root: Path, expiry: float) -> None:
        self.root = Path(root)
        self.expiry = expiry
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.root / "jobs.db", check_same_thread=False,
                                   isolation_level=None)  # autocommit: each statement durable
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self._add_columns()
        # an older version's chunks, kept by their place in the document: nothing tells whether
        # a place still holds the same sentences, so their jobs translate them again
        self._db.execute("DROP TABLE IF EXISTS chunks")

    def _add_columns(self) -> None:
        """The columns added to `jobs` since its first version, added to a database made
        before them; another server process may add them at the same time."""
        have = {row["name"] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for column in ("pages_read", "pages"):
            if column not in have:
                with contextlib.suppress(sqlite3.OperationalError):  # added by another
                    self._db.execute(
                        f"ALTER TABLE jobs ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, *args: object) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ------------------------------------------------------------ files

    def source_path(self, job_id: str) -> Path:
        return self.root / job_id / "source"

    def result_path(self, job_id: str) -> Path:
        return self.root / job_id / "result"

    # ------------------------------------------------------------ jobs

    def create(self, owner: str, filename: str, fmt: str, source: str, target: str,
               segments: int, data: bytes, glossary: dict[str, str] | None = None,
               job_id: str | None = None) -> Job:
        job_id = job_id or new_job_id()
        folder = self.root / job_id
        folder.mkdir()
        (folder / "source").write_bytes(data)  # before the row: a queued job has its file
        with self._lock:
            # one transaction: another process's runner never sees the job without its glossary
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO jobs (id, owner, filename, format, source, target, state, "
                    "segments, created) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?)",
                    (job_id, owner, safe_name(filename), fmt, source, target, segments,
                     time.time()))
                if glossary:
                    self._db.execute("INSERT INTO glossaries VALUES (?, ?)",
                                     (job_id, json.dumps(glossary, ensure_ascii=False)))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return self.get(job_id)

    def glossary(self, job_id: str) -> dict[str, str] | None:
        """The job's own glossary as the request gave it; None without one."""
        rows = self._run("SELECT entries FROM glossaries WHERE job = ?", job_id)
        return json.loads(rows[0]["entries"]) if rows else None

    def get(self, job_id: str) -> Job | None:
        rows = self._run("SELECT * FROM jobs WHERE id = ?", job_id)
        if not rows:
            return None
        job = Job(**dict(rows[0]))
        if job.expires is not None and job.expires <= time.time():
            self.remove(job.id)
            return None
        return job

    def pending(self) -> list[Job]:
        """Queued and running jobs, oldest first."""
        rows = self._run("SELECT * FROM jobs WHERE state IN ('queued', 'running') "
                         "ORDER BY created")
        return [Job(**dict(row)) for row in rows]

    def requeue(self, job_id: str | None = None) -> int:
        """A running job (or, after a restart, every one that was running) queued again, its
        translations kept; returns how many."""
        sql = "UPDATE jobs SET state = 'queued' WHERE state = 'running'"
        with self._lock:
            if job_id is None:
                return self._db.execute(sql).rowcount
            return self._db.execute(sql + " AND id = ?", (job_id,)).rowcount

    def start(self, job_id: str) -> None:
        self._run("UPDATE jobs SET state = 'running', started = coalesce(started, ?) "
                  "WHERE id = ? AND state = 'queued'", time.time(), job_id)

    def progress(self, job_id: str, done: int, total: int) -> None:
        # never backwards: a resumed job starts counting at 0 before it finds its kept
        # translations; never past the total, which a newer version's reader may make smaller
        self._run("UPDATE jobs SET done = min(max(done, ?), ?), total = ? "
                  "WHERE id = ? AND state = 'running'", done, total, total, job_id)

    def reading(self, job_id: str, read: int, pages: int) -> None:
        # never backwards either: a resumed job reads its document again from the first page,
        # and a client's progress bar stays where it was until this reading passes it
        self._run("UPDATE jobs SET pages_read = min(max(pages_read, ?), ?), pages = ? "
                  "WHERE id = ? AND state = 'running'", read, pages, pages, job_id)

    def finish(self, job_id: str, state: str, error: str | None = None) -> None:
        """Done, failed or cancelled: the clock of its expiry starts; its kept translations, its
        glossary and the uploaded file go."""
        now = time.time()
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET state = ?, error = ?, finished = ?, expires = ? "
                "WHERE id = ? AND state IN ('queued', 'running')",
                (state, error, now, now + self.expiry, job_id))
            self._db.execute("DELETE FROM kept_translations WHERE job = ?", (job_id,))
            self._db.execute("DELETE FROM glossaries WHERE job = ?", (job_id,))
        self.source_path(job_id).unlink(missing_ok=True)

    def remove(self, job_id: str) -> None:
        self._run("DELETE FROM jobs WHERE id = ?", job_id)
        shutil.rmtree(self.root / job_id, ignore_errors=True)

    def sweep(self) -> int:
        """Remove the expired jobs; returns how many."""
        rows = self._run("SELECT id FROM jobs WHERE expires <= ?", time.time())
        for row in rows:
            self.remove(row["id"])
        return len(rows)

    # ------------------------------------------------------------ kept translations

    def kept(self, job_id: str, keys: list[str]) -> dict[str, str]:
        """Those of `keys` the job has kept, with their translations."""
        found: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _KEYS_A_QUERY):
            part = unique[start : start + _KEYS_A_QUERY]
            rows = self._run("SELECT key, translation FROM kept_translations WHERE job = ? AND "
                             f"key IN ({', '.join('?' * len(part))})", job_id, *part)
            found.update((row["key"], row["translation"]) for row in rows)
        return found

    def keep(self, job_id: str, translations: dict[str, str]) -> None:
        """One chunk's translations, all of them or (a crash) none."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO kept_translations VALUES (?, ?, ?)",
                                     [(job_id, key, text) for key, text in translations.items()])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise


def new_job_id() -> str:
    return secrets.token_hex(16)


@dataclass
class _Read:
    """An upload's document as its check read it (`box`, emptied by the thread that translates
    it, so that it is freed there), for its job; `pages`: a PDF's, as read."""

    job_id: str
    box: list[Document]
    pages: int


class _Stopped(Exception):
    """Raised in the worker thread at the next chunk once a job is cancelled or the server
    stops."""


@dataclass(frozen=True)
class _JobCheckpoint:
    """The service's Checkpoint for one job: its kept translations in the store."""

    store: JobStore
    job_id: str

    def load(self, keys: list[str]) -> dict[str, str]:
        return self.store.kept(self.job_id, keys)

    def save(self, translations: dict[str, str]) -> None:
        self.store.keep(self.job_id, translations)


class JobRunner:
    """Runs the queued jobs one at a time on the event loop's side, the document work in a
    worker thread (TranslationService.translate_document)."""

    def __init__(self, store: JobStore, max_pending: int, runs: bool = True,
                 poll: float | None = None) -> None:
        """`runs`: this runner translates jobs (False: it only queues and answers, another
        process's runner translates); `poll`: look at the store this often for jobs queued
        elsewhere (None: only this runner queues)."""
        self.store = store
        self.max_pending = max_pending
        self.runs = runs
        self.poll = poll
        self._service: TranslationService | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None
        # the one document read by an upload's check and held for its job, which runs next
        self._read: _Read | None = None

    def start(self, service: TranslationService) -> None:
        if not self.runs:
            return
        requeued = self.store.requeue()
        if requeued:
            log.info("resuming %d unfinished document job(s)", requeued)
        self._service = service
        self._task = asyncio.create_task(self._loop(), name="nmt-jobs")

    async def stop(self, timeout: float) -> None:
        """The running job stops after its current chunk and stays queued for the next start."""
        self._stopping = True
        self._wake.set()
        if self._task is None:
            return
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        if not self._task.done():
            self._task.cancel()

    async def submit(self, owner: str, filename: str, fmt: str, source: str, target: str,
                     segments: int, data: bytes, glossary: dict[str, str] | None = None,
                     read: list[Document] | None = None, pages: int = 0) -> Job:
        """A new queued job. `read`: the document as the upload's check read it, in a box. When
        this runner runs the job next (no other job waits), the document is taken out of the
        box and the job translates it instead of reading the file again; otherwise it is left
        there for the caller to free (a waiting job's document is not held in memory: it reads
        its file when it runs). `pages`: a PDF's, as that read counted them."""
        job_id = new_job_id()
        if read and self.runs and self._read is None:
            # held before the job's row exists: the runner may start the job as soon as it does
            self._read = _Read(job_id, [read.pop()], pages)
        try:
            job, waits = await asyncio.to_thread(self._create, functools.partial(
                self.store.create, owner, filename, fmt, source, target, segments, data,
                glossary, job_id=job_id))
        except BaseException:
            self._give_back(job_id, read)
            raise
        if waits:
            self._give_back(job_id, read)
        self._wake.set()
        return job

    def _create(self, create: Callable[[], Job]) -> tuple[Job, bool]:
        """The job made by `create`, unless too many wait; and whether others wait before it."""
        pending = len(self.store.pending())
        if pending >= self.max_pending:
            raise Overloaded(f"{pending} document jobs are waiting; the limit is "
                             f"{self.max_pending}; retry later", field="max_pending_jobs",
                             limit=self.max_pending, retry_after=30)
        return create(), pending > 0

    def _give_back(self, job_id: str, box: list[Document] | None) -> None:
        """The document held for `job_id`, if still held, back into the caller's box."""
        read = self._read
        if read is not None and read.job_id == job_id and box is not None:
            box.extend(read.box)
            self._read = None

    def cancel(self, job: Job) -> Job:
        """A queued or running job becomes cancelled (the running one stops at its next
        chunk); returns it as it is now."""
        self.store.finish(job.id, "cancelled")
        return self.store.get(job.id) or dataclasses.replace(job, state="cancelled")

    async def _loop(self) -> None:
        sweep_every = min(60.0, max(self.store.expiry / 2, 0.2), self.poll or 60.0)
        while not self._stopping:
            # cleared before the queue is read: a job queued while it is read wakes the loop
            # again at once, not at the next sweep
            self._wake.clear()
            try:
                await asyncio.to_thread(self.store.sweep)
                pending = await asyncio.to_thread(self.store.pending)
            except (OSError, sqlite3.Error):  # a full disk, say: try again later
                log.exception("the document jobs' store failed")
                pending = []
            if not pending:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), sweep_every)
                continue
            await self._run(pending[0])

    async def _run(self, job: Job) -> None:
        store, service = self.store, self._service
        assert service is not None
        read, self._read = self._read, None
        if read is not None and read.job_id != job.id:  # its job did not come next after all
            await asyncio.to_thread(read.box.clear)  # (cancelled, or another came first)
            read = None

        def running() -> None:
            current = store.get(job.id)
            if self._stopping or current is None or current.state != "running":
                raise _Stopped

        def progress(done: int, total: int) -> None:  # in the worker thread, after each chunk
            running()
            store.progress(job.id, done, total)

        def reading(done: int, total: int) -> None:  # in the worker thread, after each page
            running()
            store.reading(job.id, done, total)

        try:
            store.start(job.id)
            if read is not None and read.pages:  # read by the upload's check
                await asyncio.to_thread(store.reading, job.id, read.pages, read.pages)
            data = await asyncio.to_thread(store.source_path(job.id).read_bytes)
            glossary = await asyncio.to_thread(store.glossary, job.id)
            work = service.translate_document(
                data, job.format, job.source, job.target, progress=progress,
                priority=Priority.BACKGROUND, checkpoint=_JobCheckpoint(store, job.id),
                glossary=glossary, reading=reading, document_read=read.box if read else None)
            outcome = await self._unless_cancelled(job.id, work)
            try:
                await asyncio.to_thread(_write, store.result_path(job.id), outcome.data)
            except OSError as exc:  # a full disk, say: the server's trouble, said so
                log.warning("document job %s: cannot keep its result: %s", job.id, exc)
                store.finish(job.id, "failed", "the server could not keep the result (is its "
                             "disk full?); submit the document again later")
                return
            store.finish(job.id, "done")
            log.info("document job %s done: %d segments", job.id, outcome.segments)
        except Exception as exc:
            if self._stopping:  # the batcher's refusals then are not the job's fault
                store.requeue(job.id)
            elif isinstance(exc, ServiceError):
                store.finish(job.id, "failed", exc.message)
            elif isinstance(exc, _Stopped):  # cancelled, recorded already
                pass
            elif (now := await asyncio.to_thread(store.get, job.id)) is None or (
                    now.state != "running"):  # cancelled meanwhile: its files went under it
                log.info("document job %s cancelled as it ran: %s", job.id, exc)
            else:
                log.exception("document job %s failed", job.id)
                store.finish(job.id, "failed", "internal error")
        finally:
            if read is not None and read.box:  # the job ended before its thread took it
                await asyncio.to_thread(read.box.clear)

    async def _unless_cancelled(self, job_id: str, work: Awaitable[T]) -> T:
        """`work`, cancelled (and its document thread stopped: app.translation.stoppable) within
        CANCEL_POLL seconds of the job's cancellation through any server process; raises
        _Stopped then."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=CANCEL_POLL)
                if done:
                    return task.result()
                current = await asyncio.to_thread(self.store.get, job_id)
                if current is None or current.state != "running":
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                    raise _Stopped
        finally:
            if not task.done():  # the runner itself was cancelled
                task.cancel()


def _write(path: Path, data: bytes) -> None:
    """Whole or absent, never half-written."""
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(data)
    partial.replace(path)
