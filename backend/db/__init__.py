"""Database layer: models, engines, sessions and migrations."""
