"""Thin routes: v1 translate, models, LibreTranslate, health, metrics, the web page."""
