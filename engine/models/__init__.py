"""Model management: the model folder, downloads, the catalog, the offline default pair, hardware facts."""
