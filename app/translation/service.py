"""The one translation use case both APIs share: a TranslationRequest in, a TranslationOutcome
out. It owns every step between parsing and formatting: limits -> model and options -> sentence
segmentation -> one batched engine call for all sentences of all texts -> rejoin, scores and
alternatives; and it counts the requests it rejects. The API modules only speak their wire
formats (app/http/routes/translate.py: v1, app/http/routes/libretranslate.py: LibreTranslate)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from app import documents
from app.config import Settings
from app.documents import html_file
from app.engine.types import Result, TranslationOptions
from app.errors import (
    BadRequest,
    ClientGone,
    DeadlineExceeded,
    InvalidInput,
    ServiceError,
    TooLarge,
    UnsupportedLanguage,
    excerpt,
)
from app.text import tags
from app.text.glossary import Glossary, GlossaryFiles, TermMasks
from app.text.langid import Detection, LanguageDetector
from app.text.protect import LINE_BREAK_RE, Masked, join_breaks, mask, unmask
from app.text.segment import Segments, always, fits_engine, segment, translate_fitting
from app.translation.batcher import Batcher, Priority
from app.translation.registry import LoadedModel, Registry
from app.translation.stoppable import Stop, run_stoppable

T = TypeVar("T")

# a UTF-16 surrogate left in a decoded str: a lone or reversed "\ud800" escape in the JSON, which
# no UTF-8 encoder, tokenizer or JSON response can carry
_SURROGATE = re.compile("[\ud800-\udfff]")
# source "auto" takes a language that no model reads (a target language only) only from this
# detector confidence up: on the en-de test splits no English segment reached it and nearly
# every German one did (BENCHMARKS.md), so English text is not left untranslated
AUTO_UNREAD_CONFIDENCE = 90.0
# source "auto" with several texts: each text of at least this many characters is detected on
# its own, a shorter one takes the language of all texts together (a few words say too little;
# LibreTranslate draws the line at the same length), unless the detector is this sure of the
# text's own: then a short text in a list of another language is not left untranslated, and
# short texts in a list of their own language are not misread (docs/glossaries.md)
OWN_DETECTION_CHARS = 40
SHORT_OWN_CONFIDENCE = 99.0
# A text sent with a named source that reads as the target language already comes back as it
# is: translated, German sent as English came back as nonsense. Only a text of this many words
# and characters is judged (a name or a term, "Biedermeier style", reads as either), and only
# from this confidence; on the corpus's English texts so judged none reached it
# (docs/glossaries.md)
TARGET_ALREADY_WORDS = 4
TARGET_ALREADY_CHARS = 20
TARGET_ALREADY_CONFIDENCE = 99.0
# a request's texts longer than this in all are read (masks, sentences, tags) and written back
# in a thread, not on the event loop (TranslationService._run); shorter ones are not worth
# the hop
OFF_LOOP_CHARS = 2000


@dataclass(frozen=True)
class RequestedOptions:
    """Decoding options as a client asked for them; None takes the model's default."""

    beam_size: int | None = None
    length_penalty: float | None = None
    max_length: int | None = None
    max_length_ratio: float | None = None
    alternatives: int = 0
    return_scores: bool = False
    confidence: bool = False  # a confidence per text (TextResult.confidence)
    rerank: bool = True  # by the model's language model, where it has one (app.engine.rerank)
    keep_target_language: bool = True  # a named source's text in the target language already


@dataclass(frozen=True)
class FieldNames:
    """How an API names the request's fields, so that errors name them as the client sent them."""

    text: str = "text"
    options: str = "options."  # prefix of the option fields
    glossary: str = "glossary"


@dataclass(frozen=True)
class TranslationRequest:
    texts: list[str]
    source: str
    target: str
    format: str = "text"
    options: RequestedOptions = RequestedOptions()
    fields: FieldNames = FieldNames()
    glossary: dict[str, str] | None = None  # source term -> target term (check_glossary)


@dataclass(frozen=True)
class TextResult:
    text: str
    score: float | None = None
    alternatives: list[str] = dataclasses.field(default_factory=list)
    # exp of the mean log-probability per output token over the text's sentences (and the
    # product over a pivot's hops); None where no model ran on it
    confidence: float | None = None
    # source "auto" with several texts: the text's own detection and route; a named source's
    # request with a text in the target language already: every text's route, that one's
    # detection
    detected: Detection | None = None
    route: list[LoadedModel] | None = None


