"""Layer pipeline: the only place that composes several stages (quantize, build); the API and CLI call it."""
