"""The use cases: translating texts (service), its scheduler (batcher), the loaded models
(registry), document jobs."""