IDENTITY = "identity"  # the model name of a request whose source is its target


@dataclass(frozen=True)
class TranslationOutcome:
    results: list[TextResult]  # one per text, in order
    route: list[LoadedModel]  # the model, two through a pivot language, none: source == target
    source: str
    target: str
    sentences: int  # sent to the engine, over every hop
    elapsed_ms: float
    detected: Detection | None = None  # the source language found for source "auto"
    mixed: bool = False  # source "auto": the texts went different routes (TextResult.route)

    @property
    def model_name(self) -> str:
        """The model's name (`a+b` through a pivot); texts of different routes: every route's,
        in the order of the texts, joined by ", "."""
        if self.mixed:
            names = (route_name(r.route or []) for r in self.results)
            return ", ".join(dict.fromkeys(names))
        return route_name(self.route)

    @property
    def pivot(self) -> str | None:
        """The language translated through, when no model serves the pair directly."""
        return route_pivot(self.route) if not self.mixed else None


def route_name(route: list[LoadedModel]) -> str:
    return "+".join(m.name for m in route) or IDENTITY


def route_pivot(route: list[LoadedModel]) -> str | None:
    return route[0].target if len(route) > 1 else None


class TranslationService:
    """Translate requests through the shared batcher, within the server's limits."""

    def __init__(
        self,
        registry: Registry,
        batcher: Batcher,
        settings: Settings,
        on_rejected: Callable[[ServiceError], None] = lambda exc: None,
        detector: LanguageDetector | None = None,
    ) -> None:
        self.registry = registry
        self.batcher = batcher
        self.settings = settings
        self.on_rejected = on_rejected
        self.detector = detector  # None: "auto" is the only source language (Registry)
        self.glossaries = (GlossaryFiles(settings.glossary_dir, settings.max_glossary_term_chars)
                           if settings.glossary_dir is not None else None)

    def glossary(self, source: str, target: str, requested: Glossary | None) -> Glossary:
        """The terms for a pair: the server's glossary for it, the request's entries winning."""
        server = self.glossaries.get(source, target) if self.glossaries else Glossary()
        return server.merged(requested)

    def requested_glossary(self, entries: dict[str, str] | None, field: str = "glossary"
                           ) -> Glossary:
        """A request's own glossary checked against the limits (check_glossary); a refusal is
        counted as one."""
        with self._counting_rejections():
            return check_glossary(entries, self.settings, field)

    def detect(self, text: str, field: str = "q") -> list[Detection]:
        """The served languages ranked for `text`, confidences 0-100."""
        with self._counting_rejections():
            check_limits([text], self.settings, field)
        if self.detector is None:  # one source language, or none the detector knows
            sources = self.registry.sources
            return [Detection(code, round(100 / len(sources), 1)) for code in sources]
        return self.detector.detect(text)

    def detect_source(self, text: str, target: str, field: str = "source") -> Detection:
        """The source language for `source: "auto"`: the detector's first choice when a model
        reads it, or when it is a language that models only write and the detector is sure
        (AUTO_UNREAD_CONFIDENCE; the text then stays as it is if that is the target, as
        LibreTranslate does, and is refused otherwise); else the most likely source language.
        Raises UnsupportedLanguage for the refused case."""
        return self._source_from(self.detector.detect(text), target, field)

    def _source_from(self, ranked: list[Detection], target: str, field: str) -> Detection:
        sources = self.registry.sources
        best = ranked[0]
        if best.language in sources:
            return best
        if best.confidence >= AUTO_UNREAD_CONFIDENCE:
            if best.language == target:
                return best
            raise UnsupportedLanguage(
                f"{field} 'auto': the text looks like {best.language!r} (confidence "
                f"{best.confidence}), which no model translates from; available: {sources}; "
                "name the source language to translate it anyway", field=field)
        return next(d for d in ranked if d.language in sources)

    async def translate(
        self,
        request: TranslationRequest,
        until_gone: Callable[[], Awaitable[None]] | None = None,
    ) -> TranslationOutcome:
        """Raises a ServiceError (counted as rejected) for a request the service refuses; when
        `until_gone()` returns first, the client has gone: its queued work is dropped."""
        started = time.perf_counter()
        with self._counting_rejections():
            check_limits(request.texts, self.settings, request.fields.text)
            requested = check_glossary(request.glossary, self.settings, request.fields.glossary)
            together, detections = self._detections(request)
            sources = ([d.language if d else request.source for d in detections]
                       if detections is not None else [request.source] * len(request.texts))
            # source language -> its texts' indices (no texts: one group, checked all the same)
            groups: dict[str, list[int]] = {} if sources else {
                together.language if together else request.source: []}
            for i, source in enumerate(sources):
                groups.setdefault(source, []).append(i)
            # every group's route and options are checked before any of them runs
            plans = [(indices, *self._plan(request, source, requested))
                     for source, indices in groups.items()]
            work = asyncio.gather(*(
                self._run_route(dataclasses.replace(request, texts=[request.texts[i]
                                                                    for i in indices]),
                                hops, terms)
                for indices, _, hops, terms in plans))
            ran = await (work if until_gone is None else unless_gone(work, until_gone))
        results: list[TextResult] = [TextResult("")] * len(request.texts)
        for (indices, route, _, _), (found, _) in zip(plans, ran, strict=True):
            for i, result in zip(indices, found, strict=True):
                if not request.options.return_scores:
                    result = dataclasses.replace(result, score=None)
                if detections is not None:  # (a named source's own texts: no detection)
                    result = dataclasses.replace(result, detected=detections[i], route=route)
                results[i] = result
        elapsed = round((time.perf_counter() - started) * 1000, 2)
        route = plans[0][1]
        mixed = len(plans) > 1
        if request.source != "auto" or mixed:
            source = request.source  # as named, or "auto" where the texts went different ways
        else:
            source = route[0].source if route else request.target  # "auto" resolved
        return TranslationOutcome(results, route, source, request.target,
                                  sum(count for _, count in ran), elapsed,
                                  None if mixed else together, mixed)

    def _detections(self, request: TranslationRequest
                    ) -> tuple[Detection | None, list[Detection | None] | None]:
        """For source "auto", the language of all texts together and each text's own
        (OWN_DETECTION_CHARS, SHORT_OWN_CONFIDENCE). For a named source, each text that is in
        the target language already (TARGET_ALREADY_*) is detected so, the others None; None
        when no text is, or no detector is needed (one source language)."""
        if self.detector is None:
            return None, None
        if request.source != "auto":
            if not (request.options.keep_target_language
                    and self.registry.route(request.source, request.target)):
                return None, None  # no model runs anyway (checked here, whatever the texts)
            already = [self._in_target(text, request.target) for text in request.texts]
            return None, already if any(already) else None
        texts = request.texts
        field = request.fields.text
        together = self.detect_source("\n".join(texts), request.target, "source")
        if len(texts) == 1:
            return together, [together]
        detections = []
        for i, text in enumerate(texts):
            ranked = self.detector.detect(text)
            own = (len(text) >= OWN_DETECTION_CHARS
                   or ranked[0].confidence >= SHORT_OWN_CONFIDENCE)
            detections.append(self._source_from(ranked, request.target, f"{field}[{i}]")
                              if own else together)
        return together, detections

    def _in_target(self, text: str, target: str) -> Detection | None:
        """The detection of a text that reads as the target language (TARGET_ALREADY_*)."""
        if len(text) < TARGET_ALREADY_CHARS or len(text.split()) < TARGET_ALREADY_WORDS:
            return None
        best = self.detector.detect(text)[0]
        return best if (best.language == target
                        and best.confidence >= TARGET_ALREADY_CONFIDENCE) else None

    def _plan(self, request: TranslationRequest, source: str, requested: Glossary
              ) -> tuple[list[LoadedModel], list[tuple[LoadedModel, TranslationOptions]],
                         Glossary]:
        """The route of models from `source` to the target, each hop's options, the terms."""
        route = self.registry.route(source, request.target)
        # through a pivot, the first hop gives its best translation only (with its scores for
        # a confidence); every hop's options are checked before the first one runs
        plain = dataclasses.replace(request.options, alternatives=0, return_scores=False)
        hops = [
            (model, build_options(request.options if model is route[-1] else plain,
                                  model.default_options, self.settings,
                                  request.fields.options))
            for model in route
        ]
        if not route:  # source == target: no model, but the options are checked all the same
            build_options(request.options, TranslationOptions(), self.settings,
                          request.fields.options)
        terms = self.glossary(route[0].source, request.target, requested) if route else Glossary()
        return route, hops, terms

    @contextlib.contextmanager
    def _counting_rejections(self) -> Iterator[None]:
        try:
            yield
        except ServiceError as exc:
            self.on_rejected(exc)
            raise

    async def read_document(
        self, data: bytes, fmt: str, source: str, target: str,
        take: Callable[[documents.Document], T] = lambda doc: doc,
        reading: Callable[[int, int], None] | None = None,
        document_read: list[documents.Document] | None = None,
    ) -> tuple[T, list[LoadedModel], Detection | None]:
        """What `take` keeps of the document (by default all of it), read and checked against
        the file limits, and the route of models that translates it; raises the ServiceError
        that refuses it. The document is read in a thread that stops when the request is
        cancelled (app.translation.stoppable), and what `take` leaves is freed there too: freeing a
        parsed document of 100,000 elements took the event loop most of a second. `reading`:
        the pages read so far of a format slow to read (app.documents.extract).
        `document_read`: the same document read already from the same data (an upload's
        check), in a box that the thread empties, instead of reading it again."""
        settings = self.settings
        limits = documents.Limits(max_bytes=settings.max_file_bytes,
                                  max_segments=settings.max_file_segments,
                                  max_chars=settings.max_file_chars)
        auto = source == "auto" and self.detector is not None

        def read(stop: Stop) -> tuple[T, str]:
            doc = (document_read.pop() if document_read
                   else documents.extract(data, fmt, limits, source, reading))
            return take(doc), "\n".join(doc.segments)[:20_000] if auto else ""

        with self._counting_rejections():
            kept, sample = await run_stoppable(read, collect=True)
            detected = None
            if auto:
                detected = self.detect_source(sample, target)
                source = detected.language
            return kept, self.registry.route(source, target), detected

    async def translate_document(
        self,
        data: bytes,
        fmt: str,
        source: str,
        target: str,
        progress: Callable[[int, int], None] | None = None,
        priority: Priority = Priority.INTERACTIVE,
        checkpoint: Checkpoint | None = None,
        until_gone: Callable[[], Awaitable[None]] | None = None,
        glossary: dict[str, str] | None = None,
        reading: Callable[[int, int], None] | None = None,
        document_read: list[documents.Document] | None = None,
    ) -> DocumentOutcome:
        """A document (`fmt`: an extension from app.documents.FORMATS) translated with its
        structure kept: read, checked against the limits, segmented and rebuilt in a thread of
        its own (app.translation.stoppable), its sentences through the shared batcher in chunks of
        max_batch_size at `priority`, alongside live requests. A `checkpoint` keeps each
        translated chunk and gives back the ones kept before (a resumed document job), so that
        work is not done twice. Once `until_gone()` returns (the client has left), ClientGone
        is raised at once; when this coroutine is cancelled (the client gone, a deadline, a
        cancelled job), the thread stops whatever it is doing: parsing, waiting for the
        engine, reassembling or writing. `glossary`: the request's terms, over the server's
        for the pair (app.text.glossary), masked in each segment. `reading(done, total)`: the
        pages read, before `progress` starts; `document_read`: the document read already
        (read_document)."""
        requested = self.requested_glossary(glossary)
        work = self._translate_document(data, fmt, source, target, progress, priority,
                                        checkpoint, requested, reading, document_read)
        return await (unless_gone(work, until_gone) if until_gone else work)

    async def _translate_document(
        self, data: bytes, fmt: str, source: str, target: str,
        progress: Callable[[int, int], None] | None, priority: Priority,
        checkpoint: Checkpoint | None, requested: Glossary,
        reading: Callable[[int, int], None] | None,
        document_read: list[documents.Document] | None,
    ) -> DocumentOutcome:
        # the document goes to its thread in a box that the thread empties, so that it is
        # freed there, not on the event loop (read_document)
        box, route, detected = await self.read_document(data, fmt, source, target,
                                                        lambda doc: [doc], reading,
                                                        document_read)
        segments = len(box[0].segments)
        terms = self.glossary(route[0].source, target, requested) if route else Glossary()
        with self._counting_rejections():  # the ServiceErrors, counted
            settings = self.settings
            loop = asyncio.get_running_loop()
            # a live request's chunks keep its timeout; a background job's wait for the engine
            # as long as live work keeps it busy (the job is cancelled or stopped otherwise)
            timeout = settings.request_timeout if priority is Priority.INTERACTIVE else None
            # sentences the first model can't take whole are cut with the document's segments
            # (no model: kept as they are); a later hop's input, the output of the hop before,
            # is cut where that hop's model can't take it whole
            fits = [fits_engine(model.translator) for model in route]

            keys = KeptKeys(route)

            def run(stop: Stop) -> bytes:  # in the document's thread
                doc = box.pop()

                def translate(sentences: list[str]) -> list[str]:
                    if checkpoint is None:
                        return through_route(sentences)
                    # kept by content: a sentence takes only a translation of itself, wherever
                    # the document (read again, perhaps by another version) puts it now
                    named = [keys.of(text) for text in sentences]
                    kept = checkpoint.load(named)
                    todo = {key: text for key, text in zip(named, sentences, strict=True)
                            if key not in kept}
                    if todo:
                        done = dict(zip(todo, through_route(list(todo.values())), strict=True))
                        checkpoint.save(done)
                        kept.update(done)
                    return [kept[key] for key in named]

                def through_route(sentences: list[str]) -> list[str]:
                    # through a pivot: each hop on the previous one's output
                    for hop, model in enumerate(route):
                        stop.check()
                        sentences = translate_fitting(sentences, fits[hop] if hop else None,
                                                      functools.partial(run_hop, model))
                    return sentences

                def run_hop(model: LoadedModel, texts: list[str]) -> list[str]:
                    work = self.batcher.translate(model.translator, texts,
                                                  model.default_options, timeout, priority)
                    # stopping cancels the wait, and with it the chunk's queued sentences
                    waiting = stop.waiting(asyncio.run_coroutine_threadsafe(work, loop))
                    return [r.text for r in waiting.result()]

                # segments with glossary terms also go masked, after the document's own
                masks = [terms.mask(s, doc.markup) for s in doc.segments] if terms else []
                masked = [i for i, m in enumerate(masks) if m.targets]
                out = documents.translate_segments(
                    [*doc.segments, *(masks[i].text for i in masked)], translate, doc.markup,
                    batch_size=settings.max_batch_size, progress=progress,
                    fits=fits[0] if fits else None, wraps=doc.wraps,
                    language=route[0].source if route else None, target=target)
                stop.check()
                out, extra = out[: len(doc.segments)], out[len(doc.segments) :]
                for i, text in zip(masked, extra, strict=True):
                    if not masks[i].found_in(out[i]):
                        out[i] = masks[i].restore(text)
                return documents.rebuild(doc, out, target)

            result = await run_stoppable(run, collect=True)
            return DocumentOutcome(result, route, segments, detected)

    async def _run_route(
        self, request: TranslationRequest, hops: list[tuple[LoadedModel, TranslationOptions]],
        terms: Glossary | None = None,
    ) -> tuple[list[TextResult], int]:
        """Each hop translates the previous hop's best translations; the request timeout
        covers the whole route. Glossary terms are masked before the first hop and their
        targets written after the last (app.text.glossary); a confidence is the product of
        the hops' ones."""
        timeout = self.settings.request_timeout
        deadline = time.monotonic() + timeout
        texts, total = request.texts, 0
        if not hops:  # source == target: the texts as they are
            return [TextResult(text) for text in texts], 0
        # texts with glossary terms also go masked, after the texts (app.text.glossary); in
        # HTML, where people read it: text, and the attribute values that are translated
        markup = request.format == "html"
        masks = [terms.mask(text, markup, html_file.readable(text) if markup else None)
                 for text in texts] if terms else []
        masked = [i for i, m in enumerate(masks) if m.targets]
        texts = [*texts, *(masks[i].text for i in masked)]
        confidences: list[float | None] = [1.0] * len(texts)
        for model, options in hops:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise DeadlineExceeded("no time left for the next hop")
                results, count = await self._run(texts, request.format, model, options,
                                                 remaining)
            except DeadlineExceeded:  # name the request's timeout, not a hop's remainder
                raise DeadlineExceeded(
                    f"the translation took longer than the request timeout of {timeout:g} s",
                    field="request_timeout", limit=timeout,
                ) from None
            texts, total = [r.text for r in results], total + count
            confidences = [None if c is None or r.confidence is None else c * r.confidence
                           for c, r in zip(confidences, results, strict=True)]
        wanted = request.options.confidence
        results = [dataclasses.replace(r, confidence=c if wanted else None)
                   for r, c in zip(results, confidences, strict=True)]
        results, extra = results[: len(request.texts)], results[len(request.texts) :]
        for i, result in zip(masked, extra, strict=True):
            if not masks[i].found_in(results[i].text):
                results[i] = _restored(result, masks[i])
        return results, total

    async def _run(
        self, texts: list[str], fmt: str, model: LoadedModel, options: TranslationOptions,
        timeout: float,
    ) -> tuple[list[TextResult], int]:
        # placeholders, inline tags, URLs and addresses are masked before the model
        # (app.text.protect), on every hop: plain text whole, HTML block by block (_layout)
        protect = self.settings.protect_spans
        engine = model.translator

        def read() -> tuple[list[Layout], list[str], list, list[str]]:
            # sentences are split by the rules of the language this model reads (a pivot's
            # second hop reads the pivot language)
            layouts = [_layout(text, fmt, protect, model.source, model.target)
                       for text in texts]
            units = [u for layout in layouts for u in layout.units]
            fits = fits_engine(engine)
            if fits:  # sentences longer than the encoder takes are cut, not truncated
                for seg, _ in units:
                    seg.refine(fits)
            sentences = [s for seg, _ in units for s in seg.sentences]
            # inline tags: the model translates the plain sentence and what each pair wrapped,
            # then the pairs are carried over; tags that stand alone leave the sentence
            # (app.text.tags). Each unit's tags found once, each sentence given those in it
            marks = [whole.within(sentence) if whole is not None else None for seg, m in units
                     for whole in [tags.tag_marks(m) if m else None]
                     for sentence in seg.sentences]
            plans, inputs = tags.plan(sentences, marks)
            return layouts, sentences, plans, inputs

        def written(translated: list[Result]) -> list[TextResult]:
            results = tags.carried_results(plans, translated)
            out, pos = [], 0
            for layout in layouts:
                n = sum(len(seg.targets) for seg, _ in layout.units)
                out.append(_assemble(layout, results[pos : pos + n], options))
                pos += n
            return out

        # long texts are read and written in a thread: pure Python, they held the event loop
        # (every other client of this process) for as long as they took
        off_loop = sum(map(len, texts)) > OFF_LOOP_CHARS
        layouts, sentences, plans, inputs = (
            await asyncio.to_thread(read) if off_loop else read())
        translated = await self.batcher.translate(engine, inputs, options, max(timeout, 0.0))
        out = await asyncio.to_thread(written, translated) if off_loop else written(translated)
        return out, len(sentences)


