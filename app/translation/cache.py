"""A cache of sentence translations, per model: the same sentence with the same decoding options
is decoded once and answered from memory after that.

Services that translate user interfaces, web pages and documents send the same sentences again
and again (a menu's labels, a page's header and footer, a retried request, "Yes" in every row of
a table). The batcher (app.translation.batcher) looks each sentence up before it queues it, and
queues a sentence that comes twice in one request once. Each model has its own least recently
used cache of at most `size` sentences, held weakly by the engine, so a model that is unloaded
takes its cache with it. Keys are the sentence as the engine gets it (masks and inline tags
already taken out, so glossaries and markup need no part in them) and the decoding options.

A beam search's int8 output can still differ now and then with the batch a sentence shares
(docs/export.md, the calibrated scales); a cached answer is one of those, the same every time.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

from app.engine.types import Result, TranslationOptions

Key = tuple[TranslationOptions, str]


class ResultCache:
    """Per engine, the last `size` sentences' Results (0: nothing is kept). Used from the
    event loop only (Batcher.translate), so it needs no lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._engines: weakref.WeakKeyDictionary[Any, OrderedDict[Key, Result]] = (
            weakref.WeakKeyDictionary())

    def get(self, engine: Any, options: TranslationOptions, text: str) -> Result | None:
        entries = self._engines.get(engine)
        found = entries.get((options, text)) if entries is not None else None
        if found is not None:
            entries.move_to_end((options, text))
        return found

    def put(self, engine: Any, options: TranslationOptions, text: str, result: Result) -> None:
        entries = self._engines.setdefault(engine, OrderedDict())
        entries[options, text] = result
        entries.move_to_end((options, text))
        while len(entries) > self.size:
            entries.popitem(last=False)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._engines.values())
