"""The loaded models: one translator per language pair found in the models directory."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from app.engine.bundle import MANIFEST, BundleError, find_bundles, read_manifest
from app.engine.types import Engine, TranslationOptions
from app.errors import UnsupportedLanguage, excerpt

log = logging.getLogger("app.translation.registry")


@dataclass
class LoadedModel:
    """An engine with where it came from; everything else it shows comes from the engine."""

    translator: Engine
    path: Path

    @property
    def name(self) -> str:
        return self.translator.name

    @property
    def source(self) -> str:
        return self.translator.source_lang

    @property
    def target(self) -> str:
        return self.translator.target_lang

    @property
    def default_options(self) -> TranslationOptions:
        return self.translator.default_options

    @property
    def variants(self) -> list[str]:
        return sorted(self.translator.manifest.get("variants") or [])

    @property
    def scores(self) -> dict[str, Any]:
        return dict(self.translator.manifest.get("scores") or {})


class Registry:
    """Models by language pair."""

    def __init__(self, models: list[LoadedModel]) -> None:
        self.models: dict[tuple[str, str], LoadedModel] = {}
        for model in models:
            pair = (model.source, model.target)
            if pair in self.models:
                log.warning("%s: a second bundle for %s-%s; keeping %s", model.path, *pair,
                            self.models[pair].path)
                continue
            self.models[pair] = model

    def __iter__(self):
        return iter(self.models.values())

    def __len__(self) -> int:
        return len(self.models)

    @property
    def workers(self) -> int:
        """The most decode workers of any engine."""
        return max((m.translator.workers for m in self), default=1)

    @property
    def sources(self) -> list[str]:
        return sorted({source for source, _ in self.models})

    @property
    def languages(self) -> list[str]:
        """Every language a model reads or writes."""
        return sorted({language for pair in self.models for language in pair})

    def direct_targets(self, source: str) -> list[str]:
        return sorted(t for s, t in self.models if s == source)

    def targets(self, source: str) -> list[str]:
        """Every target reachable from source: directly, or through one pivot language."""
        direct = set(self.direct_targets(source))
        pivoted = {t for mid in direct for t in self.direct_targets(mid)}
        return sorted((direct | pivoted) - {source})

    def pivots(self) -> list[tuple[str, str, str]]:
        """(source, target, pivot language) of every pair served only through a pivot."""
        return [
            (s, t, self.route(s, t)[0].target)
            for s in self.sources
            for t in self.targets(s)
            if (s, t) not in self.models
        ]

    def resolve_source(self, source: str, field_name: str = "source") -> str:
        """'auto' maps to the only source language; anything else must be served."""
        if source == "auto":
            if len(self.sources) == 1:
                return self.sources[0]
            raise UnsupportedLanguage(
                f"{field_name} 'auto' needs exactly one source language, but this server has "
                f"{self.sources}; name the source language",
                field=field_name,
            )
        if source not in self.sources:
            raise UnsupportedLanguage(
                f"{field_name} {excerpt(source, 40)} is not supported; available: {self.sources}",
                field=field_name,
            )
        return source

    def route(
        self, source: str, target: str, fields: tuple[str, str] = ("source", "target")
    ) -> list[LoadedModel]:
        """The models that translate source to target: the direct one, else two through a pivot
        language (the alphabetically first one when several would do). No model (an empty
        route) when source and target are the same served language: the text stays as it is
        (LibreTranslate's clients rely on that, e.g. when the language they detected is already
        the target)."""
        if source == target and source in self.languages:
            return []
        source = self.resolve_source(source, fields[0])
        if source == target:  # "auto" was the target language
            return []
        direct = self.models.get((source, target))
        if direct is not None:
            return [direct]
        for mid in self.direct_targets(source):
            second = self.models.get((mid, target))
            if second is not None:
                return [self.models[(source, mid)], second]
        raise UnsupportedLanguage(
            f"{fields[1]} {excerpt(target, 40)} is not supported from "
            f"{excerpt(source, 40)}; available: {self.targets(source)}",
            field=fields[1],
        )


def bundle_dirs(models_dir: Path) -> list[Path]:
    """The bundles under models_dir, or models_dir itself when it is one bundle."""
    if (models_dir / MANIFEST).is_file():
        return [models_dir]
    return find_bundles(models_dir)


def bundle_languages(models_dir: Path | str) -> list[str]:
    """Every language the bundles under models_dir read or write, from their manifests alone
    (what Registry.languages will be once they are loaded); [] where none can be read."""
    languages: set[str] = set()
    try:
        paths = bundle_dirs(Path(models_dir))
    except OSError:
        return []  # loading will say why
    for path in paths:
        try:
            manifest = read_manifest(path)
        except (BundleError, OSError, ValueError):
            continue  # loading it will say why
        languages |= {manifest["source_lang"], manifest["target_lang"]}
    return sorted(languages)


def load_models(settings: Settings) -> list[LoadedModel]:
    """Load (and by default warm up) every bundle; raises BundleError naming the file."""
    from app.engine.translator import Translator  # onnxruntime: loaded only when serving

    dirs = bundle_dirs(Path(settings.models_dir))
    if not dirs:
        raise BundleError(f"{settings.models_dir}: no bundle found (no */{MANIFEST})")
    models = []
    for path in dirs:
        started = time.perf_counter()
        translator = Translator.from_dir(
            path, variant=settings.variant, provider=settings.provider,
            intra_threads=settings.threads, max_batch_size=settings.max_batch_size,
            workers=settings.workers, worker_processes=settings.worker_processes,
        )
        model = LoadedModel(translator, path)
        if settings.warmup:
            translator.warmup()
        log.info("loaded %s (%s-%s, %s) from %s in %.2fs", model.name, model.source, model.target,
                 translator.variant, path, time.perf_counter() - started)
        models.append(model)
    return models