class Checkpoint(Protocol):
    """Where a document's translations are kept, each under its key (KeptKeys): what the
    same text became through the same models with the same options."""

    def load(self, keys: list[str]) -> dict[str, str]:
        """Those of `keys` kept, with their translations."""
        ...

    def save(self, translations: dict[str, str]) -> None: ...


class KeptKeys:
    """A kept translation's key: a digest of the text and of everything else that decides its
    translation (each model of the route: its name, languages, precision variant and decoding
    options). Not its place in the document: a document read again, by a newer reader that
    cuts or orders its segments otherwise, would pair a kept translation with another
    sentence."""

    VERSION = b"kept-1"  # changes whenever what goes into a key changes

    def __init__(self, route: list[LoadedModel]) -> None:
        models = [[model.name, model.source, model.target, model.translator.variant,
                   dataclasses.asdict(model.default_options)] for model in route]
        self._route = hashlib.blake2b(self.VERSION + json.dumps(models).encode(),
                                      digest_size=16).digest()

    def of(self, text: str) -> str:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16,
                               key=self._route).hexdigest()


@dataclass(frozen=True)
class DocumentOutcome:
    data: bytes
    route: list[LoadedModel]  # the model, two through a pivot language, none: source == target
    segments: int
    detected: Detection | None = None


