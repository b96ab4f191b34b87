"""Text processing around the engine: segmentation, protected spans, inline tags, language
identification."""
