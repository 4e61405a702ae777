"""Front ends over the engine: `python -m engine generate`, `models ...`, `bench`."""