async def unless_gone(work: Awaitable[T], until_gone: Callable[[], Awaitable[None]]) -> T:
    """Run `work`; cancel it (dropping its queued sentences) if `until_gone()` returns first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_gone())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise ClientGone("the client closed the connection")
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


def check_limits(texts: list[str], settings: Settings, field: str) -> None:
    """TooLarge naming the field and the limit when a request is too big; InvalidInput for a
    text with a lone surrogate, before anything tokenizes it."""
    if len(texts) > settings.max_texts_per_request:
        raise TooLarge(
            f"{field} has {len(texts)} texts; the limit is {settings.max_texts_per_request}",
            field=field, limit=settings.max_texts_per_request,
        )
    total = 0
    for i, text in enumerate(texts):
        name = f"{field}[{i}]" if len(texts) > 1 else field
        if len(text) > settings.max_chars_per_text:
            raise TooLarge(
                f"{name} has {len(text)} characters; the limit is {settings.max_chars_per_text}",
                field=name, limit=settings.max_chars_per_text,
            )
        total += len(text)
        if bad := _SURROGATE.search(text):
            raise InvalidInput(
                f"{name} has a lone surrogate (U+{ord(bad.group()):04X}) at character "
                f"{bad.start()}; send valid Unicode text",
                field=name,
            )
    if total > settings.max_total_chars:
        raise TooLarge(
            f"{field} has {total} characters in all; the limit is {settings.max_total_chars}",
            field=field, limit=settings.max_total_chars,
        )


def build_options(
    requested: RequestedOptions, defaults: TranslationOptions, settings: Settings,
    prefix: str = "options.",
) -> TranslationOptions:
    """The model's decoding defaults overridden by the request, within the server's limits."""
    changes: dict[str, object] = {"return_scores": requested.return_scores
                                  or requested.confidence,
                                  "rerank": requested.rerank and settings.rerank}
    if requested.beam_size is not None:
        changes["beam_size"] = requested.beam_size
    if requested.length_penalty is not None:
        changes["length_penalty"] = requested.length_penalty
    if requested.max_length_ratio is not None:
        changes["max_len_ratio"] = requested.max_length_ratio
    if requested.max_length is not None:
        changes["max_len_offset"], changes["max_len_ratio"] = requested.max_length, 0.0
    alternatives = requested.alternatives
    if alternatives > settings.max_alternatives:
        raise InvalidInput(
            f"{prefix}alternatives is {alternatives}; the limit is {settings.max_alternatives}",
            field=f"{prefix}alternatives", limit=settings.max_alternatives,
        )
    if alternatives:
        changes["num_alternatives"] = alternatives
        if requested.beam_size is None:
            changes["beam_size"] = max(defaults.beam_size, alternatives + 1)
        elif requested.beam_size <= alternatives:
            raise InvalidInput(
                f"{prefix}beam_size ({requested.beam_size}) must be larger than "
                f"{prefix}alternatives ({alternatives})",
                field=f"{prefix}beam_size", limit=alternatives + 1,
            )
    beam_size = changes.get("beam_size", defaults.beam_size)
    if beam_size > settings.max_beam_size:
        raise InvalidInput(
            f"{prefix}beam_size is {beam_size}; the limit is {settings.max_beam_size}",
            field=f"{prefix}beam_size", limit=settings.max_beam_size,
        )
    return dataclasses.replace(defaults, **changes)


Unit = tuple[Segments, "Masked | None"]  # the sentences of a stretch of text, its masks if any


@dataclass(frozen=True)
class Layout:
    """A text as the service translates it: `parts`, verbatim strings (markup) and units; for
    HTML also the values of the attributes people read, a unit each, written back into their
    tags over `chunks`, the source cut as `parts` is (app.documents.html_file.written)."""

    parts: list[str | Unit]
    chunks: list[str] = dataclasses.field(default_factory=list)
    values: list[tuple[html_file.Value, Unit]] = dataclasses.field(default_factory=list)

    @property
    def units(self) -> list[Unit]:
        """In the order their sentences go to the engine."""
        return [p for p in self.parts if not isinstance(p, str)] + [u for _, u in self.values]


def _layout(text: str, fmt: str, protect: bool, language: str | None = None,
            target: str | None = None) -> Layout:
    """Plain text is masked and segmented whole, or stretch by stretch between line-break tags
    (app.text.protect.LINE_BREAK_RE: a sentence ends there, and the tag stays as it is, unless the
    sentence runs on after it: app.text.protect.join_breaks). HTML is cut into blocks of text
    with their inline tags (app.documents.html_file.blocks: a link or <b> inside a sentence
    stays in it, and app.text.tags carries it over) and markup kept verbatim (block tags, line
    breaks, comments, script, style, pre, translate="no" blocks; inline code and an inline
    element marked translate="no" stay in their block, masked whole); each block is masked on
    its own, so a span the model dropped goes back into its own block. Without protection, HTML
    is cut at every tag as before (app.text.segment.segment_html), nothing masked. The values
    of the attributes people read are translated either way, as documents' are. Sentences are
    split by the rules of `language` (app.text.segment.rules_for), and numbers written as
    `target` writes them (app.text.protect.mask)."""
    if fmt != "html":
        if not protect:
            return Layout([(segment(text, language=language), None)])
        out: list[str | Unit] = []
        pieces = LINE_BREAK_RE.split(text)  # text, <br>, text, ...
        for piece, is_text in join_breaks([(p, i % 2 == 0) for i, p in enumerate(pieces)]):
            if not is_text:
                out.append(piece)
            elif piece:
                m = mask(piece, languages=(language, target))
                out.append((segment(m.text, language=language), m))
        return Layout(out)
    chunks, values = html_file.blocks(text)
    if not protect:
        seg = segment(text, "html", language)
        targets = set(seg.targets)
        chunks = [(part, i in targets) for i, part in enumerate(seg.parts)]
    return Layout([_html_unit(c, protect, language, target) if kind else c
                   for c, kind in chunks],
                  [c for c, _ in chunks],
                  [(v, _html_unit(v.text, protect, language, target)) for v in values])


def _html_unit(text: str, protect: bool, language: str | None,
               target: str | None = None) -> Unit:
    """HTML-escaped text (inline tags in it) split into sentences (by the rules of
    `language`), masked first with protect (numbers written as `target` writes them); a line
    break in it is a space."""
    masked = mask(text, languages=(language, target)) if protect else None
    seg = Segments(html=True, language=language)
    seg.add_text(masked.text if masked else text, always)
    return seg, masked


def _assemble(layout: Layout, results: list[Result], options: TranslationOptions) -> TextResult:
    def rejoin(texts: list[str]) -> str:
        each = iter(texts)

        def joined(unit: Unit) -> str:
            seg, masked = unit
            out = seg.rejoin([next(each) for _ in seg.targets])
            return unmask(masked, out) if masked is not None else out

        parts = [p if isinstance(p, str) else joined(p) for p in layout.parts]
        if layout.values:
            parts = html_file.written(layout.chunks, parts, [v for v, _ in layout.values],
                                      [joined(u) for _, u in layout.values])
        return "".join(parts)

    text = rejoin([r.text for r in results])
    score = confidence = None
    if options.return_scores:
        scores = [r.score for r in results if r.score is not None]
        score = sum(scores) / len(scores) if scores else 0.0
        # each sentence's score is its log-probability per token (EOS included) at length
        # penalty 1: weighted by its tokens, the text's mean log-probability per token
        weights = [len(r.tokens) + 1 for r in results if r.score is not None]
        if weights:
            scored = [r.score for r in results if r.score is not None]
            mean = sum(w * x for w, x in zip(weights, scored, strict=True)) / sum(weights)
            confidence = math.exp(mean)
    alternatives = []
    for k in range(options.num_alternatives):
        # the k-th alternative of each sentence (its best when it has fewer)
        picks = [r.alternatives[k] if k < len(r.alternatives) else r.text for r in results]
        alternatives.append(rejoin(picks))
    return TextResult(text, score, alternatives, confidence)


def _restored(result: TextResult, masks: TermMasks) -> TextResult:
    """The result with the glossary's target terms in place of their masks."""
    return dataclasses.replace(result, text=masks.restore(result.text),
                               alternatives=[masks.restore(a) for a in result.alternatives])


def check_glossary(entries: dict[str, str] | None, settings: Settings, field: str
                   ) -> Glossary:
    """A request's glossary within the limits; BadRequest naming the field and the limit."""
    if not entries:
        return Glossary()
    limit = settings.max_glossary_entries
    if len(entries) > limit:
        raise BadRequest(f"{field} has {len(entries)} entries; the limit is {limit}",
                         field=field, limit=limit)
    chars = settings.max_glossary_term_chars
    for source, target in entries.items():
        name = f"{field}[{excerpt(source, 60)}]"
        if not isinstance(target, str):
            raise BadRequest(f"{name} must be a string (got {excerpt(target, 40)})", field=name)
        for kind, term in (("source", source), ("target", target)):
            if not term.strip():
                raise BadRequest(f"{name}: the {kind} term is empty", field=name)
            if len(term) > chars:
                raise BadRequest(f"{name}: the {kind} term has {len(term)} characters; the "
                                 f"limit is {chars}", field=name, limit=chars)
            if bad := _SURROGATE.search(term):
                raise BadRequest(f"{name}: the {kind} term has a lone surrogate "
                                 f"(U+{ord(bad.group()):04X})", field=name)
    return Glossary.of(entries)
