"""The dashboard's templates and static files, shipped inside the package as data (no Python here)."""
