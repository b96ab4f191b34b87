"""The translation engine on ONNX Runtime: bundle loading, sessions, search, translate_batch.

Imports numpy, onnxruntime and sentencepiece only (never torch or model/).
"""

from app.engine.bundle import Bundle, BundleError, find_bundles, load_bundle
from app.engine.sessions import SessionConfig
from app.engine.translator import Translator
from app.engine.types import Result, TranslationOptions

__all__ = [
    "Bundle",
    "BundleError",
    "Result",
    "SessionConfig",
    "TranslationOptions",
    "Translator",
    "find_bundles",
    "load_bundle",
]
